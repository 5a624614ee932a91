"""Memory per device: weights, gradients, optimizer state, activations and overhead.

Sources: Rajbhandari et al. 2020 (ZeRO: what each stage shards; 2 B weights + 12 B Adam state per
parameter; trainest keeps Megatron's 4-byte FP32 gradient buffer, so 2+4+12 = 18 B unsharded); Korthikanti et al. 2022 §4 (activations per layer, sequence parallelism,
selective and full recomputation, the 1F1B/interleaved in-flight factor). All functions accept
floats or numpy arrays for the layout arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainest import xp
from trainest.catalog import Model
from trainest.units import GiB

MASTER_WEIGHT_BYTES = 4.0        # FP32 master copy of each parameter (mixed precision)
ADAM_MOMENT_BYTES = 8.0          # FP32 first and second moments
MAIN_GRAD_BYTES = 4.0            # FP32 gradient accumulation buffer (Megatron main_grad, FSDP reduce dtype)
FP16_GRAD_BYTES = 2.0            # loss-scaled FP16 training keeps and reduces FP16 gradients
DROPOUT_MASK_BYTES = 1.0         # one byte per element
LOGITS_BYTES = 4.0               # FP32 logits (and their gradient) for the cross-entropy
FRAMEWORK_OVERHEAD_BYTES = 2.0 * GiB   # CUDA context, NCCL and cuBLAS workspaces, allocator reserve
FRAGMENTATION_FRACTION = 0.05    # allocator fragmentation, as a fraction of everything else


def weight_bytes_per_param(precision: str) -> float:
    """Bytes of the working weights: 4 for FP32/TF32 training, 2 otherwise (FP8/FP4 recipes keep
    16-bit weights and cast per GEMM)."""
    return 4.0 if precision in ("fp32", "tf32") else 2.0


def grad_bytes_per_param(precision: str) -> float:
    """Bytes per parameter of the gradient buffer, which is also what the data-parallel reduction
    moves: FP32 (4) for BF16/FP8/FP4 mixed precision (Megatron forces FP32 gradient accumulation and
    reduction with BF16; FSDP's default reduce dtype) and FP32 training; FP16 (2) for loss-scaled FP16
    mixed precision, whose gradients stay FP16 (Megatron-LM without --accumulate-allreduce-grads-in-fp32,
    DeepSpeed's FP16 ZeRO)."""
    return FP16_GRAD_BYTES if precision == "fp16" else MAIN_GRAD_BYTES


def optimizer_bytes_per_param(precision: str) -> float:
    """Adam state: FP32 master + two moments (12 B); pure FP32 training needs no master copy (8 B)."""
    return ADAM_MOMENT_BYTES + (0.0 if precision in ("fp32", "tf32") else MASTER_WEIGHT_BYTES)


PIPELINE_SPLITS = ("even", "balanced")


def stage_layers(model: Model, pp, vpp=1.0, split: str = "even"):
    """(layers on the heaviest stage, layers on the last stage).

    even: L/p each (L must divide by p·v). balanced (Megatron's account-for-embedding-and-loss
    split): the embedding and the loss count as one layer each, a stage holds
    u = ceil((L+2)/(p·v))·v units, the first and last stages one layer less than u.
    """
    if split == "even":
        return model.layers / pp, model.layers / pp
    units = xp.ceil((model.layers + 2.0) / (pp * vpp)) * vpp
    heavy = xp.where(pp > 1, units, float(model.layers))
    return heavy, xp.where(pp > 1, units - 1.0, float(model.layers))


def stage_params(model: Model, pp, vpp=1.0, split: str = "even"):
    """Parameters on the heaviest pipeline stage: its layers plus one embedding-sized matrix
    (first stage: input embedding; last stage: output layer), or all embeddings when p = 1.
    With the balanced split the first stage trades one layer for the embedding."""
    embed_one = model.vocab * model.hidden
    heavy, last = stage_layers(model, pp, vpp, split)
    if split == "even":
        return heavy * model.params_per_layer + xp.where(pp > 1, embed_one, model.embedding_params)
    with_embed = last * model.params_per_layer + xp.where(pp > 1, embed_one, model.embedding_params)
    return xp.maximum(heavy * model.params_per_layer, with_embed)


FP8_SAVED_INPUT_BYTES = 1.0      # FP8/FP4 recipes (Transformer Engine) keep the GEMM inputs saved for
                                 # the backward pass as their FP8 copies, not in 16 bit


def activation_bytes_per_layer(model: Model, *, micro_batch, seq_len, tp, cp, sp, recompute, attention: str,
                               precision: str = "bf16"):
    """Activations one layer keeps for backward, for one micro-batch [B] (16-bit activations).

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
    recompute is 0 (none), 1 (selective), 2 (full) or 3 (op); sp is 0/1.
    """
    e = 2.0
    g8 = FP8_SAVED_INPUT_BYTES if precision in ("fp8", "fp4") else e      # bytes of a saved GEMM input
    h, f = model.hidden, model.ffn_hidden
    tokens = micro_batch * seq_len / cp
    sp_div = xp.where(sp > 0, tp, 1.0)
    # two norm inputs (16 bit), two norm outputs = QKV and MLP-up inputs, two dropout masks
    mask = DROPOUT_MASK_BYTES if model.dropout else 0.0
    replicated = (2.0 * e + 2.0 * g8 + 2.0 * mask) * tokens * h / sp_div
    q_width = model.heads * model.head_dim
    kv_width = 2.0 * xp.maximum(model.kv_heads, tp) * model.head_dim     # KV heads replicated when g < t
    # Q, K, V and the MLP-up outputs in 16 bit; the attention output and the MLP-down input as GEMM inputs
    split = tokens * (e * (q_width + kv_width + (model.mlp_matrices - 1.0) * f) + g8 * (q_width + f)) / tp
    scores = 0.0
    scores_all = 0.0
    if attention == "standard":
        # softmax output, and with dropout its dropped-out copy and mask
        scores_all = ((e + e + mask) if model.dropout else e) * micro_batch * (model.heads / tp) * (seq_len / cp) \
            * seq_len
        scores = scores_all * xp.mask(recompute == 0)
    stored = replicated + split + scores
    full_input = e * tokens * h / sp_div
    op_saved = full_input + e * tokens * ((2.0 * q_width + kv_width / 2.0 + f) / tp
                                          + (h if model.mlp == "swiglu" else 0.0))
    # the layer being recomputed during backward re-materialises everything, scores included
    rematerialised = replicated + split + scores_all
    kept = xp.where(recompute == 2, full_input, xp.where(recompute == 3, op_saved, stored))
    return kept, rematerialised


def in_flight_micro_batches(pp, vpp, micro_batches):
    """Micro-batches whose activations the first stage holds under 1F1B: min(m, p), times the
    interleaving factor 1 + (p−1)/(p·v) when v > 1 (Korthikanti et al. 2022 §4.2.3)."""
    interleave = xp.where(vpp > 1, 1.0 + (pp - 1.0) / (pp * vpp), 1.0)
    return xp.minimum(micro_batches, pp) * interleave


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per device (the heaviest pipeline stage)."""

    weights_bytes: object
    gradients_bytes: object
    optimizer_bytes: object
    activations_bytes: object
    overhead_bytes: object
    total_bytes: object


def memory_per_device(model: Model, precision: str, *, seq_len, micro_batch, micro_batches,
                      tp, pp, dp, cp, vpp, zero, sp, recompute, attention: str, dp_shard=None,
                      pipeline_split: str = "even") -> MemoryBreakdown:
    """Weights, gradients and optimizer state of the heaviest stage, sharded per ZeRO stage, plus
    activations of the in-flight micro-batches and the framework overhead [B]."""
    params_local = stage_params(model, pp, vpp, pipeline_split) / tp
    # ZeRO shards over dp_shard ranks (HSDP: a sub-group) times the context-parallel ranks, which
    # hold the same weights (Megatron's DP×CP group)
    shard = (dp if dp_shard is None else dp_shard) * cp
    shard3 = xp.where(zero >= 3, shard, 1.0)
    shard2 = xp.where(zero >= 2, shard, 1.0)
    shard1 = xp.where(zero >= 1, shard, 1.0)
    w_bytes = weight_bytes_per_param(precision)
    # ZeRO-3 with FP32 gradients (PyTorch FSDP, JAX/MaxText): the sharded parameters are the FP32
    # master copy, cast to 16 bit only when gathered, so no separate 16-bit shard is kept; with FP16
    # gradients (DeepSpeed FP16 ZeRO-3) a 16-bit shard is kept. Either way 16 bytes per parameter
    # (Rajbhandari et al. 2020 §5: 2 + 2 + K with K = 12; FSDP: 4 + 4 + 8).
    no_16bit_shard = xp.mask((zero >= 3) * (shard > 1)) * (1.0 if precision in ("bf16", "fp8", "fp4") else 0.0)
    weights = params_local * w_bytes / shard3 * (1.0 - no_16bit_shard)
    # ZeRO-3 gathers the weights of the layer being computed and prefetches the next one (over a
    # single shard rank nothing is sharded, so nothing is gathered: no buffers).
    weights = weights + xp.mask((zero >= 3) * (shard > 1)) * 2.0 * model.params_per_layer / tp * w_bytes
    grads = params_local * grad_bytes_per_param(precision) / shard2
    optim = params_local * optimizer_bytes_per_param(precision) / shard1

    per_layer, per_layer_stored = activation_bytes_per_layer(
        model, micro_batch=micro_batch, seq_len=seq_len, tp=tp, cp=cp, sp=sp, recompute=recompute,
        attention=attention, precision=precision)
    layers_per_stage, last_layers = stage_layers(model, pp, vpp, pipeline_split)
    # one layer re-materialised during backward (full or op); what it kept is already counted
    working = xp.mask(recompute >= 2) * xp.maximum(per_layer_stored - per_layer, 0.0)
    first_stage = per_layer * layers_per_stage * in_flight_micro_batches(pp, vpp, micro_batches) + working
    logits = 2.0 * LOGITS_BYTES * micro_batch * seq_len / cp * model.vocab / tp
    last_stage = per_layer * last_layers + working + logits
    activations = xp.where(pp > 1, xp.maximum(first_stage, last_stage), first_stage + logits)

    subtotal = weights + grads + optim + activations
    overhead = FRAMEWORK_OVERHEAD_BYTES + FRAGMENTATION_FRACTION * subtotal
    return MemoryBreakdown(weights_bytes=weights, gradients_bytes=grads, optimizer_bytes=optim,
                           activations_bytes=activations, overhead_bytes=overhead, total_bytes=subtotal + overhead)
