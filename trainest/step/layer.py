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

from trainest import xp
from trainest.choices import DEFAULT_RECOMPUTE_MODULES
from trainest.layout import Job, Layout, Num
from trainest.record import NamedTuple, replace
from trainest.step import mla
from trainest.step.finetune import finetune_layer_ops
from trainest.step.flops import CAUSAL_FRACTION
from trainest.step.kernels import (
    attention_kernels,
    cross_entropy_bytes_per_logit,
    elementwise_backward_kernels,
    elementwise_kernels,
    floor_excess_s,
    ops_time_s,
    softmax_fallback_ops,
)
from trainest.step.rates import (
    BACKWARD,
    FORWARD,
    LocalShape,
    Rates,
    attention_peak_flops_per_s,
    module_rates,
    packed_fraction,
    rates_of,
    windowed_layer_fraction,
)
from trainest.step.roofline import (
    Op,
    bound_sums,
    fused_time,
    op_of,
    streaming_time,
)

FLASH_BACKWARD_FLOP_RATIO = 2.5    # FlashAttention-2 backward: 5 matmuls vs 2 in forward (Dao 2023)
FLASH_BACKWARD_EFFICIENCY = 0.85   # backward reaches ~0.85 of forward's FLOP/s (Dao 2023, Fig. 5-6)
H_WIDE_PASSES = 15.0               # reads+writes of h-wide tensors by norms, residual adds, dropout, fwd (× e)
F_WIDE_PASSES = {"gelu": 2.0, "swiglu": 3.0}       # reads+writes of f-wide tensors by the activation, fwd
# eager PyTorch (no torch.compile): one kernel per operator. Each of the 2 norms computes in FP32 through
# ~7 kernels (cast, square, mean, rsqrt-scale, cast back, weight) moving ~18 h-wide 16-bit tensors'
# worth instead of 2 (read, write); SwiGLU runs silu and the product separately (5 passes, not 3).
EAGER_EXTRA_H_WIDE_PASSES = 2.0 * (18 - 2)   # × e
EAGER_EXTRA_F_WIDE_PASSES = {"gelu": 0.0, "swiglu": 2.0}
SOFTMAX_BYTES_PER_SCORE = 9.0      # standard attention: scale/mask/softmax/dropout over s×s, fwd
# without dropout: the two bias-dropout-adds write no 1-byte mask, and the s×s dropout (read 2, write 2
# and a 1-byte mask) does not run
NO_DROPOUT_H_WIDE_SAVING = 2.0 * 1.0
NO_DROPOUT_SOFTMAX_SAVING = 5.0
# backward, per score: the dropout's backward reads the incoming gradient (2) and the mask (1) and writes (2);
# the fused softmax backward reads the probabilities and that gradient (2 + 2) and writes the scores' gradient (2)
SOFTMAX_BACKWARD_BYTES_PER_SCORE = 11.0
NO_DROPOUT_SOFTMAX_BACKWARD_SAVING = 5.0
BACKWARD_TRAFFIC_RATIO = 2.0       # element-wise backward moves about twice the forward bytes
LOW_PRECISION_CAST_PASSES = 4.0    # FP8/FP4: read the 16-bit input, write the low-precision copy and its transpose
# Rotary position embedding (RoPE) on the queries and keys of each layer, forward: a fused kernel (Transformer
# Engine's fused_apply_rotary_pos_emb, Megatron --apply-rope-fusion, torch.compile, XLA) reads and writes each
# tensor once; eager PyTorch (Hugging Face's apply_rotary_pos_emb: x·cos + rotate_half(x)·sin) runs mul, neg,
# cat, mul, add: 2 + 1 + 2 + 2 + 3 = 10 passes. MLA counts its own (mla.elementwise_bytes).
ROPE_PASSES = {"fused": 2.0, "eager": 10.0}


def attention_gemms(job: Job, layout: Layout, r: Rates, x: LocalShape) -> list[Op]:
    """The attention block's weight GEMMs: QKV and the output projection `proj` (Megatron's
    column/row split over t), each at its `module_precision` (linear_qkv, linear_proj), or MLA's projections
    (step/mla.py: projection_gemms)."""
    if job.model.mla is not None:
        return mla.projection_gemms(job, layout, r, x)
    h, tp = job.model.hidden, layout.tp
    return [module_rates(job, r, "linear_qkv").gemm_op("qkv", x.tokens, x.q_width / tp + 2.0 * x.kv_local, h),
            module_rates(job, r, "linear_proj").gemm_op("proj", x.tokens, h, x.q_width / tp)]


def mlp_gemms(r: Rates, prefix: str, tokens: Num, hidden: float, width: Num, mlp_matrices: float) -> list[Op]:
    """A (gated) MLP's up (and gate) and down GEMMs on `tokens` rows, `width` output features per
    device: (T × (k_f − 1)·w) and (T × h), named `prefix`_up and `prefix`_down [the dense MLP: w = f/t;
    shared experts: w = S·f_s/t]."""
    return [r.gemm_op(f"{prefix}_up", tokens, (mlp_matrices - 1.0) * width, hidden),
            r.gemm_op(f"{prefix}_down", tokens, hidden, width)]


