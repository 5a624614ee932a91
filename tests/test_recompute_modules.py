"""Megatron-Core's recompute modules (docs/model.md §2.6): what selective recompute re-runs costs time
and saves memory, module by module; the default is the attention core; bad input is one clear line."""

from __future__ import annotations

import json

import pytest
from helpers import call_entry

from trainest.estimate import estimate
from trainest.scenario import scenario_from_mapping
from trainest.errors import SpecError

DSV3 = {"model": "deepseek-v3", "hardware": "h100-sxm", "devices": 1024, "precision": "fp8", "global_batch": 8192,
        "seq_len": 4096, "micro_batch": 1, "recompute": "selective",
        "parallel": {"tp": 1, "pp": 16, "ep": 64, "zero": 1, "pipeline_split": "balanced"}}
LLAMA = {"model": "llama3-8b", "hardware": "h100-sxm", "devices": 8, "global_batch": 64, "micro_batch": 2,
         "recompute": "selective", "parallel": {"tp": 1, "pp": 1, "zero": 1}}


def _est(base, modules=None, **over):
    data = {**base, **over}
    if modules is not None:
        data["recompute_modules"] = modules
    return estimate(scenario_from_mapping(data))


def test_the_default_is_the_attention_core():
    for base in (DSV3, LLAMA):
        default, named = _est(base), _est(base, ["core_attn"])
        assert named.step.time_s == default.step.time_s
        assert named.memory.per_device_bytes == default.memory.per_device_bytes


@pytest.mark.parametrize("base,module", [(DSV3, "layernorm"), (DSV3, "mla_up_proj"), (DSV3, "moe_act"),
                                         (DSV3, "shared_experts"), (DSV3, "mlp"), (DSV3, "moe"),
                                         (LLAMA, "layernorm"), (LLAMA, "mlp")])
def test_each_module_costs_time_and_saves_activations(base, module):
    core = _est(base, ["core_attn"])
    more = _est(base, ["core_attn", module])
    assert more.memory.activations_bytes < core.memory.activations_bytes
    assert more.step.time_s > core.step.time_s
    assert more.throughput.mfu < core.throughput.mfu
    flops = [e.throughput.hardware_tflops_per_device * e.step.time_s for e in (core, more)]
    if module in ("mla_up_proj", "mlp", "shared_experts", "moe"):   # GEMMs re-run: more hardware FLOPs
        assert flops[1] > flops[0] * (1 + 1e-9)
    else:                                                           # norms and activations: none
        assert flops[1] == pytest.approx(flops[0], rel=1e-12)
    assert more.step.host_time_s >= core.step.host_time_s


def test_what_mla_up_projection_recompute_drops_is_its_per_head_tensors():
    """e·T·(a/t)·(2·d_qk + d_n + d_v) per MoE/dense layer and micro-batch, over the stage's in-flight layers."""
    core, mla = _est(DSV3, ["core_attn"]), _est(DSV3, ["core_attn", "mla_up_proj"])
    per_layer = 2 * 4096 * 128 * (2 * 192 + 128 + 128)
    saved = core.memory.activations_bytes - mla.memory.activations_bytes
    assert saved == pytest.approx(per_layer * round(saved / per_layer), rel=1e-9) and saved >= per_layer


def test_recomputing_the_moe_block_runs_its_all_to_alls_again_as_full_recompute_does():
    from trainest.scenario import job_of, layout_of
    from trainest.step.compose import layer_terms
    core, moe, full = _est(DSV3, ["core_attn"]), _est(DSV3, ["core_attn", "moe"]), _est({**DSV3, "recompute": "full"})
    # a layer pass's all-to-alls (the step's detail is the slowest stage's, and which stage that is may change
    # with the recompute: the balanced split's last stage holds fewer layers and the output layer)
    ep = [layer_terms(job_of(e.scenario), layout_of(e.scenario)).mean.ep_total_s for e in (core, moe, full)]
    assert ep[1] == pytest.approx(ep[2], rel=1e-9) and ep[1] == pytest.approx(1.5 * ep[0], rel=1e-9)   # 6 of 4
    assert moe.memory.activations_bytes < _est(DSV3, ["core_attn", "moe_act", "shared_experts"]).memory.activations_bytes
    assert full.memory.activations_bytes < moe.memory.activations_bytes


def test_deepseek_v3_fits_an_80gb_device_with_its_recipes_modules():
    """DeepSeek-V3 trained on 80 GB H800s recomputing RMSNorm and the MLA up-projections (DeepSeek-AI 2024)."""
    h800 = {**DSV3, "hardware": "h800-sxm", "devices": 2048, "global_batch": 15360, "adam_moments": "bf16",
            "parallel": {**DSV3["parallel"], "moe_overlap": "deepep"}}
    assert not _est(h800).memory.fits
    assert _est(h800, ["layernorm", "mla_up_proj", "moe_act"]).memory.fits


