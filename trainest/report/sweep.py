"""`trainest sweep`: its JSON document, CSV, table, terminal plot, and PNG/SVG (the plot extra).

The terminal plot is plain text (block characters, no dependency): one row per value, a bar of the
throughput (per device when the device count is swept, with ┆ at the ideal of linear scaling) and a
bar of the MFU, so that where throughput stops following the knob shows at a glance. PNG and SVG need
matplotlib (`pip install "trainest[plot]"`), imported only when asked for."""

from __future__ import annotations

import csv
import io
from typing import Any

from trainest import SCHEMA_VERSION
from trainest.errors import SpecError
from trainest.report import clean, console, fmt_seconds, fmt_si, print_table
from trainest.report.estimate import band_pct, estimate_dict, notes
from trainest.report.plan import _layout
from trainest.sweep import SweepResult
from trainest.units import GiB

BAR_WIDTH = 40              # characters of the throughput bar at its largest
MFU_WIDTH = 12              # characters of the MFU bar at 100 %
MIN_BAR_WIDTH = 20          # the narrowest the throughput bar gets on a narrow console
MIN_MFU_WIDTH = 5           # and the MFU bar
EIGHTHS = " ▏▎▍▌▋▊▉█"
PLOT_EXTRA = 'pip install "trainest[plot]"'


def sweep_dict(r: SweepResult) -> dict[str, Any]:
    """The `trainest sweep --json` document (docs/schema/sweep.schema.json): per point its value and the
    estimate's fields exactly as `trainest estimate --json` gives them (or the error that stopped it)."""
    points = []
    for p, eff in zip(r.points, r.scaling_efficiency(), strict=True):
        if p.estimate is None:
            points.append({"value": p.value, "error": p.error, "inputs": None, "step": None, "throughput": None,
                           "memory": None, "training": None, "band": None, "warnings": [],
                           "scaling_efficiency": None})
            continue
        doc = estimate_dict(p.estimate, list(p.warnings))
        doc.pop("schema_version")
        points.append({"value": p.value, "error": None, **doc, "scaling_efficiency": eff})
    return clean({"schema_version": SCHEMA_VERSION, "knob": r.knob, "plan": r.plan, "sweep": points})


CSV_COLUMNS = ("value", "step_s", "step_s_low", "step_s_high", "tokens_per_s", "tokens_per_s_per_device", "mfu",
               "memory_gib", "fits", "days", "cost_usd", "energy_kwh", "co2_kg", "bottleneck", "scaling_efficiency",
               "layout", "error", "global_batch")


def csv_value(value: Any) -> Any:
    """A swept value as a CSV cell: a whole float as an integer (1e12 tokens as 1000000000000, not
    1000000000000.0)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def csv_text(r: SweepResult) -> str:
    """One CSV row per point (CSV_COLUMNS; empty cells where a point does not run)."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for p, eff in zip(r.points, r.scaling_efficiency(), strict=True):
        e = p.estimate
        if e is None:
            w.writerow([csv_value(p.value)] + [""] * (len(CSV_COLUMNS) - 3) + [p.error, ""])
            continue
        st, th, tr = e.step, e.throughput, e.training
        w.writerow([csv_value(p.value), f"{st.time_s:.6g}", f"{st.time_s_low:.6g}", f"{st.time_s_high:.6g}",
                    f"{th.tokens_per_s:.6g}", f"{th.tokens_per_s_per_device:.6g}", f"{th.mfu:.4f}",
                    f"{e.memory.per_device_bytes / GiB:.2f}", e.memory.fits, f"{tr.time_days:.4g}",
                    "" if tr.cost_usd is None else f"{tr.cost_usd:.2f}",
                    "" if tr.energy_kwh is None else f"{tr.energy_kwh:.6g}",
                    "" if tr.co2_kg is None else f"{tr.co2_kg:.6g}", st.bottleneck,
                    "" if eff is None else f"{eff:.4f}", _layout(e), "", e.scenario.global_batch])
    return out.getvalue()


def label(r: SweepResult, value: Any) -> str:
    """A point's value as people read it (a token budget with a prefix: 1.5 T)."""
    if r.knob == "tokens" and isinstance(value, (int, float)):
        return fmt_si(value).replace(" ", "")
    return str(value)


def bar(fraction: float, width: int) -> str:
    """A bar of `fraction` (0..1) of `width` characters, in eighths of a character."""
    eighths = max(0, min(width * 8, round(fraction * width * 8)))
    full, rest = divmod(eighths, 8)
    return ("█" * full + (EIGHTHS[rest] if rest else "")).ljust(width)


