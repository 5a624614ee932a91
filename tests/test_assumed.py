"""Issue 34: a run's `assumed` settings (what its importer assumed, the record not stating them) and the settings
that decide a "does not fit" (`deciding`): validate names them where it calls a run that ran "does not fit"."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from trainest.cli import app
from trainest.errors import SpecError
from trainest.report.validate import nofit_reason, run_notes
from trainest.scenario import scenario_from_mapping
from trainest.validate import validate_runs
from trainest.validate_memory import (
    JOINT,
    LIGHTEST_SETTING,
    MEMORY_SETTINGS,
    assumed_of,
    deciding_settings,
)

# Llama 3 70B on 32 H100 with ZeRO-3 at 8k tokens: without recompute its activations do not fit; with full
# recompute they do (the layer inputs alone)
BIG = {"model": "llama3-70b", "hardware": "h100-sxm", "devices": 32, "seq_len": 8192, "precision": "bf16",
       "parallel": {"tp": 1, "pp": 1, "zero": 3}, "micro_batch": 1, "global_batch": 32, "recompute": "none"}
# Llama 3 8B on 8 H100 without ZeRO at 16k tokens: neither full recompute (18 B per parameter stay) nor ZeRO-3
# (the activations stay) fits alone; both together do
SMALL = {**BIG, "model": "llama3-8b", "devices": 8, "seq_len": 16384, "global_batch": 8,
         "parallel": {"tp": 1, "pp": 1, "zero": 0}}


def write_runs(tmp_path, runs: list[dict]) -> str:
    path = tmp_path / "assumed.yaml"
    path.write_text(yaml.safe_dump({"source": "unit test", "runs": runs}, sort_keys=False))
    return str(path)


def test_a_run_that_fits_only_with_recompute_names_recompute_as_deciding(tmp_path):
    """The importer assumed recompute none; with full recompute the run fits, so `recompute` decides it."""
    from trainest.estimate import estimate
    s = scenario_from_mapping(BIG, "test")
    assert not estimate(s).memory.fits
    assert deciding_settings(s, ("recompute",)) == ("recompute",)
    path = write_runs(tmp_path, [{"id": "big", **BIG, "assumed": ["recompute"], "measured": {"step_time_s": 10.0}}])
    report = validate_runs([path], user_files=True)
    (r,) = report.runs
    assert not r.fits and r.assumed == ("recompute",) and r.deciding == ("recompute",)
    notes = "\n".join(run_notes(report))
    assert "big does not fit" in notes and "recompute full" in notes and "assumed by its importer" in notes


def test_a_setting_the_record_states_is_never_deciding():
    """Only unstated settings are tried: with no candidates, nothing decides, even where full recompute fits."""
    s = scenario_from_mapping(BIG, "test")
    assert deciding_settings(s, ()) == ()


def test_no_setting_decides_where_the_run_fits_at_no_lightest_value():
    """405B on one 80 GB device fits with no recompute, ZeRO or loss: nothing decides."""
    s = scenario_from_mapping({**BIG, "model": "llama3.1-405b", "devices": 1, "global_batch": 1,
                               "parallel": {"tp": 1, "pp": 1, "zero": 0}}, "test")
    assert deciding_settings(s, ("recompute", "parallel.zero", "loss", "micro_batch")) == ()


def test_settings_that_fit_only_together_are_one_joint_entry():
    """SMALL: neither full recompute nor ZeRO-3 alone fits; both together do."""
    from trainest.estimate import estimate
    s = scenario_from_mapping(SMALL, "test")
    keys = ("recompute", "parallel.zero")
    alone = [estimate(scenario_from_mapping({**SMALL, "recompute": "full"}, "t")).memory.fits,
             estimate(scenario_from_mapping({**SMALL, "parallel": {"tp": 1, "pp": 1, "zero": 3}}, "t")).memory.fits]
    assert alone == [False, False]
    assert deciding_settings(s, keys) == (JOINT.join(keys),)
    text = nofit_reason(keys, (), (JOINT.join(keys),))
    assert "together" in text and all(f"{k} {LIGHTEST_SETTING[k]}" in text for k in keys)


def test_memory_settings_are_the_names_scenarios_derive():
    """MEMORY_SETTINGS match Scenario.derived's names (parallel.tp, not tp): a scenario that gives no layout
    derives its parallel keys, and validate names them as unstated."""
    s = scenario_from_mapping({"model": "llama3-8b"}, "test")
    unstated = [k for k in MEMORY_SETTINGS if k in s.derived]
    assert {"parallel.tp", "parallel.zero", "recompute", "micro_batch"} <= set(unstated)


@pytest.mark.parametrize("value", [["recompute"], ["parallel.zero", "micro_batch"], ["finetune.base_bits"]])
def test_assumed_takes_scenario_keys(value):
    assert assumed_of(value, "run") == tuple(value)


@pytest.mark.parametrize("value", [["recomputed"], ["parallel.bogus"], "recompute", [3]])
def test_assumed_refuses_what_is_not_a_list_of_scenario_keys(value):
    with pytest.raises(SpecError) as err:
        assumed_of(value, "run 'x'.assumed")
    assert "\n" not in str(err.value) and "run 'x'.assumed" in str(err.value)


def test_a_bad_assumed_key_in_a_runs_file_is_one_line_and_exit_1(tmp_path):
    path = write_runs(tmp_path, [{"id": "big", **BIG, "assumed": ["recomput"], "measured": {"step_time_s": 10.0}}])
    res = CliRunner().invoke(app, ["validate", "--runs", path, "--json"])
    assert res.exit_code != 0 and "recomput" in res.output and "Traceback" not in res.output


def test_validate_json_gives_assumed_and_deciding(tmp_path):
    path = write_runs(tmp_path, [{"id": "big", **BIG, "assumed": ["recompute"],
                                  "measured": {"step_time_s": 10.0, "peak_memory_gib": 70.0}}])
    res = CliRunner().invoke(app, ["validate", "--runs", path, "--json", "-q"])
    doc = json.loads(res.stdout)
    assert doc["runs"][0]["assumed"] == ["recompute"] and doc["runs"][0]["deciding"] == ["recompute"]
    assert doc["memory"][0]["assumed"] == ["recompute"] and doc["memory"][0]["deciding"] == ["recompute"]


def test_importer_writes_assumed_from_its_own_notes():
    """tools/import_runs.py: the keys of the import notes that say a memory setting was assumed."""
    import importlib.util
    import pathlib
    spec = importlib.util.spec_from_file_location("import_runs", pathlib.Path("tools/import_runs.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    notes = ["recompute 'none' assumed: not stated", "zero 1 assumed: Megatron/NeMo performance recipes use ...",
             "recompute none: 'none (stated)'"]
    assert mod.assumed_settings(notes) == ["recompute", "parallel.zero"]
    assert mod.assumed_settings(["recompute none: 'none'"]) == []


def test_a_run_that_ran_is_judged_without_the_planning_margin(tmp_path):
    """validate judges a measured run against the usable capacity: the default memory_headroom (5 %) is a margin a
    plan keeps free, not memory the run needed; a record that gives memory_headroom keeps it."""
    from trainest.estimate import estimate
    from trainest.validate_memory import as_it_ran
    # find a micro-batch where the total is within 5 % below the capacity
    for seq in range(4096, 32769, 512):
        s = scenario_from_mapping({**BIG, "seq_len": seq, "recompute": "full"}, "test")
        m = estimate(s).memory
        if m.per_device_bytes <= m.capacity_bytes and not m.fits:
            break
    else:
        pytest.fail("no scenario between the margin and the capacity")
    assert estimate(as_it_ran(s)).memory.fits
    stated = scenario_from_mapping({**BIG, "seq_len": seq, "recompute": "full", "memory_headroom": "5%"}, "test")
    assert as_it_ran(stated) == stated and not estimate(stated).memory.fits


def test_an_fp8_only_setting_is_not_named_for_a_bf16_run():
    """fp8_params exists only with FP8/FP4 GEMMs: a BF16 run that does not state it is not said to lack it."""
    from trainest.validate_memory import unstated_settings
    bf16 = scenario_from_mapping({"model": "llama3-8b"}, "test")
    fp8 = scenario_from_mapping({"model": "llama3-8b", "precision": "fp8"}, "test")
    assert "fp8_params" not in unstated_settings(bf16) and "fp8_params" in unstated_settings(fp8)


# ------------------------------------------------------------- settings a record's own configuration gives otherwise

def test_a_conflicting_setting_that_fits_is_named_with_both_values(tmp_path):
    """BIG does not fit without recompute; its record's other statement (recompute full) does: validate predicts the
    record's value, and says that with the other one the run fits, naming both values."""
    path = write_runs(tmp_path, [{"id": "big", **BIG, "conflicting": {"recompute": "full"},
                                  "measured": {"step_time_s": 10.0}}])
    report = validate_runs([path], user_files=True)
    (r,) = report.runs
    assert not r.fits and r.recompute == "none" and r.fits_otherwise is True
    assert [(c.key, c.stated, c.otherwise) for c in r.conflicting] == [("recompute", "none", "full")]
    notes = "\n".join(run_notes(report))
    assert "recompute full (the record: none)" in notes and "with those it fits" in notes


