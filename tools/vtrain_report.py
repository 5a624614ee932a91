#!/usr/bin/env python3
"""Error of trainest on a set of measured runs by micro-batch and by tp, and how well it picks layouts.

    python tools/vtrain_report.py                         # the vTrain single-node rows (set vtrain-single-node)
    python tools/vtrain_report.py --set public            # any run set of specs/runs (a file's `set:`)
    python tools/vtrain_report.py --hardware a100-40gb-sxm   # predict every run on another catalog entry
    python tools/vtrain_report.py --markdown              # the tables of docs/validation.md
    python tools/vtrain_report.py --layers                # also: measured time per layer and outside the layers

Step-time error = (predicted − measured) / measured, in percent: MAPE is the mean of its absolute
value, "mean error" its signed mean (negative: trainest predicts the step too fast).

Plan pick. A *job* is what a user asks `trainest plan` for: the same model (shape without the
vocabulary, which Megatron pads to a multiple of 128·tp, so it follows the layout), sequence length,
hardware, precision, recompute, device count and global batch. The set measures each job under
several layouts (tp, pp, dp, cp, vpp, zero, micro-batch). For each job: trainest's pick is the layout
with the smallest PREDICTED step among the measured ones; it is right when that is the layout with the
smallest MEASURED step; its cost is measured(pick) / measured(best) − 1. Jobs measured under a single
layout are left out (nothing to choose).

Prints the tables; `--markdown` prints them as markdown (docs/validation.md, written by
tools/fit_defaults.py through `markdown_report`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trainest.catalog import Hardware, load_hardware  # noqa: E402
from trainest.validate import Case, RunResult, compare, load_runs  # noqa: E402

DEFAULT_SET = "vtrain-single-node"


@dataclass(frozen=True)
class Group:
    """Step-time errors of the runs sharing one value of a layout key."""

    value: int
    runs: int
    mape_pct: float
    mean_error_pct: float


@dataclass(frozen=True)
class Pick:
    """One job: the measured layouts, the measured best one and trainest's pick among them."""

    job: str                  # e.g. "GPT 24L h1024, 8 devices, global batch 32"
    layouts: int
    best: RunResult           # smallest measured step
    pick: RunResult           # smallest predicted step
    right: bool
    cost_pct: float           # measured(pick) / measured(best) − 1, in percent


def error_pct(r: RunResult) -> float:
    """Step-time error of a run [%]: (predicted − measured) / measured step time."""
    return (r.predicted_step_s - r.measured_step_s) / r.measured_step_s * 100.0


def by_key(results: list[RunResult], key: str) -> list[Group]:
    """Errors grouped by a RunResult field (`micro_batch`, `tp`, `pp`, `dp`), sorted by its value."""
    groups: dict[int, list[float]] = {}
    for r in results:
        groups.setdefault(getattr(r, key), []).append(error_pct(r))
    return [Group(v, len(e), statistics.fmean(abs(x) for x in e), statistics.fmean(e))
            for v, e in sorted(groups.items())]


def job_key(case: Case) -> tuple:
    """What stays fixed when only the layout changes (the vocabulary is padded per tp: left out)."""
    s, m = case.scenario, case.scenario.model
    return (m.name, m.layers, m.hidden, m.ffn_hidden, m.heads, m.kv_heads, m.mlp, s.seq_len, s.hardware.name,
            s.precision, s.recompute, s.devices, s.global_batch)


def plan_picks(cases: list[Case], results: list[RunResult]) -> list[Pick]:
    """Per job with at least two measured layouts: trainest's pick against the measured best."""
    jobs: dict[tuple, list[RunResult]] = {}
    for case, r in zip(cases, results):
        jobs.setdefault(job_key(case), []).append(r)
    picks = []
    for key, rs in sorted(jobs.items(), key=lambda kv: (kv[0][0], kv[0][11], kv[0][12])):
        if len(rs) < 2:
            continue
        best = min(rs, key=lambda r: r.measured_step_s)
        pick = min(rs, key=lambda r: r.predicted_step_s)
        picks.append(Pick(job=f"{key[0].split(' (')[0]}, {key[11]} devices, global batch {key[12]}", layouts=len(rs),
                          best=best, pick=pick, right=pick.id == best.id,
                          cost_pct=(pick.measured_step_s / best.measured_step_s - 1.0) * 100.0))
    return picks


def predict(run_set: str, hardware: Hardware | None = None,
            hardware_by_name: dict[str, Hardware] | None = None) -> tuple[list[Case], list[RunResult]]:
    """The set's cases and their comparisons (on `hardware`, or per name from `hardware_by_name`)."""
    cases = list(load_runs(run_set=run_set).cases)
    by_name = hardware_by_name or {}
    results = [compare(c, hardware or by_name.get(c.scenario.hardware.name)) for c in cases]
    return cases, results


def layout(r: RunResult) -> str:
    return f"{r.tp}/{r.pp}/{r.dp}, mb {r.micro_batch}"


