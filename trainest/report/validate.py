"""`trainest validate`: its JSON document, its markdown (docs/validation.md) and its tables."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import Any

from trainest import SCHEMA_VERSION
from trainest.frameworks import moe_unseen_frameworks, unseen_frameworks
from trainest.report import console, print_table
from trainest.units import GiB, plural
from trainest.validate import (
    METRICS,
    MISSPECIFIED_MEMORY_FACTOR,
    PEAK_MEMORY_COMPARED,
    NotExpressible,
    RunResult,
    Summary,
    ValidationReport,
)
from trainest.validate_memory import (
    JOINT,
    LIGHTEST_SETTING,
    Conflict,
    MemoryResult,
    by_kind,
    setting_word,
    unstated_of,
)

# the signed mean's column: the step-time error, one sign whatever each run's metric (validate.step_error_pct)
STEP_ERROR_TITLE = "mean step error % (− too fast)"


def summary_dict(s: Summary) -> dict[str, Any]:
    return {"runs": s.runs, "mape_pct": s.mape_pct, "median_ape_pct": s.median_ape_pct, "max_ape_pct": s.max_ape_pct,
            "mean_error_pct": s.mean_error_pct, "mean_step_error_pct": s.mean_step_error_pct,
            "not_expressible": s.not_expressible}


def report_dict(report: ValidationReport) -> dict[str, Any]:
    """The `--json` document, built from the result dataclasses."""

    return {"schema_version": SCHEMA_VERSION, "summary": summary_dict(report.summary),
            "by_source": {k: summary_dict(v) for k, v in report.by_source.items()},
            "by_hardware": {k: summary_dict(v) for k, v in report.by_hardware.items()},
            "by_set": {k: summary_dict(v) for k, v in report.by_set.items()},
            "by_architecture": {k: summary_dict(v) for k, v in report.by_architecture.items()},
            "summary_without_misspecified": summary_dict(report.without_misspecified),
            "misspecified": [r.id for r in report.runs if r.misspecified],
            "runs": [asdict(r) for r in report.runs],
            "duplicates_skipped": list(report.duplicates),
            "warnings": list(report.warnings),
            "unseen_frameworks": unseen_frameworks(r.framework for r in report.runs),
            "moe_unseen_frameworks": moe_unseen_frameworks((r.framework, r.architecture == "moe") for r in report.runs),
            "uncalibrated_hardware": uncalibrated_hardware(report.runs),
            "not_expressible": [{"id": n.id, "source": n.source, "hardware": n.hardware, "reason": n.reason,
                                 "run_set": n.run_set} for n in report.not_expressible],
            "memory": [{**asdict(m), "error_pct": m.error_pct} for m in report.memory],
            "memory_by_kind": {k: asdict(v) for k, v in by_kind(report.memory).items()}}


def uncalibrated_hardware(runs: Iterable[RunResult]) -> dict[str, int]:
    """Runs per hardware whose efficiencies are priors, not fitted on measured runs, sorted."""
    counts: dict[str, int] = {}
    for r in runs:
        if not r.hardware_calibrated:
            counts[r.hardware] = counts.get(r.hardware, 0) + 1
    return dict(sorted(counts.items()))


def fmt_value(value: float, unit: str) -> str:
    """A measured or predicted value for a table: 4 significant digits, trailing zeros kept so that the two
    columns read alike (52,000 beside 53,750, not 5.2e+04 beside 5.375e+04; 0.1350 beside 0.08760), whole
    thousands to millions grouped; MFU as a percentage."""
    if unit == "fraction":
        return f"{value * 100:.1f} %"
    if not math.isfinite(value) or value == 0:
        return f"{value:g}"
    if 1e3 <= abs(value) < 1e7:
        return f"{float(f'{value:.4g}'):,.0f}"
    return f"{value:#.4g}"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}"


def _signed_pct(x: float | None) -> str:
    return "–" if x is None else f"{x:+.1f}"


def metric_label(r: RunResult) -> str:
    label = METRICS[r.metric][0]
    details = [x for x in (r.flops_formula, "bf16 peak" if r.mfu_peak == "bf16" else None) if x]
    return f"{label} ({', '.join(details)})" if details else label


def summary_markdown(groups: dict[str, Summary], title: str) -> str:
    lines = [f"| {title} | runs | MAPE % | median APE % | max APE % | {STEP_ERROR_TITLE} | not expressible |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for k, s in groups.items():
        lines.append(f"| {k} | {s.runs} | {_pct(s.mape_pct)} | {_pct(s.median_ape_pct)} | {_pct(s.max_ape_pct)} | "
                     f"{_signed_pct(s.mean_step_error_pct)} | {s.not_expressible} |")
    return "\n".join(lines)


def runs_markdown(runs: Iterable[RunResult], extra: Callable[[RunResult], str] | None = None,
                  extra_title: str = "") -> str:
    head = ("| id | hardware | metric | measured | predicted | error % | layout (tp/pp/dp/cp, zero) | recompute "
            "| precision |")
    sep = "|---|---|---|---:|---:|---:|---|---|---|"
    if extra:
        head += f" {extra_title} |"
        sep += "---|"
    lines = [head, sep]
    for r in runs:
        row = (f"| {r.id} | {r.hardware} | {metric_label(r)} | {fmt_value(r.measured, r.unit)} | "
               f"{fmt_value(r.predicted, r.unit)} | {r.error_pct:+.1f} | {r.tp}/{r.pp}/{r.dp}/{r.cp}, z{r.zero} | "
               f"{r.recompute} | {r.precision} |")
        if extra:
            row += f" {extra(r)} |"
        lines.append(row)
    return "\n".join(lines)


def reasons_markdown(skipped: Iterable[NotExpressible]) -> str:
    """Not-expressible counts by reason (the reason's first clause, so similar reasons group)."""
    counts: dict[str, int] = {}
    for n in skipped:
        head = n.reason.split(":")[0] if n.reason.startswith(("does not validate", "cannot be estimated")) \
            else n.reason.split(";")[0].split(" (")[0]
        counts[head] = counts.get(head, 0) + 1
    lines = ["| reason (first clause) | runs |", "|---|---:|"]
    for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"| {k.replace('|', '/')} | {v} |")
    return "\n".join(lines)


