"""Behaviour unchanged: the --json output of estimate, plan, validate and calibrate on the golden cases
(tests/golden/cases.yaml) matches the recorded documents: every recorded key present, numbers to 1e-9
(tools/golden.py: a new output key is not a difference). A change that moves numbers on purpose
re-records them (`python tools/golden.py record`) and says why in its commit."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("golden", ROOT / "tools" / "golden.py")
golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(golden)


@pytest.mark.parametrize("case", golden.load_cases(), ids=lambda c: c["name"])
def test_golden_output_unchanged(case, request):
    want = json.loads((golden.GOLDEN / f"{case['name']}.json").read_text())
    if case["argv"] == ["validate", "--json"]:      # shared with the schema test (conftest.validate_all_stdout)
        got = {"exit_code": 0, "json": golden.strip_volatile(json.loads(request.getfixturevalue("validate_all_stdout")))}
    else:
        got = golden.output_of(case)
    diffs = golden.differences(want, got)
    assert not diffs, f"{len(diffs)} differences: " + "; ".join(diffs[:8])


def test_differences_sees_a_moved_number():
    assert golden.differences({"a": [1.0, {"b": 2.0}]}, {"a": [1.0, {"b": 2.0 * (1 + 1e-7)}]})
    assert golden.differences({"a": 1.0}, {"a": 1.0 * (1 + 1e-8)})
    # the last digits of a BLAS sum (calibrate's condition number moved at 1.4e-12) are not a change
    assert not golden.differences({"a": 1.0}, {"a": 1.0 * (1 + 1.4e-12)})


def test_a_new_key_is_not_a_difference_and_a_missing_one_is():
    want = {"step": {"time_s": 1.0}, "inputs": {"devices": 8}}
    assert golden.differences(want, {"step": {"time_s": 1.0, "new_s": 2.0}, "inputs": {"devices": 8, "knob": 1}}) == []
    assert golden.differences(want, {"step": {}, "inputs": {"devices": 8}}) == [".step.time_s: missing"]
    moved = {"step": {"time_s": 1.0}, "inputs": {"devices": 16}}
    assert golden.differences(want, moved) == [".inputs.devices: 8 -> 16"]
    assert golden.differences({"a": [1, 2]}, {"a": [1, 2, 3]}) == [".a: 2 items -> 3"]
    assert golden.differences({"a": "x"}, {"a": "y"}) and golden.differences({"a": None}, {"a": 0.0})


def test_a_recorded_document_does_not_depend_on_where_the_clone_is():
    """A reproduce command naming a golden scenario file is recorded with `{golden}`, not this checkout's path."""
    assert golden.strip_volatile({"command": ["estimate", "--config", f"{golden.GOLDEN}/scenarios/x.yaml"],
                                  "seconds": 1.0}) == {"command": ["estimate", "--config", "{golden}/scenarios/x.yaml"]}
    assert not [p.name for p in golden.GOLDEN.glob("*.json") if "/tests/golden" in p.read_text()]
