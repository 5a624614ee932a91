"""The operations of one transformer layer on one device, on the roofline (docs/model.md §2.3–2.7):
the four GEMMs, attention (fused or with materialised scores), the element-wise traffic, one layer
pass with recomputation, and the logits with the cross-entropy on the last stage.

Every operation is a named `Op` (FLOPs, bytes, compute and memory bounds) in the phase it runs in
(forward, backward, recompute); `layer_ops` lists them and `layer_pass` only sums them, so the ops
table (`trainest estimate --ops`) and the step are the same numbers.

Sources: Narayanan et al. 2021 (Megatron GEMM split), Dao 2023 (FlashAttention-2 FLOPs and
efficiency), Korthikanti et al. 2022 (selective and full recomputation).
"""

from __future__ import annotations

from typing import NamedTuple

from trainest import xp
from trainest.layout import ACTIVATION_BYTES, Job, Layout, Num
from trainest.step.finetune import finetune_layer_ops
from trainest.step.flops import CAUSAL_FRACTION
from trainest.step.kernels import (
    ELEMENTWISE_BACKWARD_RATIO,
    attention_kernels,
    cross_entropy_bytes_per_logit,
    elementwise_kernels,
    floor_excess_s,
    ops_time_s,
    softmax_fallback_ops,
)
from trainest.step.roofline import (
    Op,
    OpTime,
    bound_sums,
    dimension_factor,
    fused_time,
    gemm_op,
    gemm_time,
    op_of,
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
BACKWARD_TRAFFIC_RATIO = 2.0       # element-wise backward moves about twice the forward bytes
LOW_PRECISION_CAST_PASSES = 3.0    # FP8/FP4: read 16-bit input, write the low-precision copy (+ scale)
FORWARD, BACKWARD, RECOMPUTE = "forward", "backward", "recompute"    # the phases an op runs in


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
        wave = self.wave(m, n, k, batch)
        return gemm_time(m, n, k, peak_flops_per_s=self.peak_flops_per_s, peak_fraction=self.gemm_peak_fraction,
                         half_dim=self.gemm_half_dim, input_bytes=self.gemm_input_bytes,
                         output_bytes=ACTIVATION_BYTES, memory_bytes_per_s=self.memory_bytes_per_s, wave=wave)

    def wave(self, m: Num, n: Num, k: Num, batch: Num = 1.0) -> Num:
        """The share of the device's units the GEMM's tiles keep busy (1 where they are unknown)."""
        if self.units is None or self.tile is None:
            return 1.0
        return wave_efficiency(m, n, k, units=self.units, tile_m=self.tile[0], tile_n=self.tile[1], batch=batch)

    def gemm_op(self, name: str, m: Num, n: Num, k: Num, phase: str = FORWARD, batch: Num = 1.0) -> Op:
        """The same GEMM as a named op with its FLOPs (2mnk) and bytes (one of `batch` alike in one kernel)."""
        return gemm_op(name, phase, m, n, k, peak_flops_per_s=self.peak_flops_per_s,
                       peak_fraction=self.gemm_peak_fraction, half_dim=self.gemm_half_dim,
                       input_bytes=self.gemm_input_bytes, output_bytes=ACTIVATION_BYTES,
                       memory_bytes_per_s=self.memory_bytes_per_s, wave=self.wave(m, n, k, batch))


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


LINEAR_NAMES = ("qkv", "proj", "mlp_up", "mlp_down")   # QKV, attention output, MLP up (and gate), MLP down


def linear_gemms(job: Job, layout: Layout, r: Rates, x: LocalShape) -> list[Op]:
    """QKV, output projection, MLP up (and gate), MLP down: Megatron's column/row split over t."""
    h, f, tp = job.model.hidden, job.model.ffn_hidden, layout.tp
    shapes = ((x.q_width / tp + 2.0 * x.kv_local, h), (h, x.q_width / tp),
              ((job.model.mlp_matrices - 1.0) * f / tp, h), (h, f / tp))
    return [r.gemm_op(name, x.tokens, n, k) for name, (n, k) in zip(LINEAR_NAMES, shapes, strict=True)]


def attention_ops(job: Job, layout: Layout, r: Rates, x: LocalShape) -> tuple[list[Op], list[Op]]:
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
        return ([op_of("attention", FORWARD, flops, bytes_moved, fwd)],
                [op_of("attention", BACKWARD, FLASH_BACKWARD_FLOP_RATIO * flops, 2.0 * bytes_moved, bwd)])
    s_c = job.seq_len / layout.cp
    scale = layout.micro_batch * x.heads_local
    scores = r.gemm_op("attention.scores", s_c, job.seq_len, m.head_dim, batch=scale).scaled(scale)
    context = r.gemm_op("attention.context", s_c, m.head_dim, job.seq_len, batch=scale).scaled(scale)
    no_dropout = 0.0 if m.dropout else 1.0
    softmax_bytes = (SOFTMAX_BYTES_PER_SCORE - no_dropout * NO_DROPOUT_SOFTMAX_SAVING) * x.score_elements
    softmax = op_of("attention.softmax", FORWARD, 0.0 * softmax_bytes, softmax_bytes,
                    streaming_time(softmax_bytes, r.memory_bytes_per_s))
    fwd_parts = [scores, context, softmax]
    fallback_fwd, fallback_bwd = softmax_fallback_ops(job, layout, r.memory_bytes_per_s, x.score_elements)
    return fwd_parts + fallback_fwd, [p.scaled(2.0, phase=BACKWARD) for p in fwd_parts] + fallback_bwd


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


def elementwise_op(job: Job, layout: Layout, r: Rates, x: LocalShape) -> Op:
    """The layer's element-wise kernels (norms, residual adds, activation, casts) as one memory-bound op."""
    bytes_moved = elementwise_bytes(job, layout, x)
    return op_of("elementwise", FORWARD, 0.0 * bytes_moved, bytes_moved,
                 streaming_time(bytes_moved, r.memory_bytes_per_s))


def backward_ops(linear: list[Op], attn_bwd: list[Op], elementwise: Op, trained: Num = 1.0) -> list[Op]:
    """The backward pass: each GEMM's data gradient (dX = dY·Wᵀ) and weight gradient (dW = Xᵀ·dY),
    each costing its forward (the weight gradient × `trained`: 0 for a frozen base); attention's
    backward; the element-wise backward at BACKWARD_TRAFFIC_RATIO × the forward's bytes."""
    grads = [o.scaled(1.0 if kind == "dgrad" else trained, name=f"{o.name}.{kind}", phase=BACKWARD)
             for o in linear for kind in ("dgrad", "wgrad")]
    elem = Op(name=elementwise.name, phase=BACKWARD, flops=elementwise.flops,
              bytes=BACKWARD_TRAFFIC_RATIO * elementwise.bytes, compute_s=elementwise.compute_s,
              memory_s=BACKWARD_TRAFFIC_RATIO * elementwise.memory_s)
    return grads + attn_bwd + [elem]


class Recomputed(NamedTuple):
    """Ops the backward runs again, `mask` times (1 where the recompute mode holds, else 0)."""

    mask: Num
    ops: list[Op]


def recompute_ops(job: Job, layout: Layout, r: Rates, x: LocalShape, fwd: list[Op], attn: list[Op],
                  linear: list[Op], elementwise: Op) -> list[Recomputed]:
    """What the backward recomputes, one group per mode with its mask: full re-runs the forward;
    selective the attention core; op (torchtitan: every compute op's output saved except every second
    matmul) re-runs the 2nd, 4th and 6th matmuls (K, the output projection, SwiGLU's up or GeLU's down
    projection) and the element-wise ops, and keeps attention."""
    third = r.gemm_op("mlp_up", x.tokens, job.model.ffn_hidden / layout.tp, job.model.hidden) \
        if job.model.mlp == "swiglu" else linear[3]
    op_parts = [r.gemm_op("qkv.k", x.tokens, x.kv_local, job.model.hidden), linear[1], third, elementwise]
    return [Recomputed(layout.full, fwd), Recomputed(layout.selective, attn), Recomputed(layout.op, op_parts)]


class LayerOps(NamedTuple):
    """The named ops of one layer pass: forward (the 4 GEMMs first), backward (their dgrad and wgrad
    first), the recomputed groups, and attention's own ops (they hide the CP ring)."""

    forward: list[Op]
    backward: list[Op]
    recomputed: list[Recomputed]
    attention_forward: list[Op]
    attention_backward: list[Op]


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
    floor_s: Num = 0.0          # what the kernels' floors add over their roofline times (all passes)
    ops: LayerOps | None = None  # the named ops these sums add up (the ops table, docs/model.md §2.9)


def layer_ops(job: Job, layout: Layout, r: Rates, x: LocalShape) -> LayerOps:
    """The ops of one layer pass, per micro-batch and device; a LoRA/QLoRA adds its adapters and
    dequantisation (step/finetune.py) and drops the frozen weights' gradients."""
    linear = linear_gemms(job, layout, r, x)
    attn_fwd, attn_bwd = attention_ops(job, layout, r, x)
    elementwise = elementwise_op(job, layout, r, x)
    fwd = linear + attn_fwd + [elementwise]
    if xp.off(layout.finetune):
        bwd = backward_ops(linear, attn_bwd, elementwise)
    else:
        ft_fwd, ft_bwd = finetune_layer_ops(job, layout, r, x)
        fwd = fwd + ft_fwd
        bwd = backward_ops(linear, attn_bwd, elementwise, 1.0 - layout.frozen) + ft_bwd
    return LayerOps(forward=fwd, backward=bwd, attention_forward=attn_fwd, attention_backward=attn_bwd,
                    recomputed=recompute_ops(job, layout, r, x, fwd, attn_fwd, linear, elementwise))


def layer_pass(job: Job, layout: Layout, r: Rates, x: LocalShape) -> LayerPass:
    """Forward, backward and recomputation of one layer (docs/model.md §2.6), summed from `layer_ops`:
    a GEMM's backward is its dgrad + wgrad = (2 − frozen)× its forward (one scaled bound: the same
    classification), attention's backward its own op, the element-wise backward 2× the bytes; a
    recomputed group is its mask × the sums of its ops."""
    ops = layer_ops(job, layout, r, x)
    fwd, bwd = ops.forward, ops.backward
    n_linear = len(LINEAR_NAMES)
    fwd_c, fwd_m = bound_sums(fwd)
    k = 2.0 if xp.off(layout.finetune) else 2.0 - layout.frozen
    grads: list[OpTime] = [OpTime(k * o.compute_s, k * o.memory_s) for o in fwd[:n_linear]]
    bwd_c, bwd_m = bound_sums(grads + [OpTime(o.compute_s, o.memory_s) for o in bwd[2 * n_linear:]])
    attn_fwd = ops.attention_forward
    attn_c, attn_m = bound_sums(attn_fwd)
    re_c: Num = 0.0
    re_m: Num = 0.0
    for group in ops.recomputed:
        c, m = (fwd_c, fwd_m) if group.ops is fwd else (attn_c, attn_m) if group.ops is attn_fwd \
            else bound_sums(group.ops)
        re_c, re_m = re_c + group.mask * c, re_m + group.mask * m
    return LayerPass(fwd_c=fwd_c, fwd_m=fwd_m, bwd_c=bwd_c, bwd_m=bwd_m, attn_fwd_s=attn_c + attn_m,
                     attn_bwd_s=sum(bound_sums(ops.attention_backward)),
                     compute_s=fwd_c + bwd_c + re_c, memory_s=fwd_m + bwd_m + re_m,
                     overhead_s=job.hardware.efficiency.layer_overhead_s * (2.0 + layout.full + layout.op),
                     linear_s=sum(o.time_s for o in fwd[:n_linear]) * (k + 1.0 + layout.full),
                     floor_s=layer_floor_s(job, layout, fwd[:n_linear], (attn_fwd, ops.attention_backward),
                                           fwd[n_linear + len(attn_fwd)], k),
                     ops=ops)


def layer_floor_s(job: Job, layout: Layout, linear: list[Op], attention: tuple[list[Op], list[Op]],
                  elementwise: Op, gemm_backward: Num = 2.0) -> Num:
    """What the kernels' floor (`efficiency.kernel_floor_us`) adds to one layer's passes [s]: each
    GEMM (1 kernel forward; `gemm_backward` = 2 backward at twice the time, 1 for frozen weights), the
    attention core and the element-wise kernels (kernels.py counts) take at least their kernel count
    times the floor; recomputed kernels again (full: the forward; selective: attention; op: 3 GEMMs
    and the element-wise kernels)."""
    floor = job.hardware.efficiency.kernel_floor_s
    attn_fwd_k, attn_bwd_k = attention_kernels(job, layout)
    ew_k = elementwise_kernels(job)
    gemm_fwd: Num = 0.0
    for o in linear:
        gemm_fwd = gemm_fwd + floor_excess_s(o.time_s, 1.0, floor)
    attn_fwd = floor_excess_s(ops_time_s(attention[0]), attn_fwd_k, floor)
    ew_fwd = floor_excess_s(elementwise.time_s, ew_k, floor)
    forward = gemm_fwd + attn_fwd + ew_fwd
    backward = (gemm_backward * gemm_fwd + floor_excess_s(ops_time_s(attention[1]), attn_bwd_k, floor)
                + floor_excess_s(BACKWARD_TRAFFIC_RATIO * elementwise.time_s, ELEMENTWISE_BACKWARD_RATIO * ew_k, floor))
    recompute = layout.full * forward + layout.selective * attn_fwd + layout.op * (0.75 * gemm_fwd + ew_fwd)
    return forward + backward + recompute


def logits_ops(job: Job, layout: Layout, r: Rates, x: LocalShape) -> list[Op]:
    """The logits GEMM forward, its data and weight gradients, and the FP32 cross-entropy over T·V/t
    logits (`kernels.cross_entropy_bytes_per_logit`: 16 B, or 52 B unfused) on the last stage."""
    logits = r.gemm_op("logits", x.tokens, job.model.vocab / layout.tp, job.model.hidden)
    ce_bytes = cross_entropy_bytes_per_logit(job) * x.tokens * job.model.vocab / layout.tp
    ce = op_of("cross_entropy", FORWARD, 0.0 * ce_bytes, ce_bytes, streaming_time(ce_bytes, r.memory_bytes_per_s))
    trained = 1.0 if xp.off(layout.finetune) else 1.0 - layout.frozen      # a frozen output layer: no wgrad
    return [logits, logits.scaled(1.0, name="logits.dgrad", phase=BACKWARD),
            logits.scaled(trained, name="logits.wgrad", phase=BACKWARD), ce]


def logits_bounds(job: Job, layout: Layout, r: Rates, x: LocalShape) -> tuple[Num, Num]:
    """(compute, memory) seconds of the logits GEMM forward and backward (3×) and the FP32
    cross-entropy on the last stage: sums of `logits_ops`."""
    return bound_sums(logits_ops(job, layout, r, x))
