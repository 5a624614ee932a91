"""A scenario that does not fit leads with the fix: the first line says so, each fix is a complete command that
pastes, the same under -q and in the JSON (issue 36)."""

from __future__ import annotations

import json
import shlex

import pytest
from helpers import call_entry


def _run(capsys, *args):
    return call_entry(list(args), capsys)


@pytest.mark.parametrize("quiet", [[], ["-q"]], ids=["tables", "quiet"])
def test_the_first_line_says_it_does_not_fit_and_the_commands_paste(capsys, quiet):
    code, out, err = _run(capsys, "estimate", "--model", "llama3.2-3b", "--devices", "1", "--seq-len", "8192",
                          "--global-batch", "64", *quiet)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("DOES NOT FIT: needs")
    commands = [line.split(": ", 1)[1] for line in lines[1:] if line.startswith("  ") and ": trainest " in line]
    assert commands, out[:500]
    for command in commands:
        words = shlex.split(command)
        assert words[:2] == ["trainest", "estimate"] and "llama3.2-3b" in words
        code, doc_text, _ = _run(capsys, *words[1:], "--json", "-q")
        assert code == 0 and json.loads(doc_text)["memory"]["fits"], command


def test_the_json_gives_the_same_advice(capsys):
    code, out, _ = _run(capsys, "estimate", "--model", "llama3-70b", "--json", "-q")
    doc = json.loads(out)
    advice = doc["fit_advice"]
    assert not doc["memory"]["fits"] and advice["per_device_bytes"] > advice["capacity_bytes"]
    best = advice["fastest_that_fits"]
    assert best is not None and best["devices"] > 8 and best["command"][:3] == ["estimate", "--model", "llama3-70b"]
    code, again, _ = _run(capsys, *best["command"], "--json", "-q")
    fitted = json.loads(again)
    assert fitted["memory"]["fits"] and fitted["step"]["time_s"] == pytest.approx(best["step_s"])
    for change in advice["single_changes"]:
        code, again, _ = _run(capsys, *change["command"], "--json", "-q")
        assert json.loads(again)["memory"]["fits"]


def test_a_scenario_that_fits_has_no_advice(capsys):
    code, out, _ = _run(capsys, "estimate", "--json", "-q")
    assert "fit_advice" not in json.loads(out)
    code, out, _ = _run(capsys, "estimate", "-q")
    assert not out.startswith("DOES NOT FIT")


def test_a_change_replaces_the_option_it_sets(capsys):
    from trainest.cli.nofit import change_command
    words = change_command({"model": "m", "tp": 2, "dp": 4, "recompute": "none"}, "--tp 4")
    assert words.count("--tp") == 1 and words[-2:] == ["--tp", "4"] and "--dp" not in words
    assert "--recompute" in words


def test_where_no_layout_fits_at_the_default_sequence_a_shorter_one_is_offered_and_pastes(capsys):
    """A QLoRA of Llama 3 8B on one 24 GiB card fits no layout at the model's default 8,192 tokens, and the card
    has no path to a second one: the advice offers the longest halving of the default sequence that fits, as a
    command that pastes and fits. A sequence the user gave is never shortened."""
    scenario = ["estimate", "--model", "llama3-8b", "--hardware", "rtx-4090", "--framework", "litgpt",
                "--finetune", "qlora", "--json", "-q"]
    code, out, _ = _run(capsys, *scenario)
    doc = json.loads(out)
    best = doc["fit_advice"]["fastest_that_fits"]
    assert code == 0 and not doc["memory"]["fits"] and doc["fit_advice"]["single_changes"] == []
    assert best is not None and best["same_devices"] and 512 <= best["seq_len"] < doc["inputs"]["seq_len"]
    assert best["command"][-2:] == ["--seq-len", str(best["seq_len"])]
    code, again, _ = _run(capsys, *best["command"], "--json", "-q")
    fitted = json.loads(again)
    assert fitted["memory"]["fits"] and fitted["inputs"]["seq_len"] == best["seq_len"]
    assert fitted["step"]["time_s"] == pytest.approx(best["step_s"])
    code, out, _ = _run(capsys, *scenario, "--seq-len", "8192")
    assert json.loads(out)["fit_advice"]["fastest_that_fits"] is None
