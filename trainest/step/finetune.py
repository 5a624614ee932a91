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

from typing import TYPE_CHECKING

from trainest import xp
from trainest.frameworks import FRAMEWORKS
from trainest.layout import Job, Layout, Num
from trainest.models import Model
from trainest.precision import weight_bytes_per_param
from trainest.record import NamedTuple
from trainest.step.rates import grouped_gemm
from trainest.step.roofline import Op, op_of, streaming_time
from trainest.step.schedule import dualpipe_copies, stage_layers

if TYPE_CHECKING:
    from trainest.step.rates import LocalShape, Rates

NF4_BYTES_PER_PARAM = 0.5                  # 4-bit NormalFloat
DOUBLE_QUANT_BITS_PER_PARAM = 8.0 / 64.0 + 32.0 / (64.0 * 256.0)   # 0.127: 8-bit absmax per 64, FP32 per 256 blocks
FP32_ABSMAX_BITS_PER_PARAM = 32.0 / 64.0   # 0.5: without double quantisation, an FP32 absmax per 64-weight block
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
    row_parallel: bool          # proj, *_down: the adapter is added to the full-width output (÷t with SP)
    params: Num                 # r·(in_local + out_local): trained parameters on this device


def _adapters(rank: Num, matrices: list[tuple[str, Num, Num]], row_parallel: tuple[str, ...]) -> list[Adapted]:
    """Adapted records of (name, in_local, out_local) matrices at LoRA rank r."""
    return [Adapted(name=name, in_local=n_in, out_local=n_out, row_parallel=name in row_parallel,
                    params=rank * (n_in + n_out)) for name, n_in, n_out in matrices]


def attention_adapters(job: Job, layout: Layout, kv_local: Num) -> list[Adapted]:
    """The attention block's adapted matrices on one device (kv_local = max(g, t)·d_h/t), at the
    framework's adapter granularity (`Framework.lora_fused`): fused, QKV and the output projection
    (Megatron-LM, NeMo, Megatron-Bridge `linear_qkv`, `linear_proj`); separate, q, k, v and o (PEFT's
    all-linear, mlx-lm). MLA has no fused QKV at either granularity: its query down and up (or one
    query projection), KV down and up and output projections are each adapted (PEFT on DeepSeek-V3's
    q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj; Megatron-Bridge's linear_q_down_proj ...
    linear_proj); the down-projections are replicated over t, like their weights (step/mla.py)."""
    m, tp, r = job.model, layout.tp, job.lora_rank
    h = float(m.hidden)
    if m.mla is not None:
        a, heads = m.mla, m.heads / tp
        q = ([("q_down", h, float(a.q_lora_rank)), ("q_up", float(a.q_lora_rank), heads * m.qk_head_dim)]
             if a.q_lora_rank is not None else [("q", h, heads * m.qk_head_dim)])
        return _adapters(r, q + [("kv_down", h, float(a.kv_lora_rank + a.qk_rope_head_dim)),
                                 ("kv_up", float(a.kv_lora_rank), heads * (a.qk_nope_head_dim + a.v_head_dim)),
                                 ("proj", heads * a.v_head_dim, h)], ("proj",))
    width = float(m.heads * m.head_dim)
    if FRAMEWORKS[job.framework].lora_fused:
        return _adapters(r, [("qkv", h, width / tp + 2.0 * kv_local), ("proj", width / tp, h)], ("proj",))
    return _adapters(r, [("q", h, width / tp), ("k", h, kv_local), ("v", h, kv_local), ("proj", width / tp, h)],
                     ("proj",))


def mlp_adapters(job: Job, prefix: str, model_width: Num, width_local: Num) -> list[Adapted]:
    """An MLP's adapted matrices on one device (`prefix`: mlp, shared or experts; it reads and writes
    `model_width` wide rows, h or a latent, and is `width_local` wide here): fused, up/gate and down;
    separate, gate (gated MLPs), up and down."""
    k, r = job.model.mlp_matrices, job.lora_rank
    down = f"{prefix}_down"
    if FRAMEWORKS[job.framework].lora_fused:
        return _adapters(r, [(f"{prefix}_up", model_width, (k - 1.0) * width_local), (down, width_local, model_width)],
                         (down,))
    gate = [(f"{prefix}_gate", model_width, width_local)] if k > 2 else []
    return _adapters(r, [*gate, (f"{prefix}_up", model_width, width_local), (down, width_local, model_width)], (down,))


