"""The operations of one transformer layer on one device, on the roofline (docs/model.md §2.3–2.7):
the four GEMMs, attention (fused or with materialised scores), the element-wise traffic, one layer
pass with recomputation, and the logits with the cross-entropy on the last stage.

Sources: Narayanan et al. 2021 (Megatron GEMM split), Dao 2023 (FlashAttention-2 FLOPs and
efficiency), Korthikanti et al. 2022 (selective and full recomputation).
"""

from __future__ import annotations

from typing import NamedTuple

from trainest import xp
from trainest.layout import ACTIVATION_BYTES, Job, Layout, Num
from trainest.step import mla
from trainest.step.flops import CAUSAL_FRACTION
from trainest.step.roofline import OpTime, bound_sums, dimension_factor, fused_time, gemm_time, streaming_time

ATTENTION_HALF_SEQ = 512.0         # sequence length at which fused attention's length factor is 1/2
ATTENTION_HALF_HEAD_DIM = 32.0     # head dimension at which its head-width factor is 1/2

FLASH_BACKWARD_FLOP_RATIO = 2.5    # FlashAttention-2 backward: 5 matmuls vs 2 in forward (Dao 2023)
FLASH_BACKWARD_EFFICIENCY = 0.85   # backward reaches ~0.85 of forward's FLOP/s (Dao 2023, Fig. 5-6)
H_WIDE_BYTES_PER_ELEMENT = 15 * ACTIVATION_BYTES   # norms, residual adds, dropout on h-wide tensors, fwd
F_WIDE_PASSES = {"gelu": 2.0, "swiglu": 3.0}       # reads+writes of f-wide tensors by the activation, fwd
# eager PyTorch (no torch.compile): one kernel per operator. Each of the 2 norms computes in FP32 through
# ~7 kernels (cast, square, mean, rsqrt-scale, cast back, weight) moving ~18 h-wide 16-bit tensors'
# worth instead of 2 (read, write); SwiGLU runs silu and the product separately (5 passes, not 3).
EAGER_EXTRA_H_WIDE_BYTES_PER_ELEMENT = 2 * (18 - 2) * ACTIVATION_BYTES
EAGER_EXTRA_F_WIDE_PASSES = {"gelu": 0.0, "swiglu": 2.0}
SOFTMAX_BYTES_PER_SCORE = 9.0      # standard attention: scale/mask/softmax/dropout over s×s, fwd
# without dropout: the two bias-dropout-adds write no 1-byte mask, and the s×s dropout (read 2, write 2
# and a 1-byte mask) does not run
NO_DROPOUT_H_WIDE_SAVING = 2.0 * 1.0
NO_DROPOUT_SOFTMAX_SAVING = 5.0
CROSS_ENTROPY_PASSES = 4.0         # FP32 logits: softmax read/write forward and backward
BACKWARD_TRAFFIC_RATIO = 2.0       # element-wise backward moves about twice the forward bytes
LOW_PRECISION_CAST_PASSES = 3.0    # FP8/FP4: read 16-bit input, write the low-precision copy (+ scale)


class Rates(NamedTuple):
    """What one device achieves for this job and layout: GEMM peak and its fraction, HBM bandwidth,
    fused-attention FLOP/s (it depends on the per-rank sequence s/c)."""

    peak_flops_per_s: float
    gemm_peak_fraction: Num
    gemm_half_dim: Num
    memory_bytes_per_s: Num
    attention_flops_per_s: Num
    gemm_input_bytes: float

    def gemm(self, m: Num, n: Num, k: Num) -> OpTime:
        """An (m×k)·(k×n) GEMM at these rates, writing 16-bit activations."""
        return gemm_time(m, n, k, peak_flops_per_s=self.peak_flops_per_s, peak_fraction=self.gemm_peak_fraction,
                         half_dim=self.gemm_half_dim, input_bytes=self.gemm_input_bytes,
                         output_bytes=ACTIVATION_BYTES, memory_bytes_per_s=self.memory_bytes_per_s)


