"""The roofline of every operation (trainest/step/ops.py, `trainest estimate --ops`, docs/model.md §2.8)."""

from __future__ import annotations

import json

import pytest
from helpers import call_entry

from trainest.estimate import estimate, estimate_ops
from trainest.scenario import scenario_from_mapping

CASES = {
    "dgx-spark": {"model": "llama3.2-3b", "hardware": "dgx-spark", "devices": 1, "seq_len": 256, "global_batch": 8,
                  "recompute": "full"},
    "gpt3-175b": {"model": "gpt3-175b", "hardware": "a100-80gb-sxm", "devices": 64, "seq_len": 2048,
                  "global_batch": 64, "parallel": {"tp": 8, "pp": 8, "vpp": 3, "sequence_parallel": True},
                  "recompute": "selective"},
    "qlora-zero3-tp": {"model": "llama3-8b", "devices": 8, "parallel": {"zero": 3, "tp": 2}, "global_batch": 32,
                       "finetune": "qlora", "seq_len": 2048},
    "offload": {"model": "llama3-8b", "hardware": "gh200", "devices": 1, "seq_len": 4096, "global_batch": 8,
                "offload": "optimizer+weights", "recompute": "full"},
    # standard attention with context parallelism: DeepSpeed's (Megatron-Core's runs fused kernels only: rules.py)
    "standard-cp-dp": {"model": "llama3-8b", "devices": 16, "parallel": {"cp": 2, "zero": 1}, "seq_len": 8192,
                       "attention": "standard", "global_batch": 16, "framework": "deepspeed"},
}


@pytest.mark.parametrize("name", list(CASES))
def test_ops_add_up_to_the_step(name):
    s = scenario_from_mapping(CASES[name])
    ops, _ = estimate_ops(s)
    assert sum(o.exposed_s for o in ops) == pytest.approx(estimate(s).step.time_s, rel=1e-12)
    assert all(o.exposed_s <= o.time_s * (1 + 1e-12) + 1e-15 for o in ops)


@pytest.mark.parametrize("name", list(CASES))
def test_an_op_is_compute_bound_exactly_when_its_intensity_reaches_its_ridge(name):
    ops, _ = estimate_ops(scenario_from_mapping(CASES[name]))
    for o in ops:
        if o.intensity is not None and o.ridge is not None:
            assert (o.bound == "compute") == (o.intensity >= o.ridge * (1 - 1e-12)), o


def test_small_tokens_on_dgx_spark_make_the_gemms_memory_bound_and_a_big_batch_compute_bound():
    """At T = 256 tokens a GEMM does ~T FLOPs per weight byte, below the Spark's ridge (~270 FLOP/B
    achievable at this shape): memory-bound; at b = 16 (T = 4096) compute-bound."""
    small, _ = estimate_ops(scenario_from_mapping(CASES["dgx-spark"]))
    big, _ = estimate_ops(scenario_from_mapping({**CASES["dgx-spark"], "micro_batch": 16, "global_batch": 16}))
    pick = {(o.name, o.phase): o for o in small}, {(o.name, o.phase): o for o in big}
    assert pick[0][("mlp_up", "forward")].bound == "memory"
    assert pick[1][("mlp_up", "forward")].bound == "compute"


def test_the_roofline_names_the_memory_kind_and_the_ridge():
    _, roof = estimate_ops(scenario_from_mapping(CASES["dgx-spark"]))
    assert roof.memory_kind == "LPDDR5X unified"
    assert roof.ridge_peak["bf16"] == pytest.approx(125e12 / 273e9)


def test_ops_json_only_when_asked(capsys):
    code, out, _ = call_entry(["estimate", "--json"], capsys)
    assert code == 0 and "ops" not in json.loads(out)
    code, out, _ = call_entry(["estimate", "--json", "--ops", "--model", "llama3.2-3b", "--hardware", "dgx-spark",
                               "--devices", "1", "--seq-len", "256", "--global-batch", "8"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["ops"] and doc["roofline"]["memory_kind"] == "LPDDR5X unified"
    assert sum(o["share"] for o in doc["ops"]) == pytest.approx(1.0)


def test_ops_table_and_memory_kind_in_the_bottleneck_line(capsys):
    code, out, _ = call_entry(["estimate", "--ops", "--model", "llama3.2-3b", "--hardware", "dgx-spark", "--devices",
                               "1", "--seq-len", "256", "--global-batch", "8"], capsys)
    assert code == 0
    assert "Operations on the roofline: LPDDR5X unified" in out
    words = " ".join(out.split())       # the step line wraps at the console's width (issue 36 lengthened it)
    assert "bottleneck: memory (LPDDR5X unified)" in words and "HBM" not in out