def linear_gemms(job: Job, layout: Layout, r: Rates, x: LocalShape) -> list[Op]:
    """A dense layer's weight GEMMs: QKV, output projection, MLP up (and gate), MLP down (Megatron's
    column/row split over t; MLA: its projections instead of QKV and the output projection)."""
    m = job.model
    return attention_gemms(job, layout, r, x) + mlp_gemms(r, "mlp", x.tokens, m.hidden, m.ffn_hidden / layout.tp,
                                                          m.mlp_matrices)


def flash_backward_flop_ratio(qk_head_dim: float, v_head_dim: float) -> float:
    """The fused-attention backward's FLOPs over the forward's: the forward runs S = Q·Kᵀ (over d_qk) and
    O = P·V (over d_v); the backward recomputes S, then dP = dO·Vᵀ and dV = Pᵀ·dO (over d_v), dQ = dS·K and
    dK = dSᵀ·Q (over d_qk), on the same score elements (Dao 2023 §3.1, Algorithm 2; FlashAttention-3's
    backward, Shah et al. 2024 §3, runs the same five products):

        (3·d_qk + 2·d_v) / (d_qk + d_v)

    FLASH_BACKWARD_FLOP_RATIO = 2.5 for d_qk = d_v; MLA's d_qk = 192, d_v = 128 (DeepSeek-V3) gives 2.6 [1]."""
    return (3.0 * qk_head_dim + 2.0 * v_head_dim) / (qk_head_dim + v_head_dim)


def exponential_slowdown(job: Job) -> tuple[float, float]:
    """(forward, backward) factors ≥ 1 by which the softmax's exponentials slow fused attention down: each score
    takes one exponential (the forward's softmax, the backward's recomputed P) and 2·(d_qk + d_v) FLOPs forward,
    `flash_backward_flop_ratio` times that backward, so the products cannot outrun X·2·(d_qk + d_v) FLOP/s
    forward with X the device's exponentials per second (`Compute.exp_per_s`): the factor is the peak the products
    run at (rates.attention_peak_flops_per_s) over that ceiling, at least 1; the kernel's achieved fraction
    (efficiency.attention and the length and width factors) applies to whichever bounds it. 1 where X is not
    known. Binding on Blackwell (16 exponentials to 8,192 tensor FLOPs per SM and clock) at d_h = 64 and with FP8
    products; not on Hopper or Blackwell Ultra at 16 bit (docs/model.md §2.4)."""
    x = job.hardware.compute.exp_per_s
    if x is None or job.attention == "standard":
        return 1.0, 1.0
    m = job.model
    ceiling = x * 2.0 * (m.qk_head_dim + m.v_head_dim)
    peak = attention_peak_flops_per_s(job)
    backward = ceiling * flash_backward_flop_ratio(m.qk_head_dim, m.v_head_dim)
    return max(1.0, peak / ceiling), max(1.0, peak / backward)


def fused_attention_ops(name: str, flops: Num, bytes_moved: Num, flops_per_s: Num,
                        r: Rates, backward_ratio: float = FLASH_BACKWARD_FLOP_RATIO,
                        slowdown: tuple[float, float] = (1.0, 1.0)) -> tuple[Op, Op]:
    """(forward, backward) of one fused-attention kernel: `flops` at `flops_per_s` (over the forward's
    `slowdown`: exponential_slowdown), reading Q, K, V and writing O (`bytes_moved`); the backward
    `backward_ratio` × the FLOPs (flash_backward_flop_ratio: 2.5 where the query/key and value widths agree)
    at 0.85× the rate (over the backward's slowdown) and twice the bytes."""
    fwd = fused_time(flops, bytes_moved, flops_per_s / slowdown[0], r.memory_bytes_per_s)
    bwd = fused_time(backward_ratio * flops, 2.0 * bytes_moved,
                     flops_per_s * FLASH_BACKWARD_EFFICIENCY / slowdown[1], r.memory_bytes_per_s)
    return (op_of(name, FORWARD, flops, bytes_moved, fwd),
            op_of(name, BACKWARD, backward_ratio * flops, 2.0 * bytes_moved, bwd))


CP_MERGE_PASSES = 4.0   # per ring step after the first: write the partial result, read it, read+write the merged one


def cp_merge_ops(job: Job, layout: Layout, r: Rates, x: LocalShape) -> list[Op]:
    """[forward, backward] memory traffic a context-parallel ring of c ranks adds to fused attention
    (Transformer Engine AttnFuncWithCPAndKVP2P), or [] without CP: each of the c − 1 steps after the
    first writes its partial output, which is read and merged into the running one (read and write):
    CP_MERGE_PASSES·e per element of the rank's output O (T·a·d_h/t); backward the same for dQ and for
    dK and dV (2·g/a of O's width) [B]. Zero at c = 1; bounded by CP_MERGE_PASSES·e·s·b·a·d_h/t as c
    grows (the rank's tokens T = b·s/c)."""
    if job.model.mla is not None or xp.off(layout.cp - 1.0):
        return []
    out = job.element_bytes * x.tokens * x.q_width / layout.tp
    fwd = CP_MERGE_PASSES * (layout.cp - 1.0) * out
    bwd = fwd * (1.0 + 2.0 * x.kv_local / (x.q_width / layout.tp))
    return [op_of("attention.cp_merge", FORWARD, 0.0 * fwd, fwd, streaming_time(fwd, r.memory_bytes_per_s)),
            op_of("attention.cp_merge", BACKWARD, 0.0 * bwd, bwd, streaming_time(bwd, r.memory_bytes_per_s))]


