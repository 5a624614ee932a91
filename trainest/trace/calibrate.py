"""`trainest calibrate --trace`: read one trace per rank, compare the slowest rank's steps with the stated
scenario class by class, fit the hardware's efficiencies to the classes and write a hardware profile that
`--hardware` accepts (docs/model.md §17.3)."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from pathlib import Path

from trainest.calibrate import FittedParameter, efficiency_block, replace_efficiency_block
from trainest.catalog import Hardware, hardware_from_mapping
from trainest.errors import SpecError
from trainest.record import NamedTuple
from trainest.scenario import Scenario, job_of, layout_of
from trainest.trace.compare import (
    ClassRow,
    Measured,
    PhaseRow,
    class_rows,
    fit_classes,
    measure,
    mismatch_warnings,
    phase_rows,
    predicted_classes,
    predicted_phases,
)
from trainest.trace.reader import read_trace


class TraceCalibration(NamedTuple):
    """What `calibrate --trace` found and fitted."""

    ranks: tuple[Measured, ...]     # one per trace file
    slowest: Measured               # the rank with the longest step: the one compared and fitted
    spread: float                   # (slowest − fastest step) / mean step over the ranks
    rows: tuple[ClassRow, ...]      # the slowest rank's classes against the prediction
    phases: tuple[PhaseRow, ...]    # its compute classes pass by pass, where the trace says (else empty)
    predicted_step_s: float | None  # the model's step time (None for a profile of a few layers)
    layers: float | None            # --trace-layers: the trace holds that many layer passes, not whole steps
    hardware: Hardware              # the fitted hardware
    parameters: tuple[FittedParameter, ...]
    rank: int
    condition_number: float
    warnings: tuple[str, ...]


def calibrate_trace(s: Scenario, paths: Sequence[str], layers: float | None = None) -> TraceCalibration:
    """Read, compare, fit (module docstring); SpecError when the traces cannot be used."""
    if layers is not None and not 0 < layers < 1e6:
        raise SpecError(f"--trace-layers {layers:g} must be a number of layers greater than 0")
    ranks = tuple(measure(read_trace(p)) for p in paths)
    slowest = max(ranks, key=lambda r: r.step_s)
    steps = [r.step_s for r in ranks]
    spread = (max(steps) - min(steps)) / (sum(steps) / len(steps)) if len(steps) > 1 else 0.0
    if not slowest.has_backward:
        raise SpecError(f"--trace {slowest.path!r} has no backward pass (an inference or forward-only profile): a "
                        f"training step cannot be calibrated from it")
    job, layout = job_of(s), layout_of(s)
    predicted = predicted_classes(job, layout, layers)
    rows = tuple(class_rows(slowest, {k: float(v) for k, v in predicted.items()}, with_idle=layers is None))
    phases = tuple(phase_rows(slowest, predicted_phases(job, layout, layers)))
    warnings = mismatch_warnings(list(rows), slowest, layers)
    hw, params, rank, cond = fit_classes(s, list(rows), layers)
    from trainest.step import step_terms
    step = None if layers is not None else float(step_terms(job, layout).time_s)
    return TraceCalibration(ranks=ranks, slowest=slowest, spread=spread, rows=rows, phases=phases,
                            predicted_step_s=step,
                            layers=layers, hardware=hw, parameters=params, rank=rank, condition_number=cond,
                            warnings=tuple(warnings))


def trace_profile_text(start: Hardware, result: TraceCalibration, date: str | None = None) -> str:
    """The hardware file of `start` with the efficiencies fitted to the trace; checked to load again."""
    import yaml

    path = Path(start.path)
    if not path.is_file():
        raise SpecError(f"calibrate: cannot read the hardware file {start.path!r} to copy it")
    day = date or datetime.date.today().isoformat()
    names = ", ".join(Path(r.path).name for r in result.ranks)
    held = [p.name for p in result.parameters if not p.constrained]
    method = f"trainest calibrate --trace on {names}, {day}"
    original = path.read_text(encoding="utf-8")
    lines = original.splitlines(keepends=True)
    body = "".join(ln for i, ln in enumerate(lines) if not all(x.startswith("#") for x in lines[:i + 1]))
    header = (f"# Calibrated profile of {start.name}, by `trainest calibrate --trace` on {day}: its\n# efficiency "
              f"block was fitted to the kernel classes of {names} (the slowest of {len(result.ranks)} rank(s)).\n"
              + (f"# Not determined by the trace (kept at the start values): {', '.join(held)}.\n" if held else "")
              + "# Use it with --hardware PATH (estimate, plan).\n")
    text = header + replace_efficiency_block(body, efficiency_block(result.hardware, method=method, fit_runs=None,
                                                                    fit_mape_pct=None), str(path))
    hardware_from_mapping(yaml.safe_load(text), "calibrated profile")
    return text
