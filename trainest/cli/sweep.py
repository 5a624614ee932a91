"""`trainest sweep`: one knob over a range, the estimate (or best plan) at each value: a table, a
terminal plot, CSV, JSON, and PNG/SVG through the optional plot extra.

`run_sweep` is the command's body (its options: trainest.knobs.SWEEP_OPTIONS).
"""

from __future__ import annotations

import sys
from typing import Any

from trainest.cli import EXIT_BAD_INPUT, EXIT_OK, error_line

HELP = ("Sweep one knob over a range (--devices 8..8192, --seq-len 2048..32768, --precision bf16,fp8,fp4, ...): "
        "step time, throughput, MFU, memory, days and cost at each value, as a table and a plot.")


def _mapping(values: dict[str, Any], swept: str) -> tuple[dict, dict]:
    """(scenario mapping, shape overrides) of every option but the swept one; the other sweepable
    options, given as text, read as single values."""
    from trainest.cli.estimate import scenario_mapping_from_options
    from trainest.knobs import BY_NAME
    from trainest.sweep import SWEEPABLE, parse_values
    single = {name: parse_values(BY_NAME[name], str(values[name]))[0] if values.get(name) is not None else None
              for name in SWEEPABLE if name != swept}
    return scenario_mapping_from_options(values.get("config"), {**values, **single, swept: None})


def _write_figures(result: Any, values: dict[str, Any]) -> list[str]:
    from trainest.report.sweep import write_figure
    return [write_figure(result, values[fmt], fmt) for fmt in ("png", "svg") if values.get(fmt) is not None]


def run_sweep(values: dict[str, Any]) -> int:
    """Run `trainest sweep` for parsed option values; print JSON, CSV or table and plot; exit code."""
    from trainest import report
    from trainest.errors import SpecError
    from trainest.sweep import range_note, sweep, swept_knob
    if values.get("csv") and values.get("json_out"):
        error_line("--csv and --json both print the points on stdout; give one of them")
        return EXIT_BAD_INPUT
    quiet = bool(values.get("quiet"))
    progress = report.LazyProgress("sweeping", enabled=not quiet and not values.get("json_out")
                                   and not values.get("csv"))
    try:
        knob, points = swept_knob(values)
        note = range_note(knob, str(values[knob.name]), points)
        mapping, shape = _mapping(values, knob.name)
        result = sweep(mapping, knob, points, plan=bool(values.get("plan")), shape=shape, progress=progress)
        progress.close()
        written = _write_figures(result, values)
    except SpecError as exc:
        progress.close()
        error_line(str(exc))
        return EXIT_BAD_INPUT
    failed = {p.error for p in result.points if p.estimate is None}
    if len(failed) == 1 and all(p.estimate is None for p in result.points):
        # the input fails whatever the swept value (an --ep that does not divide the experts, LoRA on a
        # mixture of experts): bad input, as estimate says it, not a table of points that do not run
        error_line(failed.pop())
        return EXIT_BAD_INPUT
    from trainest.report.sweep import csv_text, print_sweep, sweep_dict
    result, common = _with_job_warnings(result)
    if values.get("json_out"):
        print(report.dumps(sweep_dict(result)))
    elif values.get("csv"):
        print(csv_text(result), end="")
    else:
        print_sweep(result)
    if note and not quiet:
        print(f"Note: {note}", file=sys.stderr)
    if not quiet:
        for path in written:
            print(f"wrote {path}", file=sys.stderr)
        for w in common:
            report.warn(w)
        for p in result.points:
            for w in p.warnings:
                if w not in common:
                    report.warn(f"{result.knob}={p.value}: {w}")
    return EXIT_OK


def _with_job_warnings(result: Any) -> tuple[Any, list[str]]:
    """(the result with each point's job warnings added, as `estimate --json` has them: an unmeasured
    framework, a fine-tune's default tokens and error, offload priors..., caveats.job_warnings; the
    warnings every runnable point has, said once rather than once per point)."""
    from trainest.caveats import job_warnings
    from trainest.record import replace
    points = tuple(p if p.estimate is None else
                   replace(p, warnings=p.warnings + tuple(w for w in job_warnings(p.estimate.scenario)
                                                          if w not in p.warnings))
                   for p in result.points)
    runs = [p.warnings for p in points if p.estimate is not None]
    common = [w for w in runs[0] if all(w in other for other in runs[1:])] if runs else []
    return replace(result, points=points), common
