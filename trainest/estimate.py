"""The top-level estimate: Scenario -> Estimate (typed, immutable result records; JSON is built from them).

The records are `typing.NamedTuple`s rather than frozen dataclasses for start-up time (a
NamedTuple is a quarter of the cost to define, and every `trainest estimate` defines them)."""

from __future__ import annotations

from typing import Any

from trainest import (
    SCHEMA_VERSION,  # noqa: F401 - re-exported
    training,
)
from trainest.band import Band, arch_of, band_for, unstated_of
from trainest.memory import PEAK_PHASES, MemoryBreakdown, memory_per_device
from trainest.record import NamedTuple, replace
from trainest.scenario import Scenario, job_of, layout_of
from trainest.step import StepTerms, step_terms
from trainest.step.finetune import trainable_params
from trainest.units import GiB, fmt_seconds

TERMS = ("compute", "memory", "communication", "bubble", "overhead", "offload")


class StepResult(NamedTuple):
    time_s: float
    compute_s: float
    memory_s: float
    communication_s: float
    bubble_s: float
    overhead_s: float
    offload_s: float                # exposed host-link copies and the CPU's Adam (offload only)
    bottleneck: str                 # the largest of compute | memory | communication | bubble | overhead | offload
    shares: dict[str, float]        # each term / time_s
    communication_detail_s: dict[str, float]   # tp, cp, pp, dp, ep (exposed) [s per step]
    optimizer_s: float
    micro_batch_s: float
    no_overlap_time_s: float        # the step with every collective exposed (upper bound of the overlap policy)
    overlap_policy: str
    host_time_s: float              # the host's time to launch the slowest stage's kernels [s per step]
    bound_by: str                   # device | host: what sets the pace of the layers
    overhead_detail_s: dict[str, float]   # host_wait, kernel_floors, fixed (per layer pass) [s per step]
    time_s_low: float               # the error band: time_s × the band's low / high measured/predicted ratio
    time_s_high: float


class ThroughputResult(NamedTuple):
    tokens_per_s: float
    tokens_per_s_per_device: float
    model_tflops_per_device: float
    hardware_tflops_per_device: float
    mfu: float
    hfu: float
    model_flops_per_step: float
    peak_tflops_per_device: float


# The total the "fits" verdict compares with the usable capacity: the device's (nvidia-smi: tensors, allocator
# reserve, CUDA context, NCCL buffers), since all of them must be in the device's memory at the peak.
FITS_COMPARES = "device (tensors + allocator reserve + CUDA/ROCm context + NCCL buffers; nvidia-smi)"


class MemoryResult(NamedTuple):
    per_device_bytes: float
    capacity_bytes: float
    fits: bool                      # per_device_bytes + required_headroom_bytes <= capacity_bytes
    headroom_bytes: float           # capacity - per_device_bytes (what is left free)
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    overhead_bytes: float
    host_bytes: float               # offloaded state in host memory (0 without offload)
    host_capacity_bytes: float | None   # host memory per device (None: unknown)
    device_fits: bool               # the device part fits in the memory left to training
    host_fits: bool                 # the offloaded part fits in host memory (True without offload)
    required_headroom_bytes: float = 0.0   # the margin the fit decision keeps free (scenario memory_headroom)
    # per_device_bytes line by line (docs/model.md §7.5): the tensors' lines above (logits_bytes is part of
    # activations_bytes) and the runtime's (overhead_bytes = allocator + context + NCCL), and the totals to compare
    # with torch.cuda.max_memory_allocated (allocated_bytes), max_memory_reserved (reserved_bytes) and nvidia-smi
    # (per_device_bytes, which `fits` uses: fits_compares)
    logits_bytes: float = 0.0
    allocator_bytes: float = 0.0
    context_bytes: float = 0.0
    nccl_bytes: float = 0.0
    allocated_bytes: float = 0.0
    reserved_bytes: float = 0.0
    fits_compares: str = FITS_COMPARES
    # when the step holds its peak (memory.PEAK_PHASES, docs/model.md §7.12): gradients and activations together,
    # or, where a loop frees the gradients and a step is one micro-batch, the forward's end, the backward's start
    # (the output projection's gradient beside every activation) or the backward's end (every gradient, one layer)
    peak_phase: str = "together"


