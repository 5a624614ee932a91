"""trainest.sweep and `trainest sweep`: one knob over a range, each point the estimate or the best plan."""

from __future__ import annotations

import builtins
import json
import subprocess
import sys

import pytest
from helpers import call_entry

from trainest import search as S
from trainest import sweep as W
from trainest.errors import SpecError
from trainest.estimate import estimate
from trainest.knobs import BY_NAME
from trainest.report.sweep import csv_text, terminal_plot, write_figure
from trainest.scenario import scenario_from_mapping

JOB = {"model": "gpt3-1.3b", "hardware": "h100-sxm", "global_batch": 64, "parallel": {"zero": 1}}


@pytest.mark.parametrize(("knob", "text", "values"), [
    ("devices", "8..8192", [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]),
    ("devices", "24..200", [24, 48, 96, 192]),
    ("seq_len", "1024..4096:1024", [1024, 2048, 3072, 4096]),
    ("global_batch", "64,128,64", [64, 128]),
    ("seq_len", "2K,4K", [2048, 4096]),        # as --seq-len reads 8k: 8192
    ("precision", "bf16,fp8,fp4", ["bf16", "fp8", "fp4"]),
])
def test_parse_values(knob, text, values):
    assert W.parse_values(BY_NAME[knob], text) == values


@pytest.mark.parametrize(("knob", "text", "match"), [
    ("devices", "64..8", "empty"), ("precision", "bf16..fp8", "list"), ("precision", "bf16,int8", "int8"),
    ("devices", "1..100000:1", "at most"), ("tp", "1.5,2", "whole"), ("seq_len", "1..8:0", "positive"),
])
def test_parse_values_rejects(knob, text, match):
    with pytest.raises(SpecError, match=match):
        W.parse_values(BY_NAME[knob], text)


def test_exactly_one_knob_is_swept():
    with pytest.raises(SpecError, match="none was given"):
        W.swept_knob({"devices": "8"})
    with pytest.raises(SpecError, match="--devices, --seq-len"):
        W.swept_knob({"devices": "8..16", "seq_len": "1024,2048"})
    knob, values = W.swept_knob({"devices": "8", "tp": "1,2"})
    assert knob.name == "tp" and values == [1, 2]


def test_each_point_is_the_estimate_at_that_value():
    r = W.sweep({**JOB, "devices": 8}, BY_NAME["seq_len"], [1024, 2048])
    for p in r.points:
        e = estimate(scenario_from_mapping({**JOB, "devices": 8, "seq_len": p.value}))
        assert p.estimate.step.time_s == e.step.time_s


def test_plan_points_are_the_plan_search_with_the_swept_layout_knob_fixed():
    r = W.sweep({**JOB, "devices": 16}, BY_NAME["tp"], [1, 2], plan=True)
    base = S.job_scenario({**JOB, "devices": 16})
    for p in r.points:
        best = S.search(base, 16, S.space_from_options([f"tp={p.value}"]), top=1).plans[0]
        assert p.estimate.scenario.parallel.tp == p.value
        assert p.estimate.step.time_s == best.step.time_s
    devices = W.sweep(JOB, BY_NAME["devices"], [8, 32], plan=True)
    assert [p.estimate.scenario.devices for p in devices.points] == [8, 32]


def test_a_point_that_does_not_validate_is_kept_with_its_reason():
    r = W.sweep({**JOB, "devices": 8}, BY_NAME["tp"], [1, 3])
    assert r.points[0].estimate is not None
    assert r.points[1].estimate is None and "is not divisible by tp" in r.points[1].error


def test_scaling_efficiency_is_per_device_throughput_against_the_first_point():
    r = W.sweep(JOB, BY_NAME["devices"], [8, 16, 64])
    eff = r.scaling_efficiency()
    per = [p.estimate.throughput.tokens_per_s_per_device for p in r.points]
    assert eff[0] == 1.0 and eff[2] == pytest.approx(per[2] / per[0])
    assert all(0 < x <= 1.0 + 1e-9 for x in eff)          # adding devices never beats linear here
    assert W.sweep({**JOB, "devices": 8}, BY_NAME["seq_len"], [1024, 2048]).scaling_efficiency() == [None, None]


