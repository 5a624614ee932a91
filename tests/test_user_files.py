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


# --------------------------------------------- 4. an echo's derived values are derived again under an override

def _json(*args: str) -> dict:
    r = run(*args)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def _same(a: dict, b: dict) -> None:
    assert a["step"]["time_s"] == b["step"]["time_s"]
    assert a["training"] == b["training"]
    for key in ("devices", "devices_per_node", "framework", "tokens", "price_per_hour", "global_batch", "parallel",
                "precision", "kernels"):
        assert a["inputs"][key] == b["inputs"][key], key


@pytest.mark.parametrize("override", [["--hardware", "b200"], ["--hardware", "tpu-v5p"], ["--model", "llama3-70b"],
                                      ["--devices", "64"]], ids=["b200", "tpu-v5p", "llama3-70b", "devices-64"])
def test_an_echo_with_an_override_equals_the_override_alone(override, tmp_path):
    doc = _json("estimate", "--json")
    path = tmp_path / "d_in.json"
    path.write_text(json.dumps(doc["inputs"]))
    _same(_json("estimate", "--config", str(path), *override, "--json"), _json("estimate", *override, "--json"))


def test_values_the_user_gave_stay_under_an_override(tmp_path):
    doc = _json("estimate", "--global-batch", "128", "--tokens", "1T", "--price-per-hour", "2", "--json")
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump(doc["inputs"]))
    again = _json("estimate", "--config", str(path), "--hardware", "b200", "--json")
    assert (again["inputs"]["global_batch"], again["inputs"]["tokens"], again["inputs"]["price_per_hour"]) == \
        (128, 1e12, 2.0)
    assert again["inputs"]["devices_per_node"] == _json("estimate", "--hardware", "b200", "--json")["inputs"][
        "devices_per_node"]


def test_a_shape_override_echo_reloads_with_its_shape(tmp_path):
    doc = _json("estimate", "--layers", "20", "--json")      # the default model (derived), modified
    again = reload(doc, tmp_path)
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["inputs"]["model"] == doc["inputs"]["model"]


# ----------------------------------------------------------- 6. paths in a file are the file's

def test_paths_in_a_runs_file_resolve_against_its_folder(profile, tmp_path, monkeypatch):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "prof.yaml").write_text(profile.read_text())
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "m.yaml").write_text(yaml.safe_dump(
        {"name": "mini", "layers": 4, "hidden": 1024, "ffn_hidden": 4096, "heads": 16, "vocab": 32000}))
    runs = {"source": "mine", "runs": [
        {"id": "p1", "model": "llama3-8b", "hardware": "prof.yaml", "devices": 8, "seq_len": 8192, "global_batch": 32,
         "measured": {"step_time_s": 3.0}},
        {"id": "p2", "model": "../cfg/m.yaml", "hardware": "h100-sxm", "devices": 8, "seq_len": 2048, "global_batch": 32,
         "measured": {"step_time_s": 0.5}}]}
    (sub / "r.yaml").write_text(yaml.safe_dump(runs))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    r = run("validate", "--runs", str(sub / "r.yaml"), "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["summary"]["runs"] == 2, doc["not_expressible"]


def test_paths_in_a_config_resolve_against_its_folder(profile, tmp_path, monkeypatch):
    (tmp_path / "prof.yaml").write_text(profile.read_text())
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"hardware": "prof.yaml", "global_batch": 32}))
    monkeypatch.chdir(profile.parent.parent)
    doc = _json("estimate", "--config", str(tmp_path / "s.yaml"), "--json")
    assert doc["hardware"]["efficiency_basis"] == "profile"


# ------------------------------------------------- 5, 7, 11, 12: a user's runs file is checked like input

RUN = {"id": "r1", "model": "llama3-8b", "hardware": "h100-sxm", "devices": 8, "seq_len": 8192, "global_batch": 32,
       "measured": {"step_time_s": 3.0}}


def runs_file(tmp_path: Path, *runs: dict, name: str = "mine.yaml", **top) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"source": "my cluster", "runs": list(runs), **top}))
    return str(path)


