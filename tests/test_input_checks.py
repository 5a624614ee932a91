"""Input checks shared by estimate, plan, compare and sweep (moe.md M3, M5, M6, M9, M10; physics.md P5):
every command refuses what `estimate` refuses, with one line that names the option and what is allowed."""

from __future__ import annotations

import pytest
from helpers import call_entry
from test_bad_input import assert_clean_failure


def flat(text: str) -> str:
    """Text with the table's box characters and line wraps removed."""
    return " ".join(text.replace("│", " ").split())


def fails(capsys, args: list[str], *words: str) -> str:
    code, out, err = call_entry(args, capsys)
    assert_clean_failure(code, out, err, 1, words)
    return err


# ------------------------------------------------------------------ M3: a config's keys, checked by every command

BAD_CONFIGS = [
    ("top-level-ep", "model: mixtral-8x7b\nseq_len: 4096\nep: 8\n", ("unknown key 'ep'",)),
    ("parallel-epp", "model: mixtral-8x7b\nseq_len: 4096\nparallel:\n  epp: 4\n", ("parallel", "unknown key 'epp'")),
    ("recompute-modul", "model: mixtral-8x7b\nrecompute_modul: [moe]\n", ("unknown key 'recompute_modul'",
                                                                          "recompute_modules")),
]
COMMANDS = [
    ["estimate"],
    ["plan", "--devices", "8"],
    ["compare", "--devices", "8", "--hardware", "h100-sxm,b200"],
    ["sweep", "--devices", "8..16"],
    ["sweep", "--devices", "8..16", "--plan"],
]


@pytest.mark.parametrize("text,words", [c[1:] for c in BAD_CONFIGS], ids=[c[0] for c in BAD_CONFIGS])
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: "-".join(c[:2]))
def test_every_command_refuses_unknown_config_keys(tmp_path, capsys, command, text, words):
    path = tmp_path / "scen.yaml"
    path.write_text(text, encoding="utf-8")
    fails(capsys, [command[0], "--config", str(path), *command[1:]], "scen.yaml", *words)


# ------------------------------------------------------------------ M5, M10: expert tensor parallelism as plan searches it

@pytest.mark.parametrize("args,words", [
    (["--model", "mixtral-8x7b", "--etp", "3", "--devices", "6"], ("--etp: 3", "expert_ffn_hidden=14336", "allowed")),
    (["--model", "qwen3-30b-a3b", "--etp", "5", "--devices", "5"], ("--etp: 5", "expert_ffn_hidden=768")),
    (["--model", "mixtral-8x7b", "--etp", "7", "--devices", "7"], ("--etp: 7", "tp=1", "allowed with tp=1: 1")),
    (["--model", "mixtral-8x7b", "--tp", "2", "--etp", "4", "--devices", "8"], ("--etp: 4", "does not divide tp=2",
                                                                                "1, 2")),
    # the pair is blamed, with the values each may take given the other
    (["--model", "mixtral-8x7b", "--tp", "2", "--ep", "8", "--etp", "2", "--devices", "8"],
     ("--ep, --etp: ep·etp = 8·2 = 16", "8 ranks", "with --etp 2: --ep 1, 2, 4", "with --ep 8: --etp 1")),
])
def test_estimate_takes_only_the_expert_layouts_plan_searches(capsys, args, words):
    fails(capsys, ["estimate", *args], *words)


def test_every_expert_layout_plan_picks_is_one_estimate_takes():
    """expert_layouts (the search) and the scenario check accept the same (ep, etp)."""
    from trainest.errors import SpecError
    from trainest.scenario import scenario_from_mapping
    from trainest.search import SearchSpace, expert_layouts, job_scenario
    base = job_scenario({"model": "mixtral-8x7b", "global_batch": 64})
    for tp in (1, 2, 4, 8):
        pairs = set(expert_layouts(base, 16, tp, SearchSpace()))
        for ep in (1, 2, 3, 4, 8, 16):
            for etp in (1, 2, 3, 4, 7, 8):
                try:
                    scenario_from_mapping({"model": "mixtral-8x7b", "devices": 16, "global_batch": 64,
                                           "parallel": {"tp": tp, "ep": ep, "etp": etp}})
                    ok = True
                except SpecError:
                    ok = False
                assert ok == ((ep, etp) in pairs), (tp, ep, etp)


# ------------------------------------------------------------------ M6: --allow ep= / etp= values no plan can take

@pytest.mark.parametrize("args,words", [
    (["--model", "mixtral-8x7b", "--allow", "ep=3"], ("--allow ep=3", "8 experts", "allowed: 1, 2, 4, 8")),
    (["--model", "mixtral-8x7b", "--allow", "ep=16"], ("--allow ep=16", "8 experts", "allowed: 1, 2, 4, 8")),
    (["--model", "mixtral-8x7b", "--allow", "etp=3"], ("--allow etp=3", "expert_ffn_hidden=14336",
                                                       "allowed: 1, 2, 4, 8")),
    (["--model", "llama3-8b", "--allow", "ep=2"], ("--allow ep=2", "llama3-8b is dense", "allowed: 1")),
    (["--model", "mixtral-8x7b", "--devices", "16", "--global-batch", "256", "--allow", "tp=1", "--allow", "etp=2"],
     ("--allow etp=2", "tp searched: 1", "allowed: 1")),
])
def test_plan_names_an_impossible_expert_allow_value(capsys, args, words):
    fails(capsys, ["plan", "--devices", "8", *args], *words)


