"""`trainest estimate`: its JSON document and its tables (scenario, step, throughput, memory, run)."""

from __future__ import annotations

from typing import Any

from trainest import SCHEMA_VERSION
from trainest.band import CALIBRATED, plain_words
from trainest.catalog import Hardware, is_bundled_hardware
from trainest.choices import DEFAULT_RECOMPUTE_MODULES
from trainest.estimate import Estimate, host_misfit_words
from trainest.frameworks import FRAMEWORKS, QLORA_FRAMEWORK
from trainest.pipeline_layout import rank_layers_text
from trainest.precision import weight_bytes_per_param
from trainest.report import clean, console, fmt_co2, fmt_gib, fmt_money, fmt_seconds, fmt_si, print_table
from trainest.scenario import Scenario, default_tokens_text, layout_of, scenario_mapping
from trainest.step.schedule import bubble_slots
from trainest.units import TERA, fmt_amount, plural

NO_OVERLAP_SHOWN_ABOVE = 0.005     # show the no-overlap bound when it exceeds the step by more than this
TERM_ABOUT = {
    "compute": "compute-bound GEMMs and attention at achievable FLOP/s",
    "memory": "memory-bound kernels (norms, activations, optimizer) at achievable {memory} bandwidth",
    "communication": "exposed TP {tp} / CP {cp} / PP {pp} / DP {dp}{ep_text}",
    "bubble": "pipeline fill and drain, {bubble:.2f} micro-batch times ({bubble_rule})",
    "overhead": "waiting for the host (kernel launches, Python) {host_wait} / kernel floors {kernel_floors}",
    "offload": "host link copies and the CPU's Adam step not hidden by the device's work ({link})",
}


def memory_words(hw: Hardware) -> str:
    """The device memory in words for the tables: its kind (HBM3, LPDDR5X, ...), and `unified` when
    the CPU shares it; "device memory" when the kind is not known."""
    kind = hw.memory_kind or "device memory"
    return f"{kind} unified" if hw.memory_unified else kind


def host_link_words(hw: Hardware) -> str:
    """The host link in words: its kind and per-direction rate per device."""
    link = hw.host.link
    rate = link.bytes_per_s_per_device
    return f"{link.name or link.kind}, {rate / 1e9:.0f} GB/s per direction" if rate else (link.kind or "unknown")


def host_words(hw: Hardware) -> str:
    """The host an offload uses, per device, and whether it is the file's or a typical server's (derived)."""
    h = hw.host
    if h.memory_bytes_per_device is None or h.cpu_cores_per_device is None or h.memory_bytes_per_s_per_device is None:
        return ""
    figures = ("cpu_cores", "memory_gb", "memory_gb_per_s", "devices")
    typical = [f"host.{name}" for name in figures if name in h.filled]
    what = (h.system or "the file's host") if not h.derived else f"{h.system} (derived: the file gives none)" \
        if len(typical) == len(figures) else f"{h.system} (derived: {', '.join(typical)}; the rest given)"
    return (f"; host: {what}, per device {h.cpu_cores_per_device:g} cores, {h.memory_bytes_per_device / 1e9:.0f} GB at "
            f"{h.memory_bytes_per_s_per_device / 1e9:.0f} GB/s")


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
            "efficiency_derived": list(e.derived) or None, "file": None if is_bundled(hw) else hw.path,
            "unknown_facts_used": assumed_facts(hw, s.devices_per_node, s.devices), "host": host_dict(hw)}


def host_dict(hw: Hardware) -> dict[str, Any]:
    """The host in effect (per host: its CPUs and memory, shared by `devices` devices; the link per device), and
    which of its figures are a typical server's (`derived`: None when the file and the options give them all)."""
    h, link = hw.host, hw.host.link
    rate = link.bytes_per_s_per_device
    return {"system": h.system or None, "cores": h.cpu_cores, "devices": h.devices,
            "memory_gb": None if h.memory_bytes is None else h.memory_bytes / 1e9,
            "memory_gb_per_s": None if h.memory_bytes_per_s is None else h.memory_bytes_per_s / 1e9,
            "link": link.kind, "pcie_gen": link.pcie_gen, "pcie_lanes": link.pcie_lanes,
            "link_gb_per_s_per_device": None if rate is None else rate / 1e9, "derived": h.derived or None}


