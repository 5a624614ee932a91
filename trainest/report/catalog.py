"""`trainest list`: the hardware catalog and the model presets as rows, JSON and a table."""

from __future__ import annotations

from typing import Any

from trainest import SCHEMA_VERSION
from trainest.report import console, print_table


def calibration(hw: Any) -> str:
    """How the hardware's efficiencies were obtained: fitted, inherited from a sibling, probed, or prior."""
    e = hw.efficiency
    if e.fitted:
        if "inherited from" in e.method:
            return "inherited from " + e.method.split("inherited from ", 1)[1].split(" ", 1)[0]
        return "fitted"
    return "probed" if hw.probed else "prior"


def hardware_row(name: str, hw: Any) -> dict[str, Any]:
    """What a buyer compares, from the catalog entry (SI units; TFLOP/s for the peaks)."""
    return {"name": name, "display_name": hw.display_name, "vendor": hw.vendor, "kind": hw.kind,
            "launch_year": hw.launch_year,
            "peak_tflops": {k: v / 1e12 for k, v in hw.peak_flops_per_s.items()},
            "memory_bytes": hw.memory_bytes, "memory_bytes_per_s": hw.memory_bytes_per_s, "memory_kind": hw.memory_kind,
            "devices_per_node": hw.devices_per_node,
            "scale_up": {"name": hw.scale_up_name, "bytes_per_s": hw.scale_up_bytes_per_s,
                         "domain": hw.scale_up_domain},
            "scale_out": {"name": hw.scale_out_name, "kind": hw.scale_out_kind,
                          "bytes_per_s": hw.scale_out_bytes_per_s},
            "power_w": hw.power_w, "price_usd_per_hour": hw.price_usd_per_hour, "price_date": hw.price_date,
            "price_source": hw.price_source or None,
            "efficiency_fitted": hw.efficiency.fitted, "calibration": calibration(hw),
            "modelled": hw.unsupported_reason is None, "unsupported_reason": hw.unsupported_reason,
            "source": hw.source}


def hardware_rows(sort: str = "name") -> list[dict[str, Any]]:
    """Every catalog entry as a row (hardware_row), sorted by SORT_KEYS[sort]."""
    from trainest import catalog
    rows = [hardware_row(name, catalog.load_hardware(name)) for name in catalog.hardware_names()]
    return sort_rows(rows, sort)


def _bf16(r: dict[str, Any]) -> float | None:
    p = r["peak_tflops"]
    return next((p[k] for k in ("bf16", "fp16", "tf32", "fp32") if k in p), None)


# --sort KEY: (what it sorts by, ascending); numbers sort largest first except the price; unknowns last
SORT_KEYS: dict[str, tuple[Any, bool]] = {
    "name": (lambda r: r["name"], True),
    "vendor": (lambda r: (r["vendor"], r["name"]), True),
    "year": (lambda r: r["launch_year"], False),
    "bf16": (_bf16, False),
    "fp8": (lambda r: r["peak_tflops"].get("fp8"), False),
    "memory": (lambda r: r["memory_bytes"], False),
    "bandwidth": (lambda r: r["memory_bytes_per_s"], False),
    "scale-up": (lambda r: r["scale_up"]["bytes_per_s"], False),
    "scale-out": (lambda r: r["scale_out"]["bytes_per_s"], False),
    "power": (lambda r: r["power_w"], False),
    "price": (lambda r: r["price_usd_per_hour"], True),
    "tflops-per-dollar": (lambda r: None if not r["price_usd_per_hour"] or _bf16(r) is None
                          else _bf16(r) / r["price_usd_per_hour"], False),
}


