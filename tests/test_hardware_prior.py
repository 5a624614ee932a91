"""A hand-written hardware file without an efficiency block (or without some of its fractions) takes, for each
key it leaves out, the prior the catalog gives a device without runs (trainest/priors.py), stated as derived
(issue 36: the newcomer's unusual-accelerator task needed values a newcomer cannot know)."""

from __future__ import annotations

import json

import pytest
import yaml
from helpers import call_entry

from trainest import catalog, priors
from trainest.errors import SpecError

MINIMAL = ("name: accel\npeak_tflops: {bf16: 500}\nmemory: {capacity_gb: 96, bandwidth_gb_per_s: 1800}\n"
           "system: {devices_per_node: 1}\nsource: a datasheet\n")
COMPARED = ("gemm", "gemm_half_dim", "attention", "memory", "scale_up", "scale_out", "low_precision_gemm",
            "flash2_attention", "layer_overhead_s", "overlap_contention", "fitted", "method", "host_per_kernel_s",
            "host_per_micro_batch_s", "kernel_floor_s", "grouped_gemm", "all_to_all", "moe_fitted")


def _no_run_catalog_devices() -> list[str]:
    return [n for n in catalog.hardware_names()
            if catalog.load_hardware(n).efficiency.basis in ("median prior", "prior")]


