"""`trainest estimate`: its JSON document and its tables (scenario, step, throughput, memory, run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainest import SCHEMA_VERSION
from trainest.catalog import specs_dir
from trainest.estimate import Estimate
from trainest.report import clean, console, fmt_gib, fmt_money, fmt_seconds, fmt_si, print_table
from trainest.scenario import Scenario, scenario_mapping
from trainest.step.schedule import bubble_slots
from trainest.units import plural

NO_OVERLAP_SHOWN_ABOVE = 0.005     # show the no-overlap bound when it exceeds the step by more than this
TERM_ABOUT = {
    "compute": "compute-bound GEMMs and attention at achievable FLOP/s",
    "memory": "memory-bound kernels (norms, activations, optimizer) at achievable HBM bandwidth",
    "communication": "exposed TP {tp} / CP {cp} / PP {pp} / DP {dp}",
    "bubble": "pipeline fill and drain, {bubble:.2f} micro-batch times ({bubble_rule})",
    "overhead": "kernel launch and synchronisation per layer",
}


BASIS_WORDS = {
    "fitted": "fitted on measured runs of this device",
    "inherited": "inherited from a sibling die's fit",
    "profile": "calibrated profile (trainest calibrate on your runs)",
    "median prior": "not calibrated: prior = median of the devices fitted on their own runs",
    "prior": "not calibrated: generic prior",
}


def hardware_dict(s: Scenario) -> dict[str, Any]:
    """What the estimate knows about the hardware's numbers: whether its efficiencies are calibrated
    (validated on measured runs), how they were obtained, its file, and the unknown facts the layout
    uses with the values assumed for them."""
    from trainest.step.collectives import assumed_facts
    hw, e = s.hardware, s.hardware.efficiency
    return {"name": hw.name, "calibrated": e.fitted, "efficiency_basis": e.basis, "efficiency_method": e.method,
            "file": None if is_bundled(hw) else hw.path,
            "unknown_facts_used": assumed_facts(hw, s.devices_per_node, s.devices)}


def is_bundled(hw: Any) -> bool:
    """True for a catalog entry (specs/hardware), False for a file the user gave (a profile, a probe)."""
    return Path(hw.path).resolve().parent == (specs_dir() / "hardware").resolve()


def notes(s: Scenario) -> list[str]:
    """Footnotes for numbers trainest cannot stand behind (the tables print them; JSON: `hardware`)."""
    hw, e = s.hardware, s.hardware.efficiency
    out = []
    if not e.fitted:
        out.append(f"{hw.name}'s efficiencies are not validated on measured runs ({BASIS_WORDS[e.basis]}): expect "
                   f"larger errors than on calibrated hardware (docs/validation.md, priors for devices without runs)")
    used = hardware_dict(s)["unknown_facts_used"]
    if used:
        out.append(f"unknown in the {hw.name} file and assumed: " + "; ".join(used))
    return out


def estimate_dict(e: Estimate, warnings: list[str] | None = None) -> dict[str, Any]:
    """The `trainest estimate --json` document (schema: docs/schema/estimate.schema.json)."""
    doc = {
        "schema_version": SCHEMA_VERSION,
        "hardware": hardware_dict(e.scenario),
        "inputs": scenario_mapping(e.scenario),
        "step": e.step._asdict(),
        "throughput": e.throughput._asdict(),
        "memory": e.memory._asdict(),
        "training": e.training._asdict(),
        "warnings": list(warnings or []),
    }
    return clean(doc)


def _batch_default(s: Scenario) -> str:
    """How a defaulted global batch was derived."""
    return " (default: 0.5M tokens, a multiple of dp×micro-batch)"


def _key_value_table(title: str, rows: list[tuple[str, str]], **options: Any):
    from rich.table import Table
    t = Table(title=title, show_header=False, title_justify="left", **options)
    t.add_column("what", style="bold")
    t.add_column("value")
    for row in rows:
        t.add_row(*row)
    return t


def layout_text(s: Scenario) -> str:
    """The parallel layout in words, with the framework settings that differ from the defaults."""
    p = s.parallel
    zero_default = (" (default: FSDP)" if p.pp == 1 else " (default with pp > 1: distributed optimizer)") \
        if "parallel.zero" in s.derived else ""
    text = (f"tp={p.tp} pp={p.pp} dp={p.dp}{' (derived)' if 'parallel.dp' in s.derived else ''} cp={p.cp} "
            f"vpp={p.vpp} zero={p.zero}{zero_default} sequence-parallel={'on' if p.sequence_parallel else 'off'}")
    extras = [text for text, shown in (("tp-overlap=on", p.tp_overlap), (f"dp-shard={p.dp_shard}", p.dp_shard),
                                       (f"pipeline-split={p.pipeline_split}", p.pipeline_split != "even"),
                                       (f"dp-collectives={p.dp_collectives}", p.dp_collectives != "hierarchical"))
              if shown]
    return " ".join([text, *extras])


def scenario_table(s: Scenario):
    """What was estimated, each value marked `(default)` where it was derived."""
    derived = set(s.derived)

    def mark(key: str, text: str) -> str:
        return f"{text}  [dim](default)[/dim]" if key in derived else text

    m = s.model
    return _key_value_table("Scenario", [
        ("model", mark("model", f"{m.name}: {m.params / 1e9:.2f} B params, L={m.layers} h={m.hidden} "
                                f"f={m.ffn_hidden} a={m.heads} g={m.kv_heads} V={m.vocab} {m.mlp}"
                                f"{', dropout' if m.dropout else ''}")),
        ("sequence", mark("seq_len", f"{s.seq_len} tokens")),
        ("hardware", mark("hardware", f"{s.hardware.name} ({s.hardware.display_name}), "
                                      f"{plural(s.devices, 'device')}, {s.devices_per_node} per node")),
        ("efficiencies", efficiency_text(s)),
        ("precision", mark("precision", f"{s.precision} GEMMs, FP32 master weights and Adam state")),
        ("parallel", layout_text(s)),
        ("batch", f"micro-batch {s.micro_batch}{' (default)' if 'micro_batch' in derived else ''}, global "
                  f"{plural(s.global_batch, 'sequence')}{_batch_default(s) if 'global_batch' in derived else ''}"
                  f" = {s.tokens_per_step:,} tokens, {plural(s.micro_batches, 'micro-batch', 'micro-batches')} "
                  f"per step"),
        ("recompute", mark("recompute", s.recompute) + f", attention {s.attention}"
         + (f", kernels {s.kernels}" if s.kernels != "fused" else "")),
    ])


def efficiency_text(s: Scenario) -> str:
    """Where the hardware's achievable efficiencies come from, with the file for a user's file or profile."""
    e = s.hardware.efficiency
    return BASIS_WORDS[e.basis] + ("" if is_bundled(s.hardware) else f": {s.hardware.path}")


def step_table(e: Estimate):
    """The step's five terms, their shares and what each is; the bottleneck in bold."""
    from rich.table import Table
    st, p = e.step, e.scenario.parallel
    # the overlap policy's upper bound, shown when overlap hides anything that matters (≥ 0.5 %)
    bound = (f"; {fmt_seconds(st.no_overlap_time_s)} with no overlap"
             if st.no_overlap_time_s > st.time_s * (1.0 + NO_OVERLAP_SHOWN_ABOVE) else "")
    t = Table(title=f"Step: {fmt_seconds(st.time_s)}  (bottleneck: {st.bottleneck}{bound})", title_justify="left")
    t.add_column("term")
    t.add_column("time", justify="right")
    t.add_column("share", justify="right")
    t.add_column("what it is")
    values = {k: fmt_seconds(v) for k, v in st.communication_detail_s.items()}
    m = e.scenario.micro_batches
    rule = "(p-1)/v" if m >= p.pp else "p-m+(m-1)/v: fewer micro-batches than stages"
    for k in ("compute", "memory", "communication", "bubble", "overhead"):
        about = TERM_ABOUT[k].format(**values, bubble=bubble_slots(p.pp, p.vpp, m), bubble_rule=rule)
        t.add_row(k, fmt_seconds(getattr(st, f"{k}_s")), f"{st.shares[k]:.1%}", about,
                  style="bold" if k == st.bottleneck else "")
    return t


