"""One training step composed from its parts (docs/model.md §5.3): the layer pass on the roofline,
the traffic of each parallelism, the slowest stage, the bubble, the data-parallel tail and the
optimizer; the no-overlap upper bound beside it. `step_terms` runs on floats (one estimate) or on
numpy arrays (the plan search, calibration)."""

from __future__ import annotations

from typing import NamedTuple

from trainest.layout import Job, Layout, Num
from trainest.step.collectives import tiers_of
from trainest.step.flops import model_flops_per_step, recompute_flops_per_step
from trainest.step.layer import layer_pass, local_shape, logits_bounds, rates_of
from trainest.step.optimizer import optimizer_s
from trainest.step.overlap import dp_exposed_s, dp_windows_s, overlapped_exposed_s, serial_dp_s
from trainest.step.schedule import bubble_s, slowest_stage, stage_params
from trainest.step.traffic import cp_ring, dp_traffic, pp_p2p_s, tp_layer_s, zero3_s


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


def step_terms(job: Job, layout: Layout) -> StepTerms:
    """Compose one training step of `job` under `layout` (docs/model.md §5)."""
    model, eff = job.model, job.hardware.efficiency
    tiers = tiers_of(job.hardware, job.devices_per_node)
    # the data-parallel group's rings use every NIC of a node (hierarchical) or one per rank (flat)
    dp_tiers = tiers if layout.dp_collectives == "hierarchical" else tiers._replace(aggregate_nics=False)
    rates, shape = rates_of(job, layout), local_shape(job, layout)
    lp = layer_pass(job, layout, rates, shape)
    tp_total, tp_layer = tp_layer_s(job, layout, shape, tiers, lp.linear_s)
    cp = cp_ring(layout, shape, tiers, lp)
    logits_c, logits_m = logits_bounds(job, layout, rates, shape)
    layer_s = lp.compute_s + lp.memory_s + lp.overhead_s + tp_layer + cp.exposed_s
    stage = slowest_stage(model, layout, layer_s, logits_c + logits_m)
    n = stage.layers
    stage_c, stage_m, stage_o = n * lp.compute_s, n * lp.memory_s, n * lp.overhead_s
    stage_pp = pp_p2p_s(job, layout, shape, tiers)
    params_local = stage_params(model, layout.pp, layout.vpp, layout.pipeline_split) / layout.tp
    z3_layer, z3_comm = zero3_s(job, layout, dp_tiers, n, params_local)
    # the window for ZeRO-3's traffic: the stage's work, less the attention time that hides CP
    stage_work = stage_c + stage_m + stage_o - n * (cp.hiding_fwd_s + cp.hiding_bwd_s)
    z3_exposed = overlapped_exposed_s(z3_comm, stage_work, z3_layer, eff.overlap_contention) * layout.z3
    mb_comm = n * tp_layer + n * cp.exposed_s + stage_pp + z3_exposed
    mb_c = stage_c + stage.last_is_max * logits_c
    mb_m = stage_m + stage.last_is_max * logits_m
    m = layout.micro_batches(job)
    bubble = bubble_s(layout, m, stage.heavy_layers * layer_s + stage_pp + z3_exposed)
    dp = dp_traffic(job, layout, dp_tiers, params_local)
    windows = dp_windows_s(layout, lp, cp, n, z3_comm, stage_work)
    dp_exposed = dp_exposed_s(layout, dp, windows, n, eff.overlap_contention, m)
    optimizer = optimizer_s(layout, params_local, rates.memory_bytes_per_s)
    compute_s, memory_s, overhead_s = m * mb_c, m * mb_m + optimizer, m * stage_o
    communication_s = m * mb_comm + dp_exposed
    # the upper bound: nothing overlapped (every collective in full, no contention), with the bubble
    # of the longer micro-batch
    serial_layer = tp_total + cp.total_s
    serial_typical = stage.heavy_layers * (lp.compute_s + lp.memory_s + lp.overhead_s + serial_layer) \
        + stage_pp + z3_comm
    no_overlap = (m * (mb_c + mb_m + stage_o + n * serial_layer + stage_pp + z3_comm) + optimizer
                  + serial_dp_s(layout, dp, m) + bubble_s(layout, m, serial_typical))
    mflops = model_flops_per_step(model, job.seq_len, job.global_batch)
    return StepTerms(time_s=compute_s + memory_s + overhead_s + communication_s + bubble, compute_s=compute_s,
                     memory_s=memory_s, communication_s=communication_s, bubble_s=bubble, overhead_s=overhead_s,
                     tp_comm_s=m * (n * tp_layer), cp_comm_s=m * (n * cp.exposed_s), pp_comm_s=m * stage_pp,
                     dp_comm_s=dp_exposed + m * z3_exposed, optimizer_s=optimizer,
                     micro_batch_s=mb_c + mb_m + stage_o + mb_comm, no_overlap_time_s=no_overlap,
                     model_flops=mflops, hardware_flops=mflops + recompute_flops_per_step(job, layout))