def attention_ops(job: Job, layout: Layout, r: Rates, x: LocalShape) -> tuple[list[Op], list[Op]]:
    """(forward parts, backward parts) of attention. Fused: 4·b·(a/t)·s_c·s·d_h·causal FLOPs reading
    Q, K, V and writing O; backward flash_backward_flop_ratio × the FLOPs (2.5 where d_qk = d_v) at 0.85× the
    rate. Standard: the score and
    context GEMMs per (sequence, head) and the softmax traffic over s×s; backward twice each.

    A model with an attention window (docs/model.md §2.4.1): fused attention is the mean of its layers,
    `attention` for the L_a − L_w global layers (weight (L_a − L_w)/L_a) and `attention.window` for the L_w
    windowed ones (weight L_w/L_a), whose kernel computes φ (`windowed_layer_fraction`) of the causal scores
    at the FLOP/s of its shorter key loop (`windowed_span`); the bytes (Q, K, V, O) are the same. Standard
    attention materialises the whole s×s scores whatever the mask (Megatron's fused softmax masks them
    after the score GEMM): no saving there."""
    m = job.model
    if job.attention in ("flash", "flash2"):
        # Q·Kᵀ over d_qk and softmax·V over d_v (= 4·score·d_h without MLA); read Q, K, V, write O; packed
        # sequences compute each document's own causal block (packed_fraction)
        causal_flops = 2.0 * x.score_elements * (m.qk_head_dim + m.v_head_dim) * CAUSAL_FRACTION
        flops = causal_flops * packed_fraction(job)
        bytes_moved = job.element_bytes * x.tokens * (2.0 * x.q_width / layout.tp + 2.0 * x.kv_local) if m.mla is None \
            else mla.attention_bytes(job, layout, x)
        window = m.attention_window
        merge = cp_merge_ops(job, layout, r, x)
        ratio, slowdown = flash_backward_flop_ratio(m.qk_head_dim, m.v_head_dim), exponential_slowdown(job)
        if window is None or r.window_attention_flops_per_s is None:
            fwd, bwd = fused_attention_ops("attention", flops, bytes_moved, r.attention_flops_per_s, r, ratio,
                                           slowdown)
            return [fwd] + merge[:1], [bwd] + merge[1:]
        windowed = m.windowed_layers / m.attention_layers
        parts = [("attention", 1.0 - windowed, flops, r.attention_flops_per_s),
                 ("attention.window", windowed, causal_flops * windowed_layer_fraction(job),
                  r.window_attention_flops_per_s)]
        kernels = [(fused_attention_ops(name, f, bytes_moved, rate, r, ratio, slowdown), share)
                   for name, share, f, rate in parts if share > 0.0]
        return ([f.scaled(share) for (f, _), share in kernels] + merge[:1],
                [b.scaled(share) for (_, b), share in kernels] + merge[1:])
    s_c = job.seq_len / layout.cp
    scale = layout.micro_batch * x.heads_local
    scores = r.gemm_op("attention.scores", s_c, job.seq_len, m.qk_head_dim, batch=scale).scaled(scale)
    context = r.gemm_op("attention.context", s_c, m.v_head_dim, job.seq_len, batch=scale).scaled(scale)
    no_dropout = 0.0 if m.dropout else 1.0
    softmax_bytes = (SOFTMAX_BYTES_PER_SCORE - no_dropout * NO_DROPOUT_SOFTMAX_SAVING) * x.score_elements
    softmax = op_of("attention.softmax", FORWARD, 0.0 * softmax_bytes, softmax_bytes,
                    streaming_time(softmax_bytes, r.memory_bytes_per_s))
    bwd_bytes = (SOFTMAX_BACKWARD_BYTES_PER_SCORE - no_dropout * NO_DROPOUT_SOFTMAX_BACKWARD_SAVING) * x.score_elements
    softmax_bwd = op_of("attention.softmax", BACKWARD, 0.0 * bwd_bytes, bwd_bytes,
                        streaming_time(bwd_bytes, r.memory_bytes_per_s))
    fallback_fwd, fallback_bwd = softmax_fallback_ops(job, layout, r.memory_bytes_per_s, x.score_elements)
    return ([scores, context, softmax] + fallback_fwd,
            [scores.scaled(2.0, phase=BACKWARD), context.scaled(2.0, phase=BACKWARD), softmax_bwd] + fallback_bwd)


