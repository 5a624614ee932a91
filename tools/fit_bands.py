"""Regenerate specs/bands.json, the error band of every estimate, from the validation residuals.

    python tools/fit_bands.py            # write specs/bands.json (tools/fit_defaults.py runs this after a refit)
    python tools/fit_bands.py --check    # compute and compare with the shipped file: exit 1 when it is stale

Method (trainest/band.py): each validated run's residual r = measured / predicted step time, in two
pools: `left-out` (every run predicted with its hardware fitted WITHOUT the run's source, where other
sources calibrate that hardware: docs/cross-validation.json, written by tools/cross_validate.py) and
`prior` (every public run predicted with the prior its device would ship with had it no runs: the median
of the other fitted devices of its group, `fit_priors.unseen_prior_hardware`, else the importer's generic
prior; what an uncalibrated device's estimate uses; each member fitted without the run's source, as
tools/cross_validate.py writes it: `prior_step_s`). Per group of runs (hardware, its family, scale,
dense/MoE; every level of band.LEVELS with at least band.MIN_GROUP_RUNS runs) the split-conformal 80 %
interval of r. A framework without validated runs widens the band by the factor a left-out framework
needs (leave-one-framework-out); a hardware family without runs, likewise (leave-one-family-out), its broad
bands first made symmetric about r = 1 (`either_way`).

It also measures what the band claims, out of sample. The headline: one source left out (each source's
runs, predicted without it, judged by bands built from the other sources only, as an estimate for it
would be: calibrated where other sources calibrate its hardware, widened where no other source used its
framework), per hardware, framework, family, source and architecture. Also: leave-one-out coverage,
leave-one-family-out for the prior pool, and the shipped bands on the vTrain single-node rows.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from trainest import band as B  # noqa: E402
from trainest.catalog import specs_dir  # noqa: E402
from trainest.validate import PUBLIC_SET, Case, load_runs  # noqa: E402

FINETUNE_SET = "finetune"       # the LoRA/QLoRA runs (tools/cross_validate.py predicts them; no fit uses them)

COMMAND = "python tools/fit_bands.py"
VTRAIN_SET = "vtrain-single-node"
# Hardware of one architecture generation: a group of their runs together says how the model does on it.
FAMILIES = {
    "nvidia-volta": ("v100-sxm2-32gb",),
    "nvidia-ampere": ("a100-40gb-sxm", "a100-80gb-sxm", "a100-80gb-pcie", "a100-80gb-sxm-roce400"),
    "nvidia-hopper": ("h100-sxm", "h100-sxm-a3", "h100-pcie", "h100-96gb-500w", "h200-sxm", "h800-sxm", "gh200"),
    "nvidia-blackwell": ("b200", "b300", "gb200", "gb300"),
    "google-tpu": ("tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu7x"),
    "amd-cdna": ("mi250x", "mi300x", "mi325x", "mi355x"),
    "intel-gaudi": ("gaudi2", "gaudi3"),
    "aws-trainium": ("trainium1", "trainium2", "trainium3"),
}
FAMILY_OF = {hw: family for family, names in FAMILIES.items() for hw in names}
REL_TOL = 2e-3            # --check: the ratios are written to 4 decimals; last-digit noise of numpy is fine


def residual(case: Case, predicted_step_s: float, span: tuple[float, float] = (1.0, 1.0)) -> B.Residual:
    s = case.scenario
    return B.Residual(run_id=case.id, hardware=s.hardware.name, family=FAMILY_OF.get(s.hardware.name, ""),
                      scale=B.scale_bucket(s.devices, s.devices_per_node),
                      arch=B.arch_of(s.model),
                      ratio=_measured_step_s(case) / predicted_step_s, framework=s.framework,
                      finetune=s.finetune.method, unstated=B.unstated_of(s.derived, case.assumed), span=span)


def span_of(case: Case) -> tuple[float, float]:
    """(fastest, slowest) predicted step over the values of the settings `case`'s record left unstated, relative
    to its step at the assumed values (`estimate.unstated_span`, with the shipped efficiencies: a ratio of two
    steps on one device, which the efficiencies move little)."""
    from trainest.estimate import unstated_span
    unstated = B.unstated_of(case.scenario.derived, case.assumed)
    if not unstated:
        return 1.0, 1.0
    return unstated_span(case.scenario, step_s(case, case.scenario.hardware), unstated)[0]


def step_s(case: Case, hardware) -> float:
    """The predicted step time [s] of `case` on `hardware`: the step model alone (calibrate.predicted_step_times_s,
    the same number as `estimate()`'s step time, without the memory model and the rest of an estimate)."""
    from trainest.calibrate import predicted_step_times_s
    return float(predicted_step_times_s(case, hardware, {}))


def _measured_step_s(case: Case) -> float:
    from trainest.validate import step_time_s_from_metric
    return step_time_s_from_metric(case)


def left_out_records() -> list[dict]:
    """The per-run rows of docs/cross-validation.json (tools/cross_validate.py): every validated run predicted
    without its source."""
    path = ROOT / "docs" / "cross-validation.json"
    if not path.is_file():
        raise SystemExit(f"{path} is missing: run python tools/cross_validate.py first")
    return json.loads(path.read_text(encoding="utf-8"))["runs"]


def record_residual(rec: dict) -> B.Residual:
    return B.Residual(run_id=rec["id"], hardware=rec["hardware"], family=rec["family"], scale=rec["scale"],
                      arch=rec["arch"], ratio=rec["measured_step_s"] / rec["left_out_step_s"],
                      framework=rec["framework"], finetune=rec.get("finetune", "full"),
                      unstated=tuple(rec.get("unstated", ())), span=tuple(rec.get("span", (1.0, 1.0))))


def pools() -> tuple[dict[str, list[B.Residual]], dict[str, str], list[dict]]:
    """({pool: residuals}, {run id: source}, the left-out records) of the validated runs."""
    cases = load_runs(run_set=PUBLIC_SET).cases
    every = [*cases, *load_runs(run_set=FINETUNE_SET).cases]
    unstated = {c.id: B.unstated_of(c.scenario.derived, c.assumed) for c in every}
    spans = {c.id: span_of(c) for c in every}
    # what each run's record left unstated (its scenario's defaults, its importer's assumptions), from the runs files,
    # and how far the step moves over those settings' values
    records = [r | {"unstated": list(unstated.get(r["id"], ())), "span": list(spans.get(r["id"], (1.0, 1.0)))}
               for r in left_out_records()]
    left = [record_residual(r) for r in records if r["hardware_fitted_without_source"]]
    # the prior an uncalibrated device ships with (the median of the other fitted devices of its group), each of
    # those fitted without the run's source (tools/cross_validate.py: LeftOut.no_run_prior), as a user's device
    # without runs takes a median that none of the user's runs set
    prior_step = {r["id"]: r["prior_step_s"] for r in records if "prior_step_s" in r}
    missing = [c.id for c in cases if c.id not in prior_step]
    if missing:
        raise SystemExit(f"docs/cross-validation.json has no prior_step_s for {len(missing)} runs (e.g. {missing[0]}): "
                         f"run python tools/cross_validate.py first")
    prior = [residual(c, prior_step[c.id], spans[c.id]) for c in cases]
    source_of = {c.id: c.source for c in cases} | {r["id"]: r["source"] for r in records}
    return {B.CALIBRATED: left, "prior": prior}, source_of, records


def _covered(r: B.Residual, groups: dict[str, dict[str, list[float]]], calibrated: bool,
             framework_factor: float | None = None) -> tuple[bool, float] | None:
    b = B.lookup(groups, hardware=r.hardware, family=r.family, scale=r.scale, arch=r.arch, calibrated=calibrated,
                 framework_factor=framework_factor, framework=r.framework)
    if b.runs == 0:
        return None
    return b.low_ratio <= r.ratio <= b.high_ratio, b.coverage


def held_out_coverage(residuals: list[B.Residual], calibrated: bool,
                      left_out: Callable[[B.Residual], object]) -> dict[str, float]:
    """Coverage of bands built without the runs that share `left_out(r)` with each run r (its id:
    leave-one-out; its family: leave-one-family-out): {runs, covered, coverage, claimed}."""
    pool = B.CALIBRATED if calibrated else "prior"
    hits, claims = [], []
    for key in sorted({left_out(r) for r in residuals}, key=str):
        groups = {pool: B.build_groups([r for r in residuals if left_out(r) != key])}
        for r in residuals:
            if left_out(r) == key and (got := _covered(r, groups, calibrated)) is not None:
                hits.append(got[0])
                claims.append(got[1])
    return _share(hits, claims)


def _share(hits: list[bool], claims: list[float]) -> dict[str, float]:
    n = len(hits)
    return {"runs": n, "covered": sum(hits), "coverage": round(sum(hits) / n, 4) if n else 0.0,
            "claimed": round(sum(claims) / n, 4) if n else 0.0}


WIDENINGS = tuple(1.0 + 0.05 * k for k in range(81))   # candidate factors, 1 to 5


def smallest_widening(trials: list[tuple[dict, list[B.Residual]]], calibrated: bool) -> tuple[float, float]:
    """(factor, coverage): the smallest factor of WIDENINGS by which the groups of each trial must widen to
    cover COVERAGE of that trial's runs (all trials together), and the coverage it reaches."""
    pool = B.CALIBRATED if calibrated else "prior"
    coverage = 0.0
    for w in WIDENINGS:
        hits = []
        for groups, runs in trials:
            table = {pool: {k: B.widened(v, w) for k, v in groups.items()}}
            hits += [got[0] for r in runs if (got := _covered(r, table, calibrated)) is not None]
        coverage = sum(hits) / len(hits) if hits else 1.0
        if coverage >= B.COVERAGE:
            return w, coverage
    return WIDENINGS[-1], coverage


def either_way(entry: list[float]) -> list[float]:
    """A group's [low, high, coverage, runs] made symmetric in log space about r = 1: [min(low, 1/high),
    max(high, 1/low), ...]. The band of a hardware family without runs: the other families' prior errors say
    how far such a family's may fall, not which way (the TPUs at the generic prior are predicted too slow,
    where the GPUs at their median are mostly predicted too fast); as `band.holding_the_estimate` for a
    group's one-sided errors."""
    low, high, cov, runs = entry
    return [round(min(low, 1.0 / high), 4), round(max(high, 1.0 / low), 4), cov, runs]


def unseen_widening(residuals: list[B.Residual]) -> tuple[float, float]:
    """(factor, coverage): the smallest factor by which the prior pool's broad bands (band.BROAD_LEVELS)
    must widen to cover COVERAGE of the runs of a family left out of them (each family judged by bands
    built from the others), and the coverage it reaches."""
    family = {r.run_id: r.family or r.hardware for r in residuals}
    trials = []
    for f in sorted(set(family.values())):
        rest = B.build_groups([r for r in residuals if family[r.run_id] != f])
        broad = {k: either_way(v) for k, v in rest.items() if k.startswith(f"{B.ANY}|{B.ANY}|")}
        trials.append((broad, [r for r in residuals if family[r.run_id] == f]))
    return smallest_widening(trials, calibrated=False)


def framework_widening(residuals: list[B.Residual]) -> tuple[float, float]:
    """(factor, coverage): the smallest factor by which the left-out pool's bands must widen to cover
    COVERAGE of the runs of a framework left out of them (each framework judged by bands built from the
    others' runs): what a framework no validated run used adds to the error."""
    trials = [(B.build_groups([r for r in residuals if r.framework != f]), [r for r in residuals if r.framework == f])
              for f in sorted({r.framework for r in residuals})]
    return smallest_widening(trials, calibrated=True)


def _fallback_band(prior: list[B.Residual], factors: tuple[float, float]) -> B.Band:
    """The fallback band (band._fallback) built from `prior`, its (low, high) ends widened by `factors`."""
    return B._fallback({"prior": B.build_groups(prior)}, "", "", False, factors)


def _tail_factor(trials: list[tuple[list[B.Residual], list[B.Residual]]], end: int) -> float:
    """The smallest factor of WIDENINGS by which the fallback band's low (`end` 0) or high (1) end must widen so
    that at most (1 − COVERAGE)/2 of the judged runs of all `trials` ([(prior, judged)]) fall beyond it."""
    alpha_half = (1.0 - B.COVERAGE) / 2
    for w in WIDENINGS:
        beyond = 0
        for prior, judged in trials:
            band = _fallback_band(prior, (w, 1.0) if end == 0 else (1.0, w))
            beyond += sum(r.ratio < band.low_ratio if end == 0 else r.ratio > band.high_ratio for r in judged)
        if beyond <= alpha_half * sum(len(judged) for _, judged in trials):
            return w
    return WIDENINGS[-1]


def architecture_widening(records: list[dict], prior: list[B.Residual],
                          source_of: dict[str, str]) -> dict[str, list[float]]:
    """{architecture: [low-end factor, high-end factor, coverage]} for every architecture but dense, and "*" for all
    of them: the smallest factors of WIDENINGS by which the fallback band's low and high ends must widen so that
    at most (1 − COVERAGE)/2 of an architecture's runs, as predicted with their source left out
    (docs/cross-validation.json), fall below it and at most as many above it: the split-conformal interval's two
    tails, each sized on its own (a new architecture's kernels and overheads that the model lacks add time, so its
    runs fall above the band more often than below). The fallback is built from the prior pool without the sources
    that have the architecture, as the one-source-left-out check builds it. Each architecture's factors are sized on
    the other architectures' runs (so it is judged with factors it did not size); "*" pools them all (the shipped
    factors). Every MoE and hybrid run comes from one source, so leaving that source out leaves no run of the
    architecture: how far off an architecture no validated run has is measured on the other new architectures."""
    archs = sorted({r["arch"] for r in records} - {"dense"})
    judged = {a: [record_residual(r) for r in records if r["arch"] == a] for a in archs}
    sources = {a: {r["source"] for r in records if r["arch"] == a} for a in archs}
    base = {a: [r for r in prior if source_of.get(r.run_id) not in sources[a]] for a in archs}
    out: dict[str, list[float]] = {}
    for name in [*archs, "*"]:
        trials = [(base[a], judged[a]) for a in archs if a != name]
        if not trials:
            out[name] = [1.0, 1.0, 0.0]
            continue
        factors = (_tail_factor(trials, 0), _tail_factor(trials, 1))
        hits = [b.low_ratio <= r.ratio <= b.high_ratio for p, rs in trials
                for b in [_fallback_band(p, factors)] for r in rs]
        out[name] = [round(factors[0], 2), round(factors[1], 2), round(sum(hits) / len(hits), 4)]
    return out


GROUPINGS = ("hardware", "framework", "family", "source", "arch", "finetune")
FRAMEWORK_MIN_RUNS = 10     # a framework counts as validated with this many validated runs (one run is no evidence)


def validated_frameworks(records: list[dict]) -> list[str]:
    """The frameworks with at least FRAMEWORK_MIN_RUNS validated runs among `records`."""
    counts: dict[str, int] = {}
    for r in records:
        counts[r["framework"]] = counts.get(r["framework"], 0) + 1
    return sorted(f for f, n in counts.items() if n >= FRAMEWORK_MIN_RUNS)


def _source_groups(records: list[dict], prior: list[B.Residual], source_of: dict[str, str], excluded: set[str],
                   family_factor: float) -> dict:
    """The band groups an estimate would get from the runs of every source but `excluded`: the left-out pool's
    (hardware calibrated without the run's source), the prior pool's and its broad groups widened for an unseen
    family (`family_factor`)."""
    left = B.build_groups([record_residual(r) for r in records
                           if r["source"] not in excluded and r["hardware_fitted_without_source"]])
    prior_groups = B.build_groups([r for r in prior if source_of.get(r.run_id) not in excluded])
    return {B.CALIBRATED: left, "prior": prior_groups,
            B.UNSEEN: {k: B.widened(either_way(v), family_factor) for k, v in prior_groups.items()
                       if k.startswith(f"{B.ANY}|{B.ANY}|")}}


def _source_runs(records: list[dict], source: str, excluded: set[str], framework_factor: float) -> list[tuple]:
    """(record, residual, calibrated, framework factor or None, architecture seen) of each run of `source`, as an
    estimate for it would be judged from the runs of every source but `excluded` (which holds `source`)."""
    others = [r for r in records if r["source"] not in excluded]
    seen_fw, seen_arch = set(validated_frameworks(others)), {r["arch"] for r in others}
    return [(rec, record_residual(rec), rec["hardware_fitted_without_source"],
             None if rec["framework"] in seen_fw else framework_factor, rec["arch"] in seen_arch)
            for rec in records if rec["source"] == source]


def _judged(groups: dict, runs: list[tuple], source_factor: float | dict,
            arch_factor: dict[str, list[float]] | None = None, finetune_factor: float = 1.0,
            unstated_factor: float | tuple[float, float] = 1.0) -> list[tuple[dict, bool, float, bool]]:
    """(record, inside its band, the band's claim, architecture seen) of each run; `source_factor`: one factor, or
    {pool: [factor, ...]} (source_widening) for the runs of each pool; `arch_factor`: {architecture: [low-end
    factor, high-end factor, ...]} (architecture_widening) for a run whose architecture no other source has;
    `finetune_factor`: the widening of an adapter fine-tuning run (finetune_widening); `unstated_factor`: of a run
    whose record left settings of band.UNSTATED_SETTINGS unstated (unstated_widening: low-end, high-end)."""
    sides = _sides(groups, runs, source_factor, arch_factor, finetune_factor, unstated_factor)
    return [(rec, side == 0, b.coverage, seen) for rec, side, b, seen in sides]


def _sides(groups: dict, runs: list[tuple], source_factor: float | dict,
           arch_factor: dict[str, list[float]] | None = None, finetune_factor: float = 1.0,
           unstated_factor: float | tuple[float, float] = 1.0) -> list[tuple[dict, int, B.Band, bool]]:
    """(record, −1 below its band / 0 inside / +1 above, the band, architecture seen) of each run with a band
    (`_judged`'s arguments)."""
    out = []
    for rec, res, calibrated, fw, seen in runs:
        w = source_factor if not isinstance(source_factor, dict) else \
            source_factor[B.CALIBRATED if calibrated else "prior"][0]
        a = tuple((arch_factor or {}).get(res.arch, [1.0, 1.0])[:2])
        b = B.lookup(groups, hardware=res.hardware, family=res.family, scale=res.scale, arch=res.arch,
                     calibrated=calibrated, framework_factor=fw, framework=res.framework, source_factor=w,
                     arch_factor=(a[0], a[1]), finetune_factor=finetune_factor, finetune=res.finetune,
                     unstated_factor=unstated_factor, unstated=res.unstated, span=res.span)
        if b.runs:
            out.append((rec, -1 if res.ratio < b.low_ratio else 1 if res.ratio > b.high_ratio else 0, b, seen))
    return out


def source_widening(records: list[dict], prior: list[B.Residual], source_of: dict[str, str], family_factor: float,
                    framework_factor: float, excluded: frozenset[str] = frozenset()) -> dict[str, list[float]]:
    """{pool: [factor, coverage]}: for the runs on hardware calibrated without their source (pool left-out) and
    those on hardware left uncalibrated (pool prior) apart, the smallest factor of WIDENINGS by which their bands
    must widen so that bands built without a source cover COVERAGE of that source's runs, pooled over the sources
    not `excluded` (each judged from the others not excluded). Runs of an architecture no other source has (every
    MoE and hybrid run comes from one source) do not count: no band of theirs exists to widen (`band._fallback`)."""
    trials = []
    for source in sorted({r["source"] for r in records} - excluded):
        out = excluded | {source}
        trials.append((_source_groups(records, prior, source_of, out, family_factor),
                       [run for run in _source_runs(records, source, out, framework_factor) if run[4]]))
    result: dict[str, list[float]] = {}
    for pool, calibrated in ((B.CALIBRATED, True), ("prior", False)):
        coverage, factor = 1.0, WIDENINGS[-1]
        for w in WIDENINGS:
            hits = [hit for groups, runs in trials
                    for _, hit, _, _ in _judged(groups, [r for r in runs if r[2] == calibrated], w)]
            coverage = sum(hits) / len(hits) if hits else 1.0
            if coverage >= B.COVERAGE:
                factor = w
                break
        result[pool] = [round(factor, 2), round(coverage, 4)]
    return result


def adapter_tuned(rec: dict) -> bool:
    """A run that fine-tunes with adapters (LoRA, QLoRA): what `finetune_widening` is measured on."""
    return rec.get("finetune", "full") != "full"


def finetune_widening(records: list[dict], prior: list[B.Residual], source_of: dict[str, str], family_factor: float,
                      framework_factor: float, excluded: frozenset[str] = frozenset()) -> list[float]:
    """[factor, coverage, runs]: the smallest factor of WIDENINGS by which the band of an adapter fine-tuning run
    must widen, on top of the source widening, so that bands built without a fine-tuning source cover COVERAGE of
    that source's fine-tuning runs, pooled over the fine-tuning sources not `excluded` (each judged from the
    sources not excluded but it, with the source widening measured on those alone, as `source_out_coverage`
    judges). Runs of an architecture no other source has do not count (their band is the fallback). No
    fine-tuning run to judge: factor 1."""
    trials = []
    for source in sorted({r["source"] for r in records if adapter_tuned(r)} - excluded):
        out = excluded | {source}
        runs = [run for run in _source_runs(records, source, out, framework_factor) if run[4] and adapter_tuned(run[0])]
        trials.append((_source_groups(records, prior, source_of, out, family_factor), runs,
                       source_widening(records, prior, source_of, family_factor, framework_factor, frozenset(out))))
    if not any(runs for _, runs, _ in trials):
        return [1.0, 1.0, 0]
    coverage, factor, n = 0.0, WIDENINGS[-1], 0
    for f in WIDENINGS:
        hits = [hit for groups, runs, w in trials for _, hit, _, _ in _judged(groups, runs, w, finetune_factor=f)]
        coverage, n = sum(hits) / len(hits), len(hits)
        if coverage >= B.COVERAGE:
            factor = f
            break
    return [round(factor, 2), round(coverage, 4), n]


def left_unstated(rec: dict) -> bool:
    """A run whose record left settings of band.UNSTATED_SETTINGS to a default: what `unstated_widening` is
    measured on."""
    return bool(rec.get("unstated"))


def unstated_widening(records: list[dict], prior: list[B.Residual], source_of: dict[str, str], family_factor: float,
                      framework_factor: float, excluded: frozenset[str] = frozenset()) -> list[float]:
    """[low-end factor, high-end factor, coverage, runs]: the smallest factors of WIDENINGS by which the band of a run
    whose record left settings that move the step unstated (band.UNSTATED_SETTINGS: its importer assumed them) must
    widen, on top of the source widening (and the fine-tuning widening of an adapter run), so that at most
    (1 − COVERAGE)/2 of such runs fall below the band and at most as many above it, each end sized on its own tail
    (`band.widened_ends`): bands built without a source, judging that source's runs that leave the settings unstated,
    pooled over the sources not `excluded` that have such runs (each judged from the sources not excluded but it,
    every other widening measured on those alone, as `source_out_coverage` judges). Runs of an architecture no other
    source has do not count. None to judge: factors 1."""
    trials = []
    for source in sorted({r["source"] for r in records if left_unstated(r)} - excluded):
        out = frozenset(excluded | {source})
        runs = [run for run in _source_runs(records, source, out, framework_factor) if run[4] and left_unstated(run[0])]
        ft = finetune_widening(records, prior, source_of, family_factor, framework_factor, out)[0] \
            if any(adapter_tuned(run[0]) for run in runs) else 1.0
        trials.append((_source_groups(records, prior, source_of, out, family_factor), runs,
                       source_widening(records, prior, source_of, family_factor, framework_factor, out), ft))
    n = sum(len(runs) for _, runs, _, _ in trials)
    if not n:
        return [1.0, 1.0, 1.0, 0]

    def beyond(factors: tuple[float, float], side: int) -> int:
        return sum(s == side for groups, runs, w, ft in trials
                   for _, s, _, _ in _sides(groups, runs, w, finetune_factor=ft, unstated_factor=factors))

    alpha_half = (1.0 - B.COVERAGE) / 2 * n
    low = next((f for f in WIDENINGS if beyond((f, 1.0), -1) <= alpha_half), WIDENINGS[-1])
    high = next((f for f in WIDENINGS if beyond((1.0, f), 1) <= alpha_half), WIDENINGS[-1])
    inside = sum(s == 0 for groups, runs, w, ft in trials
                 for _, s, _, _ in _sides(groups, runs, w, finetune_factor=ft, unstated_factor=(low, high)))
    return [round(low, 2), round(high, 2), round(inside / n, 4), n]


def source_out_coverage(records: list[dict], prior: list[B.Residual], source_of: dict[str, str],
                        family_factor: float, framework_factor: float,
                        arch_factor: dict[str, list[float]] | None = None) -> dict:
    """The headline check: each source's runs, predicted without it (docs/cross-validation.json), judged by
    the band an estimate for them would get from the other sources alone: the left-out pool's groups where
    other sources calibrate the hardware (else the prior pool's, widened for an unseen family as shipped),
    widened by `framework_factor` where no other source used the run's framework, and by the source widening
    measured on the other sources alone (`source_widening` without this source: nested, so that no run judges
    the band it helped to size), and an adapter fine-tuning run's by the fine-tuning widening measured on the
    other fine-tuning sources alone (`finetune_widening` without this source, nested likewise). Coverage overall,
    over the runs whose architecture another source has, and per value of each of GROUPINGS (with the runs and
    the claim)."""
    rows = []
    for source in sorted({r["source"] for r in records}):
        w = source_widening(records, prior, source_of, family_factor, framework_factor, frozenset({source}))
        groups = _source_groups(records, prior, source_of, {source}, family_factor)
        runs = _source_runs(records, source, {source}, framework_factor)
        ft = finetune_widening(records, prior, source_of, family_factor, framework_factor, frozenset({source}))[0] \
            if any(adapter_tuned(run[0]) for run in runs) else 1.0
        un = tuple(unstated_widening(records, prior, source_of, family_factor, framework_factor,
                                     frozenset({source}))[:2]) if any(left_unstated(run[0]) for run in runs) else 1.0
        rows += _judged(groups, runs, w, arch_factor, ft, un)   # type: ignore[arg-type]
    summary: dict = {"all": _share([h for _, h, _, _ in rows], [c for _, _, c, _ in rows]),
                     "architecture_seen": _share([h for _, h, _, s in rows if s], [c for _, _, c, s in rows if s])}
    for key in GROUPINGS:
        summary[key] = {}
        for value in sorted({str(rec[key]) for rec, _, _, _ in rows}):
            sel = [(h, c) for rec, h, c, _ in rows if str(rec[key]) == value]
            summary[key][value] = _share([h for h, _ in sel], [c for _, c in sel])
    return summary


def vtrain_coverage(doc: dict) -> dict[str, float]:
    """Coverage of the shipped bands on the vTrain single-node rows (outside the pools)."""
    cases = load_runs(run_set=VTRAIN_SET).cases
    hits = []
    for c in cases:
        r = residual(c, step_s(c, c.scenario.hardware))
        b = B.lookup(doc["groups"], hardware=r.hardware, family=doc["families"].get(r.hardware, ""), scale=r.scale,
                     arch=r.arch, calibrated=bool(c.scenario.hardware.efficiency.fitted),
                     source_factor=doc.get("unseen_source_widening", {}).get(
                         B.CALIBRATED if c.scenario.hardware.efficiency.fitted else "prior", 1.0))
        hits.append(b.low_ratio <= r.ratio <= b.high_ratio)
    return {"runs": len(hits), "covered": sum(hits), "coverage": round(sum(hits) / len(hits), 4) if hits else 0.0}


GROUND_TRUTH_SET = "trainest-ground-truth"   # trainest's own measured steps (bench/gpu_ground_truth.py, a lent device)
GROUND_TRUTH_RUNS = "bench/results/*/runs.yaml"
LOW_END_MOVES = tuple(round(1.0 - 0.01 * k, 2) for k in range(91))   # small_scale_widening's low-end moves, 1 to 0.1
HIGH_END_MOVES = tuple(round(1.0 + 0.01 * k, 2) for k in range(901))  # and high-end moves, 1 to 10


def ground_truth_cases() -> list[Case]:
    """trainest's own measured training steps (GROUND_TRUTH_RUNS, set GROUND_TRUTH_SET): kept apart from the bundled
    runs, never fitted, so each is an estimate for a source no fit saw."""
    paths = sorted(ROOT.glob(GROUND_TRUTH_RUNS))
    return load_runs(paths, run_set=GROUND_TRUTH_SET).cases if paths else []


def small_scale_widening(doc: dict, records: list[dict]) -> dict:
    """{below_devices, factor: [low-end, high-end], coverage, coverage_unwidened, runs, measured_on}: the validated
    runs' smallest device count, and the multipliers of each end (the low end's at most 1, the high end's at least 1;
    `band.stretched_ends`, as `band.below_validated_scale` applies them) by which the band of an estimate on fewer
    devices must move out so that at most (1 − COVERAGE)/2 of the measured runs on fewer devices fall below it and at
    most as many above: for each end the smallest move of LOW_END_MOVES, HIGH_END_MOVES that does it. Moving an end
    by a ratio adds a fixed log-margin, so a band already wide for another reason (uncalibrated hardware) is not
    widened in proportion to that width. The runs are trainest's own (`ground_truth_cases`): no validated run is
    on so few devices. Each is judged by the band `band_for` gives it from `doc` (the groups and widenings built so
    far), predicted with the shipped efficiencies. In sample: one source sizes and meets it, as the check says. No such
    run: factors 1."""
    below = min(int(r["devices"]) for r in records)
    rows = []
    for c in ground_truth_cases():
        s = c.scenario
        if s.devices >= below:
            continue
        unstated = B.unstated_of(s.derived, c.assumed)
        b = B.band_for(s.hardware, s.devices, s.devices_per_node, B.arch_of(s.model), s.framework, s.finetune.method,
                       unstated, span_of(c), doc=doc)
        rows.append((_measured_step_s(c) / step_s(c, s.hardware), b))
    out = {"below_devices": below, "factor": [1.0, 1.0], "coverage": 1.0, "runs": len(rows),
           "measured_on": f"set {GROUND_TRUTH_SET} ({GROUND_TRUTH_RUNS})"}
    if not rows:
        return out
    alpha_half = (1.0 - B.COVERAGE) / 2 * len(rows)
    low = next((m for m in LOW_END_MOVES if sum(r < b.low_ratio * m for r, b in rows) <= alpha_half),
               LOW_END_MOVES[-1])
    high = next((m for m in HIGH_END_MOVES if sum(r > b.high_ratio * m for r, b in rows) <= alpha_half),
                HIGH_END_MOVES[-1])
    factor = [low, high]
    inside = 0
    for r, b in rows:
        lo, hi = B.stretched_ends([b.low_ratio, b.high_ratio], *factor)
        inside += lo <= r <= hi
    before = sum(b.low_ratio <= r <= b.high_ratio for r, b in rows)
    return out | {"factor": factor, "coverage": round(inside / len(rows), 4),
                  "coverage_unwidened": round(before / len(rows), 4)}


def document() -> dict:
    """The specs/bands.json document for the current model, runs and efficiencies."""
    residuals, source_of, records = pools()
    calibrated_pool = residuals[B.CALIBRATED]
    doc: dict = {
        "format": B.BANDS_FORMAT,
        "generated_by": COMMAND,
        "method": "split-conformal interval of measured/predicted step time per group (trainest/band.py)",
        "coverage": B.COVERAGE,
        "min_group_runs": B.MIN_GROUP_RUNS,
        "pools": {k: {"about": B.POOLS[k], "runs": len(v)} for k, v in residuals.items()},
        "families": dict(sorted(FAMILY_OF.items())),
        "frameworks_validated": validated_frameworks(records),
        "groups": {pool: B.build_groups(rs) for pool, rs in residuals.items()},
    }
    checks: dict = {B.CALIBRATED: {"leave_one_out": held_out_coverage(calibrated_pool, True, lambda r: r.run_id)},
                    "prior": {"leave_one_out": held_out_coverage(residuals["prior"], False, lambda r: r.run_id)}}
    # an uncalibrated hardware with no run of its family: bands built without its family's runs (the
    # transformer runs: the hybrid Mamba-2 runs are all of one source and family, predicted not fitted, and
    # their own groups carry their errors)
    transformer = [r for r in residuals["prior"] if r.arch != "hybrid"]
    checks["prior"]["leave_one_family_out"] = held_out_coverage(transformer, False, lambda r: r.family or r.hardware)
    factor, reached = unseen_widening(transformer)
    doc["unseen_family_widening"] = round(factor, 2)
    doc["groups"][B.UNSEEN] = {k: [*B.widened(either_way(v), factor)[:2], round(reached, 4), v[3]]
                               for k, v in doc["groups"]["prior"].items() if k.startswith(f"{B.ANY}|{B.ANY}|")}
    checks["prior"]["leave_one_family_out_widened"] = {"factor": round(factor, 2), "coverage": round(reached, 4)}
    fw_factor, fw_reached = framework_widening(calibrated_pool)
    doc["unseen_framework_widening"] = round(fw_factor, 2)
    checks[B.CALIBRATED]["leave_one_framework_out_widened"] = {"factor": round(fw_factor, 2),
                                                               "coverage": round(fw_reached, 4)}
    src = source_widening(records, residuals["prior"], source_of, factor, fw_factor)
    doc["unseen_source_widening"] = {pool: v[0] for pool, v in src.items()}
    for pool, (f, reached) in src.items():
        checks[pool]["leave_one_source_out_widened"] = {"factor": f, "coverage": reached}
    ft = finetune_widening(records, residuals["prior"], source_of, factor, fw_factor)
    doc["finetune_widening"] = ft[0]
    checks["finetune_source_out_widened"] = {"factor": ft[0], "coverage": ft[1], "runs": ft[2]}
    un = unstated_widening(records, residuals["prior"], source_of, factor, fw_factor)
    doc["unstated_widening"] = un[:2]
    checks["unstated_source_out_widened"] = {"factor": un[:2], "coverage": un[2], "runs": un[3]}
    arch = architecture_widening(records, residuals["prior"], source_of)
    doc["unseen_architecture_widening"] = arch["*"][:2]
    checks["prior"]["leave_one_architecture_out_widened"] = {a: {"factor": [lo, hi], "coverage": c}
                                                             for a, (lo, hi, c) in arch.items()}
    doc["small_scale_widening"] = small_scale_widening(doc, records)
    small = doc["small_scale_widening"]
    checks["small_scale_widened"] = {k: small[k] for k in ("coverage", "coverage_unwidened", "runs") if k in small}
    checks["one_source_left_out"] = source_out_coverage(records, residuals["prior"], source_of, factor, fw_factor,
                                                        arch)
    checks[VTRAIN_SET] = vtrain_coverage(doc)
    doc["checks"] = checks
    return doc


def _coverage_table(c: dict) -> list[str]:
    """The one-source-left-out coverage per group (every group; those with 10 runs or more are the target's)."""
    lines = ["| grouping | group | runs | inside the band | the band claims |", "|---|---|---:|---:|---:|"]
    a = c["all"]
    lines.append(f"| all | all | {a['runs']} | {a['coverage']:.1%} | {a['claimed']:.1%} |")
    for key in GROUPINGS:
        for value, v in c[key].items():
            flag = "" if v["runs"] < 10 or v["coverage"] >= 0.70 else " **below 70 %**"
            lines.append(f"| {key} | {value} | {v['runs']} | {v['coverage']:.1%}{flag} | {v['claimed']:.1%} |")
    return lines


def _arch_words(prior_checks: dict) -> str:
    """"moe judged at ×f (sized on the others), ..." from the leave-one-architecture-out check."""
    got = prior_checks.get("leave_one_architecture_out_widened", {})
    return "; ".join(f"{a} judged with {_ends_words(v['factor'])}, which covers {v['coverage']:.0%} of the others' "
                     "runs" for a, v in got.items() if a != "*") or "not measured"


def _ends_words(factor: object) -> str:
    """"×f" of one factor, "×lo below, ×hi above" of a [low-end, high-end] pair."""
    if isinstance(factor, list):
        return f"×{factor[0]:g}" if factor[0] == factor[1] else f"×{factor[0]:g} below, ×{factor[1]:g} above"
    return f"×{factor:g}"


def _small_scale_words(w: dict) -> str:
    """The sentence on the widening below the validated scale (`small_scale_widening`), "" without one."""
    if not w.get("runs"):
        return ""
    lo, hi = w["factor"]
    return (f"An estimate on fewer than {w['below_devices']} devices (no validated run has so few) moves its low "
            f"end ×{lo:g} and its high end ×{hi:g}: each the smallest move that leaves at most 10 % of the "
            f"{w['runs']} measured runs on so few devices ({w['measured_on']}: trainest's own steps on a lent device, "
            f"never fitted) "
            f"beyond it; {w.get('coverage_unwidened', 1.0):.0%} of them were inside the band before, "
            f"{w['coverage']:.0%} after (in sample: one source sizes it). ")


def markdown(doc: dict) -> str:
    """The error-band section of docs/validation.md: the pools, what they cover out of sample, the groups."""
    c = doc.get("checks", {})
    if not c:
        return f"specs/bands.json is missing: run `{COMMAND}`."
    h, p, o = c[B.CALIBRATED], c["prior"], c["one_source_left_out"]
    lines = [
        f"Every estimate carries an error band (`trainest/band.py`): the split-conformal {doc['coverage']:.0%} "
        f"interval of measured/predicted step time of validated runs like it, from `specs/bands.json` "
        f"(written by `{COMMAND}`, which `python tools/fit_defaults.py` runs after a refit). Calibrated hardware "
        f"takes its band from the {doc['pools'][B.CALIBRATED]['runs']} runs predicted with their source left out "
        f"of the fit (docs/cross-validation.json), uncalibrated hardware from all {doc['pools']['prior']['runs']} "
        f"public runs predicted with the prior efficiencies; a group needs {doc['min_group_runs']} runs, else the "
        f"next broader one (hardware and scale, hardware, family and scale, family, scale, all). Every band is "
        f"widened for a source no validated run came from (×{doc['unseen_source_widening'][B.CALIBRATED]:g} on "
        f"calibrated hardware, ×{doc['unseen_source_widening']['prior']:g} on uncalibrated; the runs of one source "
        f"share their error: the factor that makes bands built without a source cover 80 % of its runs, pooled "
        f"over the sources). A framework no "
        f"validated run used widens the band ×{doc['unseen_framework_widening']:g}, a hardware family without runs "
        f"×{doc['unseen_family_widening']:g} (each the factor that makes bands built without a framework's, a "
        f"family's runs cover 80 % of them). An adapter fine-tuning (LoRA, QLoRA) estimate's band widens "
        f"×{doc.get('finetune_widening', 1.0):g}: the groups are mostly pre-training runs, and the factor makes "
        f"bands built without a fine-tuning source cover 80 % of that source's fine-tuning runs, pooled over the "
        f"sources that have them (in the one-source-left-out check below, sized on the other fine-tuning sources "
        f"alone). An estimate that leaves the micro-batch to its default (1; recipes raise it to fill memory, so "
        f"1 is a floor, and at a fixed global batch a larger one shortens the step) widens "
        f"{_ends_words(doc.get('unstated_widening', 1.0))}: each end the factor that leaves at most 10 % of a source's "
        f"runs whose records leave the micro-batch unstated (their importer assumed it) beyond it, with bands built "
        f"without that source, pooled over the sources that have such runs. "
        f"{_small_scale_words(doc.get('small_scale_widening') or {})}The estimate then says plainly that the "
        f"band is wide because little is known.",
        "",
        f"**One source left out: the band holds for {o['all']['coverage']:.1%} of {o['all']['runs']} runs** (each "
        f"source's runs predicted without it and judged by the band built from the other sources alone, its widening "
        f"measured on the other sources alone too, as an estimate for a new cluster, framework or recipe would be); "
        f"{o['architecture_seen']['coverage']:.1%} of the {o['architecture_seen']['runs']} runs whose architecture "
        f"another source has. Every MoE and hybrid run comes from Megatron-Bridge: left out, no validated run of "
        f"their architecture remains, and their band is the fallback (the broadest prior band) widened for an "
        f"architecture no validated run has, by the factor measured on the other new architecture's runs "
        f"({_arch_words(p)}; shipped: {_ends_words(doc.get('unseen_architecture_widening', 1.0))}, sized on both; "
        f"each end sized on its own tail, as new architectures' runs fall above the band more often than below). "
        f"Per group "
        f"(target: 78 % overall, 70 % in every group of 10 runs or more):",
        "",
        *_coverage_table(o),
        "",
        "| what else the band is checked on | runs | inside the band | the band claims |",
        "|---|---:|---:|---:|",
        f"| calibrated runs, each source left out, bands widened ×{h['leave_one_source_out_widened']['factor']:g} "
        f"(pooled; runs of an architecture other sources have) | – | "
        f"{h['leave_one_source_out_widened']['coverage']:.1%} | 80% |",
        f"| uncalibrated runs, each source left out, bands widened ×{p['leave_one_source_out_widened']['factor']:g} "
        f"(pooled; runs of an architecture other sources have) | – | "
        f"{p['leave_one_source_out_widened']['coverage']:.1%} | 80% |",
        f"| left-out runs, each left out of its own band (leave-one-out, unwidened) | {h['leave_one_out']['runs']} | "
        f"{h['leave_one_out']['coverage']:.1%} | {h['leave_one_out']['claimed']:.1%} |",
        f"| left-out runs, each framework left out, bands widened ×{doc['unseen_framework_widening']:g} | "
        f"{h['leave_one_out']['runs']} | {h['leave_one_framework_out_widened']['coverage']:.1%} | 80% |",
        f"| adapter fine-tuning runs, each fine-tuning source left out, bands widened "
        f"×{doc.get('finetune_widening', 1.0):g} on top | {c.get('finetune_source_out_widened', {}).get('runs', 0)} | "
        f"{c.get('finetune_source_out_widened', {}).get('coverage', 0.0):.1%} | 80% |",
        f"| runs whose records leave the micro-batch unstated, each such source left out, bands widened "
        f"{_ends_words(doc.get('unstated_widening', 1.0))} on top | "
        f"{c.get('unstated_source_out_widened', {}).get('runs', 0)} | "
        f"{c.get('unstated_source_out_widened', {}).get('coverage', 0.0):.1%} | 80% |",
        f"| prior efficiencies (uncalibrated hardware), leave-one-out | {p['leave_one_out']['runs']} | "
        f"{p['leave_one_out']['coverage']:.1%} | {p['leave_one_out']['claimed']:.1%} |",
        f"| prior, each hardware family left out (unwidened) | {p['leave_one_family_out']['runs']} | "
        f"{p['leave_one_family_out']['coverage']:.1%} | {p['leave_one_family_out']['claimed']:.1%} |",
        f"| prior, each family left out, broad bands widened ×{doc['unseen_family_widening']:g} | "
        f"{p['leave_one_family_out']['runs']} | {p['leave_one_family_out_widened']['coverage']:.1%} | 80% |",
        f"| vTrain single-node rows (in neither pool) | {c[VTRAIN_SET]['runs']} | "
        f"{c[VTRAIN_SET]['coverage']:.1%} | ~80% |",
        "",
        "| pool | group (hardware · family · scale · architecture) | runs | low | high | expected coverage |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for pool, groups in doc["groups"].items():
        for key, (low, high, cov, runs) in groups.items():
            lines.append(f"| {pool} | {key.replace('|', ' · ')} | {runs} | {low:.3f} | {high:.3f} | {cov:.1%} |")
    return "\n".join(lines)


def text_of(doc: dict) -> str:
    return json.dumps(doc, indent=1, sort_keys=False) + "\n"


def _numbers(node: object) -> Iterable[float]:
    if isinstance(node, dict):
        for v in node.values():
            yield from _numbers(v)
    elif isinstance(node, list):
        for v in node:
            yield from _numbers(v)
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        yield float(node)


def same(a: dict, b: dict) -> bool:
    """Equal structure and numbers within REL_TOL (ratios are rounded to 4 decimals)."""
    def shape(node: object) -> object:
        if isinstance(node, dict):
            return {k: shape(v) for k, v in node.items()}
        if isinstance(node, list):
            return [shape(v) for v in node]
        return "#" if isinstance(node, (int, float)) and not isinstance(node, bool) else node

    if shape(a) != shape(b):
        return False
    pairs = zip(_numbers(a), _numbers(b), strict=True)
    return all(abs(x - y) <= REL_TOL * max(abs(x), abs(y), 1e-12) for x, y in pairs)


def stale_paths(shipped: object, fresh: object, path: str = "") -> list[str]:
    """Where `fresh` differs from `shipped` (numbers beyond REL_TOL, anything else exactly): what
    --check prints when the shipped file is stale."""
    if isinstance(shipped, dict) and isinstance(fresh, dict):
        out = [f"{path}.{k}: {'missing' if k not in fresh else 'new'}" for k in sorted(set(shipped) ^ set(fresh))]
        for k in [k for k in shipped if k in fresh]:
            out += stale_paths(shipped[k], fresh[k], f"{path}.{k}")
        return out
    if isinstance(shipped, list) and isinstance(fresh, list):
        if len(shipped) != len(fresh):
            return [f"{path}: {len(shipped)} items -> {len(fresh)}"]
        pairs = enumerate(zip(shipped, fresh, strict=True))
        return [d for i, (a, b) in pairs for d in stale_paths(a, b, f"{path}[{i}]")]
    numbers = (int, float)
    if isinstance(shipped, numbers) and isinstance(fresh, numbers) and not isinstance(shipped, bool) \
            and not isinstance(fresh, bool):
        close = abs(shipped - fresh) <= REL_TOL * max(abs(shipped), abs(fresh), 1e-12)
        return [] if close else [f"{path}: {shipped!r} -> {fresh!r}"]
    return [] if shipped == fresh else [f"{path}: {shipped!r} -> {fresh!r}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with specs/bands.json; write nothing")
    args = ap.parse_args(argv)
    doc = document()
    target = specs_dir() / B.BANDS_FILE
    o = doc["checks"]["one_source_left_out"]["all"]
    print(f"one source left out: band coverage {o['coverage']:.1%} of {o['runs']} runs (claimed {o['claimed']:.1%})",
          file=sys.stderr)
    for pool in (B.CALIBRATED, "prior"):
        loo = doc["checks"][pool]["leave_one_out"]
        print(f"{pool:8s}: {doc['pools'][pool]['runs']} runs, {len(doc['groups'][pool])} groups; leave-one-out "
              f"coverage {loo['coverage']:.1%} (claimed {loo['claimed']:.1%}, {loo['runs']} runs)", file=sys.stderr)
    print(f"unseen family: prior broad bands widened x{doc['unseen_family_widening']}; unseen framework: "
          f"x{doc['unseen_framework_widening']}; adapter fine-tuning: x{doc['finetune_widening']}; micro-batch "
        f"unstated: x{doc['unstated_widening']}; unseen architecture: {doc['unseen_architecture_widening']}",
        file=sys.stderr)
    v = doc["checks"][VTRAIN_SET]
    print(f"{VTRAIN_SET}: {v['coverage']:.1%} of {v['runs']} rows inside their band", file=sys.stderr)
    sm = doc["small_scale_widening"]
    print(f"fewer than {sm['below_devices']} devices: low end x{sm['factor'][0]}, high end x{sm['factor'][1]}, "
          f"holding {sm['coverage']:.1%} of "
          f"{sm['runs']} measured runs ({sm.get('coverage_unwidened', 1.0):.1%} before)", file=sys.stderr)
    if args.check:
        current = json.loads(target.read_text(encoding="utf-8")) if target.exists() else {}
        if not same(current, doc):
            diffs = stale_paths(current, doc) if current else ["the file is missing"]
            print(f"{target} is stale ({len(diffs)} differences, e.g. {'; '.join(diffs[:3])}): the error bands no "
                  f"longer match the model and the runs; run {COMMAND} and commit specs/bands.json", file=sys.stderr)
            return 1
        print(f"{target}: up to date", file=sys.stderr)
        return 0
    target.write_text(text_of(doc), encoding="utf-8")
    print(f"wrote {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
