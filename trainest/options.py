"""The `estimate` command without a framework: its option table, a strict argv reader, and its body.

`ESTIMATE_OPTIONS` is the one declaration of the command's options. Two parsers are derived from it:

- `trainest.cli` builds the typer `estimate` command from it (help, usage errors, exit code 2);
- `parse_estimate_argv` reads the common case (`trainest estimate --json --gpus 64 ...`) directly,
  so a single estimate starts without importing typer. It accepts only what it is sure typer would
  read the same way and returns None for anything else (--help, an unknown or malformed option, a
  value typer might read differently), in which case the typer app runs and owns the outcome.

Both paths call `run_estimate`, which returns the exit code. This module imports nothing heavy: it
is on the start-up path of every `trainest estimate`.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from enum import Enum
from typing import Any

EXIT_OK = 0
EXIT_BAD_INPUT = 1
EXIT_GATE = 3

# Choices of the enumerated options (the same tuples as catalog.PRECISIONS, catalog.MLP_KINDS,
# scenario.RECOMPUTE, scenario.ATTENTION and scenario.KERNELS; tests/test_startup.py checks that they agree).
PRECISION_CHOICES = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")
MLP_CHOICES = ("gelu", "swiglu")
RECOMPUTE_CHOICES = ("none", "selective", "full", "op")
ATTENTION_CHOICES = ("flash", "flash2", "standard")
KERNELS_CHOICES = ("fused", "eager")
PIPELINE_SPLIT_CHOICES = ("even", "balanced")
DP_COLLECTIVES_CHOICES = ("hierarchical", "flat")


@dataclass(frozen=True)
class Opt:
    """One command-line option.

    kind: "int" | "float" | "str" | "choice" (one of `choices`) | "flag" (bool, default False) |
    "switch" (`--x/--no-x`, default None). Value options default to None ("not given").
    flags: the option names typer gets, long names first; a switch has one "--x/--no-x" entry.
    """

    name: str
    flags: tuple[str, ...]
    kind: str
    help: str
    show_default: str | None = None
    choices: tuple[str, ...] = ()
    enum: str = ""              # name of the Enum class typer is given for a "choice"

    @property
    def default(self) -> Any:
        return False if self.kind == "flag" else None


ESTIMATE_HELP = "Estimate one training scenario: step time and its breakdown, throughput, memory, whole run."

ESTIMATE_OPTIONS: tuple[Opt, ...] = (
    Opt("model", ("--model", "-m"), "str", "Model preset name or YAML path.", "llama3-8b"),
    Opt("hardware", ("--hardware", "-H"), "str", "Hardware catalog name or YAML path.", "h100-sxm"),
    Opt("devices", ("--devices", "--gpus", "-n"), "int", "Number of devices N.", "8"),
    Opt("devices_per_node", ("--devices-per-node",), "int", "Devices per node / host.", "hardware's"),
    Opt("precision", ("--precision",), "choice", "GEMM precision (FP32 master weights and Adam state).", "bf16",
        PRECISION_CHOICES, "Precision"),
    Opt("seq_len", ("--seq-len",), "int", "Sequence length, in tokens.", "model's"),
    Opt("layers", ("--layers",), "int", "Override: layers L."),
    Opt("hidden", ("--hidden",), "int", "Override: hidden size h."),
    Opt("ffn_hidden", ("--ffn-hidden",), "int", "Override: MLP hidden size f."),
    Opt("heads", ("--heads",), "int", "Override: attention heads a."),
    Opt("kv_heads", ("--kv-heads",), "int", "Override: key/value heads g."),
    Opt("vocab", ("--vocab",), "int", "Override: vocabulary V."),
    Opt("mlp", ("--mlp",), "choice", "Override: MLP kind.", None, MLP_CHOICES, "Mlp"),
    Opt("tp", ("--tp",), "int", "Tensor-parallel size t.", "1"),
    Opt("pp", ("--pp",), "int", "Pipeline-parallel size p.", "1"),
    Opt("dp", ("--dp",), "int", "Data-parallel size d.", "N/(t·p·c)"),
    Opt("cp", ("--cp",), "int", "Context-parallel size c.", "1"),
    Opt("vpp", ("--vpp",), "int", "Virtual pipeline stages per rank v.", "1"),
    Opt("zero", ("--zero",), "int", "ZeRO stage 0-3.", "0"),
    Opt("fsdp", ("--fsdp",), "flag", "Fully sharded data parallel (= --zero 3)."),
    Opt("sequence_parallel", ("--sequence-parallel/--no-sequence-parallel",), "switch",
        "Megatron sequence parallelism.", "off"),
    Opt("tp_overlap", ("--tp-overlap/--no-tp-overlap",), "switch",
        "Pipeline TP collectives with the GEMMs (Megatron --tp-comm-overlap).", "off"),
    Opt("dp_shard", ("--dp-shard",), "int", "Hybrid sharding: ZeRO shard group size (divides dp).", "dp"),
    Opt("pipeline_split", ("--pipeline-split",), "choice",
        "even (layers divide p·v) or balanced (embedding and loss count as layers).", "even",
        PIPELINE_SPLIT_CHOICES, "PipelineSplit"),
    Opt("dp_collectives", ("--dp-collectives",), "choice",
        "Data-parallel/ZeRO rings: hierarchical (every NIC of a node) or flat (one NIC per device, e.g. "
        "DeepSpeed ZeRO-3 of 2021).", "hierarchical", DP_COLLECTIVES_CHOICES, "DpCollectives"),
    Opt("micro_batch", ("--micro-batch", "-b"), "int", "Micro-batch b, in sequences.", "1"),
    Opt("global_batch", ("--global-batch", "-B"), "int", "Global batch B, in sequences.", "dp × micro-batch"),
    Opt("recompute", ("--recompute",), "choice", "Activation recomputation: selective = Megatron's (attention core); "
        "op = torchtitan's per-op selective checkpointing (every second matmul and the element-wise ops).", "none",
        RECOMPUTE_CHOICES, "Recompute"),
    Opt("attention", ("--attention",), "choice", "flash (best fused kernel: FA3/cuDNN on Hopper+), flash2 (FlashAttention-2) or standard (materialised scores).", "flash",
        ATTENTION_CHOICES, "Attention"),
    Opt("kernels", ("--kernels",), "choice", "Element-wise kernels: fused (Megatron/Transformer Engine, torch.compile, "
        "XLA) or eager (PyTorch without torch.compile: one kernel per operator, FP32 norms).", "fused",
        KERNELS_CHOICES, "Kernels"),
    Opt("tokens", ("--tokens",), "str", "Training tokens, e.g. 300B or 1.5T.", "20 per parameter"),
    Opt("price_per_hour", ("--price-per-hour",), "float", "USD per device-hour.", "catalog price"),
    Opt("pue", ("--pue",), "float", "Data-centre power usage effectiveness.", "1.2"),
    Opt("config", ("--config", "-c"), "str", "Scenario YAML; options given here override it."),
    Opt("max_days", ("--max-days",), "float", "CI gate: exit 3 if the run takes longer."),
    Opt("max_cost", ("--max-cost",), "float", "CI gate: exit 3 if the run costs more (USD)."),
    Opt("require_fit", ("--require-fit",), "flag", "CI gate: exit 3 if it does not fit in memory."),
    Opt("json_out", ("--json",), "flag", "Print one JSON object on stdout."),
    Opt("quiet", ("--quiet", "-q"), "flag", "Silence warnings."),
)


# ------------------------------------------------------------------------------------ fast argv reader

def _flag_table(options: tuple[Opt, ...]) -> dict[str, tuple[Opt, Any]]:
    """flag -> (option, value for flags and switches / None for options that take a value)."""
    table: dict[str, tuple[Opt, Any]] = {}
    for o in options:
        for flag in o.flags:
            if o.kind == "switch":
                on, off = flag.split("/")
                table[on] = (o, True)
                table[off] = (o, False)
            else:
                table[flag] = (o, True if o.kind == "flag" else None)
    return table


_PLAIN_INT = re.compile(r"[0-9]+")
_PLAIN_FLOAT = re.compile(r"[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")


def _convert(o: Opt, text: str) -> tuple[bool, Any]:
    """(understood, value) for one option value given as text."""
    if o.kind == "int":
        return (True, int(text)) if _PLAIN_INT.fullmatch(text) else (False, None)
    if o.kind == "float":
        return (True, float(text)) if _PLAIN_FLOAT.fullmatch(text) else (False, None)
    if o.kind == "choice":
        return (True, text) if text in o.choices else (False, None)
    return True, text


def parse_estimate_argv(args: list[str], options: tuple[Opt, ...] = ESTIMATE_OPTIONS) -> dict[str, Any] | None:
    """Option values for `estimate` from the words after the command name, or None when the words hold
    anything this reader is not certain typer would read identically (then typer must parse them).

    Understood: `--long value`, `--long=value`, `-x value` (separate word), flags, `--x/--no-x`, and a
    repeated option (the last one wins, as in click). Declined: --help, unknown options, `--`,
    positional words, clustered or attached short options (`-qn8`), a value that starts with '-', a
    missing value, and a value typer would convert differently or reject.
    """
    table = _flag_table(options)
    values: dict[str, Any] = {o.name: o.default for o in options}
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if word.startswith("--") and "=" in word:
            flag, _, text = word.partition("=")
            entry = table.get(flag)
            if entry is None or entry[1] is not None:   # unknown, or a flag given a value
                return None
        else:
            entry = table.get(word)
            if entry is None:
                return None
            if entry[1] is not None:                     # a flag or one side of a switch
                values[entry[0].name] = entry[1]
                continue
            if i >= len(args) or args[i].startswith("-"):
                return None
            text = args[i]
            i += 1
        understood, value = _convert(entry[0], text)
        if not understood:
            return None
        values[entry[0].name] = value
    return values


# ---------------------------------------------------------------------------------------- the command

def _merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`base` updated with the non-None values of `overrides`, recursing into nested mappings."""
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


