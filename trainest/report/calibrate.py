"""`trainest calibrate`: its JSON document and its table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainest import SCHEMA_VERSION
from trainest.calibrate import MIN_LEVERAGE, CalibrationResult, FittedParameter, bounds_of
from trainest.catalog import Hardware
from trainest.report import clean, console, print_table
from trainest.units import MICROSECOND, MILLISECOND


def _determined(p: FittedParameter) -> bool:
    return p.constrained and p.leverage >= MIN_LEVERAGE


def calibrate_dict(hardware: Hardware, result: CalibrationResult, output: Path) -> dict[str, Any]:
    """The `trainest calibrate --json` document (docs/schema/calibrate.schema.json)."""
    params = [{"name": p.name, "start": p.start, "value": p.value, "constrained": p.constrained,
               "determined": _determined(p), "leverage": p.leverage, "at_bound": p.at_bound}
              for p in result.parameters]
    return clean({"schema_version": SCHEMA_VERSION, "hardware": hardware.name, "runs": result.runs,
                  "mape_before_pct": result.mape_before_pct, "mape_after_pct": result.mape_after_pct,
                  "iterations": result.iterations, "jacobian_rank": result.rank,
                  "condition_number": result.condition_number, "undetermined": list(result.fixed),
                  "parameters": params, "left_out": list(result.left_out), "warnings": list(result.warnings),
                  "output": str(output)})


def _note(p: FittedParameter, hardware: Hardware) -> str:
    if not p.constrained:
        return "no run is sensitive to it: kept at its start"
    if p.leverage < MIN_LEVERAGE:
        return "set by the prior, not the runs"
    if p.at_bound:
        lo, hi = bounds_of(p.name, hardware)
        ceiling = p.name == "gemm" and p.at_bound == "upper" and hardware.matmul_ceiling is not None \
            and hi >= hardware.matmul_ceiling
        which = "the device's measured best GEMM rate" if ceiling else f"its {p.at_bound} bound"
        return (f"at {which} ({lo if p.at_bound == 'lower' else hi:.3g}): compensating for a term the "
                f"model misses, not measuring the hardware")
    return ""


def summary_line(result: CalibrationResult) -> str:
    """What the runs determine, in one sentence."""
    k = len(result.parameters)
    runs = f"{result.runs} run{'s' if result.runs != 1 else ''}"
    verb = "determines" if result.runs == 1 else "determine"
    if result.rank >= k:
        return (f"The {runs} {verb} all {k} parameters (Jacobian rank {result.rank}, condition number "
                f"{result.condition_number:.3g}).")
    return (f"The {runs} {verb} {result.rank} independent direction{'s' if result.rank != 1 else ''} of {k} "
            f"parameters (Jacobian rank {result.rank}): {', '.join(result.fixed) or 'none'} "
            f"{'is' if len(result.fixed) == 1 else 'are'} set by the prior (regularised), not by the runs.")


# the efficiency fields in seconds, shown in the unit (and under the key) of the hardware YAML
HUMAN_UNITS = {"layer_overhead_s": (1 / MICROSECOND, "layer_overhead_us"),
               "host_per_kernel_s": (1 / MICROSECOND, "host_us_per_kernel"),
               "host_per_micro_batch_s": (1 / MILLISECOND, "host_ms_per_micro_batch")}


def print_calibration(hardware: Hardware, result: CalibrationResult, output: Path) -> None:
    from rich.table import Table
    con = console()
    t = Table(title=f"Calibrated {hardware.name} on {result.runs} run{'s' if result.runs != 1 else ''}",
              title_justify="left")
    for col in ("parameter", "before", "after", "determined by the runs", "note"):
        t.add_column(col, justify="left" if col in ("parameter", "note") else "right")
    for p in result.parameters:
        scale, label = HUMAN_UNITS.get(p.name, (1.0, p.name))
        t.add_row(label, f"{p.start * scale:.4g}", f"{p.value * scale:.4g}",
                  f"{'yes' if _determined(p) else 'no'} ({p.leverage:.0%})", _note(p, hardware))
    print_table(con, t)
    con.print(summary_line(result))
    if result.left_out:
        con.print(f"Left out of the fit ({len(result.left_out)}; a run trainest's memory model says does not fit is "
                  f"probably mis-specified):", highlight=False)
        for line in result.left_out:
            con.print(f"  {line}", highlight=False)
    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.1f} %"
    con.print(f"MAPE before {pct(result.mape_before_pct)}, after {pct(result.mape_after_pct)} "
              f"({result.iterations} iterations); wrote {output}", soft_wrap=True)