def layer_adapters(job: Job, layout: Layout, kv_local: Num, kind: str = "dense") -> tuple[list[Adapted], list[Adapted]]:
    """(the adapters of one layer of `kind` on one device but the routed experts', one local routed
    expert's) for the job's targets: attention (its block), mlp (a dense layer's MLP; a MoE layer's
    shared experts, fused into one MLP of width S·f_s as Megatron-Core runs them, and every routed
    expert's own up/gate and down, ÷t_e, as PEFT adapts each expert's gate_proj, up_proj and down_proj
    and Megatron-Bridge each expert's linear_fc1 and linear_fc2), all (both). The router (gate) is not
    adapted (PEFT's usual q, k, v, o, gate_proj, up_proj, down_proj targets and Megatron-Bridge's leave
    it out), nor the embeddings or the output layer."""
    targets, m = job.lora_targets, job.model
    attention = attention_adapters(job, layout, kv_local) if targets != "mlp" else []
    if targets == "attention":
        return attention, []
    if kind == "dense":
        return attention + mlp_adapters(job, "mlp", m.hidden, m.ffn_hidden / layout.tp), []
    moe = m.moe
    if moe is None:
        raise ValueError(f"{m.name} has no mixture-of-experts layers")
    shared = (mlp_adapters(job, "shared", m.hidden, moe.shared_experts * moe.shared_width / layout.tp)
              if moe.shared_experts else [])
    return attention + shared, mlp_adapters(job, "experts", m.expert_hidden, moe.expert_ffn_hidden / layout.etp)


def adapted_matrices(job: Job, layout: Layout, kv_local: Num) -> list[Adapted]:
    """The adapted matrices of a dense layer on one device (`layer_adapters` of kind dense)."""
    return layer_adapters(job, layout, kv_local)[0]


def kv_width_local(job: Job, layout: Layout) -> Num:
    """max(g, t)·d_h/t: the K (or V) width on one device, the KV heads replicated where g < t [elements]."""
    return xp.maximum(job.model.kv_heads, layout.tp) * job.model.head_dim / layout.tp


def _params(adapters: list[Adapted]) -> Num:
    """Σ r·(in_local + out_local) [params]."""
    return sum((a.params for a in adapters), 0.0)


def layer_adapter_params(job: Job, layout: Layout, kind: str = "dense", experts: Num | None = None) -> tuple[Num, Num]:
    """(non-expert, routed-expert) adapter parameters of one layer of `kind` on one device: the
    layer's adapters, and `experts` (default its E/e local experts) times one expert's [params]."""
    layer, expert = layer_adapters(job, layout, kv_width_local(job, layout), kind)
    if not expert:
        return _params(layer), 0.0
    moe = job.model.moe
    count: Num = (moe.experts / layout.ep if moe is not None else 0.0) if experts is None else experts
    return _params(layer), count * _params(expert)


def layer_kind_mean(job: Job, dense: Num, moe: Num) -> Num:
    """(L_d·dense + L_m·moe)/L: the mean over the model's layers of a per-layer quantity of each kind
    (a dense model: `dense`)."""
    m = job.model
    return (m.dense_layers_count * dense + m.moe_layers * moe) / m.layers


def mean_adapter_params(job: Job, layout: Layout) -> tuple[Num, Num]:
    """(non-expert, routed-expert) adapter parameters of the mean layer on one device [params]."""
    dense = layer_adapter_params(job, layout, "dense")[0] if job.model.dense_layers_count else 0.0
    if job.model.moe is None:
        return dense, 0.0
    layer, experts = layer_adapter_params(job, layout, "moe")
    return layer_kind_mean(job, dense, layer), layer_kind_mean(job, 0.0, experts)


def adapter_params_per_layer(job: Job, layout: Layout) -> Num:
    """Trained adapter parameters of the mean layer on one device but the routed experts' (those
    `expert_adapter_params_per_layer`): Σ r·(in_local + out_local) [params]."""
    return mean_adapter_params(job, layout)[0]


