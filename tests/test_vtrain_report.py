"""The vTrain single-node rows (specs/runs/vtrain-single.yaml, `set: vtrain-single-node`) and
tools/vtrain_report.py: the set loads whole and apart from the public runs; today's error by
micro-batch and tp is printed (run with -s), not gated (issue 12 adds the gate with the kernel model).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trainest.validate import PUBLIC_SET, RunResult, load_runs, validate_runs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
vtrain_report = pytest.importorskip("vtrain_report")

VTRAIN_SET = "vtrain-single-node"
VTRAIN_RUNS = 720
VTRAIN_JOBS = 72          # 4 models (12, 16, 20, 24 layers) x 18 (devices, global batch) pairs


@pytest.fixture(scope="module")
def vtrain():
    return vtrain_report.predict(VTRAIN_SET)


def test_the_set_loads_720_expressible_runs_in_72_jobs(vtrain):
    cases, results = vtrain
    loaded = load_runs(run_set=VTRAIN_SET)
    assert len(cases) == len(results) == VTRAIN_RUNS and not loaded.not_expressible and not loaded.duplicates
    assert {c.run_set for c in cases} == {VTRAIN_SET}
    assert {c.scenario.hardware.name for c in cases} == {"a100-80gb-sxm"}
    assert {c.scenario.model.layers for c in cases} == {12, 16, 20, 24}
    jobs = {vtrain_report.job_key(c) for c in cases}
    assert len(jobs) == VTRAIN_JOBS
    # a job is one model on one device count at one global batch: the layouts are what varies
    assert len({(c.scenario.model.layers, c.scenario.devices, c.scenario.global_batch) for c in cases}) == VTRAIN_JOBS
    layouts = {(vtrain_report.job_key(c), r.tp, r.pp, r.dp, r.micro_batch) for c, r in zip(cases, results)}
    assert len(layouts) == VTRAIN_RUNS
    assert len(vtrain_report.plan_picks(cases, results)) == VTRAIN_JOBS


def test_the_set_is_reported_apart_from_the_public_runs():
    every = validate_runs()
    public = validate_runs(run_set=PUBLIC_SET)
    assert set(every.by_set) == {PUBLIC_SET, VTRAIN_SET, "finetune"}     # finetune: the LoRA/QLoRA runs (issue 14)
    assert every.by_set[VTRAIN_SET].runs == VTRAIN_RUNS
    assert every.by_set[PUBLIC_SET] == public.summary
    assert every.by_source.keys() - public.by_source.keys() == {"vtrain-single", "mlx"}   # mlx: LoRA runs only


def test_todays_error_by_micro_batch_and_tp(vtrain):
    """Not a gate: prints today's numbers (docs/validation.md, "vTrain single-node rows"). The model
    predicts every group too fast, more so the smaller the kernels; the lead adds the gate."""
    cases, results = vtrain
    print("\n" + vtrain_report.text_report(cases, results))
    for key in ("micro_batch", "tp"):
        groups = vtrain_report.by_key(results, key)
        assert sum(g.runs for g in groups) == VTRAIN_RUNS
        assert all(g.mape_pct >= abs(g.mean_error_pct) for g in groups)


def _result(run_id: str, measured: float, predicted: float, **layout) -> RunResult:
    base = dict(tp=1, pp=1, dp=1, micro_batch=1)
    base.update(layout)
    return RunResult(id=run_id, source="s", hardware="h", metric="step_time_s", unit="s", measured=measured,
                     predicted=predicted, error_pct=0.0, step_ratio=predicted / measured, measured_step_s=measured,
                     predicted_step_s=predicted, flops_formula=None, bottleneck="compute", fits=True, params_b=0.1,
                     devices=8, cp=1, vpp=1, zero=0, sequence_parallel=False, recompute="full", precision="fp16",
                     seq_len=1024, global_batch=8, confidence=None, citation="c", **base)


def test_error_groups_and_pick_cost_by_hand():
    rs = [_result("a", 1.0, 0.5, tp=1), _result("b", 2.0, 3.0, tp=1), _result("c", 4.0, 1.0, tp=2)]
    g = {x.value: x for x in vtrain_report.by_key(rs, "tp")}
    assert g[1].runs == 2 and g[1].mape_pct == pytest.approx(50.0) and g[1].mean_error_pct == pytest.approx(0.0)
    assert g[2].mape_pct == pytest.approx(75.0) and g[2].mean_error_pct == pytest.approx(-75.0)


def test_plan_pick_is_the_smallest_predicted_step_and_costs_against_the_measured_best(vtrain):
    cases, _ = vtrain
    job = [c for c in cases if vtrain_report.job_key(c) == vtrain_report.job_key(cases[0])][:3]
    assert len(job) >= 2
    # measured best is the first; the prediction prefers the second, which measured 25 % slower
    results = [_result(job[0].id, 1.0, 0.9), _result(job[1].id, 1.25, 0.5)] + \
              [_result(c.id, 3.0, 2.0) for c in job[2:]]
    (pick,) = vtrain_report.plan_picks(job, results)
    assert pick.best.id == job[0].id and pick.pick.id == job[1].id and not pick.right
    assert pick.cost_pct == pytest.approx(25.0)
    right = vtrain_report.plan_picks(job, [_result(job[0].id, 1.0, 0.4)] + results[1:])
    assert right[0].right and right[0].cost_pct == 0.0
