"""Issue 34: --recompute-layers N, full recompute of N layers per pipeline stage and chunk (docs/model.md §7.10)."""

from __future__ import annotations

import pytest

from trainest.errors import SpecError
from trainest.estimate import estimate
from trainest.layout import recompute_share
from trainest.scenario import scenario_from_mapping

BASE = {"model": "llama3-70b", "hardware": "h100-sxm", "devices": 32, "seq_len": 8192, "precision": "bf16",
        "parallel": {"tp": 1, "pp": 1, "zero": 3}, "micro_batch": 1, "global_batch": 32, "recompute": "full"}


def est(**changes):
    return estimate(scenario_from_mapping({**BASE, **changes}, "test"))


def test_half_the_layers_recomputed_is_halfway_in_memory_and_time():
    """40 of 80 layers re-run: the activations and the step are the means of no recompute's and full's (every
    layer keeps either its input or everything; the re-run forward is paid for 40 layers)."""
    none, full, half = est(recompute="none"), est(), est(recompute_layers=40)
    assert half.memory.activations_bytes == pytest.approx(
        0.5 * (none.memory.activations_bytes + full.memory.activations_bytes), rel=1e-6)
    assert half.step.time_s == pytest.approx(0.5 * (none.step.time_s + full.step.time_s), rel=1e-6)


def test_every_layer_or_more_is_full_recompute():
    full = est()
    for n in (80, 0):
        e = est(recompute_layers=n)
        assert e.memory.per_device_bytes == full.memory.per_device_bytes and e.step.time_s == full.step.time_s


def test_the_share_counts_layers_per_stage_and_chunk():
    """Megatron's block method: n layers per pipeline stage and model chunk, of the stage's L/p."""
    assert recompute_share(80, 4.0, 1.0, 5) == pytest.approx(0.25)
    assert recompute_share(80, 4.0, 2.0, 5) == pytest.approx(0.5)
    assert recompute_share(80, 1.0, 1.0, 0) == 1.0
    assert recompute_share(80, 8.0, 1.0, 20) == 1.0


def test_more_layers_than_the_model_is_refused_in_one_line():
    with pytest.raises(SpecError) as err:
        scenario_from_mapping({**BASE, "recompute_layers": 81}, "s")
    assert "recompute_layers" in str(err.value) and "81" in str(err.value) and "\n" not in str(err.value)


def test_without_full_recompute_it_changes_nothing_and_estimate_warns():
    from trainest.caveats import estimate_warnings
    s = scenario_from_mapping({**BASE, "recompute": "none", "recompute_layers": 20}, "s")
    e = estimate(s)
    assert e.memory.per_device_bytes == est(recompute="none").memory.per_device_bytes
    assert any("recompute_layers" in w for w in estimate_warnings(s, e))


def test_the_plan_search_prices_partial_recompute_as_estimate_does():
    """The grid of `plan --recompute-layers 5` (its vectorised memory and step, layer terms shared per pipeline
    size) gives each full-recompute plan the memory and step of its own estimate."""
    import numpy as np

    from trainest.search import enumerate_plans, evaluate_grid, job_scenario
    from trainest.search.rank import EVERY_PLAN
    from trainest.search.rank import _estimate_at
    base = job_scenario({"model": "llama3-70b", "hardware": "h100-sxm", "seq_len": 8192, "global_batch": 32,
                         "recompute_layers": 5}, "plan")
    g = enumerate_plans(base, 32, EVERY_PLAN)
    ev = evaluate_grid(base, g)
    full = [i for i in np.flatnonzero(ev.fits) if g.column("recompute", np.array([i]))[0] > 0]
    checked = 0
    for i in full[:: max(1, len(full) // 6)]:
        e = _estimate_at(base, 32, g, int(i))
        if e.scenario.recompute != "full":
            continue
        checked += 1
        assert ev.time_s[i] == pytest.approx(e.step.time_s, rel=1e-6)
        assert ev.memory_bytes[i] == pytest.approx(e.memory.per_device_bytes, rel=1e-6)
    assert checked >= 3
