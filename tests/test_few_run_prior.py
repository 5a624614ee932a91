"""A device with few runs, and the prior of a device without runs, as the shipped fit (tools/fit_defaults.py) and
the one-source-left-out cross-validation (tools/cross_validate.py) both apply them (issue 31).

The fits here are stand-ins (no optimiser runs): what is tested is which runs each device is fitted on, from which
start, with which pull, and which fits a device without runs takes the median of."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from trainest import catalog
from trainest.calibrate import PRIOR_WEIGHT
from trainest.priors import MIN_FIT_RUNS, own_fit
from trainest.validate import PUBLIC_SET, load_runs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
cross_validate = pytest.importorskip("cross_validate")
fit_defaults = pytest.importorskip("fit_defaults")
fit_priors = pytest.importorskip("fit_priors")

LEFT_OUT = "megatron-bridge"    # the only source of GB200/GB300 runs, and most of B200's


class StandInCache:
    """FitCache's interface: records each fit (never on a run of the left-out source) and returns its start with
    an attention fraction that says how many runs it was fitted on."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, catalog.Hardware, float]] = []

    def fit(self, cases, start, unpulled, prior_weight=PRIOR_WEIGHT):
        assert not any(c.source == LEFT_OUT for c in cases)
        self.calls.append((start.name, len(cases), start, prior_weight))
        return catalog.with_efficiency(start, attention=0.3 + 0.001 * len(cases))


@functools.cache
def _dense_by_hardware() -> dict:
    by_hw: dict = {}
    for c in load_runs(run_set=PUBLIC_SET).cases:
        if c.scenario.model.moe is None and c.scenario.model.hybrid is None:
            by_hw.setdefault(c.scenario.hardware.name, []).append(c)
    return by_hw


@pytest.fixture
def left_out():
    cache = StandInCache()
    return cross_validate.LeftOut(_dense_by_hardware(), {}, cache), cache


def _fit_runs(name: str, source: str) -> int:
    return sum(c.source != source and fit_defaults.in_fit_set(c.id) for c in _dense_by_hardware()[name])


def test_the_bundled_runs_still_pose_the_cases_tested_here():
    assert _fit_runs("gb200", LEFT_OUT) == 0
    assert 0 < _fit_runs("b200", LEFT_OUT) < MIN_FIT_RUNS
    assert 0 < _fit_runs("h200-sxm", LEFT_OUT) < MIN_FIT_RUNS and _fit_runs("h100-sxm", LEFT_OUT) >= MIN_FIT_RUNS
    assert fit_priors.MIN_FEW_RUNS <= _fit_runs("b200", "nemo-long-sequence") < MIN_FIT_RUNS


def test_a_device_without_runs_of_other_sources_takes_no_fit_that_saw_the_left_out_source(left_out):
    """Regression: the prior of a device left without runs was the median of the SHIPPED fits of the other
    devices, which the left-out source's runs helped set (GB200's prior with Megatron-Bridge left out held
    GB300's and B200's fits on Megatron-Bridge's runs; TPU v5e's with MaxText left out, TPU v5p's fit on
    MaxText). Now every member of the median is fitted without that source (the stand-in fit asserts it)."""
    import import_hardware as ih
    left, cache = left_out
    hw, how, fitted = left.without("gb200", LEFT_OUT)
    assert not fitted and how.startswith("prior of a device without runs")
    members = {name for name, n, _, _ in cache.calls}
    assert members and not members & {"b200", "gb200", "gb300"}      # none keeps MIN_FIT_RUNS runs without it
    shipped = fit_priors.unseen_prior_hardware(left.hardware("gb200"),
                                               ih.fitted_blocks(catalog.specs_dir() / "hardware"))
    assert hw.efficiency.attention != shipped.efficiency.attention   # the stand-in fits, not the shipped ones


def test_a_device_with_a_few_runs_is_fitted_on_them_pulled_harder(left_out):
    """B200 keeps 5 fit runs (nemo-long-sequence) when Megatron-Bridge is left out: they were discarded for the
    prior of a device without runs (Megatron-Bridge's 4 B200 runs 5.3 % MAPE); now fitted on, with the pull scaled
    by MIN_FIT_RUNS / 5, from that prior (2.9 %)."""
    left, cache = left_out
    hw, how, fitted = left.without("b200", LEFT_OUT)
    n = _fit_runs("b200", LEFT_OUT)
    assert fitted and how.startswith(f"fitted on {n} runs of other sources")
    (name, runs, start, weight), = [call for call in cache.calls if call[0] == "b200"]
    assert runs == n and weight == pytest.approx(fit_priors.few_run_weight(n)) and weight > PRIOR_WEIGHT
    assert start.efficiency == left.no_run_prior(left.hardware("b200"), LEFT_OUT).efficiency   # its start
    assert not start.efficiency.fitted