def markdown(report: ValidationReport) -> str:
    """The markdown tables of `trainest validate --markdown` (used in docs/validation.md)."""
    s = report.summary
    return "\n\n".join([
        f"**{plural(s.runs, 'run')} compared; MAPE {_pct(s.mape_pct)} %, median {_pct(s.median_ape_pct)} %, "
        f"max {_pct(s.max_ape_pct)} %; {s.not_expressible} not expressible.**",
        "### By set\n\n" + summary_markdown(report.by_set, "set"),
        "### By architecture\n\n" + summary_markdown(report.by_architecture, "architecture"),
        "### By source\n\n" + summary_markdown(report.by_source, "source"),
        "### By hardware\n\n" + summary_markdown(report.by_hardware, "hardware"),
        "### Per run\n\n" + runs_markdown(report.runs),
        "### Peak memory, by memory kind\n\n" + memory_kind_markdown(report.memory),
        "### Not expressible, by reason\n\n" + reasons_markdown(report.not_expressible),
    ]) + "\n"


MEMORY_KIND_COLUMNS = ("memory kind", "compared with", "runs", "MAPE %", "mean error %", "max |error| %",
                       "ran, called no-fit", "records contradicted", "MAPE % of the others")


def memory_kind_rows(rows: Iterable[MemoryResult]) -> list[tuple[str, ...]]:
    """One row per memory kind: the predicted total it is compared with, runs, MAPE, signed mean, largest error,
    the runs that ran that trainest calls "does not fit", the runs whose measured peak contradicts their record's
    settings (below the state they hold, §7.13) and the MAPE of the others."""
    rows = list(rows)
    return [(kind, next(r.compared_with for r in rows if r.kind == kind), str(v.runs), f"{v.mape_pct:.1f}",
             f"{v.mean_error_pct:+.1f}", f"{v.max_ape_pct:.1f}", str(v.not_fitting), str(v.contradicted),
             "–" if v.consistent_mape_pct is None else f"{v.consistent_mape_pct:.1f}")
            for kind, v in by_kind(rows).items()]


