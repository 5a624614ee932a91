"""DualPipe (docs/model.md §5.4): its bubble, its two stages' weights and one more micro-batch in flight,
its overlap, its rules, and the plan search keeping to them."""

from __future__ import annotations

import pytest

from trainest.errors import SpecError
from trainest.estimate import estimate
from trainest.scenario import scenario_from_mapping
from trainest.step.schedule import DUALPIPE_SLOT, bubble_slots, dualpipe_slots

BASE = {"model": "qwen3-30b-a3b", "hardware": "h100-sxm", "devices": 64, "precision": "bf16", "seq_len": 4096,
        "micro_batch": 1, "global_batch": 256, "recompute": "full",
        "parallel": {"pp": 4, "ep": 8, "zero": 1}}


def _estimate(schedule: str, **parallel):
    return estimate(scenario_from_mapping({**BASE, "parallel": {**BASE["parallel"], **parallel,
                                                                "pipeline_schedule": schedule}}, "t"))


def test_the_bubble_is_deepseeks():
    """(p/2 − 1)·(F&B + B − 3W) with F = t/3, B = 2t/3, W = t/3, F&B = F + B: (p/2 − 1)·2/3 micro-batch
    times, against 1F1B's p − 1 (DeepSeek-V3 Table 2)."""
    assert DUALPIPE_SLOT == pytest.approx(1 + 2 / 3 - 3 * (1 / 3))
    assert dualpipe_slots(16.0) == pytest.approx(7 * 2 / 3)
    assert dualpipe_slots(16.0) < bubble_slots(16.0, 1.0, 64.0) == 15.0
    assert dualpipe_slots(1.0) == 0.0


def test_two_stages_of_weights_and_one_more_micro_batch():
    one, dual = _estimate("1f1b"), _estimate("dualpipe")
    kept = [estimate(scenario_from_mapping({**BASE, "recompute": "selective",
                                            "parallel": {**BASE["parallel"], "pipeline_schedule": sch}}, "t"))
            for sch in ("1f1b", "dualpipe")]
    assert kept[1].memory.activations_bytes > kept[0].memory.activations_bytes     # p + 1 in flight
    assert dual.memory.weights_bytes == pytest.approx(2 * one.memory.weights_bytes, rel=1e-9)
    assert dual.memory.optimizer_bytes == pytest.approx(2 * one.memory.optimizer_bytes, rel=1e-9)
    assert dual.step.bubble_s < one.step.bubble_s
    assert dual.step.time_s < one.step.time_s


def test_its_all_to_alls_hide_as_with_deepep():
    dual = _estimate("dualpipe")
    deepep = estimate(scenario_from_mapping({**BASE, "parallel": {**BASE["parallel"], "moe_overlap": "deepep"}}, "t"))
    assert dual.step.communication_detail_s["ep"] == pytest.approx(deepep.step.communication_detail_s["ep"])


@pytest.mark.parametrize("devices, batch, parallel, message", [
    (48, 240, {"pp": 3}, r"dualpipe needs an even pp .*pp=3"),
    (64, 256, {"pp": 4, "vpp": 2}, r"DualPipe has no virtual stages"),
])
def test_its_rules_are_one_clear_error(devices, batch, parallel, message):
    with pytest.raises(SpecError, match=message):
        scenario_from_mapping({**BASE, "devices": devices, "global_batch": batch,
                               "parallel": {**BASE["parallel"], **parallel, "pipeline_schedule": "dualpipe"}}, "t")
    with pytest.raises(SpecError, match=r"an even number of micro-batches per step of at least pp=4"):
        scenario_from_mapping({**BASE, "global_batch": 48, "parallel": {**BASE["parallel"],
                                                                         "pipeline_schedule": "dualpipe"}}, "t")


def test_without_a_pipeline_it_is_1f1b():
    assert _estimate("dualpipe", pp=1).step.time_s == _estimate("1f1b", pp=1).step.time_s


def test_plan_searches_only_what_dualpipe_runs():
    from trainest.search import SearchSpace, search
    base = scenario_from_mapping({**BASE, "parallel": {"pp": 2, "ep": 8, "zero": 1, "pipeline_schedule": "dualpipe"}},
                                 "t")
    plans = search(base, 64, SearchSpace()).plans
    assert plans
    for p in plans:
        par = p.scenario.parallel
        m = p.scenario.global_batch // (par.dp * p.scenario.micro_batch)
        assert par.pipeline_schedule == "dualpipe" and par.vpp == 1
        assert par.pp == 1 or (par.pp % 2 == 0 and m >= par.pp and m % 2 == 0)


def test_plan_whose_winner_has_no_pipeline_says_dualpipe_does_not_apply_and_reproduces_without_it(capsys):
    """The winner of `plan --pipeline-schedule dualpipe` on one node has pp 1: its reproducing command gave
    `--pipeline-schedule dualpipe` (which an estimate refuses at pp 1) and the warning described DualPipe's
    bubble and memory as if applied."""
    import json

    from helpers import call_entry
    args = ["plan", "--model", "llama3.2-3b", "--devices", "8", "--global-batch", "64", "--pipeline-schedule",
            "dualpipe"]
    code, out, err = call_entry(args, capsys)
    assert code == 0, err
    reproduce = next(line for line in out.splitlines() if line.startswith("Reproduce the winner:"))
    assert " --pp 1 " in reproduce and "dualpipe" not in reproduce
    assert "the best plan has no pipeline (pp 1), so DualPipe does not apply" in err
    assert "DeepSeek-V3's schedule from its report" not in err
    code, out, err = call_entry([*args, "--json"], capsys)
    doc = json.loads(out)
    assert "dualpipe" not in doc["plans"][0]["estimate_args"]
    code, out, err = call_entry(["estimate", *reproduce.split("trainest estimate ")[1].split(), "--json"], capsys)
    assert code == 0, err
