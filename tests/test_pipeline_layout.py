"""Megatron-Core's pipeline layout string (trainest/pipeline_layout.py, docs/model.md §5.1): its syntax,
the layers each rank gets, the limit cases (a layout that writes out the even or the balanced split is
that split), monotonicity, the echo, and one clear error per rule."""

from __future__ import annotations

import pytest
from helpers import call_entry
from hypothesis import given, settings
from hypothesis import strategies as st

from trainest.errors import SpecError
from trainest.estimate import estimate
from trainest.pipeline_layout import expand, rank_layers
from trainest.scenario import scenario_from_mapping, scenario_mapping

DENSE = {"model": {"layers": 30, "hidden": 2048, "ffn_hidden": 8192, "heads": 16, "vocab": 32000},
         "hardware": "h100-sxm", "devices": 32, "precision": "bf16", "seq_len": 4096, "micro_batch": 1,
         "global_batch": 64, "recompute": "selective", "parallel": {"tp": 2, "pp": 4, "zero": 1}}


def _scenario(base=DENSE, **parallel):
    return scenario_from_mapping({**base, "parallel": {**base["parallel"], **parallel}}, "t")


def test_the_syntax_unrolls_groups_repeats_and_ignores_commas():
    assert expand("Et*4|(t*4|)*2tmL", "t") == ["Etttt", "tttt", "tttt", "tmL"]
    assert expand("E, tt | (t|)*2 L", "t") == ["Ett", "t", "t", "L"]
    assert expand("((t)*2|)*2", "t") == ["tt", "tt", ""]


def test_virtual_stage_i_runs_on_rank_i_mod_p():
    """DeepSeek-V3's Megatron-Bridge layout at pp 16 and at pp 8 with two virtual stages."""
    text = "Et*4|(t*4|)*14tmL"
    assert rank_layers(text, 16, 1, 61, 1, "t") == (4,) * 15 + (1,)
    assert rank_layers(text, 8, 2, 61, 1, "t") == (8,) * 7 + (5,)
    assert sum(rank_layers(text, 2, 8, 61, 1, "t")) == 61


def test_a_layout_of_the_even_split_is_the_even_split():
    base = {**DENSE, "model": {**DENSE["model"], "layers": 32}}
    even = estimate(_scenario(base))
    laid = estimate(_scenario(base, pipeline_layout="Et*8|(t*8|)*2t*8L"))
    assert laid.step.time_s == pytest.approx(even.step.time_s, rel=1e-12)
    assert laid.memory.per_device_bytes == pytest.approx(even.memory.per_device_bytes, rel=1e-12)
    one = {**base, "devices": 8, "global_batch": 16, "parallel": {"tp": 2, "zero": 1}}
    assert estimate(_scenario(one, pipeline_layout="Et*32L")).step.time_s == \
        pytest.approx(estimate(_scenario(one)).step.time_s, rel=1e-12)


def test_a_layout_of_the_balanced_split_is_the_balanced_split():
    """L = 30, p = 4: u = ceil(32/4) = 8 units; the first stage 7 layers and the embedding, the middle
    ones 8, the last 7 and the loss."""
    balanced = estimate(_scenario(pipeline_split="balanced"))
    laid = estimate(_scenario(pipeline_layout="Et*7|t*8|t*8|t*7L"))
    assert laid.step.time_s == pytest.approx(balanced.step.time_s, rel=1e-12)
    assert laid.memory.per_device_bytes == pytest.approx(balanced.memory.per_device_bytes, rel=1e-12)


def test_moving_a_layer_off_the_heaviest_stage_never_slows_the_step():
    heavy = estimate(_scenario(pipeline_layout="Et*6|t*9|t*8|t*7L"))
    lighter = estimate(_scenario(pipeline_layout="Et*7|t*8|t*8|t*7L"))
    assert lighter.step.time_s < heavy.step.time_s
    assert lighter.memory.per_device_bytes <= heavy.memory.per_device_bytes