def is_bundled(hw: Any) -> bool:
    """True for a catalog entry (specs/hardware), False for a file the user gave (a profile, a probe)."""
    return is_bundled_hardware(hw)


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


def estimate_dict(e: Estimate, warnings: list[str] | None = None,
                  ops: tuple[list, Any] | None = None) -> dict[str, Any]:
    """The `trainest estimate --json` document (schema: docs/schema/estimate.schema.json); with
    `ops` (`estimate --ops`), the `roofline` and `ops` of the step as well."""
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "hardware": hardware_dict(e.scenario),
        "inputs": scenario_mapping(e.scenario),
        "step": e.step._asdict(),
        "throughput": e.throughput._asdict(),
        "memory": e.memory._asdict(),
        "training": e.training._asdict(),
        "band": e.band._asdict(),
        "warnings": list(warnings or []),
    }
    if ops is not None:
        doc.update(ops_dict(ops[0], ops[1], e.step.time_s))
    return clean(doc)


def probed_text(s: Scenario) -> str:
    """`; probed on DATE by trainest probe (...)` for a hardware file the probe wrote, else empty."""
    hw = s.hardware
    if not hw.probed:
        return ""
    return (f"\n[italic]probed{' on ' + hw.probed_on if hw.probed_on else ''} by trainest probe: peaks and "
            f"bandwidth measured on that machine, efficiencies not calibrated on training runs[/italic]")


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
    what = {3: "FSDP", 1: "distributed optimizer"}.get(p.zero, f"ZeRO-{p.zero}")
    zero_default = (f" (default: {what})" if p.pp == 1 else f" (default with pp > 1: {what})") \
        if "parallel.zero" in s.derived else ""
    if zero_default and p.dp == 1 and (s.model.moe is None or layout_of(s).edp == 1):
        zero_default = zero_default[:-1] + "; nothing to shard with dp=1)"
    from_layout = " (from the layout)" if p.pipeline_layout and "parallel.pp" in s.derived else ""
    text = (f"tp={p.tp} pp={p.pp}{from_layout} dp={p.dp}{' (derived)' if 'parallel.dp' in s.derived else ''} cp={p.cp} "
            f"vpp={p.vpp} zero={p.zero}{zero_default} sequence-parallel={'on' if p.sequence_parallel else 'off'}")
    defaults = [name.replace("_", "-") for name in ("tp", "pp", "cp", "vpp", "sequence_parallel")
                if f"parallel.{name}" in s.derived and not (name == "pp" and from_layout)]
    if defaults:
        text += f" ({', '.join(defaults)}: default)"
    if s.model.moe is not None:
        edp = int(layout_of(s).edp)
        text += f" ep={p.ep}{' (default)' if 'parallel.ep' in s.derived else ''} etp={p.etp} edp={edp}"
    extras = [text for text, shown in (("tp-overlap=on", p.tp_overlap), (f"dp-shard={p.dp_shard}", p.dp_shard),
                                       (f"moe-overlap={p.moe_overlap}", s.model.moe is not None),
                                       (f"pipeline-split={p.pipeline_split}", p.pipeline_split == "balanced"),
                                       (f"pipeline-layout={p.pipeline_layout} (layers per rank: "
                                        f"{rank_layers_text(p.rank_layers)})", p.pipeline_layout is not None),
                                       (f"schedule={p.pipeline_schedule}", p.pipeline_schedule != "1f1b"),
                                       (f"dp-collectives={p.dp_collectives}", p.dp_collectives != "hierarchical"))
              if shown]
    return " ".join([text, *extras])


