"""What scripts, CI and users' own files rely on: an estimate's `inputs` reloads as the same scenario (a user's
hardware profile included; values derived for the old scenario derived again under an override), paths inside a
file resolve against the file, user runs files with a bad value fail, and gates exit 3 with the JSON on stdout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from trainest.cli import app

CAL_RUNS = {"source": "my H100 cluster", "runs": [
    {"id": "c1", "model": "llama3-8b", "seq_len": 8192, "hardware": "h100-sxm", "devices": 8,
     "parallel": {"tp": 1, "dp": 8, "zero": 3}, "micro_batch": 1, "global_batch": 32, "recompute": "selective",
     "measured": {"step_time_s": 3.0}},
    {"id": "c2", "model": "llama3-8b", "seq_len": 8192, "hardware": "h100-sxm", "devices": 16,
     "parallel": {"tp": 1, "dp": 16, "zero": 3}, "micro_batch": 1, "global_batch": 64, "recompute": "selective",
     "measured": {"step_time_s": 3.1}},
    {"id": "c3", "model": "llama3-70b", "seq_len": 8192, "hardware": "h100-sxm", "devices": 64,
     "parallel": {"tp": 8, "dp": 8, "zero": 1, "sequence_parallel": True}, "micro_batch": 1, "global_batch": 64,
     "recompute": "selective", "measured": {"step_time_s": 9.0}},
]}


def flat(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def run(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("profile")
    runs = folder / "cal.yaml"
    runs.write_text(yaml.safe_dump(CAL_RUNS))
    out = folder / "prof.yaml"
    r = run("calibrate", "--runs", str(runs), "-o", str(out))
    assert r.exit_code == 0, r.stderr
    return out


def reload(doc: dict, tmp_path: Path, *extra: str):
    path = tmp_path / "inputs.json"
    path.write_text(json.dumps(doc["inputs"]))
    return run("estimate", "--config", str(path), *extra, "--json")


# --------------------------------------------------------------------------------- 2. the profile travels

def test_inputs_of_a_profile_estimate_name_the_file_and_reload_with_it(profile, tmp_path):
    first = run("estimate", "--model", "llama3-8b", "--devices", "8", "--global-batch", "32",
                "--hardware", str(profile), "--json")
    assert first.exit_code == 0, first.stderr
    doc = json.loads(first.stdout)
    assert doc["hardware"]["efficiency_basis"] == "profile"
    assert doc["inputs"]["hardware"] == str(profile.resolve())
    again = reload(doc, tmp_path)
    assert again.exit_code == 0, again.stderr
    doc2 = json.loads(again.stdout)
    assert doc2["hardware"]["efficiency_basis"] == "profile"
    assert doc2["step"]["time_s"] == doc["step"]["time_s"]


def test_a_catalog_entry_stays_a_name_in_inputs():
    doc = json.loads(run("estimate", "--json").stdout)
    assert doc["inputs"]["hardware"] == "h100-sxm"


def test_plan_job_names_the_profile_file(profile):
    r = run("plan", "--model", "llama3-8b", "--devices", "8", "--global-batch", "32", "--hardware", str(profile),
            "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["job"]["hardware"] == str(profile.resolve())


# ------------------------------------------------------------------------ 3. compare with a profile

def test_compare_shows_the_profile_and_reproduces_it_with_its_file(profile):
    args = ("compare", "--model", "llama3-8b", "--hardware", f"{profile},h100-sxm", "--devices", "8",
            "--global-batch", "32")
    r = run(*args)
    assert r.exit_code == 0, r.stderr
    out = flat(r.stdout)
    assert "prof.yaml (calibrated profile of h100-sxm)" in out
    assert f"Reproduce the first: trainest estimate --model llama3-8b --hardware {profile} --devices 8" in out
    doc = json.loads(run(*args, "--json").stdout)
    entries = {e["file"]: e for e in doc["compare"]}
    assert entries[str(profile)]["efficiency_basis"] == "profile"
    assert entries[None]["efficiency_basis"] == "fitted"
    profiled = entries[str(profile)]
    again = json.loads(run("estimate", "--model", "llama3-8b", "--global-batch", "32",
                           *profiled["plan"]["estimate_args"], "--json").stdout)
    assert again["step"]["time_s"] == profiled["step"]["time_s"]