def test_the_layout_is_echoed_and_loads_again():
    s = _scenario(pipeline_layout="Et*7|t*8|t*8|t*7L")
    echo = scenario_mapping(s)
    assert echo["parallel"]["pipeline_layout"] == "Et*7|t*8|t*8|t*7L"
    assert echo["parallel"]["pipeline_split"] == "layout"
    again = scenario_from_mapping({k: v for k, v in echo.items() if k not in ("micro_batches",)}, "echo")
    assert again.parallel.rank_layers == s.parallel.rank_layers == (7, 8, 8, 7)


@pytest.mark.parametrize("parallel, words", [
    ({"pipeline_layout": "Et*8|t*8|t*14L"}, ("3 stages", "pp·vpp = 4·1 = 4")),
    ({"pipeline_layout": "t*8|Et*8|t*7|t*7L"}, ("embedding 'E' must open the first stage",)),
    ({"pipeline_layout": "Et*8|t*8|t*7L|t*7"}, ("loss 'L' must close the last stage",)),
    ({"pipeline_layout": "Et*8|t*8|t*8|t*7L"}, ("31 decoder layers", "layers=30")),
    ({"pipeline_layout": "Et*7|t*8|t*8|t*7mL"}, ("1 MTP modules", "no multi-token prediction")),
    ({"pipeline_layout": "Et*7|t*8|x*8|t*7L"}, ("'x'", "E (the embedding)")),
    ({"pipeline_layout": "Et*7|t*8|t*8|t*7L", "pipeline_split": "balanced"}, ("leave pipeline_split out",)),
    ({"pipeline_split": "layout"}, ("needs parallel.pipeline_layout",)),
    ({"pipeline_layout": ""}, ("empty pipeline layout",)),
])
def test_each_rule_is_one_clear_error(parallel, words):
    with pytest.raises(SpecError) as err:
        _scenario(**parallel)
    assert all(w in str(err.value) for w in words), str(err.value)


@pytest.mark.parametrize("text", ["Et*999999999999|L", "(t*99999|)*12000", "((t|)*300)*300", "Et*" + "9" * 5000 + "|L"])
def test_a_layout_too_long_to_unroll_is_refused_before_it_is_built(text):
    # t*999999999999 raised MemoryError, (t*99999|)*12000 built 1.2 GB in 15 s, 5000 digits a ValueError
    with pytest.raises(SpecError, match="unrolls to more than 100,000 tokens") as err:
        expand(text, "--pipeline-layout")
    assert len(str(err.value)) < 200


def test_leading_zeros_in_a_repeat_count_are_the_count():
    assert expand("Et*0000000000000000016|tL", "t") == ["E" + "t" * 16, "tL"]


def test_mtp_on_a_rank_other_than_the_last_is_an_error():
    with pytest.raises(SpecError, match="other than the last is not modelled"):
        scenario_from_mapping({"model": "deepseek-v3", "hardware": "h800-sxm", "devices": 256, "precision": "fp8",
                               "seq_len": 4096, "global_batch": 512,
                               "parallel": {"pp": 16, "ep": 16, "pipeline_layout": "Et*4|(t*4|)*13t*4m|tL"}}, "t")


def test_hybrid_models_and_dualpipe_refuse_a_layout():
    with pytest.raises(SpecError, match="hybrid Mamba-2 blocks is not modelled"):
        scenario_from_mapping({"model": "nemotron-3-nano", "hardware": "h100-sxm", "devices": 16, "global_batch": 64,
                               "parallel": {"pp": 2, "ep": 8, "pipeline_layout": "Et*26|t*26L"}}, "t")
    with pytest.raises(SpecError, match="dualpipe is not modelled"):
        _scenario(pipeline_layout="Et*7|t*8|t*8|t*7L", pipeline_schedule="dualpipe")