# ------------------------------------------------------------------ M9: plan and compare take the shape overrides

def test_plan_takes_the_moe_overrides_and_its_reproduce_line_carries_them(capsys):
    import json
    args = ["--model", "mixtral-8x7b", "--devices", "16", "--global-batch", "64", "--top", "1", "--json"]
    code, out, err = call_entry(["plan", *args], capsys)
    assert code == 0, err
    plain = json.loads(out)["plans"][0]["step"]["time_s"]
    for extra in (["--moe-imbalance", "1.5"], ["--experts", "4", "--top-k", "1"], ["--expert-ffn-hidden", "7168"]):
        code, out, err = call_entry(["plan", *args, *extra], capsys)
        assert code == 0, err
        doc = json.loads(out)
        assert doc["plans"][0]["step"]["time_s"] != plain, extra
    code, out, err = call_entry(["plan", *args[:-1], "--moe-imbalance", "1.5"], capsys)
    assert code == 0 and "--moe-imbalance 1.5" in flat(out)
    code, out, err = call_entry(["compare", "--model", "mixtral-8x7b", "--experts", "4", "--devices", "16",
                                 "--global-batch", "64", "--hardware", "h100-sxm,b200", "--json"], capsys)
    assert code == 0, err


def test_plan_refuses_a_bad_moe_override_as_estimate_does(capsys):
    fails(capsys, ["plan", "--model", "mixtral-8x7b", "--top-k", "9"], "--top-k: 9", "experts=8")


# ------------------------------------------------------------------ P5: what the named framework can run

@pytest.mark.parametrize("args,words", [
    (["--model", "llama3-70b", "--devices", "64", "--framework", "megatron-deepspeed", "--tp", "8", "--pp", "4",
      "--zero", "2", "--sequence-parallel", "--global-batch", "64"],
     ("--zero 2 with --pp 4", "megatron-deepspeed", "PipelineEngine", "allowed with a pipeline: --zero 0, 1")),
    (["--model", "llama3-70b", "--devices", "64", "--framework", "deepspeed", "--pp", "4", "--zero", "3",
      "--global-batch", "64"], ("--zero 3 with --pp 4", "deepspeed", "--zero 0, 1", "--pp 1")),
    (["--framework", "torchtitan", "--zero", "1"], ("--zero 1", "torchtitan has no ZeRO-1", "--zero 0, 2, 3")),
    (["--framework", "olmo-core", "--zero", "2"], ("--zero 2", "olmo-core has no ZeRO-2", "--zero 0, 3")),
    (["--framework", "llm-foundry", "--pp", "2"], ("--pp 2", "llm-foundry has no pipeline parallelism", "--pp 1")),
    (["--framework", "hf-accelerate", "--pp", "2"], ("--pp 2", "hf-accelerate has no pipeline")),
])
def test_estimate_refuses_a_layout_the_framework_cannot_run(capsys, args, words):
    fails(capsys, ["estimate", *args], *words)


def test_a_framework_file_error_names_the_keys(tmp_path, capsys):
    path = tmp_path / "scen.yaml"
    path.write_text("framework: deepspeed\ndevices: 8\nparallel:\n  pp: 2\n  zero: 2\n", encoding="utf-8")
    fails(capsys, ["estimate", "--config", str(path)], "parallel.zero 2 with parallel.pp 2", "scen.yaml")


@pytest.mark.parametrize("framework,pp,zero", [("torchtitan", 2, 3), ("olmo-core", 2, 3), ("deepspeed", 2, 1),
                                               ("megatron-core", 2, 1), ("llm-foundry", 1, 3)])
def test_the_default_zero_stage_is_one_the_framework_runs(framework, pp, zero):
    from trainest.scenario import scenario_from_mapping
    s = scenario_from_mapping({"framework": framework, "devices": 8, "parallel": {"pp": pp}})
    assert s.parallel.zero == zero and "parallel.zero" in s.derived


@pytest.mark.parametrize("framework,allowed", [
    ("deepspeed", lambda pp, z: pp == 1 or z <= 1),
    ("megatron-deepspeed", lambda pp, z: pp == 1 or z <= 1),
    ("torchtitan", lambda pp, z: z != 1),
    ("olmo-core", lambda pp, z: z in (0, 3)),
    ("llm-foundry", lambda pp, z: pp == 1 and z != 1),
])
def test_plan_searches_only_what_the_framework_runs(framework, allowed):
    """Every plan evaluated (not only the winner) is one the framework runs, and each of its layouts is one
    `estimate` accepts."""
    from trainest.frameworks import FRAMEWORKS
    from trainest.search import SearchSpace, enumerate_plans, job_scenario
    base = job_scenario({"model": "llama3-8b", "framework": framework, "global_batch": 64})
    g = enumerate_plans(base, 16, SearchSpace())
    pairs = set(zip(g.pp.astype(int).tolist(), g.zero.astype(int).tolist(), strict=True))
    assert pairs and all(allowed(pp, z) for pp, z in pairs), sorted(pairs)
    fw = FRAMEWORKS[framework]
    assert {z for _, z in pairs} <= set(fw.zero_stages)
    assert (max(pp for pp, _ in pairs) > 1) == fw.pipeline


