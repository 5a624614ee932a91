"""Kernels and the host (docs/model.md §2.9): how many kernels one layer launches per pass, the
device's floor per kernel, and the host's time to dispatch them. A step whose kernels are shorter
than the host's time to launch them is host-bound: the device waits.

Kernel counts are operator counts of the frameworks' layer code (not fitted):
- fused (Megatron-Core/Transformer Engine, torch.compile, XLA): per layer forward 2 norms, 4 GEMMs,
  2 fused bias-dropout-add (residual) kernels and 1 fused activation (bias-GeLU or SwiGLU)
  (megatron/core/transformer/transformer_layer.py, mlp.py; apex/TE fused LayerNorm);
- eager PyTorch: each norm ~7 kernels (cast, square, mean, rsqrt, scale, weight, cast back), the
  residual adds and dropouts separately, GeLU 1 kernel and SwiGLU 2 (silu, product);
- attention: a fused (flash) forward is 1 kernel and its backward 3 (FlashAttention-2: the
  preprocessing dot(dO, O), the main kernel, the dQ conversion; Dao 2023); standard attention
  launches the score GEMM, the fused scale-mask-softmax, the dropout (when the model has dropout),
  the context GEMM and a transpose of the output, and in the backward two GEMMs per GEMM, the
  softmax and dropout backward and the transpose;
- backward: every GEMM becomes two (data and weight gradient), every element-wise kernel about two
  (its backward and, for norms, the parameter-gradient reduction).
- a mixture-of-experts layer (Megatron-Core alltoall dispatcher, grouped GEMM, Transformer Engine fused
  permutation): the router GEMM, one grouped GEMM each for the experts' up and down projections, the
  shared experts' two GEMMs, and MOE_ROUTING_KERNELS routing and dispatch kernels forward
  (MOE_ROUTING_BACKWARD_KERNELS backward: the router, the load-balancing loss, the token counts and their
  device-to-host copies, the fused permutation, the sort by local expert and back, the unpermutation);
  MLA: its 4 projections (5 with query compression) instead of QKV and the output projection.
Each tensor-parallel collective, and each expert-parallel all-to-all, is one more launch for the host
(torch.distributed + NCCL enqueue).

Megatron's fused scale-mask-softmax (standard attention) runs only for the shapes its kernel takes;
otherwise the framework runs the softmax as FP32 PyTorch operators (`softmax_fallback`). Outside the
layers, every micro-batch launches the embedding's and the loss's kernels (`head_kernels`): the batch
preparation, the embedding lookup, the final norm, the logits GEMM and the cross-entropy, with their
tensor-parallel collectives.
"""

from __future__ import annotations

from trainest import xp
from trainest.choices import DEFAULT_RECOMPUTE_MODULES
from trainest.frameworks import FRAMEWORKS
from trainest.layout import Job, Layout, Num
from trainest.record import NamedTuple
from trainest.step.collectives import Tiers, all_reduce_s
from trainest.step.finetune import kv_width_local, layer_adapters, layer_kind_mean
from trainest.step.roofline import Op, OpTime, op_of, streaming_time
from trainest.step.schedule import first_is_heavy

FUSED_ELEMENTWISE_KERNELS = 5.0     # 2 norms, 2 bias-dropout-add, 1 fused activation, per layer forward
EAGER_NORM_KERNELS = 7.0            # an unfused FP32 norm: cast, square, mean, rsqrt, scale, weight, cast back
EAGER_ACTIVATION_KERNELS = {"gelu": 1.0, "swiglu": 2.0}
ROPE_KERNELS = {"fused": 2.0, "eager": 10.0}   # RoPE on Q and K per layer forward: one fused kernel each, or eager
                                              # mul, neg, cat, mul, add each (layer.py: ROPE_PASSES)
