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
