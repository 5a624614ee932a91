"""The roofline of every operation of a step (docs/model.md §2.8, `trainest estimate --ops`).

`step_ops(job, layout, terms)` expands what `step_terms` composed (`StepTerms.parts`) into one row
per operation per step on one device of the slowest stage: each op of a layer pass (× layers ×
micro-batches), the logits and the loss, the optimizer, each collective, and the offload copies.
Every row carries its FLOPs and bytes, its arithmetic intensity (FLOP/B), the ridge point of the
device for it (its achievable FLOP/s over the achievable memory bandwidth: an op is compute-bound
exactly when its intensity reaches the ridge), what bounds it, its time, and what it adds to the
step. The rows' `exposed_s` plus the pipeline bubble and the launch overhead (two rows of their own)
add up to the step time (`test_ops_add_up_to_the_step`). Floats only (one estimate).

Sources: Williams, Waterman & Patterson 2009 (the roofline); scaling-book "Rooflines".
"""

from __future__ import annotations

from trainest.layout import Job, Layout
from trainest.record import NamedTuple
from trainest.step.collectives import Tiers, in_domain, job_tiers
from trainest.step.compose import StepParts, StepTerms
from trainest.step.kernels import CE_TP_COLLECTIVES
from trainest.step.moe import A2A_PER_LAYER_PASS, dispatch_bytes
from trainest.step.offload import host_rates
from trainest.step.rates import local_shape, rates_of
from trainest.step.roofline import Op
from trainest.step.schedule import stage_params

LAYER, LOGITS, OPTIMIZER, COLLECTIVE, OFFLOAD, SCHEDULE = "layer", "logits", "optimizer", "collective", "offload", \
    "schedule"                     # the part of the step a row belongs to


class StepOp(NamedTuple):
    """One operation of the step on one device, per step [FLOP, B, s]."""

    name: str
    part: str                   # layer | logits | optimizer | collective | offload | schedule
    phase: str                  # forward | backward | recompute | step
    runs: float                 # times it runs per step (layers × micro-batches for a layer op)
    flops: float
    bytes: float                # device memory traffic; a collective: the buffers it sends; offload: over the link
    intensity: float | None     # FLOP/B (None without FLOPs)
    ridge: float | None         # the op's achievable FLOP/s / achievable bytes/s [FLOP/B]
    bound: str                  # compute | memory | network: scale-up | network: scale-out | host link | host CPU | -
    time_s: float               # its own duration per step
    exposed_s: float            # what it adds to the step


def _row(op: Op, part: str, count: float, exposed: float | None = None) -> StepOp:
    """A layer or logits op run `count` times per step."""
    flops, moved = float(op.flops) * count, float(op.bytes) * count
    c, m = float(op.compute_s), float(op.memory_s)
    ridge = (flops / c) / (moved / m) if flops > 0 and moved > 0 and c > 0 and m > 0 else None
    time = max(c, m) * count
    return StepOp(name=op.name, part=part, phase=op.phase, runs=count, flops=flops, bytes=moved,
                  intensity=flops / moved if flops > 0 and moved > 0 else None, ridge=ridge,
                  bound="compute" if c >= m and flops > 0 else "memory", time_s=time,
                  exposed_s=time if exposed is None else exposed)


def layer_rows(p: StepParts) -> list[StepOp]:
    """Every op of a layer pass, × the slowest stage's layers × micro-batches; recomputed groups
    where their mode holds."""
    count = float(p.layers) * float(p.micro_batches)
    ops = list(p.layer.ops.forward) + list(p.layer.ops.backward) if p.layer.ops else []
    for group in p.layer.ops.recomputed if p.layer.ops else []:
        if float(group.mask):
            ops += [o._replace(phase="recompute") for o in group.ops]
    return [_row(o, LAYER, count) for o in ops if float(o.time_s) > 0]


def logits_rows(p: StepParts) -> list[StepOp]:
    """The logits GEMM, its gradients and the loss, per micro-batch, on the step's path when the
    last stage is the slowest (else inside the other stages' time: shown with 0 exposed)."""
    m, on_path = float(p.micro_batches), float(p.last_is_max) > 0
    rows = [_row(o, LOGITS, m) for o in p.logits if float(o.time_s) > 0]
    return rows if on_path else [r._replace(exposed_s=0.0) for r in rows]