def sort_rows(rows: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """Rows sorted by SORT_KEYS[key]; rows without a value last, by name."""
    fn, ascending = SORT_KEYS[key]
    known = [r for r in rows if fn(r) is not None]
    unknown = sorted((r for r in rows if fn(r) is None), key=lambda r: r["name"])
    return sorted(known, key=fn, reverse=not ascending) + unknown


def model_rows() -> list[dict[str, Any]]:
    from trainest import catalog
    rows = []
    for name in catalog.model_names():
        mo = catalog.load_preset_model(name)
        rows.append({"name": name, "params": mo.params, "active_params": mo.active_params,
                     "architecture": model_architecture(mo), "layers": mo.layers, "hidden": mo.hidden,
                     "heads": mo.heads, "kv_heads": mo.kv_heads, "mlp": mo.mlp, "seq_len": mo.seq_len,
                     "source": mo.source})
    return rows


def model_architecture(model: Any) -> str:
    """What a model is made of, in words: dense, moe (E experts, top-K), mla, hybrid (its blocks), latent,
    mtp (its depth)."""
    parts = []
    if model.hybrid is not None:
        counts = ((model.mamba_layers, "M"), (model.attention_layers, "A"), (model.moe_layers, "E"),
                  (model.dense_layers_count, "D"))
        parts.append("hybrid " + " ".join(f"{n}{k}" for n, k in counts if n))
    if model.moe is not None:
        parts.append(f"moe {model.moe.experts}/{model.moe.top_k}" + (" latent" if model.moe.latent_size else ""))
    if model.mla is not None:
        parts.append("mla")
    if model.mtp is not None:
        parts.append(f"mtp {model.mtp.depth}")
    return " ".join(parts) or "dense"


def framework_rows() -> list[dict[str, Any]]:
    """What each training framework does that the step model reads (trainest/frameworks.py)."""
    from trainest.frameworks import FRAMEWORKS
    from trainest.hardware import DEFAULT_HOST_MS_PER_MICRO_BATCH
    return [{"name": f.name, "dispatch": f.dispatch, "host_scale": f.host_scale, "kernels": f.kernels,
             "micro_batch_sync": f.micro_batch_sync,
             "micro_batch_host_ms": (DEFAULT_HOST_MS_PER_MICRO_BATCH * f.micro_batch_host_factor
                                     if f.micro_batch_sync else None),
             "dp_overlap": f.dp_overlap, "interleaved": f.interleaved, "seen": f.seen, "moe_seen": f.moe_seen,
             "megatron_softmax": f.megatron_softmax, "unfused_cross_entropy": f.unfused_cross_entropy,
             "loss_bytes_per_logit": f.loss_bytes_per_logit, "expert_loop": f.expert_loop,
             "stage_layout": f.stage_layout, "zero_stages": list(f.zero_stages), "pipeline": f.pipeline,
             "pp_zero_stages": list(f.zero_stages_with(2)), "lora_granularity": f.lora_granularity,
             "qlora": f.qlora,
             "runs_on": list(f.runs_on), "recompute_modes": list(f.recompute_modes), "tp_overlap": f.tp_overlap,
             "tp_shards_activations": f.tp_shards_activations,
             "memory_defaults": framework_memory_defaults(f.name), "source": f.source} for f in FRAMEWORKS.values()]


def framework_memory_defaults(name: str) -> dict[str, Any]:
    """The memory inputs a scenario under framework `name` takes when it gives none (each then listed in
    `inputs.derived`; docs/model.md §7.7): the knobs' defaults, with the bytes per logit its standard loss holds
    and the recompute it defaults to."""
    from trainest.frameworks import FRAMEWORKS
    from trainest.knobs import BY_NAME
    f = FRAMEWORKS[name]
    out: dict[str, Any] = {k: BY_NAME[k].fallback for k in ("master_weights", "grad_dtype", "optimizer_in_backward",
                                                            "loss")}
    return {**out, "loss_bytes_per_logit": f.loss_bytes_per_logit, "recompute": f.default_recompute}


def _stages(stages: list[int]) -> str:
    """ZeRO stages in few characters: 0-3 for all, else 0,2,3."""
    return "0-3" if stages == [0, 1, 2, 3] else ",".join(map(str, stages))


def zero_text(row: dict[str, Any]) -> str:
    """A framework's ZeRO stages, and those it runs with a pipeline where they differ ("0-3, pp: 0,1"), or
    that it has no pipeline ("0,2,3, no pp")."""
    stages = _stages(row["zero_stages"])
    if not row["pipeline"]:
        return f"{stages}, no pp"
    return stages if row["pp_zero_stages"] == row["zero_stages"] else f"{stages}, pp: {_stages(row['pp_zero_stages'])}"


def list_dict(what: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The `trainest list ... --json` document (docs/schema/list.schema.json)."""
    return {"schema_version": SCHEMA_VERSION, what: rows}


def _num(x: float | None, fmt: str = "{:,.0f}") -> str:
    return "–" if x is None else fmt.format(x)


def hardware_cells(r: dict[str, Any]) -> list[str]:
    up, out = r["scale_up"], r["scale_out"]
    cal = r["calibration"].replace("inherited from ", "as ")
    return [r["name"] + ("" if r["modelled"] else " †"), _num(_bf16(r)), _num(r["peak_tflops"].get("fp8")),
            _num(r["memory_bytes"] / 1e9), _num(r["memory_bytes_per_s"] / 1e12, "{:,.1f}"),
            "–" if up["bytes_per_s"] is None else f"{up['bytes_per_s'] / 1e9:,.0f} ×{up['domain']}",
            _num(None if out["bytes_per_s"] is None else out["bytes_per_s"] * 8 / 1e9),
            _num(r["power_w"]), _num(r["price_usd_per_hour"], "{:.2f}"), r["price_date"] or "–",
            cal]


HARDWARE_COLUMNS = ("name", "bf16", "fp8", "GB", "TB/s", "scale-up", "out", "W", "$/h", "price date",
                    "calibrated")


def _cell(key: str, value: Any) -> str:
    if key in ("params", "active_params"):     # three significant digits at most (exact: --json)
        b = value / 1e9
        return f"{b:.0f} B" if b >= 100 else f"{b:.1f} B" if b >= 10 else f"{b:.2f} B"
    return str(value)


def print_list(what: str, rows: list[dict[str, Any]]) -> None:
    from rich import box
    from rich.table import Table
    if what == "hardware":
        table = Table(title=f"hardware ({len(rows)})", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                      collapse_padding=True)
        caption = ("dense peaks in TFLOP/s (bf16: the 16-bit peak, fp16 where there is no bf16); memory GB and "
                         "TB/s; scale-up GB/s per device per direction × domain size; scale-out (out) Gb/s per device; "
                         "rated W; on-demand USD per device-hour and the date it was read; calibrated: fitted on "
                         "measured runs, as a sibling of the same die, or prior (uncalibrated: wider error "
                         "band); † not modelled (execution model). Vendor, link names, price and hardware sources: "
                         "--json.")
        for col in HARDWARE_COLUMNS:
            table.add_column(col, justify="left" if col in ("name", "calibrated", "price date")
                             else "right", no_wrap=True)
        for r in rows:
            table.add_row(*hardware_cells(r))
        con = console()
        print_table(con, table)
        con.print(caption, style="dim")    # (as a caption, rich would size the columns by its text)
        return
    if what == "frameworks":
        print_frameworks(rows)
        return
    table = Table(title=f"{what} ({len(rows)})", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True)
    # (column, key): the architecture is the model's parts (M Mamba-2, A attention, E MoE, D dense MLP blocks;
    # moe experts/top-k)
    columns = [("name", "name"), ("params", "params"), ("active", "active_params"), ("architecture", "architecture"),
               ("layers", "layers"), ("hidden", "hidden"), ("heads", "heads"), ("kv", "kv_heads"), ("mlp", "mlp"),
               ("seq", "seq_len")]
    for title, key in columns:    # every number whole: on a narrow terminal the architecture wraps
        table.add_column(title, no_wrap=key != "architecture",
                         justify="left" if key in ("name", "architecture", "mlp") else "right")
    for r in rows:
        table.add_row(*(_cell(key, r[key]) for _, key in columns))
    print_table(console(), table)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def print_frameworks(rows: list[dict[str, Any]]) -> None:
    """`trainest list frameworks`: what each `--framework` sets in the step model."""
    from rich import box
    from rich.table import Table
    table = Table(title=f"frameworks ({len(rows)})", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True)
    # every value whole (the widest of each column); the headers wrap on a narrow terminal
    widths = {"name": max(len(r["name"]) for r in rows), "dispatch": 6, "host ×": 5, "kernels": 5}
    for col in ("name", "dispatch", "host ×", "mb sync", "kernels", "overlap", "ZeRO", "interl", "layout", "experts",
                "lora", "qlora", "loss λ", "seen", "MoE"):
        table.add_column(col, justify="right" if col in ("host ×", "mb sync") else "left",
                         min_width=widths.get(col, 3))
    for r in rows:
        fitted = "*" if r["host_scale"] != 1 else ""
        host = "0" if r["dispatch"] == "xla" else f"{r['host_scale']:.2f}{fitted}"
        from trainest.hardware import DEFAULT_HOST_MS_PER_MICRO_BATCH
        mb_ms = r["micro_batch_host_ms"]
        mb = "–" if mb_ms is None else f"{mb_ms:.2f} ms{'*' if mb_ms != DEFAULT_HOST_MS_PER_MICRO_BATCH else ''}"
        table.add_row(r["name"], r["dispatch"], host, mb, r["kernels"], _yes(r["dp_overlap"]), zero_text(r),
                      _yes(r["interleaved"]),
                      _yes(r["stage_layout"]), r["expert_loop"], r["lora_granularity"], _yes(r["qlora"]),
                      f"{r['loss_bytes_per_logit']:g} B", _yes(r["seen"]),
                      _yes(r["moe_seen"]))
    con = console()
    print_table(con, table)
    con.print("dispatch: python (every kernel launched from Python) or xla (one compiled step, no host time per "
              "kernel); host ×: its host time per kernel over plain PyTorch's (the hardware's "
              "host_us_per_kernel; *: fitted on its measured small-kernel runs, specs/frameworks.json); "
              "mb sync: the host's Python per micro-batch that is on the step's path because the framework "
              "synchronises host and device there (*: fitted, else the prior host_ms_per_micro_batch; –: it runs "
              "ahead of the device); "
              "loss λ: bytes per logit its own cross-entropy holds (--loss standard, the default; chunked 3, "
              "compiled 4, fused 6/ceil(V/h): docs/model.md §7.4, §7.7); its memory defaults, derived where a "
              "scenario gives none (--json: memory_defaults): master_weights fp32, grad_dtype auto, loss standard, "
              "optimizer_in_backward off; "
              "kernels: its default element-wise kernels; overlap: the gradient reduction overlapped with the "
              "backward by default; ZeRO: the ZeRO stages it has (pp: those it runs with pipeline parallelism; "
              "no pp: it has no pipeline; sources in trainest/frameworks.py); interl: has the interleaved pipeline "
              "schedule; layout: takes any layers per "
              "pipeline stage (--pipeline-layout); experts: how its MoE layer "
              "launches the local experts (gemm: a GEMM each, grouped: one kernel for all, python: each "
              "expert's MLP operator by operator; docs/model.md §15.2); lora: a LoRA's adapters, fused (one on each "
              "fused QKV and up/gate matrix, Megatron) or separate (one per q, k, v, o, gate, up, down projection, "
              "PEFT; docs/model.md §13.1); qlora: runs a QLoRA (bitsandbytes' 4-bit layers; docs/model.md §13.2); "
              "seen: the bundled "
              "measured runs include it (else estimates say so); MoE: the same for mixture-of-experts runs. "
              "Sources and the loss's bytes: --json; docs/model.md §2.9.", style="dim")
