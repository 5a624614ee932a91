"""trainest.calibrate and `trainest calibrate`: recovering a known efficiency, writing a loadable profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers import bundled_cases
from typer.testing import CliRunner

from trainest.calibrate import HUBER_DELTA, fit_efficiency, huber, predicted_step_times_s, replace_efficiency_block
from trainest.catalog import hardware_from_mapping, load_hardware, with_efficiency
from trainest.cli import app
from trainest.errors import SpecError
from trainest.estimate import estimate
from trainest.record import replace
from trainest.scenario import scenario_from_mapping
from trainest.validate import load_runs

TRUTH = dict(gemm=0.62, attention=0.42, memory=0.66, scale_up=0.58, scale_out=0.55)
START = dict(gemm=0.75, attention=0.5, memory=0.8, scale_up=0.75, scale_out=0.7)


def model(h: int, layers: int, heads: int, ffn: int | None = None) -> dict:
    return {"name": f"m{h}", "layers": layers, "hidden": h, "ffn_hidden": ffn or 4 * h, "heads": heads,
            "kv_heads": heads, "vocab": 32000, "mlp": "gelu"}


# Layouts chosen so that each efficiency moves some step time: big GEMMs (gemm), long sequences
# (attention), a narrow model with a big batch (memory), TP inside a node (scale_up), PP and FSDP across
# nodes (scale_out).
LAYOUTS = [
    dict(model=model(4096, 8, 32), seq_len=2048, devices=8, parallel={"tp": 8}, micro_batch=1, global_batch=16),
    dict(model=model(4096, 8, 32), seq_len=2048, devices=8, parallel={"zero": 1}, micro_batch=1, global_batch=16),
    dict(model=model(2048, 8, 16), seq_len=16384, devices=8, parallel={"zero": 1}, micro_batch=1, global_batch=8),
    dict(model=model(1024, 8, 8, 1024), seq_len=4096, devices=8, parallel={}, micro_batch=8, global_batch=64),
    dict(model=model(8192, 16, 64), seq_len=2048, devices=32, parallel={"tp": 8, "pp": 4}, micro_batch=1,
         global_batch=32),
    dict(model=model(4096, 8, 32), seq_len=2048, devices=64, parallel={"zero": 3}, micro_batch=1, global_batch=64),
    dict(model=model(4096, 8, 32), seq_len=8192, devices=8, parallel={"tp": 4, "sequence_parallel": True},
         micro_batch=1, global_batch=8),
    dict(model=model(8192, 8, 64), seq_len=4096, devices=16, parallel={"tp": 16}, micro_batch=1, global_batch=8),
    dict(model=model(6144, 8, 48), seq_len=2048, devices=128, parallel={"zero": 3}, micro_batch=1, global_batch=128),
]


@pytest.fixture(scope="module")
def synthetic_runs(tmp_path_factory) -> str:
    """A runs file whose 'measured' step times are trainest's own predictions under TRUTH."""
    truth = with_efficiency(load_hardware("h100-sxm"), **TRUTH)
    runs = []
    for i, lay in enumerate(LAYOUTS):
        s = scenario_from_mapping({**lay, "hardware": "h100-sxm"}, "synthetic")
        runs.append({"id": f"synthetic-{i}", **lay, "hardware": "h100-sxm",
                     "measured": {"step_time_s": estimate(replace(s, hardware=truth)).step.time_s}})
    path = tmp_path_factory.mktemp("runs") / "synthetic.yaml"
    path.write_text(yaml.safe_dump({"source": "synthetic", "runs": runs}, sort_keys=False))
    return str(path)


def test_recovers_a_known_efficiency(synthetic_runs):
    """Noise-free synthetic runs and no prior pull: the fit finds the true values."""
    cases = load_runs([synthetic_runs]).cases
    start = with_efficiency(load_hardware("h100-sxm"), **START)
    result = fit_efficiency(cases, start, names=tuple(TRUTH), prior_weight=0.0)
    assert result.mape_before_pct > 5.0
    assert result.mape_after_pct < 0.5
    for p in result.parameters:
        assert p.constrained
        assert p.value == pytest.approx(TRUTH[p.name], rel=0.02), p.name
    # the returned hardware carries the values, so the runs reproduce
    e = result.hardware.efficiency
    assert (e.gemm, e.scale_out) == (pytest.approx(result.parameters[0].value), pytest.approx(result.parameters[4].value))