def _plain(value: Any) -> Any:
    """An Enum choice (typer passes them) as its string value; anything else unchanged."""
    return value.value if isinstance(value, Enum) else value


def scenario_mapping_from_options(config: str | None, **options: Any) -> tuple[dict, dict, bool]:
    """(scenario mapping, shape overrides, use the built-in default) from a config file and CLI
    options (CLI wins). With no scenario option at all, the built-in default scenario is used."""
    from trainest.scenario import load_scenario_file
    base = load_scenario_file(config) if config else {}
    shape = {k: options.pop(k) for k in ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "mlp")}
    shape = {k: _plain(v) for k, v in shape.items() if v is not None}
    parallel = {k: options.pop(k) for k in ("tp", "pp", "dp", "cp", "vpp", "zero", "sequence_parallel",
                                            "tp_overlap", "dp_shard", "pipeline_split", "dp_collectives")}
    if options.pop("fsdp", None):
        parallel["fsdp"] = True
    flat = {k: _plain(v) for k, v in options.items()}
    builtin = not config and not shape and all(v is None for v in flat.values()) \
        and all(v is None for v in parallel.values())
    mapping = _merge(base, {**flat, "parallel": parallel})
    if shape and isinstance(mapping.get("model"), dict):
        mapping["model"] = _merge(mapping["model"], shape)
        shape = {}
    return mapping, shape, builtin


