"""Hybrid models' blocks on one device (docs/model.md §16): a hybrid model (Nemotron-H, Nemotron 3)
is a pattern of blocks, each one pre-norm and one mixer or MLP with its residual: Mamba-2 (M),
attention (*), MoE MLP (E) and dense MLP (-). Each kind of block is a layer pass of its own (the
attention block and the MLPs from step/layer.py and step/moe.py, the Mamba-2 mixer here); the mean
block is their sum weighted by the kinds' counts over the blocks, as a MoE model's mean layer is
(compose.mean_layer).

The Mamba-2 mixer (Dao & Gu 2024, arXiv:2405.21060 §6–7; Megatron-Core MambaMixer calling mamba_ssm's
fused mamba_split_conv1d_scan_combined): the input projection (column-parallel over t: heads and
groups split), the causal depthwise convolution with SiLU over x, B and C, the chunked scan (SSD),
the gated RMSNorm and the output projection (row-parallel). With tensor parallelism it has the
attention block's collectives: one all-reduce (or RS + AG with SP) forward, one backward.
"""

from __future__ import annotations

from collections.abc import Callable

from trainest import xp
from trainest.layout import Job, Layout, Num
from trainest.record import NamedTuple
from trainest.step import mla
from trainest.step.collectives import Tiers
from trainest.step.flops import CAUSAL_FRACTION, ssd_flops_per_token
from trainest.step.kernels import MAMBA_CORE_KERNELS, attention_kernels, block_elementwise_kernels
from trainest.step.layer import (
    BACKWARD_TRAFFIC_RATIO,
    LOW_PRECISION_CAST_PASSES,
    LayerOps,
    LayerPass,
    MlpPart,
    Recomputed,
    attention_block,
    dense_mlp,
    f_wide_passes,
    h_wide_bytes,
    layer_ops,
    layer_pass,
    rope_bytes,
)
from trainest.step.moe import (
    ep_layer_s,
    moe_elementwise_backward_bytes,
    moe_elementwise_bytes,
    moe_mlp,
    moe_tp_all_reduces,
)
from trainest.step.rates import BACKWARD, FORWARD, LocalShape, Rates, module_rates
from trainest.step.roofline import Op, fused_time, op_of, streaming_time
from trainest.step.traffic import tp_layer_s

# The scan's backward (mamba_ssm _mamba_chunk_scan_combined_bwd) recomputes the chunk states, the C·Bᵀ
# blocks and the state passing from the saved inputs, then runs the gradient kernels: ~2.5× the forward's
# FLOPs (as FlashAttention-2's backward, Dao 2023).
SSD_BACKWARD_FLOP_RATIO = 2.5
# The scan's bytes, kernel by kernel (mamba_ssm ssd_combined.py: _mamba_chunk_scan_combined_fwd and _bwd), per
# token, as (16-bit passes over d_in, over G·N, over H; bytes per chunk-state element, of S = H·P·N/Q per token;
# per C·Bᵀ score, G·Q per token; per head in FP32 dt and its cumulative sum). Forward: chunk_cumsum, chunk_state
# (reads x, B, dt; writes the states in FP32), state_passing (reads them, writes 16 bit), bmm_chunk (reads B, C;
# writes C·Bᵀ in FP32), chunk_scan (reads x, C, the states, C·Bᵀ, dt, and the gate z; writes y gated by SiLU(z)
# and, for the backward, y before the gate: Megatron-Core's MambaMixer passes z and no norm weight, so the gate
# runs inside the scan). Backward: those four again (the states kept in FP32), chunk_scan_bwd_dz (reads the
# output gradient, the ungated y, z and x; writes dz and the ungated output gradient), chunk_scan_bwd_dstates,
# state_passing_bwd, chunk_scan_chunk_state_bwd_dx, chunk_state_bwd_db, chunk_scan_bwd_dC, chunk_scan_bwd_dcb,
# bmm_chunk_bwd twice (dB and dC, FP32 residuals: 16 B per G·N = 8 more 16-bit passes),
# chunk_scan_bwd_ddAcs_stable, chunk_cumsum_bwd: 17 passes over d_in (x and the output gradients read, dx and dz
# written), the states and their gradients 38 bytes per element.
SSD_FORWARD_PASSES = (5.0, 4.0, 1.0, 12.0, 8.0, 24.0)
SSD_BACKWARD_PASSES = (17.0, 17.0, 1.0, 38.0, 24.0, 96.0)
CONV_PASSES = 2.0              # the causal convolution reads x, B, C and writes them after its SiLU (16 bit)
# its backward (mamba_split_conv1d_scan_combined's): the forward again (the convolution is recomputed, not kept),
# then causal_conv1d_bwd reads the input and the output gradient and writes the input gradient
CONV_BACKWARD_PASSES = 5.0
# the mixer's RMSNorm (mamba_ssm's RMSNormGated called without z: the gate ran in the scan) reads y and writes
# its output (16 bit)
GATED_NORM_PASSES = 2.0
# Megatron-Core's MambaMixer hands the fused kernel its input as (b, s, ·) and takes y back as (s, b, ·):
# `rearrange(zxBCdt, "l b d -> b l d").contiguous()` and `rearrange(y, "b l d -> l b d").contiguous()`. A
# micro-batch of one sequence is contiguous either way (PyTorch ignores the strides of a size-1 dimension);
# of b > 1 each is a copy (read and write, 16 bit): forward the input projection's output (2·d_in + 2GN + H
# wide) and y (d_in), backward the input projection's gradient once more (the transposed view of dzxbcdt that
# TE's linear makes contiguous; y's gradient enters the kernels as a strided view).
LAYOUT_COPY_FORWARD_PASSES = 2.0     # of the in_proj output and of y: one read, one write each
LAYOUT_COPY_BACKWARD_PASSES = 2.0    # of the in_proj output's gradient
KINDS = (("M", "mamba"), ("*", "attention"), ("E", "moe"), ("-", "mlp"))