def test_a_few_run_fit_is_not_inherited_by_a_sibling(left_out):
    """GB200's die is B200's, but B200's few-run fit is tuned to its few (long-sequence) runs: GB200/GB300 from it
    were measured worse (GB300 9.0 -> 12.4 % left out). A sibling inherits only a fit on MIN_FIT_RUNS runs."""
    left, _ = left_out
    left.without("b200", LEFT_OUT)
    hw, how, fitted = left.without("gb300", LEFT_OUT)
    assert not fitted and "b200" not in how


def test_a_device_with_few_runs_and_a_die_fit_inherits_it(left_out):
    """H200 keeps 2 fit runs (torchtitan) when Megatron-Bridge is left out, and its die (H100) is fitted on many:
    it takes that fit. Refitted on k <= 5 of their own runs from their die's fit, GB200, GB300 and the 500 W H100
    did worse than the die's fit alone (fit_priors.fits_few_runs)."""
    left, cache = left_out
    parent, _, _ = left.without("h100-sxm", LEFT_OUT)
    hw, how, fitted = left.without("h200-sxm", LEFT_OUT)
    assert fitted and how.startswith("h100-sxm's fit")
    assert not [call for call in cache.calls if call[0] == "h200-sxm"]
    assert hw.efficiency.attention == pytest.approx(parent.efficiency.attention)


def test_which_devices_with_few_runs_are_fitted_on_them():
    few = fit_priors.MIN_FEW_RUNS
    assert not fit_priors.fits_few_runs(few - 1, False) and fit_priors.fits_few_runs(few, False)
    assert fit_priors.fits_few_runs(MIN_FIT_RUNS - 1, False) and not fit_priors.fits_few_runs(MIN_FIT_RUNS, False)
    assert not any(fit_priors.fits_few_runs(n, True) for n in range(MIN_FIT_RUNS + 1))


def test_the_few_run_pull_joins_the_plain_pull_at_min_fit_runs():
    for n in range(1, MIN_FIT_RUNS):
        assert fit_priors.few_run_weight(n) * n == pytest.approx(PRIOR_WEIGHT * MIN_FIT_RUNS)
    assert fit_priors.few_run_weight(MIN_FIT_RUNS - 1) > PRIOR_WEIGHT
    for n in (0, MIN_FIT_RUNS):
        with pytest.raises(ValueError):
            fit_priors.few_run_weight(n)


def test_a_few_run_fit_is_no_member_of_the_median():
    block = {"gemm": 0.7, "fitted": True, "method": "tools/fit_defaults.py: the fit", "fit_runs": MIN_FIT_RUNS - 1}
    assert not own_fit(block)
    assert own_fit({**block, "fit_runs": MIN_FIT_RUNS}) and own_fit({k: v for k, v in block.items() if k != "fit_runs"})


def test_the_shipped_fit_applies_the_same_rule(monkeypatch):
    """fit_defaults.few_run_outcome: the device's fit runs, the pull few_run_weight(n), the prior of a device
    without runs (the median of the fitted devices) as start; its block says fit_runs = n (not a member of the
    median)."""
    import import_hardware as ih
    seen = {}

    def stand_in(cases, start, prior_weight=PRIOR_WEIGHT, unpulled=()):
        seen.update(runs=len(cases), start=start, weight=prior_weight)
        param = SimpleNamespace(name="gemm", value=0.7, constrained=True)
        return SimpleNamespace(hardware=catalog.with_efficiency(start, gemm=0.7), runs=len(cases),
                               mape_after_pct=1.0, parameters=(param,))

    monkeypatch.setattr(fit_defaults, "fit_efficiency", stand_in)
    own = ih.fitted_blocks(catalog.specs_dir() / "hardware")
    tpu = catalog.load_hardware("tpu-v4")
    cases = [c for c in load_runs(run_set=PUBLIC_SET).cases if c.scenario.hardware.name == "tpu-v4"
             and fit_defaults.in_fit_set(c.id)]
    assert fit_priors.MIN_FEW_RUNS <= len(cases) < MIN_FIT_RUNS
    hw, block, status, _ = fit_defaults.few_run_outcome(tpu, cases, own, {})
    assert seen["runs"] == len(cases) and seen["weight"] == pytest.approx(fit_priors.few_run_weight(len(cases)))
    assert seen["start"].efficiency == fit_priors.unseen_prior_hardware(tpu, own).efficiency
    assert block["fit_runs"] == len(cases) and block["fitted"] is True and not own_fit(block)
    assert hw.efficiency.gemm == pytest.approx(0.7)