def test_terminal_plot_has_a_row_per_point_and_marks_the_ideal():
    r = W.sweep({**JOB, "global_batch": 512}, BY_NAME["devices"], [8, 64, 512])
    lines = terminal_plot(r)
    rows = [line for line in lines if line.strip().split(" ")[0] in ("8", "64", "512")]
    assert len(rows) == 3
    assert "┆" in rows[2] and "█" * 40 in rows[0]          # the first point is the ideal and the longest
    assert "█" * 40 not in rows[2]


def test_terminal_plot_fits_an_80_column_terminal(monkeypatch, capsys):
    """COLUMNS=80: the plot's rows (with the scaling column, or a point that does not fit) never wrap."""
    r = W.sweep({**JOB, "global_batch": 512}, BY_NAME["devices"], [8, 64, 512])
    assert all(len(line) <= 80 for line in terminal_plot(r, 80))
    r = W.sweep({**JOB, "devices": 1, "global_batch": 8}, BY_NAME["seq_len"], [1024, 65536])
    assert any("(does not fit)" in line for line in terminal_plot(r, 80))
    assert all(len(line) <= 80 for line in terminal_plot(r, 80))
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = call_entry(["sweep", "--model", "qwen3-0.6b", "--devices", "1", "--global-batch", "8",
                               "--seq-len", "1024..32768", "--finetune", "lora"], capsys)
    assert code == 0
    plot = out[out.index("\nseq_len "):].strip("\n").splitlines()
    assert len(plot) == 7 and all(len(line) <= 80 for line in plot)        # a header and 6 rows, none wrapped


def test_csv_has_a_header_and_a_row_per_point():
    r = W.sweep({**JOB, "devices": 8}, BY_NAME["tp"], [1, 3])
    lines = csv_text(r).splitlines()
    assert lines[0].startswith("value,step_s") and len(lines) == 3
    assert lines[2].startswith("3,") and "is not divisible" in lines[2]
    batch = r.points[0].estimate.scenario.global_batch
    assert lines[0].endswith(",error,global_batch") and lines[1].endswith(f",{batch}")


def test_a_derived_batch_that_changes_with_the_devices_is_shown(capsys):
    # without --global-batch each point takes its own default (a multiple of dp): the table must say so
    code, out, err = call_entry(["sweep", "--model", "gpt3-1.3b", "--devices", "8..512"], capsys)
    assert code == 0, err
    text = " ".join(out.split())          # the note wraps at the terminal's width
    assert " batch " in out and "derived at each point" in text and "give --global-batch to hold it" in text
    code, out, err = call_entry(["sweep", "--model", "gpt3-1.3b", "--devices", "8..512", "--global-batch", "512"],
                                capsys)
    assert code == 0, err
    assert "derived at each point" not in out


def test_png_without_matplotlib_says_how_to_install(monkeypatch, tmp_path):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    r = W.sweep({**JOB, "devices": 8}, BY_NAME["seq_len"], [1024, 2048])
    with pytest.raises(SpecError, match=r'pip install "trainest\[plot\]"'):
        write_figure(r, str(tmp_path / "x.png"), "png")


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_figure_files(tmp_path, fmt):
    pytest.importorskip("matplotlib")
    r = W.sweep(JOB, BY_NAME["devices"], [8, 16, 32])
    path = write_figure(r, str(tmp_path / f"sweep.{fmt}"), fmt)
    data = (tmp_path / f"sweep.{fmt}").read_bytes()
    assert path.endswith(fmt) and len(data) > 1000
    assert data.startswith(b"\x89PNG") if fmt == "png" else b"<svg" in data[:2000]


def test_cli_table_json_csv(capsys):
    args = ["sweep", "--model", "gpt3-1.3b", "--devices", "8..32", "--zero", "1", "--global-batch", "64"]
    code, out, err = call_entry(args, capsys)
    assert code == 0, err
    assert "scaling" in out and "┆" in out
    code, out, err = call_entry([*args, "--json"], capsys)
    doc = json.loads(out)
    assert doc["knob"] == "devices" and [p["value"] for p in doc["sweep"]] == [8, 16, 32]
    assert doc["sweep"][0]["step"]["time_s_low"] < doc["sweep"][0]["step"]["time_s"]
    code, out, err = call_entry([*args, "--csv"], capsys)
    assert code == 0 and out.splitlines()[0].startswith("value,")


