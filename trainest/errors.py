"""The one error type for bad input anywhere in trainest.

Every check of user data (CLI options, scenario and runs YAML, hardware and model files) raises
`SpecError` with a one-line message that names the file, the key, the value and what is allowed.
The CLI turns it into `Error: ...` on stderr and exit code 1.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MAX_SHOWN_CHARS = 60     # a bad value is quoted in an error message up to this length


class SpecError(ValueError):
    """Bad input: a value, file or combination that trainest cannot use."""


# Where an input is, as its message names it. A value is read from a place (`where`: a file, a run, or the
# command line's options, knobs.CLI) at a key (`parallel.zero`); the message names the option's flag when the
# place is the command line (`--zero`, knobs.FLAG_AT), else the key in its place (`scenario 'a.yaml'.parallel.zero`).

class Location(str):
    """A location as a message names it (`--zero`), remembering its path (`options.parallel.zero`) so that a key
    within it is found again (`at(at(where, "finetune"), "rank")`: `--lora-rank`)."""

    path: str

    def __new__(cls, shown: str, path: str | None = None) -> Location:
        loc = super().__new__(cls, shown)
        loc.path = shown if path is None else path
        return loc


def _path(where: str) -> str:
    return where.path if isinstance(where, Location) else where


def at(where: str, key: str = "") -> str:
    """The location of `key` in `where` as a message's subject: `--zero`, or `where.parallel.zero`."""
    from trainest.knobs import FLAG_AT
    full = f"{_path(where)}.{key}" if key else _path(where)
    return Location(FLAG_AT.get(full, full), full)


def name_of(where: str, key: str) -> str:
    """`key` named inside a sentence about `where`: its flag on the command line (`--zero`), else the key."""
    from trainest.knobs import FLAG_AT
    return FLAG_AT.get(f"{_path(where)}.{key}", key)


def head(where: str) -> str:
    """The start of a message about `where` as a whole: `where: `, or nothing on the command line (whose
    options the message names by their flags)."""
    from trainest.knobs import CLI
    return "" if _path(where) == CLI else f"{where}: "


