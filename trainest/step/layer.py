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
from trainest.step.flops import CAUSAL_FRACTION
from trainest.step.kernels import (
    ELEMENTWISE_BACKWARD_RATIO,
    GEMM_BACKWARD_KERNELS,
    attention_kernels,
    elementwise_kernels,
    floor_excess_s,
    ops_time_s,
)
from trainest.step.roofline import (
    OpTime,
    bound_sums,
    dimension_factor,
    fused_time,
    gemm_time,
    streaming_time,
    wave_efficiency,
)

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
    units: int | None = None            # compute units (SMs/CUs) the GEMM tiles spread over
    tile: tuple[int, int] | None = None   # the output tile of one unit (t_m, t_n)

    def gemm(self, m: Num, n: Num, k: Num, batch: Num = 1.0) -> OpTime:
        """An (m×k)·(k×n) GEMM (one of `batch` alike in one kernel) at these rates, writing 16-bit
        activations; its tiles spread over the device's units (wave_efficiency) where they are known."""
        wave = 1.0 if self.units is None or self.tile is None else \
            wave_efficiency(m, n, k, units=self.units, tile_m=self.tile[0], tile_n=self.tile[1], batch=batch)
        return gemm_time(m, n, k, peak_flops_per_s=self.peak_flops_per_s, peak_fraction=self.gemm_peak_fraction,
                         half_dim=self.gemm_half_dim, input_bytes=self.gemm_input_bytes,
                         output_bytes=ACTIVATION_BYTES, memory_bytes_per_s=self.memory_bytes_per_s, wave=wave)


def attention_flops_per_s(job: Job, layout: Layout) -> Num:
    """Fused attention's achievable FLOP/s: min(16-bit peak, run's peak) · η_attn · s_c/(s_c + 512) ·
    d_h/(d_h + 32) (· η_flash2 for FlashAttention-2), with s_c = s/c the per-rank sequence
    (FlashAttention-2 benchmarks, Dao 2023 Fig. 4-6) [FLOP/s]. Attention runs in 16 bit (FP8/FP4
    recipes keep it there), or at the run's own peak when lower (FP32/TF32), so MFU stays <= 1."""
    hw, eff = job.hardware, job.hardware.efficiency
    return (min(hw.peak_16bit_flops_per_s, hw.peak(job.precision)) * eff.attention
            * dimension_factor(job.seq_len / layout.cp, ATTENTION_HALF_SEQ)
            * dimension_factor(job.model.head_dim, ATTENTION_HALF_HEAD_DIM)
            * (eff.flash2_attention if job.attention == "flash2" else 1.0))


def rates_of(job: Job, layout: Layout) -> Rates:
    """The device's achievable rates (hardware efficiencies applied; FP8/FP4 GEMMs at η_lp·η_gemm)."""
    hw, eff = job.hardware, job.hardware.efficiency
    return Rates(peak_flops_per_s=hw.peak(job.precision),
                 gemm_peak_fraction=eff.gemm * (eff.low_precision_gemm if job.low_precision else 1.0),
                 gemm_half_dim=eff.gemm_half_dim, memory_bytes_per_s=hw.memory_bytes_per_s * eff.memory,
                 attention_flops_per_s=attention_flops_per_s(job, layout), gemm_input_bytes=job.gemm_input_bytes,
                 units=hw.compute_units,
                 tile=None if hw.gemm_tile_m is None or hw.gemm_tile_n is None else (hw.gemm_tile_m, hw.gemm_tile_n))


class LocalShape(NamedTuple):
    """The layer's widths on one device: T tokens of a micro-batch, the query width a·d_h, the KV
    width per TP rank (g < t replicates KV heads, so each rank keeps at least one)."""

    tokens: Num                 # T = b·s/c
    q_width: float              # a·d_h
    heads_local: Num            # a/t
    kv_local: Num               # max(g, t)·d_h/t
    score_elements: Num         # b·(a/t)·(s/c)·s


def local_shape(job: Job, layout: Layout) -> LocalShape:
    """The layer's widths on one device (see LocalShape)."""
    m = job.model
    return LocalShape(tokens=layout.tokens(job), q_width=float(m.heads * m.head_dim), heads_local=m.heads / layout.tp,
                      kv_local=xp.maximum(m.kv_heads, layout.tp) * m.head_dim / layout.tp,
                      score_elements=layout.micro_batch * (m.heads / layout.tp) * (job.seq_len / layout.cp)
                      * job.seq_len)