def test_a_conflicting_setting_that_does_not_fit_either_says_so(tmp_path):
    """405B on one device fits with nothing: the other statement's micro-batch does not make it fit, and the note
    says so rather than implying it would."""
    run = {**BIG, "model": "llama3.1-405b", "devices": 1, "global_batch": 2, "micro_batch": 2,
           "parallel": {"tp": 1, "pp": 1, "zero": 0}}
    path = write_runs(tmp_path, [{"id": "huge", **run, "conflicting": {"micro_batch": 1},
                                  "measured": {"step_time_s": 1000.0}}])
    report = validate_runs([path], user_files=True)
    (r,) = report.runs
    assert not r.fits and r.fits_otherwise is False
    assert "does not fit with those either" in "\n".join(run_notes(report))


def test_a_run_that_fits_is_not_judged_on_its_conflicting_settings(tmp_path):
    path = write_runs(tmp_path, [{"id": "big", **BIG, "recompute": "full", "conflicting": {"recompute": "none"},
                                  "measured": {"step_time_s": 10.0}}])
    (r,) = validate_runs([path], user_files=True).runs
    assert r.fits and r.fits_otherwise is None and len(r.conflicting) == 1


@pytest.mark.parametrize("value, named", [({"recomput": "full"}, "recomput"), ({"parallel.pp": [4]}, "parallel.pp"),
                                          ({"parallel.pp": None}, "parallel.pp"), (["parallel.pp"], "conflicting"),
                                          ({}, "conflicting"), ({"parallel.tp": 3}, "parallel.tp 3")])