def test_default_prior_pulls_only_mildly(synthetic_runs):
    """With the default prior weight the fit still moves most of the way from the start to the truth."""
    cases = load_runs([synthetic_runs]).cases
    start = with_efficiency(load_hardware("h100-sxm"), **START)
    result = fit_efficiency(cases, start, names=tuple(TRUTH))
    assert result.mape_after_pct < 0.25 * result.mape_before_pct
    for p in result.parameters:
        assert abs(p.value - TRUTH[p.name]) <= 0.5 * abs(START[p.name] - TRUTH[p.name]) + 1e-9, p.name


def test_an_unpulled_parameter_is_set_by_the_runs_alone(synthetic_runs):
    """Every other efficiency true, memory off: pulled, the fit stops short of the truth; unpulled, the
    runs alone set it and it lands on the truth."""
    cases = load_runs([synthetic_runs]).cases
    start = with_efficiency(load_hardware("h100-sxm"), **{**TRUTH, "memory": START["memory"]})
    pulled = fit_efficiency(cases, start, names=("memory",), prior_weight=0.05).parameters[0].value
    free = fit_efficiency(cases, start, names=("memory",), prior_weight=0.05, unpulled=("memory",)).parameters[0].value
    assert free == pytest.approx(TRUTH["memory"], rel=1e-3)
    assert TRUTH["memory"] < pulled < START["memory"] and abs(pulled - TRUTH["memory"]) > 1e-3


def test_fit_respects_bounds(synthetic_runs):
    """Measurements 3x slower than any physical efficiency allows: values stop at the lower bound."""
    cases = [replace(c, measurement=replace(c.measurement, value=c.measurement.value * 20.0))
             for c in load_runs([synthetic_runs]).cases]
    result = fit_efficiency(cases, with_efficiency(load_hardware("h100-sxm"), **START), names=tuple(TRUTH))
    for p in result.parameters:
        assert 0.2 <= p.value <= 1.0


def test_gemm_bound_is_the_measured_best_gemm_rate():
    """The GEMM efficiency's upper bound is the device's measured best GEMM rate over its peak where one
    was read (MI300X: 668 of 1307 TFLOP/s), else BOUNDS; other parameters keep BOUNDS."""
    from trainest.calibrate import BOUNDS, bounds_of
    mi300x, v5p = load_hardware("mi300x"), load_hardware("tpu-v5p")
    assert bounds_of("gemm", mi300x) == (BOUNDS["gemm"][0], pytest.approx(668.0 / 1307.4))
    assert bounds_of("gemm", v5p) == BOUNDS["gemm"]
    assert bounds_of("memory", mi300x) == BOUNDS["memory"]


def test_unconstrained_parameter_stays_at_its_start(synthetic_runs):
    """Single-node runs say nothing about scale_out: it must stay where it started."""
    cases = [c for c in load_runs([synthetic_runs]).cases if c.scenario.devices <= 8]
    result = fit_efficiency(cases, with_efficiency(load_hardware("h100-sxm"), **START), names=tuple(TRUTH))
    scale_out = next(p for p in result.parameters if p.name == "scale_out")
    assert not scale_out.constrained and scale_out.value == pytest.approx(START["scale_out"])


def test_array_prediction_equals_estimate(synthetic_runs):
    """The fast path used by the fit is exactly estimate()'s step time."""
    for case in load_runs([synthetic_runs]).cases:
        assert float(predicted_step_times_s(case, case.scenario.hardware, {})) == \
            pytest.approx(estimate(case.scenario).step.time_s, rel=1e-12)


def test_huber_is_quadratic_then_linear():
    assert float(huber(0.1)) == pytest.approx(0.005)
    assert float(huber(1.0)) == pytest.approx(HUBER_DELTA * (1.0 - HUBER_DELTA / 2))