def h_wide_bytes(job: Job, layout: Layout, x: LocalShape) -> Num:
    """Forward bytes of the h-wide element-wise kernels of one layer (norms, residual adds, dropout;
    ÷t with SP) [B]: (H_WIDE_PASSES·e − the dropout masks' bytes without dropout) per element; eager
    PyTorch adds its FP32 norm kernels (EAGER_EXTRA_H_WIDE_PASSES·e)."""
    no_dropout = 0.0 if job.model.dropout else 1.0
    eager = 1.0 if job.kernels == "eager" else 0.0
    h_wide = ((H_WIDE_PASSES + eager * EAGER_EXTRA_H_WIDE_PASSES) * job.element_bytes
              - no_dropout * NO_DROPOUT_H_WIDE_SAVING)
    return h_wide * x.tokens * job.model.hidden / layout.sp_div


def f_wide_passes(job: Job) -> float:
    """Reads and writes of an f-wide 16-bit tensor by the activation function, forward (eager
    PyTorch: SwiGLU's product apart from silu)."""
    eager = 1.0 if job.kernels == "eager" else 0.0
    return F_WIDE_PASSES[job.model.mlp] + eager * EAGER_EXTRA_F_WIDE_PASSES[job.model.mlp]


def elementwise_bytes(job: Job, layout: Layout, x: LocalShape) -> Num:
    """Forward bytes of the element-wise kernels of one layer [B]: h-wide tensors (norms, residuals,
    dropout; ÷t with SP) and f-wide passes of the activation, plus the FP8/FP4 casts; eager PyTorch
    adds the FP32 norm kernels and the separate SwiGLU product; MLA its latent norms and RoPE copies;
    a RoPE model its rotary embedding (`rope_bytes`)."""
    m = job.model
    sp_div = layout.sp_div
    total = (h_wide_bytes(job, layout, x)
             + f_wide_passes(job) * job.element_bytes * x.tokens * m.ffn_hidden / layout.tp)
    if job.low_precision:
        total = total + LOW_PRECISION_CAST_PASSES * x.tokens * (3.0 * m.hidden / sp_div + m.ffn_hidden / layout.tp)
    if m.mla is not None:
        total = total + mla.elementwise_bytes(job, layout, x)
    return total + rope_bytes(job, layout, x)


def rope_bytes(job: Job, layout: Layout, x: LocalShape) -> Num:
    """Forward bytes of the rotary embedding of one layer [B]: ROPE_PASSES reads and writes of the
    rank's queries and keys, e·T·(a + g)·d_h/t; 0 without RoPE and with MLA (counted there)."""
    m = job.model
    if m.positional != "rope" or m.mla is not None:
        return 0.0
    passes = ROPE_PASSES["eager" if job.kernels == "eager" else "fused"]
    return passes * job.element_bytes * x.tokens * (m.heads + m.kv_heads) * m.head_dim / layout.tp


def elementwise_op(job: Job, layout: Layout, r: Rates, x: LocalShape) -> Op:
    """The layer's element-wise kernels (norms, residual adds, activation, casts) as one memory-bound op."""
    bytes_moved = elementwise_bytes(job, layout, x)
    return op_of("elementwise", FORWARD, 0.0 * bytes_moved, bytes_moved,
                 streaming_time(bytes_moved, r.memory_bytes_per_s))


def gradient_ops(linear: list[Op], trained: Num = 1.0) -> list[Op]:
    """Each weight GEMM's data gradient (dX = dY·Wᵀ) and weight gradient (dW = Xᵀ·dY), each costing
    its forward (the weight gradient × `trained`: 0 for a frozen base)."""
    return [o.scaled(1.0 if kind == "dgrad" else trained, name=f"{o.name}.{kind}", phase=BACKWARD)
            for o in linear for kind in ("dgrad", "wgrad")]


def elementwise_backward(elementwise: Op) -> Op:
    """The element-wise backward: BACKWARD_TRAFFIC_RATIO × the forward's bytes."""
    return Op(name=elementwise.name, phase=BACKWARD, flops=elementwise.flops,
              bytes=BACKWARD_TRAFFIC_RATIO * elementwise.bytes, compute_s=elementwise.compute_s,
              memory_s=BACKWARD_TRAFFIC_RATIO * elementwise.memory_s)


class MlpPart(NamedTuple):
    """The part of a layer after attention: a dense MLP (`dense_mlp`) or a MoE block (step/moe.py:
    moe_mlp): its weight GEMMs forward, their gradients when they are not `gradient_ops` of the
    forward (a MoE layer's grouped experts), the layer's element-wise op (whole layer), the matmuls op
    recompute re-runs of it, and the element-wise kernels it launches beyond a dense layer's."""

    gemms: list[Op]
    gradients: list[Op] | None
    elementwise: Op
    op_recompute: list[Op]
    extra_kernels: float = 0.0
    elementwise_backward: Op | None = None   # None: elementwise_backward(elementwise); a MoE block's own
    modules: tuple[tuple[str, list[Op]], ...] = ()   # (recompute module, the forward ops it re-runs)
    kind: str = "dense"                      # dense | moe: which adapters a LoRA puts on it (step/finetune.py)
    expert_rows: Num = 0.0                   # a MoE block's rows per local expert, the busiest rank's (I·n_e)