def _groups_md(groups: list[Group], title: str) -> str:
    lines = [f"| {title} | runs | MAPE % | mean error % |", "|---:|---:|---:|---:|"]
    lines += [f"| {g.value} | {g.runs} | {g.mape_pct:.1f} | {g.mean_error_pct:+.1f} |" for g in groups]
    return "\n".join(lines)


def _layout_counts(runs: list[RunResult]) -> str:
    mbs = sorted({r.micro_batch for r in runs})
    by_mb = "/".join(str(sum(r.micro_batch == mb for r in runs)) for mb in mbs)
    return (f"micro-batch {'/'.join(map(str, mbs))} in {by_mb} jobs, pp > 1 in {sum(r.pp > 1 for r in runs)}, "
            f"tp > 1 in {sum(r.tp > 1 for r in runs)}")


def pick_summary(picks: list[Pick]) -> str:
    right = sum(p.right for p in picks)
    return (f"trainest's fastest layout is the measured fastest in **{right} of {len(picks)} jobs**; its pick costs "
            f"**{statistics.fmean(p.cost_pct for p in picks):.1f} %** on average over the measured best "
            f"(median {statistics.median(p.cost_pct for p in picks):.1f} %, worst "
            f"{max(p.cost_pct for p in picks):.1f} %). The measured best layouts: "
            f"{_layout_counts([p.best for p in picks])}; trainest's picks: {_layout_counts([p.pick for p in picks])}.")


def overall_line(results: list[RunResult]) -> str:
    errors = [error_pct(r) for r in results]
    bound = [(r.predicted_no_overlap_step_s - r.measured_step_s) / r.measured_step_s * 100.0 for r in results
             if r.predicted_no_overlap_step_s is not None]
    line = (f"**{len(results)} runs; step-time MAPE {statistics.fmean(abs(e) for e in errors):.1f} %, "
            f"mean error {statistics.fmean(errors):+.1f} %, median |error| "
            f"{statistics.median(abs(e) for e in errors):.1f} %.**")
    if bound:
        line += (f" With every collective exposed (the no-overlap bound, `step.no_overlap_time_s`): MAPE "
                 f"{statistics.fmean(abs(e) for e in bound):.1f} %, mean error {statistics.fmean(bound):+.1f} %.")
    return line


def cross_md(results: list[RunResult], row: str, col: str) -> str:
    """Mean step-time error [%] (and run count) for each pair of values of two RunResult fields."""
    cells: dict[tuple[int, int], list[float]] = {}
    for r in results:
        cells.setdefault((getattr(r, row), getattr(r, col)), []).append(error_pct(r))
    rows, cols = sorted({k[0] for k in cells}), sorted({k[1] for k in cells})
    lines = [f"| {row.replace('_', '-')} \\ {col} | " + " | ".join(f"{col} {c}" for c in cols) + " |",
             "|---:|" + "---:|" * len(cols)]
    for v in rows:
        lines.append(f"| {v} | " + " | ".join(
            f"{statistics.fmean(cells[(v, c)]):+.1f} (n={len(cells[(v, c)])}, {min(cells[(v, c)]):+.0f}…"
            f"{max(cells[(v, c)]):+.0f})" if (v, c) in cells else "–" for c in cols) + " |")
    return "\n".join(lines)


def markdown_report(cases: list[Case], results: list[RunResult]) -> str:
    """The tables: overall, by micro-batch, by tp, by pp, the plan-pick summary and the per-job table."""
    picks = plan_picks(cases, results)
    job_lines = ["| job | layouts | measured best (tp/pp/dp, mb) | step s | trainest's pick | its measured step s | "
                 "right | pick cost % |", "|---|---:|---|---:|---|---:|---|---:|"]
    for p in picks:
        job_lines.append(f"| {p.job} | {p.layouts} | {layout(p.best)} | {p.best.measured_step_s:.4g} | "
                         f"{layout(p.pick)} | {p.pick.measured_step_s:.4g} | {'yes' if p.right else 'no'} | "
                         f"{p.cost_pct:.1f} |")
    return "\n\n".join([
        overall_line(results),
        "By micro-batch:\n\n" + _groups_md(by_key(results, "micro_batch"), "micro-batch"),
        "By tp:\n\n" + _groups_md(by_key(results, "tp"), "tp"),
        "By pp:\n\n" + _groups_md(by_key(results, "pp"), "pp"),
        "Mean error % by micro-batch and tp (runs, smallest…largest error):\n\n" + cross_md(results, "micro_batch", "tp"),
        "Plan pick: " + pick_summary(picks),
        "\n".join(job_lines),
    ])


def text_report(cases: list[Case], results: list[RunResult]) -> str:
    picks = plan_picks(cases, results)
    out = [overall_line(results).replace("**", "")]
    for key, title in (("micro_batch", "micro-batch"), ("tp", "tp"), ("pp", "pp")):
        out.append(f"{title:>11s}  runs  MAPE %  mean error %")
        out += [f"{g.value:>11d}  {g.runs:4d}  {g.mape_pct:6.1f}  {g.mean_error_pct:+12.1f}" for g in by_key(results, key)]
    out.append("plan pick: " + pick_summary(picks).replace("**", ""))
    return "\n".join(out)


