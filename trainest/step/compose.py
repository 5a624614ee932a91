"""One training step composed from its parts (docs/model.md §5.3): the layer pass on the roofline,
the traffic of each parallelism, the slowest stage, the bubble, the data-parallel tail and the
optimizer; the no-overlap upper bound beside it. `step_terms` runs on floats (one estimate) or on
numpy arrays (the plan search, calibration)."""

from __future__ import annotations

from trainest import xp
from trainest.frameworks import FRAMEWORKS
from trainest.hardware import Efficiency
from trainest.layout import Job, Layout, Num
from trainest.record import NamedTuple
from trainest.step.collectives import Tiers, job_tiers, tied_embedding_s
from trainest.step.finetune import finetune_flops_delta, trainable_expert_params_local, trainable_params_local
from trainest.step.flops import model_flops_per_step, mtp_flops_per_step, recompute_flops_per_step
from trainest.step.hybrid import BlockPass, block_passes, mix_blocks
from trainest.step.kernels import Head, head_parts, host_layer_s, host_pass_s, host_wait_s, micro_batch_host_s
from trainest.step.layer import LayerPass, attention_block, layer_ops, layer_pass, logits_ops, mix_passes
from trainest.step.moe import dispatch_sync_segment_s, expert_host_layer_s, expert_host_pass_s, moe_layer
from trainest.step.mtp import MtpPass, mtp_pass
from trainest.step.offload import Offload, offload_state, offload_terms
from trainest.step.optimizer import job_adam_bytes, optimizer_s
from trainest.step.overlap import (
    DpExposed,
    backward_host_share,
    dp_exposed_parts,
    dp_window_idle_s,
    dp_windows_s,
    overlapped_exposed_s,
    pass_waits_s,
    serial_dp_s,
)
from trainest.step.rates import LocalShape, Rates, local_shape, rates_of
from trainest.step.roofline import Op, bound_sums
from trainest.step.schedule import bubble_s, dualpipe_copies, slowest_stage, stage_dense_params, stage_expert_params
from trainest.step.traffic import (
    CpRing,
    DpTraffic,
    Zero3Traffic,
    add_dp_traffic,
    cp_ring,
    dp_traffic,
    expert_dp_groups,
    pp_p2p_s,
    tp_layer_s,
    zero3_s,
)


class StepParts(NamedTuple):
    """What the step was composed from (per micro-batch on the slowest stage unless said), kept so
    the ops table (step/ops.py) reports the step's own numbers."""

    layer: LayerPass             # one layer pass and its named ops
    logits: list[Op]             # the logits and the loss (last stage)
    layers: Num                  # layers of the slowest stage
    last_is_max: Num             # 1 where the last stage (with the logits) is the slowest
    micro_batches: Num
    tp_total_s: Num              # TP collectives of one layer pass, all / exposed
    tp_exposed_s: Num
    ep_total_s: Num              # expert-parallel all-to-alls of the mean layer pass, all / exposed (MoE)
    ep_exposed_s: Num
    cp: CpRing                   # the CP ring of one layer pass
    pp_s: Num                    # PP send/recv of one micro-batch
    z3_s: Num                    # ZeRO-3 traffic of one micro-batch, all / exposed
    z3_exposed_s: Num
    dp: DpTraffic                # data-parallel collectives of the step, and what each adds
    dp_exposed: DpExposed
    trained_params: Num          # parameters this device trains (the optimizer's, before its ZeRO shard)
    offload: Offload | None
    head_tp_s: Num = 0.0         # TP collectives of the embedding and the loss (and the MTP modules') on the slowest
    #                              stage, one micro-batch
    mtp_ep_s: Num = 0.0          # the MTP modules' expert all-to-alls on the slowest stage, one micro-batch
    tied_s: Num = 0.0            # the tied-embedding gradient all-reduce of the step
    mtp: MtpPass | None = None   # the MTP modules on the last stage (step/mtp.py: mtp_ops)


