"""`trainest compare`: its JSON document and its table (one row per hardware, ranked)."""

from __future__ import annotations

from typing import Any

from trainest import SCHEMA_VERSION
from trainest.compare import Comparison, Entry, objective_value
from trainest.knobs import HOST_NAMES, SIMPLE_NAMES
from trainest.report import clean, console, fmt_money, fmt_seconds, fmt_si, print_command, print_table
from trainest.report.estimate import band_pct, band_source, estimate_dict
from trainest.report.plan import _layout, batch_default_note, estimate_args
from trainest.scenario import scenario_mapping
from trainest.units import GiB, fmt_amount


def price_args(s: Any) -> list[str]:
    """`--price-per-hour P` where the entry's price was given (compare's --price-per-hour), not the catalog's."""
    if "price_per_hour" in s.derived or s.price_usd_per_hour is None:
        return []
    return ["--price-per-hour", f"{s.price_usd_per_hour:g}"]


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
            "estimate_args": ["--hardware", en.reference, *price_args(e.scenario), *estimate_args(e)]}
    return {**doc, "plan": plan, **{k: full[k] for k in ("step", "throughput", "memory", "training", "band")},
            "objective_value": objective_value(e, objective)}


JOB_KEYS = ("model", "seq_len", "precision", "global_batch", "attention", "kernels", *SIMPLE_NAMES, "tokens", "pue",
            "grid_gco2_per_kwh")


def compare_dict(c: Comparison) -> dict[str, Any]:
    """The `trainest compare --json` document (schema: docs/schema/compare.schema.json)."""
    full = scenario_mapping(c.job)
    job = {**{k: full[k] for k in JOB_KEYS}, **{k: full[k] for k in HOST_NAMES if k in full},
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


def _cells(rank: int, en: Entry, kilo: bool = False) -> list[str]:
    """A row of the table; `kilo`: energy in kWh and CO2 in kg (every run under a MWh), else MWh and t."""
    e = en.estimate
    assert e is not None
    st, tr = e.step, e.training
    scale = 1 if kilo else 1000
    days = f"{tr.time_days:,.1f}" if tr.time_days >= 0.1 else fmt_amount(tr.time_days)
    return [str(rank), en.label + ("" if en.calibrated else " *"), f"{e.scenario.devices:,}",
            fmt_seconds(st.time_s), days, "n/a" if tr.cost_usd is None else _money(tr.cost_usd),
            band_pct(e), "n/a" if tr.energy_kwh is None else fmt_amount(tr.energy_kwh / scale),
            "n/a" if tr.co2_kg is None else fmt_amount(tr.co2_kg / scale), f"{e.throughput.mfu:.0%}",
            f"{e.memory.per_device_bytes / GiB:.0f}", st.bottleneck]


def price_notes(entries: list[Entry]) -> str:
    """The entries whose cost is n/a (no price, and why) or rests on a catalog price over a year old."""
    missing, stale = [], []
    for en in entries:
        assert en.estimate is not None
        s = en.estimate.scenario
        if s.price_usd_per_hour is None:
            missing.append(f"{en.hardware} ({s.hardware.price_unknown})")
        elif "price_per_hour" in s.derived and s.hardware.price_stale:
            stale.append(f"{en.hardware} ({s.hardware.price_stale})")
    out = []
    if missing:
        out.append(f"No price: {'; '.join(missing)}; give --price-per-hour NAME=USD")
    if stale:
        out.append(f"Catalog price may be out of date: {'; '.join(stale)}")
    return "\n".join(out)


def small_runs(entries: list[Entry]) -> bool:
    """Every run's energy under a MWh (a fine-tune on one machine): the table gives kWh and kg CO2, whose
    digits say something, rather than a column of 0 (or <0.001) MWh and t."""
    energies = [en.estimate.training.energy_kwh for en in entries if en.estimate is not None]
    known = [x for x in energies if x is not None]
    return bool(known) and max(known) < 1000


def _how(c: Comparison) -> str:
    """How each entry's device count and plan were chosen (trainest.search.devices: with a budget, the fastest
    count within it, and within the deadline if one was given; with a deadline only, the fewest that meet it)."""
    if c.deadline_s is not None and c.budget_usd is not None:
        return (f"its fastest plan on {c.devices} devices that finishes within {fmt_seconds(c.deadline_s)} and "
                f"costs at most {fmt_money(c.budget_usd)}")
    if c.deadline_s is not None:
        return f"the fewest devices in {c.devices} that finish within {fmt_seconds(c.deadline_s)}"
    if c.budget_usd is not None:
        return f"its fastest plan on {c.devices} devices that costs at most {fmt_money(c.budget_usd)}"
    return f"its best plan on {c.devices} {'device' if str(c.devices) == '1' else 'devices'}" \
        + (" (default)" if c.devices_default else "")


def print_compare(c: Comparison, job_args: list[str] | None = None) -> None:
    """The comparison table on stdout, then each plan with its band's source, the command that reproduces
    the first (`job_args`: the job options as given), and the entries that cannot run."""
    from rich import box
    from rich.table import Table

    con = console()
    runnable = [en for en in c.entries if en.estimate is not None]
    t = Table(title=f"{len(runnable)} of {len(c.entries)} hardware entries, each at {_how(c)}; ranked by "
                    f"{c.objective}", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    caption = ("N devices; step and days to train the tokens; cost at the catalog's price or --price-per-hour; "
               "band: the error band of "
                 "step, days and cost (measured/predicted of runs like this); {energy} at rated power × PUE; {co2} at "
                 "the grid intensity; MFU; GiB per device; * = not calibrated on measured runs (wider band)")
    kilo = small_runs(runnable)
    energy, co2 = ("kWh", "kg CO2") if kilo else ("MWh", "t CO2")
    caption = caption.format(energy=energy, co2=co2)
    for col in ("#", "hardware", "N", "step", "days", "cost", "band", energy, co2, "MFU", "GiB", "bottleneck"):
        t.add_column(col, justify="left" if col in ("hardware", "bottleneck") else "right", no_wrap=True)
    for i, en in enumerate(runnable, 1):
        t.add_row(*_cells(i, en, kilo), style="bold" if i == 1 else "")
    print_table(con, t)
    con.print(caption, style="dim")     # (as the table's caption, rich would size the columns by its text)
    if notes := price_notes(runnable):
        con.print(notes, highlight=False)
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
        first = runnable[0].estimate
        print_command(con, "Reproduce the first", ["estimate", *(job_args or []), "--hardware", runnable[0].reference,
                                                    *price_args(first.scenario), *estimate_args(first)])
    for en in c.entries:
        if en.estimate is None:
            con.print(f"[bold]{en.label}[/bold] is not ranked: {en.reason}", highlight=False)