FLASH_KERNELS = (1.0, 3.0)          # fused attention: forward, backward (FlashAttention-2)
# a context-parallel ring's steps after the first (Transformer Engine AttnFuncWithCPAndKVP2P): each runs the
# fused attention kernels again on the chunk received, plus, forward, the batched send/receive of K,V and the
# corrections of the softmax statistics and of the output by the new partial result; backward, the batched
# send/receive of K,V and dK,dV and the accumulations of dQ and of dK,dV
CP_STEP_EXTRA_KERNELS = (3.0, 3.0)
# standard attention: scores, softmax, context, transpose; backward 2+2 GEMMs, softmax, transpose
STANDARD_ATTENTION_KERNELS = (4.0, 7.0)
GEMM_BACKWARD_KERNELS = 2.0         # data gradient and weight gradient
ELEMENTWISE_BACKWARD_RATIO = 2.0    # element-wise backward kernels per forward kernel
# A MoE layer's routing and dispatch kernels besides its GEMMs and all-to-alls, per micro-batch, counted from
# Megatron-Core 0.14 (transformer/moe/router.py TopKRouter with moe_router_fusion, moe_utils.py,
# token_dispatcher.py MoEAlltoAllTokenDispatcher with moe_permute_fusion: Transformer Engine's fused
# permutation; the settings of every bundled Megatron-Bridge recipe). Forward: after the router's GEMM, 7 (the
# fused top-k with its score function, the fused scores of the load-balancing loss, the routing map's sum over
# tokens, the fused loss, its division by the batch, the loss tracker's divide and add); the dispatch's
# preprocessing, 8 (tokens per expert: sum and cast; the input splits' sum; the counts' all-gather over the
# expert group; the local experts' slice copied; the output splits', the TP splits' and the local experts'
# sums); 5 device-to-host copies of those split sizes and counts; the fused permutation, 4 (the row-id map's
# three kernels, the permute with the routing probabilities); the probabilities' all-to-all, 1 (the tokens'
# is counted with ALL_TO_ALLS_PER_MOE_LAYER); the sort of the received rows by local expert, 2 (its map, the
# sort), and back, 2; the fused unpermutation, 1; the shared experts' output added, 1: 31. Backward, 13 (only
# what has a gradient): the unpermutation's, the unsort's, the sort's, the probabilities' all-to-all, the
# permutation's 2 (rows, probabilities), the loss scaler's 2, the division's, the fused loss's, the fused loss
# scores', the fused top-k's, and the probabilities' two gradients summed. DeepEP and HybridEP
# (MoEFlexTokenDispatcher) launch about as many (their layout and notify kernels, the received indices turned
# into a routing map, the permutation, the token count read back; the same router): one count for every
# dispatcher. The count was 6 (score activation, top-k, permute, sort, unsort, unpermute) before stop 48.
MOE_ROUTING_KERNELS = 31.0          # forward, per MoE layer and micro-batch
MOE_ROUTING_BACKWARD_KERNELS = 13.0  # backward
MOE_ROUTING_BACKWARD_RATIO = MOE_ROUTING_BACKWARD_KERNELS / MOE_ROUTING_KERNELS
ALL_TO_ALLS_PER_MOE_LAYER = 4.0     # dispatch and combine forward, their gradients backward


def gemm_kernels(job: Job) -> float:
    """Weight-GEMM kernels of the mean layer's forward: its attention block's (QKV and the output
    projection; MLA: 4 or 5 projections) and its MLP's (up with gate and down; a MoE layer the router,
    two grouped expert GEMMs and the shared experts' two), the MLP kinds weighted by their shares of
    the layers (`block_gemm_kernels`)."""
    m = job.model
    if m.moe is None:
        return block_gemm_kernels(job, "*") + block_gemm_kernels(job, "-")
    return block_gemm_kernels(job, "*") + (m.dense_layers_count * block_gemm_kernels(job, "-")
                                           + m.moe_layers * block_gemm_kernels(job, "E")) / m.layers


def moe_layer_share(job: Job) -> float:
    """L_m/L: the share of the layers that are MoE layers (0 for a dense model)."""
    return 0.0 if job.model.moe is None else job.model.moe_layers / job.model.layers

# Kernels of an adapter's merge per pass beyond its two GEMMs: eager PyTorch scales the adapter output
# and adds it (2 kernels; backward: the scaled gradient for B and the add of the input gradients, 2);
# fused kernels fold both into the GEMMs' alpha and beta (0).
LORA_MERGE_KERNELS = {"eager": 2.0, "fused": 0.0}


def adapter_kernels(job: Job, layout: Layout, kind: str = "dense") -> tuple[Num, Num]:
    """(forward, backward) kernels the adapters of one layer of `kind` launch per micro-batch: per
    adapted matrix its two GEMMs and, unfused, the merge's scale and add (LORA_MERGE_KERNELS); backward
    the GEMMs' data and weight gradients and the merge's (the scaled gradient, the added input
    gradient). A MoE layer's routed experts' adapters launch once per grouped GEMM, or once per local
    expert where the framework loops over the experts (`Framework.expert_loop`: python, gemm)."""
    layer, expert = layer_adapters(job, layout, kv_width_local(job, layout), kind)
    merge = LORA_MERGE_KERNELS[job.kernels]
    forward_per, backward_per = 2.0 + merge, 2.0 * GEMM_BACKWARD_KERNELS + merge
    per_expert: Num = 0.0
    if expert and job.model.moe is not None:
        loops = FRAMEWORKS[job.framework].expert_loop != "grouped"
        per_expert = len(expert) * (job.model.moe.experts / layout.ep if loops else 1.0)
    count = len(layer) + per_expert
    return count * forward_per, count * backward_per


def mean_adapter_kernels(job: Job, layout: Layout) -> tuple[Num, Num]:
    """(forward, backward) adapter kernels of the mean layer (`adapter_kernels` of each kind at its
    share of the layers), × the frozen mask; (0, 0) without adapters."""
    if xp.off(layout.finetune):
        return 0.0, 0.0
    dense = adapter_kernels(job, layout, "dense") if job.model.dense_layers_count else (0.0, 0.0)
    moe = adapter_kernels(job, layout, "moe") if job.model.moe is not None else (0.0, 0.0)
    return (layout.frozen * layer_kind_mean(job, dense[0], moe[0]),
            layout.frozen * layer_kind_mean(job, dense[1], moe[1]))