# Other tools' names for trainest's keys and values (Megatron-LM, DeepSpeed, Hugging Face, torchtitan, MaxText,
# Composer, NeMo): name -> (trainest's name, what to do with the value). `did_you_mean` names the target when
# it is one of the choices, before any fuzzy match; nothing is accepted under another name.
SYNONYMS: dict[str, tuple[str, str]] = {
    **{k: ("seq_len", "") for k in ("seq_length", "max_seq_length", "max_seq_len", "sequence_length", "seqlen",
                                    "seq_len_tokens", "block_size", "encoder_seq_length", "context_length",
                                    "max_sequence_length", "sequence_len")},
    **{k: ("global_batch", "in sequences") for k in ("global_batch_size", "gbs", "train_batch_size")},
    **{k: ("global_batch_tokens", "") for k in ("global_batch_size_tokens", "tokens_per_batch", "batch_tokens",
                                                "global_batch_size_in_tokens", "tokens_per_step")},
    **{k: ("micro_batch", "sequences per device per micro-batch") for k in (
        "micro_batch_size", "mbs", "train_micro_batch_size_per_gpu", "per_device_batch_size",
        "per_device_train_batch_size", "device_train_microbatch_size", "local_batch_size", "micro_batch_size_per_gpu")},
    "gradient_accumulation_steps": ("global_batch", "= micro_batch × dp × gradient_accumulation_steps, in sequences"),
    "grad_accum": ("global_batch", "= micro_batch × dp × gradient_accumulation_steps, in sequences"),
    **{k: ("devices", "all devices of the run") for k in ("num_gpus", "gpus", "n_gpus", "world_size", "num_devices",
                                                          "gpu_count", "chips", "num_chips", "n_devices")},
    **{k: ("devices_per_node", "") for k in ("gpus_per_node", "nproc_per_node", "devices_per_host")},
    **{k: ("hardware", "a catalog name: `trainest list hardware`") for k in ("gpu", "gpu_type", "accelerator",
                                                                             "device", "device_type")},
    **{k: ("precision", "") for k in ("dtype", "mixed_precision", "compute_dtype")},
    **{k: ("recompute", "none | selective | full | op") for k in (
        "activation_checkpointing", "gradient_checkpointing", "recompute_granularity", "remat_policy",
        "activation_checkpoint", "ac_mode")},
    **{k: ("parallel", "a mapping: {tp, pp, dp, cp, ep, zero, ...}") for k in ("parallelism", "layout")},
    **{k: ("tp", "") for k in ("tensor_parallel", "tensor_model_parallel_size", "tp_size", "tensor_parallel_degree",
                               "tensor_parallel_size")},
    **{k: ("pp", "") for k in ("pipeline_parallel", "pipeline_model_parallel_size", "pp_size",
                               "pipeline_parallel_degree", "pipeline_parallel_size")},
    **{k: ("dp", "") for k in ("data_parallel", "data_parallel_size", "dp_size", "data_parallel_degree")},
    **{k: ("cp", "") for k in ("context_parallel", "context_parallel_size", "cp_size", "context_parallel_degree")},
    **{k: ("ep", "") for k in ("expert_parallel", "expert_model_parallel_size", "ep_size", "expert_parallel_degree",
                               "expert_parallel_size")},
    "expert_tensor_parallel_size": ("etp", ""),
    "virtual_pipeline_model_parallel_size": ("vpp", ""),
    "num_layers_per_virtual_pipeline_stage": ("vpp", "virtual stages per pipeline rank, not layers per stage"),
    "data_parallel_shard_degree": ("dp_shard", "the ZeRO/FSDP shard group size"),
    **{k: ("zero", "the ZeRO stage 0-3") for k in ("zero_stage", "stage", "zero_optimization")},
    "sp": ("sequence_parallel", ""),
    **{k: ("step_time_s", "in seconds") for k in ("step_time", "iteration_time", "iteration_time_s", "time_per_step",
                                                  "step_time_sec", "elapsed_time_per_iteration", "step_s",
                                                  "seconds_per_step")},
    **{k: ("step_time_s", "in seconds: the milliseconds / 1000") for k in (
        "step_time_ms", "iteration_time_ms", "elapsed_time_per_iteration_ms", "time_per_step_ms")},
    **{k: ("tokens_per_s", "all devices together") for k in ("tokens_per_sec", "tokens_per_second", "throughput",
                                                             "tokens_per_s_total", "tok_per_s", "tps_total")},
    **{k: ("tokens_per_s_per_device", "one device's") for k in (
        "tps", "tokens_per_s_per_gpu", "tokens_per_sec_per_gpu", "tokens_per_second_per_gpu",
        "tokens_per_sec_per_device", "tokens_per_second_per_device", "tokens_per_s_per_chip", "tokens_per_s_per_gpu")},
    **{k: ("tflops_per_device", "with flops_formula") for k in (
        "tflops", "tflops_per_gpu", "model_tflops_per_gpu", "tflops_per_chip", "model_tflops", "tflops_per_s_per_gpu")},
    **{k: ("mfu", "a fraction: 42 % is 0.42") for k in ("mfu_pct", "mfu_percent", "model_flops_utilization")},
    **{k: ("flops_formula", "") for k in ("flops_convention", "mfu_convention", "flop_formula", "flops_counting")},
    **{k: ("peak_memory_gib", "GiB per device") for k in (
        "peak_memory_gb", "peak_memory", "max_memory_allocated", "memory_gib", "peak_mem_gib", "max_reserved_gib",
        "memory_per_gpu_gib")},
    **{k: ("device_hours", "with tokens") for k in ("gpu_hours", "chip_hours", "accelerator_hours")},
    # frameworks
    **{k: ("llm-foundry", "llm-foundry trains with Composer") for k in ("composer", "mosaicml", "mosaic",
                                                                        "mosaicml-composer", "foundry")},
    **{k: ("hf-accelerate", "the Hugging Face stack") for k in (
        "accelerate", "hf", "huggingface", "hugging-face", "transformers", "hf-transformers", "trl", "peft",
        "axolotl", "hf-trainer", "hf-fsdp", "accelerate-fsdp")},
    **{k: ("megatron-core", "") for k in ("megatron", "megatron-lm", "mcore", "megatron_core")},
    **{k: ("nemo", "") for k in ("nemo-megatron", "nemo2", "nemo-2", "megatron-bridge", "nemo-framework")},
    **{k: ("deepspeed", "") for k in ("deepspeed-moe", "deepspeed-zero", "zero-3", "ds")},
    **{k: ("megatron-deepspeed", "GPT-NeoX builds on Megatron and DeepSpeed") for k in ("gpt-neox", "neox")},
    **{k: ("olmo-core", "") for k in ("olmo", "allenai-olmo")},
    **{k: ("maxtext", "") for k in ("max-text", "jax", "pax")},
    **{k: ("torchtitan", "") for k in ("titan", "torch-titan")},
    "megablocks": ("megatron-core", "Megablocks is an MoE layer: give the framework that ran it, its Megatron-LM "
                                    "fork (megatron-core) or llm-foundry"),
}


def did_you_mean(value: str, choices: Iterable[str]) -> str:
    """Return ' (did you mean X?)' for the closest choice, or '' when none is close; another tool's name for a
    choice (SYNONYMS) first."""
    import difflib  # only on the error path (start-up time)
    names = sorted(choices)
    text = str(value).strip().lower()
    synonym = SYNONYMS.get(text.replace(" ", "_")) or SYNONYMS.get(text)
    if synonym is not None and synonym[0] in names and synonym[0] != text:
        note = f" {synonym[1]}" if synonym[1] else ""
        return f" (did you mean {synonym[0]!r}?{note})"
    # a name the user typed the start of (`a100`) first, then the fuzzy matches
    prefixed = [c for c in names if text and c.lower().startswith(text)]
    close = prefixed[:3] or difflib.get_close_matches(text, names, n=3, cutoff=0.5)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"


def show(value: Any, limit: int = MAX_SHOWN_CHARS) -> str:
    """repr(value), cut to `limit` characters so an error stays one short line (repr escapes newlines)."""
    try:
        shown = repr(value)
    except (ValueError, RecursionError):   # ints over 4300 digits; absurdly deep nesting
        shown = f"<{type(value).__name__} too large to show>"
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."