class BlockPass(NamedTuple):
    """One kind of block, one micro-batch, one device: its pass, its TP and EP traffic [s] (all, exposed)."""

    lp: LayerPass
    tp_total_s: Num
    tp_exposed_s: Num
    ep_total_s: Num = 0.0
    ep_exposed_s: Num = 0.0


def ssd_bytes_per_token(job: Job, passes: tuple[float, ...]) -> Num:
    """Bytes one pass of the scan moves per token, all heads [B]: e·(n_x·d_in + n_g·G·N + n_h·H)
    + s·H·P·N/Q + c·G·Q + b_h·H for `passes` = (n_x, n_g, n_h, s, c, b_h) (SSD_FORWARD_PASSES,
    SSD_BACKWARD_PASSES)."""
    b = job.model.mamba
    n_x, n_g, n_h, per_state, per_score, per_head = passes
    return (job.element_bytes * (n_x * b.inner + n_g * b.groups * b.state_dim + n_h * b.heads)
            + per_state * b.heads * b.head_dim * b.state_dim / b.chunk + per_score * b.groups * b.chunk
            + per_head * b.heads)


def ssd_op(job: Job, layout: Layout, r: Rates, x: LocalShape, phase: str = FORWARD) -> Op:
    """The chunked scan of one Mamba-2 block, forward (or backward: SSD_BACKWARD_FLOP_RATIO × the FLOPs), on
    the fused-attention rate (both are tiled matmul kernels keeping their intermediates on chip):
    ssd_flops_per_token·T/t FLOPs and `ssd_bytes_per_token` of its kernels' passes × T/t [÷t: heads and
    groups are split]."""
    tp = layout.tp
    ratio, passes = (1.0, SSD_FORWARD_PASSES) if phase == FORWARD else (SSD_BACKWARD_FLOP_RATIO, SSD_BACKWARD_PASSES)
    flops = ratio * ssd_flops_per_token(job.model, CAUSAL_FRACTION) * x.tokens / tp
    moved = ssd_bytes_per_token(job, passes) * x.tokens / tp
    return op_of("scan", phase, flops, moved, fused_time(flops, moved, r.attention_flops_per_s, r.memory_bytes_per_s))


