"""Output that cannot be written, or only in ASCII, and command lines that paste (issue 32, items 8 and 9).

The commands run as the real console script in a subprocess: a full or closed stdout and the output encoding are
properties of the process's file descriptors, which an in-process runner does not have.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = shutil.which("trainest") or str(Path(sys.executable).with_name("trainest"))
pytestmark = pytest.mark.skipif(not Path(SCRIPT).exists(), reason="console script `trainest` not installed")


def _run(args: list[str], *, stdout=subprocess.PIPE, env: dict | None = None, cwd: str | None = None,
         close_stdout: bool = False) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS")}
    full_env.update(env or {})
    if close_stdout:                  # `trainest ... >&-`: the child starts with file descriptor 1 closed
        return subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", SCRIPT, *args], stderr=subprocess.PIPE,
                              text=True, timeout=120, env=full_env, cwd=cwd)
    return subprocess.run([SCRIPT, *args], stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=120,
                          env=full_env, cwd=cwd)


FULL_OUTPUT = [["estimate", "--json"], ["estimate"], ["sweep", "--devices", "8..16", "--csv", "-q"],
               ["plan", "-q"], ["list", "hardware"]]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
@pytest.mark.parametrize("args", FULL_OUTPUT, ids=lambda a: " ".join(a))
def test_a_full_stdout_is_one_error_line_and_exit_1(args):
    with open("/dev/full", "w") as full:
        proc = _run(args, stdout=full)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert errors == ["Error: cannot write the output: No space left on device"], proc.stderr


@pytest.mark.parametrize("args", [["estimate", "--json"], ["estimate"], ["plan", "-q"]], ids=lambda a: " ".join(a))
def test_a_closed_stdout_is_one_error_line_and_exit_1(args):
    proc = _run(args, close_stdout=True)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == "Error: cannot write the output: standard output is closed"
    assert "Traceback" not in proc.stderr


def test_an_ascii_output_encoding_prints_plain_ascii_tables():
    proc = _run(["estimate"], env={"PYTHONIOENCODING": "ascii"})
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout.isascii()
    assert "Step:" in proc.stdout and "| compute " in proc.stdout      # the tables, drawn in ASCII
    # the numbers survive: the step time the JSON gives is in the table
    import json
    doc = json.loads(_run(["estimate", "--json"], env={"PYTHONIOENCODING": "ascii"}).stdout)
    assert f"{doc['step']['time_s']:.3f} s" in proc.stdout


def test_plans_reproduce_line_is_quoted_for_the_shell(tmp_path):
    """`trainest plan --model "my dir/m (1).yaml"`: the reproduce line, pasted into a shell, runs that model."""
    from trainest.catalog import specs_dir
    folder = tmp_path / "my dir"
    folder.mkdir()
    preset = (specs_dir() / "models" / "llama3.2-3b.yaml").read_text(encoding="utf-8")
    (folder / "m (1).yaml").write_text(preset, encoding="utf-8")
    proc = _run(["plan", "--model", "my dir/m (1).yaml", "--devices", "8", "-q"], cwd=str(tmp_path),
                env={"COLUMNS": "60"})
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("Reproduce the winner: ")]
    assert len(lines) == 1                                   # one line, however narrow the output
    words = shlex.split(lines[0].removeprefix("Reproduce the winner: "))
    assert words[:2] == ["trainest", "estimate"] and "my dir/m (1).yaml" in words
    again = _run([*words[1:], "--json"], cwd=str(tmp_path))
    assert again.returncode == 0, again.stderr


def test_compares_reproduce_line_is_not_wrapped_in_a_pipe():
    proc = _run(["compare", "--hardware", "h100-sxm,b200", "-q"], env={"COLUMNS": "60"})
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("Reproduce the first: ")]
    assert len(lines) == 1
    words = shlex.split(lines[0].removeprefix("Reproduce the first: "))
    assert words[-2] == "--recompute"            # the whole command on that line, up to its last option