def terminal_plot(r: SweepResult, columns: int | None = None) -> list[str]:
    """The plot as lines of plain text (module docstring), each at most `columns` characters wide when
    given (the console's width): the bars shrink (throughput to MIN_BAR_WIDTH, MFU to MIN_MFU_WIDTH) so
    that a row never wraps; a reason why a point does not run that is too long is left to the line under
    the table."""
    ok = [p for p in r.points if p.estimate is not None]
    if not ok:
        return ["(no point runs: nothing to plot)"]
    devices = r.knob == "devices"
    rate = (lambda e: e.throughput.tokens_per_s_per_device) if devices else (lambda e: e.throughput.tokens_per_s)
    top = max(rate(p.estimate) for p in ok if p.estimate is not None)
    ideal = rate(ok[0].estimate) / top if devices and ok[0].estimate is not None else None
    width = max(len(r.knob), *(len(label(r, p.value)) for p in r.points))
    title = "tokens/s per device (┆ ideal)" if devices else "tokens/s"
    bar_width, mfu_width = BAR_WIDTH, MFU_WIDTH
    if columns is not None:
        # a row: label, step, bar, rate, MFU bar, MFU, then the scaling (its header is 9 wide) and
        # '(does not fit)' where shown
        fixed = width + 2 + 9 + 2 + 1 + 8 + 2 + 1 + 4 + (9 if devices else 0) \
            + (16 if any(not p.estimate.memory.fits for p in ok if p.estimate is not None) else 0)
        spare = columns - fixed
        mfu_width = max(MIN_MFU_WIDTH, min(MFU_WIDTH, spare - MIN_BAR_WIDTH))
        bar_width = max(MIN_BAR_WIDTH, min(BAR_WIDTH, spare - mfu_width))
    lines = (["┆ marks the ideal: the first point's tokens/s per device (linear scaling)"] if devices else []) + \
        [(f"{r.knob:>{width}}  {'step':>9}  {title:<{bar_width + 9}}  {'MFU':<{mfu_width + 5}}"
          + ("  scaling" if devices else "")).rstrip()]
    for p, eff in zip(r.points, r.scaling_efficiency(), strict=True):
        e = p.estimate
        if e is None:
            head = f"{label(r, p.value):>{width}}  {'—':>9}  does not run"
            room = 70 if columns is None else columns - len(head) - 2
            lines.append(head + (f": {p.error}" if len(p.error) <= room else " (the reason is under the table)"))
            continue
        body = bar(rate(e) / top, bar_width)
        if ideal is not None:
            at = min(bar_width - 1, max(0, round(ideal * bar_width) - 1))
            body = body[:at] + ("┆" if body[at] == " " else body[at]) + body[at + 1:]
        lines.append(f"{label(r, p.value):>{width}}  {fmt_seconds(e.step.time_s):>9}  {body} {fmt_si(rate(e)):>8}  "
                     f"{bar(e.throughput.mfu, mfu_width)} {e.throughput.mfu:>4.0%}"
                     + (f"  {eff:>6.0%}" if eff is not None else "")
                     + ("  (does not fit)" if not e.memory.fits else ""))
    return lines


