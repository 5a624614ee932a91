"""The accuracy gate: trainest against the bundled published runs (docs/validation.md).

Issue 3's targets (docs/validation.md):
  * MAPE ≤ 10 % over all expressible runs, with at least 400 expressible runs (met: 5.6 % over 514
    distinct dense measurements with the shipped fit, holdout 5.4 %; repeated transcriptions are counted once;
    one source left out, the headline of docs/validation.md: 7.6 %);
  * MAPE ≤ 5 % on the Korthikanti et al. 2022 and Narayanan et al. 2021 A100 tables (NOT met: 5.6 %
    over 33 runs; 4.5 % over the 27 that are not Narayanan Table 2's DeepSpeed ZeRO-3 rows, 10.6 % on
    those six; xfail below).

Every gate here is about the PUBLIC runs (runs files without a `set:`): other sets, such as the
720 vTrain single-node rows (`set: vtrain-single-node`, tests/test_vtrain_report.py), are reported
apart and must not move these figures. Issue 3's gates hold the DENSE public runs (the 460 it was
set on); the mixture-of-experts runs (issue 13: 133 Megatron-Bridge rows) have gates of their own
(docs/validation.md, "Mixture-of-experts runs"): their holdout split is reported against issue 13's
≤ 10 % target, which is not met (xfail below).

MAPE_GATE_PCT and PAPER_GATE_PCT are the current figures rounded up by about one point, so that a
regression of the model, the shipped efficiencies or the runs fails here. Lower it when the model improves (re-run
`python tools/fit_defaults.py` and read the summary line); never raise it to make a change pass.
"""

from __future__ import annotations

import zlib

import pytest

from trainest.validate import PUBLIC_SET, build_report, mape_pct

MAPE_GATE_PCT = 6.5               # current: 5.6 % over 514 runs (tools/fit_defaults.py, shipped efficiencies)
PAPER_GATE_PCT = 6.5              # current: 5.6 % over the 33 paper-table runs
TARGET_MAPE_PCT = 10.0            # issue 3
TARGET_MIN_RUNS = 400             # issue 3: expressible runs
PUBLIC_RUNS = 514                 # distinct expressible public measurements (460 + InternEvo 7B 54, issue 31)
TARGET_PAPER_TABLES_PCT = 5.0     # issue 3: Korthikanti 2022 and Narayanan 2021 A100 tables
PAPER_SOURCES = ("korthikanti2022", "narayanan2021")
MOE_RUNS = 133                    # expressible public mixture-of-experts runs (issue 13: target ≥ 120)
MOE_HOLDOUT_GATE_PCT = 14.0       # current: 12.9 % over the 45 holdout MoE runs (tools/fit_defaults.py)
MOE_FIT_GATE_PCT = 12.5           # current: 11.3 % over the 88 fit MoE runs
TARGET_MOE_HOLDOUT_PCT = 10.0     # issue 13


@pytest.fixture(scope="module")
def full_report(public_report):
    """validate_runs(run_set=PUBLIC_SET), shared with the other tests that read it (conftest.public_report)."""
    return public_report


@pytest.fixture(scope="module")
def report(full_report):
    """The dense public runs: what issue 3's gates measure."""
    dense = [r for r in full_report.runs if r.architecture == "dense"]
    return build_report(dense, full_report.not_expressible, full_report.duplicates)


def _in_fit_set(run_id: str) -> bool:
    """tools/fit_defaults.py's split: crc32(id) mod 100 < 60 is the FIT set."""
    return zlib.crc32(run_id.encode("utf-8")) % 100 < 60


def _moe_split(full_report):
    moe = [r for r in full_report.runs if r.architecture == "moe"]
    return [r for r in moe if _in_fit_set(r.id)], [r for r in moe if not _in_fit_set(r.id)]


def test_gates_measure_the_public_runs_only(report, full_report):
    assert {r.run_set for r in full_report.runs} == {PUBLIC_SET} and report.summary.runs == PUBLIC_RUNS


def test_moe_runs_are_expressible(full_report):
    moe = [r for r in full_report.runs if r.architecture == "moe"]
    assert len(moe) == MOE_RUNS >= 120


def test_moe_errors_do_not_regress(full_report):
    fit, holdout = _moe_split(full_report)
    assert mape_pct(holdout) <= MOE_HOLDOUT_GATE_PCT and mape_pct(fit) <= MOE_FIT_GATE_PCT


@pytest.mark.xfail(reason="issue 13 target (≤ 10 % MAPE on the holdout MoE runs) not met: 11.9 %. Identical inputs "
                          "re-measured in successive Megatron-Bridge releases differ by up to 1.8x (docs/validation.md)",
                   strict=True)
def test_target_moe_holdout(full_report):
    _, holdout = _moe_split(full_report)
    assert mape_pct(holdout) <= TARGET_MOE_HOLDOUT_PCT


def test_bundled_mape_does_not_regress(report):
    assert report.summary.mape_pct <= MAPE_GATE_PCT, (
        f"bundled validation MAPE {report.summary.mape_pct:.2f} % > gate {MAPE_GATE_PCT} %")


def test_at_least_400_runs_expressible(report):
    assert report.summary.runs >= TARGET_MIN_RUNS


def test_every_skipped_run_has_a_reason(report):
    assert all(n.reason.strip() for n in report.not_expressible)


def test_target_overall_mape(report):
    assert report.summary.mape_pct <= TARGET_MAPE_PCT


def _paper_runs(report):
    return [r for r in report.runs if r.source in PAPER_SOURCES and r.hardware.startswith("a100")]


def test_paper_tables_do_not_regress(report):
    paper = _paper_runs(report)
    assert len(paper) == 33 and mape_pct(paper) <= PAPER_GATE_PCT


@pytest.mark.xfail(reason="issue 3 target (≤ 5 % on the Korthikanti/Narayanan A100 tables) not met yet: 5.6 %. "
                          "Narayanan Table 2's DeepSpeed ZeRO-3 rows at micro-batch 4 are compute-bound at ~141 TFLOP/s "
                          "per GPU, ~20 % below trainest's compute; the other 27 rows are at 4.5 %", strict=True)
def test_target_paper_tables(report):
    paper = _paper_runs(report)
    assert paper and mape_pct(paper) <= TARGET_PAPER_TABLES_PCT
