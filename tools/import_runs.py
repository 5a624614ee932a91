#!/usr/bin/env python3
"""Import the shared reference runs into trainest's runs schema (specs/README.md).

Reads  <reference>/runs-megatron-public.yaml   (73 records)
       <reference>/runs-vendors-public.yaml    (661 records)
       <reference>/runs-vtrain-single-fit.yaml (720 records; not public vendor runs: written with
                                                `set: vtrain-single-node`, reported apart)
       <reference>/runs-hunt-2026-12-given.yaml (136 records: InternEvo 7B on A100 over RoCE; MLPerf Training
                                                v3.1-v5.0 Llama 2 70B LoRA of every submitter and Gaudi2 GPT-3 175B)
       <reference>/model-shapes.yaml           (architectures of models the runs only name)
       <reference>/hardware.yaml               (catalog ids, to validate hardware names)
       <reference>/megatron-bridge-recipes.yaml (the settings each Megatron-Bridge run's recipe resolved to:
                                                tools/recipe_settings.py)
       <reference>/memory-given.yaml           (35 records of measured peak memory, no step time: read by
                                                tools/memory_runs.py into specs/runs/memory-given.yaml, `set: memory`)
writes specs/runs/<source-slug>.yaml, one file per source, each {source: ..., runs: [...]} (plus
`set: NAME` for a source that is not one of the public runs; absent = `public`).

Every reference record is written exactly once (records trainest cannot express yet are kept with
``expressible: false`` and a ``reason``). Everything the importer assumes is written into the
record's ``notes``; nothing is special-cased by record id: rules are keyed on the source and on the
record's own fields.

Usage:  python tools/import_runs.py [--reference DIR] [--out DIR] [--check]
Dependencies: Python >= 3.11 standard library + PyYAML.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from collections import OrderedDict, defaultdict
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import memory_runs  # noqa: E402
from recipe_settings import Recipes, conflicting_of, settings_of  # noqa: E402
from trainest.step.remat import REMAT_MODES  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_REFERENCE = REPO.parent / "shared" / "reference"
DEFAULT_OUT = REPO / "specs" / "runs"

# Hardware variants that are not in the shared catalog; their files live in specs/hardware/ and
# were written alongside this importer.
VARIANT_HARDWARE = {"h100-96gb-500w", "a100-80gb-sxm-roce400", "h100-sxm-a3"}

# An A100 record that says its memory size is not stated (vTrain's single-node rows) is mapped to this
# catalog entry; the two SXM4 entries differ in HBM (40 GB HBM2 at 1555 GB/s, 80 GB HBM2e at 2039 GB/s)
# and in their fitted efficiencies, so the choice moves the prediction (docs/validation.md).
A100_UNSTATED = "a100-80gb-sxm"
A100_UNSTATED_WHY = ("the entry of every A100 record that does not say 40GB; the SXM4 entries differ in HBM "
                     "bandwidth and fitted efficiencies, so the choice moves the predicted step, unlike what the "
                     "source notes say: docs/validation.md, vTrain section")

RUN_KEYS = ("id", "set", "source", "model", "seq_len", "hardware", "devices", "devices_per_node", "precision",
            "master_weights", "grad_dtype", "parallel", "micro_batch", "global_batch", "recompute", "recompute_modules",
            "remat_policy", "attention", "packed_length", "framework", "kernels", "cuda_graphs", "moe_dispatcher", "adam_moments", "loss",
            "fp8_params", "bf16_layers", "module_precision", "fused_grouped_mlp", "fp8_attention", "optimizer", "optimizer_in_backward", "offload", "offload_layers", "finetune", "double_quant", "measured", "expressible", "reason",
            "confidence", "notes", "duplicate_of", "unmodelled", "assumed", "conflicting")
# the import notes that say a memory setting was assumed because the record does not state it, and its scenario key:
# a run's `assumed` (validate names them where it calls a run that ran "does not fit")
ASSUMED_NOTES = (("recompute '", "recompute"), ("zero 1 assumed", "parallel.zero"),
                 ("micro_batch not reported", "micro_batch"))


def assumed_settings(notes: list[str]) -> list[str]:
    """The scenario keys the import notes say were assumed (ASSUMED_NOTES), in that order."""
    return [key for start, key in ASSUMED_NOTES
            if any(n.startswith(start) and "assumed" in n for n in notes)]

# LoRA/QLoRA runs: written with the record-level `set: finetune`, so that the public accuracy gates and the
# fit of the shipped efficiencies leave them out (no efficiency is fitted to a fine-tuning run: they test
# the fine-tuning physics out of sample; docs/validation.md reports them apart).
FINETUNE_SET = "finetune"
# What each source's LoRA recipes adapt, when the record does not say (rank, targets, why).
# Packed fine-tuning data sets: the mean length in tokens of one packed example (prompt, context, question,
# answer), the `packed_length` a record gets when its training type says the data set was packed (each example
# attends only to itself in the fused varlen attention, docs/model.md §2.4). SQuAD v1.1 (Rajpurkar et al. 2016):
# a Wikipedia paragraph of about 120 words with a question of about 10 and an answer of about 3, about 1.3
# Llama SentencePiece tokens per English word, plus NeMo's prompt template: about 200 tokens. An estimate,
# not a measurement (the data set is not bundled); the step time moves by under 1 % between 150 and 300.
PACKED_EXAMPLE_TOKENS = {"squad": 200}
LORA_BY_SOURCE = {
    "nemo-2407": (32, "attention", "NeMo 24.07's LoRA recipe (NeMo-Framework-Launcher conf/peft llama squad: "
                                  "peft_scheme lora, lora_tuning.adapter_dim 32, target_modules [attention_qkv]) "
                                  "adapts the fused QKV projection with rank 32; trainest's 'attention' targets "
                                  "adapt q, k, v and the output projection (one adapter more per layer)"),
    "megatron-bridge": (32, "all", "Megatron-Bridge's LoRA (megatron.bridge.peft.lora.LoRA defaults: dim 32, alpha 32, "
                                   "target_modules linear_qkv, linear_proj, linear_fc1, linear_fc2) adapts every "
                                   "linear layer of the blocks with rank 32 (Megatron fuses QKV and gate/up: one "
                                   "adapter each, trainest counts one per projection)"),
    "dgx-spark": (16, "all", "rank and targets not published: rank 16 on every linear layer assumed"),
    "mlperf-training": (16, "attention", "MLPerf Training's llama2_70b_lora benchmark: rank-16 adapters on the "
                                         "attention QKV and output projections (each record's lora block)"),
    "mlx": (8, "attention", "mlx-examples lora.py: rank 8 on the query and value projections (LoRALinear on q_proj, "
                            "v_proj) of the last --lora-layers blocks"),
}
MODEL_KEYS = ("name", "layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "mlp",
              "tied_embeddings", "dropout", "positional")
# the position encoding by model family (the runs files do not state it): rotary in the Llama-family, Qwen, Mistral,
# Nemotron, DeepSeek, Kimi, GPT-OSS, Grok and MaxText's default decoder; ALiBi in MPT; learned absolute positions
# in GPT-2/GPT-3 and Megatron's GPT models (the vTrain GPTs too)
ROPE_FAMILIES = r"llama|internlm|mistral|mixtral|qwen|nemotron|deepseek|kimi|gpt[-_ ]?oss|grok|maxtext|gemma|olmo"
PARALLEL_KEYS = ("tp", "pp", "dp", "cp", "vpp", "zero", "sequence_parallel", "tp_overlap", "dp_shard",
                 "dp_collectives", "dp_overlap",
                 "pipeline_split")
MEASURED_KEYS = ("step_time_s", "tokens_per_s", "tflops_per_device", "mfu", "flops_formula", "peak_memory_gib",
                 "device_hours", "tokens")

# The attention kernel each source's framework ran (the `attention` scenario key; default flash, the
# best fused kernel of the hardware: cuDNN/FlashAttention-3 class on Hopper and later).
ATTENTION_BY_SOURCE = {
    "narayanan2021": ("standard", "Megatron-LM of 2021 predates FlashAttention: materialised scores with "
                                  "the fused scale-mask-softmax kernel"),
    "korthikanti2022": ("standard", "Megatron-LM of 2022 materialises the attention scores (the 5as/h "
                                    "activation term the paper's selective recompute removes)"),
    "llm-foundry": ("flash2", "llm-foundry benchmark configs use attn_impl=flash (the flash-attn "
                              "FlashAttention-2 package), not a Hopper-specific kernel"),
    "torchtitan": ("flash2", "torchtitan uses PyTorch SDPA, whose flash backend is FlashAttention-2"),
}


def attention_kernel(slug: str, hardware: str | None, stated: str | None = None) -> tuple[str | None, str | None]:
    """(attention kernel, note) for a source; the Megatron-LM README's 2021 A100 rows are Narayanan's.
    A record that states its kernel (`stated`, e.g. vTrain's 'standard (fused ... softmax; no flash
    kernel)') is taken at its word."""
    if stated:
        kind = stated.strip().split()[0].lower()
        if kind not in ("standard", "flash", "flash2"):
            raise ValueError(f"unknown stated attention kernel {stated!r}")
        return kind, f"as the source states: '{stated.strip()}'"
    if slug == "megatron-lm-readme" and hardware and hardware.startswith("a100"):
        return ATTENTION_BY_SOURCE["narayanan2021"]
    return ATTENTION_BY_SOURCE.get(slug, (None, None))


# ---------------------------------------------------------------------------------------------
# Per-source conventions. Keyed by the output slug; rules below look these up, never record ids.
# ---------------------------------------------------------------------------------------------
SOURCES = OrderedDict([
    ("narayanan2021", dict(
        framework="megatron-core",
        title="Narayanan et al. 2021, 'Efficient Large-Scale Language Model Training on GPU Clusters "
              "Using Megatron-LM' (SC21, arXiv:2104.04473), Tables 1-2 and Section 5.1",
        flops_formula="narayanan-eq3", zero_default=0, precision_default="fp16",
        recompute_null=("full", "paper FLOP accounting (Eq. 3) includes the recompute forward pass"),
        sp_rule="record")),
    ("korthikanti2022", dict(
        framework="megatron-core",
        title="Korthikanti et al. 2022, 'Reducing Activation Recomputation in Large Transformer Models' "
              "(arXiv:2205.05198, MLSys 2023), Tables 3/5, Section 6.3, abstract",
        flops_formula="korthikanti-eq7", zero_default=0, precision_default="bf16",
        recompute_null=("none", "not stated"), sp_rule="record")),
    ("megatron-lm-readme", dict(
        framework="megatron-core",
        title="NVIDIA/Megatron-LM README.md performance tables (images/cases_april2021.png = Narayanan "
              "2021 Table 1; images/model_table.png + strong_scaling.png, Megatron-Core r0.8, H100, 2024)",
        flops_formula="megatron-core", zero_default=0, precision_default="bf16",
        recompute_null=("none", "recompute not stated in the README; Megatron-Core default is none"),
        sp_rule="megatron", tp_overlap_rule="stated")),
    ("nemo-2407", dict(
        framework="nemo",
        title="NVIDIA/NeMo docs/source/performance/performance_summary.md, NeMo 24.07 container, "
              "DGX-H100, FP8",
        flops_formula="megatron-core", zero_default=1, precision_default="fp8",
        recompute_null=("none", "not stated; NeMo performance recipes run without activation "
                                "recompute unless stated"),
        sp_rule="megatron", tp_overlap_rule="nemo")),
    ("nemo-long-sequence", dict(
        framework="nemo",
        title="NVIDIA/NeMo docs/source/performance/performance_long_sequence.md (Llama 2 7B on DGX-H100, "
              "NeMo 24.03.01; Llama 3 8B on DGX-B200, NeMo 25.04.rc2), FP8",
        flops_formula="megatron-core", zero_default=1, precision_default="fp8",
        recompute_null=("none", "not stated; NeMo performance recipes run without activation "
                                "recompute unless stated"),
        sp_rule="megatron", tp_overlap_rule="nemo")),
    ("megatron-bridge", dict(
        framework="nemo",
        title="NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md and performance-summary-archive.md "
              "(commit 067f987df0), NeMo containers 25.09-26.08",
        flops_formula="megatron-core-causal", zero_default=1, precision_default=None,
        recompute_null=("none", "not stated; Megatron-Bridge performance recipes run without "
                                "activation recompute unless stated"),
        sp_rule="megatron", tp_overlap_rule="nemo")),
    ("llm-foundry", dict(
        framework="llm-foundry",
        title="mosaicml/llm-foundry scripts/train/benchmarking/README.md (commit 8c8dd48f72), MPT "
              "throughput tables",
        flops_formula="llm-foundry", zero_default=0, precision_default=None,
        recompute_null=("none", "activation_checkpointing not set"), sp_rule="none")),
    ("maxtext", dict(
        framework="maxtext",
        title="google/maxtext README.md and MaxText/configs/{v4,v5e,v5p,a3}/README.md (commit e64f6813e0)",
        flops_formula="maxtext", zero_default=3, precision_default="bf16",
        recompute_null=("none", "remat_policy not stated"), sp_rule="maxtext")),
    ("torchtitan", dict(
        framework="torchtitan",
        title="pytorch/torchtitan benchmarks/*.md (commit b5bcd76c66): Llama 3.1 on H100 96GB HBM2e "
              "(2024-12, 2025-06 async TP) and on H200 (Trainy/WhiteFiber, 2025-06)",
        flops_formula=None, zero_default=3, precision_default="bf16",
        recompute_null=("none", "activation checkpointing not stated"), sp_rule="torchtitan",
        # "async TP" rows are NOT imported as tp_overlap: trainest's tp_overlap is Transformer Engine's
        # userbuffers overlap (15 % of the TP traffic left exposed); torchtitan's async-TP tables
        # measure 4-16 % over vanilla TP, far less than that model hides. Noted on each such run.
        tp_overlap_rule="none", kernels_rule="torchtitan")),
    ("olmo-core", dict(
        framework="olmo-core",
        title="allenai/OLMo-core README.md throughput tables (Sep 2024 and Mar 2025)",
        flops_formula=None, zero_default=3, precision_default="bf16",
        recompute_null=("none", "activation checkpointing not stated"), sp_rule="none")),
    ("mlx", dict(
        framework="mlx",
        title="ml-explore/mlx-examples lora/README.md (commit 7ddca42f4d)",
        flops_formula=None, zero_default=0, precision_default="fp16",
        recompute_null=("none", "not stated"), sp_rule="none")),
    ("dgx-spark", dict(
        title="NVIDIA Technical Blog, 'How NVIDIA DGX Spark's Performance Enables Intensive AI Tasks' "
              "(fine-tuning table)",
        flops_formula=None, zero_default=0, precision_default="bf16",
        recompute_null=("none", "not stated"), sp_rule="none")),
    # the second batch of published sources (runs-hunt-2026-12-given.yaml): sources trainest was never fitted on
    ("internevo", dict(
        # InternEvo has its own entry in trainest's framework table (fused kernels, flash attention, its ZeRO-1)
        framework="internevo", framework_note="InternEvo (InternLM's training framework; its ZeRO-1 all-reduces "
        "the gradients and broadcasts each shard owner's updated weights, trainest/frameworks.py)",
        title="InternLM/InternEvo doc/en/train_performance.md (commit 3a665e88d3): InternLM-7B throughput on A100 "
              "80GB nodes over 4x100 Gb RoCE, 8-1024 GPUs",
        flops_formula=None, zero_default=1, precision_default="bf16",
        recompute_null=("none", "activation checkpointing not stated"), sp_rule="record")),
    ("mlperf-training", dict(
        title="MLCommons Training v3.1-v5.0 closed-division results (mlcommons/training_results_v3.1..v5.0): "
              "Llama 2 70B LoRA of every submitter with parseable configs, Intel Gaudi2 GPT-3 175B; steady-state "
              "step time from the logs, evaluation excluded",
        flops_formula=None, zero_default=0, precision_default="bf16",
        recompute_null=("none", "activation checkpointing not stated in the launch config"), sp_rule="record")),
    # Not a public vendor run: the ground truth the vTrain simulator released, measured by its authors.
    # `run_set` is written as the file-level `set:` key, so that the public accuracy gates, the fit of
    # the shipped efficiencies and the cross-validation leave these rows out (docs/validation.md
    # reports them apart). `framework` and `dp_overlap` are facts of the runs that the scenario schema
    # cannot carry yet (issue 12 adds a `framework` input); they are written into each run's notes.
    ("vtrain-single", dict(
        title="Bang et al., 'vTrain: A Simulation Framework for Evaluating Cost-effective and "
              "Compute-optimal Large Language Model Training' (MICRO 2024), released single-node ground "
              "truth VIA-Research/vTrain data/ground_truth_single.csv @ commit f8dda8473a (hidden-1024 rows): "
              "Megatron-DeepSpeed (framework: megatron-deepspeed) on one 8-GPU A100 NVLink node, no gradient "
              "bucketing (data-parallel all-reduce after the backward, not overlapped)",
        flops_formula=None, zero_default=0, precision_default="fp16",
        recompute_null=("full", "vTrain's validation configs set use_checkpoint true"), sp_rule="record",
        run_set="vtrain-single-node", framework="megatron-deepspeed", dp_overlap=False,
        kernels="fused")),
])


def source_slug(source: str) -> str:
    s = source.lower()
    if "megatron-lm" in s and "readme" in s:
        return "megatron-lm-readme"
    if "narayanan" in s:
        return "narayanan2021"
    if "korthikanti" in s:
        return "korthikanti2022"
    if "performance_long_sequence" in s:
        return "nemo-long-sequence"
    if "megatron-bridge" in s:
        return "megatron-bridge"
    if "nvidia/nemo" in s and "performance_summary" in s:
        return "nemo-2407"
    if "llm-foundry" in s:
        return "llm-foundry"
    if "maxtext" in s:
        return "maxtext"
    if "torchtitan" in s:
        return "torchtitan"
    if "olmo-core" in s:
        return "olmo-core"
    if "mlx-examples" in s:
        return "mlx"
    if "dgx spark" in s:
        return "dgx-spark"
    if "internevo" in s:
        return "internevo"
    if "mlcommons/training_results" in s:
        return "mlperf-training"
    if "vtrain" in s and "ground_truth_single" in s:
        return "vtrain-single"
    raise ValueError(f"no source slug for {source!r}")


# ---------------------------------------------------------------------------------------------
# Reading: both reference formats -> one flat dict per record
# ---------------------------------------------------------------------------------------------

def _num(x):
    """Leading integer of a model-shapes value such as '50257 (GPT2BPETokenizer); padded ...'."""
    if x is None:
        return None
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return int(x)
    m = re.match(r"\s*(\d+)", str(x))
    return int(m.group(1)) if m else None


def read_megatron(rec: dict) -> dict:
    p, hw, ms = rec["parallelism"], rec["hardware"], rec["measured"]
    return dict(
        id=rec["id"], file="runs-megatron-public.yaml", source=rec["source"],
        source_detail=rec.get("source_detail"), source_url=None, training_type=None,
        model_name=rec["model_name"], architecture=rec.get("architecture"),
        params_total=(rec["params_b"] * 1e9 if rec.get("params_b") else None),
        layers=rec["layers"], hidden=rec["hidden"], ffn_hidden=rec["ffn_hidden"],
        heads=rec["attention_heads"], kv_heads=rec["kv_heads"], seq_len=rec["seq_len"],
        vocab=rec["vocab"], global_batch=rec["global_batch_size"], micro_batch=rec["micro_batch_size"],
        precision=rec["precision"], hardware=hw["gpu"], memory_gb=hw.get("gpu_memory_gb"),
        devices=hw["gpu_count"], devices_per_node=hw.get("gpus_per_node"),
        tp=p["tp"], pp=p["pp"], dp=p["dp"], cp=p["cp"], ep=p["ep"], vp=p["vp"],
        sequence_parallel=p["sequence_parallel"], zero=p["zero_or_dist_optimizer"], fsdp=p["fsdp"],
        activation_checkpointing=None, recompute=rec["recompute"],
        step_time_s=ms["iteration_time_s"], tokens_per_s_total=ms["tokens_per_s"],
        tokens_per_s_per_device=ms["tokens_per_s_per_gpu"], tflops_per_device=ms["tflops_per_gpu"],
        mfu_pct=ms["mfu_pct"], hfu_pct=ms["hfu_pct"], device_hours=None,
        derived_outcomes=rec.get("derived_outcomes") or {}, derived_fields=rec.get("derived_fields") or [],
        confidence=None, notes=rec.get("notes"),
    )


def read_vendor(rec: dict) -> dict:
    p, o = rec["parallelism"], rec["outcomes"]
    return dict(
        id=rec["id"], file="runs-vendors-public.yaml", source=rec["source"], source_detail=None,
        source_url=rec.get("source_url"), training_type=rec.get("training_type"),
        model_name=rec["model"], architecture=None, params_total=rec.get("params_total"),
        layers=rec["layers"], hidden=rec["hidden"], ffn_hidden=rec["ffn_hidden"], heads=rec["heads"],
        kv_heads=rec["kv_heads"], seq_len=rec["seq_len"], vocab=rec["vocab"],
        global_batch=rec["global_batch_seqs"], micro_batch=rec["micro_batch_size"],
        precision=rec["precision"], hardware=rec["hardware"], memory_gb=rec.get("accelerator_memory_gb"),
        devices=rec["accelerator_count"], devices_per_node=None,
        tp=p["tp"], pp=p["pp"], dp=p["dp"], cp=p["cp"], ep=p["ep"], vp=p["vp"],
        sequence_parallel=None, zero=p["zero_stage"], fsdp=p["fsdp"],
        activation_checkpointing=p["activation_checkpointing"], recompute=None,
        step_time_s=o["step_time_s"], tokens_per_s_total=o["tokens_per_s_total"],
        tokens_per_s_per_device=o["tokens_per_s_per_accel"], tflops_per_device=o["tflops_per_accel"],
        mfu_pct=o["mfu_pct"], hfu_pct=o["hfu_pct"], device_hours=o["accelerator_hours"],
        derived_outcomes={}, derived_fields=rec.get("derived_fields") or [],
        confidence=rec.get("confidence"), notes=rec.get("notes"),
    )


def read_hunt(rec: dict) -> dict:
    """A record of runs-hunt-2026-12-given.yaml: the vendor format plus devices per node, sequence parallelism,
    the framework as the source names it, the LoRA block and the interconnect."""
    flat = read_vendor({**rec, "outcomes": {**rec["outcomes"], "accelerator_hours": None}})
    p = rec["parallelism"]
    flat.update(file="runs-hunt-2026-12-given.yaml", devices_per_node=rec.get("devices_per_node"),
                sequence_parallel=p.get("sequence_parallel"), framework_text=rec.get("framework"),
                lora=rec.get("lora"), mlp=rec.get("mlp_type"))
    return flat


def hunt_framework(r: dict) -> tuple[str, str]:
    """(trainest framework, why) of a record that names its own stack (`framework_text`, and the implementation
    directory its source path names): NVIDIA's MLPerf LoRA implementations (and the partners' reruns of them) are
    NeMo; Megatron-DeepSpeed and DeepSpeed by name; any other stack (AMD's PyTorch/ROCm and LLMBoost recipes) gets
    the default a user who states none gets."""
    text = f"{r.get('framework_text') or ''} {r['source']}".lower()
    if "megatron-deepspeed" in text:
        return "megatron-deepspeed", "the record names Megatron-DeepSpeed"
    if "deepspeed" in text:
        return "deepspeed", "the record names DeepSpeed (Hugging Face Transformers + PEFT on DeepSpeed ZeRO)"
    if "nemo" in text or "nvidia" in (r["hardware"] or "").lower():
        return "nemo", ("NVIDIA's llama2_70b_lora implementation is NeMo (the record's stack or implementation "
                        "directory; partner rows rerun it)")
    return "megatron-core", (f"the stack '{r.get('framework_text')}' has no entry in trainest's framework table: "
                             f"the default a user who states none gets")


HUNT_CUDA_GRAPHS = re.compile(r"MCORE/FULL CUDA graph=([01])")


HUNT_FP8_DPA = re.compile(r"FP8_DPA=(1|0|True|False)\b")


def hunt_fp8_attention(r: dict) -> bool | None:
    """Whether an MLPerf record's configuration runs Transformer Engine's FP8 dot-product attention (its notes:
    "FP8_DPA=1" or "=True": on; "=0" or "=False": off), or None where it says nothing."""
    found = HUNT_FP8_DPA.search(" ".join(str(r.get("notes") or "").split()))
    return None if found is None else found.group(1) in ("1", "True")


def hunt_cuda_graphs(r: dict) -> str | None:
    """The CUDA graphs an MLPerf record's configuration states (its notes: "MCORE/FULL CUDA graph=1" captures the
    whole training step: full; "=0": none), or None where it says nothing."""
    found = HUNT_CUDA_GRAPHS.search(" ".join(str(r.get("notes") or "").split()))
    return None if found is None else ("full" if found.group(1) == "1" else "none")


def read_vtrain(rec: dict) -> dict:
    """A record of runs-vtrain-single-fit.yaml: the vendor-file format with the model's `mlp`, the
    attention kernel, the pipeline schedule and gradient bucketing stated, and only a step time."""
    p, o = rec["parallelism"], rec["outcomes"]
    return dict(
        id=rec["id"], file="runs-vtrain-single-fit.yaml", source=rec["source"], source_detail=None,
        source_url=rec.get("source_url"), training_type=rec.get("training_type"),
        model_name=rec["model"], architecture=None, params_total=None,
        layers=rec["layers"], hidden=rec["hidden"], ffn_hidden=rec["ffn_hidden"], heads=rec["heads"],
        kv_heads=rec["kv_heads"], seq_len=rec["seq_len"], vocab=rec["vocab"], mlp=rec["mlp"],
        attention_text=rec["attention"],
        global_batch=rec["global_batch_seqs"], micro_batch=rec["micro_batch_size"],
        precision=rec["precision"], hardware=rec["hardware"], memory_gb=None,
        devices=rec["accelerator_count"], devices_per_node=None,
        tp=p["tp"], pp=p["pp"], dp=p["dp"], cp=p["cp"], ep=None, vp=p["vp"],
        sequence_parallel=p["sequence_parallel"], zero=p["zero_stage"], fsdp=None,
        activation_checkpointing=p["activation_checkpointing"], recompute=None,
        pipeline_schedule=p["pipeline_schedule"], gradient_bucketing=p["gradient_bucketing"],
        step_time_s=o["step_time_s"], tokens_per_s_total=None, tokens_per_s_per_device=None,
        tflops_per_device=None, mfu_pct=None, hfu_pct=None, device_hours=None,
        derived_outcomes={}, derived_fields=rec.get("derived_fields") or [],
        confidence=rec.get("confidence"), notes=rec.get("notes"),
    )


def megatron_padded_vocab(vocab: int, tp: int, divisible_by: int = 128) -> int:
    """Megatron's padded vocabulary: `vocab` rounded up to a multiple of divisible_by·tp
    (megatron/tokenizer: _vocab_size_with_padding, --make-vocab-size-divisible-by 128)."""
    multiple = divisible_by * tp
    return -(-vocab // multiple) * multiple


GPT2_VOCAB = 50257   # GPT-2 BPE tokenizer (Radford et al. 2019; Megatron GPT2BPETokenizer)


# ---------------------------------------------------------------------------------------------
# Model shapes
# ---------------------------------------------------------------------------------------------

def _norm_name(name: str) -> str:
    name = re.sub(r"\(.*?\)", "", name)      # drop parenthetical qualifiers
    return re.sub(r"[^a-z0-9]", "", name.lower())


class Shapes:
    def __init__(self, data: dict):
        self.data = {k: v for k, v in data.items() if not k.startswith("_")}
        self.keys = {_norm_name(k): k for k in self.data}

    def lookup(self, model_name: str):
        """model-shapes key for a record's model name: exact normalized match, else the longest key
        that is a prefix of the record's normalized name (e.g. 'DeepSeek-V3 671B-A37B (MoE, MLA)' ->
        'DeepSeek-V3 671B')."""
        n = _norm_name(model_name)
        if n in self.keys:
            return self.keys[n]
        best = None
        for kn, k in self.keys.items():
            if n.startswith(kn) and (best is None or len(kn) > len(_norm_name(best))):
                best = k
        return best

    def get(self, key):
        return self.data[key]


def mlp_from_text(text: str | None):
    """(mlp kind, note) from an architecture / mlp_type description."""
    if not text:
        return None, None
    t = text.lower()
    if "squared relu" in t or "relu2" in t or "squared-relu" in t:
        return "gelu", ("squared-ReLU MLP without gating (2 weight matrices) imported as mlp 'gelu': "
                        "same FLOPs and parameter count")
    if "swiglu" in t or "silu" in t:
        return "swiglu", None
    if "gelu" in t or "non-gated" in t:
        return "gelu", None
    if "gated" in t:
        return "swiglu", None
    return None, None


def mlp_from_name(name: str):
    t = name.lower()
    if "nemotron" in t:
        return "gelu", ("Nemotron uses a squared-ReLU MLP without gating (2 weight matrices): imported "
                        "as mlp 'gelu' (same FLOPs and parameter count)")
    for k in ("llama", "mistral", "qwen", "olmo", "deepseek", "kimi", "maxtext"):
        if k in t:
            return "swiglu", None
    for k in ("gpt", "mpt"):
        if k in t:
            return "gelu", None
    return None, None


# ---------------------------------------------------------------------------------------------
# Field mappings
# ---------------------------------------------------------------------------------------------

def map_hardware(text: str | None):
    """(catalog id or None, note or None)."""
    if not text:
        return None, None
    t = text.lower()
    if "h100" in t and "96gb" in t.replace(" ", "") and "hbm2e" in t:
        return "h100-96gb-500w", None
    if "dgx spark" in t or "gb10" in t:
        return "dgx-spark", None
    if "h200-nvl" in t or "h200 nvl" in t:
        return None, None         # the 600 W PCIe H200 NVL: no catalog entry (not the 700 W SXM part)
    for name in ("mi325x", "mi300x", "gaudi2", "l40s"):
        if name in t.replace(" ", ""):
            return name, None
    if "gb300" in t:
        return "gb300", None
    if "gb200" in t:
        return "gb200", None
    if "b300" in t:
        return "b300", None
    if "b200" in t:
        return "b200", None
    if "h200" in t:
        return "h200-sxm", None
    if "h100" in t and re.search(r"\bgcp a3 vm\b", t):
        return "h100-sxm-a3", ("the record's GPUs are in Google Cloud A3 VMs: the hand-written variant "
                               "specs/hardware/h100-sxm-a3.yaml (the H100 SXM5 with A3's 4x200 Gb/s GPUDirect-TCPX "
                               "per 8 GPUs between VMs)")
    if "h100" in t:
        note = None
        if "sxm" not in t and "dgx" not in t and "a3" not in t:
            note = f"hardware '{text}' mapped to h100-sxm (SXM5 80GB assumed; the source does not say)"
        return "h100-sxm", note
    if "a100" in t and "80gb" in t.replace(" ", "") and re.search(r"4\s*x\s*100\s*gb\s*roce", t):
        return "a100-80gb-sxm-roce400", ("the record's cluster has 4x100 Gb RoCE per 8-GPU node: the hand-written "
                                         "variant specs/hardware/a100-80gb-sxm-roce400.yaml (the 80GB SXM4 with "
                                         "that network)")
    if "a100" in t and "40gb" in t.replace(" ", "") and "not stated" not in t:
        return "a100-40gb-sxm", None
    if "a100" in t and "not stated" in t:
        return A100_UNSTATED, (f"hardware '{text}': memory size not stated; {A100_UNSTATED} assumed "
                               f"({A100_UNSTATED_WHY})")
    if "a100" in t:
        return "a100-80gb-sxm", None
    if "tpu v5p" in t:
        return "tpu-v5p", None
    if "tpu v5e" in t:
        return "tpu-v5e", None
    if "tpu v4" in t:
        return "tpu-v4", None
    if "m2 ultra" in t:
        return "apple-m2-ultra", None
    return None, None


@functools.cache
def catalog_network(hardware: str) -> bool:
    """Whether the hardware file of `hardware` (specs/hardware) gives a scale-out network rate (each file read
    once per import, with libyaml's safe loader when present)."""
    path = REPO / "specs" / "hardware" / f"{hardware}.yaml"
    if not path.is_file():
        return True
    system = (_read_yaml(path) or {}).get("system") or {}
    return system.get("scale_out_gbit_per_s") is not None


def devices_per_node_from_text(text: str | None):
    if not text:
        return None
    t = text.lower()
    m = re.search(r"(\d+)\s*(?:gpus)?\s*/\s*(?:node|vm)", t) or re.search(r"(\d+) gpus/vm", t) \
        or re.search(r"\bone (\d+)-gpu\b[^;,)]*\bnode\b", t)
    if m:
        return int(m.group(1))
    if re.search(r"\bdgx[- ]?(h100|b200|b300|a100)\b", t) or "selene" in t or "grand teton" in t:
        return 8
    return None


def map_precision(text, source_default):
    """(precision, notes[])."""
    notes = []
    if text is None:
        return None, notes
    t = str(text).lower()
    if "nvfp4" in t or re.search(r"\bfp4\b", t):
        return "fp4", notes
    if "4-bit" in t:
        notes.append(f"precision '{text}': 4-bit quantized base weights with 16-bit compute; imported as bf16")
        return "bf16", notes
    if "fp8" in t or "float8" in t:
        if "inferred" in t:
            notes.append("precision FP8 inferred by the transcriber: release 25.09 tables have no precision "
                         "column (footnote on quantization granularities implies FP8 recipes)")
        if "mx" in t:
            notes.append(f"precision '{text}' (MXFP8, block-scaled) imported as fp8")
        elif "cs" in t.replace("-", " ").split() or "fp8-cs" in t:
            notes.append(f"precision '{text}' (FP8 current scaling) imported as fp8")
        elif "bf16" in t or "float8" in t:
            notes.append(f"precision '{text}': float8 GEMMs for the linear layers, attention and the rest "
                         f"in bf16; imported as fp8")
        return "fp8", notes
    if "bf16" in t or "bfloat16" in t:
        return "bf16", notes
    if "fp16" in t or "float16" in t:
        return "fp16", notes
    if "16-bit" in t:
        notes.append(f"precision '{text}': 16-bit mixed precision imported as {source_default} "
                     f"(fp16 and bf16 have the same A100 peak, 312 TFLOP/s; with fp16 the gradients are "
                     f"kept and reduced in 16 bits, with bf16 in 32)")
        return source_default, notes
    if "fp32" in t:
        return "fp32", notes
    if "not stated" in t:
        return None, notes
    return None, notes


def maxtext_policy(rec):
    """The MaxText remat_policy a record states ("remat_policy=NAME"), else None."""
    text = rec["activation_checkpointing"] if isinstance(rec["activation_checkpointing"], str) else rec["recompute"]
    t = str(text).lower() if text is not None else ""
    return t.split("=", 1)[1] if t.startswith("remat_policy=") else None


def map_recompute(rec, source_cfg):
    """(recompute, note or None)."""
    ac = rec["activation_checkpointing"]
    rc = rec["recompute"]
    if ac is True:
        return "full", None
    if ac is False:
        return "none", None
    text = ac if isinstance(ac, str) else rc
    if text is None:
        kind, why = source_cfg["recompute_null"]
        return kind, f"recompute '{kind}' assumed: {why}"
    t = str(text).lower()
    if t.startswith("remat_policy="):
        pol = t.split("=", 1)[1]
        if pol in REMAT_MODES:      # the run's remat_policy (maxtext_policy) decides recompute (docs/model.md §7.11)
            return REMAT_MODES[pol][0], None
        return "selective", (f"MaxText remat_policy={pol} imported as 'selective' (saves some activations, "
                             f"recomputes the rest; not Megatron's exact selective recompute)")
    if t.startswith("full"):
        return "full", None
    if "selective" in t:
        if "per-op" in t or source_cfg is SOURCES["torchtitan"]:
            return "op", (f"recompute '{text}' imported as op: torchtitan's selective activation checkpointing "
                          f"(selective_ac_option 'op' in its llama3 configs) saves every compute op's output except "
                          f"every second matmul, so it recomputes those matmuls and the element-wise ops and keeps "
                          f"attention, unlike Megatron's selective recompute")
        return "selective", None
    if t in ("none", "false"):
        return "none", None
    if t.startswith("none"):
        return "none", f"recompute none: '{text}'"
    raise ValueError(f"unknown recompute {text!r}")


def map_zero(rec, source_cfg):
    """(zero stage, note or None)."""
    z, fsdp = rec["zero"], rec["fsdp"]
    if isinstance(z, int):
        return z, None
    if isinstance(z, str):
        zl = z.lower()
        if "stage 3" in zl:
            return 3, None
        if "distributed optimizer" in zl:
            return 1, f"zero 1: '{z}' (Megatron distributed optimizer = ZeRO-1-style optimizer-state sharding)"
    if isinstance(fsdp, str):
        fl = fsdp.lower()
        if fl.startswith("none"):
            pass
        elif "shard_grad_op" in fl:
            return 2, "FSDP SHARD_GRAD_OP imported as zero 2"
        elif "hsdp" in fl:
            return 3, (f"'{fsdp}': hybrid sharding (shard within a group, replicate across groups) imported "
                       f"as zero 3 over all data-parallel ranks (schema has no HSDP)")
        elif "ici_fsdp" in fl and ("dcn" in fl or "slice" in fl):
            return 3, (f"MaxText '{fsdp}': FSDP inside each slice, data parallel across slices over DCN; "
                       f"imported as zero 3 sharded within a slice (parallel.dp_shard = dp / slices) and replicated across slices")
        elif "megatron fsdp" in fl:
            return 3, "Megatron FSDP imported as zero 3"
        elif "full_shard" in fl or "fsdp" in fl:
            return 3, None
    d = source_cfg["zero_default"]
    if d == 1:
        return 1, ("zero 1 assumed: Megatron/NeMo performance recipes use the distributed optimizer by "
                   "default (not stated in the record)")
    return d, None


ZERO1_STATED = re.compile(r"\b[Zz]ero1\s*=\s*(-?\d+)")


def stated_zero1_group(notes: str | None, dp: int | None) -> int | None:
    """InternEvo's ZeRO-1 shard group as its record states it (`zero1=8`: the optimizer sharded within groups
    of 8 ranks), or None where it shards over every data-parallel rank (`zero1=-1`, or a group of dp or more)."""
    found = ZERO1_STATED.search(" ".join(str(notes or "").split()))
    size = int(found.group(1)) if found else -1
    return size if dp and 1 <= size < dp and dp % size == 0 else None


def hybrid_shard_size(fsdp, dp):
    """ZeRO shard-group size for hybrid sharding stated in the source, or None (shard over all dp).

    MaxText multi-slice: FSDP inside each slice over ICI, data parallel across slices over DCN, so
    the shard group is dp / slices; 'ici_fsdp_parallelism=K within VM' shards over K chips.
    """
    if not isinstance(fsdp, str):
        return None
    m = re.search(r"ici_fsdp=(\d+)", fsdp)
    if m and int(m.group(1)) < dp and dp % int(m.group(1)) == 0:
        return int(m.group(1))
    m = re.search(r"(\d+) slice\(s\)", fsdp)
    if m and int(m.group(1)) > 1 and dp % int(m.group(1)) == 0:
        return dp // int(m.group(1))
    m = re.search(r"ici_fsdp_parallelism=(\d+) within VM", fsdp)
    if m and int(m.group(1)) < dp and dp % int(m.group(1)) == 0:
        return int(m.group(1))
    return None


def layers_per_stage_vpp(layers, pp):
    """Smallest interleaving factor >= 2 that divides the layers of a pipeline stage."""
    if not layers or not pp or pp <= 1 or layers % pp:
        return None
    per_stage = layers // pp
    for v in range(2, per_stage + 1):
        if per_stage % v == 0:
            return v
    return None


# ---------------------------------------------------------------------------------------------
# Import
# ---------------------------------------------------------------------------------------------

def _read_yaml(path: Path):
    """A reference file, with libyaml's safe loader when present (the same data, ~10x faster)."""
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506


class Importer:
    def __init__(self, reference: Path):
        self.reference = reference
        self.meg = [read_megatron(r) for r in _read_yaml(reference / "runs-megatron-public.yaml")]
        self.ven = [read_vendor(r) for r in _read_yaml(reference / "runs-vendors-public.yaml")]
        self.vtrain = [read_vtrain(r) for r in
                       _read_yaml(reference / "runs-vtrain-single-fit.yaml")]
        self.hunt = [read_hunt(r) for r in _read_yaml(reference / "runs-hunt-2026-12-given.yaml")]
        self.shapes = Shapes(_read_yaml(reference / "model-shapes.yaml"))
        self.catalog = set(_read_yaml(reference / "hardware.yaml").keys())
        self.catalog |= VARIANT_HARDWARE
        self.recipes = Recipes(reference / "megatron-bridge-recipes.yaml")
        self.records = self.meg + self.ven + self.vtrain + self.hunt
        for r in self.records:
            r["slug"] = source_slug(r["source"])
        self._link_duplicates()

    # -- duplicates: the vendor file re-transcribes some Megatron/NeMo tables -------------------
    @staticmethod
    def _primary_value(r):
        for k in ("tflops_per_device", "tokens_per_s_per_device", "step_time_s", "mfu_pct"):
            if r[k] is not None:
                return (k, r[k])
        return None

    def _link_duplicates(self):
        for r in self.records:
            r["dup"] = None
        index = defaultdict(list)
        for r in self.meg:
            index[(r["seq_len"], r["global_batch"], self._primary_value(r))].append(r)
        for r in self.ven:
            if r["slug"] not in ("narayanan2021", "megatron-lm-readme", "nemo-2407", "nemo-long-sequence"):
                continue
            cands = index.get((r["seq_len"], r["global_batch"], self._primary_value(r)), [])
            cands = [c for c in cands if c["slug"] == r["slug"] or
                     {c["slug"], r["slug"]} == {"narayanan2021", "megatron-lm-readme"}]
            if len(cands) == 1 and cands[0]["dup"] is None:
                r["dup"], cands[0]["dup"] = cands[0], r

    # -- one record ------------------------------------------------------------------------------
    def convert(self, r: dict) -> dict:
        cfg = SOURCES[r["slug"]]
        notes: list[str] = []       # import assumptions
        reasons: list[str] = []     # why not expressible
        dup = r["dup"]
        confidence = r["confidence"]

        # ---- model -------------------------------------------------------------------------
        shape_key = self.shapes.lookup(r["model_name"])
        if shape_key is None and dup is not None:
            shape_key = self.shapes.lookup(dup["model_name"])
        shape = self.shapes.get(shape_key) if shape_key else None
        fields = {}
        filled = []
        for key, skey in (("layers", "num_layers"), ("hidden", "hidden_size"), ("ffn_hidden", "ffn_hidden_size"),
                          ("heads", "num_attention_heads"), ("kv_heads", "num_kv_heads"), ("vocab", "vocab_size")):
            val = r[key]
            if val is None and shape is not None and _num(shape.get(skey)) is not None:
                val = _num(shape.get(skey))
                filled.append(f"{key}={val}")
            elif val is not None and shape is not None and _num(shape.get(skey)) not in (None, val) \
                    and not (shape.get("moe") and key == "ffn_hidden"):
                notes.append(f"{key}: record says {val}, model-shapes.yaml '{shape_key}' says "
                             f"{_num(shape.get(skey))}; kept the record's value")
            fields[key] = val
        if filled:
            notes.append(f"shape resolved through model-shapes.yaml '{shape_key}': " + ", ".join(filled))
        if dup is not None:
            dfill = []
            for key in ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab"):
                if fields[key] is None and dup[key] is not None:
                    fields[key] = dup[key]
                    dfill.append(f"{key}={dup[key]}")
            if dfill:
                notes.append(f"filled from the duplicate transcription {dup['id']} ({dup['file']}): "
                             + ", ".join(dfill))
        name = r["model_name"]
        mlp, mlp_note = None, None
        if r.get("mlp") in ("gelu", "swiglu"):
            mlp = r["mlp"]       # stated by the record (vTrain file)
        if mlp is None and shape is not None:
            mlp, mlp_note = mlp_from_text(shape.get("mlp_type"))
        if mlp is None:
            mlp, mlp_note = mlp_from_text(r["architecture"])
        if mlp is None:
            mlp, mlp_note = mlp_from_name(name)
        if mlp_note:
            notes.append(mlp_note)
        if fields["ffn_hidden"] is None and mlp == "gelu" and fields["hidden"] and re.search(r"gpt", name.lower()):
            fields["ffn_hidden"] = 4 * fields["hidden"]
            notes.append("ffn_hidden not given: 4*hidden assumed (GPT default)")
        if fields["kv_heads"] is None and fields["heads"] is not None and shape is None:
            fields["kv_heads"] = fields["heads"]
            notes.append("kv_heads not given: = heads assumed (multi-head attention)")
        tied = None
        if shape is not None and shape.get("tied_embeddings") is not None:
            tied = bool(shape["tied_embeddings"])
        elif r["architecture"] and "tied" in r["architecture"].lower():
            tied = True
        elif re.search(r"\b(gpt|mpt)", name.lower()):
            tied = True
            notes.append("tied_embeddings true assumed (Megatron GPT / MPT share input and output embeddings)")
        elif mlp == "swiglu" and fields["layers"] is not None:
            tied = False
        # dropout: Megatron's GPT recipes (Megatron-LM and NeMo GPT-3 configs) keep the 0.1 hidden and
        # attention dropout of GPT-3; the Llama-family, MPT, Nemotron and MaxText recipes train without it
        dropout = bool(mlp == "gelu" and re.search(r"\bgpt", name.lower()))
        notes.append("dropout true assumed (Megatron GPT recipes: hidden and attention dropout 0.1)" if dropout else
                     "dropout false assumed (this model family's recipes train without dropout)")
        positional = positional_of(name, shape, notes)
        model = OrderedDict(name=name, layers=fields["layers"], hidden=fields["hidden"],
                            ffn_hidden=fields["ffn_hidden"], heads=fields["heads"], kv_heads=fields["kv_heads"],
                            vocab=fields["vocab"], mlp=mlp, tied_embeddings=tied, dropout=dropout,
                            positional=positional)

        # mixture of experts and multi-head latent attention from model-shapes.yaml; features trainest
        # cannot express (DeepSeek V4's compressed sparse attention) stay reasons
        expressed_moe = False
        if shape is not None:
            if shape.get("mla") and shape["mla"].get("kv_lora_rank") is None:
                reasons.append("compressed sparse attention with one shared KV head (not MLA: no kv_lora_rank)")
            else:
                if shape.get("moe"):
                    model["moe"] = moe_block(shape["moe"], name, notes, shape)
                    expressed_moe = True
                    if fields["ffn_hidden"] is None or not model["moe"].get("dense_layers"):
                        # no dense layer: its width is unused (model-shapes: the config's unused intermediate_size)
                        model.pop("ffn_hidden")
                if shape.get("hybrid"):
                    model["hybrid"] = hybrid_block(shape["hybrid"])
                    model["layers"] = len(model["hybrid"]["pattern"])
                    if "-" not in model["hybrid"]["pattern"]:      # no dense MLP block: no dense width
                        model.pop("ffn_hidden", None)
                    notes.append(f"hybrid block pattern from model-shapes.yaml ({model['hybrid']['pattern']}: "
                                 f"M Mamba-2, * attention, E MoE); layers = its {model['layers']} blocks")
                    if not shape["hybrid"].get("mamba_conv_kernel"):
                        notes.append("Mamba-2 convolution width 4 assumed (model-shapes.yaml does not give it; "
                                     "mamba_ssm's default)")
                if shape.get("mla"):
                    model["mla"] = mla_block(shape["mla"])
                    model["kv_heads"] = fields["heads"]
                    notes.append("multi-head latent attention from model-shapes.yaml (kv_heads = heads: MLA gives "
                                 "every head its own keys and values)")
                if shape.get("mtp") and (shape.get("moe") or shape.get("mla")) and re.search(r"w/o[ _]mtp", r["id"], re.I):
                    notes.append("multi-token prediction off: the row label says w/o MTP")
                elif shape.get("mtp") and (shape.get("moe") or shape.get("mla")):
                    model["mtp"] = mtp_block(shape["mtp"], bool(shape.get("moe")))
                    notes.append(f"multi-token prediction from model-shapes.yaml ({shape['mtp']}): depth "
                                 f"{model['mtp']['depth']}, blocks {model['mtp']['pattern']}"
                                 + (", one shared module" if model["mtp"].get("shared") else ""))
                if shape.get("sliding_window") and shape.get("moe"):
                    window = window_block(shape["sliding_window"])
                    if window is not None:
                        model["attention_window"] = window
                        notes.append(f"sliding-window attention from model-shapes.yaml ({shape['sliding_window']}): "
                                     f"attention_window size {window['size']}, every 2nd "
                                     f"layer full")
                    else:
                        notes.append(f"sliding-window attention ({shape['sliding_window']}) modelled as full causal "
                                     f"attention over seq_len")
                if shape.get("linear_bias") and shape.get("moe"):
                    notes.append("attention biases and learnable attention sinks not counted (the experts' biases "
                                 "are: moe.expert_bias)")
        if not expressed_moe and not (shape or {}).get("moe"):
            if r["ep"] and r["ep"] > 1:
                reasons.append(f"expert parallelism ep={r['ep']} for a model without a MoE shape")
            elif re.search(r"\bmoe\b", name.lower()) and not reasons:
                reasons.append("MoE (no shape in model-shapes.yaml)")
        if expressed_moe and re.search(r"tokendrop", r["id"], re.I):
            model["moe"]["capacity_factor"] = 1.0
            notes.append("capacity_factor 1.0: the row label says tokendrop (Megatron-Bridge token-drop recipes: "
                         "moe_expert_capacity_factor 1.0); with forced balance no token is dropped")
        head_dim = None
        if shape is not None and _num(shape.get("head_dim")):
            head_dim = _num(shape.get("head_dim"))
        elif r["notes"]:
            m = re.search(r"head_dim (?:default )?(\d+)", r["notes"])
            if m:
                head_dim = int(m.group(1))
        if head_dim and fields["heads"] and fields["hidden"] and head_dim * fields["heads"] != fields["hidden"] \
                and not (shape is not None and shape.get("mla")):
            # attention width a*d != h (MaxText keeps head_dim 128): carried as the optional model key
            # head_dim, which trainest/catalog.py model_from_mapping accepts
            model["head_dim"] = head_dim
            notes.append(f"head_dim {head_dim} kept (attention width heads*head_dim = {fields['heads']}*{head_dim} = "
                         f"{fields['heads'] * head_dim} != hidden {fields['hidden']})")
        missing = [k for k in ("layers", "hidden", "ffn_hidden", "heads", "vocab") if fields[k] is None
                   and not (k == "ffn_hidden" and expressed_moe and "ffn_hidden" not in model)]
        if missing:
            reasons.append("missing shape (" + ", ".join(missing) + ")")
        tt = (r["training_type"] or "").lower()
        finetune = None
        packed = next((n for name, n in PACKED_EXAMPLE_TOKENS.items() if "packed" in tt and name in tt), None)
        packed_note = (f"packed sequences: each example attends only to itself; packed_length {packed} tokens, the "
                       f"estimated mean example length of the data set (tools/import_runs.py: PACKED_EXAMPLE_TOKENS)"
                       if packed else "")
        if "lora" in tt:
            finetune, ft_notes, ft_reasons = lora_of(r, tt, fields["layers"])
            notes.extend(ft_notes)
            reasons.extend(ft_reasons)
            if packed_note:
                notes.append(packed_note)
        if "sft" in tt or "full fine-tune" in tt:
            notes.append(f"training type '{r['training_type']}': full-parameter fine-tuning, same compute as "
                         "pre-training" + (f"; {packed_note}" if packed_note else ""))

        # ---- hardware ------------------------------------------------------------------------
        hardware, hnote = map_hardware(r["hardware"])
        if hnote:
            notes.append(hnote)
        if hardware is None:
            reasons.append(f"unknown hardware '{r['hardware']}' (not in the catalog)")
        elif hardware not in self.catalog:
            raise ValueError(f"{r['id']}: hardware {hardware} not in catalog")

        framework, framework_why = (cfg["framework"], cfg.get("framework_note")) if cfg.get("framework") else \
            hunt_framework(r) if r.get("framework_text") else (None, None)
        # a Megatron source's ZeRO-3 baseline ran DeepSpeed's ZeRO-3 (Narayanan et al. 2021 Table 2: "ZeRO-3
        # (DeepSpeed) without tensor/pipeline parallelism"): Megatron's model under the DeepSpeed engine, which
        # gathers ZeRO-3 parameters submodule by submodule (frameworks.py `zero3_live_params`)
        if framework == "megatron-core" and re.search(r"ZeRO-3 \(DeepSpeed\)", str(r.get("notes") or "")):
            framework, framework_why = "megatron-deepspeed", ("the record names DeepSpeed's ZeRO-3 (Megatron's GPT "
                                                              "model under the DeepSpeed engine)")
        if framework and framework_why:
            notes.append(f"framework {framework}: {framework_why}")
        graphs = hunt_cuda_graphs(r) if r.get("framework_text") else None
        fp8_dpa = hunt_fp8_attention(r) if r.get("framework_text") else None
        if fp8_dpa:
            notes.append("fp8_attention true (with an FP8 recipe): the record's configuration sets FP8_DPA=1 "
                         "(Transformer Engine's FP8 dot-product attention: its products in FP8, not bf16)")
        if graphs is not None:
            notes.append(f"cuda_graphs {graphs}: the record's configuration sets MCORE/FULL CUDA graph="
                         f"{1 if graphs == 'full' else 0}")

        # ---- precision -----------------------------------------------------------------------
        precision, pnotes = map_precision(r["precision"], cfg["precision_default"] or "bf16")
        notes.extend(pnotes)
        if precision is None and dup is not None:
            dcfg = SOURCES[dup["slug"]]
            precision, _ = map_precision(dup["precision"], dcfg["precision_default"] or "bf16")
            if precision:
                notes.append(f"precision not stated in this transcription; {precision} from {dup['id']}")
        if precision is None and fp8_dpa:
            # Transformer Engine applies FP8 dot-product attention only inside an FP8 recipe (fp8_dpa is a field of
            # the recipe fp8_autocast runs under): a configuration that turns it on trains with FP8 GEMMs
            precision = "fp8"
            notes.append("precision not stated: fp8 assumed, as the configuration sets FP8_DPA=1, which Transformer "
                         "Engine applies only under an FP8 recipe")
        if precision is None:
            precision = cfg["precision_default"]
            if r["slug"] == "megatron-lm-readme" and "april2021" not in r["source"]:
                notes.append("precision not stated: bf16 assumed (published MFU matches the dense BF16 peak "
                             "989 TFLOP/s)")
            elif precision:
                notes.append(f"precision not stated: {precision} assumed")

        # ---- parallelism ---------------------------------------------------------------------
        tp, pp, cp = r["tp"], r["pp"], r["cp"]
        vp_raw = r["vp"]
        micro = r["micro_batch"]
        if dup is not None:
            for key in ("tp", "pp"):
                if r[key] is None and dup[key] is not None:
                    if key == "tp":
                        tp = dup["tp"]
                    else:
                        pp = dup["pp"]
                    notes.append(f"{key}={dup[key]} from the duplicate transcription {dup['id']}")
            if vp_raw is None and dup["vp"] is not None:
                vp_raw = dup["vp"]
            if micro is None and dup["micro_batch"] is not None:
                micro = dup["micro_batch"]
                notes.append(f"micro_batch={micro} from the duplicate transcription {dup['id']}")
        devices = r["devices"]
        borrowed = None
        if tp is None and pp is None and r["dp"] is None and r["fsdp"] is None and r["zero"] is None \
                and devices and devices > 8 and fields["layers"]:
            # model-parallel layout not published: borrow it from a record of the same source with the
            # same model (layers, hidden, seq_len)
            ref = None
            for o in self.records:
                if o is r or o["slug"] != r["slug"] or o["tp"] is None or o["pp"] is None:
                    continue
                if o["fsdp"] is not None or (o["zero"] is not None and "distributed optimizer" not in str(o["zero"])):
                    continue  # a ZeRO-3 / FSDP layout is not a model-parallel layout to borrow
                if (o["layers"], o["hidden"], o["seq_len"]) == (fields["layers"], fields["hidden"], r["seq_len"]):
                    ref = o
                    break
            if ref is not None:
                tp = ref["tp"]
                pp = None
                for cand in range(ref["pp"], 0, -1):
                    if fields["layers"] % cand == 0 and devices % (tp * cand) == 0:
                        pp = cand
                        break
                notes.append(f"parallel layout not published: tp={tp} taken from {ref['id']} (same model), "
                             f"pp={pp} = largest divisor of the layer count <= its pp={ref['pp']} that divides "
                             f"the device count; dp = devices/(tp*pp)")
                borrowed = ref
                confidence = "low"
        tp = tp or 1
        pp = pp or 1
        cp = cp or 1
        dp = r["dp"]
        prod_ok = dp is not None and tp * pp * cp * dp == devices
        if dp is not None and devices is not None and not prod_ok and r["tp"] is not None:
            notes.append(f"device-count conflict: source lists {devices} devices but tp*pp*cp*dp = "
                         f"{tp * pp * cp * dp}; used the self-consistent {tp * pp * cp * dp} (reference README: "
                         f"'NeMo B200 long-sequence GPU counts use the self-consistent earlier doc version')")
            devices = tp * pp * cp * dp
            if confidence == "high":
                confidence = "medium"
        elif devices is not None:
            if dp is None or not prod_ok:
                if dp is not None and not prod_ok:
                    notes.append(f"record dp={dp} is the data-parallel degree across slices/VMs; dp = "
                                 f"devices/(tp*pp*cp) = {devices // (tp * pp * cp)} (all data-parallel ranks)")
                dp = devices // (tp * pp * cp) if devices % (tp * pp * cp) == 0 else None
        if devices is None:
            reasons.append("device count not stated")

        # virtual pipeline
        vpp = 1
        vp_note = None
        if isinstance(vp_raw, int):
            vpp = vp_raw
        elif isinstance(vp_raw, str) and "interleaved" in vp_raw.lower():
            if pp > 1:
                v = layers_per_stage_vpp(fields["layers"], pp)
                vpp = v or 1
                vp_note = (f"interleaved pipeline schedule, chunks per stage not stated: vpp={vpp} assumed "
                           f"(smallest factor >= 2 dividing the {fields['layers'] // pp} layers per stage)")
        elif pp > 1 and re.search(r"DP/TP/PP comm overlap|\(--tp-comm-overlap\) and PP", r["notes"] or ""):
            # Megatron-Core overlaps pipeline send/recv only in the interleaved schedule (its
            # non-interleaved schedule rejects overlap_p2p_comm), so stated PP overlap implies v >= 2
            v = layers_per_stage_vpp(fields["layers"], pp)
            vpp = v or 1
            vp_note = (f"the source states PP communication overlap, which Megatron-Core supports only with "
                       f"the interleaved schedule; chunks per stage not stated: vpp={vpp} assumed (smallest "
                       f"factor >= 2 dividing the {fields['layers'] // pp} layers per stage)")
        elif r["notes"] and "interleaved 1f1b" in r["notes"].lower() and pp > 1:
            vpp = 2
            vp_note = "interleaved 1F1B schedule, stages per rank not stated: vpp=2 assumed"
        elif vp_raw is None and pp > 1 and r["slug"] in ("narayanan2021", "korthikanti2022",
                                                         "megatron-lm-readme", "nemo-long-sequence"):
            vp_note = "virtual pipeline size not stated: vpp=1 (non-interleaved) assumed"
        if vp_note:
            notes.append(vp_note)

        # sequence parallelism
        sp = r["sequence_parallel"]
        if sp is None and dup is not None and isinstance(dup["sequence_parallel"], bool):
            sp = dup["sequence_parallel"]
        if sp is None:
            rule = cfg["sp_rule"]
            if tp > 1 and rule == "megatron":
                sp = True
                notes.append("sequence_parallel true assumed: Megatron/NeMo/Megatron-Bridge recipes enable "
                             "sequence parallelism with tp > 1 (not stated in the record)")
            elif tp > 1 and rule == "torchtitan":
                sp = True
                notes.append("sequence_parallel true: torchtitan's tensor-parallel plan shards norms/dropout "
                             "along the sequence (sequence parallelism)")
            elif tp > 1 and rule == "maxtext":
                sp = True
                notes.append("sequence_parallel true: MaxText's logical axis rules shard the activations' embed "
                             "dimension over the tensor axis (configs/base.yml ['activation_embed', 'tensor']), "
                             "so the norms and element-wise ops run on h/t per device as under sequence "
                             "parallelism (docs/model.md §4.1)")
            else:
                sp = False

        # TP communication overlapped with the GEMMs: an input of the run, not a correction. Either the
        # record states it (Megatron-LM README 2024: "fine-grained DP/TP/PP comm overlap"; torchtitan:
        # "async TP"), or the source's recipes turn it on (rule "nemo").
        tp_overlap = False
        rule = cfg.get("tp_overlap_rule")
        if tp > 1 and rule in ("stated", "nemo") and re.search(
                r"TP/PP comm overlap|tp[-_ ]comm[-_ ]overlap|\basync TP\b", r["notes"] or "", re.I):
            tp_overlap = True
        elif tp > 1 and rule == "none" and re.search(r"\basync TP\b", r["notes"] or "", re.I):
            notes.append("async TP (stated) not imported as tp_overlap: trainest's tp_overlap models Transformer "
                         "Engine userbuffers overlap, which hides far more than the 4-16 % gain torchtitan's "
                         "async-TP tables measure over vanilla TP")
        elif tp > 1 and rule == "nemo":
            tp_overlap = True
            notes.append("tp_overlap true assumed: NeMo/Megatron-Bridge performance recipes turn on TP "
                         "communication overlap (Transformer Engine userbuffers: NeMo's "
                         "MegatronCommOverlapCallback / Megatron-Bridge CommOverlapConfig tp_comm_overlap) "
                         "when tp > 1 (not stated in the record)")

        zsrc = r
        if r["zero"] is None and r["fsdp"] is None:
            zsrc = dup if dup is not None else (borrowed or r)
        zero, znote = map_zero(zsrc, SOURCES[zsrc["slug"]])
        if znote:
            notes.append(znote)
        zero1_group = stated_zero1_group(r["notes"], dp) if cfg.get("framework") == "internevo" else None
        if cfg.get("framework") == "internevo":
            notes.append("grad_dtype bf16: InternEvo's HybridZeroOptimizer accumulates and all-reduces the gradients "
                         "in the dtype of its bf16 parameters (its FP32 master copy is the rank's shard only)")
            notes.append(f"dp_shard {zero1_group}: the record's zero1={zero1_group} shards the optimizer within groups "
                         f"of {zero1_group} ranks" if zero1_group else
                         "zero 1 over every data-parallel rank: the record's zero1 (-1 or the whole group)")
        # DeepSpeed's ZeRO-3 of 2021 gathered and reduced over flat rings, one NIC per GPU (the
        # dp_collectives input; docs/model.md §Collectives). The evidence is the DeepSpeed rows of
        # Narayanan et al. 2021 Table 2 themselves (step time constant in the GPU count at a fixed batch,
        # i.e. bandwidth-bound at about one 200 Gb/s NIC per GPU), so those rows are not an independent
        # test of this setting. A duplicate takes it from the record it repeats.
        implementation = " ".join(str(x["zero"] or "") for x in (r, dup) if x is not None)
        dp_collectives = "flat" if zero == 3 and re.search(r"deepspeed", implementation, re.I) else None
        if dp_collectives:
            notes.append("dp_collectives flat: DeepSpeed ZeRO-3 (2021) gathered and reduce-scattered over flat "
                         "rings, one NIC per GPU; inferred from Narayanan et al. 2021 Table 2's constant step "
                         "time across GPU counts (not an independent source)")

        # Element-wise kernels: a torchtitan record that lists its techniques without torch.compile
        # (and without Float8, which torchtitan runs compiled) ran eager PyTorch; every other record is
        # taken as fused (Megatron/TE fused kernels, torch.compile, XLA fusion).
        kernels = None
        technique = re.search(r"Technique:\s*(.*?)\.(?:\s+[A-Z]|\s*$)", r["notes"] or "")
        if cfg.get("kernels_rule") == "torchtitan" and technique and precision not in ("fp8", "fp4") \
                and not re.search(r"compile|float8", technique.group(1), re.I):
            kernels = "eager"
            notes.append(f"kernels eager: the technique list '{technique.group(1).strip()}' has no torch.compile "
                         f"(torchtitan's own tables give the same run with torch.compile)")

        if cfg.get("kernels") and kernels is None:
            kernels = cfg["kernels"]
            notes.append(f"kernels {kernels}: {cfg['framework']} runs Megatron's fused kernels (the source states "
                         f"the fused scaled masked softmax and FusedAdam; bias-GeLU fusion and the fused layer norm "
                         f"are Megatron defaults)")
        if cfg.get("framework") == "megatron-deepspeed":
            notes.append(f"framework {cfg['framework']} (stated by the source)")
        if r.get("pipeline_schedule") is not None:
            notes.append(f"pipeline schedule '{r['pipeline_schedule']}' (stated) = trainest's non-interleaved "
                         f"1F1B with vpp={r['vp']}")
        if r.get("gradient_bucketing") is False:
            notes.append("gradient bucketing off (stated: parallelism.gradient_bucketing false, vTrain's "
                         "use_gradient_bucket false): the data-parallel gradient all-reduce runs after the "
                         "backward, not overlapped with it (parallel.dp_overlap false)")
        if cfg.get("framework") == "megatron-deepspeed" and fields["vocab"] is not None:
            padded = megatron_padded_vocab(GPT2_VOCAB, tp or 1)
            if fields["vocab"] != padded:
                raise ValueError(f"{r['id']}: vocab {fields['vocab']} is not GPT-2's {GPT2_VOCAB} padded for tp={tp}")
            notes.append(f"vocab {fields['vocab']} as the record states (transcriber-derived): GPT-2's {GPT2_VOCAB} "
                         f"padded by Megatron to a multiple of 128*tp = {128 * (tp or 1)} (checked)")

        # ---- batch ---------------------------------------------------------------------------
        gbs = r["global_batch"]
        if r["slug"] == "torchtitan" and micro is not None and pp > 1:
            local = micro
            micro = max(1, local // pp)
            notes.append(f"record micro_batch_size {local} is torchtitan's per-data-parallel-rank local "
                         f"batch; with pipeline parallelism torchtitan splits it into pp={pp} microbatches "
                         f"by default: micro_batch={micro} assumed")
            if gbs is None and dp:
                gbs = local * dp
                notes.append(f"global batch not stated: local batch {local} x dp {dp} = {gbs} sequences "
                             f"(no gradient accumulation assumed)")
        if micro is None and fields["layers"] is not None and devices:
            micro = 1
            notes.append("micro_batch not reported: 1 assumed")
        if gbs is None and micro is not None and dp and r["slug"] == "torchtitan":
            gbs = micro * dp
            notes.append(f"global batch not stated: micro_batch (local batch) {micro} x dp {dp} = {gbs} "
                         f"sequences (no gradient accumulation assumed)")
        seq_len = r["seq_len"]
        if seq_len is None and r["notes"]:
            m = re.search(r"default max_target_length at snapshot is (\d+)", r["notes"])
            if m:
                seq_len = int(m.group(1))
                notes.append(f"seq_len not set in the benchmark script: MaxText base.yml default {seq_len} assumed")
        if seq_len is None:
            reasons.append("sequence length not stated")

        # ---- layouts trainest's scenario loader cannot express --------------------------------
        pipeline_split = None
        if fields["layers"] and fields["heads"] and devices and not missing:
            bad = []
            if fields["layers"] % pp or (fields["layers"] // pp) % vpp:
                # the frameworks balance such stages unevenly (Megatron counts the embedding and the
                # loss as pipeline layers): trainest's `balanced` split models exactly that
                pipeline_split = "balanced"
                notes.append(f"pp={pp}, vpp={vpp} do not divide layers={fields['layers']}: imported with "
                             f"pipeline_split balanced (embedding and loss count as one layer each)")
            elif (fields["layers"] // pp) % vpp:
                bad.append(f"vpp={vpp} does not divide the {fields['layers'] // pp} layers per pipeline stage")
            if vpp > 1 and pp == 1:
                bad.append(f"vpp={vpp} without pipeline parallelism")
            if fields["heads"] % tp:
                bad.append(f"tp={tp} does not divide heads={fields['heads']}")
            if seq_len and seq_len % cp:
                bad.append(f"cp={cp} does not divide seq_len={seq_len}")
            if dp and micro and gbs and gbs % (dp * micro):
                bad.append(f"global_batch={gbs} is not a multiple of dp*micro_batch={dp * micro}")
            if dp is None or tp * pp * cp * dp != devices:
                bad.append(f"tp*pp*cp*dp does not equal devices={devices}")
            per_node = r["devices_per_node"] or devices_per_node_from_text(r["hardware"])
            if hardware and per_node and devices > per_node and not catalog_network(hardware):
                bad.append(f"{devices} devices over nodes of {per_node}, and the {hardware} entry has no scale-out "
                           f"network rate (the record does not state one)")
            reasons.extend(bad)

        # ---- recompute -----------------------------------------------------------------------
        recompute, rnote = map_recompute(r, cfg)
        if rnote:
            notes.append(rnote)

        # ---- measured ------------------------------------------------------------------------
        measured = OrderedDict()
        tps_dev = r["tokens_per_s_per_device"]
        if r["step_time_s"] is not None:
            measured["step_time_s"] = r["step_time_s"]
        elif tps_dev is not None and devices:
            measured["tokens_per_s"] = round(tps_dev * devices, 3)
            if r["tokens_per_s_total"] is None or abs(r["tokens_per_s_total"] - tps_dev * devices) > 1:
                notes.append(f"tokens_per_s = {tps_dev} tokens/s per device (as published) x {devices} devices")
        elif r["tokens_per_s_total"] is not None:
            measured["tokens_per_s"] = r["tokens_per_s_total"]
        elif r["tflops_per_device"] is not None:
            formula = cfg["flops_formula"]
            if r["slug"] == "megatron-lm-readme" and "april2021" in r["source"]:
                formula = "narayanan-eq3"
            measured["tflops_per_device"] = r["tflops_per_device"]
            measured["flops_formula"] = formula
        elif r["mfu_pct"] is not None and cfg["flops_formula"]:
            formula = cfg["flops_formula"]
            measured["mfu"] = round(r["mfu_pct"] / 100.0, 6)
            measured["flops_formula"] = formula
        elif r["device_hours"] is not None:
            measured["device_hours"] = r["device_hours"]
        # a published peak device memory (torchtitan's tables have a column for it) is kept beside the
        # throughput metric: `trainest validate` compares the memory model with it
        peak = re.search(r"Peak memory ([0-9.]+) ?GiB", r["notes"] or "")
        if measured and peak:
            measured["peak_memory_gib"] = float(peak.group(1))
        if not measured:
            if tps_dev is not None:
                notes.append(f"published {tps_dev} tokens/s per device; no total (device count not stated)")
            else:
                reasons.append("no measured throughput metric")

        # physical plausibility: implied 6N (LoRA/QLoRA: 4N, forward + data gradients) FLOP/s per device
        # must not exceed the dense peak
        if "tokens_per_s" in measured and not [x for x in reasons if "sequence length" not in x] and devices:
            from_peak = self.peak_tflops(hardware, precision)
            if from_peak:
                k = 4.0 if finetune else 6.0
                n = k * _matmul_params(model)
                implied = n * measured["tokens_per_s"] / devices / 1e12
                if implied > from_peak:
                    reasons.append(f"published tokens/s implies {implied:.0f} TFLOP/s per device at {k:.0f}N FLOPs "
                                   f"per token{' (LoRA: forward and data gradients)' if finetune else ''}, above the "
                                   f"{hardware} dense {precision} peak {from_peak:g}: the metric does not count "
                                   f"plain training tokens")

        # ---- the recipe's settings (Megatron-Bridge) --------------------------------------------
        recipe = (self.recipe_settings(r, expressed_moe, tp, notes) if r["slug"] == "megatron-bridge" and not reasons
                  else None)

        assumed = assumed_settings(notes)

        # ---- notes ---------------------------------------------------------------------------
        if dup is not None:
            notes.append(f"same measurement as {dup['id']} ({dup['file']}); count it once when aggregating")
        kernel, knote = attention_kernel(r["slug"], hardware, r.get("attention_text"))
        if kernel:
            notes.append(f"attention kernel {kernel}: {knote}")
        out_notes = []
        if r["notes"]:
            out_notes.append("Source notes: " + r["notes"].strip())
        if r["source_detail"]:
            out_notes.append("Transcription: " + r["source_detail"].strip())
        if r["training_type"]:
            out_notes.append(f"Training type: {r['training_type']}.")
        if r["derived_fields"]:
            out_notes.append("Transcriber-derived fields: " + "; ".join(map(str, r["derived_fields"])) + ".")
        if r["derived_outcomes"]:
            out_notes.append("Reference derived_outcomes (not source-printed): " + "; ".join(
                f"{k}={v}" for k, v in r["derived_outcomes"].items()) + ".")
        extra = []
        if r["tflops_per_device"] is not None and "tflops_per_device" not in measured:
            extra.append(f"{r['tflops_per_device']} TFLOP/s per device"
                         + (f" (FLOP convention: {cfg['flops_formula']})" if cfg["flops_formula"] else ""))
        if r["mfu_pct"] is not None and "mfu" not in measured:
            extra.append(f"MFU {r['mfu_pct']}%")
        if r["hfu_pct"] is not None:
            extra.append(f"HFU {r['hfu_pct']}%")
        if extra:
            out_notes.append("Also published: " + ", ".join(extra) + ".")
        if r["source_url"]:
            out_notes.append(f"URL: {r['source_url']}")
        if notes:
            out_notes.append("Import assumptions: " + " ".join(f"({i}) {n}." if not n.endswith(".") else
                                                               f"({i}) {n}" for i, n in enumerate(notes, 1)))

        if confidence is None:
            # the Megatron-file records carry no confidence: medium when the transcriber had to infer a
            # table layout, a parallel split, a batch layout or a device count; high otherwise
            detail = (r["source_detail"] or "").lower()
            derived = " ".join(map(str, r["derived_fields"])).lower()
            confidence = "medium" if ("re-associated" in detail or "tp/pp split" in derived or
                                      "assumed identical" in derived or "gpu_count" in derived) else "high"

        run = OrderedDict()
        run["id"] = r["id"]
        if finetune:
            run["set"] = FINETUNE_SET
        run["source"] = r["source"]
        run["model"] = model
        run["seq_len"] = seq_len
        run["hardware"] = hardware
        run["devices"] = devices
        dpn = r["devices_per_node"] or devices_per_node_from_text(r["hardware"])
        if dpn and devices:
            run["devices_per_node"] = min(dpn, devices)
        run["precision"] = precision
        run["parallel"] = OrderedDict(tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp, zero=zero, sequence_parallel=bool(sp))
        if expressed_moe:
            run["parallel"]["ep"] = r["ep"] or 1
            run["parallel"]["etp"] = r.get("etp") or 1
            if r.get("etp") is None:
                notes.append("etp=1 assumed: expert tensor parallelism not stated (Megatron-Bridge MoE recipes set "
                             "expert_tensor_parallel_size 1)")
            notes.append("moe_overlap none assumed: what the recipe overlaps of the all-to-all dispatch and "
                         "combine is not stated (exposed in the prediction)")
        if pipeline_split:
            run["parallel"]["pipeline_split"] = pipeline_split
        shard = (hybrid_shard_size(zsrc["fsdp"], dp) if zero and dp else None) or zero1_group
        if shard:
            run["parallel"]["dp_shard"] = shard
        if tp_overlap:
            run["parallel"]["tp_overlap"] = True
        if dp_collectives:
            run["parallel"]["dp_collectives"] = dp_collectives
        run["micro_batch"] = micro
        run["global_batch"] = gbs
        run["recompute"] = recompute
        if maxtext_policy(r) in REMAT_MODES:
            run["remat_policy"] = maxtext_policy(r)
        if kernel:
            run["attention"] = kernel
        if packed:
            run["packed_length"] = packed
        if framework:
            run["framework"] = framework
        # always explicit: a framework's default kernels (torchtitan: eager) must not stand in for a record
        # that ran fused kernels (compiled, or Megatron/TE)
        run["kernels"] = kernels or "fused"
        if recipe is not None:
            apply_recipe(run, *recipe)
        if graphs is not None:
            apply_recipe(run, {"cuda_graphs": graphs}, {})
        if fp8_dpa and precision in ("fp8", "fp4"):
            apply_recipe(run, {"fp8_attention": True}, {})
        if cfg.get("dp_overlap") is False:
            run["parallel"]["dp_overlap"] = False
        if cfg.get("framework") == "internevo":
            apply_recipe(run, {"grad_dtype": "bf16"}, {})
        if finetune:
            run["finetune"] = finetune
        regression = stated_regression(r["notes"])
        if regression is not None:
            apply_recipe(run, {"unmodelled": [*run.get("unmodelled", []), regression]}, {})
        run["measured"] = measured
        run["expressible"] = not reasons
        run["reason"] = "; ".join(reasons) if reasons else None
        run["confidence"] = confidence
        run["notes"] = " ".join(out_notes)
        if assumed:
            run["assumed"] = assumed
        if dup is not None and r in self.ven:
            # the vendors-file transcription repeats a measurement of the Megatron file: aggregate once
            run["duplicate_of"] = dup["id"]
        return run

    def recipe_settings(self, r: dict, moe: bool, tp: int, notes: list) -> tuple[dict, dict] | None:
        """(top-level, parallel) keys of the settings the run's Megatron-Bridge recipe resolved to
        (tools/recipe_settings.py), with their notes; None without a recipe record (the importer's assumptions
        stay, and the notes say so)."""
        rec = self.recipes.match(r["id"], r["tokens_per_s_per_device"])
        if rec is None:
            notes.append("no recipe record matched (megatron-bridge-recipes.yaml): its settings are the importer's "
                         "assumptions")
            return None
        top, par, said = settings_of(rec, moe)
        if tp == 1:
            par.pop("tp_overlap", None)          # nothing to overlap (Megatron-Core turns it off at tp 1)
        stated = (("moe_overlap none assumed",) if moe else ()) + (("recompute ",) + (("tp_overlap ",) if "tp_overlap"
                                                                                      in par else ()))
        notes[:] = [n for n in notes if not n.startswith(stated)]
        if not rec["recipe_selection"].get("layout_matches_summary", True):
            said.append("the summary row's layout differs from its release's recipe (megatron-bridge-recipes.yaml "
                        "_meta): these settings may not be what ran")
            # what ran is not known: validate names it where the run is called "does not fit", and says whether the
            # recipe's layout would fit (`conflicting`, completed by apply_recipe against the run's own values)
            top["unmodelled"] = [*top.get("unmodelled", []), "the recipe's settings (its layout differs from the row's)"]
            top["recipe"] = rec
        notes.extend(said)
        return top, par

    _hw_cache = None

    def peak_tflops(self, hardware, precision):
        if Importer._hw_cache is None:
            Importer._hw_cache = _read_yaml(self.reference / "hardware.yaml")
        hw = Importer._hw_cache.get(hardware)
        if not hw or not precision:
            return None
        return hw["throughput_dense"].get(f"{precision}_tflops")

    def run(self):
        out = OrderedDict((slug, []) for slug in SOURCES)
        for r in self.records:
            out[r["slug"]].append(self.convert(r))
        return out


# A source's own note that a measurement ran with a known performance regression (Megatron-Bridge's 26.06.01
# footnote: "Performance regression in GPT-OSS 120B pre-training is a [known issue](<cudnn-frontend issue>)")
STATED_REGRESSION = re.compile(r"[Pp]erformance regression\b[^.]*?\bknown issue\]?\(?(?P<url>https?://[^)\s]+)?")


def stated_regression(notes: str | None) -> str | None:
    """The `unmodelled` entry of a record whose source says it ran with a known performance regression (what
    ran is slower than its settings make it, by a software defect trainest has no input for), None otherwise."""
    found = STATED_REGRESSION.search(notes or "")
    if found is None:
        return None
    where = f" ({found['url']})" if found["url"] else ""
    return f"a performance regression its source names as a known issue{where}"


def layout_misfit(run: OrderedDict, layout: str) -> str | None:
    """Why a recipe's pipeline layout does not describe the run (its pp·vpp stages, the model's layers and MTP
    depth, what trainest models: trainest.pipeline_layout.rank_layers), None where it does."""
    from trainest.errors import SpecError
    from trainest.pipeline_layout import rank_layers
    par, model = run["parallel"], run["model"]
    if model.get("hybrid") or par.get("pipeline_schedule") == "dualpipe":
        return "a layout of hybrid blocks or with DualPipe is not modelled"
    mtp = (model.get("mtp") or {}).get("depth", 0)
    try:
        rank_layers(layout, int(par.get("pp", 1)), int(par.get("vpp", 1)), int(model["layers"]), int(mtp), "layout")
    except SpecError as e:
        return str(e).removeprefix("layout: ")
    return None


def apply_recipe(run: OrderedDict, top: dict, par: dict) -> None:
    """Write a recipe's settings (Importer.recipe_settings) into a run, its keys in RUN_KEYS order. A pipeline
    layout that does not describe the run (`layout_misfit`: a 25.11 row whose layout is not its recipe's) is left
    out and named in `unmodelled`."""
    par = dict(par)
    top = dict(top)
    layout = par.get("pipeline_layout")
    why = layout_misfit(run, layout) if layout is not None else None
    if why is not None:
        del par["pipeline_layout"], par["pipeline_split"]
        top["unmodelled"] = list(top.get("unmodelled", [])) + [f"pipeline_model_parallel_layout {layout} ({why})"]
    for key in ("cuda_graphs", "moe_dispatcher", "adam_moments", "grad_dtype", "fp8_params", "bf16_layers",
                "module_precision",
                "fused_grouped_mlp", "fp8_attention", "recompute", "recompute_modules", "offload", "offload_layers",
                "unmodelled"):
        if key in top:
            run[key] = top[key]
    run["parallel"].update(par)
    if run["parallel"].get("tp_overlap") is False:
        del run["parallel"]["tp_overlap"]
    if "recipe" in top:
        conflicting = conflicting_of(top["recipe"], run)
        if conflicting:
            run["conflicting"] = conflicting
    for k in [k for k in RUN_KEYS if k in run]:
        run.move_to_end(k)


def lora_of(r: dict, tt: str, layers: int | None) -> tuple[OrderedDict, list[str], list[str]]:
    """(the `finetune:` mapping, import notes, reasons it is not expressible) of a LoRA/QLoRA record:
    the method from the training type, rank and targets from the source's recipe (LORA_BY_SOURCE),
    the 4-bit NF4 base of QLoRA."""
    rank, targets, why = LORA_BY_SOURCE[r["slug"]]
    if (r.get("lora") or {}).get("rank"):
        rank = int(r["lora"]["rank"])          # the record states it
    method = "qlora" if "qlora" in tt or "4-bit" in str(r["precision"] or "").lower() else "lora"
    ft = OrderedDict(method=method, rank=rank, targets=targets, base_bits=4 if method == "qlora" else 16)
    notes = [f"training type '{r['training_type']}': {method} with rank {rank} on the {targets} linear layers "
             f"(set: {FINETUNE_SET}): {why}"]
    reasons = []
    partial = re.search(r"lora[- ]layers (\d+)|LoRA adapters on (\d+) layers|LoRA on (\d+) layers",
                        " ".join(str(x or "") for x in (r["notes"], r["precision"])), re.I)
    if partial:
        n = int(next(g for g in partial.groups() if g))
        if layers is None or n < layers:
            reasons.append(f"adapters on the last {n} layers only (the layers below them need no backward pass): "
                           f"not modelled")
    return ft, notes, reasons


def _matmul_params(model):
    if model.get("moe") or model.get("mla"):
        # the weights a token multiplies: the active parameters less the input embedding and the norms
        m = _catalog().model_from_mapping(dict(model), "import")
        return m.active_params - m.vocab * m.hidden * (0 if m.tied_embeddings else 1) - m.hidden \
            - m.layers * m.layer_norm_params
    from_conv = _conventions()
    return from_conv.matmul_params(layers=model["layers"], hidden=model["hidden"], ffn_hidden=model["ffn_hidden"],
                                   heads=model["heads"], kv_heads=model["kv_heads"], vocab=model["vocab"],
                                   mlp=model["mlp"] or "swiglu")


def _catalog():
    sys.path.insert(0, str(REPO))
    from trainest import catalog  # noqa: E402
    return catalog


def positional_of(name: str, shape: dict | None, notes: list) -> str:
    """The model's position encoding: model-shapes.yaml's `position_embedding` when the shape was resolved
    there, else by family name (ROPE_FAMILIES; MPT: alibi; otherwise learned), the assumption noted."""
    given = str((shape or {}).get("position_embedding") or "").lower()
    if given:
        out = "rope" if "rope" in given else "none" if given.startswith("none") else "learned"
        notes.append(f"positional {out} (model-shapes.yaml: {given!r})")
        return out
    low = name.lower()
    out = "rope" if re.search(ROPE_FAMILIES, low) else "alibi" if re.search(r"\bmpt", low) else "learned"
    notes.append(f"positional {out} assumed from the model family (the source does not state it)")
    return out


GLU_CLAMP = re.compile(r"clamp limit (\d+(?:\.\d+)?)")


def moe_block(moe: dict, name: str, notes: list, shape: dict | None = None) -> OrderedDict:
    """The trainest `moe:` mapping of a model-shapes.yaml `moe:` entry. Megatron-Bridge benchmarks
    force-balance the tokens across experts (imbalance 1.0, the schema's default); the layer pattern
    is read from `leading_dense_layers` and `moe_layer_freq` ('every layer', or DeepSeek's
    '[0]*k + [1]*n'; a hybrid model's E blocks are its pattern's). From the model's own entry (`shape`): biased
    experts where its `linear_bias` names expert biases, and the GLU's clamp where its `mlp_type` states a clamp
    limit (docs/model.md §15.13)."""
    block = OrderedDict(experts=moe["num_routed_experts"], top_k=moe["experts_per_token"],
                        expert_ffn_hidden=moe["expert_ffn_hidden"])
    if moe.get("num_shared_experts"):
        block["shared_experts"] = moe["num_shared_experts"]
        block["shared_expert_ffn_hidden"] = moe.get("shared_expert_ffn_hidden") or moe["expert_ffn_hidden"]
    dense = moe.get("leading_dense_layers") or 0
    freq = str(moe.get("moe_layer_freq") or "")
    if not (freq.startswith("every layer") or re.fullmatch(r"\[0\](?:\*\d+)? \+ \[1\]\*\d+", freq)
            or re.match(r"\d+ 'E' layers", freq)):      # a hybrid model's: its pattern's E blocks
        raise ValueError(f"{name}: moe_layer_freq {freq!r} is not a layer pattern the importer reads")
    if dense:
        block["dense_layers"] = dense
    if moe.get("latent_size"):                  # LatentMoE (Nemotron 3 Super, Ultra): experts in a latent width
        block["latent_size"] = moe["latent_size"]
        notes.append(f"LatentMoE from model-shapes.yaml: routed experts and their all-to-alls in a "
                     f"{moe['latent_size']}-wide latent (router and shared experts at hidden)")
    bias = str((shape or {}).get("linear_bias") or "")
    if re.search(r"\bexpert biases\b", bias, re.I):
        block["expert_bias"] = True
        notes.append(f"expert_bias from model-shapes.yaml's linear_bias ({bias!r})")
    clamp = GLU_CLAMP.search(str((shape or {}).get("mlp_type") or ""))
    if clamp:
        block["glu_clamp"] = float(clamp[1])
        notes.append(f"glu_clamp {float(clamp[1]):g} from model-shapes.yaml's mlp_type (a clamped GLU)")
    block["imbalance"] = 1.0
    router = str(moe.get("router_score_function") or "")
    groups = (re.search(r"(\d+) groups, top-(\d+) groups", router)
              or re.search(r"n_group=(\d+)/topk_group=(\d+)", router))
    if groups and int(groups[2]) < int(groups[1]):      # group-limited routing (DeepSeek-V3: 4 of 8)
        block["router_groups"], block["router_group_top_k"] = int(groups[1]), int(groups[2])
        notes.append(f"group-limited routing from model-shapes.yaml's router ({router!r}): each token's experts "
                     f"come from {groups[2]} of {groups[1]} expert groups")
    notes.append(f"mixture of experts from model-shapes.yaml: {block['experts']} routed experts, top-{block['top_k']}, "
                 f"expert width {block['expert_ffn_hidden']}"
                 + (f", {block['shared_experts']} shared" if block.get("shared_experts") else "")
                 + (f", {dense} leading dense layers" if dense else "")
                 + "; imbalance 1.0 (the source force-balances tokens across experts)")
    return block


def mtp_block(mtp: dict, moe: bool) -> OrderedDict:
    """The trainest `mtp:` mapping of a model-shapes.yaml `mtp:` entry: the training depth
    (`training_mtp_depth`, else `num_nextn_predict_layers`), one module's blocks (`*E` with MoE),
    and whether the depths share one module (Megatron-Core mtp_use_repeated_layer, 'shared' in its notes)."""
    depth = mtp.get("training_mtp_depth") or mtp.get("num_nextn_predict_layers") or mtp.get("hf_num_nextn_predict_layers")
    depth = int(str(depth).split()[0])
    words = " ".join(str(v) for v in mtp.values())
    block = OrderedDict(depth=depth, pattern="*E" if moe else "*-")
    if depth > 1 and ("shared" in words or "repeated" in words):
        block["shared"] = True
    return block


def hybrid_block(hybrid: dict) -> OrderedDict:
    """The trainest `hybrid:` mapping of a model-shapes.yaml `hybrid:` entry (Mamba-2 dimensions; the
    convolution width 4 where the entry does not give it, mamba_ssm's default)."""
    return OrderedDict(pattern=hybrid["layer_pattern"].split()[0], mamba_heads=hybrid["mamba_num_heads"],
                       mamba_head_dim=hybrid["mamba_head_dim"], state_dim=hybrid["mamba_state_dim"],
                       groups=hybrid["mamba_num_groups"], conv_kernel=hybrid.get("mamba_conv_kernel") or 4)


def mla_block(mla: dict) -> OrderedDict:
    """The trainest `mla:` mapping of a model-shapes.yaml `mla:` entry."""
    return OrderedDict((k, mla[k]) for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                                             "v_head_dim"))


def _conventions():
    sys.path.insert(0, str(REPO))
    from trainest import conventions  # noqa: E402
    return conventions


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------

class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):   # libyaml's emitter where installed: the same text
    pass


def _repr_odict(dumper, data):
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items())


_Dumper.add_representer(OrderedDict, _repr_odict)

HEADER = """\
# Measured runs imported from /work/shared/reference by tools/import_runs.py -- do not edit by hand;
# change the importer and re-run it. Schema: specs/README.md (runs/SOURCE.yaml).
# measured.mfu is a fraction (0.421 = 42.1 %) of the dense peak of the run's precision;
# measured.tokens_per_s is the total over all devices. `notes` carries the source's caveats and
# every assumption the importer made ("Import assumptions: ...").
"""


def write(out_dir: Path, result) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for slug, runs in result.items():
        doc = OrderedDict(source=SOURCES[slug]["title"])
        if SOURCES[slug].get("run_set"):
            doc["set"] = SOURCES[slug]["run_set"]
        doc["runs"] = runs
        text = HEADER + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=110, allow_unicode=True,
                                  default_flow_style=False)
        (out_dir / f"{slug}.yaml").write_text(text)
        counts[slug] = runs
    return counts


def summary(result) -> str:
    lines = []
    total = 0
    for slug, runs in result.items():
        total += len(runs)
        ok = sum(1 for r in runs if r["expressible"])
        kinds = sorted({k for r in runs for k in r["measured"] if k != "flops_formula"})
        lines.append(f"{slug:20s} {len(runs):4d} runs, {ok:4d} expressible, measured: {', '.join(kinds)}")
        why = defaultdict(int)
        for r in runs:
            if not r["expressible"]:
                why[re.sub(r"\(.*?\)", "", r["reason"]).split(";")[0].strip()] += 1
        for k, n in sorted(why.items(), key=lambda x: -x[1]):
            lines.append(f"{'':24s}{n:4d} not expressible: {k}")
    lines.append(f"total {total}")
    return "\n".join(lines)


def window_block(text: object) -> dict | None:
    """The model schema's attention_window of a model-shapes.yaml `sliding_window` text that says a window
    on alternating layers ('128 on alternating layers (even layer_idx sliding, odd full): ...': layer 0
    sliding, every 2nd full); None for any other text (kept as a note)."""
    m = re.match(r"\s*(\d+) on alternating layers \(even layer_idx sliding, odd full\)", str(text))
    return None if m is None else {"size": int(m.group(1)), "kind": "sliding", "global_every": 2}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true", help="convert and summarize, write nothing")
    args = ap.parse_args(argv)
    imp = Importer(args.reference)
    result = imp.run()
    n = sum(len(v) for v in result.values())
    if n != len(imp.records):
        raise SystemExit(f"lost records: {n} != {len(imp.records)}")
    for runs in result.values():
        for run in runs:
            assert set(run) <= set(RUN_KEYS), run["id"]
    memory = memory_runs.convert_all(_read_yaml(args.reference / memory_runs.FILE))
    for run in memory:
        assert set(run) <= set(RUN_KEYS), run["id"]
    if not args.check:
        write(args.out, result)
        write_memory(args.out, memory)
    print(summary(result))
    print(f"{memory_runs.SLUG:20s} {len(memory):4d} runs, {sum(r['expressible'] for r in memory):4d} expressible, "
          f"measured: peak_memory_gib (set {memory_runs.RUN_SET})")


def write_memory(out_dir: Path, runs: list) -> None:
    """specs/runs/memory-given.yaml: the memory-only runs (tools/memory_runs.py), `set: memory`."""
    doc = OrderedDict(source=memory_runs.TITLE, set=memory_runs.RUN_SET, runs=runs)
    text = HEADER + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=110, allow_unicode=True,
                              default_flow_style=False)
    (out_dir / f"{memory_runs.SLUG}.yaml").write_text(text)


if __name__ == "__main__":
    main()