def expert_adapter_params_per_layer(job: Job, layout: Layout) -> Num:
    """The routed experts' adapter parameters of the mean layer on one device: L_m/L · E/e · one
    expert's Σ r·(in_local + out_local) (0 for a dense model) [params]."""
    return mean_adapter_params(job, layout)[1]


def adapter_ops(job: Job, layout: Layout, r: Rates, x: LocalShape, kind: str = "dense",
                expert_rows: Num = 0.0) -> tuple[list[Op], list[Op]]:
    """(forward, backward) ops of every adapter of one layer of `kind`, × the frozen mask: per adapted
    matrix x·A (a GEMM T×in_local by in_local×r) and (x·A)·B (T×r by r×out_local), the merge of the
    adapter output (LORA_MERGE_PASSES · e · T · width), and backward twice each GEMM with the merge's
    own traffic. A MoE layer's routed experts' adapters run as grouped GEMMs over its E/e local
    experts of `expert_rows` rows each (I·n_e: the busiest rank's, step/moe.py), at the grouped-GEMM
    efficiency like the experts themselves; their merges stream those rows."""
    frozen, e = layout.frozen, job.element_bytes
    merge_passes, merge_out_passes = LORA_MERGE_PASSES[job.kernels], LORA_MERGE_BACKWARD_OUT_PASSES[job.kernels]
    merge_in_passes = LORA_MERGE_BACKWARD_IN_PASSES[job.kernels]
    layer, expert = layer_adapters(job, layout, x.kv_local, kind)
    groups = job.model.moe.experts / layout.ep if expert and job.model.moe is not None else 1.0
    fwd: list[Op] = []
    bwd: list[Op] = []
    merge_fwd: Num = 0.0
    merge_bwd: Num = 0.0
    for adapters, rows, n, grouped in ((layer, x.tokens, 1.0, False), (expert, expert_rows, groups, True)):
        for a in adapters:
            if not grouped:
                gemms = (r.gemm_op(f"{a.name}.lora_a", rows, job.lora_rank, a.in_local),
                         r.gemm_op(f"{a.name}.lora_b", rows, a.out_local, job.lora_rank))
            else:
                eff = job.hardware.efficiency.grouped_gemm
                gemms = (grouped_gemm(r, f"{a.name}.lora_a", n, rows, job.lora_rank, a.in_local, eff),
                         grouped_gemm(r, f"{a.name}.lora_b", n, rows, a.out_local, job.lora_rank, eff))
            for op in gemms:
                fwd.append(op.scaled(frozen))
                bwd.append(op.scaled(ADAPTER_BACKWARD_RATIO * frozen, phase="backward"))
            # the output it is added to: a row-parallel layer's full-width output, ÷t with SP (not the experts')
            merged = a.out_local / layout.sp_div if a.row_parallel and not grouped else a.out_local
            merge_fwd = merge_fwd + merge_passes * e * n * rows * merged
            merge_bwd = merge_bwd + e * n * rows * (merge_out_passes * merged + merge_in_passes * a.in_local)
    for ops, bytes_moved, phase in ((fwd, merge_fwd, "forward"), (bwd, merge_bwd, "backward")):
        ops.append(op_of("lora_merge", phase, 0.0, frozen * bytes_moved,
                         streaming_time(frozen * bytes_moved, r.memory_bytes_per_s)))
    return fwd, bwd


def base_bytes_per_param(job: Job, layout: Layout) -> Num:
    """Bytes per parameter of a frozen base linear weight: 0.5 + 0.127/8 for QLoRA's NF4 with
    double quantisation, 0.5 + 0.5/8 without (`Job.double_quant` off: an FP32 absmax per 64 weights,
    bitsandbytes' quantize_4bit with compress_statistics False), 1 for an 8-bit LoRA base; an unquantised base
    (base_bits 16) is stored at the training precision's working-weight bytes w: 2, or 4 for FP32/TF32, 1 with
    fp8_params (an FP8 base: the FP8 GEMMs read it as stored, no dequantisation; Job.weight_bytes) [B]."""
    lora = INT8_BYTES_PER_PARAM if job.base_bits == 8 else job.weight_bytes
    absmax = DOUBLE_QUANT_BITS_PER_PARAM if job.double_quant else FP32_ABSMAX_BITS_PER_PARAM
    return xp.where(layout.qlora > 0, NF4_BYTES_PER_PARAM + absmax / 8.0, lora)