def linear_gemms(job: Job, layout: Layout, r: Rates, x: LocalShape) -> list[OpTime]:
    """QKV, output projection, MLP up (and gate), MLP down: Megatron's column/row split over t."""
    h, f, tp = job.model.hidden, job.model.ffn_hidden, layout.tp
    return [r.gemm(x.tokens, x.q_width / tp + 2.0 * x.kv_local, h),
            r.gemm(x.tokens, h, x.q_width / tp),
            r.gemm(x.tokens, (job.model.mlp_matrices - 1.0) * f / tp, h),
            r.gemm(x.tokens, h, f / tp)]


def attention_ops(job: Job, layout: Layout, r: Rates, x: LocalShape) -> tuple[list[OpTime], list[OpTime]]:
    """(forward parts, backward parts) of attention. Fused: 4·b·(a/t)·s_c·s·d_h·causal FLOPs reading
    Q, K, V and writing O; backward 2.5× the FLOPs at 0.85× the rate. Standard: the score and
    context GEMMs per (sequence, head) and the softmax traffic over s×s; backward twice each."""
    m = job.model
    if job.attention in ("flash", "flash2"):
        flops = 4.0 * x.score_elements * m.head_dim * CAUSAL_FRACTION
        bytes_moved = ACTIVATION_BYTES * x.tokens * (2.0 * x.q_width / layout.tp + 2.0 * x.kv_local)
        fwd = fused_time(flops, bytes_moved, r.attention_flops_per_s, r.memory_bytes_per_s)
        bwd = fused_time(FLASH_BACKWARD_FLOP_RATIO * flops, 2.0 * bytes_moved,
                         r.attention_flops_per_s * FLASH_BACKWARD_EFFICIENCY, r.memory_bytes_per_s)
        return [fwd], [bwd]
    s_c = job.seq_len / layout.cp
    scale = layout.micro_batch * x.heads_local
    scores = r.gemm(s_c, job.seq_len, m.head_dim, batch=scale)
    context = r.gemm(s_c, m.head_dim, job.seq_len, batch=scale)
    no_dropout = 0.0 if m.dropout else 1.0
    fwd_parts = [OpTime(scores.compute_s * scale, scores.memory_s * scale),
                 OpTime(context.compute_s * scale, context.memory_s * scale),
                 streaming_time((SOFTMAX_BYTES_PER_SCORE - no_dropout * NO_DROPOUT_SOFTMAX_SAVING) * x.score_elements,
                                r.memory_bytes_per_s)]
    return fwd_parts, [OpTime(2.0 * p.compute_s, 2.0 * p.memory_s) for p in fwd_parts]


def elementwise_bytes(job: Job, layout: Layout, x: LocalShape) -> Num:
    """Forward bytes of the element-wise kernels of one layer [B]: h-wide tensors (norms, residuals,
    dropout; ÷t with SP) and f-wide passes of the activation, plus the FP8/FP4 casts; eager PyTorch
    adds the FP32 norm kernels and the separate SwiGLU product."""
    m = job.model
    no_dropout = 0.0 if m.dropout else 1.0
    eager = 1.0 if job.kernels == "eager" else 0.0
    h_wide = (H_WIDE_BYTES_PER_ELEMENT - no_dropout * NO_DROPOUT_H_WIDE_SAVING
              + eager * EAGER_EXTRA_H_WIDE_BYTES_PER_ELEMENT)
    f_wide_passes = F_WIDE_PASSES[m.mlp] + eager * EAGER_EXTRA_F_WIDE_PASSES[m.mlp]
    sp_div = layout.sp_div
    total = (h_wide * x.tokens * m.hidden / sp_div
             + f_wide_passes * ACTIVATION_BYTES * x.tokens * m.ffn_hidden / layout.tp)
    if job.low_precision:
        total = total + LOW_PRECISION_CAST_PASSES * x.tokens * (3.0 * m.hidden / sp_div + m.ffn_hidden / layout.tp)
    return total


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
    linear_s: Num               # the 4 GEMMs forward, backward and recomputed (TP overlap window)
    floor_s: Num                # what the kernels' floors add over their roofline times (all passes)


def recompute_bounds(job: Job, layout: Layout, r: Rates, x: LocalShape, linear: list[OpTime],
                     fwd: tuple[Num, Num], attn: tuple[Num, Num], elementwise: OpTime) -> tuple[Num, Num]:
    """(compute, memory) seconds recomputed: full re-runs the forward; selective the attention core;
    op (torchtitan: every compute op's output saved except every second matmul) re-runs the 2nd, 4th
    and 6th matmuls (K, the output projection, SwiGLU's up or GeLU's down projection) and the
    element-wise ops, and keeps attention."""
    third = r.gemm(x.tokens, job.model.ffn_hidden / layout.tp, job.model.hidden) if job.model.mlp == "swiglu" \
        else linear[3]
    op_c, op_m = bound_sums([r.gemm(x.tokens, x.kv_local, job.model.hidden), linear[1], third, elementwise])
    full, selective, op = layout.full, layout.selective, layout.op
    return (full * fwd[0] + selective * attn[0] + op * op_c, full * fwd[1] + selective * attn[1] + op * op_m)