def test_the_cli_takes_it_and_a_bad_one_is_one_line(capsys):
    # (full recompute: a layout that fits, so no no-fit advice searches for one)
    args = ["estimate", "-m", "deepseek-v3", "-H", "h800-sxm", "-n", "2048", "--pp", "16", "--ep", "64",
            "--precision", "fp8", "--global-batch", "15360", "--seq-len", "4096", "--recompute", "full"]
    code, out, err = call_entry(args + ["--pipeline-layout", "Et*4|(t*4|)*14tmL"], capsys)
    assert code == 0, err
    assert "pipeline-layout=Et*4|(t*4|)*14tmL" in out and "4×15, 1" in out
    code, out, err = call_entry(args + ["--pipeline-layout", "Et*4|(t*4|)*13tmL"], capsys)
    assert code != 0 and out == "" and "15 stages" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


# --- properties over random layouts (hypothesis, derandomized) ------------------------------------------------------
def _layout_of(counts: list[int]) -> str:
    stages = [f"t*{c}" if c else "" for c in counts]
    return "E" + "|".join(stages) + "L"


def _with_counts(counts: list[int]):
    model = {**DENSE["model"], "layers": sum(counts)}
    return estimate(scenario_from_mapping({**DENSE, "model": model, "devices": 2 * len(counts),
                                           "parallel": {"tp": 2, "pp": len(counts), "zero": 1,
                                                        "pipeline_layout": _layout_of(counts)}}, "t"))


COUNTS = st.lists(st.integers(1, 12), min_size=3, max_size=6)


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(COUNTS, st.data())
def test_one_more_layer_on_any_rank_never_makes_the_step_faster(counts, data):
    rank = data.draw(st.integers(0, len(counts) - 1))
    more = [c + (i == rank) for i, c in enumerate(counts)]
    base, bigger = _with_counts(counts), _with_counts(more)
    assert bigger.step.time_s >= base.step.time_s * (1 - 1e-9)
    assert bigger.memory.per_device_bytes >= base.memory.per_device_bytes * (1 - 1e-9)


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(COUNTS, st.randoms(use_true_random=False))
def test_the_order_of_the_middle_ranks_does_not_matter(counts, rnd):
    middle = counts[1:-1]
    rnd.shuffle(middle)
    shuffled = [counts[0], *middle, counts[-1]]
    a, b = _with_counts(counts), _with_counts(shuffled)
    assert b.step.time_s == a.step.time_s
    assert b.memory.per_device_bytes == a.memory.per_device_bytes


# --- the layout hint (advice.layout_hint) ----------------------------------------------------------------------------
DSV3 = {"model": "deepseek-v3", "hardware": "h800-sxm", "devices": 2048, "precision": "fp8", "seq_len": 4096,
        "global_batch": 15360, "moe_dispatcher": "deepep", "recompute": "selective",
        "recompute_modules": ["layernorm", "mla_up_proj", "moe_act"],
        "adam_moments": "bf16", "parallel": {"pp": 16, "ep": 64, "moe_overlap": "deepep", "pipeline_split": "balanced"}}


def _hint(mapping):
    from trainest.advice import layout_hint
    s = scenario_from_mapping(mapping, "t")
    return layout_hint(s, estimate(s))


def test_the_hint_finds_the_layout_megatron_bridge_chose_for_deepseek_v3():
    """The balanced split leaves the last of 16 stages two layers, the MTP module and two output heads;
    the step model's best layout is the one Megatron-Bridge's DeepSeek-V3 recipe uses (model-shapes.yaml)."""
    hint = _hint(DSV3)
    assert hint is not None and "--pipeline-layout 'Et*4|(t*4|)*14tmL'" in hint and "4×15, 1" in hint
    # what it says is what that layout estimates
    laid = estimate(scenario_from_mapping({**DSV3, "parallel": {"pp": 16, "ep": 64, "moe_overlap": "deepep",
                                                                "pipeline_layout": "Et*4|(t*4|)*14tmL"}}, "t"))
    assert f"to {laid.step.time_s:.3g} s" in hint


def test_the_hint_names_the_even_split_when_that_is_the_balanced_layout():
    hint = _hint({"model": "gpt3-175b", "hardware": "a100-80gb-sxm", "devices": 1024, "global_batch": 1536,
                  "parallel": {"tp": 8, "pp": 8, "pipeline_split": "balanced"}})
    assert hint is not None and "--pipeline-split even" in hint and "12×8" in hint


