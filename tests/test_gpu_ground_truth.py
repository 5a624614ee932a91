"""bench/gpu_ground_truth.py: exercised on the CPU with tiny shapes (the GPU run is the same code).

PyTorch is not a dependency of trainest: the end-to-end test is skipped where it is not installed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from trainest.validate import load_runs

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "gpu_ground_truth.py"


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_ground_truth", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_device_names_map_to_the_catalog():
    gt = load_script()
    assert gt.catalog_name("NVIDIA H200") == "h200-sxm"
    assert gt.catalog_name("NVIDIA H100 80GB HBM3") == "h100-sxm"
    assert gt.catalog_name("NVIDIA A100-SXM4-80GB") == "a100-80gb-sxm"
    assert gt.catalog_name("Some Accelerator") is None


def test_configs_are_expressible_scenarios():
    gt = load_script()
    for cfg in gt.FULL_CONFIGS + gt.QUICK_CONFIGS:
        assert cfg.hidden % cfg.heads == 0 and cfg.recompute in ("none", "full")


def test_quick_run_writes_a_valid_runs_file(tmp_path):
    pytest.importorskip("torch")
    gt = load_script()
    out = tmp_path / "ground-truth.yaml"
    assert gt.main(["--quick", "--device", "cpu", "--steps", "3", "--warmup", "1", "--out", str(out),
                    "--hardware", "h200-sxm"]) == 0
    loaded = load_runs([out])
    assert len(loaded.cases) == len(gt.QUICK_CONFIGS) and not loaded.not_expressible
    for case in loaded.cases:
        assert case.measurement.metric == "step_time_s" and case.measurement.value > 0
        assert "gpu_ground_truth.py" in case.citation and "PyTorch" in case.citation
