"""The JSON contract: every command's --json output validates against its JSON Schema in docs/schema/,
every key it prints is documented there, and `schema_version` is trainest.estimate.SCHEMA_VERSION."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from trainest.cli import app
from trainest.estimate import SCHEMA_VERSION

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "docs" / "schema"
RUNNER = CliRunner()


@functools.cache
def schema(name: str) -> dict:
    doc = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(doc)
    return doc


def run_json(*args: str) -> dict:
    result = RUNNER.invoke(app, [*args, "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 3), result.stderr
    text = result.stdout
    doc = json.loads(text)
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc
    return doc


def undocumented_keys(doc, sch: dict, path: str = "$") -> list[str]:
    """Keys in `doc` that the schema does not name (objects with only additionalProperties accept any key)."""
    found = []
    if isinstance(doc, dict) and sch.get("type") in ("object", None):
        props = sch.get("properties", {})
        extra = sch.get("additionalProperties")
        for key, value in doc.items():
            if key in props:
                found += undocumented_keys(value, props[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                found += undocumented_keys(value, extra, f"{path}.{key}")
            else:
                found.append(f"{path}.{key}")
    elif isinstance(doc, list) and isinstance(sch.get("items"), dict):
        for i, item in enumerate(doc[:50]):
            found += undocumented_keys(item, sch["items"], f"{path}[{i}]")
    return found


def check(doc: dict, name: str) -> None:
    sch = schema(name)
    jsonschema.validate(doc, sch, cls=jsonschema.Draft202012Validator)
    assert doc["schema_version"] == SCHEMA_VERSION
    assert not undocumented_keys(doc, sch), f"keys missing from docs/schema/{name}.schema.json"


ESTIMATE_CASES = {
    "default": (),
    "no-price-no-fit": ("--hardware", "a100-80gb-pcie", "--model", "llama3-70b", "--devices", "2"),
    "pipeline-interleaved": ("--model", "gpt3-13b", "--devices", "32", "--tp", "4", "--pp", "4", "--vpp", "5",
                             "--sequence-parallel", "--micro-batch", "1", "--global-batch", "64"),
    "fp8-full-recompute": ("--precision", "fp8", "--recompute", "full", "--zero", "2", "--global-batch", "32"),
    "standard-attention-cp": ("--attention", "standard", "--cp", "2", "--seq-len", "4096", "--framework", "deepspeed"),
    "tpu": ("--hardware", "tpu-v5p", "--model", "gpt3-1.3b", "--devices", "16"),
    "gate-broken": ("--max-days", "1e-9", "--require-fit", "--model", "gpt3-175b"),
    "qlora-ops": ("--finetune", "qlora", "--lora-rank", "8", "--lora-targets", "attention", "--zero", "3",
                  "--recompute", "full", "--ops"),
    "offload-ops": ("--hardware", "gh200", "--devices", "1", "--offload", "optimizer+weights", "--seq-len", "2048",
                    "--global-batch", "8", "--ops"),
    "dgx-spark-ops": ("--hardware", "dgx-spark", "--devices", "1", "--model", "llama3.2-3b", "--seq-len", "256",
                      "--global-batch", "8", "--ops"),
    # the newest inputs: a sliding window with MoE (inputs.model.attention_window, active_params, ep traffic),
    # MLA with the all-to-alls hidden, a hybrid Mamba-2 model, a window given on the command line
    "moe-window": ("--model", "gpt-oss-20b", "--devices", "8", "--ep", "8", "--seq-len", "4096", "--global-batch", "64"),
    "mla-deepep": ("--model", "deepseek-v3", "--hardware", "gb200", "--devices", "256", "--pp", "4",
                   "--pipeline-split", "balanced", "--ep", "64",
                   "--zero", "1", "--precision", "fp8", "--global-batch", "4096", "--moe-overlap", "deepep",
                   "--recompute-modules", "layernorm,mla_up_proj,moe_act"),
    "hybrid": ("--model", "nemotron-3-nano", "--devices", "16", "--ep", "8", "--zero", "1", "--precision", "fp8",
               "--global-batch", "256", "--recompute", "full"),
    "window-option-ops": ("--attention-window", "4096", "--seq-len", "16384", "--global-batch", "16", "--ops"),
}


@pytest.mark.parametrize("args", ESTIMATE_CASES.values(), ids=ESTIMATE_CASES.keys())
def test_estimate_json_matches_schema(args):
    check(run_json("estimate", *args), "estimate")


def test_the_estimate_cases_carry_the_newest_keys():
    """The keys the schema check above must see: the window and active parameters of the model echo, the
    expert-parallel traffic."""
    doc = run_json("estimate", *ESTIMATE_CASES["moe-window"])
    assert doc["inputs"]["model"]["attention_window"] == {"size": 128, "kind": "sliding", "global_every": 2}
    assert doc["inputs"]["model"]["active_params"] < doc["inputs"]["model"]["params"]
    assert doc["step"]["communication_detail_s"]["ep"] > 0


def test_estimate_json_from_a_config_file(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("model: {layers: 4, hidden: 256, ffn_hidden: 1024, heads: 4, vocab: 1000}\ndevices: 2\n"
                    "hardware: l4\ndevices_per_node: 2\nprecision: fp16\n", encoding="utf-8")
    check(run_json("estimate", "--config", str(path)), "estimate")


def test_inputs_echo_loads_again(tmp_path):
    """`inputs` is a loadable scenario: feeding it back (minus the derived/computed keys) gives the same step."""
    import yaml
    first = run_json("estimate", "--tp", "2", "--pp", "2", "--global-batch", "16")
    inputs = {k: v for k, v in first["inputs"].items() if k not in ("derived", "micro_batches")}
    inputs["model"] = {k: v for k, v in inputs["model"].items() if k != "params"}
    inputs["parallel"] = {k: v for k, v in inputs["parallel"].items() if k != "tp_overlap" or v}
    path = tmp_path / "again.yaml"
    path.write_text(yaml.safe_dump(inputs), encoding="utf-8")
    again = run_json("estimate", "--config", str(path))
    # the same step; its band may only narrow: the echo states what the first run left to defaults (micro_batch),
    # and a default micro-batch widens the band's low end (trainest/band.py, UNSTATED_SETTINGS)
    band_ends = ("time_s_low", "time_s_high")
    assert {k: v for k, v in again["step"].items() if k not in band_ends} == \
        {k: v for k, v in first["step"].items() if k not in band_ends}
    assert first["step"]["time_s_low"] <= again["step"]["time_s_low"] <= again["step"]["time_s_high"] \
        <= first["step"]["time_s_high"]
    assert again["memory"] == first["memory"]


@pytest.mark.parametrize("what", ["hardware", "models", "frameworks"])
def test_list_json_matches_schema(what):
    doc = run_json("list", what)
    check(doc, "list")
    assert len(doc[what]) > 5


def _has_json(command: str) -> bool:
    result = RUNNER.invoke(app, [command, "--help"])
    return result.exit_code == 0 and "--json" in result.stdout


def test_plan_json_matches_schema():
    if not _has_json("plan"):
        pytest.skip("plan has no --json yet")
    doc = run_json("plan", "--model", "gpt3-125m", "--devices", "8", "--global-batch", "32")
    check(doc, "plan")
    assert doc["plans"], "a small model on 8 GPUs has feasible plans"


def test_plan_and_compare_json_with_the_default_batch_match_their_schemas():
    """Without --global-batch the job says the batch was derived (job.derived), a key the schemas declare."""
    plan = run_json("plan", "--model", "gpt3-125m", "--devices", "8")
    check(plan, "plan")
    compare = run_json("compare", "--model", "gpt3-125m", "--hardware", "h100-sxm,a100-80gb-sxm", "--devices", "8")
    check(compare, "compare")
    assert plan["job"]["derived"] == compare["job"]["derived"] == ["global_batch"]
    default = run_json("compare", "--model", "gpt3-125m", "--hardware", "h100-sxm,a100-80gb-sxm")
    check(default, "compare")
    assert default["job"]["derived"] == ["devices", "global_batch"] and default["devices"] == "8"
    spark = run_json("plan", "--model", "gpt3-125m", "--hardware", "dgx-spark")      # one Spark, not eight
    check(spark, "plan")
    assert spark["job"]["devices"] == 1 and spark["job"]["derived"] == ["devices", "global_batch"]


def test_validate_json_matches_schema():
    if not _has_json("validate"):
        pytest.skip("validate has no --json yet")
    doc = run_json("validate", "--source", "korthikanti2022")
    check(doc, "validate")
    assert doc["runs"]


WARNED_RUNS = """source: schema test
runs:
  - id: dense-unseen
    model: llama3-8b
    seq_len: 8192
    hardware: mi300x
    devices: 8
    precision: bf16
    parallel: {tp: 1, pp: 1, dp: 8, zero: 3}
    micro_batch: 1
    global_batch: 64
    recompute: none
    framework: deepspeed
    measured: {step_time_s: 9.0, tokens_per_s: 30000}
  - id: moe-unseen
    model: gpt-oss-20b
    seq_len: 4096
    hardware: h100-sxm
    devices: 8
    precision: bf16
    parallel: {tp: 1, pp: 1, dp: 8, ep: 8, zero: 3}
    micro_batch: 1
    global_batch: 64
    recompute: full
    framework: torchtitan
    measured: {step_time_s: 3.0}