def dense_mlp(job: Job, layout: Layout, r: Rates, x: LocalShape) -> MlpPart:
    """A dense layer's MLP: up (and gate) and down; op recompute re-runs SwiGLU's up projection (not
    the gate) or GeLU's down projection."""
    m = job.model
    gemms = mlp_gemms(r, "mlp", x.tokens, m.hidden, m.ffn_hidden / layout.tp, m.mlp_matrices)
    third = r.gemm_op("mlp_up", x.tokens, m.ffn_hidden / layout.tp, m.hidden) if m.mlp == "swiglu" else gemms[1]
    act = activation_op(job, r, "mlp.activation", x.tokens * m.ffn_hidden / layout.tp)
    return MlpPart(gemms=gemms, gradients=None, elementwise=elementwise_op(job, layout, r, x), op_recompute=[third],
                   modules=(("mlp", gemms + [act]),))


def activation_op(job: Job, r: Rates, name: str, elements: Num) -> Op:
    """The activation function over `elements` f-wide values, forward: its reads and writes
    (`f_wide_passes`) of 16-bit values [an op for what a recompute module re-runs]."""
    b = f_wide_passes(job) * job.element_bytes * elements
    return op_of(name, FORWARD, 0.0 * b, b, streaming_time(b, r.memory_bytes_per_s))


NORM_RECOMPUTE_PASSES = 4.0   # the two norms of a layer re-run: each reads its h-wide input and writes its output


def selective_ops(job: Job, layout: Layout, r: Rates, x: LocalShape, attn: list[Op], attention_linear: list[Op],
                  mlp: MlpPart) -> list[Op]:
    """What selective recompute re-runs (`Job.recompute_modules`, Megatron-Core's recompute_modules):
    core_attn the attention core; layernorm the two norms (NORM_RECOMPUTE_PASSES h-wide 16-bit passes);
    mla_up_proj MLA's query and KV up-projections and its RoPE and concatenation; moe_act, mlp and
    shared_experts what the MLP part lists for them (`MlpPart.modules`). The default, the attention core
    alone, is `attn` itself."""
    if job.recompute_modules == DEFAULT_RECOMPUTE_MODULES:
        return attn
    ops: list[Op] = list(attn) if job.recomputes("core_attn") else []
    if job.recomputes("layernorm"):
        b = NORM_RECOMPUTE_PASSES * job.element_bytes * x.tokens * job.model.hidden / layout.sp_div
        ops.append(op_of("layernorm", FORWARD, 0.0 * b, b, streaming_time(b, r.memory_bytes_per_s)))
    if job.recomputes("mla_up_proj") and job.model.mla is not None:
        ops += [o for o in attention_linear if o.name in ("mla.q_up", "mla.kv_up")]
        b = mla.rope_bytes(job, layout, x)
        ops.append(op_of("mla.rope", FORWARD, 0.0 * b, b, streaming_time(b, r.memory_bytes_per_s)))
    for module, module_ops in mlp.modules:
        if job.recomputes(module):
            ops += module_ops
    return ops



class Recomputed(NamedTuple):
    """Ops the backward runs again, `mask` times (1 where the recompute mode holds, else 0)."""

    mask: Num
    ops: list[Op]


def op_attention_gemm(job: Job, layout: Layout, r: Rates, x: LocalShape, attention_linear: list[Op]) -> Op:
    """The attention GEMM that op recompute re-runs as the block's 2nd matmul: K (MLA: the KV
    down-projection, of `attention_linear`)."""
    if job.model.mla is not None:
        return attention_linear[-3]
    return r.gemm_op("qkv.k", x.tokens, x.kv_local, job.model.hidden)


def recompute_ops(job: Job, layout: Layout, r: Rates, x: LocalShape, fwd: list[Op], attn: list[Op],
                  attention_linear: list[Op], mlp: MlpPart) -> list[Recomputed]:
    """What the backward recomputes, one group per mode with its mask: full re-runs the forward;
    selective its modules (the attention core by default, `selective_ops`); op (torchtitan: every
    compute op's output saved except every second matmul) re-runs the 2nd, 4th and 6th matmuls (K, the
    output projection, SwiGLU's up or GeLU's down projection) and the element-wise ops, and keeps
    attention."""
    # (a hybrid model's MLP block has no attention: its op-recompute part is its MLP's)
    attention_part = [op_attention_gemm(job, layout, r, x, attention_linear), attention_linear[-1]] \
        if attention_linear else []
    op_parts = attention_part + mlp.op_recompute + [mlp.elementwise]
    # MaxText's qkv_proj_offloaded fetches Q, K, V from host memory: its full re-run leaves out their GEMM (§7.11)
    rerun = [o for o in fwd if o.name != "qkv"] if job.remat_policy == "qkv_proj_offloaded" else fwd
    return [Recomputed(layout.full, rerun),
            Recomputed(layout.selective, selective_ops(job, layout, r, x, attn, attention_linear, mlp)),
            Recomputed(layout.op, op_parts)]