def layer_pass(job: Job, layout: Layout, r: Rates, x: LocalShape) -> LayerPass:
    """Forward, backward (2× the GEMMs, the attention backward, 2× the element-wise bytes) and the
    recomputation of one layer (docs/model.md §2.6)."""
    linear = linear_gemms(job, layout, r, x)
    attn_fwd, attn_bwd = attention_ops(job, layout, r, x)
    elementwise = streaming_time(elementwise_bytes(job, layout, x), r.memory_bytes_per_s)
    fwd_c, fwd_m = bound_sums(linear + attn_fwd + [elementwise])
    bwd_c, bwd_m = bound_sums([OpTime(2.0 * o.compute_s, 2.0 * o.memory_s) for o in linear] + attn_bwd
                              + [OpTime(elementwise.compute_s, BACKWARD_TRAFFIC_RATIO * elementwise.memory_s)])
    attn_c, attn_m = bound_sums(attn_fwd)
    re_c, re_m = recompute_bounds(job, layout, r, x, linear, (fwd_c, fwd_m), (attn_c, attn_m), elementwise)
    return LayerPass(fwd_c=fwd_c, fwd_m=fwd_m, bwd_c=bwd_c, bwd_m=bwd_m, attn_fwd_s=attn_c + attn_m,
                     attn_bwd_s=sum(bound_sums(attn_bwd)), compute_s=fwd_c + bwd_c + re_c,
                     memory_s=fwd_m + bwd_m + re_m,
                     overhead_s=job.hardware.efficiency.layer_overhead_s * (2.0 + layout.full + layout.op),
                     linear_s=sum(o.time_s for o in linear) * (3.0 + layout.full),
                     floor_s=layer_floor_s(job, layout, linear, (attn_fwd, attn_bwd), elementwise))


def layer_floor_s(job: Job, layout: Layout, linear: list[OpTime], attention: tuple[list[OpTime], list[OpTime]],
                  elementwise: OpTime) -> Num:
    """What the kernels' floor (`efficiency.kernel_floor_us`) adds to one layer's passes [s]: each
    GEMM (1 kernel forward, 2 backward at twice the time), the attention core and the element-wise
    kernels (kernels.py counts) take at least their kernel count times the floor; recomputed kernels
    again (full: the forward; selective: attention; op: 3 GEMMs and the element-wise kernels)."""
    floor = job.hardware.efficiency.kernel_floor_s
    attn_fwd_k, attn_bwd_k = attention_kernels(job)
    ew_k = elementwise_kernels(job)
    gemm_fwd: Num = 0.0
    for o in linear:
        gemm_fwd = gemm_fwd + floor_excess_s(o.time_s, 1.0, floor)
    attn_fwd = floor_excess_s(ops_time_s(attention[0]), attn_fwd_k, floor)
    ew_fwd = floor_excess_s(elementwise.time_s, ew_k, floor)
    forward = gemm_fwd + attn_fwd + ew_fwd
    backward = (GEMM_BACKWARD_KERNELS * gemm_fwd + floor_excess_s(ops_time_s(attention[1]), attn_bwd_k, floor)
                + floor_excess_s(BACKWARD_TRAFFIC_RATIO * elementwise.time_s, ELEMENTWISE_BACKWARD_RATIO * ew_k, floor))
    recompute = layout.full * forward + layout.selective * attn_fwd + layout.op * (0.75 * gemm_fwd + ew_fwd)
    return forward + backward + recompute


def logits_bounds(job: Job, layout: Layout, r: Rates, x: LocalShape) -> tuple[Num, Num]:
    """(compute, memory) seconds of the logits GEMM forward and backward (3×) and the FP32
    cross-entropy (4 passes over T·V/t logits of 4 bytes) on the last stage."""
    logits = r.gemm(x.tokens, job.model.vocab / layout.tp, job.model.hidden)
    ce = streaming_time(CROSS_ENTROPY_PASSES * 4.0 * x.tokens * job.model.vocab / layout.tp, r.memory_bytes_per_s)
    return 3.0 * logits.compute_bound_s, 3.0 * logits.memory_bound_s + ce.memory_s