@pytest.mark.parametrize("change, named", [({"hardware": "h100-sxn"}, "h100-sxm"),
                                           ({"framework": "megatron"}, "megatron-core"),
                                           ({"precision": "bf17"}, "bf16"),
                                           ({"parallel": {"tp": 3}}, "tp·pp·cp")],
                         ids=["hardware", "framework", "precision", "tp3"])
def test_a_bad_value_in_a_users_runs_file_is_an_error(tmp_path, change, named):
    path = runs_file(tmp_path, {**RUN, **change})
    for extra in ([], ["--json"]):
        r = run("validate", "--runs", path, *extra)
        assert r.exit_code == 1
        assert r.stdout == ""
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: ")
        assert "mine.yaml" in lines[0] and "'r1'" in lines[0] and named in lines[0]


def test_a_user_run_marked_not_expressible_is_still_reported(tmp_path):
    path = runs_file(tmp_path, RUN, {"id": "r2", "source": "x", "expressible": False, "reason": "hybrid"})
    r = run("validate", "--runs", path, "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["summary"]["runs"] == 1 and [n["id"] for n in doc["not_expressible"]] == ["r2"]


def test_nothing_compared_in_a_users_file_is_an_error(tmp_path):
    path = runs_file(tmp_path, {"id": "r2", "expressible": False, "reason": "hybrid"})
    r = run("validate", "--runs", path, "--json")
    assert r.exit_code == 1 and r.stdout == ""
    assert "no run of" in r.stderr and "hybrid" in r.stderr


@pytest.mark.parametrize("missing", ["hardware", "devices", "global_batch", "seq_len"])
def test_a_run_without_what_its_measurement_needs_is_an_error(tmp_path, missing):
    path = runs_file(tmp_path, {k: v for k, v in RUN.items() if k != missing})
    r = run("validate", "--runs", path)
    assert r.exit_code == 1 and r.stdout == ""
    assert f"missing required key {missing}" in r.stderr and "'r1'" in r.stderr


def test_the_values_a_run_leaves_out_are_listed(tmp_path):
    path = runs_file(tmp_path, RUN)
    doc = json.loads(run("validate", "--runs", path, "--json").stdout)
    assert {"precision", "micro_batch", "parallel.zero", "recompute"} <= set(doc["runs"][0]["derived"])
    out = flat(run("validate", "--runs", path).stdout)
    assert "taken from the defaults" in out and "r1: precision" in out


def test_a_users_file_without_set_is_not_public(tmp_path):
    doc = json.loads(run("validate", "--runs", runs_file(tmp_path, RUN, name="my-cluster.yaml"), "--json").stdout)
    assert list(doc["by_set"]) == ["my-cluster"] and doc["runs"][0]["run_set"] == "my-cluster"
    doc = json.loads(run("validate", "--runs", runs_file(tmp_path, RUN, name="Public.yaml"), "--json").stdout)
    assert list(doc["by_set"]) == ["user"]


def test_two_measured_metrics_that_disagree_warn(tmp_path):
    path = runs_file(tmp_path, {**RUN, "measured": {"step_time_s": 4, "tokens_per_s": 10}})
    r = run("validate", "--runs", path, "--json")
    assert r.exit_code == 0
    assert json.loads(r.stdout)["runs"][0]["metric"] == "step_time_s"
    assert "Warning:" in r.stderr and "tokens_per_s" in r.stderr and "the metric compared" in r.stderr
    agree = runs_file(tmp_path, {**RUN, "measured": {"step_time_s": 4, "tokens_per_s": 32 * 8192 / 4}}, name="b.yaml")
    assert "Warning" not in run("validate", "--runs", agree, "--json").stderr


# ------------------------------------------------------------ 8. runs that cannot fit in memory

# (20 s: 75 % MFU, a possible measurement; 10 s would be 149 %, faster than the device, an error)
NOFIT = {"id": "70b-on-8", "model": "llama3-70b", "hardware": "h100-sxm", "devices": 8, "seq_len": 8192,
         "global_batch": 32, "parallel": {"zero": 0}, "recompute": "none", "measured": {"step_time_s": 20.0}}


def test_validate_flags_a_run_that_does_not_fit(tmp_path):
    path = runs_file(tmp_path, NOFIT)
    r = run("validate", "--runs", path)
    assert r.exit_code == 0, r.stderr
    out = flat(r.stdout)
    error = json.loads(run("validate", "--runs", path, "--json").stdout)["runs"][0]["error_pct"]
    assert error > 30 and f"{error:+.1f}" in out          # the table shows the run's error (predicted too fast)
    assert "NO" in out and "does not fit in trainest's memory model" in out


def test_calibrate_leaves_out_a_run_that_does_not_fit(tmp_path):
    runs = runs_file(tmp_path, *CAL_RUNS["runs"], NOFIT)
    r = run("calibrate", "--runs", runs, "-o", str(tmp_path / "p.yaml"), "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["runs"] == 3 and len(doc["left_out"]) == 1 and doc["left_out"][0].startswith("70b-on-8:")
    alone = run("calibrate", "--runs", runs_file(tmp_path, NOFIT, name="n.yaml"), "-o", str(tmp_path / "q.yaml"))
    assert alone.exit_code == 1 and alone.stdout == "" and "fits in trainest's memory model" in alone.stderr


def test_calibrate_on_one_run_says_determines(tmp_path):
    r = run("calibrate", "--runs", runs_file(tmp_path, CAL_RUNS["runs"][0]), "-o", str(tmp_path / "p.yaml"))
    assert r.exit_code == 0, r.stderr
    assert "The 1 run determines" in flat(r.stdout)


# ------------------------------------------------------------------ 9. one gate contract: exit 3, JSON out

@pytest.mark.parametrize("args", [
    ["plan", "--model", "llama3-70b", "--devices", "256..2048", "--tokens", "15T", "--deadline", "30d"],
    ["plan", "--model", "llama3-70b", "--devices", "256..2048", "--tokens", "15T", "--budget", "1000"],
    ["compare", "--model", "llama3-70b", "--hardware", "h100-sxm,b200", "--devices", "64..256", "--tokens", "15T",
     "--deadline", "1d"],
    ["estimate", "--max-days", "1"],
], ids=["plan-deadline", "plan-budget", "compare-deadline", "estimate-max-days"])
def test_a_gate_not_met_exits_3_with_the_json_on_stdout(args):
    r = run(*args, "--json")
    assert r.exit_code == 3, r.stderr
    json.loads(r.stdout)
    assert "Gate failed:" in r.stderr
    assert run(*args).exit_code == 3


def test_plan_gate_json_says_it_was_not_met():
    doc = json.loads(run("plan", "--model", "llama3-70b", "--devices", "256..2048", "--tokens", "15T",
                         "--deadline", "30d", "--json").stdout)
    assert doc["devices_search"]["gate_met"] is False and "within 30.0 days" in doc["devices_search"]["gate_failed"]
    assert doc["devices_search"]["chosen"] == 2048          # the closest: the fastest count tried
    met = json.loads(run("plan", "--model", "llama3-8b", "--devices", "8..64", "--tokens", "10B", "--deadline", "30d",
                         "--json").stdout)
    assert met["devices_search"]["gate_met"] is True


# --------------------------------------------------------- 13. the band of a profile says whose it is

def test_a_profiles_band_says_it_is_the_catalog_entrys(profile, tmp_path):
    r = run("estimate", "--hardware", str(profile), "--global-batch", "32")
    assert r.exit_code == 0, r.stderr
    out = flat(r.stdout)
    assert "this band is the catalog entry h100-sxm's, not the profile's" in out
    assert "trainest calibrate on cal.yaml, 3 runs" in out
    v = run("validate", "--runs", runs_file(tmp_path, RUN), "--hardware", str(profile))
    assert v.exit_code == 0, v.stderr
    assert f"Predicted with the hardware profile {profile}" in flat(v.stdout)


# ------------------------------------------------ 10. a sweep that changes the device count shows it

def test_a_tp_sweep_without_devices_shows_the_device_count():
    r = CliRunner().invoke(app, ["sweep", "--tp", "4..16"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.stderr
    out = flat(r.stdout)
    assert " tp devices step " in out and " 16 16 " in out
    assert "the device count changes across the points (8 to 16" in out
    held = CliRunner().invoke(app, ["sweep", "--tp", "1..4"], env={"COLUMNS": "200"})
    assert " tp devices " not in flat(held.stdout)


def test_an_unknown_node_path_names_the_scale_up_domain_when_the_file_gives_a_scale_up_rate(tmp_path, capsys):
    """A newcomer's accelerator file with a scale-up rate and 8 devices per node but no scale_up_domain (so 1)
    was refused asking only for system.intra_node; the message now also names scale_up_domain, and the file with
    the change it names runs (issue 36, the unusual-accelerator task)."""
    from helpers import call_entry
    text = ("name: my-accel\npeak_tflops: {bf16: 500}\nmemory: {capacity_gb: 96, bandwidth_gb_per_s: 3000}\n"
            "system: {devices_per_node: 8, scale_up_gb_per_s: 200, scale_out_gbit_per_s: 400}\n"
            "efficiency: {gemm: 0.7, gemm_half_dim: 512, attention: 0.5, memory: 0.8, scale_up: 0.8, scale_out: 0.8}\n"
            "source: a datasheet\n")
    path = tmp_path / "accel.yaml"
    path.write_text(text)
    code, out, err = call_entry(["estimate", "--hardware", str(path), "--json"], capsys)
    assert code != 0 and out == "" and "system.scale_up_domain: 8" in err
    fixed = tmp_path / "accel-fixed.yaml"
    fixed.write_text(text.replace("devices_per_node: 8,", "devices_per_node: 8, scale_up_domain: 8,"))
    code, out, err = call_entry(["estimate", "--hardware", str(fixed), "--json"], capsys)
    assert code == 0 and json.loads(out)["step"]["time_s"] > 0


def test_a_hardware_file_missing_several_keys_names_them_all_at_once(tmp_path, capsys):
    """A newcomer's first accelerator file (name, peaks, memory) was refused one missing key per try: 'system',
    then 'efficiency', then 'source' (issue 36, the unusual-accelerator task). An efficiency block is no longer
    required (the prior of a device without runs: tests/test_hardware_prior.py); what `system` needs is named too."""
    from helpers import call_entry
    path = tmp_path / "accel.yaml"
    path.write_text("name: accel\npeak_tflops: {bf16: 500}\nmemory: {capacity_gb: 64, bandwidth_gb_per_s: 2000}\n")
    code, out, err = call_entry(["estimate", "--hardware", str(path)], capsys)
    assert code == 1 and out == "" and len(err.splitlines()) == 1
    assert all(f"'{key}'" in err for key in ("system", "source")) and "'efficiency'" not in err
    assert "devices_per_node" in err and "intra_node" in err


def test_a_user_file_edited_in_the_same_process_is_read_again(tmp_path):
    """catalog cached a user's hardware/model file by its path alone: in one process (a notebook, a library
    caller) the file edited since gave its old values without a word. Found by tools/fuzz_cli.py's round
    (issue 32); the key now holds the file's modification time and size."""
    from trainest import catalog
    hw = tmp_path / "dev.yaml"
    text = (catalog.specs_dir() / "hardware" / "h100-sxm.yaml").read_text()
    hw.write_text(text)
    before = catalog.load_hardware(str(hw))
    hw.write_text(text.replace("name: h100-sxm", "name: h100-edited"))
    assert catalog.load_hardware(str(hw)).name == "h100-edited" != before.name
    model = tmp_path / "m.yaml"
    mtext = (catalog.specs_dir() / "models" / "llama3-8b.yaml").read_text()
    model.write_text(mtext)
    layers = catalog.load_model(str(model)).layers
    model.write_text(mtext.replace(f"layers: {layers}\n", f"layers: {layers // 2}\n"))
    assert catalog.load_model(str(model)).layers == layers // 2