def attention_flops_per_s(job: Job, layout: Layout) -> Num:
    """Fused attention's achievable FLOP/s: min(16-bit peak, run's peak) · η_attn · s_c/(s_c + 512) ·
    d_h/(d_h + 32) (· η_flash2 for FlashAttention-2), with s_c = s/c the per-rank sequence
    (FlashAttention-2 benchmarks, Dao 2023 Fig. 4-6) [FLOP/s]. Attention runs in 16 bit (FP8/FP4
    recipes keep it there), or at the run's own peak when lower (FP32/TF32), so MFU stays <= 1."""
    hw, eff, m = job.hardware, job.hardware.efficiency, job.model
    # MLA: the query/key and value widths differ (d_n + d_r, d_v); the kernel's two products use one each
    head_width = m.head_dim if m.mla is None else (m.qk_head_dim + m.v_head_dim) / 2.0
    return (min(hw.peak_16bit_flops_per_s, hw.peak(job.precision)) * eff.attention
            * dimension_factor(job.seq_len / layout.cp, ATTENTION_HALF_SEQ)
            * dimension_factor(head_width, ATTENTION_HALF_HEAD_DIM)
            * (eff.flash2_attention if job.attention == "flash2" else 1.0))


def rates_of(job: Job, layout: Layout) -> Rates:
    """The device's achievable rates (hardware efficiencies applied; FP8/FP4 GEMMs at η_lp·η_gemm)."""
    hw, eff = job.hardware, job.hardware.efficiency
    return Rates(peak_flops_per_s=hw.peak(job.precision),
                 gemm_peak_fraction=eff.gemm * (eff.low_precision_gemm if job.low_precision else 1.0),
                 gemm_half_dim=eff.gemm_half_dim, memory_bytes_per_s=hw.memory_bytes_per_s * eff.memory,
                 attention_flops_per_s=attention_flops_per_s(job, layout), gemm_input_bytes=job.gemm_input_bytes)


class LocalShape(NamedTuple):
    """The layer's widths on one device: T tokens of a micro-batch, the query width a·d_h, the KV
    width per TP rank (g < t replicates KV heads, so each rank keeps at least one; MLA: the mean of
    the key and value widths, a/t·(d_qk + d_v)/2, so that K and V take 2·kv_local)."""

    tokens: Num                 # T = b·s/c
    q_width: float              # a·d_h
    heads_local: Num            # a/t
    kv_local: Num               # max(g, t)·d_h/t
    score_elements: Num         # b·(a/t)·(s/c)·s


def local_shape(job: Job, layout: Layout) -> LocalShape:
    """The layer's widths on one device (see LocalShape)."""
    m = job.model
    kv_local = (xp.maximum(m.kv_heads, layout.tp) * m.head_dim / layout.tp if m.mla is None
                else m.heads / layout.tp * (m.qk_head_dim + m.v_head_dim) / 2.0)
    return LocalShape(tokens=layout.tokens(job), q_width=float(m.heads * m.head_dim), heads_local=m.heads / layout.tp,
                      kv_local=kv_local,
                      score_elements=layout.micro_batch * (m.heads / layout.tp) * (job.seq_len / layout.cp)
                      * job.seq_len)


def attention_gemms(job: Job, layout: Layout, r: Rates, x: LocalShape) -> list[OpTime]:
    """The attention block's weight GEMMs: QKV and the output projection (Megatron's column/row split
    over t), or MLA's projections (step/mla.py: projection_gemms)."""
    if job.model.mla is not None:
        return mla.projection_gemms(job, layout, r, x)
    h, tp = job.model.hidden, layout.tp
    return [r.gemm(x.tokens, x.q_width / tp + 2.0 * x.kv_local, h),
            r.gemm(x.tokens, h, x.q_width / tp)]