def memory_kind_markdown(rows: Iterable[MemoryResult]) -> str:
    """The per-kind memory table (docs/validation.md's memory section); the runs one by one follow."""
    rows = list(rows)
    body = memory_kind_rows(rows)
    if not body:
        return "No run gives a measured peak memory."
    lines = ["| " + " | ".join(MEMORY_KIND_COLUMNS) + " |", "|---|---|" + "---:|" * (len(MEMORY_KIND_COLUMNS) - 2)]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    lines += ["", "| run | memory kind | measured GiB | predicted GiB | error % | fits |",
              "|---|---|---:|---:|---:|---|"]
    lines += [f"| {r.id} | {r.kind} | {r.measured_bytes / GiB:.2f} | {r.predicted_bytes / GiB:.2f} | "
              f"{r.error_pct:+.1f} | {'yes' if r.fits else 'NO'} |" for r in rows]
    return "\n".join(lines)


def summary_table(title: str, groups: dict[str, Summary], key_title: str):
    """One summary per group (source, hardware, ...): runs, MAPE, median, max, mean error."""
    from rich.table import Table
    pct = _pct

    t = Table(title=title, title_justify="left")
    for col in (key_title, "runs", "MAPE %", "median %", "max %", STEP_ERROR_TITLE, "not expressible"):
        t.add_column(col, justify="left" if col == key_title else "right")
    for k, s in groups.items():
        t.add_row(k, str(s.runs), pct(s.mape_pct), pct(s.median_ape_pct), pct(s.max_ape_pct),
                  _signed_pct(s.mean_step_error_pct), str(s.not_expressible))
    return t


# derived values that do not change a step's prediction (the whole run's tokens, price, power, CO2)
NOT_STEP_VALUES = ("tokens", "price_per_hour", "pue", "grid_gco2_per_kwh")


def run_notes(result: ValidationReport) -> list[str]:
    """Notes under the per-run table: the profile the predictions used, the runs trainest's memory model says
    do not fit, and the values runs left out (listed per run for a few runs, counted for many)."""
    out = []
    if result.profile is not None:
        out.append(f"Predicted with the hardware profile {result.profile} (its efficiencies, not the catalog "
                   f"entry's) for the runs on its hardware.")
    nofit = [r for r in result.runs if not r.fits]
    if nofit:
        worst = max(nofit, key=lambda r: r.predicted_memory_bytes or 0.0)
        needs = "" if worst.predicted_memory_bytes is None else \
            f" ({worst.id} needs {worst.predicted_memory_bytes / GiB:,.0f} GiB per device)"
        out.append(f"fits NO: {plural(len(nofit), 'run')} {'does' if len(nofit) == 1 else 'do'} not fit in trainest's "
                   f"memory model{needs}: check its layout, zero and recompute; far over (more than "
                   f"{MISSPECIFIED_MEMORY_FACTOR:g}x the device's memory) it is mis-specified, its error says little, "
                   f"and `trainest calibrate` leaves it out of its fit.")
        out += [f"  {r.id} does not fit; "
                + nofit_reason(r.assumed, unstated_of(r.derived, r.precision), r.deciding, r.unmodelled,
                               r.conflicting, r.fits_otherwise) for r in nofit]
    unseen = unseen_frameworks(r.framework for r in result.runs)
    if unseen:
        names = ", ".join(f"{k} ({plural(v, 'run')})" for k, v in unseen.items())
        s, its = ("", "its") if len(unseen) == 1 else ("s", "their")
        out.append(f"No bundled measured run uses the framework{s} {names}: {its} host dispatch and defaults "
                   f"(trainest/frameworks.py) are not validated, so {its} runs' errors include that (JSON: "
                   f"runs[].framework).")
    moe_unseen = moe_unseen_frameworks((r.framework, r.architecture == "moe") for r in result.runs)
    if moe_unseen:
        names = ", ".join(f"{k} ({plural(v, 'run')})" for k, v in moe_unseen.items())
        out.append(f"No bundled measured mixture-of-experts run uses {names}: its MoE layer (expert loop, "
                   f"all-to-alls) is predicted, not validated (the MoE runs are Megatron-Core/NeMo's; JSON: "
                   f"moe_unseen_frameworks).")
    priors = uncalibrated_hardware(result.runs)
    if priors:
        names = ", ".join(f"{k} ({plural(v, 'run')})" for k, v in priors.items())
        out.append(f"Efficiencies not fitted on measured runs of this hardware (priors: expect larger errors; "
                   f"`trainest calibrate` fits them to your runs): {names} (JSON: uncalibrated_hardware).")
    out += memory_notes(result.memory)
    defaults = [(r.id, [k for k in r.derived if k not in NOT_STEP_VALUES]) for r in result.runs]
    defaults = [(i, ks) for i, ks in defaults if ks]
    if defaults and len(defaults) <= MAX_REASONS_SHOWN:
        out.append("Values the runs file does not give, taken from the defaults (JSON: runs[].derived):")
        out += [f"  {i}: {', '.join(ks)}" for i, ks in defaults]
    elif defaults:
        out.append(f"{plural(len(defaults), 'run')} take defaults for values the runs file does not give "
                   f"(JSON: runs[].derived).")
    return out