def model_text(m) -> str:
    """The model in one line: parameters (total and active for MoE), shape, experts, latent attention,
    a hybrid model's blocks."""
    params = (f"{m.params / 1e9:.2f} B params" if m.moe is None else
              f"{m.params / 1e9:.2f} B params ({m.active_params / 1e9:.2f} B active)")
    text = (f"{m.name}: {params}, L={m.layers} h={m.hidden} f={m.ffn_hidden} a={m.heads} g={m.kv_heads} V={m.vocab} "
            f"{m.mlp}{', dropout' if m.dropout else ''}")
    if m.moe is not None:
        e = m.moe
        text += (f"; MoE E={e.experts} top-{e.top_k} f_e={e.expert_ffn_hidden}"
                 + (f" shared {e.shared_experts}×{e.shared_width}" if e.shared_experts else "")
                 + f", {m.moe_layers} of {m.layers} layers, imbalance {e.imbalance:g}"
                 + (" (forced balance)" if e.imbalance == 1.0 else "")
                 + (f", capacity {e.capacity_factor:g}" if e.capacity_factor is not None else ""))
    if m.mla is not None:
        a = m.mla
        text += f"; MLA r_q={a.q_lora_rank} r_kv={a.kv_lora_rank} d_qk={a.qk_head_dim} d_v={a.v_head_dim}"
    if m.attention_window is not None:
        text += f"; {window_text(m)}"
    if m.hybrid is not None:
        b = m.hybrid.mamba
        text += (f"; hybrid blocks: {m.mamba_layers} Mamba-2 (H={b.heads} P={b.head_dim} N={b.state_dim} "
                 f"G={b.groups}), {m.attention_layers} attention, {m.moe_layers} MoE, {m.dense_layers_count} dense MLP")
    return text


def window_text(m) -> str:
    """A model's local attention in words: 'sliding window 128 on 18 of 36 layers', 'chunked attention (8192)
    on 36 of 48 layers' ('' without a window)."""
    w = m.attention_window
    if w is None:
        return ""
    what = f"sliding window {w.size}" if w.kind == "sliding" else f"chunked attention ({w.size}-token chunks)"
    return f"{what} on {m.windowed_layers} of {m.attention_layers} {'attention blocks' if m.hybrid else 'layers'}"


def scenario_table(s: Scenario):
    """What was estimated, each value marked `(default)` where it was derived."""
    derived = set(s.derived)

    def mark(key: str, text: str) -> str:
        return f"{text}  [dim](default)[/dim]" if key in derived else text

    m = s.model
    return _key_value_table("Scenario", [
        ("model", mark("model", model_text(m))),
        ("sequence", mark("seq_len", f"{s.seq_len} tokens")),
        ("hardware", mark("hardware", f"{s.hardware.name} ({s.hardware.display_name})") + ", "
         + mark("devices", plural(s.devices, "device")) + f", {s.devices_per_node} per node"
         + probed_text(s)),
        ("efficiencies", efficiency_text(s)),
        ("precision", mark("precision", f"{s.precision} GEMMs, FP32 master weights and "
                                        + optimizer_words(s))),
        ("parallel", layout_text(s)),
        ("batch", f"micro-batch {s.micro_batch}{' (default)' if 'micro_batch' in derived else ''}, global "
                  f"{plural(s.global_batch, 'sequence')}{_batch_default(s) if 'global_batch' in derived else ''}"
                  f" = {s.tokens_per_step:,} tokens, {plural(s.micro_batches, 'micro-batch', 'micro-batches')} "
                  f"per step"),
        ("recompute", mark("recompute", s.recompute + (f" of {', '.join(s.recompute_modules)}"
                                                        if s.recompute_modules != DEFAULT_RECOMPUTE_MODULES else ""))
         + f", attention {s.attention}"
         + (f" ({window_text(m)}{': all s×s scores computed' if s.attention == 'standard' else ''})"
            if m.attention_window is not None else "")
         + (f", kernels {s.kernels}" if s.kernels != "fused" else "")),
        ("framework", framework_text(s, "framework" in derived)
         + ("" if s.parallel.dp_overlap else ", gradient reduction not overlapped")),
        *([("fine-tuning", finetune_text(s))] if s.finetune.frozen else []),
        *([("offload", f"{s.offload} to host memory over {host_link_words(s.hardware)}"
                       + host_words(s.hardware))] if s.offload != "none"
          else []),
    ])