# Megatron's fused scale-mask-softmax (megatron/model/fused_softmax.py, megatron/core/fusions/fused_softmax.py:
# FusedScaleMaskSoftmax.is_kernel_available) takes 16-bit scores with 16 < s_k <= 4096, s % 4 == 0 and, for the
# causal mask, b·a/t % batch_per_block == 0; batch_per_block = (128 threads / warp width) × batches per warp
# (scaled_upper_triang_masked_softmax.h: 4 for s_k >= 256, 8 for shorter rows). Otherwise forward_torch_softmax
# runs: cast to FP32 (read 2, write 4 B per score), scale (4+4), masked_fill (4+1+4), softmax (4+4), cast back
# (4+2) = 37 B and 5 kernels where the fused kernel moves 4 B in 1; its backward (cast 2+4, softmax 4+4+4,
# masked_fill 4+1+4, scale 4+4, cast 4+2) 41 B and 5 kernels against 6 B in 1. (FP32 softmax: Megatron turns
# attention_softmax_in_fp32 on with apply_query_key_layer_scaling, its fp16 default.)
SOFTMAX_FUSED_MAX_SEQ = 4096
SOFTMAX_FALLBACK_EXTRA_BYTES = (37.0 - 4.0, 41.0 - 6.0)    # per score: forward, backward
SOFTMAX_FALLBACK_EXTRA_KERNELS = (4.0, 4.0)

# Kernels of one micro-batch outside the layers (operator counts of Megatron's GPT code: pretrain_gpt.py
# get_batch and loss_func, megatron/model/language_model.py Embedding, parallel_lm_logits,
# tensor_parallel/cross_entropy.py), forward + backward:
# - first stage: batch preparation (tokens, labels, loss mask, position ids, causal mask: 8), word and
#   position embedding, their sum, the [b,s,h]->[s,b,h] transpose and dropout (5 forward), their backward
#   (dropout, transpose, two embedding backwards of ~3 kernels each, accumulation into the gradients: 10);
#   with t > 1 the vocab-parallel lookup masks its input and output (5 more) and all-reduces its output;
# - last stage: final norm (1 + 2), logits GEMM (1 + 2) with its transpose (1 + 1), the FP32 cast (1 + 1),
#   the cross-entropy (17 forward: max, subtract, the target masks and gather, exp, sum, log, divide; 4
#   backward), the loss mask and mean (5 + 3), the loss scale (1 + 1) and the data-parallel loss average (3);
#   with t > 1 the cross-entropy all-reduces max, target logit and sum (3 small collectives) and the
#   logits' input gradient is all-reduced in the backward.
# The loss's and the embedding's operators are plain tensor operators called from Python, without the
# layers' autograd Functions, hooks and recompute re-entry that the fitted host time per layer kernel
# includes: each costs the eager dispatcher + cudaLaunchKernel, ~10-20 µs on a server CPU (PyTorch
# dispatcher overhead; CUDA launch ~5 µs: CUDA C++ Best Practices Guide); trainest takes 20 µs, the
# catalog's prior host time per kernel (DEFAULT_HOST_US_PER_KERNEL), not fitted.
HEAD_HOST_PER_KERNEL_S = 20e-6
EMBEDDING_KERNELS = 23.0
VOCAB_PARALLEL_MASK_KERNELS = 5.0
OUTPUT_KERNELS = 44.0
CE_TP_COLLECTIVES = 3.0
# Megatron's vocab-parallel cross-entropy operator by operator over an FP32 copy of the logits, bytes per logit
# element: cast (2+4), max (4), subtract (4+4), exp (4+4), sum (4), divide (4+4); backward multiply (4+4) and
# cast back (4+2) = 52. The fused or fused-enough losses of other frameworks: 4 FP32 passes, 16.
UNFUSED_CROSS_ENTROPY_BYTES = 52.0
CROSS_ENTROPY_BYTES = 16.0


def elementwise_kernels(job: Job) -> float:
    """Element-wise kernels of one dense layer's forward: fused 5; eager 2·7 (norms) + 2 residual adds +
    2 dropouts (when the model has dropout) + the activation's 1 (GeLU) or 2 (SwiGLU); a RoPE model (not
    MLA) adds ROPE_KERNELS (fused 2, eager 10). A MoE layer
    adds MOE_ROUTING_KERNELS (layer.py: MlpPart.extra_kernels; pass_kernels: the mean layer's)."""
    rope = (ROPE_KERNELS["eager" if job.kernels == "eager" else "fused"]
            if job.model.positional == "rope" and job.model.mla is None else 0.0)
    if job.kernels != "eager":
        return FUSED_ELEMENTWISE_KERNELS + rope
    dropouts = 2.0 if job.model.dropout else 0.0
    return 2.0 * EAGER_NORM_KERNELS + 2.0 + dropouts + EAGER_ACTIVATION_KERNELS[job.model.mlp] + rope


def elementwise_backward_kernels(elementwise: Num, routing: Num) -> Num:
    """Backward kernels of `elementwise` forward element-wise kernels of which `routing` are a MoE layer's
    routing and dispatch: ELEMENTWISE_BACKWARD_RATIO per element-wise kernel, MOE_ROUTING_BACKWARD_RATIO per
    routing kernel (only what has a gradient)."""
    return ELEMENTWISE_BACKWARD_RATIO * (elementwise - routing) + MOE_ROUTING_BACKWARD_RATIO * routing