@pytest.mark.parametrize("framework,allow,words", [
    ("torchtitan", ["zero=1"], ("--allow zero=1", "torchtitan has no ZeRO-1", "allowed under it: 0, 2, 3")),
    ("llm-foundry", ["pp=2,4"], ("--allow pp=2,4", "no pipeline parallelism")),
    ("deepspeed", ["pp=2", "zero=2,3"], ("--allow zero=2,3 with pp=2", "allowed with a pipeline: 0, 1")),
])
def test_plan_allow_of_what_the_framework_lacks_is_an_error(capsys, framework, allow, words):
    fails(capsys, ["plan", "--framework", framework, *[w for a in allow for w in ("--allow", a)]], *words)


def test_every_bundled_run_is_a_layout_its_framework_runs():
    """The capability data holds what the sources ran: every measured run's (framework, pp, ZeRO)."""
    from trainest.frameworks import FRAMEWORKS
    from helpers import bundled_cases
    for case in bundled_cases():
        s = case.scenario
        assert s.parallel.zero in FRAMEWORKS[s.framework].zero_stages_with(s.parallel.pp), case


def test_list_frameworks_shows_the_zero_stages(capsys):
    import json
    code, out, err = call_entry(["list", "frameworks", "--json"], capsys)
    rows = {r["name"]: r for r in json.loads(out)["frameworks"]}
    assert rows["deepspeed"]["zero_stages"] == [0, 1, 2, 3] and rows["deepspeed"]["pp_zero_stages"] == [0, 1]
    assert rows["llm-foundry"]["pipeline"] is False and rows["llm-foundry"]["pp_zero_stages"] == []
    code, out, err = call_entry(["list", "frameworks"], capsys)
    assert code == 0 and "0-3, pp: 0,1" in flat(out) and "0,2,3, no pp" in flat(out)


# ------------------------------------------------------------------ P-minor: fp8 where it has no higher peak

@pytest.mark.parametrize("hardware,precision,warned", [("gaudi3", "fp8", True), ("tpu-v6e", "fp8", True),
                                                       ("h100-sxm", "fp8", False), ("gaudi3", "bf16", False)])
def test_low_precision_without_a_higher_peak_warns(capsys, hardware, precision, warned):
    import json
    code, out, err = call_entry(["estimate", "--hardware", hardware, "--precision", precision, "--json"], capsys)
    assert code == 0, err
    said = [w for w in json.loads(out)["warnings"] if "buys no GEMM speed" in w]
    assert bool(said) == warned and (not warned or f"its {precision} peak" in said[0])
    code, out, err = call_entry(["plan", "--hardware", hardware, "--precision", precision, "--top", "1", "--devices", "16"],
                                capsys)
    assert code == 0 and ("buys no GEMM speed" in flat(err)) == warned


# ------------------------------------------------------------------ M10: error texts that say what the user can change

@pytest.mark.parametrize("args,words,absent", [
    (["--model", "deepseek-v3", "--experts", "8", "--top-k", "8"],
     ("--top-k: 8 with 8 experts", "within 4 of 8 expert groups", "at most 4", "at least 16 experts"),
     ("options.moe", "8 to 8")),
    (["--model", "deepseek-v3", "--experts", "12"], ("--experts: 12", "8 equal groups", "a multiple of 8"), ()),
    (["--model", "llama3-8b", "--top-k", "2"], ("--top-k: needs a mixture-of-experts model", "llama3-8b is dense"), ()),
    (["--model", "deepseek-v3", "--pipeline-layout", "Et*4|(t*4|)*13tmL", "--devices", "64"],
     ("--pipeline-layout", "57 decoder layers", "layers=61"), ("divisible",)),
    (["--model", "llama3-8b", "--moe-overlap", "deepep"], ("--moe-overlap: deepep", "llama3-8b is dense",
                                                           "allowed: none"), ()),
])
def test_error_names_what_to_change(capsys, args, words, absent):
    err = fails(capsys, ["estimate", *args], *words)
    assert not any(a in err for a in absent), err


def test_a_config_error_names_the_files_key(tmp_path, capsys):
    import json
    from pathlib import Path
    data = json.loads((Path(__file__).parent / "hf_configs" / "Mixtral-8x7B-v0.1" / "config.json").read_text())
    folder = tmp_path / "topk9"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**data, "num_experts_per_tok": 9}), encoding="utf-8")
    fails(capsys, ["estimate", "--model", str(folder / "config.json")], "config.json.num_experts_per_tok", ": 9",
          "at most experts=8")