def framework_text(s: Scenario, derived: bool) -> str:
    """The framework, marked (default) where derived, and why where a QLoRA chose it (trainest/frameworks.py:
    `qlora`)."""
    if not derived:
        return s.framework
    if s.finetune.method == "qlora" and s.framework == QLORA_FRAMEWORK:
        return (f"{s.framework}  [dim](default for a QLoRA: bitsandbytes' 4-bit layers run under Hugging Face "
                f"PEFT)[/dim]")
    return f"{s.framework}  [dim](default)[/dim]"


TARGET_WORDS = {"all": "every linear layer", "attention": "the attention linear layers",
                "mlp": "the MLP linear layers"}


def finetune_text(s: Scenario) -> str:
    """A LoRA/QLoRA in words: method, rank, α, targets, base; each marked (default) where it was derived."""
    ft = s.finetune

    def mark(key: str) -> str:
        return " (default)" if f"finetune.{key}" in s.derived else ""

    unquantised = f"{8 * weight_bytes_per_param(s.precision):.0f}-bit"      # stored at the training precision
    base = {16: unquantised, 8: "8-bit (LLM.int8)", 4: "4-bit NF4 with double quantisation"}[ft.base_bits]
    return (f"{ft.method}: rank {ft.rank}{mark('rank')}, alpha {ft.scale:g}{mark('alpha')}, on "
            f"{TARGET_WORDS[ft.targets]}{mark('targets')}, frozen {base} base{mark('base_bits')}")


def trainable_text(e: Estimate) -> str:
    """The parameters the run trains: all of them, or a LoRA's adapters with their share and granularity."""
    s, n = e.scenario, e.training.trainable_params
    if not s.finetune.frozen:
        return f"{n:,.0f} (all)"
    fused = FRAMEWORKS[s.framework].lora_fused
    where = "fused QKV and up/gate adapters" if fused else "an adapter per q, k, v, o, gate, up, down projection"
    return f"{n:,.0f} ({n / s.model.params:.2%} of {s.model.params / 1e9:.2f} B; {s.framework}: {where})"


def efficiency_text(s: Scenario) -> str:
    """Where the hardware's achievable efficiencies come from, with the file for a user's file or profile."""
    e = s.hardware.efficiency
    return BASIS_WORDS[e.basis] + ("" if is_bundled(s.hardware) else f": {s.hardware.path}") + derived_text(e)


def derived_text(e: Any) -> str:
    """The efficiencies a hardware file left out, taken from the prior of a catalog device without runs."""
    return (f"; not in the file, so the prior of a catalog device without runs: {', '.join(e.derived)}"
            if e.derived else "")


