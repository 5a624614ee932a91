"""Issue 34: a measured peak below the weights, gradients and optimizer state its run's settings hold contradicts
the record (docs/model.md §7.13): validate names the settings the record does not state that set that state, and
reports the MAPE of the runs whose records are consistent beside the MAPE of all."""

from __future__ import annotations

import importlib.util
import json
import pathlib

import pytest
import yaml
from typer.testing import CliRunner

from trainest.cli import app
from trainest.estimate import estimate
from trainest.scenario import scenario_from_mapping
from trainest.units import GiB
from trainest.validate_memory import STATE_SETTINGS, contradicting_settings, state_bytes_of

# a 3B full fine-tune in pure BF16 with AdamW on one H100: 8 B per parameter of weights, gradients and state
FULL = {"model": "llama3.2-3b", "hardware": "h100-sxm", "devices": 1, "seq_len": 512, "precision": "bf16",
        "master_weights": "none", "parallel": {"tp": 1, "pp": 1, "zero": 0}, "micro_batch": 1, "global_batch": 4,
        "recompute": "none", "optimizer": "adamw"}


def write_runs(tmp_path, runs: list[dict]) -> str:
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"source": "unit test", "set": "memory", "runs": runs}, sort_keys=False))
    return str(path)


def state_gib() -> float:
    return state_bytes_of(estimate(scenario_from_mapping(FULL, "test")).memory) / GiB


def test_the_state_is_the_weights_gradients_and_optimizer_lines_and_under_the_allocated_total():
    m = estimate(scenario_from_mapping(FULL, "test")).memory
    assert state_bytes_of(m) == pytest.approx(m.weights_bytes + m.gradients_bytes + m.optimizer_bytes)
    assert 0 < state_bytes_of(m) < m.allocated_bytes
    params = scenario_from_mapping(FULL, "test").model.params
    assert state_bytes_of(m) == pytest.approx(8.0 * params, rel=0.01)    # 2 + 2 + 2·2 B per parameter


def test_only_a_peak_below_the_state_names_the_unstated_settings_that_set_it():
    assert contradicting_settings(5.0, 10.0, ("recompute", "optimizer", "micro_batch")) == ("optimizer",)
    assert contradicting_settings(5.0, 10.0, ("parallel.zero", "optimizer")) == ("optimizer", "parallel.zero")
    assert contradicting_settings(10.0, 10.0, ("optimizer",)) == ()           # at the state: not below it
    assert contradicting_settings(12.0, 10.0, ("optimizer",)) == ()
    assert contradicting_settings(5.0, 10.0, ("recompute", "micro_batch")) == ()   # the record states the state's
    assert set(STATE_SETTINGS) >= {"optimizer", "master_weights", "parallel.zero", "offload"}


def test_validate_names_the_assumed_optimizer_and_reports_the_mape_of_the_others(tmp_path):
    below = 0.7 * state_gib()
    runs = [{"id": "below", **FULL, "assumed": ["optimizer"],
             "measured": {"peak_memory_gib": below, "peak_memory_kind": "allocated"}},
            {"id": "stated", **FULL, "measured": {"peak_memory_gib": below, "peak_memory_kind": "allocated"}},
            {"id": "above", **FULL, "assumed": ["optimizer"],
             "measured": {"peak_memory_gib": 1.5 * state_gib(), "peak_memory_kind": "allocated"}}]
    res = CliRunner().invoke(app, ["validate", "--runs", write_runs(tmp_path, runs), "--json", "-q"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    memory = {m["id"]: m for m in doc["memory"]}
    assert memory["below"]["contradicting"] == ["optimizer"]
    assert memory["stated"]["contradicting"] == []       # every state setting stated: the count is in question
    assert memory["above"]["contradicting"] == []
    assert memory["below"]["state_bytes"] == pytest.approx(state_gib() * GiB)
    kind = doc["memory_by_kind"]["allocated"]
    assert kind["runs"] == 3 and kind["contradicted"] == 1
    others = [abs(memory[i]["error_pct"]) for i in ("stated", "above")]
    assert kind["consistent_mape_pct"] == pytest.approx(sum(others) / 2)
    assert kind["mape_pct"] == pytest.approx(sum(abs(m["error_pct"]) for m in doc["memory"]) / 3)
    text = CliRunner().invoke(app, ["validate", "--runs", write_runs(tmp_path, runs)])
    assert "below: its measured peak" in " ".join(text.output.split()) and "optimizer (assumed" in text.output


def test_the_memory_importer_marks_the_settings_its_transcriber_derived_as_assumed():
    path = pathlib.Path(__file__).resolve().parents[1] / "tools" / "memory_runs.py"
    spec = importlib.util.spec_from_file_location("memory_runs", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    run = {"optimizer": "adamw", "micro_batch": 4}
    fields = ["micro/global batch, lora settings, quantize, precision and optimizer from config_hub/... at 00af8b0d",
              "measured_peak_memory_gib (GB/1.0737)", "recompute"]
    assert mod.derived_settings(fields, run) == ["optimizer", "micro_batch"]    # recompute: the run leaves it out
    assert mod.derived_settings(fields, {**run, "recompute": "full"}) == ["optimizer", "micro_batch", "recompute"]
    assert mod.derived_settings(["model.* dims from the public model config"], run) == []
