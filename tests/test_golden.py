"""Behaviour unchanged: the --json output of estimate, plan, validate and calibrate on the golden cases
(tests/golden/cases.yaml) matches the recorded documents to 1e-12. A change that moves numbers on
purpose re-records them (`python tools/golden.py record`) and says why in its commit."""

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
def test_golden_output_unchanged(case):
    want = json.loads((golden.GOLDEN / f"{case['name']}.json").read_text())
    diffs = golden.differences(want, golden.output_of(case))
    assert not diffs, f"{len(diffs)} differences: " + "; ".join(diffs[:8])


def test_differences_sees_a_moved_number():
    assert golden.differences({"a": [1.0, {"b": 2.0}]}, {"a": [1.0, {"b": 2.0 * (1 + 1e-9)}]})
    assert not golden.differences({"a": 1.0}, {"a": 1.0 * (1 + 1e-14)})