def step_table(e: Estimate):
    """The step's five terms, their shares and what each is; the bottleneck in bold."""
    from rich.table import Table
    st, p = e.step, e.scenario.parallel
    # the overlap policy's upper bound, shown when overlap hides anything that matters (≥ 0.5 %)
    bound = (f"; {fmt_seconds(st.no_overlap_time_s)} with no overlap"
             if st.no_overlap_time_s > st.time_s * (1.0 + NO_OVERLAP_SHOWN_ABOVE) else "")
    hw = e.scenario.hardware
    neck = f"{st.bottleneck} ({memory_words(hw)})" if st.bottleneck == "memory" else st.bottleneck
    host = ("; host-bound: the device waits for kernel launches" if st.bound_by == "host" else "")
    t = Table(title=f"Step: {fmt_seconds(st.time_s)}{band_text(e, st.time_s_low, st.time_s_high, say_why=True)}, "
                    f"bottleneck: {neck}{bound}{host}", title_justify="left")
    t.add_column("term")
    t.add_column("time", justify="right")
    t.add_column("share", justify="right")
    t.add_column("what it is")
    values = {k: fmt_seconds(v) for k, v in {**st.communication_detail_s, **st.overhead_detail_s}.items()}
    m = e.scenario.micro_batches
    ep_text = f" / EP {values['ep']}" if e.scenario.model.moe is not None else ""
    rule = "(p-1)/v" if m >= p.pp else "p-m+(m-1)/v: fewer micro-batches than stages"
    terms = ("compute", "memory", "communication", "bubble", "overhead") + (("offload",) if st.offload_s else ())
    for k in terms:
        about = TERM_ABOUT[k].format(**values, bubble=bubble_slots(p.pp, p.vpp, m), bubble_rule=rule,
                                     memory=memory_words(hw), link=host_link_words(hw),
                                     ep_text=ep_text)
        t.add_row(k, fmt_seconds(getattr(st, f"{k}_s")), f"{st.shares[k]:.1%}", about,
                  style="bold" if k == st.bottleneck else "")
    return t


def seconds_range(low: float, high: float) -> str:
    """`7.21–9.18 s`: both ends in the unit fmt_seconds picks for the high end."""
    unit = fmt_seconds(high).split(" ", 1)[1]
    scale = {"days": 86400.0, "h": 3600.0, "min": 60.0, "s": 1.0, "ms": 1e-3}[unit]
    return f"{low / scale:.3g}–{high / scale:.3g} {unit}"


def band_text(e: Estimate, low: float | None, high: float | None, fmt=seconds_range, say_why: bool = False) -> str:
    """` (80 % band 7.21–9.18 s)` beside a value (empty when there is no band); `say_why`: on hardware not
    calibrated on measured runs, the band says so (it is then the error of uncalibrated estimates)."""
    if low is None or high is None or low != low or high != high:
        return ""
    why = (f"; {e.scenario.hardware.name} is not calibrated: its efficiencies are not fitted on measured runs"
           if say_why and not e.band.calibrated else "")
    return f" ({e.band.coverage:.0%} band {fmt(low, high)}{why})"


def band_line(e: Estimate) -> str:
    """Where the band comes from, for the line under the tables."""
    b = e.band
    if b.runs == 0:
        return f"Error band: {b.note}"
    plain = plain_words(b)
    return (f"Error band: measured/predicted step time {b.low_ratio:.2f}–{b.high_ratio:.2f} "
            f"(expected to hold {b.coverage:.0%} of runs like this) from {b.note}{profile_band_note(e)}"
            + (f". {plain}" if plain else ""))


def profile_band_note(e: Estimate) -> str:
    """For a `trainest calibrate` profile: the band is its catalog entry's (the bundled fit's held-out runs),
    while the efficiencies come from the user's runs (the profile's method: file, runs, date)."""
    eff = e.scenario.hardware.efficiency
    if eff.basis != "profile":
        return ""
    return (f"; this band is the catalog entry {e.scenario.hardware.name}'s, not the profile's: its efficiencies "
            f"come from {eff.method} (how far off those runs still are: `trainest validate --runs ... "
            f"--hardware {e.scenario.hardware.path}`)")


def band_pct(e: Estimate) -> str:
    """The band as percentages of the estimate: `-8 to +13 %`."""
    b = e.band
    if b.runs == 0 or b.low_ratio != b.low_ratio:
        return "n/a"
    return f"{(b.low_ratio - 1) * 100:+.0f} to {(b.high_ratio - 1) * 100:+.0f} %"