def _group_tier(size: float, stride: float, tiers: Tiers) -> str:
    """The tier a group's collective runs on: scale-up when every such group lies in one domain."""
    return "network: scale-up" if in_domain(size, stride, tiers) else "network: scale-out"


def _collective(name: str, count: float, buffer: float, total: float, exposed: float, tier: str) -> StepOp:
    return StepOp(name=name, part=COLLECTIVE, phase="step", runs=count, flops=0.0, bytes=buffer * count,
                  intensity=None, ridge=None, bound=tier, time_s=total, exposed_s=exposed)


def collective_rows(job: Job, layout: Layout, p: StepParts) -> list[StepOp]:
    """Each kind of collective with its buffers per step (S per collective × how many), its time
    and what shows (docs/model.md §4)."""
    x = local_shape(job, layout)
    tiers = job_tiers(job)
    tp, cp, pp, dp, m, n = (float(v) for v in (layout.tp, layout.cp, layout.pp, layout.dp, p.micro_batches, p.layers))
    per_layer = 4.0 + 2.0 * float(layout.full) + float(layout.op)
    act = job.element_bytes * float(x.tokens) * job.model.hidden
    trained, w, g = float(p.trained_params), job.weight_bytes, job.grad_bytes
    stage_weights = float(stage_params(job.model, layout.pp, layout.vpp, layout.split)) / tp
    dp_tier = _group_tier(dp * cp, tp, tiers)
    moe_share = 0.0 if job.model.moe is None else job.model.moe_layers / job.model.layers
    ep_calls = moe_share * A2A_PER_LAYER_PASS * (2.0 + float(job.moe_rerun(layout)))
    ep_buffer = 0.0 if job.model.moe is None else float(dispatch_bytes(job, layout, x))
    rows = [
        _collective("tp.all_reduce", per_layer * n * m, act, float(p.tp_total_s) * n * m,
                    float(p.tp_exposed_s) * n * m, _group_tier(tp, 1.0, tiers)),
        _collective("cp.kv_ring", (cp - 1.0) * n * m, 2.0 * job.element_bytes * float(x.tokens) * float(x.kv_local),
                    float(p.cp.total_s) * n * m, float(p.cp.exposed_s) * n * m, _group_tier(cp, tp, tiers)),
        _collective("pp.send_recv", 2.0 * float(layout.vpp) * m, act / tp, float(p.pp_s) * m, float(p.pp_s) * m,
                    _group_tier(pp, tp * cp * dp, tiers)),
        # the layers' all-to-alls and, on the slowest stage, the MTP modules' (their exposed time)
        _collective("ep.all_to_all", ep_calls * n * m, ep_buffer, (float(p.ep_total_s) * n + float(p.mtp_ep_s)) * m,
                    (float(p.ep_exposed_s) * n + float(p.mtp_ep_s)) * m,
                    _group_tier(float(layout.ep), float(layout.etp), tiers)),
        _collective("zero3.gather_reduce", m, 2.0 * stage_weights * w + trained * g, float(p.z3_s) * m,
                    float(p.z3_exposed_s) * m, dp_tier),
        _collective("dp.grad_reduce", 1.0, trained * g, float(p.dp.reduce_s), float(p.dp_exposed.reduce_s), dp_tier),
        _collective("dp.weight_gather", 1.0, trained * w, float(p.dp.gather_s), float(p.dp_exposed.gather_s), dp_tier),
        _collective("dp.replica_all_reduce", 1.0, trained * g, float(p.dp.replica_s), float(p.dp_exposed.replica_s),
                    "network: scale-out"),
        _collective("zero2.grad_reduce_scatter", float(layout.z2) * (m - 1.0), trained * g,
                    float(layout.z2) * (m - 1.0) * float(p.dp.zero2_rs_s), float(p.dp_exposed.zero2_s), dp_tier),
        # the embedding's and the loss's all-reduces (docs/model.md §2.9), and the MTP modules' TP ones, on the
        # slowest stage
        _collective("tp.embedding_loss", m * (2.0 + CE_TP_COLLECTIVES), act, float(p.head_tp_s) * m,
                    float(p.head_tp_s) * m, _group_tier(tp, 1.0, tiers)),
        _collective("pp.tied_embedding", 1.0, job.model.vocab * job.model.hidden / tp * g, float(p.tied_s),
                    float(p.tied_s), _group_tier(2.0, tp * cp * dp * pp / 2.0, tiers)),
    ]
    return [r for r in rows if r.time_s > 0]