def quantised(job: Job, layout: Layout) -> Num:
    """1.0 where the frozen base is quantised (QLoRA, or an 8-bit LoRA base): its GEMMs dequantise."""
    return xp.maximum(layout.qlora, layout.frozen * (1.0 if job.base_bits < 16 else 0.0))


def linear_params_per_layer(model: Model) -> float:
    """Parameters of the mean layer's linear weights but the routed experts' (QKV, output projection,
    dense MLP; a MoE layer's router and shared experts): what tensor parallelism splits and a quantised
    base stores in 4 or 8 bit; the norms, embeddings and output layer stay 16-bit [params]."""
    return float(model.params_per_layer - model.expert_params_per_layer - model.layer_norm_params)


def layer_linear_params_local(job: Job, layout: Layout, kind: str = "dense") -> Num:
    """Linear weights of one layer of `kind` on one device [params]: a dense layer's attention and MLP
    ÷t; a MoE layer's attention, router and shared experts ÷t and its E/e local experts ÷t_e."""
    m = job.model
    if kind == "dense":
        return (m.attention_params + m.dense_mlp_params) / layout.tp
    return ((m.attention_params + m.router_params + m.shared_expert_params_per_moe_layer) / layout.tp
            + m.expert_params_per_moe_layer / layout.expert_group)


def dequant_op(job: Job, layout: Layout, r: Rates, phase: str, kind: str = "dense") -> Op:
    """One pass's dequantisation of a layer's quantised linear weights on one device: read the
    quantised weights (with their absmax) and write the 16-bit copy the GEMMs then read,
    (bytes per base param + e) · P_linear (`layer_linear_params_local`: a MoE layer's every local
    expert, each dequantised when it runs), memory-bound (bitsandbytes `dequantize_4bit`, then
    `.to(A.dtype)`: the copy has the GEMM input's dtype, e bytes); 0 where the base is not quantised."""
    params = layer_linear_params_local(job, layout, kind)
    bytes_moved = quantised(job, layout) * params * (base_bytes_per_param(job, layout) + job.element_bytes)
    return op_of("dequant", phase, 0.0, bytes_moved, streaming_time(bytes_moved, r.memory_bytes_per_s))


def finetune_layer_ops(job: Job, layout: Layout, r: Rates, x: LocalShape, kind: str = "dense",
                       expert_rows: Num = 0.0) -> tuple[list[Op], list[Op]]:
    """(forward, backward) ops a LoRA/QLoRA adds to one layer pass of `kind`: the adapters and, for a
    quantised base, one dequantisation per pass (the backward's data gradients need W again)."""
    fwd, bwd = adapter_ops(job, layout, r, x, kind, expert_rows)
    return (fwd + [dequant_op(job, layout, r, "forward", kind)], bwd + [dequant_op(job, layout, r, "backward", kind)])


def widest_attention_params(job: Job, layout: Layout) -> Num:
    """The largest attention weight on one device [params]: the fused QKV, h·(a + 2g)·d_h/t; MLA, which
    has none, its largest projection (the query and KV down-projections replicated over t, the
    up-projections and the output ÷t: `attention_adapters`' shapes)."""
    m = job.model
    if m.mla is None:
        return m.hidden * (m.heads + 2 * m.kv_heads) * m.head_dim / layout.tp
    widest: Num = 0.0
    for a in attention_adapters(job, layout, kv_width_local(job, layout)):
        widest = xp.maximum(widest, a.in_local * a.out_local)
    return widest


def dequant_workspace_bytes(job: Job, layout: Layout) -> Num:
    """The dequantised copy (e bytes per weight) of the largest quantised weight, alive during its GEMM
    [B] (0 unquantised): the fused QKV (MLA: its largest projection, `widest_attention_params`), a
    dense MLP matrix, a routed expert's (÷t_e) or the shared experts' matrix."""
    m = job.model
    dense = m.hidden * m.ffn_hidden / layout.tp if m.dense_layers_count else 0.0
    widest: Num = xp.maximum(dense, widest_attention_params(job, layout))
    if m.moe is not None:
        shared = m.hidden * m.moe.shared_experts * m.moe.shared_width / layout.tp
        widest = xp.maximum(xp.maximum(widest, shared), m.expert_hidden * m.moe.expert_ffn_hidden / layout.etp)
    return quantised(job, layout) * job.element_bytes * widest