def mlp_gemms(r: Rates, tokens: Num, hidden: float, width: Num, mlp_matrices: float) -> list[OpTime]:
    """A (gated) MLP's up (and gate) and down GEMMs on `tokens` rows, `width` output features per
    device: (T × (k_f − 1)·w) and (T × h) [the dense MLP: w = f/t; shared experts: w = S·f_s/t]."""
    return [r.gemm(tokens, (mlp_matrices - 1.0) * width, hidden), r.gemm(tokens, hidden, width)]


def linear_gemms(job: Job, layout: Layout, r: Rates, x: LocalShape,
                 attention: list[OpTime] | None = None) -> list[OpTime]:
    """QKV, output projection, MLP up (and gate), MLP down: Megatron's column/row split over t (MLA:
    its projections instead of QKV and the output projection; `attention`: those, already computed)."""
    m = job.model
    attention = attention if attention is not None else attention_gemms(job, layout, r, x)
    return attention + mlp_gemms(r, x.tokens, m.hidden, m.ffn_hidden / layout.tp, m.mlp_matrices)


def attention_ops(job: Job, layout: Layout, r: Rates, x: LocalShape) -> tuple[list[OpTime], list[OpTime]]:
    """(forward parts, backward parts) of attention. Fused: 4·b·(a/t)·s_c·s·d_h·causal FLOPs reading
    Q, K, V and writing O; backward 2.5× the FLOPs at 0.85× the rate. Standard: the score and
    context GEMMs per (sequence, head) and the softmax traffic over s×s; backward twice each."""
    m = job.model
    if job.attention in ("flash", "flash2"):
        # Q·Kᵀ over d_qk and softmax·V over d_v (= 4·score·d_h without MLA); read Q, K, V, write O
        flops = 2.0 * x.score_elements * (m.qk_head_dim + m.v_head_dim) * CAUSAL_FRACTION
        bytes_moved = ACTIVATION_BYTES * x.tokens * (2.0 * x.q_width / layout.tp + 2.0 * x.kv_local) if m.mla is None \
            else mla.attention_bytes(job, layout, x)
        fwd = fused_time(flops, bytes_moved, r.attention_flops_per_s, r.memory_bytes_per_s)
        bwd = fused_time(FLASH_BACKWARD_FLOP_RATIO * flops, 2.0 * bytes_moved,
                         r.attention_flops_per_s * FLASH_BACKWARD_EFFICIENCY, r.memory_bytes_per_s)
        return [fwd], [bwd]
    s_c = job.seq_len / layout.cp
    scale = layout.micro_batch * x.heads_local
    scores = r.gemm(s_c, job.seq_len, m.qk_head_dim)
    context = r.gemm(s_c, m.v_head_dim, job.seq_len)
    no_dropout = 0.0 if m.dropout else 1.0
    fwd_parts = [OpTime(scores.compute_s * scale, scores.memory_s * scale),
                 OpTime(context.compute_s * scale, context.memory_s * scale),
                 streaming_time((SOFTMAX_BYTES_PER_SCORE - no_dropout * NO_DROPOUT_SOFTMAX_SAVING) * x.score_elements,
                                r.memory_bytes_per_s)]
    return fwd_parts, [OpTime(2.0 * p.compute_s, 2.0 * p.memory_s) for p in fwd_parts]


def h_wide_bytes(job: Job, layout: Layout, x: LocalShape) -> Num:
    """Forward bytes of the h-wide element-wise kernels of one layer (norms, residual adds, dropout;
    ÷t with SP) [B]; eager PyTorch adds its FP32 norm kernels."""
    no_dropout = 0.0 if job.model.dropout else 1.0
    eager = 1.0 if job.kernels == "eager" else 0.0
    h_wide = (H_WIDE_BYTES_PER_ELEMENT - no_dropout * NO_DROPOUT_H_WIDE_SAVING
              + eager * EAGER_EXTRA_H_WIDE_BYTES_PER_ELEMENT)
    return h_wide * x.tokens * job.model.hidden / layout.sp_div


