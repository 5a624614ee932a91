"""A value given to a knob is never silently dropped (issue 31, stop 52): for a set of base scenarios (GPU dense and
MoE, a hybrid, a TPU, torchtitan, the Hugging Face stack, a QLoRA on a DGX Spark) and other values of the job's
knobs, a value the scenario accepts either changes the scenario and then the estimate (step, memory, fit, run
totals or warnings), or a warning names the knob and says it has no effect. A value refused with one line is fine;
a value equal to what the scenario derives anyway changes nothing to say."""

from __future__ import annotations

import copy

import pytest

from trainest.caveats import assess
from trainest.errors import SpecError
from trainest.record import replace
from trainest.scenario import job_of, layout_of, scenario_from_mapping

BASES = {
    "gpu-dense": {"model": "llama3-8b", "hardware": "h100-sxm", "devices": 16, "parallel": {"tp": 2},
                  "global_batch": 32},
    "gpu-dense-zero1": {"model": "llama3-8b", "hardware": "h100-sxm", "devices": 16,
                        "parallel": {"tp": 2, "zero": 1}, "global_batch": 32},
    "gpu-moe": {"model": "qwen3-30b-a3b", "hardware": "h100-sxm", "devices": 16, "parallel": {"ep": 8},
                "global_batch": 32},
    "hybrid": {"model": "nemotron-3-nano", "hardware": "b200", "devices": 8, "parallel": {"ep": 8},
               "global_batch": 16},
    "tpu": {"model": "llama3-8b", "hardware": "tpu-v5p", "devices": 16, "global_batch": 32},
    "torchtitan": {"model": "llama3-8b", "hardware": "h100-sxm", "devices": 16, "framework": "torchtitan",
                   "global_batch": 32},
    "hf": {"model": "llama3-8b", "hardware": "h100-sxm", "devices": 8, "framework": "hf-accelerate",
           "global_batch": 16},
    "spark-qlora": {"model": "llama3-8b", "hardware": "dgx-spark", "devices": 1, "finetune": {"method": "qlora"},
                    "global_batch": 8, "seq_len": 2048},
    "lora": {"model": "llama3-8b", "hardware": "h100-sxm", "devices": 8, "finetune": {"method": "lora"},
             "global_batch": 16},
    "dense-pp": {"model": "llama3-70b", "hardware": "h100-sxm", "devices": 64, "parallel": {"tp": 4, "pp": 4},
                 "global_batch": 64, "recompute": "full"},
    "moe-pp": {"model": "qwen3-30b-a3b", "hardware": "h100-sxm", "devices": 32, "parallel": {"ep": 8, "pp": 2, "tp": 2},
               "global_batch": 64},
}
VALUES = [("precision", "fp8"), ("precision", "fp16"), ("parallel.moe_overlap", "deepep"),
          ("parallel.tp_overlap", True), ("parallel.dp_overlap", False), ("parallel.dp_collectives", "flat"),
          ("parallel.sequence_parallel", True), ("parallel.sequence_parallel", False), ("recompute", "full"),
          ("recompute", "none"), ("attention", "flash2"), ("attention", "standard"), ("packed_length", 1024),
          ("adam_moments", "bf16"), ("optimizer", "sgd"), ("optimizer", "adamw-8bit"), ("master_weights", "none"),
          ("grad_dtype", "fp32"), ("grad_dtype", "bf16"), ("loss", "chunked"), ("fp8_params", True),
          ("bf16_layers", 2), ("fp8_attention", True), ("kernels", "eager"), ("kernels", "fused"),
          ("cuda_graphs", "partial"), ("cuda_graphs", "full"), ("moe_dispatcher", "deepep"),
          ("fused_grouped_mlp", True), ("finetune", {"method": "lora"}), ("offload", "optimizer"),
          ("offload", "activations"), ("recompute_layers", 2), ("offload_layers", 2), ("double_quant", False),
          ("memory_headroom", "20%"), ("parallel.zero", 1), ("parallel.zero", 2),
          ("parallel.pipeline_split", "balanced")]


def _with(mapping: dict, path: str, value) -> dict:
    m = copy.deepcopy(mapping)
    d = m
    keys = path.split(".")
    for k in keys[:-1]:
        d = d.setdefault(k, {})
    d[keys[-1]] = value
    return m


def _resolved(s) -> tuple:
    """The step model's view of a scenario, its `auto` gradient dtype as the bytes it resolves to."""
    job = job_of(s)
    return replace(job, grad_dtype=job.grad_bytes), layout_of(s)


def _fingerprint(e) -> tuple:
    """What an estimate shows: its step, memory (with the headroom it keeps free), fit, run totals and warnings."""
    m, t = e.memory, e.training
    return (e.step.time_s, m.per_device_bytes, m.host_bytes, m.fits, e.scenario.memory_headroom_bytes, t.cost_usd,
            t.energy_kwh, tuple(e.warnings))


@pytest.mark.parametrize("base", sorted(BASES))
def test_an_accepted_knob_value_changes_the_estimate_or_a_warning_says_it_does_nothing(base):
    ref_s = scenario_from_mapping(BASES[base], "base")
    ref = _fingerprint(assess(ref_s))
    silent = []
    for path, value in VALUES:
        try:
            s = scenario_from_mapping(_with(BASES[base], path, value), "base")
        except SpecError:
            continue                                   # refused with one line: fine
        if replace(s, derived=ref_s.derived) == ref_s or _resolved(s) == _resolved(ref_s):
            continue                                   # the value the scenario derives (or resolves to) anyway
        e = assess(s)
        knob = path.split(".")[-1]
        if _fingerprint(e) == ref and not any(w.startswith(knob) for w in e.warnings):
            silent.append(f"{path}={value!r}")
    assert not silent, f"{base}: accepted with no effect and no warning: {', '.join(silent)}"
