"""All rendering: JSON documents built from the result dataclasses, and rich tables for people.

rich is imported only inside the table functions, so `--json` never pays for it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from typing import Any

from trainest.estimate import SCHEMA_VERSION, Estimate
from trainest.scenario import scenario_mapping
from trainest.units import GiB

NO_OVERLAP_SHOWN_ABOVE = 0.005     # show the no-overlap bound when it exceeds the step by more than this


def _clean(value: Any) -> Any:
    """Make a value JSON-safe: NaN/inf never reach the output (they become null)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def estimate_dict(e: Estimate, warnings: list[str] | None = None) -> dict[str, Any]:
    """The `trainest estimate --json` document (schema: docs/schema/estimate.schema.json)."""
    doc = {
        "schema_version": SCHEMA_VERSION,
        "inputs": scenario_mapping(e.scenario),
        "step": dataclasses.asdict(e.step),
        "throughput": dataclasses.asdict(e.throughput),
        "memory": dataclasses.asdict(e.memory),
        "training": dataclasses.asdict(e.training),
        "warnings": list(warnings or []),
    }
    return _clean(doc)


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, allow_nan=False)


# --------------------------------------------------------------------------------------- formatting

def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "n/a"
    if s >= 2 * 86400:
        return f"{s / 86400:.1f} days"
    if s >= 2 * 3600:
        return f"{s / 3600:.1f} h"
    if s >= 120:
        return f"{s / 60:.1f} min"
    if s >= 1:
        return f"{s:.3f} s"
    return f"{s * 1e3:.2f} ms"


def fmt_si(x: float | None, unit: str = "") -> str:
    """Decimal prefixes (FLOP/s, tokens/s, bandwidth)."""
    if x is None:
        return "n/a"
    for factor, prefix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= factor:
            return f"{x / factor:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}".strip()


def fmt_gib(b: float) -> str:
    """Memory capacity in GiB (binary), labelled."""
    return f"{b / GiB:.1f} GiB"


def fmt_money(x: float | None) -> str:
    return "n/a (no price: use --price-per-hour)" if x is None else f"${x:,.0f}"


def _console(stderr: bool = False):
    from rich.console import Console
    no_color = bool(os.environ.get("NO_COLOR"))
    # NO_COLOR (no-color.org): no ANSI escapes at all; rich's no_color alone still emits bold/italic.
    return Console(stderr=stderr, no_color=no_color, color_system=None if no_color else "auto", highlight=False,
                   soft_wrap=False, width=None if sys.stdout.isatty() else 110)


def _batch_default(s) -> str:
    """How a defaulted global batch was derived (dp × micro-batch, or the built-in default scenario)."""
    return " (default dp×micro-batch)" if s.global_batch == s.parallel.dp * s.micro_batch else " (default)"


