"""`trainest estimate`: its JSON document and its tables (scenario, step, throughput, memory, run)."""

from __future__ import annotations

from typing import Any

from trainest import SCHEMA_VERSION
from trainest.estimate import Estimate
from trainest.report import clean, console, fmt_gib, fmt_money, fmt_seconds, fmt_si
from trainest.scenario import Scenario, scenario_mapping

NO_OVERLAP_SHOWN_ABOVE = 0.005     # show the no-overlap bound when it exceeds the step by more than this
TERM_ABOUT = {
    "compute": "compute-bound GEMMs and attention at achievable FLOP/s",
    "memory": "memory-bound kernels (norms, activations, optimizer) at achievable HBM bandwidth",
    "communication": "exposed TP {tp} / CP {cp} / PP {pp} / DP {dp}{ep_text}",
    "bubble": "pipeline fill and drain, (p-1)/v = {bubble:.2f} micro-batch times",
    "overhead": "kernel launch and synchronisation per layer",
}


def estimate_dict(e: Estimate, warnings: list[str] | None = None) -> dict[str, Any]:
    """The `trainest estimate --json` document (schema: docs/schema/estimate.schema.json)."""
    doc = {
        "schema_version": SCHEMA_VERSION,
        "inputs": scenario_mapping(e.scenario),
        "step": e.step._asdict(),
        "throughput": e.throughput._asdict(),
        "memory": e.memory._asdict(),
        "training": e.training._asdict(),
        "warnings": list(warnings or []),
    }
    return clean(doc)


def _batch_default(s: Scenario) -> str:
    """How a defaulted global batch was derived (dp × micro-batch, or the built-in default scenario)."""
    return " (default dp×micro-batch)" if s.global_batch == s.parallel.dp * s.micro_batch else " (default)"


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
    text = (f"tp={p.tp} pp={p.pp} dp={p.dp}{' (derived)' if 'parallel.dp' in s.derived else ''} cp={p.cp} "
            f"vpp={p.vpp} zero={p.zero} sequence-parallel={'on' if p.sequence_parallel else 'off'}")
    if s.model.moe is not None:
        text += f" ep={p.ep}{' (default)' if 'parallel.ep' in s.derived else ''} etp={p.etp} edp={p.edp}"
    extras = [text for text, shown in (("tp-overlap=on", p.tp_overlap), (f"dp-shard={p.dp_shard}", p.dp_shard),
                                       (f"moe-overlap={p.moe_overlap}", s.model.moe is not None),
                                       (f"pipeline-split={p.pipeline_split}", p.pipeline_split != "even"),
                                       (f"dp-collectives={p.dp_collectives}", p.dp_collectives != "hierarchical"))
              if shown]
    return " ".join([text, *extras])


def model_text(m) -> str:
    """The model in one line: parameters (total and active for MoE), shape, experts, latent attention."""
    params = (f"{m.params / 1e9:.2f} B params" if m.moe is None else
              f"{m.params / 1e9:.2f} B params ({m.active_params / 1e9:.2f} B active)")
    text = (f"{m.name}: {params}, L={m.layers} h={m.hidden} f={m.ffn_hidden} a={m.heads} g={m.kv_heads} V={m.vocab} "
            f"{m.mlp}{', dropout' if m.dropout else ''}")
    if m.moe is not None:
        e = m.moe
        text += (f"; MoE E={e.experts} top-{e.top_k} f_e={e.expert_ffn_hidden}"
                 + (f" shared {e.shared_experts}×{e.shared_width}" if e.shared_experts else "")
                 + f", {m.moe_layers} of {m.layers} layers, imbalance {e.imbalance:g}"
                 + (f", capacity {e.capacity_factor:g}" if e.capacity_factor is not None else ""))
    if m.mla is not None:
        a = m.mla
        text += f"; MLA r_q={a.q_lora_rank} r_kv={a.kv_lora_rank} d_qk={a.qk_head_dim} d_v={a.v_head_dim}"
    return text


def scenario_table(s: Scenario):
    """What was estimated, each value marked `(default)` where it was derived."""
    derived = set(s.derived)

    def mark(key: str, text: str) -> str:
        return f"{text}  [dim](default)[/dim]" if key in derived else text

    m = s.model
    return _key_value_table("Scenario", [
        ("model", mark("model", model_text(m))),
        ("sequence", mark("seq_len", f"{s.seq_len} tokens")),
        ("hardware", mark("hardware", f"{s.hardware.name} ({s.hardware.display_name}), {s.devices} devices, "
                                      f"{s.devices_per_node} per node")),
        ("precision", mark("precision", f"{s.precision} GEMMs, FP32 master weights and Adam state")),
        ("parallel", layout_text(s)),
        ("batch", f"micro-batch {s.micro_batch}{' (default)' if 'micro_batch' in derived else ''}, global "
                  f"{s.global_batch} sequences{_batch_default(s) if 'global_batch' in derived else ''}"
                  f" = {s.tokens_per_step:,} tokens, {s.micro_batches} micro-batches per step"),
        ("recompute", mark("recompute", s.recompute) + f", attention {s.attention}"
         + (f", kernels {s.kernels}" if s.kernels != "fused" else "")),
    ])


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
    ep_text = f" / EP {values['ep']}" if e.scenario.model.moe is not None else ""
    for k in ("compute", "memory", "communication", "bubble", "overhead"):
        about = TERM_ABOUT[k].format(**values, bubble=(p.pp - 1) / p.vpp, ep_text=ep_text)
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
    t = Table(title=f"Memory per device: {fmt_gib(me.per_device_bytes)} of {fmt_gib(me.capacity_bytes)} "
                    f"({'fits' if me.fits else 'DOES NOT FIT'})", title_justify="left", min_width=62)
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
    """Rich tables on stdout: scenario, step breakdown, throughput, memory, whole run."""
    con = console()
    for table in (scenario_table(e.scenario), step_table(e), throughput_table(e), memory_table(e), run_table(e)):
        con.print(table)
