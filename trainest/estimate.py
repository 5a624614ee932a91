"""The top-level estimate: Scenario -> Estimate (typed, immutable result records; JSON is built from them).

The records are `typing.NamedTuple`s rather than frozen dataclasses for start-up time (a
NamedTuple is a quarter of the cost to define, and every `trainest estimate` defines them)."""

from __future__ import annotations

from typing import NamedTuple

from trainest import (
    SCHEMA_VERSION,  # noqa: F401 - re-exported
    training,
)
from trainest.layout import job_of, layout_of
from trainest.memory import memory_per_device
from trainest.scenario import Scenario
from trainest.step import step_terms

TERMS = ("compute", "memory", "communication", "bubble", "overhead")


class StepResult(NamedTuple):
    time_s: float
    compute_s: float
    memory_s: float
    communication_s: float
    bubble_s: float
    overhead_s: float
    bottleneck: str                 # the largest of compute | memory | communication | bubble | overhead
    shares: dict[str, float]        # each term / time_s
    communication_detail_s: dict[str, float]   # tp, cp, pp, dp, ep (exposed) [s per step]
    optimizer_s: float
    micro_batch_s: float
    no_overlap_time_s: float        # the step with every collective exposed (upper bound of the overlap policy)
    overlap_policy: str


class ThroughputResult(NamedTuple):
    tokens_per_s: float
    tokens_per_s_per_device: float
    model_tflops_per_device: float
    hardware_tflops_per_device: float
    mfu: float
    hfu: float
    model_flops_per_step: float
    peak_tflops_per_device: float


class MemoryResult(NamedTuple):
    per_device_bytes: float
    capacity_bytes: float
    fits: bool
    headroom_bytes: float
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    overhead_bytes: float


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


class Estimate(NamedTuple):
    scenario: Scenario
    step: StepResult
    throughput: ThroughputResult
    memory: MemoryResult
    training: TrainingResult


# A layout predicted over capacity by at most this fraction is reported as possibly fitting: of the 460
# published runs (which all ran), 94 are predicted 0-10 % over capacity, 125 up to 20 % over.
TIGHT_FIT_FRACTION = 0.10

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


def estimate(s: Scenario) -> Estimate:
    """Estimate one scenario: step breakdown, throughput, memory and whole-run totals."""
    job, layout = job_of(s), layout_of(s)
    terms = step_terms(job, layout)
    mem = memory_per_device(job, layout)
    t = float(terms.time_s)
    parts = {k: float(getattr(terms, f"{k}_s")) for k in TERMS}
    bottleneck = max(parts, key=lambda k: parts[k])
    step = StepResult(time_s=t, **{f"{k}_s": v for k, v in parts.items()}, bottleneck=bottleneck,
                      shares={k: v / t for k, v in parts.items()},
                      communication_detail_s={"tp": float(terms.tp_comm_s), "cp": float(terms.cp_comm_s),
                                              "pp": float(terms.pp_comm_s), "dp": float(terms.dp_comm_s),
                                              "ep": float(terms.ep_comm_s)},
                      optimizer_s=float(terms.optimizer_s), micro_batch_s=float(terms.micro_batch_s),
                      no_overlap_time_s=float(terms.no_overlap_time_s), overlap_policy=overlap_policy(s))
    peak = s.hardware.peak(s.precision)
    tokens_per_s = s.tokens_per_step / t
    model_tflops = float(terms.model_flops) / t / s.devices / 1e12
    hw_tflops = float(terms.hardware_flops) / t / s.devices / 1e12
    throughput = ThroughputResult(
        tokens_per_s=tokens_per_s, tokens_per_s_per_device=tokens_per_s / s.devices,
        model_tflops_per_device=model_tflops, hardware_tflops_per_device=hw_tflops,
        mfu=model_tflops * 1e12 / peak, hfu=hw_tflops * 1e12 / peak,
        model_flops_per_step=float(terms.model_flops), peak_tflops_per_device=peak / 1e12)
    total = float(mem.total_bytes)
    memory = MemoryResult(per_device_bytes=total, capacity_bytes=s.hardware.memory_bytes,
                          fits=total <= s.hardware.memory_bytes, headroom_bytes=s.hardware.memory_bytes - total,
                          weights_bytes=float(mem.weights_bytes), gradients_bytes=float(mem.gradients_bytes),
                          optimizer_bytes=float(mem.optimizer_bytes), activations_bytes=float(mem.activations_bytes),
                          overhead_bytes=float(mem.overhead_bytes))
    steps = training.steps_for_tokens(s.tokens, s.tokens_per_step)
    run_s = steps * t
    dev_h = training.device_hours(run_s, s.devices)
    train = TrainingResult(tokens=s.tokens, steps=steps, time_s=run_s, time_days=run_s / 86400.0,
                           device_hours=dev_h,
                           energy_kwh=training.energy_kwh(run_s, s.devices, s.hardware.power_w, s.pue),
                           cost_usd=training.cost_usd(dev_h, s.price_usd_per_hour),
                           price_usd_per_hour=s.price_usd_per_hour, pue=s.pue)
    return Estimate(scenario=s, step=step, throughput=throughput, memory=memory, training=train)