def band_source(e: Estimate) -> str:
    """Where the band comes from, briefly: `29 held-out runs: h100-sxm, 2 nodes to 256 devices, dense`."""
    b = e.band
    if b.runs == 0:
        return "no band data"
    what = "runs of sources left out of the fit" if b.pool == CALIBRATED else "runs, uncalibrated efficiencies"
    widened = ", widened: no run of its family" if "no run of its family" in b.note else ""
    profile = " (the catalog entry's band; efficiencies from your profile)" \
        if e.scenario.hardware.efficiency.basis == "profile" else ""
    return f"{b.runs} {what}: {b.group}{widened}{profile}"


def flops_of_peak(tflops: float, peak_tflops: float) -> str:
    """`238.7 TFLOP/s of 989`: a peak of a TFLOP/s and up in TFLOP/s; below (a CPU, a probed laptop) both in
    the SI prefix that keeps their digits (`58.0 GFLOP/s of 67.1 GFLOP/s`, not `0.1 TFLOP/s of 0`)."""
    if peak_tflops >= 1:
        return f"{tflops:.1f} TFLOP/s of {peak_tflops:.0f}"
    return f"{fmt_si(tflops * TERA, 'FLOP/s')} of {fmt_si(peak_tflops * TERA, 'FLOP/s')}"


def throughput_table(e: Estimate):
    th = e.throughput
    return _key_value_table("Throughput", [
        ("tokens/s", f"{fmt_si(th.tokens_per_s)} total, {fmt_si(th.tokens_per_s_per_device)} per device"),
        ("model FLOP/s per device", flops_of_peak(th.model_tflops_per_device, th.peak_tflops_per_device)
         + f" peak ({e.scenario.precision})"),
        ("MFU / HFU", f"{th.mfu:.1%} / {th.hfu:.1%}" + (
            " (fine-tuning: the FLOPs a frozen base needs, forward + data gradients + adapters)"
            if e.scenario.finetune.frozen else "")),
    ])


def optimizer_words(s: Scenario) -> str:
    """The optimizer's state in words: "Adam state", "BF16 Adam moments", "8-bit AdamW state", ..."""
    if s.optimizer == "adamw":
        return "Adam state" if s.adam_moments == "fp32" else "BF16 Adam moments"
    return {"adamw-8bit": "8-bit AdamW state", "adafactor": "Adafactor's factored state",
            "sgd": "SGD momentum"}[s.optimizer]


def memory_table(e: Estimate):
    from rich.table import Table
    me = e.memory
    hw = e.scenario.hardware
    left = " left to training" if hw.memory_unified else ""
    margin = me.required_headroom_bytes
    verdict = "fits" if me.device_fits else "DOES NOT FIT"
    if margin:
        verdict += f", keeping {fmt_gib(margin)} free (--memory-headroom {e.scenario.memory_headroom})"
    if not me.host_fits:           # the offloaded part: what does not fit is the host's memory
        verdict = ("the device part fits; " if me.device_fits else verdict + "; ") \
            + f"DOES NOT FIT in host memory: {host_misfit_words(me)}"
    t = Table(title=f"Memory per device: {fmt_gib(me.per_device_bytes)} of {fmt_gib(me.capacity_bytes)}{left} "
                    f"({verdict})", title_justify="left", min_width=62)
    t.add_column("part")
    t.add_column("size", justify="right")
    for k in ("weights", "gradients", "optimizer", "activations"):
        label = PEAK_PHASE_GRADIENTS.get(me.peak_phase, k) if k == "gradients" else k
        t.add_row(label, fmt_gib(getattr(me, f"{k}_bytes")))
    t.add_row("  of which the loss's logits", fmt_gib(me.logits_bytes), style="dim")
    t.add_row("= tensors (torch max_memory_allocated)", fmt_gib(me.allocated_bytes), style="bold")
    t.add_row("allocator reserve and fragmentation", fmt_gib(me.allocator_bytes))
    t.add_row("= reserved (torch max_memory_reserved)", fmt_gib(me.reserved_bytes), style="bold")
    t.add_row("CUDA/ROCm context", fmt_gib(me.context_bytes))
    t.add_row("NCCL buffers", fmt_gib(me.nccl_bytes))
    t.add_row("= device (nvidia-smi; the fit uses it)", fmt_gib(me.per_device_bytes), style="bold")
    if me.host_bytes:
        have = "unknown" if me.host_capacity_bytes is None else fmt_gib(me.host_capacity_bytes)
        t.add_row("host memory (offloaded)", f"{fmt_gib(me.host_bytes)} of {have}"
                  + ("" if me.host_fits else " DOES NOT FIT"), style="" if me.host_fits else "bold")
    return t