class StepTerms(NamedTuple):
    """Per-step times [s] (floats or arrays). time_s = compute_s + memory_s + communication_s
    + bubble_s + overhead_s (conservation)."""

    time_s: Num
    compute_s: Num
    memory_s: Num
    communication_s: Num
    bubble_s: Num
    overhead_s: Num
    tp_comm_s: Num
    cp_comm_s: Num
    pp_comm_s: Num
    dp_comm_s: Num
    optimizer_s: Num
    micro_batch_s: Num           # one micro-batch, forward + backward, on the slowest stage
    no_overlap_time_s: Num       # the same step with every collective exposed in full (upper bound)
    model_flops: Num             # per step, all devices (fwd + bwd, no recompute)
    hardware_flops: Num          # per step, all devices, including recomputation
    host_s: Num = 0.0            # the host's time to launch the slowest stage's layers (all micro-batches)
    host_wait_s: Num = 0.0       # the part of overhead_s the device waits for the host (host-bound layers)
    layers_host_wait_s: Num = 0.0   # the part of host_wait_s inside the layers
    host_bound: Num = 0.0        # 1 where a layer's host time exceeds its device time (the layers are host-bound)
    floor_s: Num = 0.0           # the part of overhead_s the kernels' floors add
    offload_s: Num = 0.0         # exposed host-side work: host-link copies and the CPU's Adam (step/offload.py)
    ep_comm_s: Num = 0.0         # exposed expert-parallel all-to-alls (MoE), part of communication_s
    parts: StepParts | None = None   # what the terms were composed from (the ops table)


class MeanLayer(NamedTuple):
    """The mean layer of the model on one device: its pass and its TP and EP traffic [s] (all and
    exposed). A dense model's only layer kind; a MoE model's L_d dense and L_m MoE layers weighted
    L_d/L and L_m/L (docs/model.md §15.4)."""

    lp: LayerPass
    tp_total_s: Num
    tp_exposed_s: Num
    ep_total_s: Num
    ep_exposed_s: Num
    # each kind's own pass, by name (dense, moe; a hybrid's mamba, attention, moe, mlp), for what runs
    # those kinds again (the MTP modules, step/mtp.py); the plan search drops them (LayerTerms.bare)
    parts: tuple[tuple[str, BlockPass], ...] = ()

    @property
    def passes(self) -> tuple[LayerPass, Num, Num, Num, Num]:
        """(pass, TP all, TP exposed, EP all, EP exposed): what the step composes."""
        return self.lp, self.tp_total_s, self.tp_exposed_s, self.ep_total_s, self.ep_exposed_s


def mean_layer(job: Job, layout: Layout, rates: Rates, shape: LocalShape, tiers: Tiers) -> MeanLayer:
    """One layer pass, its TP traffic and (MoE) its expert-parallel traffic, as the mean over the
    model's layers."""
    model = job.model
    if model.hybrid is not None:     # a hybrid model's mean block (step/hybrid.py)
        blocks = block_passes(job, layout, rates, shape, tiers)
        return MeanLayer(*mix_blocks(blocks), parts=tuple((name, bp) for name, _, bp in blocks))
    if model.moe is None:
        lp = layer_pass(job, layout, rates, shape)
        tp_total, tp_exposed = tp_layer_s(job, layout, shape, tiers, lp.linear_s)
        return MeanLayer(lp, tp_total, tp_exposed, 0.0, 0.0, parts=(("dense", BlockPass(lp, tp_total, tp_exposed)),))
    # both kinds of layer share the attention core: computed once
    attention = attention_block(job, layout, rates, shape)
    m = moe_layer(job, layout, rates, shape, tiers, attention)
    moe_part = ("moe", BlockPass(m.lp, m.tp_total_s, m.tp_exposed_s, m.ep_total_s, m.ep_exposed_s))
    w_dense, w_moe = model.dense_layers_count / model.layers, model.moe_layers / model.layers
    if w_dense == 0.0:
        return MeanLayer(m.lp, m.tp_total_s, m.tp_exposed_s, m.ep_total_s, m.ep_exposed_s, parts=(moe_part,))
    lp = layer_pass(job, layout, rates, shape, layer_ops(job, layout, rates, shape, attention=attention))
    tp_total, tp_exposed = tp_layer_s(job, layout, shape, tiers, lp.linear_s)
    return MeanLayer(mix_passes(lp, m.lp, w_dense, w_moe), w_dense * tp_total + w_moe * m.tp_total_s,
                     w_dense * tp_exposed + w_moe * m.tp_exposed_s, w_moe * m.ep_total_s, w_moe * m.ep_exposed_s,
                     parts=(("dense", BlockPass(lp, tp_total, tp_exposed)), moe_part))