def conv_op(job: Job, layout: Layout, r: Rates, x: LocalShape) -> Op:
    """The causal depthwise convolution (with its SiLU) over x, B, C forward: 2·k FLOPs and
    CONV_PASSES 16-bit passes per channel and token, memory-bound."""
    b = job.model.mamba
    elements = x.tokens * b.conv_channels / layout.tp
    moved = CONV_PASSES * job.element_bytes * elements
    return op_of("conv", FORWARD, 2.0 * b.conv_kernel * elements, moved,
                 streaming_time(moved, r.memory_bytes_per_s))


def mamba_gemms(job: Job, layout: Layout, r: Rates, x: LocalShape) -> list[Op]:
    """The Mamba-2 block's weight GEMMs: in_proj (T × (2·d_in + 2GN + H)/t × h) and out_proj
    (T × h × d_in/t), each at its `module_precision` (in_proj, out_proj)."""
    b, h, tp = job.model.mamba, job.model.hidden, layout.tp
    return [module_rates(job, r, "in_proj").gemm_op("in_proj", x.tokens, b.in_proj_width / tp, h),
            module_rates(job, r, "out_proj").gemm_op("out_proj", x.tokens, h, b.inner / tp)]


def half_layer_bytes(job: Job, layout: Layout, x: LocalShape) -> Num:
    """A block's pre-norm and residual add: half of a transformer layer's h-wide bytes [B]."""
    return 0.5 * h_wide_bytes(job, layout, x)


def casts(job: Job, elements: Num) -> Num:
    """FP8/FP4 casts of GEMM inputs of `elements` values (0 in 16 bit) [B]."""
    return LOW_PRECISION_CAST_PASSES * elements if job.low_precision else 0.0


def block_elementwise_bytes(job: Job, layout: Layout, x: LocalShape, kind: str) -> Num:
    """Forward element-wise bytes of one block of `kind` [B]: its norm and residual (half a layer's),
    plus: attention the casts of its two GEMM inputs, MLA's and RoPE's traffic; a dense MLP the
    activation's f-wide passes and its two casts; a MoE MLP a MoE layer's without the attention half;
    Mamba-2 the gated norm (GATED_NORM_PASSES over d_in) and its two casts."""
    m, T, sp = job.model, x.tokens, layout.sp_div
    half = half_layer_bytes(job, layout, x)
    attention_casts = casts(job, 2.0 * T * m.hidden / sp)
    if kind == "*":
        extra = mla.elementwise_bytes(job, layout, x) if m.mla is not None else 0.0
        return half + attention_casts + extra + rope_bytes(job, layout, x)
    if kind == "-":
        width = m.ffn_hidden / layout.tp
        return (half + f_wide_passes(job) * job.element_bytes * T * width
                + casts(job, T * (m.hidden / sp + width)))
    if kind == "E":
        return moe_elementwise_bytes(job, layout, x) - attention_half_bytes(job, layout, x)
    b = m.mamba
    inner = b.inner / layout.tp
    return (half + GATED_NORM_PASSES * job.element_bytes * T * inner + casts(job, T * (m.hidden / sp + inner))
            + layout_copy_bytes(job, layout, x)[0])


def layout_copy_bytes(job: Job, layout: Layout, x: LocalShape) -> tuple[Num, Num]:
    """(forward, backward) bytes of the Mamba-2 mixer's layout copies (LAYOUT_COPY_FORWARD_PASSES over the
    in_proj output and y, LAYOUT_COPY_BACKWARD_PASSES over the in_proj output's gradient, 16 bit), made only
    for a micro-batch of more than one sequence [B]."""
    b, tp = job.model.mamba, layout.tp
    copied = xp.mask(layout.micro_batch > 1) * job.element_bytes * x.tokens
    return (LAYOUT_COPY_FORWARD_PASSES * copied * (b.in_proj_width + b.inner) / tp,
            LAYOUT_COPY_BACKWARD_PASSES * copied * b.in_proj_width / tp)


def mamba_elementwise_backward(job: Job, layout: Layout, r: Rates, x: LocalShape, elementwise: Op) -> Op:
    """The Mamba-2 block's element-wise backward: BACKWARD_TRAFFIC_RATIO × its forward bytes without the
    layout copies (layer.elementwise_backward), plus the backward's own copy (`layout_copy_bytes`) [op]."""
    forward_copy, backward_copy = layout_copy_bytes(job, layout, x)
    back = BACKWARD_TRAFFIC_RATIO * (elementwise.bytes - forward_copy) + backward_copy
    return op_of("elementwise", BACKWARD, 0.0 * back, back, streaming_time(back, r.memory_bytes_per_s))