# the gradients' line where they do not peak with the activations (memory.PEAK_PHASES; docs/model.md §7.12)
PEAK_PHASE_GRADIENTS = {"forward_end": "gradients (none yet: the peak is the forward's end)",
                        "backward_start": "gradients (the output layer's: the peak is the backward's start)",
                        "backward_end": "gradients (all: the peak is the backward's end)"}


def price_label(hw: Any) -> str:
    """Where the hardware's own price comes from: the catalog's or the user's hardware file's, on-demand with its
    date or a workstation's amortised purchase; a stale one flagged."""
    whose = "catalog" if is_bundled(hw) else "hardware file"
    if hw.purchase is not None:
        text = (f"{whose}: ${hw.purchase.usd:,.0f} purchase amortised over {hw.purchase.amortisation_years:g} years "
                f"of continuous use")
    else:
        text = f"{whose} on-demand price, {hw.price_date or 'undated'}"
    return text + (f"; STALE: {hw.price_stale}" if hw.price_stale else "")


def run_table(e: Estimate):
    tr, derived = e.training, set(e.scenario.derived)
    price = "" if tr.price_usd_per_hour is None else f" at ${tr.price_usd_per_hour:.2f}/device-hour"
    catalog_price = ""
    if "price_per_hour" in derived and tr.price_usd_per_hour is not None:
        catalog_price = f" ({price_label(e.scenario.hardware)})"
    return _key_value_table("Whole run", [
        ("tokens", f"{fmt_si(tr.tokens)}" + (f"  (default: {default_tokens_text(e.scenario.finetune)})"
                                             if "tokens" in derived else "")),
        ("trainable params", trainable_text(e)),
        ("steps", f"{tr.steps:,}"),
        ("wall time", f"{tr.time_days:.2f} days"
         + band_text(e, tr.time_s_low, tr.time_s_high, lambda lo, hi: f"{lo / 86400:.2f}–{hi / 86400:.2f} days")),
        ("device-hours", fmt_amount(tr.device_hours)),
        ("energy", "n/a (device power unknown)" if tr.energy_kwh is None else
         f"{fmt_amount(tr.energy_kwh)} kWh (rated power, PUE {tr.pue:g})"),
        ("CO2", "n/a (device power unknown)" if tr.co2_kg is None else
         f"{fmt_co2(tr.co2_kg)} at {tr.grid_gco2_per_kwh:g} gCO2/kWh"
         + ("  (default: world average 2023)" if "grid_gco2_per_kwh" in derived else "")),
        ("cost", fmt_money(tr.cost_usd) + band_text(e, tr.cost_usd_low, tr.cost_usd_high,
                                                     lambda lo, hi: f"{fmt_money(lo)}–{fmt_money(hi)}")
         + price + catalog_price),
    ])


def print_estimate(e: Estimate, ops: tuple[list, Any] | None = None) -> None:
    """Rich tables on stdout: scenario, step breakdown, (the ops on the roofline,) throughput,
    memory, whole run."""
    con = console()
    tables = [scenario_table(e.scenario), step_table(e)]
    if ops is not None:
        tables.append(ops_table(e, *ops))
    for table in (*tables, throughput_table(e), memory_table(e), run_table(e)):
        print_table(con, table)
    con.print(band_line(e), style="dim")

    for note in notes(e.scenario):
        con.print(f"Note: {note}")