class LayerCell(NamedTuple):
    """Measured and predicted time of one layer and micro-batch and of what is outside the layers per
    micro-batch, for one (tp, micro-batch) cell (`layer_split`)."""

    tp: int
    micro_batch: int
    pairs: int                  # pairs of rows that differ only in their layer count
    measured_layer_ms: float
    predicted_layer_ms: float
    measured_head_ms: float     # per micro-batch outside the layers (embedding, logits, loss); nan: one m only
    predicted_head_ms: float


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y on x (nan with fewer than two distinct x)."""
    xs = [x for x, _ in points]
    if len(set(xs)) < 2:
        return float("nan")
    mx, my = statistics.fmean(xs), statistics.fmean(y for _, y in points)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)


def layer_split(rows: list[tuple[tuple, int, int, float, float]]) -> list[LayerCell]:
    """Per (tp, micro-batch) of `rows` ((tp, micro-batch, rest of the layout and job but the layers), layers,
    micro-batches m, measured step s, predicted step s), pp = 1 only: two rows that differ only in their layer
    count L differ by (L₂ − L₁)·m layer passes, so (t₂ − t₁) / ((L₂ − L₁)·m) is the time of one layer and
    micro-batch, with nothing outside the layers in it; the rest, t − L·m·layer, grows with m by what lies
    outside the layers per micro-batch (the least-squares slope over the rows' m at fixed micro-batch). No
    model enters the measured columns."""
    by_key: dict[tuple, list[tuple[int, int, float, float]]] = {}
    for key, layers, m, measured, predicted in rows:
        by_key.setdefault(key, []).append((layers, m, measured, predicted))
    layer: dict[tuple[int, int], list[tuple[float, float]]] = {}
    rest: dict[tuple[int, int], list[tuple[float, float, float]]] = {}
    for key, rs in by_key.items():
        rs.sort()
        for (l1, m, t1, p1), (l2, _, t2, p2) in zip(rs, rs[1:], strict=False):
            per = ((t2 - t1) / ((l2 - l1) * m), (p2 - p1) / ((l2 - l1) * m))
            layer.setdefault(key[:2], []).append(per)
            rest.setdefault(key[:2], []).append((m, t1 - l1 * m * per[0], p1 - l1 * m * per[1]))
    return [LayerCell(tp, mb, len(v), 1e3 * statistics.fmean(x for x, _ in v), 1e3 * statistics.fmean(y for _, y in v),
                      1e3 * _slope([(m, a) for m, a, _ in rest[(tp, mb)]]),
                      1e3 * _slope([(m, b) for m, _, b in rest[(tp, mb)]]))
            for (tp, mb), v in sorted(layer.items())]


def layer_rows(cases: list[Case], results: list[RunResult]) -> list[tuple[tuple, int, int, float, float]]:
    """`layer_split`'s rows of the pp = 1 runs: the key is (tp, micro-batch, the job and layout but the layers)."""
    out = []
    for c, r in zip(cases, results, strict=True):
        if r.pp != 1:
            continue
        s, m = c.scenario, c.scenario.model
        key = (r.tp, r.micro_batch, r.dp, r.pp, m.hidden, m.ffn_hidden, m.heads, s.seq_len, s.devices,
               s.global_batch, s.hardware.name, s.precision, s.recompute)
        out.append((key, m.layers, s.global_batch // (r.dp * r.micro_batch), r.measured_step_s, r.predicted_step_s))
    return out


def layer_text(cells: list[LayerCell]) -> str:
    lines = ["one layer and micro-batch, and outside the layers per micro-batch [ms], measured | predicted "
             "(pp = 1, from rows that differ only in their layer count)",
             "  tp  mb  pairs   layer meas | pred    outside meas | pred"]
    lines += [f"{c.tp:4d} {c.micro_batch:3d} {c.pairs:6d} {c.measured_layer_ms:12.2f} | {c.predicted_layer_ms:5.2f} "
              f"{c.measured_head_ms:14.2f} | {c.predicted_head_ms:5.2f}" for c in cells]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", dest="run_set", default=DEFAULT_SET, help=f"run set (default {DEFAULT_SET})")
    ap.add_argument("--hardware", default=None, help="predict every run on this catalog entry instead")
    ap.add_argument("--markdown", action="store_true", help="print markdown tables")
    ap.add_argument("--layers", action="store_true", help="print the measured time of one layer and micro-batch and "
                    "of what is outside the layers, from rows that differ only in their layer count (`layer_split`)")
    args = ap.parse_args(argv)
    cases, results = predict(args.run_set, load_hardware(args.hardware) if args.hardware else None)
    if not cases:
        print(f"error: no expressible run in set {args.run_set!r}", file=sys.stderr)
        return 1
    print(markdown_report(cases, results) if args.markdown else text_report(cases, results))
    if args.layers:
        print(layer_text(layer_split(layer_rows(cases, results))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
