"""Fine-tuning (docs/model.md §13): LoRA adapters on a frozen base (Hu et al. 2021), QLoRA's 4-bit NF4
base with double quantisation (Dettmers et al. 2023), and what a frozen base removes from the step.

A LoRA adapts a frozen weight W (in×out) with two trained matrices, A (in×r) and B (r×out): the
layer computes x·W + (α/r)·(x·A)·B. Per adapted matrix and token that is 2·r·(in + out) FLOPs
forward and twice that backward (the data and weight gradients of A and B), while the frozen W needs
only its data gradient (dX = dY·Wᵀ): no weight-gradient GEMM, no gradient, no optimizer state.

QLoRA stores W as 4-bit NF4 with a per-64-block absmax, itself quantised to 8 bit per 256 blocks
(double quantisation: 0.127 bits per parameter, Dettmers et al. 2023 §3). bitsandbytes' training
path (`bnb.matmul_4bit` → `MatMul4Bit`) is not a fused dequant-GEMM: every forward and every
backward dequantises W to a 16-bit copy (`dequantize_4bit`: read 0.5 B + the absmax, write 2 B per
parameter) and then runs a 16-bit GEMM on it; the fused 4-bit kernels serve single-token inference
only. That is what trainest models. An 8-bit base (LLM.int8, `Linear8bitLt`) is modelled the same
way with 1 B per parameter read (its outlier decomposition is not modelled).

Every function takes the Layout's `finetune` code as floats or arrays (masks: `Layout.frozen`,
`Layout.qlora`). This module imports the layer's types for annotations only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from trainest import xp
from trainest.catalog import Model
from trainest.frameworks import FRAMEWORKS
from trainest.layout import Job, Layout, Num
from trainest.precision import weight_bytes_per_param
from trainest.step.roofline import Op, op_of, streaming_time
from trainest.step.schedule import stage_layers

if TYPE_CHECKING:
    from trainest.step.rates import LocalShape, Rates

NF4_BYTES_PER_PARAM = 0.5                  # 4-bit NormalFloat
DOUBLE_QUANT_BITS_PER_PARAM = 8.0 / 64.0 + 32.0 / (64.0 * 256.0)   # 0.127: 8-bit absmax per 64, FP32 per 256 blocks
INT8_BYTES_PER_PARAM = 1.0                 # LLM.int8 (the row-wise FP32 scale, 4 B per output row, is not counted)
# Merging an adapter's output into the base output, in 16-bit passes over its elements, beyond what the
# GEMMs themselves read and write. Eager PyTorch (PEFT's `result + lora_B(lora_A(x)) * scaling`,
# Megatron's `linear_output + adapter(x) * alpha/dim`) scales it (read, write) and adds it (read both,
# write one): 5 passes forward; the backward scales the incoming gradient for B (read, write: 2 passes
# of the output width) and adds the adapter's input gradient to the base one (read both, write one: 3
# passes of the input width). Fused kernels put the scale into B's GEMM (its alpha) and the add into
# its epilogue (beta = 1: accumulate into the base output, as cuBLAS/CUTLASS epilogues and Megatron's
# fused gradient accumulation do): 1 pass forward (reading the base output back), 1 backward (the
# base input gradient read back by A's data-gradient GEMM).
LORA_MERGE_PASSES = {"eager": 5.0, "fused": 1.0}
LORA_MERGE_BACKWARD_OUT_PASSES = {"eager": 2.0, "fused": 0.0}
LORA_MERGE_BACKWARD_IN_PASSES = {"eager": 3.0, "fused": 1.0}
ADAPTER_BACKWARD_RATIO = 2.0               # A and B: a data and a weight gradient each, each ≈ the forward


class Adapted(NamedTuple):
    """One adapted linear layer on one device: its name and local widths (Megatron's split: a
    column-parallel layer keeps A whole and splits B's outputs; a row-parallel one splits A's inputs
    and keeps B whole)."""

    name: str
    in_local: Num               # A's input width on this device
    out_local: Num              # B's output width on this device
    row_parallel: bool          # proj, mlp_down: the adapter is added to the full-width output (÷t with SP)
    params: Num                 # r·(in_local + out_local): trained parameters on this device


def adapted_matrices(job: Job, layout: Layout, kv_local: Num) -> list[Adapted]:
    """The linear layers the job's targets adapt, with their per-device widths (kv_local = max(g, t)·d_h/t),
    at the framework's adapter granularity (`Framework.lora_fused`, trainest/frameworks.py): fused, one
    adapter per GEMM of trainest's layer (§2.3), the QKV projection and the output projection
    (attention), the up/gate and the down projection (mlp), as Megatron-LM, NeMo and Megatron-Bridge
    adapt them; separate, one per projection, q, k, v and o, gate, up and down, as PEFT's all-linear
    and mlx-lm do: each extra projection adds r·h parameters (its own A reads the layer input: 3·r·h
    per layer with SwiGLU, 2 for q, k, v and 1 for gate, up) and two thin GEMMs."""
    m, tp, r = job.model, layout.tp, job.lora_rank
    h, f, q = float(m.hidden), float(m.ffn_hidden), float(m.heads * m.head_dim)
    if FRAMEWORKS[job.framework].lora_fused:
        attention = [("qkv", h, q / tp + 2.0 * kv_local), ("proj", q / tp, h)]
        mlp = [("mlp_up", h, (m.mlp_matrices - 1.0) * f / tp), ("mlp_down", f / tp, h)]
    else:
        attention = [("q", h, q / tp), ("k", h, kv_local), ("v", h, kv_local), ("proj", q / tp, h)]
        ups = [("mlp_gate", h, f / tp)] if m.mlp_matrices > 2 else []
        mlp = [*ups, ("mlp_up", h, f / tp), ("mlp_down", f / tp, h)]
    chosen = {"attention": attention, "mlp": mlp, "all": attention + mlp}
    out = []
    for name, n_in, n_out in chosen[job.lora_targets]:
        out.append(Adapted(name=name, in_local=n_in, out_local=n_out, row_parallel=name in ("proj", "mlp_down"),
                           params=r * (n_in + n_out)))
    return out


def adapter_params_per_layer(job: Job, layout: Layout) -> Num:
    """Trained adapter parameters of one layer on one device: Σ r·(in_local + out_local) [params]."""
    kv_local = xp.maximum(job.model.kv_heads, layout.tp) * job.model.head_dim / layout.tp
    return sum(a.params for a in adapted_matrices(job, layout, kv_local))


def adapter_ops(job: Job, layout: Layout, r: Rates, x: LocalShape) -> tuple[list[Op], list[Op]]:
    """(forward, backward) ops of every adapter of one layer, × the frozen mask: per adapted matrix
    x·A (a GEMM T×in_local by in_local×r) and (x·A)·B (T×r by r×out_local), the merge of the adapter
    output (LORA_MERGE_PASSES · e · T · width), and backward twice each GEMM with the merge's own
    traffic."""
    frozen, e, t = layout.frozen, job.element_bytes, x.tokens
    merge_passes, merge_out_passes = LORA_MERGE_PASSES[job.kernels], LORA_MERGE_BACKWARD_OUT_PASSES[job.kernels]
    merge_in_passes = LORA_MERGE_BACKWARD_IN_PASSES[job.kernels]
    fwd: list[Op] = []
    bwd: list[Op] = []
    merge_fwd: Num = 0.0
    merge_bwd: Num = 0.0
    for a in adapted_matrices(job, layout, x.kv_local):
        for op in (r.gemm_op(f"{a.name}.lora_a", t, job.lora_rank, a.in_local),
                   r.gemm_op(f"{a.name}.lora_b", t, a.out_local, job.lora_rank)):
            fwd.append(op.scaled(frozen))
            bwd.append(op.scaled(ADAPTER_BACKWARD_RATIO * frozen, phase="backward"))
        merged = a.out_local / layout.sp_div if a.row_parallel else a.out_local   # the output it is added to
        merge_fwd = merge_fwd + merge_passes * e * t * merged
        merge_bwd = merge_bwd + e * t * (merge_out_passes * merged + merge_in_passes * a.in_local)
    for ops, bytes_moved, phase in ((fwd, merge_fwd, "forward"), (bwd, merge_bwd, "backward")):
        ops.append(op_of("lora_merge", phase, 0.0, frozen * bytes_moved,
                         streaming_time(frozen * bytes_moved, r.memory_bytes_per_s)))
    return fwd, bwd


def base_bytes_per_param(job: Job, layout: Layout) -> Num:
    """Bytes per parameter of a frozen base linear weight: 0.5 + 0.127/8 for QLoRA's NF4 with
    double quantisation, 1 for an 8-bit LoRA base; an unquantised base (base_bits 16) is stored at the
    training precision's working-weight bytes w: 2, or 4 for FP32/TF32 [B]."""
    lora = INT8_BYTES_PER_PARAM if job.base_bits == 8 else weight_bytes_per_param(job.precision)
    return xp.where(layout.qlora > 0, NF4_BYTES_PER_PARAM + DOUBLE_QUANT_BITS_PER_PARAM / 8.0, lora)