def f_wide_passes(job: Job) -> float:
    """Reads and writes of an f-wide 16-bit tensor by the activation function, forward (eager
    PyTorch: SwiGLU's product apart from silu)."""
    eager = 1.0 if job.kernels == "eager" else 0.0
    return F_WIDE_PASSES[job.model.mlp] + eager * EAGER_EXTRA_F_WIDE_PASSES[job.model.mlp]


def elementwise_bytes(job: Job, layout: Layout, x: LocalShape) -> Num:
    """Forward bytes of the element-wise kernels of one layer [B]: h-wide tensors (norms, residuals,
    dropout; ÷t with SP) and f-wide passes of the activation, plus the FP8/FP4 casts; eager PyTorch
    adds the FP32 norm kernels and the separate SwiGLU product; MLA its latent norms and RoPE copies."""
    m = job.model
    sp_div = layout.sp_div
    total = (h_wide_bytes(job, layout, x)
             + f_wide_passes(job) * ACTIVATION_BYTES * x.tokens * m.ffn_hidden / layout.tp)
    if job.low_precision:
        total = total + LOW_PRECISION_CAST_PASSES * x.tokens * (3.0 * m.hidden / sp_div + m.ffn_hidden / layout.tp)
    if m.mla is not None:
        total = total + mla.elementwise_bytes(job, layout, x)
    return total


class LayerOps(NamedTuple):
    """The operations of one kind of layer that are not attention: its weight GEMMs (forward; the
    backward costs 2×), its element-wise traffic (forward; backward BACKWARD_TRAFFIC_RATIO×), and what
    op recompute re-runs. A dense layer's come from `dense_layer_ops`, a MoE layer's from
    step/moe.py: moe_layer_ops."""

    gemms: list[OpTime]
    elementwise: OpTime
    op_recompute: list[OpTime]
    backward_gemms: list[OpTime] | None = None   # the GEMMs' backward when not 2× `gemms` (MoE experts)


def op_attention_gemm(job: Job, layout: Layout, r: Rates, x: LocalShape) -> OpTime:
    """The attention GEMM that op recompute re-runs as the block's 2nd matmul: K (MLA: the KV
    down-projection)."""
    if job.model.mla is not None:
        return mla.projection_gemms(job, layout, r, x)[-3]
    return r.gemm(x.tokens, x.kv_local, job.model.hidden)


def dense_layer_ops(job: Job, layout: Layout, r: Rates, x: LocalShape,
                    attention: list[OpTime] | None = None) -> LayerOps:
    """A dense layer: the linear GEMMs, the element-wise traffic, and op recompute's matmuls: K (or
    MLA's KV down-projection), the output projection and SwiGLU's up or GeLU's down projection."""
    linear = linear_gemms(job, layout, r, x, attention)
    elementwise = streaming_time(elementwise_bytes(job, layout, x), r.memory_bytes_per_s)
    third = r.gemm(x.tokens, job.model.ffn_hidden / layout.tp, job.model.hidden) if job.model.mlp == "swiglu" \
        else linear[-1]
    return LayerOps(gemms=linear, elementwise=elementwise,
                    op_recompute=[op_attention_gemm(job, layout, r, x), linear[-3], third, elementwise])


class LayerPass(NamedTuple):
    """One layer, one micro-batch, one device: compute-bound and memory-bound seconds of the forward,
    the backward and the recomputation, and what the overlap rules need."""

    fwd_c: Num
    fwd_m: Num
    bwd_c: Num
    bwd_m: Num
    attn_fwd_s: Num             # attention forward (it hides the CP ring)
    attn_bwd_s: Num
    compute_s: Num              # forward + backward + recompute, compute-bound
    memory_s: Num               # the same, memory-bound
    overhead_s: Num             # fixed per-pass overhead (launches, sync)
    linear_s: Num               # the weight GEMMs forward, backward and recomputed (TP overlap window)


