"""`trainest calibrate`: fit a hardware's efficiencies to measured runs and write a profile.

Parses options, calls trainest.calibrate, hands the result to trainest.report.calibrate.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from trainest.cli import fail
from trainest.cli.options import JsonFlag
from trainest.cli.validate import MoreRunsArg


def calibrate(
    runs: Annotated[list[str], typer.Option("--runs", help="Runs YAML file with measured runs (repeatable).")],
    output: Annotated[str, typer.Option("--output", "-o", help="Where to write the calibrated hardware YAML.")],
    more_runs: MoreRunsArg = None,
    hardware: Annotated[str | None, typer.Option(
        "--hardware", "-H",
        help="Hardware to fit (catalog name or YAML path); required when the runs use several.")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Fit one hardware's efficiency fields to measured runs and write a hardware profile YAML."""
    from trainest.calibrate import calibrate_runs, profile_text
    from trainest.errors import SpecError
    from trainest.report import LazyProgress
    runs = [*runs, *(more_runs or [])]
    progress = LazyProgress("calibrating", enabled=not json_out and sys.stderr.isatty())
    try:
        path = output_path(output)
        start_hw, result = calibrate_runs(runs, hardware, progress=progress)
        text = profile_text(start_hw, result, ", ".join(Path(r).name for r in runs))
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise SpecError(f"--output {output!r} cannot be written: {exc.strerror}") from None
    except SpecError as exc:
        progress.close()
        fail(str(exc))
    progress.close()
    from trainest.report import warn
    from trainest.report.calibrate import calibrate_dict, print_calibration
    for w in result.warnings:
        warn(w)
    if json_out:
        from trainest.report import dumps
        print(dumps(calibrate_dict(start_hw, result, path)))
        return
    print_calibration(start_hw, result, path)


def output_path(output: str) -> Path:
    """--output as a file path: a blank name (Path('') is the folder '.') or a folder is refused."""
    from trainest.errors import SpecError
    if not output.strip():
        raise SpecError(f"--output {output!r} is an empty name; give a file name such as profile.yaml")
    path = Path(output)
    if path.is_dir():
        raise SpecError(f"--output {output!r} is a directory; give a file name such as profile.yaml")
    return path