class LayerOps(NamedTuple):
    """The named ops of one layer pass: forward, backward, the recomputed groups, attention's own ops
    (they hide the CP ring), the weight GEMMs forward and backward (the TP overlap window, the
    floors) and the element-wise op."""

    forward: list[Op]
    backward: list[Op]
    recomputed: list[Recomputed]
    attention_forward: list[Op]
    attention_backward: list[Op]
    linear: list[Op]
    linear_backward: list[Op]
    elementwise: Op
    extra_kernels: float = 0.0  # element-wise kernels beyond a dense layer's (a MoE layer's routing)
    # a hybrid model's block (step/hybrid.py) says its own kernels: its core's (forward, backward) in
    # place of attention_kernels, its element-wise kernels in place of elementwise_kernels, and whether
    # selective recompute's core_attn re-runs its core (attention) or not (a Mamba-2 scan, an MLP block)
    core_kernels: tuple[Num, Num] | None = None
    elementwise_kernels: Num | None = None
    core_is_attention: bool = True


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
    floor_s: Num = 0.0          # what the kernels' floors add over their roofline times (all passes)
    ops: LayerOps | None = None  # the named ops these sums add up (the ops table, docs/model.md §2.8)
    fwd_floor_s: Num = 0.0      # the part of floor_s in the forward, and in the backward (without recompute):
    bwd_floor_s: Num = 0.0      # how long those passes last (the DP windows, overlap.dp_windows_s)


def attention_block(job: Job, layout: Layout, r: Rates, x: LocalShape) -> tuple[list[Op], list[Op], list[Op]]:
    """The attention block's weight GEMMs and its core's forward and backward ops (what a MoE model's
    two kinds of layer share)."""
    fwd, bwd = attention_ops(job, layout, r, x)
    return attention_gemms(job, layout, r, x), fwd, bwd


def layer_ops(job: Job, layout: Layout, r: Rates, x: LocalShape, mlp: MlpPart | None = None,
              attention: tuple[list[Op], list[Op], list[Op]] | None = None) -> LayerOps:
    """The ops of one layer pass, per micro-batch and device: the attention block, then `mlp` (default
    the dense MLP; a MoE layer's block from step/moe.py); a LoRA/QLoRA adds its adapters and
    dequantisation (step/finetune.py) and drops the frozen weights' gradients. `attention`: the
    attention block's weight GEMMs and its core's forward and backward ops, when already computed
    (`attention_block`)."""
    mlp = mlp if mlp is not None else dense_mlp(job, layout, r, x)
    attn_linear, attn_fwd, attn_bwd = attention if attention is not None else attention_block(job, layout, r, x)
    linear = attn_linear + mlp.gemms
    fwd = linear + attn_fwd + [mlp.elementwise]
    trained: Num = 1.0 if xp.off(layout.finetune) else 1.0 - layout.frozen
    linear_bwd = gradient_ops(attn_linear, trained) + (mlp.gradients if mlp.gradients is not None
                                                        else gradient_ops(mlp.gemms, trained))
    ew_bwd = mlp.elementwise_backward if mlp.elementwise_backward is not None else elementwise_backward(mlp.elementwise)
    bwd = linear_bwd + attn_bwd + [ew_bwd]
    if not xp.off(layout.finetune):
        ft_fwd, ft_bwd = finetune_layer_ops(job, layout, r, x, mlp.kind, mlp.expert_rows)
        fwd, bwd = fwd + ft_fwd, bwd + ft_bwd
    return LayerOps(forward=fwd, backward=bwd, attention_forward=attn_fwd, attention_backward=attn_bwd,
                    recomputed=recompute_ops(job, layout, r, x, fwd, attn_fwd, attn_linear, mlp),
                    linear=linear, linear_backward=linear_bwd, elementwise=mlp.elementwise,
                    extra_kernels=mlp.extra_kernels)


def layer_pass(job: Job, layout: Layout, r: Rates, x: LocalShape, ops: LayerOps | None = None) -> LayerPass:
    """Forward, backward and recomputation of one layer (docs/model.md §2.6), summed from `layer_ops`
    (default: a dense layer's): a GEMM's backward is its dgrad + wgrad (each its forward's cost; wgrad
    0 for frozen weights), attention's backward its own op, the element-wise backward 2× the bytes; a
    recomputed group is its mask × the sums of its ops."""
    ops = ops if ops is not None else layer_ops(job, layout, r, x)
    fwd = ops.forward
    fwd_c, fwd_m = bound_sums(fwd)
    bwd_c, bwd_m = bound_sums(ops.backward)
    attn_fwd = ops.attention_forward
    attn_c, attn_m = bound_sums(attn_fwd)
    re_c: Num = 0.0
    re_m: Num = 0.0
    for group in ops.recomputed:
        c, m = (fwd_c, fwd_m) if group.ops is fwd else (attn_c, attn_m) if group.ops is attn_fwd \
            else bound_sums(group.ops)
        re_c, re_m = re_c + group.mask * c, re_m + group.mask * m
    k = 2.0 if xp.off(layout.finetune) else 2.0 - layout.frozen
    floors = layer_floor_parts(job, layout, ops.linear, (attn_fwd, ops.attention_backward), ops.elementwise, k,
                               ops.extra_kernels, ops.core_kernels, ops.elementwise_kernels, ops.core_is_attention,
                               ops.recomputed[2].ops)
    # attention's own duration (it hides the CP ring): its roofline time, at least its kernels' floors
    floor = job.hardware.efficiency.kernel_floor_s
    attn_fwd_k, attn_bwd_k = attention_kernels(job, layout) if ops.core_kernels is None else ops.core_kernels
    attn_fwd_s, attn_bwd_s = attn_c + attn_m, sum(bound_sums(ops.attention_backward))
    return LayerPass(fwd_c=fwd_c, fwd_m=fwd_m, bwd_c=bwd_c, bwd_m=bwd_m,
                     attn_fwd_s=attn_fwd_s + floor_excess_s(attn_fwd_s, attn_fwd_k, floor),
                     attn_bwd_s=attn_bwd_s + floor_excess_s(attn_bwd_s, attn_bwd_k, floor),
                     compute_s=fwd_c + bwd_c + re_c, memory_s=fwd_m + bwd_m + re_m,
                     overhead_s=job.hardware.efficiency.layer_overhead_s * (2.0 + layout.full + layout.op),
                     linear_s=ops_time_s(ops.linear) * (1.0 + layout.full) + ops_time_s(ops.linear_backward),
                     floor_s=floors[0] + floors[1] + floors[2], fwd_floor_s=floors[0], bwd_floor_s=floors[1],
                     ops=ops)


