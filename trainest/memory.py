"""Memory per device: weights, gradients, optimizer state, activations and overhead.

Sources: Rajbhandari et al. 2020 (ZeRO: what each stage shards; 2 B weights + 12 B Adam state per
parameter; trainest keeps Megatron's 4-byte FP32 gradient buffer, so 2+4+12 = 18 B unsharded);
Korthikanti et al. 2022 §4 (activations per layer, sequence parallelism,
selective and full recomputation, the 1F1B/interleaved in-flight factor). All functions accept
floats or numpy arrays for the layout arguments.
"""

from __future__ import annotations

from typing import NamedTuple

from trainest import xp
from trainest.layout import ACTIVATION_BYTES, Job, Layout, Num
from trainest.precision import (
    ADAM_MOMENT_BYTES,
    FP16_GRAD_BYTES,
    MAIN_GRAD_BYTES,
    MASTER_WEIGHT_BYTES,
    grad_bytes_per_param,
    optimizer_bytes_per_param,
    weight_bytes_per_param,
)
from trainest.step.schedule import stage_layers, stage_params
from trainest.units import GiB

__all__ = ["ADAM_MOMENT_BYTES", "FP16_GRAD_BYTES", "MAIN_GRAD_BYTES", "MASTER_WEIGHT_BYTES", "MemoryBreakdown",
           "activation_bytes", "activation_bytes_per_layer", "grad_bytes_per_param", "in_flight_micro_batches",
           "memory_per_device", "optimizer_bytes_per_param", "sharded_state_bytes", "stage_layers", "stage_params",
           "weight_bytes_per_param"]

DROPOUT_MASK_BYTES = 1.0         # one byte per element
LOGITS_BYTES = 4.0               # FP32 logits (and their gradient) for the cross-entropy
FRAMEWORK_OVERHEAD_BYTES = 2.0 * GiB   # CUDA context, NCCL and cuBLAS workspaces, allocator reserve
FRAGMENTATION_FRACTION = 0.05    # allocator fragmentation, as a fraction of everything else


FP8_SAVED_INPUT_BYTES = 1.0      # FP8/FP4 recipes (Transformer Engine) keep the GEMM inputs saved for
                                 # the backward pass as their FP8 copies, not in 16 bit


def activation_bytes_per_layer(job: Job, layout: Layout) -> tuple[Num, Num]:
    """(kept, re-materialised): activations one layer keeps for backward for one micro-batch, and
    what it holds while it is recomputed during its backward [B] (16-bit activations).

    Korthikanti et al. 2022 eq. 1–2 generalised to GQA and gated MLPs (e = 2 bytes, T = b·s/c):
      replicated (÷t only with sequence parallelism): (4e + 2)·T·h   (two norms, two inputs, two masks)
      tensor-parallel part ÷t: e·T·(2a·d_h + 2·max(g, t)·d_h + k·f) with k = 2 (GeLU) or 3 (SwiGLU)
        (Q and the attention output, K and V, the MLP's k f-wide tensors; KV heads replicated if g < t)
      attention scores (standard attention, no recompute): (2e+1)·b·(a/t)·(s/c)·s
    For h = a·d_h = g·d_h, f = 4h this is sbh(10 + 24/t + 5as/(ht)), the paper's eq. 2.
    Full recompute keeps only the layer input e·T·h (÷t with sequence parallelism).
    With FP8/FP4 GEMMs the four GEMM inputs (the two norm outputs, the attention output, the MLP's
    down-projection input) are kept as 1-byte FP8 copies (FP8_SAVED_INPUT_BYTES), the rest in 16 bit.
    Op (torchtitan's per-op policy) keeps the layer input and the outputs it saves: Q and V, the
    attention output, the first MLP matmul's f-wide output, and with SwiGLU the down projection's
    h-wide output (its input is recomputed): e·T·(h/(t if SP) + (2a·d_h + max(g, t)·d_h + f)/t
    [+ h for SwiGLU]).
    """
    model, tp, cp, seq_len, micro_batch = job.model, layout.tp, layout.cp, job.seq_len, layout.micro_batch
    e = ACTIVATION_BYTES
    g8 = FP8_SAVED_INPUT_BYTES if job.low_precision else e      # bytes of a saved GEMM input
    h, f = model.hidden, model.ffn_hidden
    tokens = layout.tokens(job)
    sp_div = layout.sp_div
    # two norm inputs (16 bit), two norm outputs = QKV and MLP-up inputs, two dropout masks
    mask = DROPOUT_MASK_BYTES if model.dropout else 0.0
    replicated = (2.0 * e + 2.0 * g8 + 2.0 * mask) * tokens * h / sp_div
    q_width = model.heads * model.head_dim
    kv_width = 2.0 * xp.maximum(model.kv_heads, tp) * model.head_dim     # KV heads replicated when g < t
    # Q, K, V and the MLP-up outputs in 16 bit; the attention output and the MLP-down input as GEMM inputs
    split = tokens * (e * (q_width + kv_width + (model.mlp_matrices - 1.0) * f) + g8 * (q_width + f)) / tp
    scores: Num = 0.0
    scores_all: Num = 0.0
    if job.attention == "standard":
        # softmax output, and with dropout its dropped-out copy and mask
        scores_all = ((e + e + mask) if model.dropout else e) * micro_batch * (model.heads / tp) * (seq_len / cp) \
            * seq_len
        scores = scores_all * layout.no_recompute
    stored = replicated + split + scores
    full_input = e * tokens * h / sp_div
    op_saved = full_input + e * tokens * ((2.0 * q_width + kv_width / 2.0 + f) / tp
                                          + (h if model.mlp == "swiglu" else 0.0))
    # the layer being recomputed during backward re-materialises everything, scores included
    rematerialised = replicated + split + scores_all
    kept = xp.where(layout.full > 0, full_input, xp.where(layout.op > 0, op_saved, stored))
    return kept, rematerialised


