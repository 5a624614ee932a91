"""trainest.validate and `trainest validate`: schema checks, metric conversions, counts, CLI contract."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from trainest.cli import app
from trainest.errors import SpecError
from trainest.estimate import estimate
from trainest.scenario import scenario_from_mapping
from trainest.validate import load_runs, metric_from_step_time_s, step_time_s_from_metric, validate_runs

MODEL = {"name": "tiny", "layers": 4, "hidden": 1024, "ffn_hidden": 4096, "heads": 16, "kv_heads": 16,
         "vocab": 32000, "mlp": "gelu"}
BASE = {"model": MODEL, "seq_len": 2048, "hardware": "h100-sxm", "devices": 8, "precision": "bf16",
        "parallel": {"tp": 2, "pp": 1}, "micro_batch": 2, "global_batch": 64, "recompute": "none"}


def run(run_id: str, measured: dict | None, **changes) -> dict:
    return {"id": run_id, **BASE, **changes, "measured": measured}


def write_runs(tmp_path, runs: list[dict], name: str = "tiny.yaml", **top) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"source": "unit test", "runs": runs, **top}, sort_keys=False))
    return str(path)


def scenario_of(rec: dict):
    return scenario_from_mapping({k: v for k, v in rec.items() if k != "measured"}, "test")


@pytest.fixture()
def runs_file(tmp_path):
    runs = [
        run("steps", {"step_time_s": 0.5}),
        run("toks", {"tokens_per_s": 250000.0}),
        run("tflops", {"tflops_per_device": 300.0, "flops_formula": "korthikanti-eq7"}),
        run("mfu", {"mfu": 0.4, "flops_formula": "megatron-core"}),
        run("hours", {"device_hours": 100.0, "tokens": 1e9}),
        {"id": "moe", "source": "x", "expressible": False, "reason": "MoE (8 experts)", "measured": None},
        run("badpp", {"step_time_s": 1.0}, parallel={"tp": 1, "pp": 8}),   # pp=8 does not divide 4 layers
    ]
    return write_runs(tmp_path, runs), runs


def by_id(report):
    return {r.id: r for r in report.runs}


def test_tokens_per_s_run_compares_tokens_per_s(runs_file):
    path, runs = runs_file
    r = by_id(validate_runs([path]))["toks"]
    e = estimate(scenario_of(runs[1]))
    assert r.metric == "tokens_per_s" and r.measured == 250000.0
    assert r.predicted == pytest.approx(e.throughput.tokens_per_s, rel=1e-12)
    assert r.error_pct == pytest.approx((r.predicted - 250000.0) / 250000.0 * 100, rel=1e-12)


def test_step_time_run_compares_seconds(runs_file):
    path, runs = runs_file
    r = by_id(validate_runs([path]))["steps"]
    assert r.metric == "step_time_s"
    assert r.predicted == pytest.approx(estimate(scenario_of(runs[0])).step.time_s, rel=1e-12)


def test_tflops_run_uses_the_sources_formula(runs_file):
    path, runs = runs_file
    r = by_id(validate_runs([path]))["tflops"]
    e = estimate(scenario_of(runs[2]))
    # Korthikanti eq. 7 written out here: 72·B·s·L·h²·(1 + s/(6h) + V/(12·h·L))
    B, s, L, h, V = 64, 2048, 4, 1024, 32000
    flops = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L))
    assert r.predicted == pytest.approx(flops / (e.step.time_s * 8) / 1e12, rel=1e-12)
    # not trainest's own model-FLOP count (which is a different convention)
    assert r.predicted != pytest.approx(e.throughput.model_tflops_per_device, rel=1e-6)


def test_mfu_and_device_hours_conversions(runs_file):
    path, runs = runs_file
    report = by_id(validate_runs([path]))
    t_mfu = estimate(scenario_of(runs[3])).step.time_s
    from trainest.conventions import FLOPS_FORMULAS
    flops = FLOPS_FORMULAS["megatron-core"](layers=4, hidden=1024, ffn_hidden=4096, heads=16, kv_heads=16,
                                            vocab=32000, mlp="gelu", seq_len=2048, global_batch=64)
    assert report["mfu"].predicted == pytest.approx(flops / (t_mfu * 8 * 989e12), rel=1e-9)
    t = estimate(scenario_of(runs[4])).step.time_s
    steps = 1e9 / (64 * 2048)
    assert report["hours"].predicted == pytest.approx(steps * t * 8 / 3600, rel=1e-12)


def test_metric_round_trip_to_step_time(runs_file):
    path, _ = runs_file
    for case in load_runs([path]).cases:
        assert step_time_s_from_metric(case, metric_from_step_time_s(case, 0.731)) == pytest.approx(0.731, rel=1e-12)


def test_not_expressible_and_invalid_scenarios_are_counted_with_reasons(runs_file):
    path, _ = runs_file
    report = validate_runs([path])
    assert report.summary.runs == 5
    reasons = {n.id: n.reason for n in report.not_expressible}
    assert reasons["moe"] == "MoE (8 experts)"
    assert "pp=8 does not divide layers=4" in reasons["badpp"]
    assert report.summary.not_expressible == 2
    assert report.by_source["tiny"].not_expressible == 2


def test_summary_statistics(runs_file):
    path, _ = runs_file
    report = validate_runs([path])
    ape = sorted(abs(r.error_pct) for r in report.runs)
    assert report.summary.mape_pct == pytest.approx(sum(ape) / len(ape))
    assert report.summary.median_ape_pct == pytest.approx(ape[2])
    assert report.summary.max_ape_pct == pytest.approx(ape[-1])
    assert report.by_hardware["h100-sxm"].runs == 5


@pytest.mark.parametrize("where,bad,key", [
    ("record", {"colour": "red"}, "colour"),
    ("measured", {"step_time_s": 1.0, "step_time": 1.0}, "step_time"),
    ("top", {"sources": "x"}, "sources"),
])
def test_unknown_keys_are_errors_naming_the_key(tmp_path, where, bad, key):
    if where == "record":
        path = write_runs(tmp_path, [{**run("a", {"step_time_s": 1.0}), **bad}])
    elif where == "measured":
        path = write_runs(tmp_path, [run("a", bad)])
    else:
        path = write_runs(tmp_path, [run("a", {"step_time_s": 1.0})], **bad)
    with pytest.raises(SpecError, match=repr(key)) as err:
        validate_runs([path])
    assert "tiny.yaml" in str(err.value)


def test_bad_measurements_are_errors(tmp_path):
    for measured, text in (({"tflops_per_device": 100.0}, "needs flops_formula"),
                           ({"tflops_per_device": 100.0, "flops_formula": "7n"}, "flops_formula"),
                           ({"mfu": 42.0, "flops_formula": "6n"}, "fraction"),
                           ({}, "no measured value")):
        with pytest.raises(SpecError, match=text):
            validate_runs([write_runs(tmp_path, [run("a", measured)])])
    with pytest.raises(SpecError, match="duplicate id"):
        validate_runs([write_runs(tmp_path, [run("a", {"step_time_s": 1.0}), run("a", {"step_time_s": 2.0})])])


def test_filters(runs_file, tmp_path):
    path, _ = runs_file
    other = write_runs(tmp_path, [run("a100run", {"step_time_s": 1.0}, hardware="a100-80gb-sxm")], name="other.yaml")
    assert [r.id for r in validate_runs([path, other], hardware="a100-80gb-sxm").runs] == ["a100run"]
    assert validate_runs([path, other], source="OTHER").summary.runs == 1


runner = CliRunner()


@pytest.fixture()
def cli_runs_file(runs_file, tmp_path):
    """runs_file without the record that does not validate: in a file given with --runs it is an error."""
    _, runs = runs_file
    return write_runs(tmp_path, [r for r in runs if r["id"] != "badpp"], name="cli.yaml")


def test_cli_json_parses(cli_runs_file):
    res = runner.invoke(app, ["validate", "--runs", cli_runs_file, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["schema_version"] == "1.0"
    assert doc["summary"]["runs"] == 5 and doc["summary"]["not_expressible"] == 1
    assert {"id", "source", "hardware", "metric", "measured", "predicted", "error_pct"} <= set(doc["runs"][0])
    assert {n["id"] for n in doc["not_expressible"]} == {"moe"}


def test_cli_a_user_run_that_does_not_validate_is_an_error(runs_file):
    path, _ = runs_file
    res = runner.invoke(app, ["validate", "--runs", path, "--json"])
    assert res.exit_code == 1 and res.stdout == ""
    assert "run 'badpp'" in res.stderr and "pp=8 does not divide layers=4" in res.stderr


def test_cli_runs_takes_several_files_after_one_flag(cli_runs_file, tmp_path):
    """`--runs A B` (the issue's `--runs FILE ...`) equals `--runs A --runs B`."""
    path = cli_runs_file
    other = write_runs(tmp_path, [run("a100run", {"step_time_s": 1.0}, hardware="a100-80gb-sxm")], name="other.yaml")
    one = runner.invoke(app, ["validate", "--runs", path, other, "--json"])
    two = runner.invoke(app, ["validate", "--runs", path, "--runs", other, "--json"])
    assert one.exit_code == two.exit_code == 0, one.output
    assert json.loads(one.stdout)["summary"] == json.loads(two.stdout)["summary"]
    assert json.loads(one.stdout)["summary"]["runs"] == 6


def test_cli_table_and_markdown(cli_runs_file):
    path = cli_runs_file
    res = runner.invoke(app, ["validate", "--runs", path])
    assert res.exit_code == 0 and "toks" in res.stdout
    res = runner.invoke(app, ["validate", "--runs", path, "--markdown"])
    assert res.exit_code == 0 and "| source | runs | MAPE %" in res.stdout


def test_cli_errors(tmp_path):
    bad = write_runs(tmp_path, [{**run("a", {"step_time_s": 1.0}), "colour": 1}])
    res = runner.invoke(app, ["validate", "--runs", bad])
    assert res.exit_code == 1 and res.stdout == "" and res.stderr.startswith("Error: ") and "'colour'" in res.stderr
    res = runner.invoke(app, ["validate", "--runs", str(tmp_path / "missing.yaml")])
    assert res.exit_code == 1 and "does not exist" in res.stderr
    assert runner.invoke(app, ["validate", "--no-such-option"]).exit_code == 2


@pytest.mark.parametrize("args", [["--set", ""], ["--hardware", ""], ["--source", " "], ["--runs", ""]],
                         ids=["set", "hardware", "source", "runs"])
def test_cli_a_blank_filter_is_an_error(args):
    # --hardware '' was dropped (every hardware's runs validated), --set '' said only "no run matches",
    # --runs '' named the directory '.'
    res = runner.invoke(app, ["validate", *args])
    assert res.exit_code == 1 and res.stdout == "", res.stdout[:200]
    assert res.stderr.startswith("Error: ") and len(res.stderr.splitlines()) == 1, res.stderr
    assert (f"{args[0]} {args[1]!r} is empty" if args[0] != "--runs" else "runs file '' is an empty name") in res.stderr


def test_cli_calibrate_a_blank_runs_file_is_an_error(tmp_path):
    res = runner.invoke(app, ["calibrate", "--runs", "", "-o", str(tmp_path / "p.yaml")])
    assert res.exit_code == 1 and res.stdout == "" and res.stderr == "Error: runs file '' is an empty name; give a " \
        "runs YAML file\n"


# --- run sets: a runs file's `set:` (absent: public) ----------------------------------------------------

def test_a_files_set_reaches_every_case_and_result_and_groups_the_report(tmp_path):
    public = write_runs(tmp_path, [run("p", {"step_time_s": 0.5}),
                                   {"id": "px", "source": "x", "expressible": False, "reason": "MoE"}], name="pub.yaml")
    other = write_runs(tmp_path, [run("o1", {"step_time_s": 0.5}), run("o2", {"step_time_s": 0.7})], name="lab.yaml",
                       set="lab-node")
    assert {c.id: c.run_set for c in load_runs([public, other]).cases} == {"p": "public", "o1": "lab-node",
                                                                          "o2": "lab-node"}
    report = validate_runs([public, other])
    assert {r.id: r.run_set for r in report.runs} == {"p": "public", "o1": "lab-node", "o2": "lab-node"}
    assert {n.id: n.run_set for n in report.not_expressible} == {"px": "public"}
    assert list(report.by_set) == ["lab-node", "public"]
    assert report.by_set["lab-node"].runs == 2 and report.by_set["lab-node"].not_expressible == 0
    assert report.by_set["public"].runs == 1 and report.by_set["public"].not_expressible == 1
    only = validate_runs([public, other], run_set="lab-node")
    assert [r.id for r in only.runs] == ["o1", "o2"] and not only.not_expressible
    assert only.summary == report.by_set["lab-node"]
    assert [r.id for r in validate_runs([public, other], run_set="public").runs] == ["p"]


@pytest.mark.parametrize("bad", ["Public", "two words", "", 3])
def test_a_bad_set_name_is_an_error_naming_the_file(tmp_path, bad):
    path = write_runs(tmp_path, [run("a", {"step_time_s": 1.0})], set=bad)
    with pytest.raises(SpecError, match="set") as err:
        load_runs([path])
    assert "tiny.yaml" in str(err.value)


def test_cli_set_filter_json_by_set_and_unknown_set(tmp_path):
    public = write_runs(tmp_path, [run("p", {"step_time_s": 0.5})], name="pub.yaml")
    other = write_runs(tmp_path, [run("o", {"step_time_s": 0.5})], name="lab.yaml", set="lab-node")
    res = runner.invoke(app, ["validate", "--runs", public, other, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    # a user's file without `set:` is its file stem, not `public` (the published runs)
    assert set(doc["by_set"]) == {"pub", "lab-node"} and {r["run_set"] for r in doc["runs"]} == {"pub", "lab-node"}
    res = runner.invoke(app, ["validate", "--runs", public, other, "--set", "lab-node", "--json"])
    assert res.exit_code == 0 and [r["id"] for r in json.loads(res.stdout)["runs"]] == ["o"]
    res = runner.invoke(app, ["validate", "--runs", public, other, "--set", "nope"])
    assert res.exit_code == 1 and res.stdout == ""
    assert "--set 'nope'" in res.stderr and "lab-node, pub" in res.stderr
    res = runner.invoke(app, ["validate", "--runs", public, other, "--markdown"])
    assert res.exit_code == 0 and "| set | runs |" in res.stdout


def test_a_runs_file_may_be_a_bare_list_whose_records_give_their_own_source(tmp_path):
    """Issue 11, case 9: a file-level `source` was required even when every record had one, and a bare
    list of records was refused."""
    import yaml as _yaml
    from trainest.errors import SpecError as _SpecError
    from trainest.validate import validate_runs as _validate_runs
    record = {"id": "r1", "source": "my cluster, 2026", "model": "llama3-8b", "hardware": "h100-sxm", "devices": 8,
              "seq_len": 8192, "precision": "bf16", "parallel": {"zero": 3}, "micro_batch": 1, "global_batch": 64,
              "recompute": "selective", "measured": {"step_time_s": 8.1}}
    bare = tmp_path / "bare.yaml"
    bare.write_text(_yaml.safe_dump([record]))
    assert _validate_runs([bare]).summary.runs == 1
    no_file_source = tmp_path / "mapping.yaml"
    no_file_source.write_text(_yaml.safe_dump({"runs": [record]}))
    assert _validate_runs([no_file_source]).summary.runs == 1
    record.pop("source")
    bare.write_text(_yaml.safe_dump([record]))
    with pytest.raises(_SpecError, match="no source"):
        _validate_runs([bare])


def test_a_few_runs_that_do_not_validate_are_listed_with_their_reasons(tmp_path):
    """A typo in your own runs file (a model that is no preset) was only counted ('1 not expressible');
    its reason is now under the tables, with the suggestion."""
    runs = tmp_path / "mine.yaml"
    record = {"hardware": "h100-sxm", "devices": 8, "seq_len": 8192, "global_batch": 64,
              "measured": {"step_time_s": 8.0}}
    runs.write_text(yaml.safe_dump({"source": "my cluster", "runs": [
        {"id": "good", "model": "llama3-8b", **record}, {"id": "typo", "model": "llama9-8b", **record}]}))
    res = runner.invoke(app, ["validate", "--runs", str(runs)], env={"COLUMNS": "300"})
    # a typo in a value of your own file is an error naming the run and the value (it was counted as not
    # expressible, and validate exited 0)
    assert res.exit_code == 1 and res.stdout == ""
    assert "run 'typo'" in res.stderr and "unknown model 'llama9-8b'" in res.stderr


def err_text(res) -> str:
    return " ".join(res.stderr.replace("│", " ").split())


def out_text(res) -> str:
    return " ".join(res.stdout.replace("│", " ").replace("┃", " ").split())


# ----------------------------------------------------------------- fsdp: false is plain data parallel

def test_cli_fsdp_false_run_is_predicted_without_sharding(tmp_path):
    big = {"model": "llama3-8b", "seq_len": 8192, "hardware": "h100-sxm", "devices": 8, "precision": "bf16",
           "micro_batch": 1, "global_batch": 8, "recompute": "selective"}
    path = write_runs(tmp_path, [{"id": "ddp", **big, "parallel": {"fsdp": False}, "measured": {"step_time_s": 1.3}},
                                 {"id": "z0", **big, "parallel": {"zero": 0}, "measured": {"step_time_s": 1.3}}])
    res = runner.invoke(app, ["validate", "--runs", path, "--json"])
    assert res.exit_code == 0, res.output
    ddp, z0 = json.loads(res.stdout)["runs"]
    assert ddp["zero"] == 0 and ddp["fits"] is False and "parallel.zero" not in ddp["derived"]
    assert ddp["predicted_step_s"] == z0["predicted_step_s"]
    bad = write_runs(tmp_path, [{"id": "r1", **big, "parallel": {"fsdp": False, "zero": 3},
                                 "measured": {"step_time_s": 1.3}}], name="bad.yaml")
    res = runner.invoke(app, ["validate", "--runs", bad])
    assert res.exit_code == 1 and res.stdout == ""
    assert "run 'r1'" in err_text(res) and "fsdp: false contradicts zero=3" in err_text(res)
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------- impossible measurements are bad input

LLAMA_8X_H100 = {"model": "llama3-8b", "seq_len": 8192, "hardware": "h100-sxm", "devices": 8, "precision": "bf16",
                 "micro_batch": 1, "global_batch": 8, "parallel": {"dp": 8, "zero": 3}, "framework": "torchtitan",
                 "recompute": "op"}


@pytest.mark.parametrize("measured, metric, cause", [
    ({"tokens_per_s": 600000}, "tokens_per_s", "may count more devices than the run's 8"),
    ({"step_time_s": 0.01}, "step_time_s", "one micro-batch"),
    ({"tflops_per_device": 8000, "flops_formula": "megatron-core"}, "tflops_per_device", "whole job's"),
    ({"device_hours": 1, "tokens": 1e9}, "device_hours", "wall-clock hours"),
])
def test_cli_a_measurement_faster_than_the_peak_is_bad_input(tmp_path, measured, metric, cause):
    path = write_runs(tmp_path, [{"id": "fast", **LLAMA_8X_H100, "measured": measured}])
    for cmd in (["validate", "--runs", path], ["validate", "--runs", path, "--json"],
                ["calibrate", "--runs", path, "-o", str(tmp_path / "p.yaml")]):
        res = runner.invoke(app, cmd)
        assert res.exit_code == 1 and res.stdout == "", (cmd, res.output)
        err = err_text(res)
        assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
        assert "run 'fast'" in err and f"measured.{metric}" in err and "implied MFU of" in err, err
        assert "at most 100 %" in err and cause in err, err
    assert not (tmp_path / "p.yaml").exists()


def test_cli_a_slow_measurement_is_kept(tmp_path):
    """tokens_per_s 6500 on 8 H100 (a per-device figure in the total's place) is slow, not impossible."""
    path = write_runs(tmp_path, [{"id": "slow", **LLAMA_8X_H100, "measured": {"tokens_per_s": 6500}}])
    res = runner.invoke(app, ["validate", "--runs", path, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["runs"][0]["error_pct"] > 500


# ------------------------------------------------------------ validate carries the framework caveats

def test_cli_runs_carry_their_framework_and_the_table_names_unvalidated_ones(tmp_path):
    runs = [run("mc", {"step_time_s": 0.5}, framework="megatron-core"),
            run("ds1", {"step_time_s": 0.5}, framework="deepspeed", parallel={"tp": 1, "pp": 1}),
            run("ds2", {"step_time_s": 0.5}, framework="deepspeed", parallel={"tp": 1, "pp": 1}, offload="optimizer"),
            run("hf", {"step_time_s": 0.5}, framework="hf-accelerate", parallel={"tp": 1, "pp": 1},
                finetune="lora")]
    path = write_runs(tmp_path, runs)
    res = runner.invoke(app, ["validate", "--runs", path, "--json"])
    assert res.exit_code == 0, res.output
    got = {r["id"]: (r["framework"], r["finetune"], r["offload"]) for r in json.loads(res.stdout)["runs"]}
    assert got == {"mc": ("megatron-core", "full", "none"), "ds1": ("deepspeed", "full", "none"),
                   "ds2": ("deepspeed", "full", "optimizer"), "hf": ("hf-accelerate", "lora", "none")}
    res = runner.invoke(app, ["validate", "--runs", path])
    assert res.exit_code == 0, res.output
    out = out_text(res)
    assert "No bundled measured run uses the frameworks deepspeed (2 runs), hf-accelerate (1 run)" in out, out
    assert "not validated" in out and "megatron-core (" not in out
    only_seen = write_runs(tmp_path, runs[:1], name="seen.yaml")
    assert "No bundled measured run uses" not in out_text(runner.invoke(app, ["validate", "--runs", only_seen]))


# --------------------------------------------------------------------------- measured peak memory

def test_cli_measured_peak_memory_is_shown_against_the_prediction(tmp_path):
    path = write_runs(tmp_path, [run("mem", {"step_time_s": 0.5, "peak_memory_gib": 20.0}),
                                 run("nomem", {"step_time_s": 0.5})])
    doc = json.loads(runner.invoke(app, ["validate", "--runs", path, "--json"]).stdout)
    predicted_gib = doc["runs"][0]["predicted_memory_bytes"] / 2**30
    res = runner.invoke(app, ["validate", "--runs", path])
    assert res.exit_code == 0, res.output
    out = out_text(res)
    assert f"mem: 20 GiB measured, {predicted_gib:.4g} GiB predicted ({(predicted_gib / 20 - 1) * 100:+.1f} %)" in out
    assert out.count("GiB measured") == 1
    none = write_runs(tmp_path, [run("nomem", {"step_time_s": 0.5})], name="none.yaml")
    assert "Peak memory per device" not in out_text(runner.invoke(app, ["validate", "--runs", none]))


def test_a_measured_peak_is_compared_with_the_predicted_total_of_its_memory_kind(tmp_path):
    """Issue 34: allocated/active peaks against the tensors, reserved (and unspecified) against tensors + the
    allocator's reserve, device (nvidia-smi) against that + the CUDA context and NCCL."""
    kinds = ("allocated", "active", "reserved", "device", None)
    runs = [run(f"k{i}", {"step_time_s": 0.5, "peak_memory_gib": 20.0, **({"peak_memory_kind": k} if k else {})})
            for i, k in enumerate(kinds)]
    doc = json.loads(runner.invoke(app, ["validate", "--runs", write_runs(tmp_path, runs), "--json"]).stdout)
    got = {r["measured_memory_kind"]: r["predicted_memory_bytes"] for r in doc["runs"]}
    e = estimate(scenario_of(runs[0]))
    assert got["allocated"] == got["active"] == pytest.approx(e.memory.allocated_bytes)
    assert got["reserved"] == got["unspecified"] == pytest.approx(e.memory.reserved_bytes)
    assert got["device"] == pytest.approx(e.memory.per_device_bytes)
    assert got["allocated"] < got["reserved"] < got["device"]
    bad = write_runs(tmp_path, [run("b", {"step_time_s": 0.5, "peak_memory_gib": 20.0, "peak_memory_kind": "peak"})],
                     name="bad.yaml")
    res = runner.invoke(app, ["validate", "--runs", bad])
    assert res.exit_code == 1 and res.stdout == "" and "peak_memory_kind" in err_text(res)
    assert "allocated, active, reserved, device, unspecified" in err_text(res)


def test_a_memory_only_run_is_compared_per_kind_and_not_as_a_step_time(tmp_path):
    """Issue 34: a run that gives only its peak memory (no step metric) is compared like with like and summarized
    per memory kind (JSON memory, memory_by_kind); it enters no step-time summary."""
    runs = [run("alloc", {"peak_memory_gib": 20.0, "peak_memory_kind": "allocated"}),
            run("dev", {"peak_memory_gib": 30.0, "peak_memory_kind": "device"}),
            run("step", {"step_time_s": 0.5, "peak_memory_gib": 25.0, "peak_memory_kind": "allocated"})]
    res = runner.invoke(app, ["validate", "--runs", write_runs(tmp_path, runs), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [r["id"] for r in doc["runs"]] == ["step"] and doc["summary"]["runs"] == 1
    memory = {m["id"]: m for m in doc["memory"]}
    e = estimate(scenario_of(runs[0]))
    assert memory["alloc"]["predicted_bytes"] == pytest.approx(e.memory.allocated_bytes)
    assert memory["dev"]["predicted_bytes"] == pytest.approx(e.memory.per_device_bytes)
    assert memory["alloc"]["error_pct"] == pytest.approx((e.memory.allocated_bytes / (20 * 2**30) - 1) * 100)
    by_kind = doc["memory_by_kind"]
    assert set(by_kind) == {"allocated", "device"} and by_kind["allocated"]["runs"] == 2
    errors = [memory[i]["error_pct"] for i in ("alloc", "step")]
    assert by_kind["allocated"]["mape_pct"] == pytest.approx(sum(abs(x) for x in errors) / 2)
    only = write_runs(tmp_path, runs[:1], name="only.yaml")
    res = runner.invoke(app, ["validate", "--runs", only])
    assert res.exit_code == 0 and "Peak memory by memory kind" in out_text(res), res.output
    none = write_runs(tmp_path, [run("x", {"peak_memory_kind": "allocated"})], name="none.yaml")
    res = runner.invoke(app, ["validate", "--runs", none])
    assert res.exit_code == 1 and res.stdout == "" and "peak_memory_gib" in err_text(res)


def test_a_run_that_ran_and_does_not_fit_names_the_memory_settings_it_left_out(tmp_path):
    """A measured run trainest calls 'does not fit' names the memory-deciding settings its record did not give."""
    big = run("big", {"peak_memory_gib": 70.0, "peak_memory_kind": "allocated"}, model="llama3-70b", devices=1,
              parallel={"tp": 1, "pp": 1, "dp": 1}, global_batch=2)
    big.pop("recompute", None)
    res = runner.invoke(app, ["validate", "--runs", write_runs(tmp_path, [big])])
    assert res.exit_code == 0, res.output
    out = " ".join(out_text(res).split())
    assert "big ran with a measured peak of 70 GiB, and trainest says it does not fit" in out
    assert "recompute" in out.split("does not fit:")[1]


def test_cli_measured_peak_memory_above_the_device_is_bad_input(tmp_path):
    path = write_runs(tmp_path, [run("big", {"step_time_s": 1.3, "peak_memory_gib": 200})])
    for cmd in (["validate", "--runs", path, "--json"], ["calibrate", "--runs", path, "-o", str(tmp_path / "p.yaml")]):
        res = runner.invoke(app, cmd)
        assert res.exit_code == 1 and res.stdout == "" and len(res.stderr.strip().splitlines()) == 1
        err = err_text(res)
        assert "run 'big'" in err and "peak_memory_gib: 200 is more than a h100-sxm holds" in err, err
        assert "at most 79.6 GiB per device" in err         # 81,559 MiB: what an H100 80GB exposes
    ok = write_runs(tmp_path, [run("full", {"step_time_s": 0.5, "peak_memory_gib": 79.6})], name="ok.yaml")
    assert runner.invoke(app, ["validate", "--runs", ok, "--json"]).exit_code == 0    # an 80 GB H100 holds 80 GiB


# ------------------------------------------------------- the MAPE without the mis-specified runs

def test_cli_mape_without_the_misspecified_runs(tmp_path):
    """A 70B on 8 H100 without sharding needs far more than the device's memory: its error says little; the
    summary keeps it (unchanged meaning) and gives the MAPE without it alongside."""
    nofit = {"id": "70b-on-8", "model": "llama3-70b", "hardware": "h100-sxm", "devices": 8, "seq_len": 8192,
             "global_batch": 32, "parallel": {"zero": 0}, "recompute": "none", "measured": {"step_time_s": 20.0}}
    path = write_runs(tmp_path, [run("ok", {"step_time_s": 0.5}), nofit])
    res = runner.invoke(app, ["validate", "--runs", path, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    errors = {r["id"]: abs(r["error_pct"]) for r in doc["runs"]}
    assert [r["misspecified"] for r in doc["runs"]] == [False, True] and doc["misspecified"] == ["70b-on-8"]
    assert doc["summary"]["runs"] == 2
    assert doc["summary"]["mape_pct"] == pytest.approx((errors["ok"] + errors["70b-on-8"]) / 2)
    assert doc["summary_without_misspecified"]["runs"] == 1
    assert doc["summary_without_misspecified"]["mape_pct"] == pytest.approx(errors["ok"])
    out = out_text(runner.invoke(app, ["validate", "--runs", path]))
    assert (f"2 runs compared: MAPE {doc['summary']['mape_pct']:.1f} %" in out
            and f"without the 1 mis-specified run (more than 1.5x the device's memory): MAPE {errors['ok']:.1f} %"
            in out), out
    one = write_runs(tmp_path, [run("ok", {"step_time_s": 0.5})], name="one.yaml")
    assert "mis-specified run" not in out_text(runner.invoke(app, ["validate", "--runs", one]))


# --------------------------------------------------------- measured.tokens parses as a run's tokens

@pytest.mark.parametrize("tokens", ["10.0e9", "10B", "10000M", 1e10, 10_000_000_000])
def test_measured_tokens_parse_as_the_run_level_tokens(tmp_path, tokens):
    path = write_runs(tmp_path, [run("h", {"device_hours": 100.0, "tokens": tokens}, tokens=tokens)])
    res = runner.invoke(app, ["validate", "--runs", path, "--json"])
    assert res.exit_code == 0, res.output
    (case,) = load_runs([path], user_files=True).cases
    assert case.measurement.tokens == 1e10 and case.scenario.tokens == 1e10


def test_measured_tokens_that_are_no_count_are_one_clear_error(tmp_path):
    path = write_runs(tmp_path, [run("h", {"device_hours": 100.0, "tokens": "10X"})])
    res = runner.invoke(app, ["validate", "--runs", path])
    assert res.exit_code == 1 and res.stdout == "" and len(res.stderr.strip().splitlines()) == 1
    assert "run 'h'.measured.tokens: '10X' is not a number; use e.g. 300B, 1.5T or 2e12" in err_text(res)


# --------------------------------------------------------------- mfu_peak: an FP8 run's MFU vs bf16

FP8_RUN = {**LLAMA_8X_H100, "precision": "fp8", "recompute": "op"}


def test_mfu_peak_bf16_reads_an_fp8_mfu_against_the_bf16_peak(tmp_path):
    path = write_runs(tmp_path, [
        {"id": "fp8peak", **FP8_RUN, "measured": {"mfu": 0.45, "flops_formula": "megatron-core"}},
        {"id": "bf16peak", **FP8_RUN, "measured": {"mfu": 0.45, "flops_formula": "megatron-core", "mfu_peak": "bf16"}},
        {"id": "same", **FP8_RUN, "measured": {"mfu": 0.45, "flops_formula": "megatron-core",
                                               "mfu_peak": "precision"}}])
    fp8, bf16, same = load_runs([path], user_files=True).cases
    hw = fp8.scenario.hardware
    assert (fp8.measurement.mfu_peak, bf16.measurement.mfu_peak) == ("precision", "bf16")
    # the same MFU against a peak half as high means twice the step time
    assert step_time_s_from_metric(bf16) == pytest.approx(step_time_s_from_metric(fp8) * hw.peak("fp8") /
                                                          hw.peak("bf16"), rel=1e-12)
    assert step_time_s_from_metric(same) == step_time_s_from_metric(fp8)
    res = runner.invoke(app, ["validate", "--runs", path, "--json"])
    assert res.exit_code == 0, res.output
    assert [r["mfu_peak"] for r in json.loads(res.stdout)["runs"]] == ["precision", "bf16", "precision"]
    assert "MFU (megatron-core, bf16 peak)" in out_text(runner.invoke(app, ["validate", "--runs", path]))


def test_fp8_mfu_that_disagrees_by_the_peak_ratio_names_mfu_peak(tmp_path):
    tokens = {"id": "tt", **FP8_RUN, "measured": {"tokens_per_s": 61400, "mfu": 0.45, "flops_formula": "megatron-core"}}
    res = runner.invoke(app, ["validate", "--runs", write_runs(tmp_path, [tokens]), "--json"])
    assert res.exit_code == 0, res.output
    err = err_text(res)
    assert "disagree by 50%" in err and "the mfu may be a fraction of the bf16 peak" in err
    assert "give measured.mfu_peak: bf16" in err
    tokens["measured"]["mfu_peak"] = "bf16"
    res = runner.invoke(app, ["validate", "--runs", write_runs(tmp_path, [tokens], name="b.yaml"), "--json"])
    assert res.exit_code == 0 and "mfu_peak" not in res.stderr
    bf16 = {"id": "b", **LLAMA_8X_H100, "measured": {"tokens_per_s": 50000, "mfu": 0.2, "flops_formula":
                                                      "megatron-core"}}
    res = runner.invoke(app, ["validate", "--runs", write_runs(tmp_path, [bf16], name="c.yaml"), "--json"])
    assert "disagree" in res.stderr and "mfu_peak" not in res.stderr      # a bf16 run: no such hint


def test_mfu_peak_is_checked(tmp_path):
    for measured, text in [({"mfu": 0.4, "flops_formula": "megatron-core", "mfu_peak": "fp8"}, "mfu_peak: 'fp8'"),
                           ({"step_time_s": 1.0, "mfu_peak": "bf16"}, "no mfu is given")]:
        res = runner.invoke(app, ["validate", "--runs", write_runs(tmp_path, [run("m", measured)])])
        assert res.exit_code == 1 and res.stdout == "" and text in err_text(res), res.stderr


# ------------------------------------------------------------------------------------- cosmetic

def test_measured_and_predicted_show_the_same_significant_digits():
    from trainest.report.validate import fmt_value
    assert (fmt_value(52000, "tokens/s"), fmt_value(53750.4, "tokens/s")) == ("52,000", "53,750")
    assert fmt_value(46096, "tokens/s") == "46,100" and fmt_value(5.12e6, "tokens/s") == "5,120,000"
    assert (fmt_value(0.135, "s"), fmt_value(0.08763, "s")) == ("0.1350", "0.08763")
    assert (fmt_value(20, "s"), fmt_value(29.294, "s")) == ("20.00", "29.29")
    assert fmt_value(1.5e8, "tokens/s") == "1.500e+08" and fmt_value(0.45, "fraction") == "45.0 %"


def test_a_profile_fitted_to_one_run_says_run(tmp_path):
    path = write_runs(tmp_path, [run("one", {"step_time_s": 0.5})])
    res = runner.invoke(app, ["calibrate", "--runs", path, "-o", str(tmp_path / "p.yaml")])
    assert res.exit_code == 0, res.output
    head = " ".join((tmp_path / "p.yaml").read_text().split())
    assert "fitted to 1 measured run (tiny.yaml)" in head and "measured runs" not in head


def test_the_mean_step_error_has_one_sign_whatever_each_runs_metric(tmp_path):
    """Two runs of one scenario, each predicted 20 % too fast (the measured step 1.25x the predicted one), one
    measured as a step time and one as tokens/s: their metric errors have opposite signs (a time too short, a
    throughput too high) and their mean says little; the step-time error is -20 % for both, and so is its mean."""
    from trainest.validate import step_error_pct
    base = {"model": "llama3-8b", "hardware": "h100-sxm", "devices": 8, "seq_len": 8192, "global_batch": 64,
            "precision": "bf16", "parallel": {"tp": 1, "pp": 1, "zero": 3}, "micro_batch": 1, "recompute": "none"}
    step = estimate(scenario_from_mapping(base, "test")).step.time_s * 1.25
    tokens = 64 * 8192 / step
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"source": "unit test", "runs": [
        {"id": "timed", **base, "measured": {"step_time_s": step}},
        {"id": "counted", **base, "measured": {"tokens_per_s": tokens}}]}, sort_keys=False))
    report = validate_runs([path], user_files=True)
    timed, counted = report.runs
    assert timed.error_pct == pytest.approx(-20.0) and counted.error_pct == pytest.approx(25.0)
    assert step_error_pct(timed) == pytest.approx(-20.0) and step_error_pct(counted) == pytest.approx(-20.0)
    assert report.summary.mean_step_error_pct == pytest.approx(-20.0)
    assert report.summary.mean_error_pct == pytest.approx(2.5)
    doc = json.loads(CliRunner().invoke(app, ["validate", "--runs", str(path), "--json", "-q"]).stdout)
    assert doc["summary"]["mean_step_error_pct"] == pytest.approx(-20.0)
