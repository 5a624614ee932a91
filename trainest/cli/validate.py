"""`trainest validate`: accuracy against published runs.

Parses options, calls trainest.validate, hands the report to trainest.report.validate. rich and
numpy are imported inside the function (start-up stays fast).
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from trainest.cli import fail
from trainest.cli.options import JsonFlag, QuietFlag

RunsOpt = Annotated[list[str] | None, typer.Option(
    "--runs", help="Runs YAML file (repeatable; schema: specs/README.md, 'runs': each run a scenario and its measured "
    "step time); default: the bundled specs/runs/*.yaml.", show_default=False)]
# `--runs a.yaml b.yaml` (the issue's `--runs FILE ...`): files after the first are positional
MoreRunsArg = Annotated[list[str] | None, typer.Argument(
    help="More runs YAML files (so that `--runs a.yaml b.yaml` works).", show_default=False, metavar="[FILE]...")]


def validate(
    more_runs: MoreRunsArg = None,
    runs: RunsOpt = None,
    source: Annotated[str | None, typer.Option(
        "--source", help="Only runs whose source (file name or citation) contains this text.")] = None,
    hardware: Annotated[str | None, typer.Option(
        "--hardware", "-H", help="Only runs on this hardware: a catalog name, or a hardware file such as a "
                                  "`trainest calibrate` profile (its runs are then predicted with that file).")] = None,
    run_set: Annotated[str | None, typer.Option(
        "--set", help="Only the runs of this set (a runs file's `set:`; `public`: the published runs, "
                      "the set of a file without one).", show_default=False)] = None,
    json_out: JsonFlag = False,
    markdown: Annotated[bool, typer.Option(
        "--markdown", help="Print the markdown tables used in docs/validation.md.")] = False,
    quiet: QuietFlag = False,
) -> None:
    """Compare trainest's predictions with measured training runs: error per run, by set, by source, by hardware."""
    from trainest.errors import SpecError
    from trainest.report.validate import markdown as report_markdown
    from trainest.report.validate import print_validate, report_dict
    from trainest.validate import run_sets, validate_runs

    if json_out and markdown:
        fail("--json and --markdown are exclusive; choose one")
    # a blank filter would keep every run (--source '') or be dropped (--hardware '', --set ''): refuse it
    for flag, value, wanted in (("--source", source, "the text its source contains"),
                                ("--hardware", hardware, "a catalog name or a hardware file"),
                                ("--set", run_set, "a set name, e.g. public")):
        if value is not None and not value.strip():
            fail(f"{flag} {value!r} is empty; give {wanted}, or leave {flag} out for every run")
    from trainest.report import LazyProgress
    progress = LazyProgress("validating", enabled=not json_out and not markdown and not quiet and sys.stderr.isatty())
    try:
        files = [*(runs or []), *(more_runs or [])]
        result = validate_runs(files or None, source=source, hardware=hardware, run_set=run_set,
                               user_files=bool(files), progress=progress)
        known_sets = run_sets(files or None, user_files=bool(files)) \
            if run_set and not result.runs and not result.not_expressible else []
    except SpecError as exc:
        progress.close()
        fail(str(exc))
    progress.close()
    if not result.runs and not result.not_expressible and not result.memory_runs:
        fail("no run matches" + (f" --source {source!r}" if source else "")
             + (f" --hardware {hardware!r}" if hardware else "")
             + (f" --set {run_set!r} (the runs files have the sets: {', '.join(known_sets)})" if run_set else ""))
    if files and not result.runs and not result.memory_runs:
        reasons = "; ".join(f"{n.id}: {n.reason}" for n in result.not_expressible[:3])
        fail(f"no run of {', '.join(files)} could be compared ({len(result.not_expressible)} not expressible"
             + (f": {reasons}" if reasons else "") + ")")
    from trainest.report import warn
    for w in [] if quiet else result.warnings:
        warn(w)
    if json_out:
        from trainest.report import dumps
        print(dumps(report_dict(result)))
        return
    if markdown:
        print(report_markdown(result), end="")
        return
    print_validate(result)