def test_a_bad_conflicting_value_is_one_line_and_exit_1(tmp_path, value, named):
    """A key that is no scenario key, a value that is not one value, or values that make no valid run (tp 3 on 32
    devices): one line naming it, exit 1, nothing on stdout."""
    path = write_runs(tmp_path, [{"id": "big", **BIG, "conflicting": value, "measured": {"step_time_s": 10.0}}])
    res = CliRunner().invoke(app, ["validate", "--runs", path, "--json"])
    assert res.exit_code == 1 and res.stdout == "" and "Traceback" not in res.output
    assert named in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_validate_json_gives_conflicting_and_fits_otherwise(tmp_path):
    path = write_runs(tmp_path, [{"id": "big", **BIG, "conflicting": {"recompute": "full"},
                                  "measured": {"step_time_s": 10.0, "peak_memory_gib": 70.0}}])
    doc = json.loads(CliRunner().invoke(app, ["validate", "--runs", path, "--json", "-q"]).stdout)
    want = [{"key": "recompute", "stated": "none", "otherwise": "full"}]
    assert doc["runs"][0]["conflicting"] == want and doc["runs"][0]["fits_otherwise"] is True
    assert doc["memory"][0]["conflicting"] == want and doc["memory"][0]["fits_otherwise"] is True


def test_every_bundled_run_called_does_not_fit_names_what_would_make_it_fit():
    """Issue 34: a bundled run that ran is called "does not fit" only where its record leaves out a setting whose
    lightest value makes it fit (`deciding`), or states one that its own configuration gives otherwise and with
    which it fits (`conflicting`)."""
    report = validate_runs()
    nofit = [r for r in report.runs if not r.fits]
    assert nofit, "no bundled run is called does not fit: the check below would say nothing"
    assert [r.id for r in nofit if not (r.deciding or r.fits_otherwise)] == []


def test_importer_writes_the_recipes_layout_where_the_row_states_another():
    """tools/recipe_settings.py: the row's layout keeps; the recipe's values that differ, and the data-parallel size
    they leave, are the run's `conflicting`."""
    import sys
    sys.path.insert(0, "tools")
    from recipe_settings import conflicting_of
    rec = {"recipe_selection": {"mismatches": {"pp": {"summary": 1, "recipe": 4}, "mbs": {"summary": 2, "recipe": 1},
                                               "vp": {"summary": None, "recipe": 5},
                                               "fsdp": {"summary": 0, "recipe": True}}}}
    run = {"devices": 64, "micro_batch": 2, "parallel": {"tp": 1, "pp": 1, "dp": 64, "cp": 1, "vpp": 1, "zero": 1}}
    assert conflicting_of(rec, run) == {"parallel.pp": 4, "micro_batch": 1, "parallel.vpp": 5, "parallel.zero": 3,
                                        "parallel.dp": 16}
    assert conflicting_of({"recipe_selection": {"mismatches": {}}}, run) == {}