def attention_half_bytes(job: Job, layout: Layout, x: LocalShape) -> Num:
    """What a MoE layer's element-wise bytes (moe.moe_elementwise_bytes) hold of its attention half: its
    norm and residual, the casts of the attention's two GEMM inputs, MLA's traffic [B]."""
    m = job.model
    extra = mla.elementwise_bytes(job, layout, x) if m.mla is not None else 0.0
    return half_layer_bytes(job, layout, x) + casts(job, 2.0 * x.tokens * m.hidden / layout.sp_div) + extra


def elementwise_op_of(job: Job, layout: Layout, r: Rates, x: LocalShape, kind: str,
                      moved: Num | None = None) -> Op:
    """The block's element-wise op (`moved`: its bytes, when known)."""
    moved = block_elementwise_bytes(job, layout, x, kind) if moved is None else moved
    return op_of("elementwise", FORWARD, 0.0 * moved, moved, streaming_time(moved, r.memory_bytes_per_s))


def mamba_ops(job: Job, layout: Layout, r: Rates, x: LocalShape) -> tuple[list[Op], list[Op], list[Op]]:
    """(weight GEMMs, core forward, core backward) of a Mamba-2 block: the core is the convolution and
    the scan; backward the scan's gradient kernels (`ssd_op` backward) and the convolution recomputed and
    differentiated (CONV_BACKWARD_PASSES)."""
    conv, scan = conv_op(job, layout, r, x), ssd_op(job, layout, r, x)
    conv_bwd = conv.scaled(CONV_BACKWARD_PASSES / CONV_PASSES, phase=BACKWARD)
    return mamba_gemms(job, layout, r, x), [conv, scan], [conv_bwd, ssd_op(job, layout, r, x, BACKWARD)]


def no_mlp(elementwise: Op) -> MlpPart:
    """The MLP part of a block that has none (an attention or Mamba-2 block): only its element-wise op."""
    return MlpPart(gemms=[], gradients=None, elementwise=elementwise, op_recompute=[])


def _block(job: Job, layout: Layout, r: Rates, x: LocalShape, kind: str, mlp: MlpPart,
           core: tuple[list[Op], list[Op], list[Op]]) -> LayerOps:
    ops = layer_ops(job, layout, r, x, mlp, core)
    if kind == "*":
        core_k = attention_kernels(job, layout)
    elif kind == "M":
        core_k = MAMBA_CORE_KERNELS
    else:
        core_k = (0.0, 0.0)
    ops = ops._replace(core_kernels=core_k, elementwise_kernels=block_elementwise_kernels(job, kind),
                       core_is_attention=kind == "*")
    if kind != "*":     # selective recompute's core_attn is attention's: nothing of a Mamba-2 or MLP block's core
        selective = [o for o in ops.recomputed[1].ops if all(o is not c for c in core[1])]
        ops = ops._replace(recomputed=[ops.recomputed[0], Recomputed(ops.recomputed[1].mask, selective),
                                       ops.recomputed[2]])
    return ops


