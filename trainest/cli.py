"""The command line: parse options, build a Scenario, call the library, render. Nothing else.

Exit codes: 0 success; 1 bad input or spec (one `Error: ...` line on stderr); 2 usage error from
the parser; 3 a CI gate (--max-days, --max-cost, --require-fit) was broken.
"""

from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated, Any, Optional

import typer

from trainest.errors import SpecError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Estimate LLM training step time, memory, bottleneck and cost, analytically, in milliseconds.")

EXIT_BAD_INPUT = 1
EXIT_GATE = 3


class Precision(str, Enum):
    fp32 = "fp32"
    tf32 = "tf32"
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    fp4 = "fp4"


class Recompute(str, Enum):
    none = "none"
    selective = "selective"
    full = "full"


class Mlp(str, Enum):
    gelu = "gelu"
    swiglu = "swiglu"


class Attention(str, Enum):
    flash = "flash"
    standard = "standard"


def fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    """One line on stderr, nothing on stdout, non-zero exit."""
    print(f"Error: {message}", file=sys.stderr)
    raise typer.Exit(code)


def _merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in overrides.items():
        if value is None:
            continue
        if isinstance(value, dict):
            inner = out.get(key) if isinstance(out.get(key), dict) else {}
            merged = _merge(inner, value)
            if merged:
                out[key] = merged
        else:
            out[key] = value
    return out


# Options shared by every command that takes a scenario (estimate, plan).
ModelOpt = Annotated[Optional[str], typer.Option("--model", "-m", help="Model preset name or YAML path.", show_default="llama3-8b")]
HardwareOpt = Annotated[Optional[str], typer.Option("--hardware", "-H", help="Hardware catalog name or YAML path.", show_default="h100-sxm")]
SeqOpt = Annotated[Optional[int], typer.Option("--seq-len", help="Sequence length [tokens].", show_default="model's")]
PrecisionOpt = Annotated[Optional[Precision], typer.Option("--precision", help="GEMM precision (FP32 master weights and Adam state).", show_default="bf16")]
ConfigOpt = Annotated[Optional[str], typer.Option("--config", "-c", help="Scenario YAML; options given here override it.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Silence warnings.")]


def scenario_mapping_from_options(config: str | None, **options: Any) -> tuple[dict, dict, bool]:
    """(scenario mapping, shape overrides, use the built-in default) from a config file and CLI
    options (CLI wins). With no scenario option at all, the built-in default scenario is used."""
    from trainest.scenario import load_scenario_file
    base = load_scenario_file(config) if config else {}
    shape = {k: options.pop(k) for k in ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "mlp")}
    shape = {k: (v.value if isinstance(v, Enum) else v) for k, v in shape.items() if v is not None}
    parallel = {k: options.pop(k) for k in ("tp", "pp", "dp", "cp", "vpp", "zero", "sequence_parallel")}
    if options.pop("fsdp", None):
        parallel["fsdp"] = True
    flat = {k: (v.value if isinstance(v, Enum) else v) for k, v in options.items()}
    builtin = not config and not shape and all(v is None for v in flat.values()) \
        and all(v is None for v in parallel.values())
    mapping = _merge(base, {**flat, "parallel": parallel})
    if shape and isinstance(mapping.get("model"), dict):
        mapping["model"] = _merge(mapping["model"], shape)
        shape = {}
    return mapping, shape, builtin