# A hybrid model's blocks (step/hybrid.py), fused: each its pre-norm and its residual (bias-dropout-add),
# an MLP block its activation, an attention block its RoPE; a Mamba-2 block (Megatron-Core MambaMixer with
# mamba_ssm's fused path) its gated RMSNorm (one Triton kernel). Its core: the causal convolution and the
# scan's five kernels forward (mamba_ssm ssd_combined: chunk_cumsum, chunk_state, state_passing, bmm_chunk,
# chunk_scan); backward the convolution's two (its forward again, then causal_conv1d_bwd) and, in
# _mamba_chunk_scan_combined_bwd (mamba_ssm 2.2.4), fifteen Triton kernels (chunk_cumsum, bmm_chunk, chunk_state
# and state_passing recomputed; chunk_scan_bwd_dz for the gate Megatron-Core passes; chunk_scan_bwd_dstates,
# state_passing_bwd, chunk_scan_chunk_state_bwd_dx, chunk_state_bwd_db, chunk_scan_bwd_dC, chunk_scan_bwd_dcb,
# bmm_chunk_bwd twice, chunk_scan_bwd_ddAcs_stable, chunk_cumsum_bwd) and seven of PyTorch's (the clone of dt,
# the last chunk's += , the reverse cumulative sum's flip, cumsum and flip, two additions into ddA).
MAMBA_CORE_KERNELS = (6.0, 24.0)
MAMBA_GATED_NORM_KERNELS = 1.0


def block_elementwise_kernels(job: Job, kind: str) -> float:
    """Element-wise kernels of one hybrid block's forward (kind M, *, E or -): its norm (eager 7) and
    residual add (fused with the dropout; eager add and dropout apart), plus: an attention block its RoPE
    (not MLA), an MLP block its activation, a Mamba-2 block its gated norm. An attention block's and an
    MLP block's add up to a transformer layer's (`elementwise_kernels`)."""
    eager = job.kernels == "eager"
    m = job.model
    own = (EAGER_NORM_KERNELS + 1.0 + (1.0 if m.dropout else 0.0)) if eager else 2.0
    if kind == "*":
        rope = ROPE_KERNELS["eager" if eager else "fused"] if m.positional == "rope" and m.mla is None else 0.0
        return own + rope
    if kind in ("-", "E"):
        return own + (EAGER_ACTIVATION_KERNELS[m.mlp] if eager else 1.0)
    return own + MAMBA_GATED_NORM_KERNELS


def block_gemm_kernels(job: Job, kind: str) -> float:
    """Weight-GEMM kernels of one hybrid block's forward: Mamba-2 in_proj and out_proj; attention QKV
    and the output projection (MLA: 4 or 5); a dense MLP up and down; a MoE MLP the router, two grouped
    expert GEMMs and the shared experts' two."""
    m = job.model
    if kind == "*":
        return 2.0 if m.mla is None else (5.0 if m.mla.q_lora_rank is not None else 4.0)
    if kind == "E":
        if m.moe is None:
            return 3.0
        return 3.0 + (2.0 if m.moe.shared_experts else 0.0) + (2.0 if m.moe.latent_size is not None else 0.0)
    return 2.0


def hybrid_pass_kernels(job: Job, layout: Layout) -> tuple[Num, Num, Num]:
    """(forward, backward, recomputed) kernels of a hybrid model's mean block for one micro-batch: each
    kind's (`block_gemm_kernels`, its core's, `block_elementwise_kernels`, a MoE block's routing kernels)
    weighted by its share of the blocks, as `pass_kernels` counts a transformer layer's."""
    m = job.model
    eager = job.kernels == "eager"
    norm = EAGER_NORM_KERNELS if eager else 1.0
    act = EAGER_ACTIVATION_KERNELS[m.mlp] if eager else 1.0
    forward: Num = 0.0
    backward: Num = 0.0
    recompute: Num = 0.0
    for kind in ("M", "*", "E", "-"):
        share = m.block_count(kind) / m.layers
        if not share:
            continue
        gemms = block_gemm_kernels(job, kind)
        core_f, core_b = attention_kernels(job, layout) if kind == "*" else MAMBA_CORE_KERNELS if kind == "M" \
            else (0.0, 0.0)
        routing = MOE_ROUTING_KERNELS if kind == "E" else 0.0
        ew = block_elementwise_kernels(job, kind) + routing
        fwd = gemms + core_f + ew
        selective: Num = job.recomputes("layernorm") * norm
        if kind == "*":
            selective = selective + job.recomputes("core_attn") * core_f
        elif kind == "-":
            selective = selective + job.recomputes("mlp") * (2.0 + act)
        elif kind == "E":
            shared = 2.0 if m.moe is not None and m.moe.shared_experts else 0.0
            selective = (selective + job.recomputes("moe_act") * act
                         + job.recomputes("moe") * (gemms + MOE_ROUTING_KERNELS + act)
                         + job.recomputes("shared_experts") * (shared + act))
        forward = forward + share * fwd
        backward = backward + share * (gemms * GEMM_BACKWARD_KERNELS + core_b
                                       + elementwise_backward_kernels(ew, routing))
        recompute = recompute + share * (layout.full * fwd + layout.selective * selective
                                         + layout.op * (0.5 * gemms + ew))
    return forward, backward, recompute