def print_estimate(e: Estimate) -> None:
    """Rich tables: scenario, step breakdown, throughput, memory, whole run."""
    from rich.table import Table
    con = _console()
    s = e.scenario
    derived = set(s.derived)

    def mark(key: str, text: str) -> str:
        return f"{text}  [dim](default)[/dim]" if key in derived else text

    p = s.parallel
    t = Table(title="Scenario", show_header=False, title_justify="left")
    t.add_column("what", style="bold")
    t.add_column("value")
    m = s.model
    t.add_row("model", mark("model", f"{m.name}: {m.params / 1e9:.2f} B params, L={m.layers} h={m.hidden} "
                                     f"f={m.ffn_hidden} a={m.heads} g={m.kv_heads} V={m.vocab} {m.mlp}"
                                     f"{', dropout' if m.dropout else ''}"))
    t.add_row("sequence", mark("seq_len", f"{s.seq_len} tokens"))
    t.add_row("hardware", mark("hardware", f"{s.hardware.name} ({s.hardware.display_name}), {s.devices} devices, "
                                           f"{s.devices_per_node} per node"))
    t.add_row("precision", mark("precision", f"{s.precision} GEMMs, FP32 master weights and Adam state"))
    layout = (f"tp={p.tp} pp={p.pp} dp={p.dp}{' (derived)' if 'parallel.dp' in derived else ''} cp={p.cp} "
              f"vpp={p.vpp} zero={p.zero} sequence-parallel={'on' if p.sequence_parallel else 'off'}")
    # the framework settings, shown where they differ from the defaults
    extras = [text for text, shown in (("tp-overlap=on", p.tp_overlap), (f"dp-shard={p.dp_shard}", p.dp_shard),
                                       (f"pipeline-split={p.pipeline_split}", p.pipeline_split != "even"),
                                       (f"dp-collectives={p.dp_collectives}", p.dp_collectives != "hierarchical"))
              if shown]
    layout = " ".join([layout, *extras])
    t.add_row("parallel", layout)
    t.add_row("batch", f"micro-batch {s.micro_batch}{' (default)' if 'micro_batch' in derived else ''}, global "
                       f"{s.global_batch} sequences{_batch_default(s) if 'global_batch' in derived else ''}"
                       f" = {s.tokens_per_step:,} tokens, {s.micro_batches} micro-batches per step")
    t.add_row("recompute", mark("recompute", s.recompute) + f", attention {s.attention}"
              + (f", kernels {s.kernels}" if s.kernels != "fused" else ""))
    con.print(t)

    st = e.step
    # the overlap policy's upper bound, shown when overlap hides anything that matters (≥ 0.5 %)
    bound = (f"; {fmt_seconds(st.no_overlap_time_s)} with no overlap"
             if st.no_overlap_time_s > st.time_s * (1.0 + NO_OVERLAP_SHOWN_ABOVE) else "")
    t = Table(title=f"Step: {fmt_seconds(st.time_s)}  (bottleneck: {st.bottleneck}{bound})", title_justify="left")
    t.add_column("term")
    t.add_column("time", justify="right")
    t.add_column("share", justify="right")
    t.add_column("what it is")
    about = {
        "compute": "compute-bound GEMMs and attention at achievable FLOP/s",
        "memory": "memory-bound kernels (norms, activations, optimizer) at achievable HBM bandwidth",
        "communication": "exposed TP {tp} / CP {cp} / PP {pp} / DP {dp}".format(
            **{k: fmt_seconds(v) for k, v in st.communication_detail_s.items()}),
        "bubble": f"pipeline fill and drain, (p-1)/v = {(p.pp - 1) / p.vpp:.2f} micro-batch times",
        "overhead": "kernel launch and synchronisation per layer",
    }
    for k in ("compute", "memory", "communication", "bubble", "overhead"):
        style = "bold" if k == st.bottleneck else ""
        t.add_row(k, fmt_seconds(getattr(st, f"{k}_s")), f"{st.shares[k]:.1%}", about[k], style=style)
    con.print(t)

    th = e.throughput
    t = Table(title="Throughput", show_header=False, title_justify="left")
    t.add_column("what", style="bold")
    t.add_column("value")
    t.add_row("tokens/s", f"{fmt_si(th.tokens_per_s)} total, {fmt_si(th.tokens_per_s_per_device)} per device")
    t.add_row("model FLOP/s per device", f"{th.model_tflops_per_device:.1f} TFLOP/s of {th.peak_tflops_per_device:.0f}"
                                         f" peak ({s.precision})")
    t.add_row("MFU / HFU", f"{th.mfu:.1%} / {th.hfu:.1%}")
    con.print(t)

    me = e.memory
    t = Table(title=f"Memory per device: {fmt_gib(me.per_device_bytes)} of {fmt_gib(me.capacity_bytes)} "
                    f"({'fits' if me.fits else 'DOES NOT FIT'})", title_justify="left", min_width=62)
    t.add_column("part")
    t.add_column("size", justify="right")
    for k in ("weights", "gradients", "optimizer", "activations", "overhead"):
        t.add_row(k, fmt_gib(getattr(me, f"{k}_bytes")))
    con.print(t)

    tr = e.training
    t = Table(title="Whole run", show_header=False, title_justify="left")
    t.add_column("what", style="bold")
    t.add_column("value")
    t.add_row("tokens", f"{fmt_si(tr.tokens)}" + ("  (default: 20 per parameter)" if "tokens" in derived else ""))
    t.add_row("steps", f"{tr.steps:,}")
    t.add_row("wall time", f"{tr.time_days:.2f} days")
    t.add_row("device-hours", f"{tr.device_hours:,.0f}")
    t.add_row("energy", "n/a (device power unknown)" if tr.energy_kwh is None else
              f"{tr.energy_kwh:,.0f} kWh (rated power, PUE {tr.pue:g})")
    price = "" if tr.price_usd_per_hour is None else f" at ${tr.price_usd_per_hour:.2f}/device-hour"
    t.add_row("cost", fmt_money(tr.cost_usd) + price + (" (catalog price)" if "price_per_hour" in derived
                                                        and tr.price_usd_per_hour is not None else ""))
    con.print(t)


def warn(message: str) -> None:
    """A warning line on stderr (plain text; never on stdout)."""
    print(f"Warning: {message}", file=sys.stderr)


PROGRESS_AFTER_S = 1.0   # draw a progress bar only for work on course to take longer than this


class LazyProgress:
    """A rich progress bar on stderr, started only once the work is projected to exceed
    PROGRESS_AFTER_S; call it with (done, total), then close() it."""

    def __init__(self, what: str, enabled: bool = True) -> None:
        import time

        self._clock = time.perf_counter
        self.what, self.enabled, self.t0 = what, enabled, time.perf_counter()
        self.bar = None
        self.task = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or done <= 0:
            return
        if self.bar is None:
            elapsed = self._clock() - self.t0
            if done >= total or elapsed * total / done < PROGRESS_AFTER_S:
                return
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn
            self.bar = Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                                TimeRemainingColumn(), console=_console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.what, total=total)
        self.bar.update(self.task, completed=done, total=total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
