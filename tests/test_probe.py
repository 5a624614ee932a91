"""trainest/probe.py: the timing arithmetic and sweep on fake timings, a real (short) CPU probe whose file
`--hardware` accepts, the hardware mapping of fake CPU and GPU probes, the GPU path's None without a
GPU (and a real GPU probe where one is present), and one clear error for an unwritable output."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from helpers import call_entry

from trainest import probe
from trainest.catalog import hardware_from_mapping, hardware_names, load_hardware
from trainest.errors import SpecError
from trainest.probe import CpuProbe, GpuProbe, Sweep, SweepPoint
from trainest.units import GB, GiB

CPU_TEST_BUDGET_S = 2.0
ESTIMATE = ["estimate", "--model", "gpt2-124m", "--devices", "1", "--global-batch", "8", "--seq-len", "256", "--json"]


def _gpu_present() -> bool:
    return probe.gpu_unavailable_reason() is None


# ------------------------------------------------------------------------------ fake timings

class FakeMachine:
    """A timer and a clock for run_sweep: size n runs at rate(n) FLOP/s, the warm-up call costs
    `warmup_s` more, and the clock advances by exactly the time the timer reports."""

    def __init__(self, rate, warmup_s: float = 0.0) -> None:
        self.rate, self.warmup_s, self.now, self.calls = rate, warmup_s, 0.0, []

    def clock(self) -> float:
        return self.now

    def time_block(self, n: int, calls: int, stop_at: float) -> tuple[int, float]:
        per_call = probe.gemm_flops(n) / self.rate(n)
        done = 0
        start = self.now
        while done < calls:
            self.now += per_call + (self.warmup_s if calls == 1 and stop_at == math.inf else 0.0)
            done += 1
            if self.now >= stop_at:
                break
        self.calls.append((n, done))
        return done, self.now - start


def test_gemm_flops_is_two_n_cubed():
    assert probe.gemm_flops(1024) == 2 * 1024 ** 3


def test_copy_counts_read_and_write():
    assert probe.copy_bytes(GiB) == 2 * GiB


def test_sustained_rate_is_calls_times_work_over_seconds():
    assert probe.sustained_rate(2e9, 10, 0.5) == pytest.approx(4e10)


@pytest.mark.parametrize("seconds", [0.0, -1.0, math.inf, math.nan])
def test_sustained_rate_rejects_impossible_timings(seconds):
    with pytest.raises(ValueError):
        probe.sustained_rate(1.0, 1, seconds)


def test_launch_floor_is_seconds_per_kernel():
    assert probe.launch_floor_s(2000, 0.01) == pytest.approx(5e-6)


def test_best_point_is_the_highest_rate_and_none_for_no_points():
    points = [SweepPoint(256, 4, 1.0, 3.0), SweepPoint(512, 2, 1.0, 7.0), SweepPoint(1024, 1, 1.0, 5.0)]
    assert probe.best_point(points).size == 512
    assert probe.best_point([]) is None
    assert Sweep("fp32", ()).best_rate_per_s is None


def test_calls_for_fills_the_block_within_limits():
    assert probe.calls_for(0.01, 0.1) == 10
    assert probe.calls_for(1.0, 0.1) == 1
    assert probe.calls_for(0.0, 0.1) == 1
    assert probe.calls_for(1e-12, 1.0) == probe.MAX_CALLS_PER_BLOCK


def test_sweep_reports_exact_rates_and_picks_the_best_size():
    # the rate rises with size, then falls (a cache edge): the best is in the middle
    rates = {128: 10e9, 256: 40e9, 512: 60e9, 1024: 50e9}
    machine = FakeMachine(lambda n: rates[n])
    points = probe.run_sweep(rates, probe.gemm_flops, machine.time_block, budget_s=100.0, clock=machine.clock)
    assert [p.size for p in points] == [128, 256, 512, 1024]
    for p in points:
        assert p.rate_per_s == pytest.approx(rates[p.size])
        assert p.rate_per_s == pytest.approx(p.calls * probe.gemm_flops(p.size) / p.seconds)
    assert probe.best_point(points).size == 512


def test_sweep_ignores_the_slow_warm_up_call():
    machine = FakeMachine(lambda n: 1e10, warmup_s=5.0)
    points = probe.run_sweep([256], probe.gemm_flops, machine.time_block, budget_s=100.0, clock=machine.clock)
    assert points[0].rate_per_s == pytest.approx(1e10)


def test_sweep_stays_within_its_budget_and_skips_sizes_that_cannot_fit():
    machine = FakeMachine(lambda n: 1e9)    # n=1024: 2.1 s a call; n=4096: 137 s
    points = probe.run_sweep([128, 256, 512, 1024, 2048, 4096], probe.gemm_flops, machine.time_block,
                             budget_s=10.0, clock=machine.clock)
    assert machine.now <= 10.0 * 1.05
    assert 4096 not in [n for n, _ in machine.calls], "a size predicted to overrun the budget must not start"
    assert points and all(p.rate_per_s == pytest.approx(1e9) for p in points)


def test_sweep_gives_one_point_even_with_no_budget():
    machine = FakeMachine(lambda n: 1e9)
    points = probe.run_sweep([512, 1024], probe.gemm_flops, machine.time_block, budget_s=1e-9, clock=machine.clock)
    assert len(points) == 1 and points[0].size == 512


def test_a_block_that_slows_down_stops_at_twice_its_planned_length():
    # the host gets busy after the warm-up: calls take 10x longer; the block, planned as 15 calls of
    # 0.034 s = 0.5 s, must stop after about 1 s (3 slow calls), not run the 5 s of 15 slow calls
    state = {"slow": False}
    machine = FakeMachine(lambda n: 1e8 if state["slow"] else 1e9)
    original = machine.time_block

    def time_block(n, calls, stop_at):
        result = original(n, calls, stop_at)
        state["slow"] = True
        return result

    probe.run_sweep([256], probe.gemm_flops, time_block, budget_s=100.0, min_block_s=0.5, blocks=1, clock=machine.clock)
    assert machine.now < 1.5


def test_copy_buffer_is_well_above_l3_and_within_memory():
    assert probe.copy_buffer_bytes(300 * 2**20, 64 * GB) == probe.COPY_BUFFER_L3_MULTIPLE * 300 * 2**20
    assert probe.copy_buffer_bytes(None, None) >= probe.COPY_BUFFER_MIN_BYTES
    assert probe.copy_buffer_bytes(2**30, 4 * GB) <= 4 * GB * probe.COPY_MAX_MEMORY_FRACTION


def test_round_sig_keeps_small_rates_non_zero():
    assert probe.round_sig(0.000123456) == 0.0001235
    assert probe.round_sig(98765.4) == 98770


@pytest.mark.parametrize(("device", "entry"), [("NVIDIA H200", "h200-sxm"), ("NVIDIA GH200 480GB", "gh200"),
                                               ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"),
                                               ("NVIDIA A100-SXM4-80GB", "a100-80gb-sxm"), ("AMD Instinct MI300X", "mi300x"),
                                               ("Some New Accelerator", None), ("NVIDIA L40", None),
                                               ("NVIDIA L40S", "l40s"), ("NVIDIA L4", "l4"), ("Tesla V100-SXM2-32GB",
                                                                                        "v100-sxm2-32gb")])
def test_catalog_match_by_device_name(device, entry):
    assert probe.catalog_match(device) == entry


def test_catalog_match_names_exist():
    assert {name for _, name in probe.CATALOG_NAMES} <= set(hardware_names())


# ------------------------------------------------------------------------- fake probe results

def _sweep(label: str, rate: float, emulated: bool = False) -> Sweep:
    return Sweep(label, (SweepPoint(512, 4, 4 * probe.gemm_flops(512) / rate, rate),), emulated=emulated)


def fake_cpu(fp16_rate: float = 0.3e9, fp16_emulated: bool = True) -> CpuProbe:
    copy = Sweep("copy-1-thread", (SweepPoint(2**29, 3, 0.2, 20e9),))
    return CpuProbe(cpu_model="Fake CPU", logical_cores=4, usable_cores=4, memory_bytes=32 * GB, l3_bytes=32 * 2**20,
                    numpy_version="2.0", blas="openblas", blas_threads=4, platform="Linux", python_version="3.11",
                    load_average=0.1, gemm=(_sweep("fp32", 100e9), _sweep("fp64", 50e9),
                                            _sweep("fp16", fp16_rate, emulated=fp16_emulated)),
                    copy=(copy,), budget_s=5.0, elapsed_s=4.0, date="2026-01-01T00:00:00+00:00")


def fake_gpu(count: int = 1) -> GpuProbe:
    gemm = (_sweep("bf16", 800e12), _sweep("fp16", 790e12), _sweep("tf32", 400e12), _sweep("fp32", 55e12),
            _sweep("fp8", 1400e12))
    peer = Sweep("peer", (SweepPoint(2**30, 3, 0.01, 400e9),)) if count > 1 else None
    return GpuProbe(device_name="NVIDIA H200", device_count=count, capability="9.0", memory_bytes=150e9,
                    torch_version="2.5", runtime="CUDA 12.4", gemm=gemm,
                    copy=Sweep("copy", (SweepPoint(2**30, 10, 0.005, 4.0e12),)), launch_floor_s=4e-6,
                    peer=peer, peer_access=count > 1 or None, budget_s=30.0, elapsed_s=25.0,
                    date="2026-01-01T00:00:00+00:00")


def test_cpu_mapping_gives_measured_fp32_only_when_fp16_is_emulated_and_slow():
    mapping = probe.hardware_mapping(fake_cpu(), None, name="fake")
    hw = hardware_from_mapping(mapping, "fake")
    assert hw.kind == "cpu"
    assert hw.peak_flops_per_s == {"fp32": pytest.approx(100e9)}
    assert hw.memory_bytes_per_s == pytest.approx(20e9)
    assert hw.memory_bytes == pytest.approx(32 * GB)
    assert hw.devices_per_node == 1 and hw.scale_up_bytes_per_s is None and hw.scale_out_bytes_per_s is None
    e = hw.efficiency
    assert (e.gemm, e.memory, e.fitted, e.gemm_half_dim) == (1.0, 1.0, False, 0.0)
    assert "measured" in e.method and "1.0" in e.method
    assert mapping["extra"]["probed"] is True
    assert any("fp16 left out" in n for n in mapping["notes"]) and any("bf16 left out" in n for n in mapping["notes"])
    assert mapping["extra"]["probe"]["cpu"]["gemm"]["fp64"]["best_gflop_per_s"] == pytest.approx(50.0)


def test_cpu_mapping_keeps_a_16_bit_rate_that_is_at_least_fp32():
    fast = fake_cpu(fp16_rate=200e9, fp16_emulated=False)
    hw = hardware_from_mapping(probe.hardware_mapping(fast, None, name="fake"), "fake")
    assert hw.peak_flops_per_s["fp16"] == pytest.approx(200e9)


def test_cpu_mapping_never_keeps_an_emulated_16_bit_rate():
    """numpy's float16 loop is no trainer's path: kept as a peak when a busy machine measured fp32 low, it made
    fp16 the default precision of an estimate on the file (a flaky test on a loaded CI machine)."""
    mapping = probe.hardware_mapping(fake_cpu(fp16_rate=200e9), None, name="fake")
    assert "fp16" not in hardware_from_mapping(mapping, "fake").peak_flops_per_s
    assert any("fp16 left out" in n and "emulated" in n for n in mapping["notes"])


def test_cpu_mapping_takes_power_and_price_from_a_base_entry():
    base = load_hardware("apple-m4-max")
    mapping = probe.hardware_mapping(fake_cpu(), None, base=base, name="fake")
    assert mapping["power_w"] == base.power_w and mapping["price_usd_per_hour"] == base.price_usd_per_hour
    assert mapping["extra"]["probe"]["from_catalog"]["entry"] == "apple-m4-max"
    assert mapping["peak_tflops"] == {"fp32": pytest.approx(0.1)}       # the rates stay measured


def test_an_estimate_on_a_probed_cpu_states_its_peak_not_0(tmp_path, capsys):
    """A CPU's 0.1 TFLOP/s peak read `0.1 TFLOP/s of 0 peak (fp32)`, and its small run's CO2 `0 kg`."""
    from helpers import call_entry
    path = tmp_path / "cpu.yaml"
    mapping = probe.hardware_mapping(fake_cpu(), None, name="cpu")
    probe.write_hardware_yaml({**mapping, "power_w": 65}, path)
    code, out, err = call_entry(["estimate", "--hardware", str(path), "--precision", "fp32", "--model", "gpt2-124m",
                                 "--devices", "1", "--global-batch", "8", "--seq-len", "256", "--tokens", "1M"], capsys)
    assert code == 0, err
    text = " ".join(out.split())
    assert "of 0 peak" not in text and "GFLOP/s of 100 GFLOP/s peak (fp32)" in text
    assert "│ 0 kg CO2" not in text and " kg CO2 at 480 gCO2/kWh" in text


def test_gpu_mapping_with_a_catalog_base():
    base = load_hardware("h200-sxm")
    mapping = probe.hardware_mapping(fake_cpu(), fake_gpu(), base=base, name="probed-h200")
    hw = hardware_from_mapping(mapping, "probed-h200")
    assert hw.peak_flops_per_s == {p: pytest.approx(r) for p, r in
                                   {"bf16": 800e12, "fp16": 790e12, "tf32": 400e12, "fp32": 55e12, "fp8": 1400e12}.items()}
    assert hw.memory_bytes_per_s == pytest.approx(4.0e12)
    assert hw.memory_bytes == pytest.approx(150e9)
    assert (hw.power_w, hw.price_usd_per_hour) == (base.power_w, base.price_usd_per_hour)
    assert hw.scale_out_bytes_per_s == pytest.approx(base.scale_out_bytes_per_s)
    assert hw.devices_per_node == 1 and hw.scale_up_bytes_per_s is None      # one visible GPU: no scale-up
    e = hw.efficiency
    assert (e.gemm, e.memory, e.low_precision_gemm, e.fitted) == (1.0, 1.0, 1.0, False)
    # attention keeps its absolute rate: fraction x 16-bit peak is the catalog's
    assert e.attention * 800e12 == pytest.approx(base.efficiency.attention * base.peak_16bit_flops_per_s, rel=1e-3)
    assert mapping["kind"] == base.kind and mapping["extra"]["probed"] is True
    assert mapping["extra"]["probe"]["gpu"]["launch_floor_us"] == pytest.approx(4.0)
    assert mapping["extra"]["probe"]["host"]["cpu_model"] == "Fake CPU"


def test_gpu_mapping_with_two_gpus():
    with_base = hardware_from_mapping(probe.hardware_mapping(None, fake_gpu(2), base=load_hardware("h200-sxm")), "x")
    assert with_base.devices_per_node == 2 and with_base.scale_up_domain == 2
    assert with_base.scale_up_bytes_per_s == pytest.approx(load_hardware("h200-sxm").scale_up_bytes_per_s)
    without = hardware_from_mapping(probe.hardware_mapping(None, fake_gpu(2)), "x")
    assert without.scale_up_bytes_per_s == pytest.approx(400e9)           # the measured peer copy
    assert without.scale_out_bytes_per_s is None and without.power_w is None


def test_mapping_needs_a_probe_and_a_measured_fp32_rate():
    with pytest.raises(SpecError):
        probe.hardware_mapping(None, None)
    broken = fake_cpu()
    broken = CpuProbe(**{**broken.__dict__, "gemm": (Sweep("fp32", ()),)})
    with pytest.raises(SpecError, match="fp32"):
        probe.hardware_mapping(broken, None)


# --------------------------------------------------------------------------- the real CPU probe

@pytest.fixture(scope="module")
def cpu_probe() -> CpuProbe:
    return probe.probe_cpu(budget_s=CPU_TEST_BUDGET_S)


@pytest.fixture(scope="module")
def probed_file(cpu_probe, tmp_path_factory):
    path = tmp_path_factory.mktemp("probe") / "probed.yaml"
    probe.write_hardware_yaml(probe.hardware_mapping(cpu_probe, None, name="probed"), path)
    return path


def test_cpu_probe_measures_positive_finite_rates(cpu_probe):
    """Whether it keeps to its budget is a wall-clock matter: bench/bench_probe.py."""
    for label in ("fp32", "fp64", "fp16"):
        rate = cpu_probe.gemm_sweep(label).best_rate_per_s
        assert rate is not None and math.isfinite(rate) and rate > 0, label
    assert cpu_probe.gemm_sweep("fp16").emulated and not cpu_probe.gemm_sweep("fp32").emulated
    assert math.isfinite(cpu_probe.copy_bytes_per_s) and cpu_probe.copy_bytes_per_s > 0
    assert cpu_probe.usable_cores >= 1 and cpu_probe.cpu_model
    import numpy
    assert cpu_probe.numpy_version == numpy.__version__
    for s in cpu_probe.gemm + cpu_probe.copy:
        for p in s.points:
            work = probe.gemm_flops(p.size) if s.label.startswith("fp") else probe.copy_bytes(p.size)
            assert p.rate_per_s == pytest.approx(p.calls * work / p.seconds)


def test_cpu_probe_rejects_a_bad_budget():
    with pytest.raises(SpecError):
        probe.probe_cpu(budget_s=0)


def test_probed_file_loads_with_the_measured_rates(probed_file, cpu_probe):
    hw = load_hardware(str(probed_file))
    assert hw.name == "probed" and hw.kind == "cpu"
    assert hw.peak_flops_per_s["fp32"] == pytest.approx(cpu_probe.gemm_sweep("fp32").best_rate_per_s, rel=1e-3)
    assert hw.memory_bytes_per_s == pytest.approx(cpu_probe.copy_bytes_per_s, rel=1e-3)
    text = probed_file.read_text(encoding="utf-8")
    assert text.startswith("# Probed by `trainest probe`")
    data = yaml.safe_load(text)
    assert data["extra"]["probed"] is True
    assert data["extra"]["probe"]["trainest_version"] == probe.__version__


def test_estimate_on_the_probed_file(probed_file, capsys):
    code, out, err = call_entry([*ESTIMATE, "--hardware", str(probed_file), "--precision", "fp32"], capsys)
    assert code == 0, err
    step_s = json.loads(out)["step"]["time_s"]
    assert math.isfinite(step_s) and step_s > 0


def test_an_estimate_on_a_cpu_file_takes_the_precision_it_has(probed_file, capsys):
    """Without --precision the default is one the hardware has (fp32 here; it was bf16 and an error);
    bf16 given is refused, naming what the file has."""
    code, out, err = call_entry([*ESTIMATE, "--hardware", str(probed_file), "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["inputs"]["precision"] == "fp32" and "precision" in doc["inputs"]["derived"]
    code, out, err = call_entry([*ESTIMATE, "--hardware", str(probed_file), "--precision", "bf16"], capsys)
    assert code == 1 and out == ""
    assert err.startswith("Error:") and "fp32" in err and len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------------------------ the GPU path

@pytest.mark.skipif(_gpu_present(), reason="a GPU is present")
def test_gpu_probe_is_none_with_a_reason_without_a_gpu():
    assert probe.probe_gpu(budget_s=1.0) is None
    reason = probe.gpu_unavailable_reason()
    assert isinstance(reason, str) and ("PyTorch" in reason)


@pytest.mark.skipif(not _gpu_present(), reason="no GPU (PyTorch with CUDA/ROCm) here")
def test_gpu_probe_on_a_real_gpu(tmp_path):
    gpu = probe.probe_gpu(budget_s=8.0)
    assert gpu is not None and gpu.device_count >= 1
    assert gpu.gemm_sweep("bf16").best_rate_per_s > 0 and gpu.copy.best_rate_per_s > 0
    assert 0 < gpu.launch_floor_s < 1e-3
    match = probe.catalog_match(gpu.device_name)
    mapping = probe.hardware_mapping(None, gpu, base=load_hardware(match) if match else None, name="gpu")
    path = probe.write_hardware_yaml(mapping, tmp_path / "gpu.yaml")
    assert load_hardware(str(path)).peak_flops_per_s["bf16"] == pytest.approx(gpu.gemm_sweep("bf16").best_rate_per_s,
                                                                                 rel=1e-3)


class FakeTensor:
    """Shape-only stand-in for a torch tensor: every operation is instant and allocates nothing."""

    def __init__(self, *shape) -> None:
        self.shape = shape

    def to(self, _dtype):
        return self

    def t(self):
        return FakeTensor(*reversed(self.shape))

    def fill_(self, _value):
        return self

    def copy_(self, _src, non_blocking=False):
        return self

    def add_(self, _value):
        return self


def fake_torch(device_count: int = 2, capability=(9, 0)):
    """Just enough of the torch API for probe_gpu, so its control flow runs without a GPU."""
    from types import SimpleNamespace as NS

    class Generator:
        def __init__(self, device=None) -> None:
            pass

        def manual_seed(self, _seed):
            return self

    props = NS(total_memory=141 * 10**9, name="NVIDIA H200")
    cuda = NS(is_available=lambda: True, device_count=lambda: device_count, get_device_properties=lambda d: props,
              get_device_capability=lambda d=0: capability, mem_get_info=lambda d=0: (140 * 10**9, 141 * 10**9),
              synchronize=lambda d=None: None, empty_cache=lambda: None, get_device_name=lambda d=0: "NVIDIA H200",
              can_device_access_peer=lambda a, b: True)
    return NS(__version__="2.9.0-fake", version=NS(cuda="12.8", hip=None), cuda=cuda,
              backends=NS(cuda=NS(matmul=NS(allow_tf32=False))), device=lambda *a: NS(type="cuda"),
              Generator=Generator, bfloat16="bf16", float16="fp16", float32="fp32", float8_e4m3fn="fp8",
              randn=lambda *shape, **kw: FakeTensor(*shape), empty=lambda *shape, **kw: FakeTensor(*shape),
              ones=lambda shape, **kw: FakeTensor(), matmul=lambda a, b, out=None: out,
              _scaled_mm=lambda a, b, **kw: FakeTensor(a.shape[0], b.shape[1]))


@pytest.mark.parametrize("count", [1, 2])
def test_gpu_probe_control_flow_on_a_fake_torch(monkeypatch, count, tmp_path):
    import sys
    monkeypatch.setitem(sys.modules, "torch", fake_torch(device_count=count))
    assert probe.gpu_unavailable_reason() is None
    gpu = probe.probe_gpu(budget_s=0.5)
    assert gpu.device_name == "NVIDIA H200" and gpu.device_count == count and gpu.capability == "9.0"
    assert [s.label for s in gpu.gemm] == ["bf16", "fp16", "tf32", "fp32", "fp8"]
    assert all(s.best_rate_per_s > 0 for s in gpu.gemm) and gpu.copy.best_rate_per_s > 0
    assert gpu.launch_floor_s > 0 and (gpu.peer is not None) == (count > 1)
    assert sys.modules["torch"].backends.cuda.matmul.allow_tf32 is False      # restored
    mapping = probe.hardware_mapping(None, gpu, base=load_hardware(probe.catalog_match(gpu.device_name)))
    assert load_hardware(str(probe.write_hardware_yaml(mapping, tmp_path / "h200.yaml"))).devices_per_node == count


def test_gpu_probe_notes_fp8_on_a_gpu_without_it(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "torch", fake_torch(device_count=1, capability=(8, 0)))
    gpu = probe.probe_gpu(budget_s=0.3)
    fp8 = gpu.gemm_sweep("fp8")
    assert fp8.points == () and "not measured" in fp8.note
    assert "fp8" not in probe.hardware_mapping(None, gpu)["peak_tflops"]


# ------------------------------------------------------------------------------- writing the file

@pytest.mark.parametrize(("target", "message"), [
    ("folder.yaml", "is a directory"),
    ("missing/probed.yaml", "does not exist"),
    ("afile.txt/probed.yaml", "is not a folder"),
    ("probed.json", "must end in .yaml"),
])
def test_unwritable_output_is_one_clear_error(tmp_path, target, message):
    (tmp_path / "folder.yaml").mkdir()
    (tmp_path / "afile.txt").write_text("x")
    with pytest.raises(SpecError, match=message):
        probe.write_hardware_yaml(probe.hardware_mapping(fake_cpu(), None, name="x"), tmp_path / target)
    assert (tmp_path / "folder.yaml").is_dir()


def test_run_probe_fails_fast_and_cleanly_on_an_unwritable_path(tmp_path, capsys):
    (tmp_path / "out.yaml").mkdir()
    assert probe.run_probe(str(tmp_path / "out.yaml"), budget_s=CPU_TEST_BUDGET_S) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error:") and "is a directory" in err and len(err.strip().splitlines()) == 1


def test_run_probe_writes_a_file_and_summarises_on_stderr(tmp_path, capsys, monkeypatch):
    # the probe itself is the fixture's; here only the command's plumbing (budget split, file, streams)
    monkeypatch.setattr(probe, "probe_cpu", lambda budget_s: fake_cpu())
    monkeypatch.setattr(probe, "gpu_unavailable_reason", lambda: "no GPU in this test")
    out_path = tmp_path / "mine.yaml"
    assert probe.run_probe(str(out_path), budget_s=1.0) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and str(out_path) in captured.err
    assert load_hardware(str(out_path)).name == "mine"
    assert probe.run_probe(str(out_path), budget_s=1.0, quiet=True) == 0   # an existing file is replaced
    assert capsys.readouterr().err == ""


def test_run_probe_rejects_a_bad_budget(tmp_path, capsys):
    assert probe.run_probe(str(tmp_path / "x.yaml"), budget_s=-1) == 1
    assert capsys.readouterr().err.startswith("Error:")


# ------------------------------------------------------------------------------------ the command

def test_probe_command_writes_a_file_that_estimate_shows_as_probed(tmp_path, capsys):
    out_path = tmp_path / "this-machine.yaml"
    code, out, err = call_entry(["probe", "-o", str(out_path), "--budget", str(CPU_TEST_BUDGET_S)], capsys)
    assert code == 0, err
    assert out == "" and "wrote" in err          # results are the file; the summary is on stderr
    hw = load_hardware(str(out_path))
    assert hw.probed and hw.probed_on and not hw.efficiency.fitted
    code, out, err = call_entry([*ESTIMATE[:-1], "--hardware", str(out_path), "--precision", "fp32"], capsys)
    assert code == 0, err
    assert "probed on" in out and "by trainest probe" in out
    code, out, err = call_entry([*ESTIMATE, "--hardware", str(out_path), "--precision", "fp32"], capsys)
    band = json.loads(out)["band"]
    assert band["calibrated"] is False and "not calibrated" in band["note"]


def test_probe_command_bad_output(tmp_path, capsys):
    code, out, err = call_entry(["probe", "-o", str(tmp_path / "x.txt"), "--budget", "1"], capsys)
    assert code == 1 and out == "" and err.startswith("Error:") and ".yaml" in err


def test_catalog_entries_are_not_probed_and_extra_must_be_a_mapping():
    assert not load_hardware("h100-sxm").probed
    data = yaml.safe_load((Path(load_hardware("h100-sxm").path)).read_text(encoding="utf-8"))
    with pytest.raises(SpecError, match="extra"):
        hardware_from_mapping({**data, "extra": ["probed"]}, "test")
    assert hardware_from_mapping({**data, "extra": {"probed": True}}, "test").probed
