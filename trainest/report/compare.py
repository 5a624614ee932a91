"""`trainest compare`: its JSON document and its table (one row per hardware, ranked)."""

from __future__ import annotations

from typing import Any

from trainest import SCHEMA_VERSION
from trainest.compare import Comparison, Entry, objective_value
from trainest.report import clean, console, fmt_money, fmt_seconds, fmt_si, print_table
from trainest.report.estimate import band_pct, band_source, estimate_dict
from trainest.report.plan import _layout, batch_default_note, estimate_args
from trainest.scenario import scenario_mapping
from trainest.units import GiB


def entry_dict(en: Entry, objective: str) -> dict[str, Any]:
    """One hardware: its plan (layout and the `trainest estimate` options that reproduce it) and the
    plan's step, throughput, memory, training and band exactly as `trainest estimate --json` gives them."""
    doc: dict[str, Any] = {"hardware": en.hardware, "display_name": en.display_name, "calibrated": en.calibrated,
                           "file": en.file, "efficiency_basis": en.efficiency_basis or None,
                           "can_run": en.can_run, "reason": en.reason or None}
    e = en.estimate
    if e is None:
        return {**doc, "plan": None, "step": None, "throughput": None, "memory": None, "training": None,
                "band": None, "objective_value": None}
    full = estimate_dict(e)
    inputs = full["inputs"]
    plan = {"devices": inputs["devices"], "parallel": inputs["parallel"], "micro_batch": inputs["micro_batch"],
            "micro_batches": inputs["micro_batches"], "recompute": inputs["recompute"],
            "estimate_args": ["--hardware", en.reference, *estimate_args(e)]}
    return {**doc, "plan": plan, **{k: full[k] for k in ("step", "throughput", "memory", "training", "band")},
            "objective_value": objective_value(e, objective)}


JOB_KEYS = ("model", "seq_len", "precision", "global_batch", "attention", "kernels", "tokens", "pue",
            "grid_gco2_per_kwh")


def compare_dict(c: Comparison) -> dict[str, Any]:
    """The `trainest compare --json` document (schema: docs/schema/compare.schema.json)."""
    full = scenario_mapping(c.job)
    job = {**{k: full[k] for k in JOB_KEYS},
           "parallel": {k: full["parallel"][k] for k in ("tp_overlap", "dp_collectives")}}
    derived = (["devices"] if c.devices_default else []) + (["global_batch"] if "global_batch" in c.job.derived else [])
    if derived:                               # defaults, not the user's
        job["derived"] = derived
    return clean({"schema_version": SCHEMA_VERSION, "job": job,
                  "devices": c.devices, "deadline_s": c.deadline_s, "budget_usd": c.budget_usd,
                  "objective": c.objective, "compare": [entry_dict(en, c.objective) for en in c.entries]})


def _money(x: float) -> str:
    """`$9.88M`: compact dollars for the table."""
    return "$" + fmt_si(x).replace(" ", "")


def _cells(rank: int, en: Entry) -> list[str]:
    e = en.estimate
    assert e is not None
    st, tr = e.step, e.training
    return [str(rank), en.label + ("" if en.calibrated else " *"), f"{e.scenario.devices:,}",
            fmt_seconds(st.time_s), f"{tr.time_days:,.1f}", "n/a" if tr.cost_usd is None else _money(tr.cost_usd),
            band_pct(e), "n/a" if tr.energy_kwh is None else f"{tr.energy_kwh / 1000:,.0f}",
            "n/a" if tr.co2_kg is None else f"{tr.co2_kg / 1000:,.0f}", f"{e.throughput.mfu:.0%}",
            f"{e.memory.per_device_bytes / GiB:.0f}", st.bottleneck]


def _how(c: Comparison) -> str:
    if c.deadline_s is not None:
        return f"the fewest devices in {c.devices} that finish within {fmt_seconds(c.deadline_s)}"
    if c.budget_usd is not None:
        return f"its fastest plan on {c.devices} devices that costs at most {fmt_money(c.budget_usd)}"
    return f"its best plan on {c.devices} devices" + (" (default)" if c.devices_default else "")


def print_compare(c: Comparison, job_args: str = "") -> None:
    """The comparison table on stdout, then each plan with its band's source, the command that reproduces
    the first (`job_args`: the job options as given), and the entries that cannot run."""
    from rich import box
    from rich.table import Table

    con = console()
    runnable = [en for en in c.entries if en.estimate is not None]
    t = Table(title=f"{len(runnable)} of {len(c.entries)} hardware entries, each at {_how(c)}; ranked by "
                    f"{c.objective}", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    caption = ("N devices; step and days to train the tokens; cost at catalog prices; band: the error band of "
                 "step, days and cost (measured/predicted of runs like this); MWh at rated power × PUE; t CO2 at "
                 "the grid intensity; MFU; GiB per device; * = not calibrated on measured runs (wider band)")
    for col in ("#", "hardware", "N", "step", "days", "cost", "band", "MWh", "t CO2", "MFU", "GiB", "bottleneck"):
        t.add_column(col, justify="left" if col in ("hardware", "bottleneck") else "right", no_wrap=True)
    for i, en in enumerate(runnable, 1):
        t.add_row(*_cells(i, en), style="bold" if i == 1 else "")
    print_table(con, t)
    con.print(caption, style="dim")     # (as the table's caption, rich would size the columns by its text)
    if note := batch_default_note(c.job):
        con.print(f"Global batch {c.job.global_batch} x {c.job.seq_len} tokens{note}.")
    p = Table(title="Plans and where each band comes from", title_justify="left", box=box.SIMPLE_HEAD,
              pad_edge=False)
    for col in ("hardware", "plan", "recompute", "band from"):
        p.add_column(col, no_wrap=col != "band from")
    for en in runnable:
        assert en.estimate is not None
        p.add_row(en.label, _layout(en.estimate), en.estimate.scenario.recompute, band_source(en.estimate))
    print_table(con, p)
    if runnable and runnable[0].estimate is not None:
        con.print(f"Reproduce the first: [dim]trainest estimate {job_args + ' ' if job_args else ''}--hardware "
                  f"{runnable[0].reference} {' '.join(estimate_args(runnable[0].estimate))}[/dim]", highlight=False)
    for en in c.entries:
        if en.estimate is None:
            con.print(f"[bold]{en.label}[/bold] cannot run this job: {en.reason}", highlight=False)
