"""`trainest calibrate`: fit a hardware's efficiencies to measured runs and write a profile.

Parses options, calls trainest.calibrate, hands the result to trainest.report.calibrate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trainest.cli import fail
from trainest.cli.options import JsonFlag, QuietFlag
from trainest.cli.validate import MoreRunsArg


def calibrate(
    runs: Annotated[list[str], typer.Option("--runs", help="Runs YAML file with measured runs (repeatable).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the calibrated hardware YAML.")],
    more_runs: MoreRunsArg = None,
    hardware: Annotated[str | None, typer.Option(
        "--hardware", "-H",
        help="Hardware to fit (catalog name or YAML path); required when the runs use several.")] = None,
    json_out: JsonFlag = False,
    quiet: QuietFlag = False,
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
        fail(str(exc))
    from trainest.report import warn
    from trainest.report.calibrate import calibrate_dict, print_calibration
    for w in [] if quiet else result.warnings:
        warn(w)
    if json_out:
        from trainest.report import dumps
        print(dumps(calibrate_dict(start_hw, result, output)))
        return
    print_calibration(start_hw, result, output)
