"""`trainest calibrate --trace`: its JSON document and its tables (measured vs predicted per class, the
fitted efficiencies)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainest import SCHEMA_VERSION
from trainest.report import clean, console, print_table
from trainest.trace.calibrate import TraceCalibration


def trace_dict(r: TraceCalibration, output: Path) -> dict[str, Any]:
    """The `trainest calibrate --trace --json` document."""
    ranks = [{"path": m.path, "rank": m.rank, "steps": m.steps, "steps_found_by": m.how, "step_s": m.step_s,
              "idle_s": m.idle_s, "comm_overlap": m.comm_overlap, "classified_share": m.classified_share}
             for m in r.ranks]
    rows = [{"class": c.name, "measured_s": c.measured_s, "predicted_s": c.predicted_s, "ratio": c.ratio,
             "bound": c.bound} for c in r.rows]
    phases = [{"phase": c.phase, "class": c.name, "measured_s": c.measured_s, "predicted_s": c.predicted_s,
               "ratio": c.ratio} for c in r.phases]
    params = [{"name": p.name, "start": p.start, "value": p.value, "constrained": p.constrained,
               "leverage": p.leverage, "at_bound": p.at_bound} for p in r.parameters]
    return clean({"schema_version": SCHEMA_VERSION, "hardware": r.hardware.name, "ranks": ranks,
                  "slowest": r.slowest.path, "step_spread": r.spread, "measured_step_s": r.slowest.step_s,
                  "predicted_step_s": r.predicted_step_s, "trace_layers": r.layers,
                  "comm_overlap": r.slowest.comm_overlap, "classified_share": r.slowest.classified_share,
                  "classes": rows, "phases": phases, "parameters": params, "jacobian_rank": r.rank,
                  "condition_number": r.condition_number, "warnings": list(r.warnings), "output": str(output)})


def print_trace(r: TraceCalibration, output: Path) -> None:
    """The tables of `calibrate --trace`."""
    from rich.table import Table
    con = console()
    m = r.slowest
    per = f"{r.layers:g} layer passes" if r.layers is not None else "step"
    con.print(f"Trace: {len(r.ranks)} rank(s); slowest {m.path} ({m.steps} step(s), found by {m.how}); step "
              f"{m.step_s * 1e3:.3f} ms" + (f", spread {r.spread:.1%}" if len(r.ranks) > 1 else "")
              + (f"; predicted step {r.predicted_step_s * 1e3:.3f} ms" if r.predicted_step_s is not None else "")
              + f"; {m.classified_share:.1%} of kernel time classified; {m.comm_overlap:.0%} of communication "
              f"overlapped with compute")
    t = Table(title=f"Measured vs predicted, per {per}")
    for col in ("class", "measured", "predicted", "measured/predicted", "bound"):
        t.add_column(col, justify="left" if col in ("class", "bound") else "right")
    for c in r.rows:
        t.add_row(c.name, f"{c.measured_s * 1e3:.3f} ms", f"{c.predicted_s * 1e3:.3f} ms",
                  "-" if c.ratio is None else f"{c.ratio:.2f}", c.bound)
    print_table(con, t)
    if r.phases:
        t = Table(title=f"The compute classes by pass (the pass that launched each kernel), per {per}")
        for col in ("pass", "class", "measured", "predicted", "measured/predicted"):
            t.add_column(col, justify="left" if col in ("pass", "class") else "right")
        for row in r.phases:
            t.add_row(row.phase, row.name, f"{row.measured_s * 1e3:.3f} ms", f"{row.predicted_s * 1e3:.3f} ms",
                      "-" if row.ratio is None else f"{row.ratio:.2f}")
        print_table(con, t)
    f = Table(title=f"Fitted efficiencies of {r.hardware.name} (Jacobian rank {r.rank})")
    for col in ("parameter", "start", "fitted", "what the trace says"):
        f.add_column(col, justify="left" if col in ("parameter", "what the trace says") else "right")
    for p in r.parameters:
        note = ("not constrained: no measured class moves with it; kept" if not p.constrained
                else f"at its {p.at_bound} bound" if p.at_bound else "determined")
        f.add_row(p.name, f"{p.start:.4g}", f"{p.value:.4g}", note)
    print_table(con, f)
    con.print(f"Wrote {output}")
