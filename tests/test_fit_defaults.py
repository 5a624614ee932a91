"""tools/fit_defaults.py: the shipped efficiencies must not depend on what the files held before."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trainest import catalog

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
fit_defaults = pytest.importorskip("fit_defaults")


@pytest.mark.parametrize("name", ["h100-sxm", "a100-80gb-sxm", "tpu-v5e"])
def test_fit_starts_from_the_same_prior_whatever_the_file_holds(name):
    """Regression: flash2_attention was once carried over from the file into the fit's start, so
    re-running the fit moved the result. Every fitted field must be reset by prior_hardware."""
    hw = catalog.load_hardware(name)
    scrambled = catalog.with_efficiency(hw, gemm=0.5, gemm_half_dim=64.0, attention=0.3, memory=0.6,
                                        scale_up=0.5, scale_out=0.5, low_precision_gemm=0.7,
                                        flash2_attention=0.4, layer_overhead_s=1e-4)
    a = fit_defaults.prior_hardware(hw).efficiency
    b = fit_defaults.prior_hardware(scrambled).efficiency
    for name in a._fields:
        assert getattr(a, name) == getattr(b, name), name


def test_the_megatron_core_host_scale_the_moe_stage_fits_is_written_for_both_frameworks_and_loads(tmp_path):
    """Issue 33: the host scale fitted on the MoE runs (moe_report.fitted_host_scale) goes to specs/frameworks.json
    for megatron-core and nemo (the same layers) beside Megatron-DeepSpeed's vTrain fit, which it keeps, and the
    framework table reads it back for exactly those frameworks."""
    import json
    from types import SimpleNamespace

    import moe_report

    from trainest.frameworks import DECLARED, fitted_file, with_fitted
    shipped = fitted_file()
    assert shipped is not None
    path = tmp_path / "frameworks.json"
    path.write_text(shipped.read_text(encoding="utf-8"), encoding="utf-8")
    fit_defaults.write_megatron_core_host_scale(SimpleNamespace(host_scale=1.7234), path)
    doc = json.loads(path.read_text(encoding="utf-8"))["frameworks"]
    assert set(doc) >= {"megatron-deepspeed", *moe_report.MEGATRON_CORE_FRAMEWORKS}
    table = with_fitted(DECLARED, path)
    assert all(table[name].host_scale == 1.7234 for name in moe_report.MEGATRON_CORE_FRAMEWORKS)
    assert table["megatron-deepspeed"].host_scale == doc["megatron-deepspeed"]["host_scale"]
    assert table["torchtitan"].host_scale == 1.0
