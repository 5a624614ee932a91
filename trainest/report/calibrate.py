"""`trainest calibrate`: its JSON document and its table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainest import SCHEMA_VERSION
from trainest.calibrate import CalibrationResult
from trainest.catalog import Hardware
from trainest.report import console
from trainest.units import MICROSECOND


def calibrate_dict(hardware: Hardware, result: CalibrationResult, output: Path) -> dict[str, Any]:
    """The `trainest calibrate --json` document (docs/schema/calibrate.schema.json)."""
    params = [{"name": p.name, "start": p.start, "value": p.value, "constrained": p.constrained}
              for p in result.parameters]
    return {"schema_version": SCHEMA_VERSION, "hardware": hardware.name, "runs": result.runs,
            "mape_before_pct": result.mape_before_pct, "mape_after_pct": result.mape_after_pct,
            "iterations": result.iterations, "parameters": params, "output": str(output)}


def print_calibration(hardware: Hardware, result: CalibrationResult, output: Path) -> None:
    from rich.table import Table
    con = console()
    t = Table(title=f"Calibrated {hardware.name} on {result.runs} runs", title_justify="left")
    for col in ("parameter", "before", "after", "constrained by the runs"):
        t.add_column(col, justify="left" if col == "parameter" else "right")
    for p in result.parameters:
        scale, label = (1 / MICROSECOND, "layer_overhead_us") if p.name == "layer_overhead_s" else (1.0, p.name)
        t.add_row(label, f"{p.start * scale:.4g}", f"{p.value * scale:.4g}", "yes" if p.constrained else "no (kept)")
    con.print(t)
    con.print(f"MAPE before {result.mape_before_pct:.1f} %, after {result.mape_after_pct:.1f} % "
              f"({result.iterations} iterations); wrote {output}")