class TrainingResult(NamedTuple):
    tokens: float
    steps: int
    time_s: float
    time_days: float
    device_hours: float
    energy_kwh: float | None
    cost_usd: float | None
    price_usd_per_hour: float | None
    pue: float
    co2_kg: float | None            # energy_kwh × the grid's carbon intensity (None: the device power is unknown)
    grid_gco2_per_kwh: float
    time_s_low: float               # the error band of the run's time and cost (Estimate.band)
    time_s_high: float
    cost_usd_low: float | None
    cost_usd_high: float | None
    trainable_params: float         # parameters the run trains, whole model: all, or a LoRA's adapters


class Estimate(NamedTuple):
    scenario: Scenario
    step: StepResult
    throughput: ThroughputResult
    memory: MemoryResult
    training: TrainingResult
    band: Band                      # measured/predicted step time of validated runs like this one (trainest.band)
    warnings: tuple[str, ...] = ()  # what the numbers rest on or look like (trainest.caveats.assess attaches them)
    fit_advice: Any = None          # advice.FitAdvice where it does not fit (caveats.assess), else None


# A layout predicted over capacity by at most this fraction is reported as possibly fitting: of the 460
# published runs (which all ran), 94 are predicted 0-10 % over capacity, 125 up to 20 % over.
TIGHT_FIT_FRACTION = 0.10

# Plausibility (warnings, not errors: the numbers are computed, and flagged). The largest published global
# batches are ~62 M tokens per step (DeepSeek-V3: 15,360 sequences of 4,096 tokens; Llama 3.1 405B: 16 M) and a
# few thousand sequences; a global batch beyond these is most likely tokens given as sequences.
MAX_PLAUSIBLE_SEQUENCES = 65_536            # 2^16 sequences per step
MAX_PLAUSIBLE_TOKENS_PER_STEP = 2**26       # 67 M tokens per step
MAX_PLAUSIBLE_STEP_S = 3600.0               # measured steps take seconds to minutes; an hour is far outside


def plausibility_warnings(e: Estimate) -> list[str]:
    """Warnings on inputs and results outside any plausible range: a global batch beyond any published run
    (tokens given as sequences?), a step of hours or days, MFU above the peak."""
    s, out = e.scenario, []
    tokens = s.global_batch * s.seq_len
    if s.global_batch > MAX_PLAUSIBLE_SEQUENCES or tokens > MAX_PLAUSIBLE_TOKENS_PER_STEP:
        out.append(f"global batch {s.global_batch:,} sequences = {tokens / 1e6:,.1f} M tokens per step is beyond any "
                   f"published training run (at most ~62 M tokens, DeepSeek-V3); the global batch counts sequences: "
                   f"give tokens with --global-batch-tokens (e.g. 4M)")
    if e.step.time_s > MAX_PLAUSIBLE_STEP_S:
        out.append(f"a step of {fmt_seconds(e.step.time_s)} is far outside any measured run (seconds to minutes): "
                   f"check the global batch, the device count and the layout")
    if e.throughput.mfu > 1.0:
        out.append(f"MFU {e.throughput.mfu:.0%} is above the device's peak: the hardware file's peak or efficiencies "
                   f"are inconsistent")
    return out


LOW_PRECISION_SLOWER_WARNING = ("precision {precision} is slower than bf16 here ({slow} vs {fast} per step) although "
                                "{hardware}'s {precision} peak is higher: {reason}")
PER_EXPERT_CAST_REASON = ("the layers are host-bound, and {precision} adds to each of its {local:g} local experts, "
                          "launched one by one, the quantisation of every expert GEMM's input and the padding of its "
                          "rows ({extra:g} more host launches per MoE layer and micro-batch than bf16's {base:g}; "
                          "docs/model.md §15.2): more host time than its faster GEMMs save. A larger micro-batch, "
                          "more expert parallelism (fewer local experts) or --cuda-graphs full lets the device hide "
                          "them")
CAST_REASON = ("its casts of every GEMM input (element-wise traffic, docs/model.md §2.1) and the low-precision GEMM "
               "factor (efficiency.low_precision_gemm) cost more than its faster GEMMs save at this layout")