def quantised(job: Job, layout: Layout) -> Num:
    """1.0 where the frozen base is quantised (QLoRA, or an 8-bit LoRA base): its GEMMs dequantise."""
    return xp.maximum(layout.qlora, layout.frozen * (1.0 if job.base_bits < 16 else 0.0))


def linear_params_per_layer(model: Model) -> float:
    """Parameters of one layer's linear weights (QKV, output projection, MLP), what a quantised base
    stores in 4 or 8 bit; the norms, embeddings and output layer stay 16-bit [params]."""
    return float(model.params_per_layer - model.layer_norm_params)


def dequant_op(job: Job, layout: Layout, r: Rates, phase: str) -> Op:
    """One pass's dequantisation of a layer's quantised linear weights on one device: read the
    quantised weights (with their absmax) and write the 16-bit copy the GEMMs then read,
    (bytes per base param + e) · P_linear/t, memory-bound (bitsandbytes `dequantize_4bit`, then
    `.to(A.dtype)`: the copy has the GEMM input's dtype, e bytes); 0 where the base is not quantised."""
    params = linear_params_per_layer(job.model) / layout.tp
    bytes_moved = quantised(job, layout) * params * (base_bytes_per_param(job, layout) + job.element_bytes)
    return op_of("dequant", phase, 0.0, bytes_moved, streaming_time(bytes_moved, r.memory_bytes_per_s))