# The layout knobs the layer terms read, besides the job-wide tp_overlap, moe_overlap and pipeline_schedule (the
# same for every plan of a search): plans that agree on these share their layer terms, and the plan search
# computes them once per distinct combination (tests/test_search.py checks that nothing else is read).
LAYER_KNOBS = ("tp", "cp", "micro_batch", "sp", "recompute", "finetune", "ep", "etp")


class LayerTerms(NamedTuple):
    """What one mean layer pass costs on one device, per micro-batch, with what comes with it: the
    layer and its TP and EP traffic, its CP ring, the logits on the last stage (ops and bound sums)
    and the host's launch time of the layer. They depend on the layout only through LAYER_KNOBS."""

    mean: MeanLayer
    cp: CpRing
    logits: list[Op]
    logits_c: Num
    logits_m: Num
    host_layer_s: Num
    mtp: MtpPass | None = None   # multi-token prediction on the last stage (step/mtp.py)
    # the (host, device) seconds after a host-synchronising MoE dispatch (moe.dispatch_sync_segment_s)
    sync_host_s: Num = 0.0
    sync_device_s: Num = 0.0

    def bare(self) -> LayerTerms:
        """The same terms without the named ops (those are for one estimate's ops table; the plan
        search's arrays need only the sums)."""
        return self._replace(mean=self.mean._replace(lp=self.mean.lp._replace(ops=None), parts=()), logits=[])


def layer_terms(job: Job, layout: Layout) -> LayerTerms:
    """The mean layer pass with its TP and EP traffic, the CP ring, the logits and the layer's host
    time (see LayerTerms)."""
    rates, shape = rates_of(job, layout), local_shape(job, layout)
    tiers = job_tiers(job)
    mean = mean_layer(job, layout, rates, shape, tiers)
    logits = logits_ops(job, layout, rates, shape)
    logits_c, logits_m = bound_sums(logits)
    cp = cp_ring(job, layout, shape, tiers, mean.lp, job.hardware.efficiency.overlap_contention)
    return LayerTerms(mean=mean, cp=cp,
                      logits=logits, logits_c=logits_c,
                      logits_m=logits_m,
                      host_layer_s=host_layer_s(job, layout) + expert_host_layer_s(job, layout),
                      mtp=mtp_pass(job, layout, rates, shape, tiers, dict(mean.parts)),
                      **dict(zip(("sync_host_s", "sync_device_s"), dispatch_sync_segment_s(job, layout, rates, shape),
                                 strict=True)))


class MtpTerms(NamedTuple):
    """The MTP modules of one micro-batch on the last stage [s]: compute- and memory-bound seconds, the
    overhead (floors, host waits), the exposed collectives (its blocks' and its loss's TP ones, its
    blocks' expert all-to-alls) and all of them, the host's launches."""

    compute_s: Num = 0.0
    memory_s: Num = 0.0
    overhead_s: Num = 0.0
    tp_comm_s: Num = 0.0
    ep_comm_s: Num = 0.0
    total_comm_s: Num = 0.0
    host_s: Num = 0.0

    @property
    def comm_s(self) -> Num:
        """The exposed collectives, TP and EP."""
        return self.tp_comm_s + self.ep_comm_s

    @property
    def device_s(self) -> Num:
        return self.compute_s + self.memory_s + self.overhead_s + self.comm_s


def mtp_terms(mtp: MtpPass | None, host_layer: Num, logits_c: Num, logits_m: Num, loss_tp_s: Num,
              loss_host_excess_s: Num) -> MtpTerms:
    """Each of the `depth` MTP modules, one micro-batch (docs/model.md §15.10): its blocks timed as the
    layers are (`layer_time_s`, against their share of the mean layer's host time), its projection and
    norms, and the output head and loss again (logits, their TP collectives and host)."""
    if mtp is None:
        return MtpTerms()
    host = mtp.host_layers * host_layer
    overhead = layer_time_s(mtp.lp, host, mtp.tp_exposed_s + mtp.ep_exposed_s)[1]
    d = float(mtp.depth)
    return MtpTerms(compute_s=d * (mtp.lp.compute_s + mtp.extra_c + logits_c),
                    memory_s=d * (mtp.lp.memory_s + mtp.extra_m + logits_m),
                    overhead_s=d * (overhead + loss_host_excess_s), tp_comm_s=d * (mtp.tp_exposed_s + loss_tp_s),
                    ep_comm_s=d * mtp.ep_exposed_s,
                    total_comm_s=d * (mtp.tp_total_s + mtp.ep_total_s + loss_tp_s), host_s=d * host)