SCENARIO_OPTION_NAMES = tuple(o.name for o in ESTIMATE_OPTIONS
                              if o.name not in ("config", "max_days", "max_cost", "require_fit", "json_out", "quiet"))


def run_estimate(values: dict[str, Any]) -> int:
    """Run `trainest estimate` for parsed option values (keys: the names in ESTIMATE_OPTIONS); print the
    result (JSON or tables) and warnings; return the exit code (0, 1 bad input, 3 a CI gate broken)."""
    from trainest.errors import SpecError
    config = values.get("config")
    max_days, max_cost = values.get("max_days"), values.get("max_cost")
    try:
        from trainest.estimate import estimate as estimate_scenario, fit_suggestions
        from trainest.scenario import scenario_from_mapping
        mapping, shape, builtin = scenario_mapping_from_options(
            config, **{name: values.get(name) for name in SCENARIO_OPTION_NAMES})
        scenario = scenario_from_mapping(mapping, f"scenario {config!r}" if config else "options", shape=shape,
                                         builtin_default=builtin)
        for name, value in (("--max-days", max_days), ("--max-cost", max_cost)):
            if value is not None and not 0 < value < float("inf"):
                raise SpecError(f"{name} {value!r} must be a finite number greater than 0")
        result = estimate_scenario(scenario)
        warnings: list[str] = []
        if not result.memory.fits:
            warnings.append(fit_suggestions(scenario, result))
        if result.training.cost_usd is None:
            warnings.append(f"no price for {scenario.hardware.name}: cost not computed; give --price-per-hour")
    except SpecError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from trainest import report
    if values.get("json_out"):
        print(report.dumps(report.estimate_dict(result, warnings)))
    else:
        report.print_estimate(result)
    if not values.get("quiet"):
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
    if values.get("require_fit") and not result.memory.fits:
        broken.append(f"needs {result.memory.per_device_bytes / 2**30:.1f} GiB per device > "
                      f"{result.memory.capacity_bytes / 2**30:.1f} GiB (--require-fit)")
    if broken:
        for b in broken:
            print(f"Gate failed: {b}", file=sys.stderr)
        return EXIT_GATE
    return EXIT_OK