def finetune_layer_ops(job: Job, layout: Layout, r: Rates, x: LocalShape) -> tuple[list[Op], list[Op]]:
    """(forward, backward) ops a LoRA/QLoRA adds to one layer pass: the adapters and, for a
    quantised base, one dequantisation per pass (the backward's data gradients need W again)."""
    fwd, bwd = adapter_ops(job, layout, r, x)
    return fwd + [dequant_op(job, layout, r, "forward")], bwd + [dequant_op(job, layout, r, "backward")]


def dequant_workspace_bytes(job: Job, layout: Layout) -> Num:
    """The dequantised copy (e bytes per weight) of the largest quantised weight, alive during its GEMM
    [B] (0 unquantised)."""
    m = job.model
    widest = max(m.hidden * m.ffn_hidden, m.hidden * (m.heads + 2 * m.kv_heads) * m.head_dim)
    return quantised(job, layout) * job.element_bytes * widest / layout.tp


def adapter_activation_bytes_per_layer(job: Job, layout: Layout) -> Num:
    """What the adapters of one layer keep for the backward, one micro-batch [B]: x·A (T×r, e bytes
    per element) per adapted matrix (B's weight gradient needs it; A's reuses the base layer's saved input)."""
    kv_local = xp.maximum(job.model.kv_heads, layout.tp) * job.model.head_dim / layout.tp
    n = len(adapted_matrices(job, layout, kv_local))
    return layout.frozen * n * job.element_bytes * layout.tokens(job) * job.lora_rank