@pytest.mark.parametrize("base,modules,words", [
    (LLAMA, ["core_attn", "bogus"], "unknown module 'bogus'; allowed: core_attn, layernorm"),
    (LLAMA, ["mla_up_proj"], "mla_up_proj cannot be recomputed: llama3-8b has no multi-head latent attention"),
    (LLAMA, ["moe_act"], "moe_act cannot be recomputed: llama3-8b has no mixture-of-experts layers"),
    (LLAMA, ["moe"], "moe cannot be recomputed: llama3-8b has no mixture-of-experts layers"),
    ({**LLAMA, "model": "qwen3-30b-a3b"}, ["mlp"], "has no dense MLP layers"),
    ({**LLAMA, "recompute": "full"}, ["layernorm"], "recompute is 'full'; use recompute: selective"),
    (LLAMA, [], "no module given"),
])
def test_bad_modules_are_refused_with_what_is_allowed(base, modules, words):
    with pytest.raises(SpecError, match=words.replace("(", r"\(").replace(")", r"\)")):
        _est(base, modules)


def test_the_cli_takes_a_comma_list_echoes_it_and_refuses_bad_names(capsys):
    # (tp 2: a layout that fits, so no no-fit advice searches for one)
    args = ["estimate", "--model", "deepseek-v3", "--hardware", "h100-sxm", "--devices", "1024", "--tp", "2", "--pp",
            "16", "--pipeline-split", "balanced", "--ep", "64", "--precision", "fp8", "--global-batch", "8192"]
    code, out, err = call_entry(args + ["--recompute-modules", "layernorm,mla_up_proj", "--json"], capsys)
    assert code == 0
    assert json.loads(out)["inputs"]["recompute_modules"] == ["layernorm", "mla_up_proj"]
    code, out, err = call_entry(args + ["--recompute-modules", "layernorm"], capsys)
    assert code == 0 and "selective of layernorm" in out
    code, out, err = call_entry(args + ["--recompute-modules", "layernorm,nope"], capsys)
    assert code != 0 and out == "" and "unknown module 'nope'" in err and len(err.strip().splitlines()) == 1


def test_plan_searches_with_the_modules_and_its_winner_reproduces(capsys):
    job = ["--model", "deepseek-v3", "--hardware", "h100-sxm", "--precision", "fp8", "--global-batch", "8192"]
    code, out, _ = call_entry(["plan", *job, "--devices", "1024", "--recompute-modules", "layernorm,mla_up_proj,moe_act",
                               "--allow", "tp=1,2", "--allow", "pp=8,16", "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["job"]["recompute_modules"] == ["layernorm", "mla_up_proj", "moe_act"]
    for plan in doc["plans"]:
        args = plan["estimate_args"]
        assert ("--recompute-modules" in args) == (plan["recompute"] == "selective")
    winner = doc["plans"][0]
    code, out, _ = call_entry(["estimate", *job, *winner["estimate_args"], "--json"], capsys)
    assert code == 0
    assert json.loads(out)["step"]["time_s"] == pytest.approx(winner["step"]["time_s"], rel=1e-9)


def test_the_does_not_fit_advice_names_the_cheap_modules_where_they_make_it_fit():
    from trainest.advice import _fitting_single_changes, cheap_recompute_modules
    h800 = scenario_from_mapping({**DSV3, "hardware": "h800-sxm", "devices": 2048, "global_batch": 15360,
                                  "adam_moments": "bf16", "parallel": {**DSV3["parallel"], "moe_overlap": "deepep"}})
    assert cheap_recompute_modules(h800) == ("layernorm", "mla_up_proj", "moe_act")
    assert "--recompute-modules layernorm,mla_up_proj,moe_act" in _fitting_single_changes(h800)
    given = scenario_from_mapping({**DSV3, "recompute_modules": ["layernorm"]})     # given: not suggested again
    assert not any("--recompute-modules" in f for f in _fitting_single_changes(given))
    dense = scenario_from_mapping(LLAMA)
    assert cheap_recompute_modules(dense) == ()


def test_plan_notes_a_better_plan_with_the_cheap_modules_and_says_nothing_when_they_are_given(capsys):
    job = ["--model", "deepseek-v3", "--hardware", "h100-sxm", "--precision", "fp8", "--global-batch", "8192",
           "--devices", "1024", "--allow", "tp=1,2", "--allow", "pp=8,16", "--json"]
    code, out, _ = call_entry(["plan", *job], capsys)
    assert code == 0
    doc = json.loads(out)
    notes = [w for w in doc["warnings"] if w.startswith("note: selective recompute of layernorm, mla_up_proj, moe_act")]
    assert len(notes) == 1
    # the options end at the parenthesis (the note may go on: other warnings of the better plan follow it)
    args = notes[0].split("(estimate options ")[1].split(")")[0].split()
    code, out, _ = call_entry(["estimate", "--model", "deepseek-v3", "--hardware", "h100-sxm", "--precision", "fp8",
                               *args, "--json"], capsys)
    assert code == 0 and json.loads(out)["step"]["time_s"] < doc["plans"][0]["step"]["time_s"]
    # no note of the cheap modules (other notes, such as an uneven pipeline's better layout, may stand)
    cheap = "note: selective recompute of"
    code, out, _ = call_entry(["plan", *job, "--recompute-modules", "layernorm"], capsys)
    assert code == 0 and not any(w.startswith(cheap) for w in json.loads(out)["warnings"])
    code, out, _ = call_entry(["plan", "--model", "llama3-8b", "--devices", "8", "--global-batch", "64", "--json"], capsys)
    assert code == 0 and not any(w.startswith(cheap) for w in json.loads(out)["warnings"])