def adapter_activation_bytes_per_layer(job: Job, layout: Layout, routed_rows: Num = 0.0) -> Num:
    """What the adapters of the mean layer keep for the backward, one micro-batch [B]: x·A (T×r, e bytes
    per element) per adapted matrix (B's weight gradient needs it; A's reuses the base layer's saved
    input); a MoE layer's routed experts' adapters one per expert matrix over the rows the rank's
    experts compute (`routed_rows`: t_e·I·T_in·K, all local experts', trainest/step/activations.py)."""
    kv_local = kv_width_local(job, layout)
    tokens, e, rank = layout.tokens(job), job.element_bytes, job.lora_rank
    dense = float(len(layer_adapters(job, layout, kv_local, "dense")[0])) if job.model.dense_layers_count else 0.0
    moe: Num = 0.0
    if job.model.moe is not None:
        layer, expert = layer_adapters(job, layout, kv_local, "moe")
        moe = len(layer) * tokens + len(expert) * routed_rows
    return layout.frozen * e * rank * layer_kind_mean(job, dense * tokens, moe)


def frozen_layer_bytes(job: Job, layout: Layout) -> Num:
    """Stored bytes of the mean frozen layer on one device but its routed experts': its linear weights
    at the base's bytes per parameter, its norms at the working-weight bytes w (what ZeRO-3/FSDP
    gathers, and what weight offload fetches) [B]."""
    linear = linear_params_per_layer(job.model) / layout.tp
    rest = job.model.layer_norm_params / layout.tp
    return linear * base_bytes_per_param(job, layout) + rest * weight_bytes_per_param(job.precision)


def frozen_expert_layer_bytes(job: Job, layout: Layout) -> Num:
    """Stored bytes of the mean frozen layer's routed experts on one device: L_m·E·k·h·f_e/L ÷ e·t_e at
    the base's bytes per parameter (0 for a dense model) [B]."""
    return job.model.expert_params_per_layer / layout.expert_group * base_bytes_per_param(job, layout)


def frozen_weight_bytes(job: Job, layout: Layout, params_local: Num) -> Num:
    """Bytes of the frozen base weights of the heaviest stage on one device but its routed experts',
    before ZeRO-3 sharding: the layers' linear weights at the base's bytes per parameter, the rest
    (norms, embeddings, output layer) at the working-weight bytes w; DualPipe's two stages' layers
    (`dualpipe_copies`, as `params_local` counts them) [B]."""
    heavy, _ = stage_layers(job.model, layout.pp, layout.vpp, layout.split)
    linear = dualpipe_copies(layout) * heavy * linear_params_per_layer(job.model) / layout.tp
    return linear * base_bytes_per_param(job, layout) + (params_local - linear) * weight_bytes_per_param(job.precision)


def adapter_params_local(job: Job, layout: Layout) -> Num:
    """Trained adapter parameters on one device of the heaviest stage but the routed experts' (its
    layers × the mean layer's; × 2 with DualPipe, whose devices hold two stages, `dualpipe_copies`)."""
    heavy, _ = stage_layers(job.model, layout.pp, layout.vpp, layout.split)
    return dualpipe_copies(layout) * heavy * adapter_params_per_layer(job, layout)


def expert_adapter_params_local(job: Job, layout: Layout) -> Num:
    """The routed experts' trained adapter parameters on one device of the heaviest stage (× 2 with
    DualPipe, `dualpipe_copies`)."""
    heavy, _ = stage_layers(job.model, layout.pp, layout.vpp, layout.split)
    return dualpipe_copies(layout) * heavy * expert_adapter_params_per_layer(job, layout)


def trainable_params_local(job: Job, layout: Layout, params_local: Num) -> Num:
    """Parameters this device trains but the routed experts' (gradients, optimizer state, gradient
    reduction): all of the stage's for a full fine-tune, the adapters' for LoRA/QLoRA [params]."""
    if xp.off(layout.finetune):
        return params_local
    return xp.where(layout.frozen > 0, adapter_params_local(job, layout), params_local)