def low_precision_slower_warning(e: Estimate) -> str | None:
    """Why a low-precision (fp8, fp4) estimate is slower than the same scenario in bf16 on hardware whose
    low-precision peak is higher (issue 32.5): a MoE model launched expert by expert whose layers are
    host-bound gets the per-expert input quantisations as host launches (`moe.expert_pass_launches`);
    otherwise the casts' traffic outweighs the faster GEMMs. None where it is not slower (or bf16 has no
    peak, or the peaks are equal: `low_precision_warning` says that)."""
    from trainest.choices import LOW_PRECISIONS
    from trainest.record import replace
    s = e.scenario
    hw = s.hardware
    if s.precision not in LOW_PRECISIONS or "bf16" not in hw.peak_flops_per_s:
        return None
    if hw.peak(s.precision) <= hw.peak("bf16"):
        return None
    bf16 = estimate(replace(s, precision="bf16"))
    if bf16.step.time_s >= e.step.time_s:
        return None
    reason = CAST_REASON
    if s.model.moe is not None and e.step.bound_by == "host":
        from trainest.step.moe import expert_launches
        job, layout = job_of(s), layout_of(s)
        low, base = float(expert_launches(job, layout)), float(expert_launches(job_of(bf16.scenario), layout))
        if low > base:
            reason = PER_EXPERT_CAST_REASON.format(precision=s.precision, local=s.model.moe.experts / s.parallel.ep,
                                                   extra=low - base, base=base)
    return LOW_PRECISION_SLOWER_WARNING.format(precision=s.precision, slow=fmt_seconds(e.step.time_s),
                                               fast=fmt_seconds(bf16.step.time_s), hardware=hw.name, reason=reason)


def tp_overlap_warning(s: Scenario) -> str | None:
    """The warning when tp_overlap is asked for where it cannot act: a TP group that is not inside one
    scale-up domain (it spans nodes, or some group straddles two domains) has its TP traffic counted
    exposed, as Transformer Engine's communication/GEMM overlap (userbuffers) runs within one NVLink
    domain (docs/model.md §4.1); None otherwise."""
    from trainest.step.collectives import in_domain, ranks_used_per_block, tiers_of
    tp = s.parallel.tp
    if not s.parallel.tp_overlap or tp == 1:
        return None
    tiers = tiers_of(s.hardware, s.devices_per_node, float(s.devices))
    if in_domain(float(tp), 1.0, tiers):
        return None
    used = ranks_used_per_block(tiers.domain, float(s.devices))
    where = (f"span more than one scale-up domain of {tiers.domain}" if tp > used else
             f"do not tile the {used} devices used per scale-up domain of {tiers.domain} (some group straddles two)")
    return (f"tp_overlap: the {tp}-way TP groups {where} on {s.hardware.name}; Transformer Engine's TP "
            f"communication/GEMM overlap runs inside one NVLink domain only, so their TP traffic is counted "
            f"exposed (no overlap); a tp that fits the domain keeps the overlap")


OVERLAP_POLICY = ("TP communication exposed (or pipelined with GEMMs with tp_overlap); PP communication exposed; "
                  "CP ring overlapped with attention; DP gradient reduction overlapped with the last micro-batch's "
                  "backward except one layer; ZeRO-1/2 weight all-gather overlapped with the first micro-batch's "
                  "forward except one layer; HSDP replica all-reduce exposed; ZeRO-3 gathers prefetched behind "
                  "compute except one layer; hidden DP/ZeRO traffic slows the computation hiding it by the "
                  "hardware's overlap_contention share of its time")


# what the framework does with the expert-parallel all-to-alls of a MoE model (parallel.moe_overlap), said with
# every MoE estimate
MOE_OVERLAP_POLICY = {
    "none": "MoE dispatch and combine all-to-alls exposed (moe_overlap none)",
    "deepep": "MoE dispatch and combine all-to-alls hidden behind another micro-batch's computation, less what "
              "exceeds it, at the overlap_contention share (moe_overlap deepep)",
}


def overlap_policy(s: Scenario) -> str:
    """The overlap policy of the estimate: OVERLAP_POLICY, and for a MoE model what is done with its
    all-to-alls."""
    if s.model.moe is None:
        return OVERLAP_POLICY
    return f"{OVERLAP_POLICY}; {MOE_OVERLAP_POLICY[s.parallel.moe_overlap]}"


def overhead_detail(overhead_s: float, terms: StepTerms) -> dict[str, float]:
    """overhead_s split: waiting for the host, the kernels' floors, the fixed per-layer overhead [s]."""
    host, floors = float(terms.host_wait_s), float(terms.floor_s)
    return {"host_wait": host, "kernel_floors": floors, "fixed": max(overhead_s - host - floors, 0.0)}


