"""The vocabularies of trainest's inputs, defined once: every choice a scenario, a runs file or the
command line may name, as a tuple of the words users write. `enum(NAME)` gives the same vocabulary
as a `StrEnum` (built on first use: the typer options show them in `--help`; defining nine enum
classes at import would cost a single estimate ~2 ms of start-up). Standard library only."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from enum import StrEnum

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")   # GEMM precision (FP32 master weights, Adam state)
LOW_PRECISIONS = ("fp8", "fp4")                               # GEMMs below 16 bit (cast per GEMM)
FULL_PRECISIONS = ("fp32", "tf32")                            # 32-bit weights, no master copy
MLPS = ("gelu", "swiglu")             # GeLU: 2 matrices (h→f→h); SwiGLU: 3 (gate, up, down)
# a model's local attention (attention_window.kind): sliding (each query sees the w keys up to itself:
# Longformer, Mistral, Gemma 2/3, GPT-OSS) or chunked (block diagonal: each query sees its own chunk of c
# keys up to itself: Llama 4)
WINDOW_KINDS = ("sliding", "chunked")
# activation recomputation: selective = Megatron's (the attention core); full = the whole layer;
# op = torchtitan's per-op selective checkpointing (every second matmul and the element-wise ops
# recomputed, attention saved). The code is the number the vectorised model carries (Layout.recompute).
RECOMPUTES = ("none", "selective", "full", "op")
RECOMPUTE_CODES = {"none": 0, "selective": 1, "full": 2, "op": 3}
# what selective recompute re-runs: Megatron-Core's `recompute_modules` (TransformerConfig): core_attn
# (the attention core, its default and trainest's `selective` until given), layernorm (the two norms),
# mla_up_proj (MLA's up-projections and RoPE), moe_act (the routed experts' activation), mlp (a dense
# layer's MLP), moe (a MoE layer's whole block after attention, its all-to-alls included), shared_experts
# (a MoE layer's shared experts)
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp", "moe", "shared_experts")
DEFAULT_RECOMPUTE_MODULES = ("core_attn",)
# attention kernel: flash (the best fused kernel: FA3/cuDNN on Hopper+), flash2 (FlashAttention-2),
# standard (materialised s×s scores)
ATTENTIONS = ("flash", "flash2", "standard")
# element-wise kernels: fused (Megatron/Transformer Engine, torch.compile, XLA) or eager (PyTorch
# without torch.compile: one kernel per operator, FP32 norms)
KERNELS = ("fused", "eager")
OPTIMIZERS = ("adamw", "adamw-8bit", "adafactor", "sgd")   # the optimizer and its state (docs/model.md §7.2)
ADAM_MOMENTS = ("fp32", "bf16")   # the dtype of Adam's two moments (DeepSeek-V3 keeps them in BF16)
# pipeline split: even (L/p layers per stage) or balanced (the embedding and the loss count as one
# layer each: Megatron's account-for-embedding-and-loss split)
PIPELINE_SPLITS = ("even", "balanced", "layout")   # layout: as parallel.pipeline_layout places them
# data-parallel/ZeRO rings: hierarchical (every NIC of a node) or flat (one NIC per rank)
DP_COLLECTIVES = ("hierarchical", "flat")
# the kind of a hardware entry (its `kind:`), what a framework runs on (Framework.runs_on): a discrete GPU, a
# CPU-GPU superchip (GH200, GB200), a TPU, another accelerator ASIC (Gaudi, Trainium, MI-class NPUs), a wafer-scale
# engine, Apple silicon, a CPU
HARDWARE_KINDS = ("gpu", "cpu-gpu", "tpu", "asic", "wafer", "apple", "cpu")
# the training framework (trainest/frameworks.py says what each does)
FRAMEWORKS = ("megatron-core", "nemo", "megatron-deepspeed", "deepspeed", "torchtitan", "maxtext", "llm-foundry",
              "olmo-core", "hf-accelerate", "litgpt", "mlx", "internevo")
# fine-tuning: full (every weight trained), lora (frozen base + low-rank adapters, Hu et al. 2021), qlora
# (LoRA on a 4-bit NF4 base, Dettmers et al. 2023). The code is what the vectorised model carries.
FINETUNES = ("full", "lora", "qlora")
FINETUNE_CODES = {"full": 0, "lora": 1, "qlora": 2}
LORA_TARGETS = ("attention", "mlp", "all")     # which linear layers get adapters (all: PEFT's "all-linear")
BASE_BITS = (16, 8, 4)                          # bits per frozen base weight: 16-bit, 8-bit (LLM.int8), 4-bit NF4
# offload to host memory: none; optimizer (ZeRO-Offload: FP32 master and Adam state on the CPU, CPU Adam);
# optimizer+weights (ZeRO-Infinity / FSDP CPU offload: the 16-bit weights too, fetched per pass);
# activations (activation checkpoints copied to host memory in the forward, back in the backward)
OFFLOADS = ("none", "optimizer", "optimizer+weights", "activations")
OFFLOAD_CODES = {"none": 0, "optimizer": 1, "optimizer+weights": 2, "activations": 3}
# what the framework overlaps of the MoE token dispatch and combine (the expert-parallel all-to-alls):
# none (exposed, the default) or deepep (hidden behind another micro-batch's computation: DeepEP /
# DualPipe-style, Megatron-Core --overlap-moe-expert-parallel-comm)
MOE_OVERLAPS = ("none", "deepep")
# the pipeline schedule: 1f1b (Megatron's 1F1B, interleaved when vpp > 1) or dualpipe (DeepSeek-V3 §3.2.1:
# micro-batches fed from both ends, each forward chunk's computation overlapped with another's backward)
PIPELINE_SCHEDULES = ("1f1b", "dualpipe")
OBJECTIVES = ("time", "cost", "energy")        # what `plan` minimises over the whole run
DEVICE_COUNTS = ("pow2", "node")               # counts tried in a --devices range

VOCABULARIES: dict[str, tuple[str, ...]] = {
    "Precision": PRECISIONS, "Mlp": MLPS, "Recompute": RECOMPUTES, "Attention": ATTENTIONS, "Kernels": KERNELS,
    "PipelineSplit": PIPELINE_SPLITS, "DpCollectives": DP_COLLECTIVES, "MoeOverlap": MOE_OVERLAPS,
    "PipelineSchedule": PIPELINE_SCHEDULES,
    "Objective": OBJECTIVES, "DeviceCounts": DEVICE_COUNTS, "Framework": FRAMEWORKS, "Finetune": FINETUNES,
    "LoraTargets": LORA_TARGETS, "Offload": OFFLOADS, "AdamMoments": ADAM_MOMENTS, "Optimizer": OPTIMIZERS,
}


@functools.cache
def enum(name: str, words: tuple[str, ...] = ()) -> type[StrEnum]:
    """The vocabulary `name` (a key of VOCABULARIES, or any name for `words`) as a StrEnum whose values are its
    words."""
    from enum import StrEnum
    members = {word.upper().replace("-", "_").replace("+", "_AND_"): word for word in words or VOCABULARIES[name]}
    return StrEnum(name, members)  # type: ignore[return-value]
