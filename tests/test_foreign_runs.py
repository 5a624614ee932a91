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


# ------------------------------------------------------------------------------------ tokens/s per device

def test_tokens_per_s_per_device_is_one_devices_share(tmp_path):
    total = measured_step_s(tmp_path, LLAMA, "total.yaml")
    per_device = measured_step_s(tmp_path, {**LLAMA, "measured": {"tokens_per_s_per_device": 50400 / 8}}, "pd.yaml")
    assert per_device == pytest.approx(total, rel=1e-12)
    doc = json.loads(run("validate", "--runs", str(tmp_path / "pd.yaml"), "--json").stdout)
    assert doc["runs"][0]["metric"] == "tokens_per_s_per_device"
    assert doc["runs"][0]["predicted"] == pytest.approx(doc["runs"][0]["predicted_step_s"] ** -1 * 8192 * 8 / 8)


def test_a_whole_jobs_tokens_per_s_given_per_device_is_an_error(tmp_path):
    line = one_error(run("validate", "--runs", runs_file(tmp_path, {**LLAMA, "measured": {
        "tokens_per_s_per_device": 50400 * 8}})))
    assert "tokens_per_s_per_device" in line and "one device's" in line


# --------------------------------------------------- other tools' names: one line naming trainest's name

@pytest.mark.parametrize("key, value, named", [
    ("seq_length", 8192, "'seq_len'"), ("max_seq_length", 8192, "'seq_len'"), ("sequence_length", 8192, "'seq_len'"),
    ("global_batch_size", 8, "'global_batch'"), ("micro_batch_size", 1, "'micro_batch'"),
    ("gradient_accumulation_steps", 4, "gradient_accumulation_steps, in sequences"), ("num_gpus", 8, "'devices'"),
], ids=lambda x: str(x))
def test_another_tools_run_key_names_trainests(tmp_path, key, value, named):
    line = one_error(run("validate", "--runs", runs_file(tmp_path, {**LLAMA, key: value})))
    assert f"unknown key {key!r}" in line and named in line


@pytest.mark.parametrize("measured, named", [
    ({"step_time_ms": 1300}, "'step_time_s'? in seconds: the milliseconds / 1000"),
    ({"tps": 6300}, "'tokens_per_s_per_device'"), ({"tokens_per_s_per_gpu": 6300}, "'tokens_per_s_per_device'"),
    ({"tflops_per_gpu": 400}, "'tflops_per_device'"), ({"mfu_pct": 40}, "a fraction"),
], ids=lambda x: str(x))
def test_another_tools_measured_key_names_trainests(tmp_path, measured, named):
    line = one_error(run("validate", "--runs", runs_file(tmp_path, {**LLAMA, "measured": measured})))
    assert "unknown key" in line and named in line


def test_another_tools_parallel_key_names_trainests(tmp_path):
    line = one_error(run("validate", "--runs", runs_file(tmp_path, {**LLAMA, "parallel": {
        "tensor_model_parallel_size": 1}})))
    assert "'tensor_model_parallel_size'" in line and "did you mean 'tp'" in line


@pytest.mark.parametrize("framework, named", [("composer", "llm-foundry"), ("accelerate", "hf-accelerate"),
                                              ("megatron-lm", "megatron-core"), ("deepspeed-moe", "deepspeed"),
                                              ("megablocks", "Megablocks is an MoE layer")])
def test_a_framework_by_another_name_is_an_error_naming_trainests(tmp_path, framework, named):
    line = one_error(run("validate", "--runs", runs_file(tmp_path, {**LLAMA, "framework": framework})))
    assert f"{framework!r} is not allowed" in line and named in line and "'l8'" in line


@pytest.mark.parametrize("name, entry", [("NVIDIA H100 80GB HBM3", "h100-sxm"), ("A100-SXM4-40GB", "a100-40gb-sxm"),
                                         ("AMD Instinct MI300X", "mi300x"), ("TPU v5p", "tpu-v5p"),
                                         ("NVIDIA GeForce RTX 4090", "rtx-4090")])
def test_a_device_name_as_nvidia_smi_prints_it_names_the_catalog_entry(tmp_path, name, entry):
    line = one_error(run("validate", "--runs", runs_file(tmp_path, {**LLAMA, "hardware": name})))
    assert f"did you mean {entry!r}?" in line and "'l8'" in line


def test_a_prefix_of_several_hardware_names_lists_them():
    r = run("estimate", "--hardware", "h100")
    assert r.exit_code == 1 and "'h100-pcie'" in r.stderr and "'h100-sxm'" in r.stderr


@pytest.mark.parametrize("model, named", [("meta-llama/Meta-Llama-3-8B", "its preset is 'llama3-8b'"),
                                          ("mistralai/Mixtral-8x7B-v0.1", "its preset is 'mixtral-8x7b'"),
                                          ("deepseek-ai/DeepSeek-V2-Lite", "huggingface-cli download")])
def test_a_hub_model_name_says_what_to_give(tmp_path, model, named):
    line = one_error(run("validate", "--runs", runs_file(tmp_path, {**LLAMA, "model": model})))
    assert "Hugging Face Hub name" in line and named in line and f"model {model!r}" in line


# ---------------------------------------------------------------- what the comparison rests on, in --json

def test_json_carries_warnings_unseen_frameworks_and_uncalibrated_hardware(tmp_path):
    mi300x = {**LLAMA, "id": "amd", "hardware": "mi300x", "framework": "megatron-core", "recompute": "full",
              "measured": {"step_time_s": 2.0, "tokens_per_s": 1000.0}}
    moe = {**MIXTRAL, "framework": "deepspeed", "parallel": {"dp": 64, "ep": 8, "zero": 2}}
    r = run("validate", "--runs", runs_file(tmp_path, mi300x, moe), "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert len(doc["warnings"]) == 1 and "'amd'" in doc["warnings"][0] and "Warning:" in r.stderr
    assert doc["unseen_frameworks"] == {"deepspeed": 1} and doc["moe_unseen_frameworks"] == {"deepspeed": 1}
    assert doc["uncalibrated_hardware"] == {"mi300x": 1}
    assert {x["id"]: x["hardware_calibrated"] for x in doc["runs"]} == {"amd": False, "mx": True}
    text = " ".join(run("validate", "--runs", str(tmp_path / "mine.yaml")).stdout.split())
    assert "No bundled measured mixture-of-experts run uses deepspeed (1 run)" in text
    assert "Efficiencies not fitted on measured runs of this hardware" in text and "mi300x (1 run)" in text
