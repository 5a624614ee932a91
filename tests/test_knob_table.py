"""The knob table drives a simple knob's whole path (trainest/knobs.py: SIMPLE): the scenario reads, checks and
defaults it, the `inputs` echo and plan's and compare's job carry it, and the step model's Job gets it."""

from __future__ import annotations

import pytest

from trainest.knobs import BY_NAME, COMPARE_OPTIONS, PLAN_OPTIONS, SCENARIO, SIMPLE, SWEEP_OPTIONS
from trainest.layout import Job
from trainest.report.compare import JOB_KEYS as COMPARE_JOB_KEYS
from trainest.scenario import SCENARIO_KEYS, job_of, scenario_from_mapping, scenario_mapping
from trainest.search.job import job_scenario


def test_every_simple_knob_is_a_job_field_with_the_same_default():
    """The Job the step model reads has each simple knob, defaulting to the table's fallback."""
    defaults = Job._field_defaults
    for k in SIMPLE:
        assert k.group == SCENARIO and k.job and k.name == k.yaml_key, k.name
        assert k.name in defaults and defaults[k.name] == k.fallback, k.name


def test_every_simple_knob_is_an_option_of_every_command_and_a_scenario_key():
    for k in SIMPLE:
        assert k.name in SCENARIO_KEYS and BY_NAME[k.name] is k
        for options in (PLAN_OPTIONS, COMPARE_OPTIONS, SWEEP_OPTIONS):
            assert k.name in {o.name for o in options}, k.name
        assert k.name in COMPARE_JOB_KEYS


# a mixture-of-experts model, so that every knob's every value applies (moe_dispatcher's deepep and hybridep
# need experts)
MODEL = "mixtral-8x7b"
# what a knob's values need besides: MaxText's remat policies its framework and dense layers (docs/model.md §7.11)
NEEDS = {"remat_policy": {"model": "llama2-7b", "framework": "maxtext"}}


@pytest.mark.parametrize("knob", [k.name for k in SIMPLE])
def test_a_simple_knob_is_read_echoed_and_handed_to_the_job(knob):
    """Not given: the fallback, listed as derived; given (every allowed word, or the fallback for a number):
    kept, not derived, echoed, and the Job's field; a plan's job keeps it too."""
    k = BY_NAME[knob]
    base = {"model": MODEL, **NEEDS.get(knob, {})}
    s = scenario_from_mapping(base)
    assert s.knob(knob) == k.fallback and knob in s.derived and scenario_mapping(s)[knob] == k.fallback
    for value in k.choice_values or (k.fallback,):
        s = scenario_from_mapping({**base, knob: value})
        assert s.knob(knob) == value and knob not in s.derived
        assert scenario_mapping(s)[knob] == value and getattr(job_of(s), knob) == value
        assert job_scenario({**base, "global_batch": 64, knob: value}).knob(knob) == value


def test_a_location_names_the_flag_on_the_command_line_and_the_key_in_a_file():
    """errors.at: where a value is read from the command line (knobs.CLI) the message names its flag, also for a
    key found inside another location; in a file it names the key in its place."""
    from trainest.errors import at, head, name_of
    from trainest.knobs import CLI, CLI_MODEL
    assert at(CLI, "parallel.zero") == "--zero" and name_of(CLI, "parallel.ep") == "--ep"
    assert at(at(CLI, "finetune"), "rank") == "--lora-rank" and at(CLI, "finetune") == "--finetune"
    assert at(at(CLI_MODEL, "attention_window"), "size") == "--attention-window"
    assert at(at(CLI_MODEL, "moe"), "experts") == "--experts"
    assert at("run.yaml", "parallel.zero") == "run.yaml.parallel.zero" and name_of("run.yaml", "parallel.ep") == \
        "parallel.ep"
    assert at(at("run.yaml", "finetune"), "rank") == "run.yaml.finetune.rank"
    assert head(CLI) == "" and head("run.yaml") == "run.yaml: "


def test_no_module_branches_on_the_command_line_by_name():
    """The command line's place is knobs.CLI, compared nowhere else: no `where == "options"` branch."""
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent / "trainest"
    hits = [str(p) for p in root.rglob("*.py") if '"options"' in p.read_text(encoding="utf-8")
            and p.name != "knobs.py"]
    assert not hits