def test_cli_errors(capsys):
    code, out, err = call_entry(["sweep", "--devices", "8"], capsys)
    assert code == 1 and out == "" and "one knob as a range" in err
    # a shape override reaches every plan of the sweep as it reaches the estimate (moe.md M9)
    code, out, err = call_entry(["sweep", "--devices", "8..16", "--plan", "--model", "gpt3-1.3b", "--layers", "4",
                                 "--json"], capsys)
    assert code == 0 and all(p["inputs"]["model"]["layers"] == 4 for p in json.loads(out)["sweep"]), err


def test_sweep_never_imports_matplotlib_unless_asked():
    code = ("import sys; from trainest.cli.main import main\n"
            "try:\n    main(['sweep', '--devices', '8,16', '--zero', '3', '--global-batch', '64', '--json'])\n"
            "except SystemExit:\n    pass\n"
            "assert 'matplotlib' not in sys.modules, 'matplotlib imported'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_sweep_plan_without_a_global_batch_holds_the_default_of_the_largest_count_and_says_so(capsys):
    code, out, err = call_entry(["sweep", "--model", "gpt3-1.3b", "--devices", "8..32", "--plan", "--json"], capsys)
    assert code == 0, err
    batches = {p["inputs"]["global_batch"] for p in json.loads(out)["sweep"]}
    assert len(batches) == 1 and batches.pop() % 32 == 0      # one batch, a multiple of the largest count
    code, out, err = call_entry(["sweep", "--model", "gpt3-1.3b", "--devices", "8..32", "--plan"], capsys)
    assert "at every point (default: 0.5M tokens, a multiple of the device count)" in " ".join(out.split())


def test_a_point_that_does_not_run_keeps_the_table_whole_and_says_why_below(capsys):
    """Its reason in a cell squeezed the other columns until rich cut the numbers ('7…')."""
    code, out, err = call_entry(["sweep", "--precision", "bf16,fp8,fp4", "--hardware", "h100-sxm"], capsys)
    assert code == 0, err
    assert "…" not in out and "does not run" in out
    assert "precision fp4 does not run: hardware 'h100-sxm' has no fp4 peak" in " ".join(out.split())


def test_ranges_read_lengths_and_stages_as_the_single_options_do():
    assert W.parse_values(BY_NAME["seq_len"], "2k..8k") == [2048, 4096, 8192]      # not 2000, 4000
    assert W.parse_values(BY_NAME["zero"], "0..3") == [0, 1, 2, 3]
    assert W.parse_values(BY_NAME["zero"], "0,3") == [0, 3]


def test_csv_writes_whole_values_as_integers_and_a_short_range_says_where_it_stopped(capsys):
    """`--tokens 1T..4T --csv` wrote 1000000000000.0; `--devices 8..100` stopped at 64 without a word."""
    code, out, err = call_entry(["sweep", "--tokens", "1T..4T", "--csv"], capsys)
    assert code == 0 and [line.split(",")[0] for line in out.splitlines()[1:]] == [
        "1000000000000", "2000000000000", "4000000000000"]
    code, out, err = call_entry(["sweep", "--devices", "8..100"], capsys)
    assert code == 0 and "stops at 64 (128 is past 100)" in " ".join(err.split())
    code, out, err = call_entry(["sweep", "--devices", "8..64"], capsys)
    assert code == 0 and "stops at" not in err


def test_sweep_flags_what_estimate_flags(capsys):
    """A sweep on uncalibrated hardware, of a LoRA under a framework no run measured, said none of what
    `estimate` says of each of its points: the uncalibrated note, the framework and fine-tuning warnings.
    They come once (not once per point), and in each point's JSON warnings as `estimate --json` has them."""
    args = ["sweep", "--model", "qwen3-0.6b", "--hardware", "dgx-spark", "--devices", "1", "--global-batch", "8",
            "--seq-len", "1024,2048", "--finetune", "lora", "--framework", "hf-accelerate"]
    code, out, err = call_entry(args, capsys)
    assert code == 0, err
    assert "Note: dgx-spark's efficiencies are not validated on measured runs" in " ".join(out.split())
    assert err.count("Warning: framework hf-accelerate: no bundled measured run uses it") == 1
    assert err.count("no fine-tuning run is fitted") == 1 and "seq_len=1024: framework" not in err
    code, out, _ = call_entry([*args, "--json"], capsys)
    _, est, _ = call_entry(["estimate", *args[1:-6], "--seq-len", "1024", "--finetune", "lora", "--framework",
                            "hf-accelerate", "--json"], capsys)
    point = json.loads(out)["sweep"][0]
    assert set(json.loads(est)["warnings"]) - {w for w in json.loads(est)["warnings"] if "price" in w} \
        <= set(point["warnings"])
    code, _, err = call_entry([*args, "--quiet"], capsys)
    assert code == 0 and err == ""


@pytest.mark.parametrize(("args", "line"), [
    (["--model", "mixtral-8x7b", "--ep", "3"], "Error: --ep: 3 does not divide experts=8; try 1, 2, 4, 8"),
    (["--model", "nemotron-3-nano", "--finetune", "lora"], "Error: --finetune: lora adapters in hybrid Mamba-2"),
    (["--model", "llama3-8b", "--ep", "2"], "Error: --ep: 2 needs a mixture-of-experts model"),
])
def test_an_input_that_fails_at_every_value_is_bad_input_as_estimate_says_it(capsys, args, line):
    """Every point failed with one reason that has nothing to do with the swept value: it printed a
    table of 'does not run' rows, naming options.parallel.ep, and exited 0."""
    code, out, err = call_entry(["sweep", "--devices", "8..16", *args], capsys)
    assert code == 1 and out == "" and err.startswith(line) and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


def test_a_point_that_does_not_run_says_why_as_the_error_line_would(capsys):
    """A point's reason read `options: tp=3 ...`, the scenario's path, where estimate's error line has none."""
    code, out, err = call_entry(["sweep", "--tp", "1,3", "--devices", "24", "--json"], capsys)
    assert code == 0, err
    errors = [p["error"] for p in json.loads(out)["sweep"] if p["error"]]
    assert errors == ["tp=3 does not divide heads=32; try 1, 2, 4, 8, 16, 32"], errors


MOE_JOB = {"model": "qwen3-30b-a3b", "hardware": "b200", "devices": 16, "global_batch": 128,
           "parallel": {"ep": 8, "zero": 1}}


@pytest.mark.parametrize(("knob", "values"), [
    ("moe_dispatcher", ["alltoall", "deepep", "hybridep"]),
    ("cuda_graphs", ["none", "partial", "full"]),
    ("moe_overlap", ["none", "deepep"]),
])
def test_the_moe_and_host_choices_sweep_each_at_its_estimate_and_its_best_plan(knob, values):
    """Issue 33: the token dispatcher, the CUDA graph scope and the all-to-all overlap are choices a user makes;
    `sweep --moe-dispatcher alltoall,deepep,hybridep` (with --plan: each at its best layout) compares them. Each
    point is the estimate (the best plan) with that value, and the choices move the step."""
    assert W.parse_values(BY_NAME[knob], ",".join(values)) == values
    r = W.sweep(MOE_JOB, BY_NAME[knob], values)
    times = []
    for p in r.points:
        e = estimate(scenario_from_mapping(W.with_value(MOE_JOB, BY_NAME[knob], p.value)))
        assert p.estimate is not None and p.estimate.step.time_s == e.step.time_s
        times.append(e.step.time_s)
    assert len(set(times)) > 1
    plans = W.sweep(MOE_JOB, BY_NAME[knob], values[:2], plan=True)
    value = (lambda s: s.parallel.moe_overlap) if knob == "moe_overlap" else (lambda s: s.knob(knob))  # noqa: E731
    assert all(p.estimate is not None and value(p.estimate.scenario) == p.value for p in plans.points)