class OffPath(NamedTuple):
    """What one micro-batch on the slowest stage spends outside its layers [s]: the overhead (the head's
    host waits, the MTP modules', the framework's per-micro-batch host work), the TP collectives (the
    embedding's and the loss's, the MTP modules' blocks' and loss's) and the MTP blocks' expert all-to-alls."""

    overhead_s: Num
    tp_s: Num
    ep_s: Num


def off_layer_path(job: Job, layout: Layout, head: Head, mtp: MtpTerms, last_is_max: Num) -> OffPath:
    """`OffPath` of the slowest stage: the head's part on it (`Head.on_path`), and where the last stage is
    the slowest its MTP modules' overhead, TP collectives (booked as TP) and all-to-alls (booked as EP)."""
    head_o, head_tp = head.on_path(layout.pp, last_is_max)
    return OffPath(overhead_s=head_o + last_is_max * mtp.overhead_s + micro_batch_host_s(job),
                   tp_s=head_tp + last_is_max * mtp.tp_comm_s, ep_s=last_is_max * mtp.ep_comm_s)


def data_parallel_traffic(job: Job, layout: Layout, tiers: Tiers, trained_local: Num, expert_local: Num) -> DpTraffic:
    """The step's data-parallel collectives: the non-expert parameters' over the d·c group, a MoE
    model's routed experts' over the expert data-parallel group."""
    dp = dp_traffic(job, layout, tiers, trained_local)
    if job.model.moe is None:
        return dp
    return add_dp_traffic(dp, dp_traffic(job, layout, tiers, expert_local, expert_dp_groups(layout)))


# The layout knobs the step's data-parallel collectives read, besides the job-wide dp_collectives and
# dp_shard and the pipeline split (each search call has one): the plan search computes them once per
# distinct combination, as the layer terms (tests/test_search.py checks that nothing else is read).
DP_KNOBS = ("tp", "pp", "cp", "dp", "vpp", "zero", "finetune", "ep", "etp")


def _dp_tiers(tiers: Tiers, layout: Layout) -> Tiers:
    """The data-parallel group's rings use every NIC of a node (hierarchical) or one per rank (flat)."""
    return tiers if layout.dp_collectives == "hierarchical" else tiers._replace(aggregate_nics=False)


def _stage_local_params(job: Job, layout: Layout) -> tuple[Num, Num]:
    """(non-expert, routed expert) parameters of the heaviest stage on one device (DualPipe: two stages'
    copies, whose gradients and optimizer steps the device carries too, docs/model.md §5.4)."""
    model = job.model
    copies = dualpipe_copies(layout)
    return (copies * stage_dense_params(model, layout.pp, layout.vpp, layout.split) / layout.tp,
            copies * stage_expert_params(model, layout.pp, layout.vpp, layout.split) / layout.expert_group)


def step_dp_traffic(job: Job, layout: Layout) -> DpTraffic:
    """The step's data-parallel collectives (`data_parallel_traffic`) of what this device trains of
    its stage; they depend on the layout only through DP_KNOBS and the pipeline split."""
    params_local, expert_local = _stage_local_params(job, layout)
    return data_parallel_traffic(job, layout, _dp_tiers(job_tiers(job), layout),
                                 trainable_params_local(job, layout, params_local),
                                 trainable_expert_params_local(job, layout, expert_local))