def memory_notes(rows: Iterable[MemoryResult]) -> list[str]:
    """The runs that give a measured peak memory, per memory kind: measured vs predicted per device, one line per
    run for a few runs, the mean and largest error for many; then the runs that ran and are called "does not fit",
    each with the memory settings its record left out (the defaults taken may be what does not fit)."""
    rows = list(rows)
    out: list[str] = []
    for kind in sorted({r.kind for r in rows}):
        out += memory_kind_notes(kind, [(r.id, r.measured_bytes, r.predicted_bytes) for r in rows if r.kind == kind])
    for r in rows:
        if not r.fits:
            out.append(f"  {r.id} ran with a measured peak of {r.measured_bytes / GiB:.4g} GiB, and trainest says it "
                       f"does not fit: "
                       f"{nofit_reason(r.assumed, r.unstated, r.deciding, (), r.conflicting, r.fits_otherwise)}")
        if r.contradicting:
            out.append(f"  {r.id}: {contradiction_reason(r)}")
    return out


def contradiction_reason(r: MemoryResult) -> str:
    """Why a measured peak contradicts its record (validate_memory.contradicting_settings), naming the settings."""
    how = {k: "assumed by its importer" if k in r.assumed else "a default taken" for k in r.contradicting}
    return (f"its measured peak, {r.measured_bytes / GiB:.4g} GiB, is below the weights, gradients and optimizer "
            f"state its settings hold ({r.state_bytes / GiB:.4g} GiB), so a setting its record does not state is "
            f"not what ran: " + ", ".join(f"{k} ({how[k]})" for k in r.contradicting)
            + "; its error is left out of the MAPE of the others (JSON: memory[].contradicting)")


def nofit_reason(assumed: Iterable[str], unstated: Iterable[str], deciding: Iterable[str],
                 unmodelled: Iterable[str] = (), conflicting: Iterable[Conflict] = (),
                 fits_otherwise: bool | None = None) -> str:
    """Why a run that ran is called "does not fit", in the terms of its record: the settings it states one way and
    its own configuration another (`conflicting`), and whether it fits with the other values; the settings it does
    not state (assumed by its importer, or defaults taken) whose lightest value alone makes it fit (`deciding`),
    else the unstated ones; and the settings it states that trainest has no input for."""
    assumed, unstated, deciding, unmodelled = list(assumed), list(unstated), list(deciding), list(unmodelled)
    given = [k for k in dict.fromkeys(assumed + unstated)]
    how = {k: "assumed by its importer" if k in assumed else "a default taken" for k in given}
    parts = []
    if unmodelled:
        parts.append("its record states settings trainest has no input for, which may be what makes it fit: "
                     + ", ".join(unmodelled) + " (JSON: runs[].unmodelled)")
    if conflicting:
        parts.append(conflict_reason(list(conflicting), fits_otherwise))
    if deciding:
        keys = [k for d in deciding for k in d.split(JOINT)]
        parts.append("it fits with " + " or ".join(" and ".join(f"{k} {LIGHTEST_SETTING[k]}" for k in d.split(JOINT))
                                                    for d in deciding)
                     + (" together" if JOINT in deciding[0] else " alone") + ", which its record does not state ("
                     + "; ".join(f"{k}: {how.get(k, 'a default taken')}" for k in keys) + "; JSON: deciding)")
    elif given:
        parts.append("its record does not state " + ", ".join(f"{k} ({how[k]})" for k in given)
                     + "; none of them at its lightest value, alone or together, makes it fit")
    return "; ".join(parts) if parts else "every memory setting is the record's"


def conflict_reason(conflicting: list[Conflict], fits_otherwise: bool | None) -> str:
    """The settings a run's record states one way and its own configuration another, and whether the run fits with
    the other values (the record's are what trainest predicts)."""
    values = ", ".join(f"{c.key} {setting_word(c.otherwise)} (the record: {setting_word(c.stated)})"
                       for c in conflicting)
    verdict = "with those it fits" if fits_otherwise else "it does not fit with those either"
    return (f"its record states settings that another statement of the same run gives otherwise: {values}; "
            f"{verdict} (JSON: conflicting, fits_otherwise)")