def test_replace_efficiency_block_keeps_everything_else():
    text = Path(load_hardware("a100-80gb-sxm").path).read_text()
    new = replace_efficiency_block(text, {"gemm": 0.5, "gemm_half_dim": 64, "attention": 0.3, "memory": 0.6,
                                          "scale_up": 0.7, "scale_out": 0.6, "fitted": True, "method": "test"})
    old_doc, new_doc = yaml.safe_load(text), yaml.safe_load(new)
    assert new_doc["efficiency"]["gemm"] == 0.5
    assert {k: v for k, v in old_doc.items() if k != "efficiency"} == \
        {k: v for k, v in new_doc.items() if k != "efficiency"}
    assert new.splitlines()[:5] == text.splitlines()[:5]     # header comments kept
    hardware_from_mapping(new_doc, "test")


runner = CliRunner()


def test_cli_writes_a_profile_that_estimate_accepts(synthetic_runs, tmp_path):
    out = tmp_path / "profile.yaml"
    res = runner.invoke(app, ["calibrate", "--runs", synthetic_runs, "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["mape_after_pct"] <= doc["mape_before_pct"]
    eff = yaml.safe_load(out.read_text())["efficiency"]
    assert eff["fitted"] is True and eff["fit_runs"] == len(LAYOUTS)
    assert eff["method"].startswith("trainest calibrate on synthetic.yaml, 9 runs, ")
    res = runner.invoke(app, ["estimate", "--hardware", str(out), "--model", "llama3-8b", "--devices", "8", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["inputs"]["hardware"] == str(out.resolve())   # the profile, reloadable
    assert load_hardware(str(out)).efficiency.gemm == pytest.approx(eff["gemm"])


def test_cli_several_hardware_needs_a_choice(synthetic_runs, tmp_path):
    runs = yaml.safe_load(Path(synthetic_runs).read_text())
    runs["runs"][0]["hardware"] = "a100-80gb-sxm"
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text(yaml.safe_dump(runs))
    res = runner.invoke(app, ["calibrate", "--runs", str(mixed), "-o", str(tmp_path / "p.yaml")])
    assert res.exit_code == 1 and res.stdout == ""
    assert "a100-80gb-sxm" in res.stderr and "h100-sxm" in res.stderr and "--hardware" in res.stderr
    res = runner.invoke(app, ["calibrate", "--runs", str(mixed), "-H", "a100-80gb-sxm", "-o", str(tmp_path / "p.yaml"),
                              "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["runs"] == 1
    assert runner.invoke(app, ["calibrate", "--runs", str(mixed)]).exit_code == 2   # -o is required


def test_no_runs_is_an_error():
    with pytest.raises(SpecError, match="no expressible runs"):
        fit_efficiency([])


def test_fit_path_passes_every_scenario_input():
    """Regression: the fit's prediction once dropped the pipeline split (and would drop any scenario
    input not in the numeric layout). On the bundled runs that use the balanced split or flat DP
    collectives, it must equal estimate()'s step time."""
    cases = [c for c in bundled_cases()
             if c.scenario.parallel.pipeline_split != "even" or c.scenario.parallel.dp_collectives != "hierarchical"]
    assert {c.scenario.parallel.pipeline_split for c in cases} >= {"balanced"}
    assert {c.scenario.parallel.dp_collectives for c in cases} >= {"flat"}
    for case in cases:
        assert float(predicted_step_times_s(case, case.scenario.hardware, {})) == \
            pytest.approx(estimate(case.scenario).step.time_s, rel=1e-12), case.id


def test_three_runs_for_five_parameters_say_what_they_do_not_determine(synthetic_runs, tmp_path):
    """Issue 11, case 6: five parameters fitted from three runs, three on their bounds, and 'constrained
    by the runs: yes' for all five. Now: the Jacobian's rank, each parameter's leverage, the ones the runs
    do not determine (set by the prior), bounds marked; the profile says it was calibrated, on what, when,
    and the error before and after; `validate --hardware PROFILE` uses it."""
    runs = yaml.safe_load(Path(synthetic_runs).read_text())
    runs["runs"] = runs["runs"][:3]
    three = tmp_path / "three.yaml"
    three.write_text(yaml.safe_dump(runs))
    out = tmp_path / "profile.yaml"
    res = runner.invoke(app, ["calibrate", "--runs", str(three), "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["jacobian_rank"] <= 3 < len(doc["parameters"])
    undetermined = [p["name"] for p in doc["parameters"] if not p["determined"]]
    assert len(undetermined) >= len(doc["parameters"]) - 3 and set(undetermined) == set(doc["undetermined"])
    assert all(0.0 <= p["leverage"] <= 1.0 + 1e-9 and p["at_bound"] in (None, "lower", "upper")
               for p in doc["parameters"])
    # what the table calls "set by the prior" is the prior: held at the start while the rest are refitted
    start = load_hardware("h100-sxm").efficiency
    for p in doc["parameters"]:
        if not p["determined"]:
            assert p["value"] == pytest.approx(getattr(start, p["name"]), rel=1e-12), p["name"]
    table = runner.invoke(app, ["calibrate", "--runs", str(three), "-o", str(out)])
    assert "set by the prior" in table.stdout and "Jacobian rank" in table.stdout
    header = out.read_text().splitlines()[:5]
    assert header[0].startswith("# Calibrated profile of h100-sxm, written by `trainest calibrate` on ")
    assert "3 measured runs (three.yaml)" in header[1] and "before" in header[1] and "after" in header[1]
    assert not any("Generated by tools/import_hardware.py" in ln for ln in out.read_text().splitlines())
    res = runner.invoke(app, ["validate", "--runs", str(three), "--hardware", str(out), "--json"])
    assert res.exit_code == 0, res.output
    # (the profile writes each efficiency to 4 significant digits)
    assert json.loads(res.stdout)["summary"]["mape_pct"] == pytest.approx(doc["mape_after_pct"], rel=2e-2)
    shown = runner.invoke(app, ["estimate", "--hardware", str(out), "--devices", "8"], env={"COLUMNS": "300"})
    assert str(out) in shown.stdout and "calibrated profile" in shown.stdout


def _err(res) -> str:
    return " ".join(res.stderr.split())


def test_cli_warns_when_the_fit_folds_frameworks_or_fine_tuning_into_the_hardware(synthetic_runs, tmp_path):
    """One framework, more runs than parameters: no warning. Runs of two frameworks, or a LoRA run among
    plain ones: a warning on stderr and in `warnings`, naming them; the fit still runs."""
    res = runner.invoke(app, ["calibrate", "--runs", synthetic_runs, "-o", str(tmp_path / "a.yaml"), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["warnings"] == [] and res.stderr == ""
    doc = yaml.safe_load(Path(synthetic_runs).read_text())
    first = doc["runs"][0]
    doc["runs"] = [first, {**first, "id": "tt", "framework": "torchtitan"},
                   {**first, "id": "lora", "finetune": "lora"}, *doc["runs"][1:]]
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text(yaml.safe_dump(doc))
    res = runner.invoke(app, ["calibrate", "--runs", str(mixed), "-o", str(tmp_path / "b.yaml"), "--json"])
    assert res.exit_code == 0, res.output
    warnings = json.loads(res.stdout)["warnings"]
    assert len(warnings) == 2, warnings
    assert "2 frameworks" in warnings[0] and "torchtitan (1 run)" in warnings[0]
    assert "go into h100-sxm's efficiencies" in warnings[0] and "one framework at a time" in warnings[0]
    assert "lora (1 run)" in warnings[1] and "plain training" in warnings[1]
    assert all(f"Warning: {' '.join(w.split())}" in _err(res) for w in warnings)
    text = runner.invoke(app, ["calibrate", "--runs", str(mixed), "-o", str(tmp_path / "c.yaml")])
    assert text.exit_code == 0 and "Warning:" not in text.stdout and "one framework at a time" in _err(text)


def test_cli_warns_that_an_exactly_determined_fit_says_nothing_of_new_runs(synthetic_runs, tmp_path):
    doc = yaml.safe_load(Path(synthetic_runs).read_text())
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump({**doc, "runs": doc["runs"][:1]}))
    res = runner.invoke(app, ["calibrate", "--runs", str(one), "-o", str(tmp_path / "p.yaml"), "--json"])
    assert res.exit_code == 0, res.output
    (w,) = json.loads(res.stdout)["warnings"]
    assert w.startswith("1 run for the ") and "'MAPE after' measures how closely the fit matches" in w
    assert "not how well the profile predicts new ones" in _err(res)
