"""Overlap (docs/model.md §4.6–4.8): which computation hides which collective, what shows, the
slowdown hidden traffic causes (contention κ), and the upper bound with nothing overlapped."""

from __future__ import annotations

from trainest import xp
from trainest.layout import Layout, Num
from trainest.record import NamedTuple
from trainest.step.layer import LayerPass
from trainest.step.traffic import CpRing, DpTraffic


def overlapped_exposed_s(comm_s: Num, window_s: Num, last_bucket_s: Num, contention: Num, idle_s: Num = 0.0) -> Num:
    """The time a collective overlapped with computation adds to the step [s]: what exceeds its
    window, at least the last bucket (nothing left to hide it), and at least κ × the hidden part that
    runs beside computation (its kernels share the SMs and HBM with it): of a window of which `idle_s`
    the device spends waiting for the host (a host-bound pass: nothing runs there to contend with),
    what the idle time cannot carry, the traffic's kernels taking the SMs the computation leaves idle first:
    max(comm − window, last bucket, κ·max(min(comm, window) − idle, 0))."""
    idle = xp.maximum(idle_s, 0.0)
    return xp.maximum(xp.maximum(comm_s - window_s, last_bucket_s),
                      contention * xp.maximum(xp.minimum(comm_s, window_s) - idle, 0.0))


def backward_host_share(host_pass: tuple[Num, Num]) -> Num:
    """The backward's share of a layer's wait for the host: its host time over the two passes' (kernels.py),
    1/2 when neither launches anything."""
    host_fwd, host_bwd = host_pass
    host_total = host_fwd + host_bwd
    return xp.where(host_total > 0.0, host_bwd / xp.where(host_total > 0.0, host_total, 1.0), 0.5)


def dp_windows_s(layout: Layout, lp: LayerPass, cp: CpRing, stage_layers: Num, z3_comm_s: Num,
                 stage_work_s: Num, host_pass: tuple[Num, Num] = (0.0, 0.0), host_wait_s: Num = 0.0,
                 gather_overlap: bool = True) -> tuple[Num, Num]:
    """(backward window, forward window) [s]: the last micro-batch's backward and the first one's
    forward on the stage, less the attention time that hides the CP ring and the computation
    already hiding ZeRO-3's traffic (2 of its 3 collectives per layer in the backward, 1 forward);
    both 0 when the framework does not overlap the data-parallel reduction (`Layout.dp_overlap`).
    A pass lasts its device time (with its kernels' floors) plus its share of the layer's wait for the
    host (`host_wait_s`, the smooth maximum's excess of compose.layer_time_s; shared by `host_pass`, each
    pass's own wait, compose.wait_shares): a host-bound backward lasts longer, and hides more, by what it adds
    to the step; a pass whose kernels sit at their floors lasts that long. `gather_overlap` false (the
    framework gathers the updated weights at the end of its optimizer step: DeepSpeed ZeRO-1/2,
    `Framework.dp_gather_overlap`): no forward window."""
    z3_hidden = layout.z3 * xp.minimum(z3_comm_s, stage_work_s)
    share_bwd = backward_host_share(host_pass)
    bwd_s = lp.bwd_c + lp.bwd_m + lp.bwd_floor_s + host_wait_s * share_bwd
    fwd_s = lp.fwd_c + lp.fwd_m + lp.fwd_floor_s + host_wait_s * (1.0 - share_bwd)
    backward = xp.maximum(stage_layers * (bwd_s - cp.hiding_bwd_s) - z3_hidden * (2.0 / 3.0), 0.0)
    forward = xp.maximum(stage_layers * (fwd_s - cp.hiding_fwd_s / (1.0 + layout.full + layout.selective))
                         - z3_hidden * (1.0 / 3.0), 0.0)
    # without overlap (no gradient bucketing: `parallel.dp_overlap` false) nothing hides the reduction
    return backward * layout.dp_overlap, forward * layout.dp_overlap * (1.0 if gather_overlap else 0.0)


def pass_waits_s(stage_layers: Num, host_wait_s: Num, host_pass: tuple[Num, Num]) -> tuple[Num, Num]:
    """(forward, backward) [s]: the stage's wait for the host in each pass, the layer's wait `host_wait_s`
    over `stage_layers` layers shared by `host_pass` (backward_host_share)."""
    share_bwd = backward_host_share(host_pass)
    return stage_layers * host_wait_s * (1.0 - share_bwd), stage_layers * host_wait_s * share_bwd


def dp_window_idle_s(layout: Layout, stage_layers: Num, host_pass: tuple[Num, Num] = (0.0, 0.0),
                     host_wait_s: Num = 0.0, gather_overlap: bool = True) -> tuple[Num, Num]:
    """(backward, forward) [s]: how much of `dp_windows_s`' windows the device spends waiting for the host
    (pass_waits_s), where a hidden collective contends with nothing (overlapped_exposed_s)."""
    forward, backward = pass_waits_s(stage_layers, host_wait_s, host_pass)
    on = layout.dp_overlap
    return backward * on, forward * on * (1.0 if gather_overlap else 0.0)


class DpExposed(NamedTuple):
    """What each data-parallel collective adds to the step [s]."""

    replica_s: Num
    reduce_s: Num
    gather_s: Num
    zero2_s: Num


def dp_exposed_parts(layout: Layout, dp: DpTraffic, windows: tuple[Num, Num], contention: Num,
                     micro_batches: Num, idle: tuple[Num, Num] = (0.0, 0.0)) -> DpExposed:
    """Exposed data-parallel time per step, per collective [s]: the HSDP replica all-reduce in full
    (it crosses the slow tier once per step, after the shard group's reduce-scatter); the gradient
    reduction behind the last backward and the ZeRO-1/2 gather behind the first forward, bucket by
    bucket: each but its last (first) bucket, one of its n_b calls (DpTraffic.*_bucket_s: the bucket
    whose gradients are ready only when the backward ends, whose weights the first layer waits for);
    ZeRO-2's reduce-scatter of every other micro-batch behind its own backward; `idle`: the windows' time
    waiting for the host (dp_window_idle_s), which hides without contention."""
    backward, forward = windows
    idle_bwd, idle_fwd = idle
    return DpExposed(
        replica_s=dp.replica_s,
        reduce_s=overlapped_exposed_s(dp.reduce_s, backward, dp.reduce_bucket_s, contention, idle_bwd),
        gather_s=overlapped_exposed_s(dp.gather_s, forward, dp.gather_bucket_s, contention, idle_fwd),
        zero2_s=layout.z2 * (micro_batches - 1.0) * overlapped_exposed_s(dp.zero2_rs_s, backward,
                                                                        dp.zero2_bucket_s, contention, idle_bwd))


def serial_dp_s(layout: Layout, dp: DpTraffic, micro_batches: Num) -> Num:
    """Every data-parallel collective of the step in full (the no-overlap bound) [s]."""
    return dp.replica_s + dp.reduce_s + dp.gather_s + layout.z2 * (micro_batches - 1.0) * dp.zero2_rs_s