def block_passes(job: Job, layout: Layout, r: Rates, x: LocalShape, tiers: Tiers) -> list[tuple[str, float, BlockPass]]:
    """(kind name, share of the blocks, pass) for each kind of block the model has."""
    m = job.model
    out: list[tuple[str, float, BlockPass]] = []
    for kind, name in KINDS:
        count = m.block_count(kind)
        if not count:
            continue
        part = moe_mlp(job, layout, r, x) if kind == "E" else None    # its element-wise bytes, computed once
        elementwise = elementwise_op_of(job, layout, r, x, kind, None if part is None else
                                        part.elementwise.bytes - attention_half_bytes(job, layout, x))
        if kind == "M":
            mixer = no_mlp(elementwise)._replace(
                elementwise_backward=mamba_elementwise_backward(job, layout, r, x, elementwise))
            ops = _block(job, layout, r, x, kind, mixer, mamba_ops(job, layout, r, x))
        elif kind == "*":
            ops = _block(job, layout, r, x, kind, no_mlp(elementwise), attention_block(job, layout, r, x))
        elif kind == "-":
            ops = _block(job, layout, r, x, kind, dense_mlp(job, layout, r, x)._replace(elementwise=elementwise),
                         ([], [], []))
        elif part is not None:
            back = moe_elementwise_backward_bytes(job, layout, x, elementwise.bytes)
            bwd = op_of("elementwise", BACKWARD, 0.0 * back, back, streaming_time(back, r.memory_bytes_per_s))
            ops = _block(job, layout, r, x, kind, part._replace(elementwise=elementwise, elementwise_backward=bwd),
                         ([], [], []))
        lp = layer_pass(job, layout, r, x, ops)
        if kind == "E":
            tp_total, tp_exposed = tp_layer_s(job, layout, x, tiers, lp.linear_s, moe_block_tp_collectives(job, layout))
            ep_total, ep_exposed = ep_layer_s(job, layout, x, tiers, lp.compute_s + lp.memory_s)
            bp = BlockPass(lp, tp_total, tp_exposed, ep_total, xp.maximum(ep_exposed, 0.0))
        else:
            tp_total, tp_exposed = tp_layer_s(job, layout, x, tiers, lp.linear_s, block_tp_collectives(layout))
            bp = BlockPass(lp, tp_total, tp_exposed)
        out.append((name, count / m.layers, bp))
    return out


def block_tp_collectives(layout: Layout) -> Num:
    """TP all-reduces (or RS + AG with SP) of T·h of one attention, Mamba-2 or dense MLP block pass:
    one forward, one backward, one more under full recompute (half a transformer layer's)."""
    return 2.0 + layout.full


def moe_block_tp_collectives(job: Job, layout: Layout) -> Num:
    """A MoE MLP block's: a MoE layer's (step/moe.py: moe_tp_all_reduces) without its attention's."""
    return moe_tp_all_reduces(job, layout) - (2.0 + layout.full + layout.op)


def mix_blocks(blocks: list[tuple[str, float, BlockPass]]) -> tuple[LayerPass, Num, Num, Num, Num]:
    """The mean block: (pass, TP all, TP exposed, EP all, EP exposed), each the shares' weighted sum; its
    ops (one estimate's ops table) every kind's, named kind.op and scaled by its share."""
    fields: dict[str, Num] = {f: 0.0 for f in LayerPass._fields if f != "ops"}
    tp_total: Num = 0.0
    tp_exposed: Num = 0.0
    ep_total: Num = 0.0
    ep_exposed: Num = 0.0
    for _, w, bp in blocks:
        for f in fields:
            fields[f] = fields[f] + w * getattr(bp.lp, f)
        tp_total, tp_exposed = tp_total + w * bp.tp_total_s, tp_exposed + w * bp.tp_exposed_s
        ep_total, ep_exposed = ep_total + w * bp.ep_total_s, ep_exposed + w * bp.ep_exposed_s
    ops = None
    named = [(name, w, bp.lp.ops) for name, w, bp in blocks if bp.lp.ops is not None]
    if len(named) == len(blocks):          # arrays too: a trace's fit (trace/compare.py) reads the ops' classes
        ops = _mix_ops(named)
    return LayerPass(**fields, ops=ops), tp_total, tp_exposed, ep_total, ep_exposed


def _mix_ops(kinds: list[tuple[str, float, LayerOps]]) -> LayerOps:
    def each(get: Callable[[LayerOps], list[Op]]) -> list[Op]:
        return [o.scaled(w, name=f"{name}.{o.name}") for name, w, ops in kinds for o in get(ops)]
    first = kinds[0][2]
    groups = [Recomputed(g.mask, [o.scaled(w, name=f"{name}.{o.name}") for name, w, ops in kinds
                                  for o in ops.recomputed[i].ops])
              for i, g in enumerate(first.recomputed)]
    return LayerOps(forward=each(lambda o: o.forward), backward=each(lambda o: o.backward), recomputed=groups,
                    attention_forward=each(lambda o: o.attention_forward),
                    attention_backward=each(lambda o: o.attention_backward),
                    linear=each(lambda o: o.linear), linear_backward=each(lambda o: o.linear_backward),
                    elementwise=first.elementwise,
                    extra_kernels=float(sum(w * ops.extra_kernels for _, w, ops in kinds)))