def hybrid_tp_collectives(job: Job, layout: Layout) -> tuple[Num, Num]:
    """(forward, backward with recompute) TP collective launches of a hybrid model's mean block per
    micro-batch: an attention, Mamba-2 or dense MLP block one forward, one backward and one more under
    full recompute; a MoE MLP block its shared experts' (the routed experts exchange tokens by
    all-to-all); none without tensor parallelism."""
    m = job.model
    tp = xp.mask(layout.tp > 1)
    plain = (m.layers - m.moe_layers) / m.layers
    shared = m.moe_layers / m.layers * (1.0 if m.moe is not None and m.moe.shared_experts else 0.0)
    return ((plain + shared) * tp,
            (plain * (1.0 + layout.full) + shared * (1.0 + layout.full + layout.selective * job.recomputes("moe")))
            * tp)


def attention_kernels(job: Job, layout: Layout | None = None) -> tuple[Num, Num]:
    """(forward, backward) kernels of the attention core: fused 1 and 3; standard 4 and 7, plus the
    dropout's one each way when the model has dropout, plus the FP32 softmax's 4 each way where
    Megatron's fused softmax does not take the shape (`softmax_fallback`, given the layout). Fused
    attention over a context-parallel ring of c ranks (given the layout): its kernels once per ring step
    and CP_STEP_EXTRA_KERNELS more for each of the c − 1 steps after the first."""
    if job.attention in ("flash", "flash2"):
        if layout is None:
            return FLASH_KERNELS
        steps = layout.cp - 1.0
        return (FLASH_KERNELS[0] + steps * (FLASH_KERNELS[0] + CP_STEP_EXTRA_KERNELS[0]),
                FLASH_KERNELS[1] + steps * (FLASH_KERNELS[1] + CP_STEP_EXTRA_KERNELS[1]))
    dropout = 1.0 if job.model.dropout else 0.0
    fallback = 0.0 if layout is None else softmax_fallback(job, layout)
    return (STANDARD_ATTENTION_KERNELS[0] + dropout + SOFTMAX_FALLBACK_EXTRA_KERNELS[0] * fallback,
            STANDARD_ATTENTION_KERNELS[1] + dropout + SOFTMAX_FALLBACK_EXTRA_KERNELS[1] * fallback)


def softmax_fallback(job: Job, layout: Layout) -> Num:
    """1 where standard attention in a Megatron framework cannot use the fused scale-mask-softmax (see
    SOFTMAX_FUSED_MAX_SEQ): 16-bit scores need 16 < s <= 4096, s % 4 == 0 and b·a/t a multiple of the
    kernel's batches per block (4 for s >= 256, else 8); else 0 (flash attention, other frameworks)."""
    if job.attention in ("flash", "flash2") or not FRAMEWORKS[job.framework].megatron_softmax:
        return 0.0
    s = job.seq_len
    if job.precision in ("fp32", "tf32") or not (16 < s <= SOFTMAX_FUSED_MAX_SEQ) or s % 4:
        return 1.0
    per_block = 4.0 if s >= 256 else 8.0
    attn_batches = layout.micro_batch * job.model.heads / layout.tp
    return xp.mask(attn_batches % per_block != 0)


def softmax_fallback_ops(job: Job, layout: Layout, memory_bytes_per_s: Num,
                         score_elements: Num) -> tuple[list[Op], list[Op]]:
    """(forward, backward) ops the FP32 fallback softmax adds over the fused kernel: 33 and 35 more bytes
    per score (SOFTMAX_FALLBACK_EXTRA_BYTES), memory-bound; none where the fused kernel runs."""
    fallback = softmax_fallback(job, layout)
    if xp.off(fallback):
        return [], []
    out = []
    for phase, extra in zip(("forward", "backward"), SOFTMAX_FALLBACK_EXTRA_BYTES, strict=True):
        b = fallback * extra * score_elements
        out.append(op_of("attention.softmax_fp32", phase, 0.0 * b, b, streaming_time(b, memory_bytes_per_s)))
    return [out[0]], [out[1]]


def pass_kernels(job: Job, layout: Layout) -> tuple[Num, Num, Num]:
    """(forward, backward, recomputed) kernels one layer launches for one micro-batch, a LoRA's adapters
    among them (and its frozen GEMMs' weight gradients not); the recomputation runs again the forward
    (full), the attention core (selective) or 3 GEMMs and the element-wise kernels (op). A hybrid
    model: its mean block's (`hybrid_pass_kernels`)."""
    if job.model.hybrid is not None:
        return hybrid_pass_kernels(job, layout)
    attn_fwd, attn_bwd = attention_kernels(job, layout)
    routing = moe_layer_share(job) * MOE_ROUTING_KERNELS
    elementwise = elementwise_kernels(job) + routing
    gemms = gemm_kernels(job)
    adapters_fwd, adapters_bwd = mean_adapter_kernels(job, layout)       # LoRA/QLoRA (step/finetune.py)
    forward = gemms + attn_fwd + elementwise + adapters_fwd
    frozen = 0.0 if xp.off(layout.finetune) else layout.frozen      # a frozen base: no weight-gradient GEMMs
    backward = (gemms * (GEMM_BACKWARD_KERNELS - frozen) + attn_bwd + elementwise_backward_kernels(elementwise, routing)
                + adapters_bwd)
    recompute = layout.full * forward + layout.selective * selective_kernels(job, attn_fwd) \
        + layout.op * (3.0 + elementwise)
    return forward, backward, recompute