def memory_kind_notes(kind: str, pairs: list[tuple[str, float, float]]) -> list[str]:
    """memory_notes for the runs whose peak is of one memory kind (compared with the predicted total of that
    kind: validate.PEAK_MEMORY_COMPARED)."""
    errors = [(p / m - 1.0) * 100.0 for _, m, p in pairs]
    label = f"{kind} (vs predicted {PEAK_MEMORY_COMPARED[kind].removesuffix('_bytes').replace('per_device', 'device')})"
    if len(pairs) <= MAX_REASONS_SHOWN:
        return [f"Peak memory per device, {label}, measured vs predicted (JSON: memory[]):"] + \
            [f"  {i}: {m / GiB:.4g} GiB measured, {p / GiB:.4g} GiB predicted ({e:+.1f} %)"
             for (i, m, p), e in zip(pairs, errors, strict=True)]
    worst = max(range(len(pairs)), key=lambda k: abs(errors[k]))
    return [f"Peak memory per device, {label}: {plural(len(pairs), 'run')} give a measured peak; the predicted one "
            f"is {sum(abs(e) for e in errors) / len(errors):.1f} % off on average, at most {errors[worst]:+.1f} % "
            f"({pairs[worst][0]}) (JSON: memory[])."]


MAX_REASONS_SHOWN = 10    # not-expressible runs listed with their reasons under the tables (more: --json)


def print_validate(result: ValidationReport) -> None:
    """The per-run table and the summaries by source and by hardware, on stdout."""
    from rich.table import Table

    con = console()
    t = Table(title=f"Runs ({plural(len(result.runs), 'run')} compared)", title_justify="left")
    for col in ("id", "hardware", "metric", "measured", "predicted", "error %", "fits"):
        t.add_column(col, justify="right" if col in ("measured", "predicted", "error %") else "left")
    for r in result.runs:
        t.add_row(r.id, r.hardware, metric_label(r), fmt_value(r.measured, r.unit), fmt_value(r.predicted, r.unit),
                  f"{r.error_pct:+.1f}", "yes" if r.fits else "NO")
    print_table(con, t)
    for line in run_notes(result):
        con.print(line, highlight=False)
    if result.memory:
        mt = Table(title=f"Peak memory by memory kind ({plural(len(result.memory), 'run')} give one)",
                   title_justify="left")
        for col in MEMORY_KIND_COLUMNS:
            mt.add_column(col, justify="left" if col in ("memory kind", "compared with") else "right")
        for row in memory_kind_rows(result.memory):
            mt.add_row(*row)
        print_table(con, mt)
    print_table(con, summary_table("By set", result.by_set, "set"))
    print_table(con, summary_table("By architecture", result.by_architecture, "architecture"))
    print_table(con, summary_table("By source", result.by_source, "source"))
    print_table(con, summary_table("By hardware", result.by_hardware, "hardware"))
    s = result.summary
    mape = "–" if s.mape_pct is None else f"{s.mape_pct:.1f} %"
    med = "–" if s.median_ape_pct is None else f"{s.median_ape_pct:.1f} %"
    skipped = result.not_expressible
    shown = skipped if len(skipped) <= MAX_REASONS_SHOWN else ()
    bad = [r for r in result.runs if r.misspecified]
    if bad and len(bad) < len(result.runs):
        w = result.without_misspecified
        without = (f"; without the {plural(len(bad), 'mis-specified run')} (more than {MISSPECIFIED_MEMORY_FACTOR:g}x "
                   f"the device's memory): MAPE {_pct(w.mape_pct)} %, median {_pct(w.median_ape_pct)} % "
                   f"({plural(w.runs, 'run')})")
    else:
        without = ""
    con.print(f"{plural(s.runs, 'run')} compared: MAPE {mape}, median {med}{without}; {s.not_expressible} not "
              f"expressible" + (":" if shown else " (`--json` lists them with their reasons)" if skipped else ""),
              highlight=False)
    for n in shown:                 # a few (your own file's): each with its reason, a typo named where it is
        con.print(f"  {n.id}: {n.reason}", highlight=False)