def mix_passes(a: LayerPass, b: LayerPass, weight_a: float, weight_b: float) -> LayerPass:
    """The mean layer of a model with two kinds of layer: w_a·a + w_b·b, field by field (weights: the
    kinds' shares of the layers, L_d/L and L_m/L); its ops are both kinds' ops at their weights, the
    first kind's named dense.* (the ops table adds them up to the same sums)."""
    def mix(u: Num, v: Num) -> Num:
        return weight_a * u + weight_b * v
    # the ops are for the ops table of one estimate (floats); the plan search's arrays skip them
    one = not xp.is_array(a.compute_s)
    ops = mix_ops(a.ops, b.ops, weight_a, weight_b) if one and a.ops is not None and b.ops is not None else None
    return LayerPass(fwd_c=mix(a.fwd_c, b.fwd_c), fwd_m=mix(a.fwd_m, b.fwd_m), bwd_c=mix(a.bwd_c, b.bwd_c),
                     bwd_m=mix(a.bwd_m, b.bwd_m), attn_fwd_s=mix(a.attn_fwd_s, b.attn_fwd_s),
                     attn_bwd_s=mix(a.attn_bwd_s, b.attn_bwd_s), compute_s=mix(a.compute_s, b.compute_s),
                     memory_s=mix(a.memory_s, b.memory_s), overhead_s=mix(a.overhead_s, b.overhead_s),
                     linear_s=mix(a.linear_s, b.linear_s), floor_s=mix(a.floor_s, b.floor_s), ops=ops,
                     fwd_floor_s=mix(a.fwd_floor_s, b.fwd_floor_s), bwd_floor_s=mix(a.bwd_floor_s, b.bwd_floor_s))


def mix_ops(a: LayerOps, b: LayerOps, weight_a: float, weight_b: float) -> LayerOps:
    """Two kinds of layer's ops as one list each, scaled by their weights (the first kind's renamed dense.*)."""
    def both(x: list[Op], y: list[Op]) -> list[Op]:
        return [o.scaled(weight_a, name=f"dense.{o.name}") for o in x] + [o.scaled(weight_b) for o in y]
    return LayerOps(forward=both(a.forward, b.forward), backward=both(a.backward, b.backward),
                    recomputed=[Recomputed(g.mask, both(g.ops, h.ops)) for g, h in zip(a.recomputed, b.recomputed,
                                                                                        strict=True)],
                    attention_forward=both(a.attention_forward, b.attention_forward),
                    attention_backward=both(a.attention_backward, b.attention_backward),
                    linear=both(a.linear, b.linear), linear_backward=both(a.linear_backward, b.linear_backward),
                    elementwise=b.elementwise, extra_kernels=weight_b * b.extra_kernels)


def layer_floor_s(job: Job, layout: Layout, linear: list[Op], attention: tuple[list[Op], list[Op]],
                  elementwise: Op, gemm_backward: Num = 2.0, extra_kernels: float = 0.0,
                  core_kernels: tuple[Num, Num] | None = None, elementwise_count: Num | None = None,
                  core_is_attention: bool = True, op_recomputed: list[Op] | None = None) -> Num:
    """What the kernels' floors add to one layer's passes, all of them [s] (`layer_floor_parts` summed)."""
    forward, backward, recompute = layer_floor_parts(job, layout, linear, attention, elementwise, gemm_backward,
                                                     extra_kernels, core_kernels, elementwise_count,
                                                     core_is_attention, op_recomputed)
    return forward + backward + recompute


