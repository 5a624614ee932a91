"""Issue 34: --fp8-params, the working weights (and a LoRA's frozen base) stored in FP8 (docs/model.md §7.9)."""

from __future__ import annotations

import pytest

from trainest.errors import SpecError
from trainest.estimate import estimate
from trainest.scenario import scenario_from_mapping

FULL = {"model": "llama3-70b", "hardware": "h100-sxm", "devices": 64, "seq_len": 8192, "precision": "fp8",
        "parallel": {"tp": 8, "pp": 1, "zero": 1}, "micro_batch": 1, "global_batch": 64, "recompute": "full"}
LORA = {"model": "llama2-70b", "hardware": "h200-sxm", "devices": 8, "seq_len": 8192, "precision": "fp8",
        "parallel": {"tp": 1, "pp": 1, "cp": 2, "zero": 0}, "micro_batch": 1, "global_batch": 8, "recompute": "full",
        "finetune": {"method": "lora", "rank": 16, "targets": "attention"}}


def est(data: dict, **changes):
    return estimate(scenario_from_mapping({**data, **changes}, "test"))


def test_fp8_params_halve_the_working_weights_and_keep_the_rest():
    """1 B per working weight instead of 2; gradients and optimizer state (the FP32 master) unchanged."""
    off, on = est(FULL).memory, est(FULL, fp8_params=True).memory
    assert on.weights_bytes == pytest.approx(off.weights_bytes / 2.0, rel=1e-9)
    assert on.gradients_bytes == off.gradients_bytes and on.optimizer_bytes == off.optimizer_bytes


def test_a_lora_base_kept_in_fp8_holds_half_the_bytes():
    """MLPerf's Llama 2 70B LoRA keeps its frozen base in FP8: the base 2 -> 1 B per weight (~128 -> ~64 GiB on one
    device without ZeRO); the adapters' state is unchanged."""
    off, on = est(LORA).memory, est(LORA, fp8_params=True).memory
    saved = off.weights_bytes - on.weights_bytes
    assert saved == pytest.approx(0.5 * off.weights_bytes, rel=0.02)     # the norms and embeddings are few
    assert on.optimizer_bytes == off.optimizer_bytes and on.gradients_bytes == off.gradients_bytes


def test_fp8_params_gather_half_the_bytes_under_zero3():
    """ZeRO-3 all-gathers the weights in FP8: the all-gather time falls, the gradients' reduce-scatter does not."""
    z3 = {**FULL, "parallel": {"tp": 1, "pp": 1, "zero": 3}}
    off, on = est(z3), est(z3, fp8_params=True)
    assert on.memory.weights_bytes < off.memory.weights_bytes
    assert on.step.time_s <= off.step.time_s


def test_fp8_params_change_nothing_when_off():
    base = est(FULL)
    assert est(FULL, fp8_params=False).memory.per_device_bytes == base.memory.per_device_bytes
    assert est(FULL, fp8_params=False).step.time_s == base.step.time_s


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32"])
def test_fp8_params_without_fp8_gemms_are_refused_in_one_line(precision):
    with pytest.raises(SpecError) as err:
        scenario_from_mapping({**FULL, "precision": precision, "fp8_params": True}, "s")
    assert "fp8_params" in str(err.value) and precision in str(err.value) and "\n" not in str(err.value)


def test_fp8_params_is_a_job_knob_of_plan():
    from trainest.knobs import JOB_KEYS
    assert "fp8_params" in JOB_KEYS


def test_megatron_bridge_recipes_with_fp8_param_are_imported_with_fp8_params():
    """A recipe with fp8_param true gives its run fp8_params: true (tools/recipe_settings.py), no longer an
    `unmodelled` setting; every such run is an FP8 or FP4 run (the knob's rule)."""
    import yaml
    runs = yaml.safe_load(open("specs/runs/megatron-bridge.yaml"))["runs"]
    fp8 = [r for r in runs if r.get("fp8_params")]
    assert fp8 and all(r["precision"] in ("fp8", "fp4") for r in fp8)
    assert all("fp8_params true (fp8_param" in r["notes"] for r in fp8)
    assert not [r["id"] for r in runs if any(u.startswith("fp8_param") for u in r.get("unmodelled", []))]