def memory_result(s: Scenario, mem: MemoryBreakdown) -> MemoryResult:
    """The memory per device against what is left to training (unified memory: total less the OS
    reserve, `Hardware.training_memory_bytes`) and, with offload, the host's share against the host
    memory per device."""
    total, capacity = float(mem.total_bytes), s.hardware.training_memory_bytes
    host, host_capacity = float(mem.host_bytes), s.hardware.host.memory_bytes_per_device
    host_fits = host == 0.0 or (host_capacity is not None and host <= host_capacity)
    device_fits = total + s.memory_headroom_bytes <= capacity       # the margin (--memory-headroom) stays free
    return MemoryResult(per_device_bytes=total, capacity_bytes=capacity, fits=device_fits and host_fits,
                        headroom_bytes=capacity - total, weights_bytes=float(mem.weights_bytes),
                        gradients_bytes=float(mem.gradients_bytes), optimizer_bytes=float(mem.optimizer_bytes),
                        activations_bytes=float(mem.activations_bytes), overhead_bytes=float(mem.overhead_bytes),
                        host_bytes=host, host_capacity_bytes=host_capacity, device_fits=device_fits,
                        host_fits=host_fits, required_headroom_bytes=s.memory_headroom_bytes,
                        logits_bytes=float(mem.logits_bytes), allocator_bytes=float(mem.allocator_bytes),
                        context_bytes=float(mem.context_bytes), nccl_bytes=float(mem.nccl_bytes),
                        allocated_bytes=float(mem.allocated_bytes), reserved_bytes=float(mem.reserved_bytes),
                        peak_phase=PEAK_PHASES[int(round(float(mem.peak_phase)))])


def host_misfit_words(m: MemoryResult) -> str:
    """Why the offloaded part does not fit in host memory, in words: what it needs per device against what
    the host gives each device ('' where it fits)."""
    if m.host_fits:
        return ""
    have = "an unknown amount (the hardware entry gives no host memory)" if m.host_capacity_bytes is None \
        else f"{m.host_capacity_bytes / GiB:.1f} GiB"
    return f"the offloaded state needs {m.host_bytes / GiB:.1f} GiB per device, the host has {have}"


def estimate(s: Scenario) -> Estimate:
    """Estimate one scenario: step breakdown, throughput, memory and whole-run totals."""
    job, layout = job_of(s), layout_of(s)
    terms = step_terms(job, layout)
    mem = memory_per_device(job, layout)
    t = float(terms.time_s)
    parts = {k: float(getattr(terms, f"{k}_s")) for k in TERMS}
    bottleneck = max(parts, key=lambda k: parts[k])
    unstated = unstated_of(s.derived)
    band = band_for(s.hardware, s.devices, s.devices_per_node, arch_of(s.model), s.framework, s.finetune.method,
                    unstated, *unstated_span(s, t, unstated))
    step = StepResult(time_s=t, **{f"{k}_s": v for k, v in parts.items()}, bottleneck=bottleneck,
                      shares={k: v / t for k, v in parts.items()},
                      communication_detail_s={"tp": float(terms.tp_comm_s), "cp": float(terms.cp_comm_s),
                                              "pp": float(terms.pp_comm_s), "dp": float(terms.dp_comm_s),
                                              "ep": float(terms.ep_comm_s)},
                      optimizer_s=float(terms.optimizer_s), micro_batch_s=float(terms.micro_batch_s),
                      no_overlap_time_s=float(terms.no_overlap_time_s), overlap_policy=overlap_policy(s),
                      host_time_s=float(terms.host_s),
                      bound_by="host" if float(terms.host_bound) > 0.0 else "device",
                      overhead_detail_s=overhead_detail(parts["overhead"], terms),
                      time_s_low=t * band.low_ratio, time_s_high=t * band.high_ratio)
    peak = s.hardware.peak(s.precision)
    tokens_per_s = s.tokens_per_step / t
    model_tflops = float(terms.model_flops) / t / s.devices / 1e12
    hw_tflops = float(terms.hardware_flops) / t / s.devices / 1e12
    throughput = ThroughputResult(
        tokens_per_s=tokens_per_s, tokens_per_s_per_device=tokens_per_s / s.devices,
        model_tflops_per_device=model_tflops, hardware_tflops_per_device=hw_tflops,
        mfu=model_tflops * 1e12 / peak, hfu=hw_tflops * 1e12 / peak,
        model_flops_per_step=float(terms.model_flops), peak_tflops_per_device=peak / 1e12)
    memory = memory_result(s, mem)
    steps = training.steps_for_tokens(s.tokens, s.tokens_per_step)
    run_s = steps * t
    dev_h = training.device_hours(run_s, s.devices)
    energy = training.energy_kwh(run_s, s.devices, s.hardware.power_w, s.pue)
    cost = training.cost_usd(dev_h, s.price_usd_per_hour)
    train = TrainingResult(tokens=s.tokens, steps=steps, time_s=run_s, time_days=run_s / 86400.0,
                           device_hours=dev_h, energy_kwh=energy, cost_usd=cost,
                           price_usd_per_hour=s.price_usd_per_hour, pue=s.pue,
                           co2_kg=training.co2_kg(energy, s.grid_gco2_per_kwh), grid_gco2_per_kwh=s.grid_gco2_per_kwh,
                           time_s_low=run_s * band.low_ratio, time_s_high=run_s * band.high_ratio,
                           cost_usd_low=None if cost is None else cost * band.low_ratio,
                           cost_usd_high=None if cost is None else cost * band.high_ratio,
                           trainable_params=float(trainable_params(job, layout)))
    return Estimate(scenario=s, step=step, throughput=throughput, memory=memory, training=train, band=band)