"""


def test_validate_json_with_warnings_unseen_frameworks_and_uncalibrated_hardware_matches_schema(tmp_path):
    """The keys validate fills only for some runs: two metrics that disagree (warnings), a framework no bundled
    run uses (unseen_frameworks), a MoE run under a framework no bundled MoE run uses, hardware with prior
    efficiencies (uncalibrated_hardware, runs[].hardware_calibrated)."""
    runs = tmp_path / "runs.yaml"
    runs.write_text(WARNED_RUNS, encoding="utf-8")
    doc = run_json("validate", "--runs", str(runs))
    check(doc, "validate")
    assert len(doc["warnings"]) == 1 and "disagree" in doc["warnings"][0]
    assert doc["unseen_frameworks"] == {"deepspeed": 1}
    assert doc["moe_unseen_frameworks"] == {"torchtitan": 1}
    assert doc["uncalibrated_hardware"] == {"mi300x": 1}
    assert [r["hardware_calibrated"] for r in doc["runs"]] == [False, True]


def test_validate_json_of_every_bundled_run_matches_schema(validate_all_stdout):
    """All bundled sets at once: MoE, MLA, hybrid, windowed and fine-tuning runs, vTrain rows (the document
    `trainest validate --json` writes, run once for this and the validate-all golden: conftest.py)."""
    doc = json.loads(validate_all_stdout)
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc
    check(doc, "validate")
    assert {r["architecture"] for r in doc["runs"]} >= {"dense", "moe"}


def test_calibrate_json_matches_schema(tmp_path):
    if not _has_json("calibrate"):
        pytest.skip("calibrate has no --json yet")
    runs = Path(__file__).resolve().parent.parent / "specs" / "runs" / "korthikanti2022.yaml"
    out = tmp_path / "fitted.yaml"
    doc = run_json("calibrate", "--runs", str(runs), "--output", str(out))
    check(doc, "calibrate")
    assert out.is_file()


def test_every_command_with_json_has_a_schema():
    import typer.main
    for name in typer.main.get_command(app).commands:
        if _has_json(name):
            assert (SCHEMA_DIR / f"{name}.schema.json").is_file(), f"{name} --json has no schema in docs/schema/"


# --------------------------------------------------------------------- the schemas are not vacuous

@pytest.fixture(scope="module")
def estimate_doc() -> dict:
    return run_json("estimate")


@pytest.mark.parametrize("path,value", [
    (("schema_version",), "2.0"),
    (("step", "time_s"), -1.0),
    (("step", "time_s"), None),
    (("step", "bottleneck"), "disk"),
    (("step", "shares", "compute"), 1.5),
    (("throughput", "mfu"), 1.2),
    (("memory", "fits"), "yes"),
    (("inputs", "parallel", "zero"), 4),
    (("inputs", "precision"), "int8"),
    (("training", "steps"), 0.5),
    (("warnings",), "none"),
], ids=lambda x: ".".join(x) if isinstance(x, tuple) else repr(x))
def test_schema_rejects_wrong_documents(estimate_doc, path, value):
    doc = copy.deepcopy(estimate_doc)
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema("estimate"), cls=jsonschema.Draft202012Validator)


def test_schema_requires_every_section(estimate_doc):
    for key in estimate_doc:
        doc = {k: v for k, v in estimate_doc.items() if k != key}
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(doc, schema("estimate"), cls=jsonschema.Draft202012Validator)


def test_changelog_describes_this_schema_version():
    changelog = (SCHEMA_DIR.parent.parent / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"schema {SCHEMA_VERSION}" in changelog.lower() or f"schema_version {SCHEMA_VERSION}" in changelog


def test_compare_json_matches_schema():
    doc = run_json("compare", "--model", "gpt3-125m", "--hardware", "h100-sxm,a100-80gb-sxm,cerebras-wse-3",
                   "--devices", "8", "--global-batch", "32")
    check(doc, "compare")
    assert [e["can_run"] for e in doc["compare"]] == [True, True, False]


@pytest.mark.parametrize("args", [("--devices", "8..32", "--zero", "3", "--global-batch", "64"),
                                  ("--precision", "bf16,fp8", "--hardware", "b200", "--fsdp"),
                                  ("--devices", "8,16", "--global-batch", "64", "--plan"),
                                  ("--tp", "1,3", "--global-batch", "64")], ids=["devices", "precision", "plan", "bad"])
def test_sweep_json_matches_schema(args):
    doc = run_json("sweep", *args)
    check(doc, "sweep")
    assert doc["sweep"]


@pytest.mark.parametrize(("command", "args"), [
    ("estimate", ["estimate", "--max-days", "1", "--require-fit"]),
    ("plan", ["plan", "--model", "llama3.2-3b", "--devices", "8..16", "--deadline", "1h"]),
    ("compare", ["compare", "--hardware", "h100-sxm,b200", "--model", "llama3.2-3b", "--devices", "8..16",
                 "--budget", "10"]),
])
def test_the_gates_match_the_schemas(capsys, command, args):
    from helpers import call_entry
    code, out, _ = call_entry([*args, "--json", "-q"], capsys)
    assert code == 3
    doc = json.loads(out)
    assert doc["gates"] and not all(g["passed"] for g in doc["gates"])
    check(doc, command)