@app.command()
def estimate(
    model: ModelOpt = None,
    hardware: HardwareOpt = None,
    devices: Annotated[Optional[int], typer.Option("--devices", "--gpus", "-n", help="Number of devices N.", show_default="8")] = None,
    devices_per_node: Annotated[Optional[int], typer.Option("--devices-per-node", help="Devices per node / host.", show_default="hardware's")] = None,
    precision: PrecisionOpt = None,
    seq_len: SeqOpt = None,
    layers: Annotated[Optional[int], typer.Option("--layers", help="Override: layers L.")] = None,
    hidden: Annotated[Optional[int], typer.Option("--hidden", help="Override: hidden size h.")] = None,
    ffn_hidden: Annotated[Optional[int], typer.Option("--ffn-hidden", help="Override: MLP hidden size f.")] = None,
    heads: Annotated[Optional[int], typer.Option("--heads", help="Override: attention heads a.")] = None,
    kv_heads: Annotated[Optional[int], typer.Option("--kv-heads", help="Override: key/value heads g.")] = None,
    vocab: Annotated[Optional[int], typer.Option("--vocab", help="Override: vocabulary V.")] = None,
    mlp: Annotated[Optional[Mlp], typer.Option("--mlp", help="Override: MLP kind.")] = None,
    tp: Annotated[Optional[int], typer.Option("--tp", help="Tensor-parallel size t.", show_default="1")] = None,
    pp: Annotated[Optional[int], typer.Option("--pp", help="Pipeline-parallel size p.", show_default="1")] = None,
    dp: Annotated[Optional[int], typer.Option("--dp", help="Data-parallel size d.", show_default="N/(t·p·c)")] = None,
    cp: Annotated[Optional[int], typer.Option("--cp", help="Context-parallel size c.", show_default="1")] = None,
    vpp: Annotated[Optional[int], typer.Option("--vpp", help="Virtual pipeline stages per rank v.", show_default="1")] = None,
    zero: Annotated[Optional[int], typer.Option("--zero", help="ZeRO stage 0-3.", show_default="0")] = None,
    fsdp: Annotated[bool, typer.Option("--fsdp", help="Fully sharded data parallel (= --zero 3).")] = False,
    sequence_parallel: Annotated[Optional[bool], typer.Option("--sequence-parallel/--no-sequence-parallel", help="Megatron sequence parallelism.", show_default="off")] = None,
    micro_batch: Annotated[Optional[int], typer.Option("--micro-batch", "-b", help="Micro-batch b [sequences].", show_default="1")] = None,
    global_batch: Annotated[Optional[int], typer.Option("--global-batch", "-B", help="Global batch B [sequences].", show_default="dp × micro-batch")] = None,
    recompute: Annotated[Optional[Recompute], typer.Option("--recompute", help="Activation recomputation.", show_default="none")] = None,
    attention: Annotated[Optional[Attention], typer.Option("--attention", help="flash (fused, causal) or standard (materialised scores).", show_default="flash")] = None,
    tokens: Annotated[Optional[str], typer.Option("--tokens", help="Training tokens, e.g. 300B or 1.5T.", show_default="20 per parameter")] = None,
    price_per_hour: Annotated[Optional[float], typer.Option("--price-per-hour", help="USD per device-hour.", show_default="catalog price")] = None,
    pue: Annotated[Optional[float], typer.Option("--pue", help="Data-centre power usage effectiveness.", show_default="1.2")] = None,
    config: ConfigOpt = None,
    max_days: Annotated[Optional[float], typer.Option("--max-days", help="CI gate: exit 3 if the run takes longer.")] = None,
    max_cost: Annotated[Optional[float], typer.Option("--max-cost", help="CI gate: exit 3 if the run costs more [USD].")] = None,
    require_fit: Annotated[bool, typer.Option("--require-fit", help="CI gate: exit 3 if it does not fit in memory.")] = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Estimate one training scenario: step time and its breakdown, throughput, memory, whole run."""
    try:
        from trainest.estimate import estimate as run_estimate, fit_suggestions
        from trainest.scenario import scenario_from_mapping
        mapping, shape, builtin = scenario_mapping_from_options(
            config, model=model, hardware=hardware, devices=devices, devices_per_node=devices_per_node,
            precision=precision, seq_len=seq_len, layers=layers, hidden=hidden, ffn_hidden=ffn_hidden, heads=heads,
            kv_heads=kv_heads, vocab=vocab, mlp=mlp, tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp, zero=zero, fsdp=fsdp,
            sequence_parallel=sequence_parallel, micro_batch=micro_batch, global_batch=global_batch,
            recompute=recompute, attention=attention, tokens=tokens, price_per_hour=price_per_hour, pue=pue)
        scenario = scenario_from_mapping(mapping, f"scenario {config!r}" if config else "options", shape=shape,
                                         builtin_default=builtin)
        for name, value in (("--max-days", max_days), ("--max-cost", max_cost)):
            if value is not None and not value > 0:
                raise SpecError(f"{name} {value!r} must be a number greater than 0")
        result = run_estimate(scenario)
        warnings: list[str] = []
        if not result.memory.fits:
            warnings.append(fit_suggestions(scenario, result))
        if result.training.cost_usd is None:
            warnings.append(f"no price for {scenario.hardware.name}: cost not computed; give --price-per-hour")
    except SpecError as exc:
        fail(str(exc))
        return
    from trainest import report
    if json_out:
        print(report.dumps(report.estimate_dict(result, warnings)))
    else:
        report.print_estimate(result)
    if not quiet:
        for w in warnings:
            report.warn(w)
    broken = []
    if max_days is not None and result.training.time_days > max_days:
        broken.append(f"training takes {result.training.time_days:.2f} days > --max-days {max_days:g}")
    if max_cost is not None:
        if result.training.cost_usd is None:
            broken.append("--max-cost given but no price is known; give --price-per-hour")
        elif result.training.cost_usd > max_cost:
            broken.append(f"training costs ${result.training.cost_usd:,.0f} > --max-cost ${max_cost:,.0f}")
    if require_fit and not result.memory.fits:
        broken.append(f"needs {result.memory.per_device_bytes / 2**30:.1f} GiB per device > "
                      f"{result.memory.capacity_bytes / 2**30:.1f} GiB (--require-fit)")
    if broken:
        for b in broken:
            print(f"Gate failed: {b}", file=sys.stderr)
        raise typer.Exit(EXIT_GATE)


class Listable(str, Enum):
    hardware = "hardware"
    models = "models"


@app.command("list")
def list_cmd(what: Annotated[Listable, typer.Argument(help="hardware or models")],
             json_out: JsonOpt = False) -> None:
    """List the bundled hardware catalog or model presets."""
    try:
        from trainest import catalog
        if what == Listable.hardware:
            rows = []
            for name in catalog.hardware_names():
                hw = catalog.load_hardware(name)
                rows.append({"name": name, "display_name": hw.display_name,
                             "peak_tflops": {k: v / 1e12 for k, v in hw.peak_flops_per_s.items()},
                             "memory_bytes": hw.memory_bytes, "memory_bytes_per_s": hw.memory_bytes_per_s,
                             "devices_per_node": hw.devices_per_node, "efficiency_fitted": hw.efficiency.fitted})
        else:
            rows = []
            for name in catalog.model_names():
                mo = catalog.load_model(name)
                rows.append({"name": name, "params": mo.params, "layers": mo.layers, "hidden": mo.hidden,
                             "heads": mo.heads, "kv_heads": mo.kv_heads, "mlp": mo.mlp, "seq_len": mo.seq_len,
                             "source": mo.source})
    except SpecError as exc:
        fail(str(exc))
        return
    from trainest import report
    if json_out:
        print(report.dumps({"schema_version": "1.0", what.value: rows}))
        return
    from rich.table import Table
    table = Table(title=f"{what.value} ({len(rows)})", title_justify="left")
    keys = ["name", "display_name", "peak_tflops", "memory_bytes", "devices_per_node"] if what == Listable.hardware \
        else ["name", "params", "layers", "hidden", "heads", "kv_heads", "mlp", "seq_len"]
    for k in keys:
        table.add_column(k)
    for r in rows:
        cells = []
        for k in keys:
            v = r[k]
            if k == "peak_tflops":
                v = " ".join(f"{p}:{x:g}" for p, x in v.items())
            elif k == "memory_bytes":
                v = report.fmt_gib(v)
            elif k == "params":
                v = f"{v / 1e9:.2f} B"
            cells.append(str(v))
        table.add_row(*cells)
    report._console().print(table)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