def selective_kernels(job: Job, attn_fwd: Num) -> Num:
    """Kernels selective recompute launches again per layer (its `recompute_modules`): the attention
    core's forward (core_attn), the two norms (layernorm: fused 1, eager EAGER_NORM_KERNELS each), MLA's two
    up-projections and its RoPE (mla_up_proj), the routed experts' activation (moe_act, a MoE layer's
    share), a dense layer's MLP (mlp: its 2 GEMMs and activation, a dense layer's share), a MoE layer's
    block (moe: its router, shared and grouped GEMMs, routing kernels and activation; its per-expert
    launches and all-to-alls are counted where they are, `Job.moe_rerun`), the shared experts'
    (shared_experts)."""
    if job.recompute_modules == DEFAULT_RECOMPUTE_MODULES:
        return attn_fwd
    m = job.model
    norm = EAGER_NORM_KERNELS if job.kernels == "eager" else 1.0
    act = EAGER_ACTIVATION_KERNELS[m.mlp] if job.kernels == "eager" else 1.0
    moe_share, dense_share = moe_layer_share(job), 1.0 - moe_layer_share(job)
    latent = 2.0 if m.moe is not None and m.moe.latent_size is not None else 0.0     # LatentMoE's projections
    return (job.recomputes("core_attn") * attn_fwd + job.recomputes("layernorm") * 2.0 * norm
            + job.recomputes("mla_up_proj") * 4.0
            + job.recomputes("moe_act") * moe_share * act
            + job.recomputes("mlp") * dense_share * (2.0 + act)
            + job.recomputes("moe") * moe_share * (5.0 + latent + MOE_ROUTING_KERNELS + act)
            + job.recomputes("shared_experts") * moe_share * (2.0 + act))


def layer_kernels(job: Job, layout: Layout) -> Num:
    """Kernels one layer launches for one micro-batch, all passes (pass_kernels summed)."""
    forward, backward, recompute = pass_kernels(job, layout)
    return forward + backward + recompute


def host_per_kernel_s(job: Job) -> Num:
    """The host's time to dispatch one kernel [s]: the hardware system's fitted (or prior) time per
    kernel launched from Python, times the framework's dispatch factor (0 for a compiled step)."""
    return job.hardware.efficiency.host_per_kernel_s * FRAMEWORKS[job.framework].host_factor


def micro_batch_host_s(job: Job) -> Num:
    """The host's time per micro-batch outside its kernels that is on the step's path [s]: the system's
    (`efficiency.host_per_micro_batch_s`) times the framework's `micro_batch_host_factor` (its fitted scale
    where it synchronises host and device at every micro-batch, else 0)."""
    return job.hardware.efficiency.host_per_micro_batch_s * FRAMEWORKS[job.framework].micro_batch_host_factor


def host_pass_s(job: Job, layout: Layout) -> tuple[Num, Num]:
    """Host time of one layer's forward and of its backward (with what it recomputes), one
    micro-batch, each with its tensor-parallel collectives and expert-parallel all-to-alls, as the job's
    CUDA graphs leave them to launch (`graph_pass_launches`) [s]."""
    forward, backward, recompute = pass_kernels(job, layout)
    tp = xp.mask(layout.tp > 1)
    ep = moe_layer_share(job) * xp.mask(layout.ep > 1)
    tau = host_per_kernel_s(job)
    tp_fwd, tp_bwd = (2.0 * tp, (2.0 + 2.0 * layout.full + layout.op) * tp) if job.model.hybrid is None \
        else hybrid_tp_collectives(job, layout)
    a2a = ALL_TO_ALLS_PER_MOE_LAYER / 2.0      # dispatch and combine, each pass (and again where re-run)
    fwd = forward + tp_fwd + a2a * ep
    bwd = backward + recompute + tp_bwd + a2a * (1.0 + job.moe_rerun(layout)) * ep
    if job.cuda_graphs == "none":
        return fwd * tau, bwd * tau
    graph_fwd, graph_bwd = graph_pass_launches(job, layout, fwd, recompute)
    return graph_fwd * tau, graph_bwd * tau


# CUDA graphs (docs/model.md §2.10). A captured sequence of kernels (with its NCCL collectives) is
# replayed by one graph launch from the host (cudaGraphLaunch; PyTorch torch.cuda.CUDAGraph, Transformer
# Engine make_graphed_callables, Megatron-Core CudaGraphManager), at about one kernel launch's host cost.
GRAPH_LAUNCHES_PER_PASS = 1.0      # full: one graph per layer and pass (forward; backward with its recompute)
# partial (Megatron-Core cuda_graph_impl transformer_engine, cuda_graph_scope attn, moe_router,
# moe_preprocess; mamba): the parts of a layer whose shapes are static are captured, each scope one graph
# per pass; a MoE layer's routed experts, their permutation and dispatch have data-dependent shapes and
# stay launched kernel by kernel (as do its shared experts and post-attention norm, outside those scopes)
MOE_PARTIAL_GRAPHS = 3.0           # attn, moe_router, moe_preprocess: graph launches per MoE layer and pass
# of MOE_ROUTING_KERNELS, captured in the moe_router and moe_preprocess scopes: the router's 7 and the dispatch
# preprocessing's 8 forward; backward the router's 6 (the loss scaler's 2, the division's, the fused loss's,
# its scores', the fused top-k's)
MOE_ROUTER_KERNELS = 15.0
MOE_ROUTER_BACKWARD_KERNELS = 6.0