def offload_parts(job: Job, layout: Layout, lp: LayerPass, layers: Num,
                  optimizer: Num) -> tuple[Offload | None, Num, Num, Num]:
    """(Offload or None, its exposed seconds, its seconds with nothing overlapped, the device's optimizer
    seconds left): ZeRO-Offload / ZeRO-Infinity / FSDP CPU offload (step/offload.py); without offload
    nothing, and the optimizer stays on the device."""
    if xp.off(layout.offload):
        return None, 0.0, 0.0, optimizer
    off = offload_terms(job, layout, offload_state(job, layout), layers, layers * (lp.fwd_c + lp.fwd_m),
                        layers * (lp.bwd_c + lp.bwd_m))
    serial = off.grads_down_s + off.fetch_s + off.activations_s + off.cpu_adam_s + off.weights_up_s
    return off, off.exposed_s, serial, optimizer * (1.0 - layout.offload_optimizer)


def layer_time_s(lp: LayerPass, host_layer_s: Num, comm_s: Num,
                 sync: tuple[Num, Num] = (0.0, 0.0)) -> tuple[Num, Num, Num, Num]:
    """(time, overhead, host wait, host-bound mask) of one layer and micro-batch whose device runs its
    pass and `comm_s` of collectives [s]: the smooth maximum of its device and host times
    (kernels.host_wait_s, docs/model.md §2.9), taken on each side of a host synchronisation where `sync`
    gives the (host, device) seconds after it (a MoE dispatcher that reads its token counts, §15.11: the
    host cannot run ahead across it); the overhead is the pass's own, its floors and the wait."""
    device_s = lp.compute_s + lp.memory_s + lp.overhead_s + lp.floor_s + comm_s
    sync_host, sync_device = sync
    wait = (host_wait_s(xp.maximum(host_layer_s - sync_host, 0.0), xp.maximum(device_s - sync_device, 0.0))
            + host_wait_s(sync_host, sync_device))
    return device_s + wait, lp.overhead_s + lp.floor_s + wait, wait, xp.mask(host_layer_s > device_s)


def stage_pp_s(job: Job, layout: Layout, shape: LocalShape, tiers: Tiers, work_s: Num) -> Num:
    """A stage's pipeline sends of one micro-batch [s] (traffic.pp_p2p_s), exposed; DualPipe overlaps them
    with another micro-batch's computation (`work_s`: the stage's), at the contention share (§5.4)."""
    stage_pp = pp_p2p_s(job, layout, shape, tiers)
    if not layout.dualpipe:
        return stage_pp
    return overlapped_exposed_s(stage_pp, work_s, 0.0, job.hardware.efficiency.overlap_contention)


def zero3_pass_exposed_s(z3: Zero3Traffic, forward_work_s: Num, stage_work_s: Num, contention: Num,
                         idle: tuple[Num, Num] = (0.0, 0.0)) -> Num:
    """ZeRO-3 traffic left exposed by one micro-batch's two passes [s] (docs/model.md §4.5): the forward's
    all-gathers hide behind the forward only, the backward's all-gathers and reduce-scatters behind the
    backward (with its recomputation) only; each pass at least its waited-for layer (the forward's
    first gather; the backward's gather and last reduce-scatter) and its contention share
    (overlapped_exposed_s). A pass whose traffic outlasts it cannot borrow the other pass's slack. `idle`:
    the (forward, backward) time of that work spent waiting for the host, which hides without contention."""
    forward_work = xp.minimum(xp.maximum(forward_work_s, 0.0), xp.maximum(stage_work_s, 0.0))
    backward_work = xp.maximum(stage_work_s - forward_work, 0.0)
    idle_fwd, idle_bwd = idle
    forward = overlapped_exposed_s(z3.forward_s, forward_work, z3.layer_gather_s, contention, idle_fwd)
    backward = overlapped_exposed_s(z3.total_s - z3.forward_s, backward_work, z3.layer_s - z3.layer_gather_s,
                                    contention, idle_bwd)
    return forward + backward


def step_host_pass_s(job: Job, layout: Layout) -> tuple[Num, Num]:
    """(forward, backward) host time of one layer pass [s] (kernels.host_pass_s), a MoE layer's experts'
    launches included (expert_host_pass_s): what shares a layer's wait for the host between the passes."""
    (host_fwd, host_bwd), (expert_fwd, expert_bwd) = host_pass_s(job, layout), expert_host_pass_s(job, layout)
    return host_fwd + expert_fwd, host_bwd + expert_bwd


