"""The `inputs` echo of `trainest estimate --json` is itself a valid scenario: feeding it back with
--config reproduces the estimate (the CHANGELOG's promise for schema 1.0)."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from trainest.cli import app

CASES = [
    [],
    ["--model", "gpt3-175b", "--hardware", "a100-80gb-sxm", "--devices", "64", "--tp", "8", "--pp", "8",
     "--vpp", "3", "--global-batch", "64", "--recompute", "selective", "--sequence-parallel"],
    ["--model", "llama3.1-405b", "--hardware", "h100-sxm", "--devices", "1024", "--tp", "8", "--pp", "8",
     "--vpp", "4", "--pipeline-split", "balanced", "--tp-overlap", "--zero", "1", "--dp-shard", "8",
     "--global-batch", "512", "--attention", "flash2"],
    ["--model", "llama3-8b", "--layers", "20", "--hardware", "h200-sxm", "--devices", "16", "--cp", "2", "--fsdp",
     "--seq-len", "16384", "--global-batch", "16", "--precision", "fp8"],
    ["--model", "gpt3-175b", "--hardware", "a100-80gb-sxm", "--devices", "384", "--zero", "3", "--micro-batch", "4",
     "--global-batch", "1536", "--recompute", "full", "--attention", "standard", "--precision", "fp16",
     "--dp-collectives", "flat"],
]


def _reloaded(args: list[str], path) -> tuple[dict, dict]:
    """(the estimate's JSON, the JSON of `--config` of its inputs echo written to `path`, YAML or JSON)."""
    runner = CliRunner()
    first = runner.invoke(app, ["estimate", *args, "--json"])
    assert first.exit_code == 0, first.stderr
    doc = json.loads(first.stdout)
    path.write_text(json.dumps(doc["inputs"]) if path.suffix == ".json" else yaml.safe_dump(doc["inputs"]))
    again = runner.invoke(app, ["estimate", "--config", str(path), "--json"])
    assert again.exit_code == 0, again.stderr
    return doc, json.loads(again.stdout)


@pytest.mark.parametrize("args", CASES, ids=["default", "korthikanti", "405b-balanced-hsdp", "shape-override-cp",
                                             "deepspeed-flat"])
def test_inputs_echo_loads_again_and_reproduces_the_estimate(args, tmp_path):
    doc, doc2 = _reloaded(args, tmp_path / "inputs.yaml")
    assert doc2["step"] == doc["step"]
    assert doc2["memory"] == doc["memory"]
    assert doc2["inputs"]["parallel"] == doc["inputs"]["parallel"]


def test_a_stale_micro_batches_echo_is_an_error(tmp_path):
    runner = CliRunner()
    doc = json.loads(runner.invoke(app, ["estimate", "--json"]).stdout)
    doc["inputs"]["global_batch"] = doc["inputs"]["global_batch"] * 2
    path = tmp_path / "inputs.yaml"
    path.write_text(yaml.safe_dump(doc["inputs"]))
    result = runner.invoke(app, ["estimate", "--config", str(path), "--json"])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "micro_batches" in result.stderr and "remove it" in result.stderr


def _preset_names() -> list[str]:
    from trainest.catalog import _catalog_files
    return sorted(_catalog_files("models"))


@pytest.mark.parametrize("preset", _preset_names())
def test_every_presets_inputs_reload_as_the_same_model(preset, tmp_path):
    """Every shape field the model holds (head_dim, MoE, MLA, hybrid, MTP) travels in inputs.model: the echo
    (`inputs` of --json: scenario_mapping, made JSON-safe) written as JSON and read back as `estimate --config`
    reads it gives the same model and the same step and memory. The command itself (its JSON, --config) is
    the CASES above; here the estimate is called without the CLI's no-fit advice, a plan search per preset."""
    from trainest.cli.estimate import scenario_mapping_from_options
    from trainest.estimate import estimate
    from trainest.knobs import CLI
    from trainest.report import clean
    from trainest.scenario import scenario_from_mapping, scenario_mapping
    first = scenario_from_mapping({"model": preset}, CLI, schedules_need_a_pipeline=True)
    path = tmp_path / "inputs.json"
    path.write_text(json.dumps(clean(scenario_mapping(first)), allow_nan=False))
    mapping, shape = scenario_mapping_from_options(str(path), {})
    again = scenario_from_mapping(mapping, f"scenario {str(path)!r}", shape=shape, schedules_need_a_pipeline=True)
    assert again.model._replace(source=first.model.source) == first.model    # (the echo names no source)
    assert scenario_mapping(again)["model"] == scenario_mapping(first)["model"]
    e, e2 = estimate(first), estimate(again)
    assert e2.step.time_s == e.step.time_s and e2.memory == e.memory