def moe_ungraphed_kernels(job: Job, layout: Layout) -> tuple[Num, Num]:
    """(forward, backward) launches one MoE layer keeps outside partial CUDA graphs per micro-batch: its
    grouped and shared expert GEMMs (not the router), the routing kernels after the top-k, its MLP-side
    element-wise kernels, its shared experts' TP collectives, its dispatch and combine, plus the
    MOE_PARTIAL_GRAPHS graph launches; backward twice the GEMMs (data and weight gradients) and the
    element-wise kernels, and the routing's backward kernels outside the router's graph."""
    m = job.model
    gemms = block_gemm_kernels(job, "E") - 1.0
    elementwise = block_elementwise_kernels(job, "E")
    routing_fwd = MOE_ROUTING_KERNELS - MOE_ROUTER_KERNELS
    routing_bwd = MOE_ROUTING_BACKWARD_KERNELS - MOE_ROUTER_BACKWARD_KERNELS
    shared_tp = (1.0 if m.moe is not None and m.moe.shared_experts else 0.0) * xp.mask(layout.tp > 1)
    a2a = ALL_TO_ALLS_PER_MOE_LAYER / 2.0 * xp.mask(layout.ep > 1)
    forward = gemms + elementwise + routing_fwd + shared_tp + a2a + MOE_PARTIAL_GRAPHS
    backward = GEMM_BACKWARD_KERNELS * gemms + ELEMENTWISE_BACKWARD_RATIO * elementwise + routing_bwd + shared_tp \
        + a2a + MOE_PARTIAL_GRAPHS
    return forward, backward


def graph_pass_launches(job: Job, layout: Layout, forward: Num, recompute: Num) -> tuple[Num, Num]:
    """(forward, backward with its recompute) host launches of the mean layer per micro-batch under the
    job's CUDA graphs, given the ungraphed forward launches `forward` (kernels and collectives) and the
    `recompute` kernels. full: GRAPH_LAUNCHES_PER_PASS each. partial: a layer without routed experts the
    same (its shapes are static); a MoE layer `moe_ungraphed_kernels`; what is recomputed, in the
    forward's ungraphed share."""
    if job.cuda_graphs == "full":
        return GRAPH_LAUNCHES_PER_PASS, GRAPH_LAUNCHES_PER_PASS
    share = moe_layer_share(job)
    moe_fwd, moe_bwd = moe_ungraphed_kernels(job, layout)
    ungraphed_fwd = share * moe_fwd
    rerun = recompute * xp.minimum(ungraphed_fwd / xp.maximum(forward, 1.0), 1.0)
    graphs = (1.0 - share) * GRAPH_LAUNCHES_PER_PASS
    return graphs + ungraphed_fwd, graphs + share * moe_bwd + rerun


# The host launches kernels ahead of the device, which runs them in order: where a pass's host time h
# and device time d are far apart the larger one sets its time (the queue hides the other), where they
# are close each waits on the other kernel by kernel (short kernels behind their launches, launches
# behind long kernels), so a pass takes more than max(h, d) and less than h + d. trainest takes the
# smooth maximum (h^p + d^p)^(1/p), p = HOST_DEVICE_OVERLAP_EXPONENT: fitted on the vTrain fit split
# (docs/model.md §2.9: step-time MAPE 5.61 % with the plain max, 5.51 % at p = 4, flat from 3.5 to 6),
# the same for every hardware and framework.
HOST_DEVICE_OVERLAP_EXPONENT = 4.0


def host_wait_s(host_s: Num, device_s: Num, exponent: float = HOST_DEVICE_OVERLAP_EXPONENT) -> Num:
    """What the device waits for the host on top of its own work, for host time h and device time d
    [s]: (h^p + d^p)^(1/p) − d ≥ 0; → max(0, h − d) as p → ∞; 0 without host time."""
    p = exponent
    top = xp.maximum(host_s, device_s)
    scale = xp.where(top > 0.0, top, 1.0)            # the powers of the ratios, not of seconds: no underflow
    smooth = top * ((host_s / scale) ** p + (device_s / scale) ** p) ** (1.0 / p)
    return xp.maximum(smooth - device_s, 0.0)


def host_layer_s(job: Job, layout: Layout) -> Num:
    """Host time of one layer for one micro-batch: (kernels + collectives) × the host time per kernel [s]."""
    fwd, bwd = host_pass_s(job, layout)
    return fwd + bwd


def cross_entropy_bytes_per_logit(job: Job) -> float:
    """Bytes the loss moves per logit element, forward and backward: 52 for Megatron's unfused
    vocab-parallel cross-entropy (`Framework.unfused_cross_entropy`), else 16 (4 FP32 passes)."""
    return UNFUSED_CROSS_ENTROPY_BYTES if FRAMEWORKS[job.framework].unfused_cross_entropy else CROSS_ENTROPY_BYTES