def mix_passes(a: LayerPass, b: LayerPass, weight_a: float, weight_b: float) -> LayerPass:
    """The mean layer of a model with two kinds of layer: w_a·a + w_b·b, field by field (weights: the
    kinds' shares of the layers, L_d/L and L_m/L)."""
    return LayerPass(*(weight_a * u + weight_b * v for u, v in zip(a, b, strict=True)))


def recompute_bounds(layout: Layout, ops: LayerOps, fwd: tuple[Num, Num], attn: tuple[Num, Num]) -> tuple[Num, Num]:
    """(compute, memory) seconds recomputed: full re-runs the forward; selective the attention core;
    op (torchtitan: every compute op's output saved except every second matmul) re-runs the 2nd, 4th
    and 6th matmuls (K, the output projection, SwiGLU's up or GeLU's down projection) and the
    element-wise ops, and keeps attention."""
    op_c, op_m = bound_sums(ops.op_recompute)
    full, selective, op = layout.full, layout.selective, layout.op
    return (full * fwd[0] + selective * attn[0] + op * op_c, full * fwd[1] + selective * attn[1] + op * op_m)


def layer_pass(job: Job, layout: Layout, r: Rates, x: LocalShape, ops: LayerOps | None = None,
               attention: tuple[list[OpTime], list[OpTime]] | None = None) -> LayerPass:
    """Forward, backward (2× the GEMMs, the attention backward, 2× the element-wise bytes) and the
    recomputation of one layer (docs/model.md §2.6); `ops` the layer's non-attention operations
    (default: a dense layer's); `attention` the attention_ops, when already computed."""
    ops = ops or dense_layer_ops(job, layout, r, x)
    linear, elementwise = ops.gemms, ops.elementwise
    attn_fwd, attn_bwd = attention if attention is not None else attention_ops(job, layout, r, x)
    fwd_c, fwd_m = bound_sums(linear + attn_fwd + [elementwise])
    backward = ops.backward_gemms if ops.backward_gemms is not None else \
        [OpTime(2.0 * o.compute_s, 2.0 * o.memory_s) for o in linear]
    bwd_c, bwd_m = bound_sums(backward + attn_bwd
                              + [OpTime(elementwise.compute_s, BACKWARD_TRAFFIC_RATIO * elementwise.memory_s)])
    attn_c, attn_m = bound_sums(attn_fwd)
    re_c, re_m = recompute_bounds(layout, ops, (fwd_c, fwd_m), (attn_c, attn_m))
    return LayerPass(fwd_c=fwd_c, fwd_m=fwd_m, bwd_c=bwd_c, bwd_m=bwd_m, attn_fwd_s=attn_c + attn_m,
                     attn_bwd_s=sum(bound_sums(attn_bwd)), compute_s=fwd_c + bwd_c + re_c,
                     memory_s=fwd_m + bwd_m + re_m,
                     overhead_s=job.hardware.efficiency.layer_overhead_s * (2.0 + layout.full + layout.op),
                     linear_s=sum(o.time_s for o in linear) * (3.0 + layout.full))


def logits_bounds(job: Job, layout: Layout, r: Rates, x: LocalShape) -> tuple[Num, Num]:
    """(compute, memory) seconds of the logits GEMM forward and backward (3×) and the FP32
    cross-entropy (4 passes over T·V/t logits of 4 bytes) on the last stage."""
    logits = r.gemm(x.tokens, job.model.vocab / layout.tp, job.model.hidden)
    ce = streaming_time(CROSS_ENTROPY_PASSES * 4.0 * x.tokens * job.model.vocab / layout.tp, r.memory_bytes_per_s)
    return 3.0 * logits.compute_bound_s, 3.0 * logits.memory_bound_s + ce.memory_s