def wait_shares(lp: LayerPass, host_pass: tuple[Num, Num]) -> tuple[Num, Num]:
    """What shares a layer's wait for the host between its (forward, backward) passes: each pass's own wait,
    kernels.host_wait_s of its host and device times (its kernels' floors included), so that a host-bound pass
    lasts about its host time whatever its device does, as the layer does (layer_time_s); where neither pass
    waits, their host times `host_pass`."""
    host_fwd, host_bwd = host_pass
    wait_fwd = host_wait_s(host_fwd, lp.fwd_c + lp.fwd_m + lp.fwd_floor_s)
    wait_bwd = host_wait_s(host_bwd, lp.bwd_c + lp.bwd_m + lp.bwd_floor_s)
    some = wait_fwd + wait_bwd > 0.0
    return xp.where(some, wait_fwd, host_fwd), xp.where(some, wait_bwd, host_bwd)


def forward_work_s(lp: LayerPass, cp: CpRing, layers: Num, host_wait_s: Num, host_pass: tuple[Num, Num]) -> Num:
    """The stage's forward per micro-batch [s] (the window of ZeRO-3's forward gathers): its layers' forward
    device time with its kernels' floors and its share of the layer's wait for the host (`host_wait_s`, shared
    by `host_pass`, wait_shares, as in overlap.dp_windows_s: a host-bound forward lasts its host time, and
    the gathers progress meanwhile), less the attention time that hides CP's forward ring."""
    share_fwd = 1.0 - backward_host_share(host_pass)
    return layers * (lp.fwd_c + lp.fwd_m + lp.fwd_floor_s + host_wait_s * share_fwd - cp.hiding_fwd_s)


def zero3_exposed_s(layout: Layout, z3: Zero3Traffic, forward_work: Num, stage_work: Num, head_work: Num,
                    eff: Efficiency, idle: tuple[Num, Num] = (0.0, 0.0)) -> tuple[Num, Num]:
    """(the stage's, a typical stage's) ZeRO-3 traffic left exposed per micro-batch [s]: each pass's
    behind that pass's work (zero3_pass_exposed_s; `idle`, its (forward, backward) wait for the host); a
    typical stage's micro-batch in the bubble has its layers only, so the embedding's and the loss's work
    (`head_work`, counted in the backward) hide nothing there."""
    contention = eff.overlap_contention
    stage = zero3_pass_exposed_s(z3, forward_work, stage_work, contention, idle) * layout.z3
    typical = zero3_pass_exposed_s(z3, forward_work, stage_work - head_work, contention, idle) * layout.z3
    return stage, typical


def stage_zero3_exposed_s(job: Job, layout: Layout, lp: LayerPass, cp: CpRing, layers: Num, z3: Zero3Traffic,
                          stage_work: Num, head_work: Num, host_wait_s: Num) -> tuple[Num, Num]:
    """zero3_exposed_s for a stage of `layers` layers whose passes share the layer's wait for the host
    (`host_wait_s`) by their own waits (wait_shares): the forward window (forward_work_s) and each pass's wait
    (overlap.pass_waits_s), which hides the traffic without contention (docs/model.md §4.7)."""
    host_pass = wait_shares(lp, step_host_pass_s(job, layout))
    return zero3_exposed_s(layout, z3, forward_work_s(lp, cp, layers, host_wait_s, host_pass), stage_work,
                           head_work, job.hardware.efficiency, pass_waits_s(layers, host_wait_s, host_pass))


def stage_dp_exposed(job: Job, layout: Layout, dp: DpTraffic, lp: LayerPass, cp: CpRing, layers: Num,
                     z3_total_s: Num, stage_work: Num, host_wait_s: Num, micro_batches: Num) -> DpExposed:
    """The stage's data-parallel traffic exposed per step (overlap.dp_exposed_parts) behind its windows
    (overlap.dp_windows_s) and their wait for the host (overlap.dp_window_idle_s), the passes' shares of it
    their own waits (wait_shares), under the framework's overlap of the weight gather."""
    host_pass, gather = wait_shares(lp, step_host_pass_s(job, layout)), FRAMEWORKS[job.framework].dp_gather_overlap
    windows = dp_windows_s(layout, lp, cp, layers, z3_total_s, stage_work, host_pass, host_wait_s, gather)
    idle = dp_window_idle_s(layout, layers, host_pass, host_wait_s, gather)
    return dp_exposed_parts(layout, dp, windows, job.hardware.efficiency.overlap_contention, micro_batches, idle)


