"""tools/moe_report.py: the per-release table of the MoE section (issue 33's ±0.05 target) and which runs it
counts as run as their record states."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

from moe_report import (HOST_SCALE_BOUNDS, as_stated, as_stated_sentence, golden_minimum,  # noqa: E402
                        release_markdown)


def _run(release: str, ratio: float, unmodelled: tuple[str, ...] = ()) -> SimpleNamespace:
    """A result of step ratio predicted/measured `ratio` (error_pct in the tokens/s metric, as validate gives it)."""
    return SimpleNamespace(id=f"mbridge-{release}-Pre-Training-X-DGX-B200-FP8-8g-gbs8", predicted_step_s=ratio,
                           measured_step_s=1.0, step_ratio=ratio, error_pct=(1.0 / ratio - 1.0) * 100.0,
                           unmodelled=unmodelled)


def test_a_run_whose_record_says_it_ran_otherwise_is_not_counted_as_stated():
    assert as_stated(_run("26.02", 1.0, ("moe_paged_stash true",)))
    assert not as_stated(_run("25.11", 1.0, ("the recipe's settings (its layout differs from the row's)",)))
    assert not as_stated(_run("26.06.01", 1.0, ("a performance regression its source names as a known issue",)))


def test_the_release_table_gives_each_releases_mean_log_error_of_all_runs_and_of_those_as_stated():
    runs = [_run("26.06.01", 0.5, ("a performance regression its source names as a known issue",)),
            _run("26.06.01", 1.1), _run("26.06.01", 0.9), _run("26.02", 1.2), _run("25.11", 0.8)]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in release_markdown(runs).splitlines()[2:]}
    assert list(rows) == ["25.11", "26.02", "26.06.01"]          # in release order, 26.06.01 after 26.02
    n, _, mean_all, kept, mean_kept = rows["26.06.01"]
    assert (int(n), int(kept)) == (3, 2)
    assert float(mean_all) == round((math.log(0.5) + math.log(1.1) + math.log(0.9)) / 3, 3)
    assert float(mean_kept) == round((math.log(1.1) + math.log(0.9)) / 2, 3)


def test_the_as_stated_sentence_counts_the_runs_as_stated_apart_and_is_empty_when_all_are():
    regression = ("a performance regression its source names as a known issue",)
    runs = [_run("26.06.01", 0.5, regression), _run("26.06.01", 1.1), _run("26.02", 0.9)]
    split = {runs[1].id: True, runs[2].id: False}          # runs[0] shares runs[1]'s id (one release)
    text = as_stated_sentence(runs, split)
    assert "the 2 that ran as their records state" in text
    kept_mape = (abs(1.0 / 1.1 - 1.0) + abs(1.0 / 0.9 - 1.0)) / 2 * 100.0
    assert f"are {kept_mape:.1f} % off" in text
    assert as_stated_sentence(runs[1:], split) == ""


def test_the_golden_section_search_finds_an_interior_minimum_and_a_minimum_on_a_bound():
    """The search both MoE-stage parameters use (the shared grouped_gemm, Megatron-Core's host scale)."""
    calls: list[float] = []

    def bowl(x: float) -> float:
        calls.append(x)
        return (x - 1.72) ** 2
    assert abs(golden_minimum(bowl, *HOST_SCALE_BOUNDS, 0.02) - 1.72) < 0.02
    assert len(calls) < 40
    assert golden_minimum(lambda x: x, 0.5, 1.0, 0.005) == 0.5       # falling all the way to the lower bound


def test_the_all_to_all_fraction_is_one_per_system_b200_with_b300_gb200_with_gb300():
    """Issue 31 ("share the constant across the generation"): the expert all-to-all's fraction of the link rate
    is the fabric's and its software's, so the shipped fit gives the HGX 8-GPU B200 and B300 one value and the
    NVL72 GB200 and GB300 another; fitted per device, B300 sat on the lower bound and GB300 on the upper."""
    from moe_report import ALL_TO_ALL_SYSTEMS, all_to_all_system

    from trainest import catalog
    assert all_to_all_system("b300") == all_to_all_system("b200") == "b200"
    assert all_to_all_system("gb300") == all_to_all_system("gb200") == "gb200"
    assert all_to_all_system("h100-sxm") == "h100-sxm"
    for member, system in ALL_TO_ALL_SYSTEMS.items():
        assert catalog.load_hardware(member).efficiency.all_to_all == catalog.load_hardware(system).efficiency.all_to_all


def test_the_shared_all_to_all_fits_every_members_runs_at_one_value():
    """`_shared_all_to_all` on two members' runs picks one grid value inside the bounds for both, and a member's
    MAPE is that of its own runs at that value."""
    from moe_report import AllToAllFit, _shared_all_to_all

    from helpers import bundled_cases
    from trainest import catalog
    from trainest.calibrate import BOUNDS
    cases = [c for c in bundled_cases() if c.scenario.model.moe is not None and "Nemotron" not in c.id]
    members = {}
    for name in ("b200", "b300"):
        hw = catalog.load_hardware(name)
        members[name] = (hw, [c for c in cases if c.scenario.hardware.name == name][:3])
    loss, fits = _shared_all_to_all(members)
    assert math.isfinite(loss) and loss >= 0.0
    values = {f.hardware.efficiency.all_to_all for f in fits.values()}
    assert len(values) == 1 and BOUNDS["all_to_all"][0] <= values.pop() <= BOUNDS["all_to_all"][1]
    assert all(isinstance(f, AllToAllFit) and f.mape_after_pct is not None for f in fits.values())
