"""`trainest validate` and `trainest calibrate`: accuracy against published runs, and fitting it.

Parse options, call trainest.validate / trainest.calibrate, render. rich and numpy are imported
inside the functions (start-up stays fast).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from trainest.commands._options import option_annotation


RunsOpt = Annotated[Optional[list[str]], typer.Option(
    "--runs", help="Runs YAML file (repeatable); default: the bundled specs/runs/*.yaml.", show_default=False)]
# `--runs a.yaml b.yaml` (the issue's `--runs FILE ...`): files after the first are positional
MoreRunsArg = Annotated[Optional[list[str]], typer.Argument(
    help="More runs YAML files (so that `--runs a.yaml b.yaml` works).", show_default=False, metavar="[FILE]...")]
JsonOpt = option_annotation("json_out")


def _fail(message: str) -> None:
    print(f"Error: {message}", file=sys.stderr)
    raise typer.Exit(1)


def _summary_table(title: str, groups: dict, key_title: str):
    from rich.table import Table

    from trainest.validate import Summary

    def pct(x: float | None) -> str:
        return "–" if x is None else f"{x:.1f}"

    t = Table(title=title, title_justify="left")
    for col in (key_title, "runs", "MAPE %", "median %", "max %", "mean error %", "not expressible"):
        t.add_column(col, justify="left" if col == key_title else "right")
    for k, s in groups.items():
        s: Summary
        t.add_row(k, str(s.runs), pct(s.mape_pct), pct(s.median_ape_pct), pct(s.max_ape_pct),
                  pct(s.mean_error_pct), str(s.not_expressible))
    return t


def validate(
    more_runs: MoreRunsArg = None,
    runs: RunsOpt = None,
    source: Annotated[Optional[str], typer.Option("--source", help="Only runs whose source (file name or citation) contains this text.")] = None,
    hardware: Annotated[Optional[str], typer.Option("--hardware", "-H", help="Only runs on this hardware (catalog name).")] = None,
    run_set: Annotated[Optional[str], typer.Option(
        "--set", help="Only the runs of this set (a runs file's `set:`; `public`: the published runs, "
                      "the set of a file without one).", show_default=False)] = None,
    json_out: JsonOpt = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the markdown tables used in docs/validation.md.")] = False,
) -> None:
    """Compare trainest's predictions with measured training runs: error per run, by set, by source, by hardware."""
    from trainest.errors import SpecError
    from trainest.validate import markdown as report_markdown, report_dict, run_sets, validate_runs

    if json_out and markdown:
        _fail("--json and --markdown are exclusive; choose one")
    from trainest.report import LazyProgress
    progress = LazyProgress("validating", enabled=not json_out and not markdown and sys.stderr.isatty())
    try:
        files = [*(runs or []), *(more_runs or [])]
        result = validate_runs(files or None, source=source, hardware=hardware, run_set=run_set, progress=progress)
        known_sets = run_sets(files or None) if run_set and not result.runs and not result.not_expressible else []
    except SpecError as exc:
        progress.close()
        _fail(str(exc))
        return
    progress.close()
    if not result.runs and not result.not_expressible:
        _fail("no run matches" + (f" --source {source!r}" if source else "") + (f" --hardware {hardware!r}" if hardware else "")
              + (f" --set {run_set!r} (the runs files have the sets: {', '.join(known_sets)})" if run_set else ""))
    if json_out:
        from trainest.report import dumps
        print(dumps(report_dict(result)))
        return
    if markdown:
        print(report_markdown(result), end="")
        return
    from rich.table import Table

    from trainest.report import _console
    from trainest.validate import fmt_value, metric_label
    con = _console()
    t = Table(title=f"Runs ({len(result.runs)} compared)", title_justify="left")
    for col in ("id", "hardware", "metric", "measured", "predicted", "error %"):
        t.add_column(col, justify="right" if col in ("measured", "predicted", "error %") else "left")
    for r in result.runs:
        t.add_row(r.id, r.hardware, metric_label(r), fmt_value(r.measured, r.unit), fmt_value(r.predicted, r.unit),
                  f"{r.error_pct:+.1f}")
    con.print(t)
    con.print(_summary_table("By set", result.by_set, "set"))
    con.print(_summary_table("By source", result.by_source, "source"))
    con.print(_summary_table("By hardware", result.by_hardware, "hardware"))
    s = result.summary
    mape = "–" if s.mape_pct is None else f"{s.mape_pct:.1f} %"
    med = "–" if s.median_ape_pct is None else f"{s.median_ape_pct:.1f} %"
    con.print(f"{s.runs} runs compared: MAPE {mape}, median {med}; {s.not_expressible} not expressible "
              f"(`--json` lists them with their reasons)")


def calibrate(
    runs: Annotated[list[str], typer.Option("--runs", help="Runs YAML file with measured runs (repeatable).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the calibrated hardware YAML.")],
    more_runs: MoreRunsArg = None,
    hardware: Annotated[Optional[str], typer.Option("--hardware", "-H", help="Hardware to fit (catalog name or YAML path); required when the runs use several.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Fit one hardware's efficiency fields to measured runs and write a hardware profile YAML."""
    from trainest.calibrate import calibrate_runs, profile_text
    from trainest.errors import SpecError

    runs = [*runs, *(more_runs or [])]
    try:
        if output.is_dir():
            raise SpecError(f"--output {str(output)!r} is a directory; give a file name such as profile.yaml")
        start_hw, result = calibrate_runs(runs, hardware)
        text = profile_text(start_hw, result, ", ".join(Path(r).name for r in runs))
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise SpecError(f"--output {str(output)!r} cannot be written: {exc.strerror}") from None
    except SpecError as exc:
        _fail(str(exc))
        return
    params = [{"name": p.name, "start": p.start, "value": p.value, "constrained": p.constrained}
              for p in result.parameters]
    if json_out:
        from trainest.report import dumps
        print(dumps({"schema_version": "1.0", "hardware": start_hw.name, "runs": result.runs,
                     "mape_before_pct": result.mape_before_pct, "mape_after_pct": result.mape_after_pct,
                     "iterations": result.iterations, "parameters": params, "output": str(output)}))
        return
    from rich.table import Table

    from trainest.report import _console
    from trainest.units import MICROSECOND
    con = _console()
    t = Table(title=f"Calibrated {start_hw.name} on {result.runs} runs", title_justify="left")
    for col in ("parameter", "before", "after", "constrained by the runs"):
        t.add_column(col, justify="left" if col == "parameter" else "right")
    for p in result.parameters:
        scale, label = (1 / MICROSECOND, "layer_overhead_us") if p.name == "layer_overhead_s" else (1.0, p.name)
        t.add_row(label, f"{p.start * scale:.4g}", f"{p.value * scale:.4g}", "yes" if p.constrained else "no (kept)")
    con.print(t)
    con.print(f"MAPE before {result.mape_before_pct:.1f} %, after {result.mape_after_pct:.1f} % "
              f"({result.iterations} iterations); wrote {output}")
