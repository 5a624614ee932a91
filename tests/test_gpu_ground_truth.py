"""bench/gpu_ground_truth.py: the pure parts (shape list, rates from timings, the budget, the records and
the report) on fake timings, and the whole script on the CPU with tiny shapes (the GPU run is the same
code).

PyTorch is not a dependency of trainest: only the end-to-end tests need it, and they are skipped where it
is not installed."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import yaml

from trainest.validate import load_runs

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "gpu_ground_truth.py"


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_ground_truth", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


gt = load_script()


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


# ------------------------------------------------------------------------------ pure parts

def test_device_names_map_to_the_catalog():
    assert gt.catalog_name("NVIDIA H200") == "h200-sxm"
    assert gt.catalog_name("NVIDIA GH200 480GB") == "gh200"          # the more specific name first
    assert gt.catalog_name("NVIDIA H100 80GB HBM3") == "h100-sxm"
    assert gt.catalog_name("NVIDIA A100-SXM4-80GB") == "a100-80gb-sxm"
    assert gt.catalog_name("Some Accelerator") is None


def test_configs_are_expressible_scenarios():
    for cfg in gt.EAGER_CONFIGS + gt.QUICK_CONFIGS:
        assert cfg.hidden % cfg.heads == 0 and cfg.recompute in ("none", "full")
    for name in gt.COMPILED_CONFIGS:
        assert gt.config_by_name(name).recompute == "none"


def test_training_plan_runs_eager_first_then_both_compiled_modes():
    plan = gt.training_plan(quick=False, compiled=True)
    modes = [m.name for _, m in plan]
    assert modes[:len(gt.EAGER_CONFIGS)] == ["eager"] * len(gt.EAGER_CONFIGS)
    assert modes.count("compile") == modes.count("compile-graphs") == len(gt.COMPILED_CONFIGS)
    assert [m.name for _, m in gt.training_plan(quick=True, compiled=False)] == ["eager"] * len(gt.QUICK_CONFIGS)
    from trainest.choices import FRAMEWORKS, KERNELS
    for mode in gt.MODES.values():                  # nothing new in the runs schema
        assert mode.framework in FRAMEWORKS and mode.kernels in KERNELS and mode.framework in mode.note


def test_model_gemms_are_the_megatron_shard_shapes():
    fwd = {label.split("/")[2]: (m, n, k) for label, m, n, k in gt.model_gemms(1024, 8, 2048)}
    assert fwd == {"qkv.fwd": (2048, 384, 1024), "proj.fwd": (2048, 1024, 128), "fc1.fwd": (2048, 512, 1024),
                   "fc2.fwd": (2048, 1024, 512)}
    both = {label.split("/")[2]: (m, n, k) for label, m, n, k in gt.model_gemms(1024, 8, 2048, backward=True)}
    assert both["qkv.dgrad"] == (2048, 1024, 384) and both["qkv.wgrad"] == (384, 1024, 2048)


def test_gemm_sweep_covers_small_and_large_shapes_once_each():
    shapes = gt.gemm_shapes(gt.FULL)
    keys = [(s.m, s.n, s.k) for s in shapes]
    assert len(keys) == len(set(keys)) and 100 < len(shapes) < 400
    assert shapes[0].labels == ("square/256",)                      # most wanted first
    by_key = {(s.m, s.n, s.k): s for s in shapes}
    assert "h1024/tp8/qkv.fwd/t1024" in by_key[(1024, 384, 1024)].labels      # docs/model.md §2.2's example
    assert "h8192/tp1/fc1.fwd/t16384" in by_key[(16384, 32768, 8192)].labels
    assert {s.m for s in shapes if any(lb.endswith("/t512") for lb in s.labels)} >= {512}
    dims = [d for s in shapes for d in (s.m, s.n, s.k)]
    assert min(dims) == 128 and max(dims) == 32768
    assert all(d % 16 == 0 for d in dims)                           # torch._scaled_mm's FP8 alignment
    assert sum("wave/" in s.labels[0] for s in shapes) > 20
    assert 10 < len(gt.gemm_shapes(gt.QUICK)) < 60


def test_rates_from_timings():
    assert gt.tflops(8192, 8192, 8192, 1.39e-3) == pytest.approx(791.0, rel=1e-3)
    assert gt.per_call_us(0.5e-3, 100) == pytest.approx(5.0)
    assert gt.calls_for(1e-3, 0.015, 3, 100) == 15
    assert gt.calls_for(1.0, 0.015, 3, 100) == 3 and gt.calls_for(1e-9, 0.015, 3, 100) == 100
    assert gt.calls_for(0.0, 0.015, 3, 100) == 100
    shape = gt.GemmShape(1024, 384, 1024, ("h1024/tp8/qkv.fwd/t1024",))
    e = gt.gemm_entry(shape, "bf16", 10e-6, "cuda-graph", 400, 989.0)
    assert e["tflops"] == pytest.approx(2 * 1024 * 384 * 1024 / 10e-6 / 1e12, rel=1e-3)
    assert e["fraction_of_peak"] == pytest.approx(e["tflops"] / 989.0, rel=1e-3)
    assert e["us"] == 10.0 and e["labels"] == ["h1024/tp8/qkv.fwd/t1024"]
    assert gt.gemm_entry(shape, "fp32", 10e-6, "loop", 3, None)["fraction_of_peak"] is None


def fake_launch_raw(host_s=2.5e-3, device_s=1.2e-3, sleep_s=8e-3):
    return {"kernel": "x.add_(1.0)", "kernels": 500, "eager_wall_s": 3.0e-3,
            "queued_host_s": [host_s, host_s * 1.1, host_s * 0.9], "queued_device_s": [device_s] * 3,
            "sleep_s": [sleep_s] * 3,
            "ops_host_s": {"add_": [2.5e-3] * 3, "add_autograd": [6e-3] * 3, "linear_autograd": [8e-3, 9e-3, 7e-3]},
            "graph_device_s": 10 * 500 * 1.5e-6, "graph_host_s": 10 * 12e-6, "graph_kernels": 500, "graph_replays": 10}


def test_launch_timings_become_per_kernel_numbers():
    s = gt.launch_summary(fake_launch_raw())
    assert s["eager_us_per_kernel"] == pytest.approx(6.0)
    assert s["host_us_per_kernel"] == pytest.approx(5.0)            # median of the host loops / 500
    assert s["device_floor_us"] == pytest.approx(2.4)
    assert s["queue_stayed_full"] is True
    assert s["host_us_per_op"] == {"add_": 5.0, "add_autograd": 12.0, "linear_autograd": 16.0}
    assert s["graph_device_floor_us"] == pytest.approx(1.5)
    assert s["graph_host_us_per_kernel"] == pytest.approx(12e-6 / 500 * 1e6)
    assert s["graph_replay_host_us"] == pytest.approx(12.0)
    sug = gt.suggested_kernel_parameters(s)
    assert sug == {"kernel_floor_us": 2.4, "host_us_per_kernel_floor": 16.0, "graph_kernel_floor_us": 1.5}
    # the host took longer than the device was held: the device time is host-paced, no floor suggested
    drained = gt.launch_summary(fake_launch_raw(host_s=10e-3))
    assert drained["queue_stayed_full"] is False
    assert gt.suggested_kernel_parameters(drained)["kernel_floor_us"] is None
    cpu = gt.launch_summary({"kernel": "x", "kernels": 100, "eager_wall_s": 4e-4, "ops_host_s": {"add_": [4e-4]}})
    assert cpu["device_floor_us"] is None and cpu["graph_device_floor_us"] is None and cpu["eager_us_per_kernel"] == 4.0
    assert "note" in gt.suggested_kernel_parameters(cpu) and gt.suggested_kernel_parameters(None)


def test_parts_share_what_is_left_and_pass_on_what_they_leave():
    caps = []
    left = 420.0
    for part in gt.PARTS:
        caps.append(gt.part_cap_s(left, part))
        left -= caps[-1]                             # each part uses all of its share
    assert sum(caps) == pytest.approx(420.0) and caps[-1] == pytest.approx(left + caps[-1])
    assert gt.part_cap_s(100.0, gt.PARTS[-1]) == pytest.approx(100.0)   # the last part gets the rest
    # a part that uses nothing leaves its share to the next ones
    assert gt.part_cap_s(420.0, "gemm") > gt.part_cap_s(420.0 - gt.part_cap_s(420.0, "launch"), "gemm")
    assert gt.part_cap_s(-5.0, "launch") == 0.0


def test_budget_skips_what_does_not_fit_and_says_so():
    clock = FakeClock()
    b = gt.Budget(100.0, clock=clock, quiet=True)
    assert b.begin("launch")
    cap = 100.0 * gt.PART_WEIGHTS["launch"] / sum(gt.PART_WEIGHTS.values())
    assert b.parts["launch"]["cap_s"] == pytest.approx(cap, abs=0.01)
    assert b.fits(cap - 0.1) and not b.fits(cap + 0.1)
    clock.t += 1.0
    assert b.part_left_s() == pytest.approx(cap - 1.0)
    assert b.begin("gemm")                           # launch used 1 s; gemm's share is of the 99 s left
    assert b.parts["launch"]["used_s"] == 1.0
    assert b.parts["gemm"]["cap_s"] == pytest.approx(gt.part_cap_s(99.0, "gemm"), abs=0.01)
    b.skip("gemm", "12 of 300 shapes", "did not fit")
    clock.t += 99.0
    assert b.over() and b.left_s() == 0.0 and b.part_left_s() == 0.0
    assert not b.begin("copy")                       # nothing left: under the part's minimum
    summary = b.summary()
    assert [(s["part"], s["item"]) for s in summary["skipped"]] == [("gemm", "12 of 300 shapes"), ("copy", None)]
    assert "minimum" in summary["skipped"][1]["reason"] and summary["elapsed_s"] == 100.0


def test_estimates_grow_with_the_work():
    small, big = gt.GemmShape(512, 128, 1024), gt.GemmShape(16384, 16384, 16384)
    s = gt.FULL
    assert gt.gemm_estimate_s(small, s, 2, 700e12, "cuda") < gt.gemm_estimate_s(big, s, 2, 700e12, "cuda")
    assert gt.gemm_estimate_s(small, s, 2, 700e12, "cuda") == pytest.approx(
        2 * gt.gemm_estimate_s(small, s, 1, 700e12, "cuda"))
    cfg = gt.config_by_name("gpt-124m-s1024-b16")
    eager = gt.training_estimate_s(cfg, gt.MODES["eager"], 20, 700e12, None)
    assert gt.training_estimate_s(cfg, gt.MODES["compile"], 20, 700e12, None) == pytest.approx(
        eager + gt.COMPILE_FIRST_S)
    assert gt.training_estimate_s(cfg, gt.MODES["compile"], 20, 700e12, 12.0) == pytest.approx(eager + 12.0)
    # the whole planned GPU run fits the default budget by these estimates (before skips)
    gemm = sum(gt.gemm_estimate_s(x, s, 2, 700e12, "cuda") for x in gt.gemm_shapes(s))
    training = sum(gt.training_estimate_s(c, m, 20, 700e12, 30.0) for c, m in gt.training_plan(False, True))
    assert gemm + training + gt.COMPILE_FIRST_S < gt.DEFAULT_BUDGET_S


def test_nvidia_smi_csv_is_read_by_the_queried_names():
    text = ("name, driver_version, clocks.current.sm [MHz], clocks.max.sm [MHz], clocks.mem [MHz], "
            "power.draw [W], power.limit [W], temperature.gpu\n"
            "NVIDIA H200, 580.159.03, 1980 MHz, 1980 MHz, 3201 MHz, 512.33 W, 700.00 W, 41\n")
    rows = gt.parse_nvidia_smi_csv(text, gt.SMI_FIELDS)
    assert rows == [{"name": "NVIDIA H200", "driver_version": "580.159.03", "clocks.sm": "1980 MHz",
                     "clocks.max.sm": "1980 MHz", "clocks.mem": "3201 MHz", "power.draw": "512.33 W",
                     "power.limit": "700.00 W", "temperature.gpu": "41"}]
    assert gt.parse_nvidia_smi_csv("", gt.SMI_FIELDS) == []


def fake_provenance():
    return {"date_utc": "2026-12-01T00:00:00Z", "device": "NVIDIA H200", "hardware": "h200-sxm",
            "pytorch": "2.11.0+cu130", "cuda": "13.0", "driver": "580.159.03"}


def fake_result(cfg, mode, step_s=0.05):
    return {"config": cfg.name, "mode": mode.name, "step_time_s": step_s, "steps_measured": 16,
            "step_times_s": [step_s] * 16, "first_step_s": 30.0, "loss": 10.9, "tokens_per_s": 1.0}


def test_records_of_every_mode_are_a_valid_runs_file_of_their_own_set(tmp_path):
    clock = FakeClock()
    res = gt.Results(tmp_path, fake_provenance(), gt.Budget(420.0, clock=clock, quiet=True))
    text = gt.provenance_text(res.provenance)
    assert "NVIDIA H200" in text and "PyTorch 2.11.0+cu130" in text and "driver 580.159.03" in text
    res.data["launch"] = gt.launch_summary(fake_launch_raw())
    micro = gt.micro_summary(res.data)
    assert "2.4 µs" in micro
    plan = gt.training_plan(quick=False, compiled=True)
    for cfg, mode in plan:
        res.runs.append(gt.run_record(cfg, mode, fake_result(cfg, mode), "h200-sxm", text, micro, 20, 4))
    res.write()
    doc = yaml.safe_load((tmp_path / "runs.yaml").read_text(encoding="utf-8"))
    assert doc["set"] == gt.RUN_SET
    loaded = load_runs([tmp_path / "runs.yaml"])
    assert len(loaded.cases) == len(plan) and not loaded.not_expressible
    assert {c.scenario.kernels for c in loaded.cases} == {"eager", "fused"}
    assert {c.scenario.framework for c in loaded.cases} == {"torchtitan"}
    graphs = {c.scenario.kernels if dict(c.scenario.knobs)["cuda_graphs"] == "full" else "" for c in loaded.cases}
    assert graphs == {"fused", ""}    # reduce-overhead replays one CUDA graph per block and pass: cuda_graphs full
    assert all(not c.scenario.model.dropout for c in loaded.cases)
    assert load_runs([tmp_path / "runs.yaml"], run_set="public").cases == ()    # reported apart
    m = json.loads((tmp_path / "measurements.json").read_text(encoding="utf-8"))
    assert m["schema"] == gt.SCHEMA and m["provenance"]["device"] == "NVIDIA H200" and "budget" in m


def test_rewrite_runs_rebuilds_the_runs_file_from_the_measurements_alone(tmp_path):
    """--rewrite-runs: runs.yaml again from measurements.json with the current modes (the step times the file's),
    as the shipped H200 records were when compile-graphs stopped naming maxtext."""
    clock = FakeClock()
    res = gt.Results(tmp_path, {**fake_provenance(), "steps": 20, "warmup": 4},
                     gt.Budget(420.0, clock=clock, quiet=True))
    plan = gt.training_plan(quick=False, compiled=True)
    res.data["training"] = [fake_result(cfg, mode, 0.01 * (i + 1)) for i, (cfg, mode) in enumerate(plan)]
    res.write()
    assert gt.main(["--rewrite-runs", str(tmp_path / "measurements.json")]) == 0
    doc = yaml.safe_load((tmp_path / "runs.yaml").read_text(encoding="utf-8"))
    assert [r["measured"]["step_time_s"] for r in doc["runs"]] == [0.01 * (i + 1) for i in range(len(plan))]
    assert [r["id"].rsplit("-", 1)[-1] for r in doc["runs"]] == [m.name.rsplit("-", 1)[-1] for _, m in plan]
    assert len(load_runs([tmp_path / "runs.yaml"]).cases) == len(plan)


def test_report_sets_measured_gemms_against_the_wave_model():
    def entry(m, n, k, seconds, label):
        return gt.gemm_entry(gt.GemmShape(m, n, k, (label,)), "bf16", seconds, "cuda-graph", 100, 989.0)

    doc = {"provenance": fake_provenance(), "budget": {"skipped": [{"part": "compiled", "item": "x", "reason": "y"}]},
           "gemm": {"entries": [entry(8192, 8192, 8192, 1.4e-3, "square/8192"),
                                entry(1024, 384, 1024, 8e-6, "h1024/tp8/qkv.fwd/t1024")]},
           "launch": gt.launch_summary(fake_launch_raw())}
    text = gt.report(doc)
    assert "| 8192×8192×8192 | bf16 | square/8192 |" in text and "h1024/tp8/qkv.fwd/t1024" in text
    assert "kernel_floor_us 4" in text and "Skipped" in text
    rows = [ln for ln in text.splitlines() if ln.startswith("| 8192×") or ln.startswith("| 1024×")]
    model = [float(r.split("|")[6]) for r in rows]
    assert model[0] > 2 * model[1] > 0                 # the shard's tiles fill few of the 132 SMs
    assert all(0 < float(r.split("|")[7]) <= 1 and math.isfinite(float(r.split("|")[8])) for r in rows)


def test_report_mode_needs_no_torch(tmp_path, capsys):
    path = tmp_path / "measurements.json"
    path.write_text(json.dumps({"provenance": fake_provenance(), "launch": gt.launch_summary(fake_launch_raw())}),
                    encoding="utf-8")
    assert gt.main(["--report", str(path)]) == 0
    assert "device floor per kernel" in capsys.readouterr().out


def test_bad_arguments_are_refused(tmp_path):
    for argv in (["--out", str(tmp_path / "x.yaml")], ["--out", str(tmp_path), "--skip", "nope"],
                 ["--out", str(tmp_path), "--steps", "3", "--warmup", "2"]):
        with pytest.raises(SystemExit):
            gt.main(argv)


# ------------------------------------------------------------------------------ the script on the CPU

@pytest.fixture
def one_thread():
    """torch on one CPU thread: tiny operators on a small, shared CI machine are slower (and noisier) with
    OpenMP's fork-join than without."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_quick_run_writes_measurements_and_a_valid_runs_file(tmp_path, one_thread):
    out = tmp_path / "out"
    assert gt.main(["--quick", "--device", "cpu", "--steps", "3", "--warmup", "1", "--out", str(out),
                    "--hardware", "h200-sxm"]) == 0
    loaded = load_runs([out / "runs.yaml"])
    assert len(loaded.cases) == len(gt.QUICK_CONFIGS) and not loaded.not_expressible
    for case in loaded.cases:
        assert case.measurement.metric == "step_time_s" and case.measurement.value > 0
        assert "gpu_ground_truth.py" in case.citation and "PyTorch" in case.citation
        assert case.scenario.kernels == "eager" and case.scenario.framework == "torchtitan"
    m = json.loads((out / "measurements.json").read_text(encoding="utf-8"))
    assert m["provenance"]["pytorch"] and m["provenance"]["date_utc"] and m["provenance"]["quick"] is True
    launch = m["launch"]
    assert launch["eager_us_per_kernel"] > 0 and launch["device_floor_us"] is None     # CPU: no device floor
    assert set(launch["host_us_per_op"]) >= {"add_", "linear_autograd"}
    g = m["gemm"]
    assert g["fp8_unsupported"] and g["dtypes"] == ["fp32"]
    assert len(g["entries"]) == g["shapes_planned"] == len(gt.gemm_shapes(gt.QUICK)) and not g["errors"]
    assert all(e["tflops"] > 0 and e["method"] == "loop" for e in g["entries"])
    assert m["copy"] and m["copy"][0]["gb_per_s"] > 0
    assert [r["mode"] for r in m["training"]] == ["eager"] * len(gt.QUICK_CONFIGS)
    assert any("torch.compile" in n for n in m["notes"])                                # said why compile is off
    assert m["budget"]["skipped"] == [] and set(m["budget"]["parts"]) == {"launch", "gemm", "copy", "eager"}


def test_a_budget_too_small_skips_every_part_and_still_writes(tmp_path, one_thread):
    out = tmp_path / "out"
    assert gt.main(["--quick", "--device", "cpu", "--steps", "3", "--warmup", "1", "--budget-s", "0.5",
                    "--out", str(out), "--hardware", "h200-sxm"]) == 0
    m = json.loads((out / "measurements.json").read_text(encoding="utf-8"))
    parts = {s["part"] for s in m["budget"]["skipped"]}
    assert parts == {"launch", "gemm", "copy", "eager"} and m["training"] == []
    assert all("budget" in s["reason"] or "skipped" in s["reason"] for s in m["budget"]["skipped"])
    assert yaml.safe_load((out / "runs.yaml").read_text(encoding="utf-8"))["runs"] == []