def offload_rows(job: Job, p: StepParts) -> list[StepOp]:
    """The host-link copies (their bytes at the achievable link rate) and the CPU's Adam
    (step/offload.py); the step's tail shows the slower of the CPU step and the copy back."""
    off = p.offload
    if off is None:
        return []
    link, m = host_rates(job.hardware).link_bytes_per_s, float(p.micro_batches)
    adam, up = float(off.cpu_adam_s), float(off.weights_up_s)

    def copy(name: str, phase: str, runs: float, time: float, exposed: float) -> StepOp:
        return StepOp(name, OFFLOAD, phase, runs, 0.0, time * link, None, None, "host link", time, exposed)

    rows = [copy("offload.grads_down", "backward", m, float(off.grads_down_s), float(off.grads_exposed_s)),
            copy("offload.weights_fetch", "step", m, float(off.fetch_s), float(off.fetch_exposed_s)),
            copy("offload.activations", "step", m, float(off.activations_s), float(off.activations_exposed_s)),
            StepOp("offload.cpu_adam", OFFLOAD, "step", 1.0, 0.0, 0.0, None, None, "host CPU", adam,
                   adam if adam >= up else 0.0),
            copy("offload.weights_up", "step", 1.0, up, up if up > adam else 0.0)]
    return [r for r in rows if r.time_s > 0]


def step_ops(job: Job, layout: Layout, terms: StepTerms) -> list[StepOp]:
    """Every operation of the step (module docstring), in the order they run: the layer's, the
    logits', the optimizer, the collectives, the offload copies, then the bubble and the overhead."""
    p = terms.parts
    if p is None:
        raise ValueError("step_ops needs the StepTerms of step_terms (with its parts)")
    rows = layer_rows(p) + logits_rows(p)
    optimizer = float(terms.optimizer_s)
    if optimizer > 0:
        moved = optimizer * float(rates_of(job, layout).memory_bytes_per_s)
        rows.append(StepOp("optimizer.adam", OPTIMIZER, "step", 1.0, 0.0, moved, None, None, "memory", optimizer,
                           optimizer))
    rows += collective_rows(job, layout, p) + offload_rows(job, p)
    for name, value in (("pipeline.bubble", float(terms.bubble_s)), ("launch.overhead", float(terms.overhead_s))):
        if value > 0:
            rows.append(StepOp(name, SCHEDULE, "step", 1.0, 0.0, 0.0, None, None, "-", value, value))
    return rows


class Roofline(NamedTuple):
    """The device's roofline for a step: its memory, and the ridge point of each precision its ops
    use (peak FLOP/s over peak bandwidth, and the achievable ridge of a large GEMM)."""

    memory_kind: str
    memory_bytes_per_s: float                 # peak [B/s]
    ridge_peak: dict[str, float]              # precision -> peak FLOP/s / peak B/s [FLOP/B]


def roofline_of(job: Job) -> Roofline:
    """The ridge points of the GEMM precision and of 16-bit attention on this device."""
    hw = job.hardware
    kinds = {job.precision: hw.peak(job.precision), "16-bit (attention)": hw.peak_16bit_flops_per_s}
    kind = (hw.memory_kind or "device memory") + (" unified" if hw.memory_unified else "")
    return Roofline(memory_kind=kind, memory_bytes_per_s=hw.memory_bytes_per_s,
                    ridge_peak={k: v / hw.memory_bytes_per_s for k, v in kinds.items()})