# ------------------------------------------------------------------------------ the ops table (--ops)

OPS_SHOWN_ABOVE = 0.005            # ops adding less than this share of the step fold into one "other" row
CHART_WIDTH = 13                   # characters of the intensity strip
PHASE_WORDS = {"forward": "fwd", "backward": "bwd", "recompute": "recomp", "step": "step"}
CHART_DECADES = (-1.0, 4.0)        # log10 of the strip's ends [FLOP/B]: 0.1 to 10 000


def ops_dict(ops: list, roofline: Any, step_s: float) -> dict[str, Any]:
    """The `ops` list and `roofline` object of `estimate --ops --json` (docs/schema/estimate.schema.json)."""
    return {"roofline": roofline._asdict(),
            "ops": [{**o._asdict(), "share": o.exposed_s / step_s if step_s else None} for o in ops]}


def intensity_strip(intensity: float | None, ridge: float | None, compute_bound: bool) -> str:
    """A log-scale strip from 0.1 to 10⁴ FLOP/B: `|` at the op's ridge point, `●` (compute-bound) or
    `○` (memory-bound) at its arithmetic intensity; ops without FLOPs sit at the left end."""
    import math
    lo, hi = CHART_DECADES

    def at(x: float) -> int:
        return min(CHART_WIDTH - 1, max(0, round((math.log10(x) - lo) / (hi - lo) * (CHART_WIDTH - 1))))

    cells = ["·"] * CHART_WIDTH
    if ridge:
        cells[at(ridge)] = "|"
    cells[at(intensity) if intensity else 0] = "●" if compute_bound else "○"
    return "".join(cells)


def _op_cells(o: Any, step_s: float) -> list[str]:
    def num(x: float | None) -> str:
        return "-" if not x else fmt_si(x)

    return [f"{o.name} {PHASE_WORDS.get(o.phase, o.phase)}", num(o.flops), num(o.bytes), num(o.intensity),
            num(o.ridge), o.bound.replace("network: ", ""), fmt_seconds(o.time_s),
            f"{o.exposed_s / step_s:.1%}" if step_s else "-",
            intensity_strip(o.intensity, o.ridge, o.bound == "compute") if o.part in ("layer", "logits",
                                                                                      "optimizer") else ""]


def ops_table(e: Estimate, ops: list, roofline: Any):
    """Every operation of the step on the roofline, largest share first; the small ones folded."""
    from rich import box
    from rich.table import Table
    step_s = e.step.time_s
    ridges = ", ".join(f"{k} {v:,.0f}" for k, v in roofline.ridge_peak.items())
    t = Table(title=f"Operations on the roofline: {roofline.memory_kind} {fmt_si(roofline.memory_bytes_per_s, 'B/s')}"
                    f", peak ridge {ridges} FLOP/B; ridge column: each op's achievable FLOP/s / bandwidth; "
                    f"● compute-bound, ○ memory-bound, | the op's ridge", title_justify="left", box=box.SIMPLE_HEAD)
    for name, justify in (("op and pass", "left"), ("FLOPs", "right"), ("bytes", "right"), ("FLOP/B", "right"),
                          ("ridge", "right"), ("bound", "left"), ("time", "right"), ("share", "right"),
                          ("intensity, log", "left")):
        t.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    shown = sorted((o for o in ops if o.exposed_s >= OPS_SHOWN_ABOVE * step_s), key=lambda o: -o.exposed_s)
    for o in shown:
        t.add_row(*_op_cells(o, step_s), style="bold" if o.bound == "compute" else "")
    rest = [o for o in ops if o not in shown]
    if rest:
        t.add_row(f"other ({len(rest)} ops)", "", "", "", "", "", fmt_seconds(sum(o.time_s for o in rest)),
                  f"{sum(o.exposed_s for o in rest) / step_s:.1%}", "")
    return t
