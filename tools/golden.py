"""Golden outputs: the `--json` documents of estimate, plan, validate and calibrate on a fixed set of
cases, recorded once and compared number by number after a change that must not move any number (a
refactor). A change that moves numbers on purpose re-records the goldens in the same commit and says
which cases moved and why.

    python tools/golden.py record [NAME ...]   # write tests/golden/*.json from the current code (all, or these)
    python tools/golden.py check [NAME ...]    # compare the current code with tests/golden/ (exit 1 on a change)

What a golden holds (`differences`):
- every key in a recorded document must still be there, with an equal value: numbers to a relative
  REL_TOL = 1e-9 (the last digits of a sum depend on the BLAS's summation order: calibrate's condition
  number moves at 1e-12 between machines), anything else exactly; a list keeps its length and order;
- a key the current output has and the golden does not is ignored: a new output field (a new input
  knob echoed in `inputs`, a new result) does not fail the goldens and does not make them re-recorded.
  Remove a key from the output and the goldens say so.

The cases (tests/golden/cases.yaml) are command lines; scenario files they use live beside them
(`{golden}` in a case and in a recorded document: this checkout's tests/golden). Volatile fields
(search seconds, plans per second) are dropped before recording.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
VOLATILE = {"seconds", "plans_per_s"}
REL_TOL = 1e-9
# a result that is zero up to rounding (a calibrate leverage of 5e-31, whose digits are the BLAS's summation
# order) compares as zero: no recorded quantity is meaningfully this small
ABS_TOL = 1e-20


def run_cli(argv: list[str]) -> tuple[int, str]:
    """(exit code, stdout) of `trainest ARGV`, in process."""
    from trainest.cli.main import main
    out = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue()


def strip_volatile(doc: Any) -> Any:
    """The document without its volatile fields, and with the checkout's path of tests/golden written
    `{golden}` (a reproduce command naming a scenario file must not depend on where the clone is)."""
    if isinstance(doc, dict):
        return {k: strip_volatile(v) for k, v in doc.items() if k not in VOLATILE}
    if isinstance(doc, list):
        return [strip_volatile(v) for v in doc]
    if isinstance(doc, str):
        return doc.replace(str(GOLDEN), "{golden}")
    return doc


def load_cases() -> list[dict]:
    return yaml.safe_load((GOLDEN / "cases.yaml").read_text())["cases"]


def argv_of(case: dict) -> list[str]:
    return [a.replace("{golden}", str(GOLDEN)) for a in case["argv"]]


def output_of(case: dict) -> Any:
    code, out = run_cli(argv_of(case))
    return {"exit_code": code, "json": strip_volatile(json.loads(out)) if out.strip() else None}


def json_numbers(doc: Any, path: str = "") -> Iterator[tuple[str, float]]:
    """(path, value) of every number in a JSON document (booleans are not numbers), for the checks that every
    printed number is finite and physical (tests/test_invariants.py, tools/fuzz_cli.py)."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from json_numbers(v, f"{path}.{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from json_numbers(v, f"{path}[{i}]")
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool):
        yield path, doc


def differences(want: Any, got: Any, path: str = "") -> list[str]:
    """Every place where `got` differs from `want`: a key of `want` missing from `got`, a number beyond
    REL_TOL, anything else not equal. Keys only `got` has (new output fields) are not differences."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = []
        for k in sorted(want):
            if k not in got:
                out.append(f"{path}.{k}: missing")
            else:
                out += differences(want[k], got[k], f"{path}.{k}")
        return out
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{path}: {len(want)} items -> {len(got)}"]
        return [d for i, (a, b) in enumerate(zip(want, got)) for d in differences(a, b, f"{path}[{i}]")]
    numbers = (int, float)
    if isinstance(want, numbers) and isinstance(got, numbers) and not isinstance(want, bool) \
            and not isinstance(got, bool):
        if want == got or (math.isfinite(want) and math.isclose(want, got, rel_tol=REL_TOL, abs_tol=ABS_TOL)):
            return []
        return [f"{path}: {want!r} -> {got!r}"]
    return [] if want == got else [f"{path}: {want!r} -> {got!r}"]


def record(names: list[str] | None = None) -> None:
    for case in load_cases():
        if names and case["name"] not in names:
            continue
        doc = output_of(case)
        (GOLDEN / f"{case['name']}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"recorded {case['name']} (exit {doc['exit_code']})")


def check(names: list[str] | None = None) -> int:
    bad = 0
    for case in load_cases():
        if names and case["name"] not in names:
            continue
        want = json.loads((GOLDEN / f"{case['name']}.json").read_text())
        diffs = differences(want, output_of(case))
        if diffs:
            bad += 1
            print(f"{case['name']}: {len(diffs)} differences, e.g. " + "; ".join(diffs[:5]))
    print("goldens: " + ("all match" if not bad else f"{bad} cases differ"))
    return 1 if bad else 0


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "check"
    if what == "record":
        record(sys.argv[2:])
    else:
        sys.exit(check(sys.argv[2:]))
