"""Usage errors from the command-line parser, through the console entry point: exit code 2, one
`Error: ...` line on stderr that points at the right --help, nothing on stdout, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

CASES = [
    (["estimate", "--tp", "x"], "--tp", "trainest estimate --help"),
    (["estimate", "--nope"], "--nope", "trainest estimate --help"),
    (["estimate", "--precision", "fp7"], "fp7", "trainest estimate --help"),
    (["plan", "--top", "many"], "--top", "trainest plan --help"),
    (["list"], "what", "trainest list --help"),
    (["frob"], "frob", "trainest --help"),
]


def run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainest", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args,named,hint", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_usage_error_is_one_line(args, named, hint):
    r = run(args)
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("Error: ") and named in lines[0] and hint.replace("trainest", "") in lines[0]
    assert "Traceback" not in r.stderr


def test_no_arguments_prints_the_help():
    r = run([])
    assert "estimate" in r.stdout and "Usage" in r.stdout
    assert "Traceback" not in r.stderr


def test_sweep_csv_and_json_together_is_one_clear_error(capsys):
    """`sweep --csv --json` printed the JSON and dropped the CSV without a word."""
    from helpers import call_entry
    code, out, err = call_entry(["sweep", "--devices", "8,16", "--global-batch", "64", "--csv", "--json"], capsys)
    assert (code, out) == (1, "") and err.count("\n") == 1
    assert err.startswith("Error: --csv and --json") and "one of them" in err