def print_sweep(r: SweepResult) -> None:
    """The table of points, then the terminal plot, on stdout."""
    from rich import box
    from rich.table import Table

    con = console()
    t = Table(title=f"Sweep of {r.knob} ({'best plan' if r.plan else 'estimate'} at each value)",
              title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    batches, batch_text = batch_note(r)
    devices, devices_text = devices_note(r)
    extra = (["devices"] if devices else []) + (["batch"] if batches else [])
    cols = [r.knob] + extra + ["step", "band", "tokens/s", "/device", "MFU", "GiB", "days",
                                                       "cost", "bottleneck"]
    cols += ["scaling"] if r.knob == "devices" else []
    for col in cols:
        t.add_column(col, justify="left" if col == "bottleneck" else "right", no_wrap=True)
    for p, eff in zip(r.points, r.scaling_efficiency(), strict=True):
        e = p.estimate
        if e is None:                   # the reason under the table: a long cell would squeeze the numbers
            t.add_row(label(r, p.value), *[""] * len(extra), "does not run", *[""] * (len(cols) - 2 - len(extra)))
            continue
        st, th, tr = e.step, e.throughput, e.training
        row = [label(r, p.value)] + ([f"{e.scenario.devices:,}"] if devices else []) \
            + ([f"{e.scenario.global_batch:,}"] if batches else [])
        row += [fmt_seconds(st.time_s), _band(e), fmt_si(th.tokens_per_s),
               fmt_si(th.tokens_per_s_per_device), f"{th.mfu:.1%}",
               f"{e.memory.per_device_bytes / GiB:.1f}" + ("" if e.memory.fits else " ✗"), f"{tr.time_days:,.1f}",
               "n/a" if tr.cost_usd is None else "$" + fmt_si(tr.cost_usd).replace(" ", ""), st.bottleneck]
        row += [f"{eff:.0%}"] if r.knob == "devices" else []
        t.add_row(*row)
    print_table(con, t)
    for p in r.points:
        if p.estimate is None:
            con.print(f"{r.knob} {label(r, p.value)} does not run: {p.error}", highlight=False)
    if devices_text:
        con.print(devices_text, style="dim")
    if batch_text:
        con.print(batch_text, style="dim")
    if r.plan:
        plans = Table(title="The plan at each value", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for col in (r.knob, "plan", "recompute"):
            plans.add_column(col, justify="right" if col == r.knob else "left", no_wrap=True)
        for p in r.points:
            if p.estimate is not None:
                plans.add_row(label(r, p.value), _layout(p.estimate), p.estimate.scenario.recompute)
        con.print(plans)
    con.print()
    for line in terminal_plot(r, con.width):
        con.print(line, markup=False, highlight=False)
    seen: list[str] = []                 # numbers trainest cannot stand behind, as estimate and plan note them
    for p in r.points:
        if p.estimate is not None:
            seen += [n for n in notes(p.estimate.scenario) if n not in seen]
    for note in seen:
        con.print(f"Note: {note}", style="dim", highlight=False)


def devices_note(r: SweepResult) -> tuple[bool, str]:
    """(show a devices column, the note under the table) when the device count changes across the points of a
    sweep of another knob (a tp sweep without --devices takes the fewest devices that hold tp·pp·cp): a
    faster step on more devices must not read as a faster layout on the same machine."""
    runs = [p.estimate.scenario for p in r.points if p.estimate is not None]
    counts = sorted({s.devices for s in runs})
    if r.knob == "devices" or len(counts) < 2:
        return False, ""
    given = "" if any("devices" not in s.derived for s in runs) else "; give --devices to hold it"
    return True, (f"devices: the device count changes across the points ({counts[0]:,} to {counts[-1]:,}: the "
                  f"default, at least tp·pp·cp{given})")


def batch_note(r: SweepResult) -> tuple[bool, str]:
    """(show a batch column, the note under the table) when the user gave no global batch: each point
    takes the default (0.5M tokens; a multiple of dp × micro-batch, with --plan of the largest device
    count swept), which a table of steps must not hide. (False, '') when it was given or is swept."""
    runs = [p.estimate.scenario for p in r.points if p.estimate is not None]
    if r.knob == "global_batch" or not any("global_batch" in s.derived for s in runs):
        return False, ""
    rule = "0.5M tokens, a multiple of the device count" if r.plan else "0.5M tokens, a multiple of dp × micro-batch"
    sizes = sorted({s.global_batch for s in runs})
    if len(sizes) > 1:
        return True, (f"batch: the global batch in sequences, derived at each point ({rule}): {sizes[0]:,} to "
                      f"{sizes[-1]:,}; give --global-batch to hold it")
    return False, (f"Global batch {sizes[0]:,} sequences at every point (default: {rule}); give --global-batch "
                   f"to change it")


def _band(e: Any) -> str:
    """The band as percentages of the step (the same for the days and the cost)."""
    return band_pct(e)


def write_figure(r: SweepResult, path: str, fmt: str) -> str:
    """Write the sweep as a PNG or SVG figure (step time with its band, throughput with the ideal when
    the device count is swept, MFU); SpecError with the install line when matplotlib is missing."""
    if not path.strip():
        raise SpecError(f"--{fmt} {path!r} is an empty file name; give one such as sweep.{fmt}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SpecError(f"--{fmt} needs matplotlib, which the core install leaves out: {PLOT_EXTRA}") from None
    from trainest.report.sweep_figure import draw
    fig = draw(plt, r)
    try:
        fig.savefig(path, format=fmt, dpi=150, bbox_inches="tight")
    except OSError as exc:
        raise SpecError(f"cannot write --{fmt} {path!r}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
    return path