def frozen_layer_bytes(job: Job, layout: Layout) -> Num:
    """Stored bytes of one frozen layer on one device: its linear weights at the base's bytes per
    parameter, its norms at the working-weight bytes w (what ZeRO-3/FSDP gathers, and what weight offload
    fetches) [B]."""
    linear = linear_params_per_layer(job.model) / layout.tp
    rest = job.model.params_per_layer / layout.tp - linear
    return linear * base_bytes_per_param(job, layout) + rest * weight_bytes_per_param(job.precision)


def frozen_weight_bytes(job: Job, layout: Layout, params_local: Num) -> Num:
    """Bytes of the frozen base weights of the heaviest stage on one device, before ZeRO-3 sharding:
    the layers' linear weights at the base's bytes per parameter, the rest (norms, embeddings, output
    layer) at the working-weight bytes w [B]."""
    heavy, _ = stage_layers(job.model, layout.pp, layout.vpp, layout.split)
    linear = heavy * linear_params_per_layer(job.model) / layout.tp
    return linear * base_bytes_per_param(job, layout) + (params_local - linear) * weight_bytes_per_param(job.precision)


def adapter_params_local(job: Job, layout: Layout) -> Num:
    """Trained adapter parameters on one device of the heaviest stage (its layers × per layer)."""
    heavy, _ = stage_layers(job.model, layout.pp, layout.vpp, layout.split)
    return heavy * adapter_params_per_layer(job, layout)


def trainable_params_local(job: Job, layout: Layout, params_local: Num) -> Num:
    """Parameters this device trains (gradients, optimizer state, gradient reduction): all of the
    stage's for a full fine-tune, the adapters' for LoRA/QLoRA [params]."""
    if xp.off(layout.finetune):
        return params_local
    return xp.where(layout.frozen > 0, adapter_params_local(job, layout), params_local)


def trainable_params(job: Job, layout: Layout) -> Num:
    """Parameters the run trains, whole model (not per device): every parameter P for a full
    fine-tune, the adapters' L·Σ r·(in + out) (t = 1) for LoRA/QLoRA [params]."""
    if xp.off(layout.finetune):
        return float(job.model.params)
    adapters = job.model.layers * adapter_params_per_layer(job, layout._replace(tp=1.0, sp=0.0))
    return xp.where(layout.frozen > 0, adapters, float(job.model.params))


def adapter_flops_per_token(job: Job, layout: Layout) -> Num:
    """Forward FLOPs of one layer's adapters per token, whole layer (t = 1): Σ 2·r·(in + out)."""
    whole = layout._replace(tp=1.0, sp=0.0)
    kv = float(job.model.kv_heads * job.model.head_dim)      # the model's KV width (no replication)
    return sum(2.0 * job.lora_rank * (a.in_local + a.out_local) for a in adapted_matrices(job, whole, kv))


def finetune_flops_delta(job: Job, layout: Layout) -> tuple[Num, Num]:
    """(model, hardware) FLOPs per step that fine-tuning adds to the full-training count, all
    devices [FLOP]: − the frozen weight-gradient GEMMs (one forward's worth of the layers' linear
    GEMMs and of the logits), + 3× the adapters' forward (forward, data and weight gradients);
    recomputation re-runs the adapters' forward too (hardware FLOPs)."""
    m, tokens = job.model, job.tokens_per_step
    linear_fwd = 2.0 * tokens * (m.layers * linear_params_per_layer(m) + m.hidden * m.vocab)
    adapters = tokens * m.layers * adapter_flops_per_token(job, layout)
    model = layout.frozen * (3.0 * adapters - linear_fwd)
    return model, model + layout.frozen * layout.full * adapters