def step_flops(job: Job, layout: Layout) -> tuple[Num, Num]:
    """(model, hardware) FLOPs of one step, all devices: the layers and the logits (§1), the MTP modules
    (§15.10), what recomputation adds, and a frozen base's missing weight gradients and its adapters."""
    model = job.model
    mflops = model_flops_per_step(model, job.seq_len, job.global_batch) + mtp_flops_per_step(model, job.seq_len,
                                                                                             job.global_batch)
    hflops = mflops + recompute_flops_per_step(job, layout)
    if not xp.off(layout.finetune):      # frozen base: no weight gradients; adapters (step/finetune.py)
        delta_model, delta_hardware = finetune_flops_delta(job, layout)
        mflops, hflops = mflops + delta_model, hflops + delta_hardware
    return mflops, hflops


def step_terms(job: Job, layout: Layout, layer: LayerTerms | None = None, dp: DpTraffic | None = None) -> StepTerms:
    """Compose one training step of `job` under `layout` (docs/model.md §5); `layer` and `dp`: its
    layer terms and its data-parallel collectives when already computed (`layer_terms`,
    `step_dp_traffic` of plans with the same LAYER_KNOBS, DP_KNOBS)."""
    model, eff = job.model, job.hardware.efficiency
    tiers = job_tiers(job)
    dp_tiers = _dp_tiers(tiers, layout)
    rates, shape = rates_of(job, layout), local_shape(job, layout)
    layer = layer if layer is not None else layer_terms(job, layout)
    (lp, tp_total, tp_layer, ep_total, ep_layer), cp = layer.mean.passes, layer.cp
    logits, logits_c, logits_m, host_layer = layer.logits, layer.logits_c, layer.logits_m, layer.host_layer_s
    sync = (layer.sync_host_s, layer.sync_device_s)
    layer_s, layer_overhead, host_excess, host_bound = layer_time_s(lp, host_layer, tp_layer + cp.exposed_s + ep_layer,
                                                                    sync)
    # outside the layers (kernels.py: head_*): the embedding on the first stage, the logits and loss on the
    # last, each with its TP collectives and at least its host time
    head = head_parts(job, layout, shape.tokens, tiers, logits_c + logits_m)
    # multi-token prediction: its modules after the last layer, on the last stage (step/mtp.py)
    mtp = mtp_terms(layer.mtp, host_layer, logits_c, logits_m, head.last_tp_s, head.last_host_excess_s)
    stage = slowest_stage(model, layout, layer_s,
                          logits_c + logits_m + head.last_over_first_s(layout.pp) + mtp.device_s)
    n = stage.layers
    path = off_layer_path(job, layout, head, mtp, stage.last_is_max)
    head_o, head_comm, mtp_ep = path.overhead_s, path.tp_s, path.ep_s
    stage_c, stage_m, stage_o = n * lp.compute_s, n * lp.memory_s, n * layer_overhead + head_o
    stage_pp = stage_pp_s(job, layout, shape, tiers, n * (lp.compute_s + lp.memory_s))
    params_local, expert_local = _stage_local_params(job, layout)
    z3 = zero3_s(job, layout, dp_tiers, n, params_local)
    # the head's work on the last stage: its device time with its wait for the host, head_o (the logits, the loss,
    # the MTP modules: a faster head waits longer, so its wall time, not its wait alone, is what hides traffic)
    head_device = stage.last_is_max * (logits_c + logits_m + mtp.compute_s + mtp.memory_s)
    head_work = head_o + head_device
    stage_work = stage_c + stage_m + stage_o + head_device - n * (cp.hiding_fwd_s + cp.hiding_bwd_s)
    z3_exposed, z3_typical = stage_zero3_exposed_s(job, layout, lp, cp, n, z3, stage_work, head_work, host_excess)
    mb_comm = n * tp_layer + n * cp.exposed_s + n * ep_layer + stage_pp + z3_exposed + head_comm + mtp_ep
    mb_c = stage_c + stage.last_is_max * (logits_c + mtp.compute_s)
    mb_m = stage_m + stage.last_is_max * (logits_m + mtp.memory_s)
    m = layout.micro_batches(job)
    bubble = bubble_s(layout, m, stage.heavy_layers * layer_s + stage_pp + z3_typical)
    trained_local = trainable_params_local(job, layout, params_local)    # LoRA: the adapters only
    trained_experts = trainable_expert_params_local(job, layout, expert_local)
    dp = dp if dp is not None else data_parallel_traffic(job, layout, dp_tiers, trained_local, trained_experts)
    dp_parts = stage_dp_exposed(job, layout, dp, lp, cp, n, z3.total_s, stage_work, host_excess, m)
    tied = tied_embedding_s(job, layout, tiers)     # tied embeddings on different stages: once per step
    dp_exposed = dp_parts.replica_s + dp_parts.reduce_s + dp_parts.gather_s + dp_parts.zero2_s + tied
    optimizer = optimizer_s(layout, trained_local, rates.memory_bytes_per_s, eff.kernel_floor_s, trained_experts,
                            job_adam_bytes(job))
    offload, offload_s, offload_serial, optimizer = offload_parts(job, layout, lp, n, optimizer)
    compute_s, memory_s, overhead_s = m * mb_c, m * mb_m + optimizer, m * stage_o
    communication_s = m * mb_comm + dp_exposed
    # the upper bound: nothing overlapped (every collective in full, no contention), the longer bubble
    serial_layer = tp_total + cp.total_s + ep_total
    serial_overhead = layer_time_s(lp, host_layer, serial_layer, sync)[1]    # host waits against that device time
    serial_typical = stage.heavy_layers * (lp.compute_s + lp.memory_s + serial_overhead + serial_layer) \
        + stage_pp + z3.total_s
    mtp_serial = stage.last_is_max * (mtp.total_comm_s - mtp.comm_s)     # its collectives in full
    no_overlap = (m * (mb_c + mb_m + n * serial_overhead + head_o + n * serial_layer + stage_pp + z3.total_s + head_comm
                       + mtp_ep + mtp_serial)
                  + optimizer
                  + serial_dp_s(layout, dp, m) + tied + bubble_s(layout, m, serial_typical) + offload_serial)
    mflops, hflops = step_flops(job, layout)
    return StepTerms(time_s=compute_s + memory_s + overhead_s + communication_s + bubble + offload_s,
                     compute_s=compute_s,
                     memory_s=memory_s, communication_s=communication_s, bubble_s=bubble, overhead_s=overhead_s,
                     tp_comm_s=m * (n * tp_layer + head_comm), cp_comm_s=m * (n * cp.exposed_s),
                     pp_comm_s=m * stage_pp, ep_comm_s=m * (n * ep_layer + mtp_ep),
                     dp_comm_s=dp_exposed + m * z3_exposed, optimizer_s=optimizer,
                     micro_batch_s=mb_c + mb_m + stage_o + mb_comm, no_overlap_time_s=no_overlap,
                     model_flops=mflops, hardware_flops=hflops, offload_s=offload_s,
                     host_s=m * (n * host_layer + head.host_on_path(layout.pp, stage.last_is_max)
                                 + stage.last_is_max * mtp.host_s + micro_batch_host_s(job)),
                     host_wait_s=m * (n * host_excess + head_o), layers_host_wait_s=m * n * host_excess,
                     host_bound=host_bound,
                     floor_s=m * n * lp.floor_s,
                     parts=StepParts(layer=lp, logits=logits, layers=n, last_is_max=stage.last_is_max, micro_batches=m,
                                     tp_total_s=tp_total, tp_exposed_s=tp_layer, ep_total_s=ep_total,
                                     ep_exposed_s=ep_layer, cp=cp, pp_s=stage_pp, z3_s=z3.total_s,
                                     z3_exposed_s=z3_exposed, dp=dp, dp_exposed=dp_parts, trained_params=trained_local,
                                     offload=offload, head_tp_s=head_comm, mtp_ep_s=mtp_ep, tied_s=tied,
                                     mtp=layer.mtp))
