"""`trainest calibrate`: fit a hardware's efficiencies to measured runs (--runs) or to a profiler trace of one
training scenario (--trace, with the scenario's options or --config), and write a profile.

Parses options, calls trainest.calibrate or trainest.trace.calibrate, hands the result to trainest.report.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from trainest.cli import fail
from trainest.cli.options import JsonFlag, QuietFlag, option_annotation
from trainest.cli.validate import MoreRunsArg
from trainest.knobs import CLI, KNOBS

HELP = ("Fit one hardware's efficiency fields to measured runs (--runs) or to a PyTorch profiler / Nsight Systems "
        "trace of one training scenario (--trace with the scenario's options or --config), and write a hardware "
        "profile YAML that --hardware accepts.")

_OWN: dict[str, Any] = {
    "runs": (Annotated[list[str] | None, typer.Option("--runs", help="Runs YAML file with measured runs "
                                                      "(repeatable; schema: specs/README.md, 'runs').")], None),
    "more_runs": (MoreRunsArg, None),
    "output": (Annotated[str, typer.Option("--output", "-o", help="Where to write the calibrated hardware YAML.")],
               inspect.Parameter.empty),
    "trace": (Annotated[list[str] | None, typer.Option(
        "--trace", help="A profiler trace of the scenario: PyTorch profiler JSON (.json, .json.gz) or an Nsight "
                        "Systems SQLite export; repeat it for one file per rank (the slowest is fitted).")], None),
    "trace_layers": (Annotated[float | None, typer.Option(
        "--trace-layers", help="The trace holds this many layers' forward and backward passes of one micro-batch "
                               "(a profile of a few layers), not whole steps.")], None),
    "config": (Annotated[str | None, typer.Option("--config", "-c", help="Scenario YAML of the traced run "
                                                  "(--trace); options given here override it.")], None),
    "json_out": (JsonFlag, False),
    "quiet": (QuietFlag, False),
}


def output_path(output: str) -> Path:
    """--output as a file path: a blank name (Path('') is the folder '.') or a folder is refused."""
    from trainest.errors import SpecError
    if not output.strip():
        raise SpecError(f"--output {output!r} is an empty name; give a file name such as profile.yaml")
    path = Path(output)
    if path.is_dir():
        raise SpecError(f"--output {output!r} is a directory; give a file name such as profile.yaml")
    return path


def _body(values: dict[str, Any]) -> None:
    from trainest.errors import SpecError
    try:
        output = output_path(values["output"])
    except SpecError as exc:
        fail(str(exc))
    if values.get("trace"):
        if values.get("runs") or values.get("more_runs"):
            fail("give --runs or --trace, not both")
        _trace(values, output)
        return
    runs = [*(values.get("runs") or []), *(values.get("more_runs") or [])]
    if not runs:
        fail("give --runs FILE (measured runs) or --trace FILE (a profiler trace with its scenario's options)")
    from trainest.calibrate import calibrate_runs, profile_text
    from trainest.report import LazyProgress
    progress = LazyProgress("calibrating", enabled=not values.get("json_out") and sys.stderr.isatty())
    try:
        start_hw, result = calibrate_runs(runs, values.get("hardware"), progress=progress)
        _write(output, profile_text(start_hw, result, ", ".join(Path(r).name for r in runs)))
    except SpecError as exc:
        progress.close()
        fail(str(exc))
    progress.close()
    from trainest.report import warn
    from trainest.report.calibrate import calibrate_dict, print_calibration
    for w in [] if values.get("quiet") else result.warnings:
        warn(w)
    if values.get("json_out"):
        from trainest.report import dumps
        print(dumps(calibrate_dict(start_hw, result, output)))
        return
    print_calibration(start_hw, result, output)


def _write(output: Path, text: str) -> None:
    from trainest.errors import SpecError
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"--output {str(output)!r} cannot be written: {exc.strerror}") from None


def _trace(values: dict[str, Any], output: Path) -> None:
    from trainest.cli.estimate import scenario_mapping_from_options
    from trainest.errors import SpecError
    from trainest.scenario import scenario_from_mapping
    from trainest.trace.calibrate import calibrate_trace, trace_profile_text
    knobs = {k.name: values.get(k.name) for k in KNOBS}
    try:
        mapping, shape = scenario_mapping_from_options(values.get("config"), knobs)
        scenario = scenario_from_mapping(mapping, CLI if values.get("config") is None else values["config"],
                                         shape=shape)
        result = calibrate_trace(scenario, values["trace"], values.get("trace_layers"))
        _write(output, trace_profile_text(scenario.hardware, result))
    except SpecError as exc:
        fail(str(exc))
    from trainest.report import warn
    from trainest.report.trace import print_trace, trace_dict
    for w in [] if values.get("quiet") else result.warnings:
        warn(w)
    if values.get("json_out"):
        from trainest.report import dumps
        print(dumps(trace_dict(result, output)))
        return
    print_trace(result, output)


def _command() -> Any:
    def calibrate(**values: Any) -> None:
        _body(values)

    params = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=ann)
              for name, (ann, default) in _OWN.items()]
    params += [inspect.Parameter(k.name, inspect.Parameter.KEYWORD_ONLY, default=k.default,
                                 annotation=option_annotation(k, "calibrate")) for k in KNOBS]
    calibrate.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
    calibrate.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
    calibrate.__doc__ = HELP
    return calibrate


calibrate = _command()