def _write(tmp_path, text: str, name: str = "accel.yaml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("name", _no_run_catalog_devices())
def test_a_catalog_device_without_runs_written_without_its_efficiency_block_loads_the_same(name, tmp_path):
    """One code path: the catalog's own devices without runs, their efficiency block removed, load with exactly
    the efficiencies the catalog ships for them (the median of the fitted devices of their group, the GEMM scaled
    by a measured ceiling, the MoE prior; the generic prior where no device of the group is fitted)."""
    shipped = catalog.load_hardware(name)
    doc = yaml.safe_load(open(shipped.path, encoding="utf-8"))
    del doc["efficiency"]
    loaded = catalog.load_hardware(str(_write(tmp_path, yaml.safe_dump(doc), f"{name}-mine.yaml")))
    for field in COMPARED:
        assert getattr(loaded.efficiency, field) == getattr(shipped.efficiency, field), field
    assert loaded.efficiency.basis == shipped.efficiency.basis and not loaded.efficiency.fitted
    assert set(loaded.efficiency.derived) >= {"gemm", "gemm_half_dim", "attention", "memory", "scale_up", "scale_out"}
    assert shipped.efficiency.derived == ()


def test_the_no_run_prior_is_what_every_catalog_device_without_runs_carries():
    for name in _no_run_catalog_devices():
        hw = catalog.load_hardware(name)
        block = yaml.safe_load(open(hw.path, encoding="utf-8"))["efficiency"]
        assert priors.no_run_prior(hw.kind, hw.matmul_ceiling) == block, name


def test_a_minimal_hand_written_file_estimates_with_the_prior_stated_as_derived(tmp_path, capsys):
    """Name, peak, memory capacity and bandwidth, devices per node, source: enough to estimate. Its efficiencies
    are the prior of a catalog GPU without runs and without a measured GEMM ceiling; the JSON names them as
    derived, says not calibrated, and the band treats the device as uncalibrated and of a family without runs."""
    path = _write(tmp_path, MINIMAL)
    reference = next(catalog.load_hardware(n) for n in _no_run_catalog_devices()
                     if catalog.load_hardware(n).kind == "gpu" and catalog.load_hardware(n).matmul_ceiling is None)
    hw = catalog.load_hardware(str(path))
    for field in COMPARED:
        assert getattr(hw.efficiency, field) == getattr(reference.efficiency, field), field
    code, out, err = call_entry(["estimate", "--hardware", str(path), "--model", "llama3-8b", "--devices", "1",
                                 "--seq-len", "2048", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["step"]["time_s"] > 0
    h = doc["hardware"]
    assert h["calibrated"] is False and h["efficiency_basis"] == "median prior"
    assert set(h["efficiency_derived"]) >= {"gemm", "gemm_half_dim", "attention", "memory", "scale_up", "scale_out"}
    assert doc["band"]["calibrated"] is False and doc["band"]["pool"] == "prior"
    assert any("not fitted on measured runs" in u for u in doc["band"]["unknowns"])
    code, out, err = call_entry(["estimate", "--hardware", str(path), "--model", "llama3-8b", "--devices", "1",
                                 "--seq-len", "2048"], capsys)
    assert code == 0 and "prior of a catalog device without runs" in " ".join(out.split())


def test_a_catalog_device_gives_no_derived_efficiencies(capsys):
    code, out, _ = call_entry(["estimate", "--hardware", "l4", "--model", "llama3-8b", "--devices", "1",
                               "--seq-len", "2048", "--json"], capsys)
    assert code == 0 and json.loads(out)["hardware"]["efficiency_derived"] is None


def test_a_given_efficiency_is_never_replaced(tmp_path):
    """A partial block: the fractions it gives are kept, only the others are the prior."""
    path = _write(tmp_path, MINIMAL + "efficiency: {gemm: 0.5, scale_out: 0.33, grouped_gemm: 0.9}\n")
    full = catalog.load_hardware(str(_write(tmp_path, MINIMAL, "full.yaml")))
    e = catalog.load_hardware(str(path)).efficiency
    assert (e.gemm, e.scale_out, e.grouped_gemm) == (0.5, 0.33, 0.9)
    assert e.attention == full.efficiency.attention and e.memory == full.efficiency.memory
    assert "gemm" not in e.derived and "scale_out" not in e.derived and "grouped_gemm" not in e.derived
    assert "attention" in e.derived and not e.fitted
    # a block that gives every required fraction loads as written (no prior consulted, nothing derived)
    given = "efficiency: {gemm: 0.6, gemm_half_dim: 100, attention: 0.4, memory: 0.7, scale_up: 0.7, scale_out: 0.6}\n"
    e = catalog.load_hardware(str(_write(tmp_path, MINIMAL + given, "given.yaml"))).efficiency
    assert e.derived == () and (e.gemm, e.gemm_half_dim, e.attention) == (0.6, 100, 0.4)
    assert e.grouped_gemm == catalog.DEFAULT_GROUPED_GEMM


def test_a_value_set_later_is_no_longer_called_derived(tmp_path):
    hw = catalog.load_hardware(str(_write(tmp_path, MINIMAL)))
    moved = catalog.with_efficiency(hw, gemm=0.55, layer_overhead_s=0.0)
    assert "gemm" not in moved.efficiency.derived and "layer_overhead_us" not in moved.efficiency.derived
    assert "attention" in moved.efficiency.derived


def test_a_device_of_a_kind_without_fitted_devices_takes_the_generic_prior(tmp_path):
    hw = catalog.load_hardware(str(_write(tmp_path, MINIMAL + "kind: apple\n")))
    assert hw.efficiency.basis == "prior"
    assert hw.efficiency.gemm == priors.EFFICIENCY_PRIOR_OTHER["gemm"]


@pytest.mark.parametrize(("block", "words"), [
    ("efficiency: {gemm: 1.5}\n", ("efficiency.gemm", "1.5")),
    ("efficiency: {gem: 0.5}\n", ("unknown key 'gem'", "gemm")),
    ("efficiency: fast\n", ("efficiency", "expected a mapping")),
    ("efficiency: {fitted: true, gemm: 0.5}\n", ("efficiency.fitted: true", "attention")),
])
def test_bad_efficiency_values_are_one_clear_line(block, words, tmp_path, capsys):
    path = _write(tmp_path, MINIMAL + block)
    with pytest.raises(SpecError):
        catalog.load_hardware(str(path))
    code, out, err = call_entry(["estimate", "--hardware", str(path)], capsys)
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1
    assert all(w in err for w in words), err