def throughput_table(e: Estimate):
    th = e.throughput
    return _key_value_table("Throughput", [
        ("tokens/s", f"{fmt_si(th.tokens_per_s)} total, {fmt_si(th.tokens_per_s_per_device)} per device"),
        ("model FLOP/s per device", f"{th.model_tflops_per_device:.1f} TFLOP/s of {th.peak_tflops_per_device:.0f}"
                                    f" peak ({e.scenario.precision})"),
        ("MFU / HFU", f"{th.mfu:.1%} / {th.hfu:.1%}"),
    ])


def memory_table(e: Estimate):
    from rich.table import Table
    me = e.memory
    margin = me.required_headroom_bytes
    verdict = "fits" if me.fits else "DOES NOT FIT"
    if margin:
        verdict += f", keeping {fmt_gib(margin)} free (--memory-headroom {e.scenario.memory_headroom})"
    t = Table(title=f"Memory per device: {fmt_gib(me.per_device_bytes)} of {fmt_gib(me.capacity_bytes)} "
                    f"({verdict})", title_justify="left", min_width=62)
    t.add_column("part")
    t.add_column("size", justify="right")
    for k in ("weights", "gradients", "optimizer", "activations", "overhead"):
        t.add_row(k, fmt_gib(getattr(me, f"{k}_bytes")))
    return t


def run_table(e: Estimate):
    tr, derived = e.training, set(e.scenario.derived)
    price = "" if tr.price_usd_per_hour is None else f" at ${tr.price_usd_per_hour:.2f}/device-hour"
    catalog_price = " (catalog price)" if "price_per_hour" in derived and tr.price_usd_per_hour is not None else ""
    return _key_value_table("Whole run", [
        ("tokens", f"{fmt_si(tr.tokens)}" + ("  (default: 20 per parameter)" if "tokens" in derived else "")),
        ("steps", f"{tr.steps:,}"),
        ("wall time", f"{tr.time_days:.2f} days"),
        ("device-hours", f"{tr.device_hours:,.0f}"),
        ("energy", "n/a (device power unknown)" if tr.energy_kwh is None else
         f"{tr.energy_kwh:,.0f} kWh (rated power, PUE {tr.pue:g})"),
        ("cost", fmt_money(tr.cost_usd) + price + catalog_price),
    ])


def print_estimate(e: Estimate) -> None:
    """Rich tables on stdout: scenario, step breakdown, throughput, memory, whole run, and the notes."""
    con = console()
    for table in (scenario_table(e.scenario), step_table(e), throughput_table(e), memory_table(e), run_table(e)):
        print_table(con, table)
    for note in notes(e.scenario):
        con.print(f"Note: {note}")
