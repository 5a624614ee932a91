"""Users' runs files from frameworks and clusters trainest has not seen: their metrics are converted in the
source's own convention (MoE FLOPs, PaLM/torchtitan MFU, tokens/s per device), the keys and names such a user
naturally writes get a one-line error that names the right one, and what the comparison rests on is shown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from trainest.cli import app

MIXTRAL = {"id": "mx", "model": "mixtral-8x7b", "seq_len": 4096, "hardware": "a100-80gb-sxm", "devices": 64,
           "precision": "bf16", "framework": "megatron-core", "parallel": {"dp": 64, "ep": 8, "zero": 1},
           "micro_batch": 1, "global_batch": 512, "recompute": "full", "measured": {"step_time_s": 10.0}}
LLAMA = {"id": "l8", "model": "llama3-8b", "seq_len": 8192, "hardware": "h100-sxm", "devices": 8,
         "precision": "bf16", "framework": "torchtitan", "parallel": {"dp": 8, "zero": 3}, "micro_batch": 1,
         "global_batch": 8, "recompute": "op", "measured": {"tokens_per_s": 50400}}


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def runs_file(tmp_path: Path, *runs: dict, name: str = "mine.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"source": "my cluster", "runs": list(runs)}))
    return str(path)


def one_error(r) -> str:
    assert r.exit_code == 1 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr
    return lines[0]


def measured_step_s(tmp_path: Path, rec: dict, name: str) -> float:
    r = run("validate", "--runs", runs_file(tmp_path, rec, name=name), "--json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)["runs"][0]["measured_step_s"]


def tokens_per_step(rec: dict) -> float:
    return rec["global_batch"] * rec["seq_len"]


# ------------------------------------------------------------------ FLOP conventions of a mixture of experts

def test_an_moe_mfu_counts_the_experts_each_token_goes_to(tmp_path):
    """6n of Mixtral is 6 x its 12.7 B active matmul parameters per token, not a dense model's with one
    expert's MLP (7.2 B: a step 1.8x too short, an error of -46 % on a run predicted within 5 %)."""
    from trainest.catalog import load_hardware, load_model
    m, peak = load_model("mixtral-8x7b"), load_hardware("a100-80gb-sxm").peak("bf16")
    active_matmul = m.active_params - m.vocab * m.hidden - m.hidden     # the input embedding and final norm
    flops = 6 * active_matmul * tokens_per_step(MIXTRAL)
    step = measured_step_s(tmp_path, {**MIXTRAL, "measured": {"mfu": 0.3, "flops_formula": "6n"}}, "a.yaml")
    assert step == pytest.approx(flops / (0.3 * 64 * peak), rel=1e-3)


@pytest.mark.parametrize("formula", ["megatron-core", "narayanan-eq3", "llm-foundry", "maxtext"])
def test_a_dense_flops_formula_on_an_moe_run_is_an_error(tmp_path, formula):
    rec = {**MIXTRAL, "measured": {"tflops_per_device": 90, "flops_formula": formula}}
    line = one_error(run("validate", "--runs", runs_file(tmp_path, rec)))
    assert "'mx'" in line and formula in line and "mixture of experts" in line and "6n, palm, torchtitan" in line


def test_calibrate_refuses_a_dense_formula_on_an_moe_run(tmp_path):
    rec = {**MIXTRAL, "measured": {"mfu": 0.3, "flops_formula": "megatron-core"}}
    line = one_error(run("calibrate", "--runs", runs_file(tmp_path, rec), "-o", str(tmp_path / "p.yaml")))
    assert "flops_formula" in line and "mixture of experts" in line


# ------------------------------------------------------------------------------ PaLM / torchtitan MFU

def test_torchtitan_mfu_is_palms_count(tmp_path):
    """torchtitan's MFU: 6 x non-embedding parameters + 12 l a d s per token, against the bf16 peak."""
    from trainest.catalog import load_hardware
    n = 32 * (4096 * 4096 * 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 128256 * 4096
    per_token = 6 * n + 12 * 32 * 32 * 128 * 8192
    peak = load_hardware("h100-sxm").peak("bf16")
    for formula in ("torchtitan", "palm"):
        rec = {**LLAMA, "measured": {"mfu": 0.4, "flops_formula": formula}}
        step = measured_step_s(tmp_path, rec, f"{formula}.yaml")
        assert step == pytest.approx(per_token * tokens_per_step(LLAMA) / (0.4 * 8 * peak), rel=1e-9)