MAX_SPAN_MICRO_BATCH = 16     # the largest micro-batch (sequences) an unstated micro-batch is tried at


def unstated_span(s: Scenario, step_s: float, unstated: tuple[str, ...]) -> tuple[tuple[float, float], str]:
    """((fastest, slowest) step / `step_s`, in words which values) over the micro-batches the scenario could run
    when it left its micro-batch unstated: every divisor b ≤ MAX_SPAN_MICRO_BATCH of its sequences per replica
    and step (global batch / dp, so the global batch stays) that the scenario's checks accept (`runs_as_given`)
    and at which it fits in memory. ((1, 1), "") when the
    micro-batch was given or no other value fits (docs/model.md §10.3)."""
    if "micro_batch" not in unstated:
        return (1.0, 1.0), ""
    per_replica = s.global_batch // s.parallel.dp
    steps = {s.micro_batch: step_s}
    for b in range(1, min(per_replica, MAX_SPAN_MICRO_BATCH) + 1):
        if per_replica % b or b in steps:
            continue
        alt = replace(s, micro_batch=b)
        if not runs_as_given(alt):
            continue
        job, layout = job_of(alt), layout_of(alt)
        if not memory_result(alt, memory_per_device(job, layout)).fits:
            continue
        steps[b] = float(step_terms(job, layout).time_s)
    if len(steps) == 1:
        return (1.0, 1.0), ""
    fast, slow = min(steps, key=steps.__getitem__), max(steps, key=steps.__getitem__)
    words = f"the micro-batches that fit ({fast} the fastest, {slow} the slowest; the estimate takes {s.micro_batch})"
    return (steps[fast] / step_s, steps[slow] / step_s), words


def runs_as_given(s: Scenario) -> bool:
    """Whether `s` passes the checks every scenario is built through (`scenario_from_mapping`: the schedule's
    rules, e.g. the interleaved schedule's micro-batches a multiple of pp), so that a micro-batch tried by
    `unstated_span` is one the user could run."""
    from trainest.errors import SpecError
    from trainest.scenario import scenario_from_mapping, scenario_mapping
    from trainest.scenario.build import ECHO_KEYS
    mapping = {k: v for k, v in scenario_mapping(s).items() if k not in ECHO_KEYS}
    try:
        scenario_from_mapping({**mapping, "model": s.model, "hardware": s.hardware}, "span")
    except SpecError:
        return False
    return True


def estimate_ops(s: Scenario) -> tuple[list, object]:
    """(every operation of the step on the roofline, the device's ridge points) of one scenario:
    `step.ops.step_ops` on the same `step_terms` the estimate reports (docs/model.md §2.8)."""
    from trainest.step.ops import roofline_of, step_ops
    job, layout = job_of(s), layout_of(s)
    return step_ops(job, layout, step_terms(job, layout)), roofline_of(job)