def in_flight_micro_batches(pp: Num, vpp: Num, micro_batches: Num) -> Num:
    """Micro-batches whose activations the first stage holds under 1F1B: min(m, p), times the
    interleaving factor 1 + (p−1)/(p·v) when v > 1 (Korthikanti et al. 2022 §4.2.3)."""
    interleave = xp.where(vpp > 1, 1.0 + (pp - 1.0) / (pp * vpp), 1.0)
    return xp.minimum(micro_batches, pp) * interleave


class MemoryBreakdown(NamedTuple):
    """Bytes per device (the heaviest pipeline stage)."""

    weights_bytes: Num
    gradients_bytes: Num
    optimizer_bytes: Num
    activations_bytes: Num
    overhead_bytes: Num
    total_bytes: Num


def sharded_state_bytes(job: Job, layout: Layout) -> tuple[Num, Num, Num]:
    """(weights, gradients, optimizer state) of the heaviest stage per device [B], sharded per ZeRO
    stage over d_shard·c ranks (the context-parallel ranks hold the same weights: Megatron's DP×CP
    group). ZeRO-3 with FP32 gradients (PyTorch FSDP, JAX/MaxText) keeps the FP32 master as the
    sharded parameters, cast to 16 bit only when gathered, so no 16-bit shard; with FP16 gradients
    (DeepSpeed FP16 ZeRO-3) a 16-bit shard is kept: 16 B per parameter either way (Rajbhandari et
    al. 2020 §5: 2 + 2 + K with K = 12; FSDP: 4 + 4 + 8). ZeRO-3 also holds the gathered weights of
    the layer being computed and of the prefetched next one (none over a single shard rank)."""
    model, precision = job.model, job.precision
    params_local = stage_params(model, layout.pp, layout.vpp, layout.pipeline_split) / layout.tp
    shard = layout.shard * layout.cp
    zero = layout.zero
    sharded3 = xp.mask((zero >= 3) * (shard > 1))
    w_bytes = weight_bytes_per_param(precision)
    no_16bit_shard = sharded3 * (1.0 if precision in ("bf16", "fp8", "fp4") else 0.0)
    weights = params_local * w_bytes / xp.where(zero >= 3, shard, 1.0) * (1.0 - no_16bit_shard)
    weights = weights + sharded3 * 2.0 * model.params_per_layer / layout.tp * w_bytes
    grads = params_local * grad_bytes_per_param(precision) / xp.where(zero >= 2, shard, 1.0)
    optim = params_local * optimizer_bytes_per_param(precision) / xp.where(zero >= 1, shard, 1.0)
    return weights, grads, optim


def activation_bytes(job: Job, layout: Layout) -> Num:
    """Activations of the heaviest stage per device [B]: the first stage's layers times the in-flight
    micro-batches, the last stage's layers with the FP32 logits and their gradient, and one layer
    re-materialised during its backward under full or op recompute (docs/model.md §7.4)."""
    model = job.model
    per_layer, per_layer_stored = activation_bytes_per_layer(job, layout)
    layers_per_stage, last_layers = stage_layers(model, layout.pp, layout.vpp, layout.pipeline_split)
    working = layout.rematerialises_layer * xp.maximum(per_layer_stored - per_layer, 0.0)
    first_stage = per_layer * layers_per_stage * in_flight_micro_batches(layout.pp, layout.vpp,
                                                                         layout.micro_batches(job)) + working
    logits = 2.0 * LOGITS_BYTES * layout.micro_batch * job.seq_len / layout.cp * model.vocab / layout.tp
    last_stage = per_layer * last_layers + working + logits
    return xp.where(layout.pp > 1, xp.maximum(first_stage, last_stage), first_stage + logits)


def memory_per_device(job: Job, layout: Layout) -> MemoryBreakdown:
    """Weights, gradients and optimizer state of the heaviest stage, sharded per ZeRO stage, plus
    activations of the in-flight micro-batches and the framework overhead [B]."""
    weights, grads, optim = sharded_state_bytes(job, layout)
    activations = activation_bytes(job, layout)
    subtotal = weights + grads + optim + activations
    overhead = FRAMEWORK_OVERHEAD_BYTES + FRAGMENTATION_FRACTION * subtotal
    return MemoryBreakdown(weights_bytes=weights, gradients_bytes=grads, optimizer_bytes=optim,
                           activations_bytes=activations, overhead_bytes=overhead, total_bytes=subtotal + overhead)
