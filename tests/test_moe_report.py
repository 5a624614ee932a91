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