def layer_floor_parts(job: Job, layout: Layout, linear: list[Op], attention: tuple[list[Op], list[Op]],
                      elementwise: Op, gemm_backward: Num = 2.0, extra_kernels: float = 0.0,
                      core_kernels: tuple[Num, Num] | None = None, elementwise_count: Num | None = None,
                      core_is_attention: bool = True, op_recomputed: list[Op] | None = None) -> tuple[Num, Num, Num]:
    """What the kernels' floor (`efficiency.kernel_floor_us`) adds to one layer's forward, backward and
    recomputation [s]: each
    GEMM (1 kernel forward; `gemm_backward` = 2 backward at twice the time, 1 for frozen weights), the
    attention core and the element-wise kernels (kernels.py counts, plus `extra_kernels`: a MoE
    layer's routing, backward MOE_ROUTING_BACKWARD_RATIO times as many) take at least their kernel count
    times the floor; recomputed kernels again
    (full: the forward; selective: attention; op: the GEMMs it re-runs, `op_recomputed`, each its own
    kernel's floor, and the element-wise kernels). A hybrid model's block gives its own core and
    element-wise kernel counts (`LayerOps.core_kernels`)."""
    floor = job.hardware.efficiency.kernel_floor_s
    attn_fwd_k, attn_bwd_k = attention_kernels(job, layout) if core_kernels is None else core_kernels
    ew_k = (elementwise_kernels(job) if elementwise_count is None else elementwise_count) + extra_kernels
    gemm_fwd: Num = 0.0
    for o in linear:
        gemm_fwd = gemm_fwd + floor_excess_s(o.time_s, 1.0, floor)
    attn_fwd = floor_excess_s(ops_time_s(attention[0]), attn_fwd_k, floor)
    ew_fwd = floor_excess_s(elementwise.time_s, ew_k, floor)
    forward = gemm_fwd + attn_fwd + ew_fwd
    backward = (gemm_backward * gemm_fwd + floor_excess_s(ops_time_s(attention[1]), attn_bwd_k, floor)
                + floor_excess_s(BACKWARD_TRAFFIC_RATIO * elementwise.time_s,
                                 elementwise_backward_kernels(ew_k, extra_kernels), floor))
    core = job.recomputes("core_attn") if core_is_attention else 0.0
    # op recompute: the floors of the very kernels it re-runs (their times are what the pass sums)
    op_floor: Num = 0.0
    for o in op_recomputed or ():
        op_floor = op_floor + (ew_fwd if o is elementwise else floor_excess_s(o.time_s, 1.0, floor))
    if op_recomputed is None:
        op_floor = 0.75 * gemm_fwd + ew_fwd
    recompute = layout.full * forward + layout.selective * core * attn_fwd + layout.op * op_floor
    return forward, backward, recompute


# What the output layer's GEMMs run in under an FP8/FP4 recipe: 16 bit. Megatron-Core's GPT and Mamba models build
# it as tensor_parallel.ColumnParallelLinear, a plain PyTorch GEMM outside Transformer Engine, and wrap only the
# layers in the FP8 context (models/gpt/gpt_model.py, models/mamba/mamba_model.py, transformer_block.py:
# get_fp8_context; Megatron-Core 0.16.1), so NeMo, Megatron-Bridge and MLPerf's NeMo runs compute the logits in
# BF16; torchtitan's float8 conversion leaves the `output` linear out (its default filter_fqns); a tied head (MPT)
# is F.linear on the BF16 embedding table.
OUTPUT_LAYER_PRECISION = "bf16"


def output_layer_rates(job: Job, layout: Layout, r: Rates) -> Rates:
    """The rates the output layer's GEMMs run at: the job's, or under an FP8/FP4 recipe the 16-bit ones
    (OUTPUT_LAYER_PRECISION: the recipes keep the output layer out of their low-precision GEMMs)."""
    if not job.low_precision:
        return r
    return rates_of(replace(job, precision=OUTPUT_LAYER_PRECISION, bf16_layers=0), layout)


def logits_ops(job: Job, layout: Layout, r: Rates, x: LocalShape) -> list[Op]:
    """The logits GEMM forward, its data and weight gradients (in 16 bit under an FP8/FP4 recipe:
    `output_layer_rates`), and the FP32 cross-entropy over T·V/t logits (`kernels.cross_entropy_bytes_per_logit`:
    16 B, or 52 B unfused) on the last stage."""
    logits = output_layer_rates(job, layout, r).gemm_op("logits", x.tokens, job.model.vocab / layout.tp,
                                                       job.model.hidden)
    ce_bytes = cross_entropy_bytes_per_logit(job) * x.tokens * job.model.vocab / layout.tp
    ce = op_of("cross_entropy", FORWARD, 0.0 * ce_bytes, ce_bytes, streaming_time(ce_bytes, r.memory_bytes_per_s))
    trained = 1.0 if xp.off(layout.finetune) else 1.0 - layout.frozen      # a frozen output layer: no wgrad
    return [logits, logits.scaled(1.0, name="logits.dgrad", phase=BACKWARD),
            logits.scaled(trained, name="logits.wgrad", phase=BACKWARD), ce]


def logits_bounds(job: Job, layout: Layout, r: Rates, x: LocalShape) -> tuple[Num, Num]:
    """(compute, memory) seconds of the logits GEMM forward and backward (3×) and the FP32
    cross-entropy on the last stage: sums of `logits_ops`."""
    return bound_sums(logits_ops(job, layout, r, x))