def trainable_expert_params_local(job: Job, layout: Layout, expert_local: Num) -> Num:
    """The routed-expert parameters this device trains (reduced over the expert data-parallel group):
    its stage's `expert_local` for a full fine-tune, their adapters' for LoRA/QLoRA [params]."""
    if xp.off(layout.finetune) or job.model.moe is None:
        return expert_local
    return xp.where(layout.frozen > 0, expert_adapter_params_local(job, layout), expert_local)


def _whole(layout: Layout) -> Layout:
    """The layout with nothing split (t = e = t_e = 1): whole-model widths."""
    return layout._replace(tp=1.0, sp=0.0, ep=1.0, etp=1.0)


def trainable_params(job: Job, layout: Layout) -> Num:
    """Parameters the run trains, whole model (not per device): every parameter P for a full
    fine-tune; for LoRA/QLoRA the adapters', L_d·(a dense layer's) + L_m·(a MoE layer's + E × a
    routed expert's), at t = e = t_e = 1 [params]."""
    if xp.off(layout.finetune):
        return float(job.model.params)
    dense, experts = mean_adapter_params(job, _whole(layout))
    return xp.where(layout.frozen > 0, job.model.layers * (dense + experts), float(job.model.params))


def adapter_flops_per_token(job: Job, layout: Layout) -> Num:
    """Forward FLOPs of the mean layer's adapters per token, whole layer (t = 1): Σ 2·r·(in + out) over
    its adapted matrices, a MoE layer's routed experts' K times (a token runs through K experts)."""
    whole = _whole(layout)
    dense = layer_adapter_params(job, whole, "dense")[0] if job.model.dense_layers_count else 0.0
    moe: Num = 0.0
    if job.model.moe is not None:
        layer, experts = layer_adapter_params(job, whole, "moe", experts=float(job.model.moe.top_k))
        moe = layer + experts
    return 2.0 * layer_kind_mean(job, dense, moe)


def active_linear_params(model: Model) -> float:
    """The linear weights one token's forward multiplies in the layers (dense: the layers' linear
    weights; MoE: its K routed experts, not the E): active params less the norms and the embedding
    tables [params]."""
    return float(model.active_params - model.layers * model.layer_norm_params - model.embedding_params)


def finetune_flops_delta(job: Job, layout: Layout) -> tuple[Num, Num]:
    """(model, hardware) FLOPs per step that fine-tuning adds to the full-training count, all
    devices [FLOP]: − the frozen weight-gradient GEMMs (one forward's worth of the layers' active
    linear GEMMs and of the logits), + 3× the adapters' forward (forward, data and weight gradients);
    recomputation re-runs the adapters' forward too (hardware FLOPs)."""
    m, tokens = job.model, job.tokens_per_step
    linear_fwd = 2.0 * tokens * (active_linear_params(m) + m.hidden * m.vocab)
    adapters = tokens * m.layers * adapter_flops_per_token(job, layout)
    model = layout.frozen * (3.0 * adapters - linear_fwd)
    return model, model + layout.frozen * layout.full * adapters


def quantised_input_bytes_per_layer(job: Job, layout: Layout) -> Num:
    """The 16-bit inputs of one layer's quantised linears for one micro-batch [B]: the QKV and MLP-up inputs
    (h wide, ÷t with SP), the output projection's (a·d_h/t) and the MLP-down's (f/t), e bytes each; what
    bitsandbytes' MatMul4Bit/MatMul8bitLt keep as a ctx attribute until their graph is released (frameworks.py
    `holds_last_graph`). A MoE layer's routed experts' inputs are not counted. 0 where the base is not quantised."""
    m = job.model
    widths = 2.0 * m.hidden / layout.sp_div + (m.heads * m.head_dim + m.ffn_hidden) / layout.tp
    return quantised(job, layout) * job.element_bytes * layout.tokens(job) * widths


def stable_embedding_bytes(job: Job, layout: Layout) -> Num:
    """One 16-bit token embedding on one device, V·h/t·e [B], where the base is quantised and the framework
    swaps in bitsandbytes' StableEmbedding (`Framework.qlora_stable_embedding`, litgpt): it holds one such
    tensor more among the weights (the replaced embedding) and one among the gradients (the new one's); else 0."""
    if not FRAMEWORKS[job.framework].qlora_stable_embedding:
        return 0.0 * layout.tp
    return quantised(job, layout) * job.element_bytes * job.model.vocab * job.model.hidden / layout.tp