def head_kernels(job: Job, layout: Layout) -> tuple[Num, Num]:
    """(first stage, last stage) host launches of one micro-batch outside the layers, forward and
    backward: the embedding (23; +5 masking and 1 all-reduce with t > 1) and the logits and loss (44;
    +3 cross-entropy all-reduces and the logits' gradient all-reduce with t > 1)."""
    tp = xp.mask(layout.tp > 1)
    return (EMBEDDING_KERNELS + (VOCAB_PARALLEL_MASK_KERNELS + 1.0) * tp,
            OUTPUT_KERNELS + (CE_TP_COLLECTIVES + 1.0) * tp)


def head_host_s(job: Job, layout: Layout) -> tuple[Num, Num]:
    """(first stage, last stage) host time of one micro-batch outside the layers: head_kernels × the
    host time of one plain PyTorch operator, HEAD_HOST_PER_KERNEL_S (or the hardware's host time per
    layer kernel where that is smaller) × the framework's dispatch factor [s]."""
    first, last = head_kernels(job, layout)
    tau = (xp.minimum(job.hardware.efficiency.host_per_kernel_s, HEAD_HOST_PER_KERNEL_S)
           * FRAMEWORKS[job.framework].dispatch_factor)
    return first * tau, last * tau


def head_tp_s(job: Job, layout: Layout, tokens: Num, tiers: Tiers) -> tuple[Num, Num]:
    """(first stage, last stage) tensor-parallel collectives of one micro-batch outside the layers [s]:
    the vocab-parallel embedding's all-reduce of T·h (forward); the logits' input-gradient all-reduce of
    T·h (backward) and the cross-entropy's three all-reduces of T FP32 values; 0 without TP."""
    h = job.model.hidden
    act = all_reduce_s(job.element_bytes * tokens * h, layout.tp, 1.0, tiers)
    small = all_reduce_s(4.0 * tokens, layout.tp, 1.0, tiers)
    tp = layout.tp > 1
    return xp.where(tp, act, 0.0), xp.where(tp, act + CE_TP_COLLECTIVES * small, 0.0)


class Head(NamedTuple):
    """One micro-batch outside the layers [s]: the first stage's embedding and the last stage's logits
    and loss, each as its tensor-parallel collectives and what its host time adds beyond its device time."""

    first_tp_s: Num
    first_host_s: Num
    first_host_excess_s: Num
    last_tp_s: Num
    last_host_s: Num
    last_host_excess_s: Num
    first_on_heavy: Num          # 1 where the first stage is a heaviest stage (schedule.first_is_heavy), else 0

    @property
    def first_s(self) -> Num:
        return self.first_tp_s + self.first_host_excess_s

    @property
    def last_s(self) -> Num:
        """The logits stage's extra time: its collectives and host excess (its roofline time is added by the caller)."""
        return self.last_tp_s + self.last_host_excess_s

    def last_over_first_s(self, pp: Num) -> Num:
        """What the last stage has beyond the first (a heaviest stage under the even split) [s]: the
        slowest stage is the last one when its layers plus the logits and this exceed the heaviest's;
        with p = 1 the one stage has both."""
        return self.last_s - xp.mask(pp > 1) * self.first_on_heavy * self.first_s

    def on_path(self, pp: Num, last_is_max: Num) -> tuple[Num, Num]:
        """(overhead, TP collectives) of one micro-batch on the slowest stage [s]: the last stage's part
        where it is the slowest, the first stage's where that one is (with p = 1: both)."""
        on_first = xp.where(pp > 1, self.first_on_heavy * (1.0 - last_is_max), 1.0)
        return (on_first * self.first_host_excess_s + last_is_max * self.last_host_excess_s,
                on_first * self.first_tp_s + last_is_max * self.last_tp_s)

    def host_on_path(self, pp: Num, last_is_max: Num) -> Num:
        """The host time of one micro-batch outside the layers on the slowest stage [s] (as `on_path`)."""
        on_first = xp.where(pp > 1, self.first_on_heavy * (1.0 - last_is_max), 1.0)
        return on_first * self.first_host_s + last_is_max * self.last_host_s


def head_parts(job: Job, layout: Layout, tokens: Num, tiers: Tiers, logits_device_s: Num) -> Head:
    """The embedding's and the loss's time per micro-batch (docs/model.md §2.9): host launches
    (`kernels.head_host_s`) against the device's work there (the TP collectives, the logits)."""
    first_host, last_host = head_host_s(job, layout)
    first_tp, last_tp = head_tp_s(job, layout, tokens, tiers)
    return Head(first_tp_s=first_tp, first_host_s=first_host,
                first_host_excess_s=host_wait_s(first_host, first_tp), last_tp_s=last_tp,
                last_host_s=last_host, last_host_excess_s=host_wait_s(last_host, last_tp + logits_device_s),
                first_on_heavy=first_is_heavy(layout))


def floor_excess_s(time_s: Num, kernels: Num, floor_s: Num) -> Num:
    """How much longer an operation of `kernels` kernels takes than its roofline time `time_s`
    because no kernel runs shorter than the device's floor: max(0, kernels·floor − t_op) [s]."""
    return xp.maximum(kernels * floor_s - time_s, 0.0)


def ops_time_s(ops: list[OpTime] | list[Op]) -> Num:
    """Σ of the operations' roofline times [s]."""
    total: Num = 0.0
    for o in ops:
        total = total + o.time_s
    return total