def test_no_hint_without_a_pipeline_with_a_layout_given_or_when_the_split_is_best():
    assert _hint({**DENSE, "devices": 8, "parallel": {"tp": 2, "zero": 1}}) is None
    assert _hint({**DSV3, "parallel": {"pp": 16, "ep": 64, "moe_overlap": "deepep",
                                       "pipeline_layout": "Et*4|(t*4|)*14tmL"}}) is None
    assert _hint({"model": "llama3-70b", "hardware": "h100-sxm", "devices": 64, "global_batch": 128,
                  "parallel": {"tp": 4, "pp": 4}}) is None


def test_the_hint_is_a_warning_on_stderr_and_in_the_json(capsys):
    import json
    args = ["estimate", "-m", "gpt3-175b", "-H", "a100-80gb-sxm", "-n", "1024", "--tp", "8", "--pp", "8",
            "--pipeline-split", "balanced", "--global-batch", "1536"]
    code, out, err = call_entry(args, capsys)
    assert code == 0 and "Warning: pipeline stages uneven" in err and "uneven" not in out
    code, out, err = call_entry(args + ["--json"], capsys)
    assert code == 0 and any("pipeline stages uneven" in w for w in json.loads(out)["warnings"])


def test_plan_notes_a_better_layout_for_its_winner(capsys):
    """A plan is searched with the even and balanced splits only; when a layout would make its winner
    faster, the plan says so (a note, on stderr and in the JSON warnings)."""
    import json
    args = ["plan", "-m", "nemotron-22b", "-H", "h100-sxm", "-n", "64", "--global-batch", "256", "--allow", "pp=4"]
    code, out, err = call_entry(args, capsys)
    assert code == 0 and "Note: plan 1, pipeline stages uneven" in err and "--pipeline-layout 'E" in err
    code, out, err = call_entry(args + ["--json"], capsys)
    notes = [w for w in json.loads(out)["warnings"] if "pipeline stages uneven" in w]
    assert code == 0 and len(notes) == 1 and notes[0].startswith("note: plan 1")


def test_a_framework_that_splits_the_layers_itself_refuses_a_layout_and_gets_no_hint():
    """Bad input: a layout under a framework that cannot place layers per stage (DeepSpeed's pipeline
    partitions them itself) is an error naming those that can; no hint suggests one there."""
    with pytest.raises(SpecError, match="megatron-deepspeed does not place layers per stage.*megatron-core"):
        scenario_from_mapping({**DENSE, "framework": "megatron-deepspeed",
                               "parallel": {**DENSE["parallel"], "pipeline_layout": "Et*7|t*8|t*8|t*7L"}}, "t")
    gpt3 = {"model": "gpt3-175b", "hardware": "a100-80gb-sxm", "devices": 1024, "global_batch": 1536,
            "parallel": {"tp": 8, "pp": 8, "pipeline_split": "balanced"}}
    assert _hint(gpt3) is not None and _hint({**gpt3, "framework": "megatron-deepspeed"}) is None


def test_pp_comes_from_the_layout_when_not_given_and_is_shown_as_derived(capsys):
    laid = _scenario(base={**DENSE, "parallel": {"tp": 2, "zero": 1}}, pipeline_layout="Et*7|t*8|t*8|t*7L")
    assert laid.parallel.pp == 4 and "parallel.pp" in laid.derived
    two = _scenario(base={**DENSE, "parallel": {"tp": 2, "zero": 1, "vpp": 2}},
                    pipeline_layout="Et*4|t*4|t*4|t*4|t*4|t*4|t*3|t*3L")
    assert two.parallel.pp == 4 and two.parallel.rank_layers == (8, 8, 7, 7)
    code, out, err = call_entry(["estimate", "-m", "llama3-8b", "--tp", "2", "--pipeline-layout", "Et*16|t*16L"], capsys)
    assert code == 0 and "pp=2 (from the layout)" in out
