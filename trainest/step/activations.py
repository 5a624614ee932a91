"""Activations one layer keeps for its backward (docs/model.md §7.3): Korthikanti et al. 2022 eq. 1–2
generalised to GQA, gated MLPs, FP8 inputs, each recompute mode and LoRA adapters. Here, in the step
package, because the step needs it too (activation offload, §14); `trainest.memory` re-exports it."""

from __future__ import annotations

from trainest import xp
from trainest.frameworks import FRAMEWORKS
from trainest.layout import Job, Layout, Num
from trainest.record import NamedTuple
from trainest.step.finetune import adapter_activation_bytes_per_layer
from trainest.step.moe import expert_load_factor
from trainest.step.remat import remat_kept_bytes

DROPOUT_MASK_BYTES = 1.0         # one byte per element
FP8_SAVED_INPUT_BYTES = 1.0      # FP8/FP4 recipes (Transformer Engine) keep the GEMM inputs saved for
                                 # the backward pass as their FP8 copies, not in 16 bit
EAGER_NORM_INPUT_BYTES = 4.0     # an eager PyTorch RMSNorm/LayerNorm keeps its input upcast to FP32 (eager_extra_bytes)


def eager_extra_bytes(job: Job, layout: Layout) -> Num:
    """What one layer keeps for one micro-batch beyond the fused count when its modules run operator by operator
    under PyTorch autograd (kernels eager, `Framework.torch_eager`) [B] (docs/model.md §7.3):
      each norm's input upcast to FP32 (Hugging Face's LlamaRMSNorm, litgpt's and torchtune's RMSNorm:
        `x.float()`, then `x * rsqrt(mean(x²) + eps)` saves the FP32 x) and the normalised input the weight
        multiply saves for the weight's gradient, in 16 bit (`weight * x_normed.to(dtype)`) or, where the
        framework multiplies in FP32 (`Framework.eager_norm_fp32_weight`, litgpt), in FP32:
        2·((4 − e) + e or 4)·T·h (÷t with SP) more;
      under standard attention the attention output twice: `attn @ v` leaves it head-major and the output
        projection keeps its token-major copy (`transpose(1, 2).contiguous()`): e·T·a·d_h/t more. SDPA's
        flash and memory-efficient kernels write their output token-major (a head-major view of it), so that
        `contiguous()` copies nothing (counted: tools/saved_tensors.py);
      SwiGLU's SiLU output, saved for the product apart from the gate output it came from (`act(gate(x)) *
        up(x)`): e·T·f/t more (0 for a GeLU MLP).
    0 with fused kernels (Megatron/TE, torch.compile, XLA fuse them or recompute them in the backward). Dense
    layers only: the MoE and hybrid paths do not add it."""
    framework = FRAMEWORKS[job.framework]
    if job.kernels != "eager" or not framework.torch_eager:
        return 0.0 * layout.tp
    model, e = job.model, job.element_bytes
    normalised = EAGER_NORM_INPUT_BYTES if framework.eager_norm_fp32_weight else e
    norms = 2.0 * (max(EAGER_NORM_INPUT_BYTES - e, 0.0) + normalised) * model.hidden / layout.sp_div
    copy = model.heads * model.head_dim if job.attention == "standard" else 0.0
    split = e * (copy + (model.ffn_hidden if model.mlp == "swiglu" else 0.0)) / layout.tp
    return layout.tokens(job) * (norms + split)


def saved_kv_width(job: Job, layout: Layout) -> Num:
    """The width of K and V a layer keeps for its backward, both together [elements per token, of the whole
    layer: ÷t per device]: 2·max(g, t)·d_h (KV heads replicated when g < t), or where the framework's
    attention copies each KV head to its query heads before SDPA (`Framework.expands_kv_heads`: Hugging Face's
    repeat_kv, litgpt's and torchtune's expand) 2·a·d_h, the width SDPA's backward reads."""
    m = job.model
    if FRAMEWORKS[job.framework].expands_kv_heads and m.kv_heads < m.heads:
        return 2.0 * m.heads * m.head_dim + 0.0 * layout.tp
    return 2.0 * xp.maximum(m.kv_heads, layout.tp) * m.head_dim


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
    LoRA/QLoRA add e·T·r per adapted matrix (x·A); the base layer's saved tensors are counted as
    for full training (conservative: a framework that does not save the inputs of frozen, unadapted
    linear layers keeps less).
    """
    if job.model.hybrid is not None:
        return hybrid_activation_bytes_per_block(job, layout)
    if job.model.moe is not None or job.model.mla is not None:
        return mean_activation_bytes_per_layer(job, layout)
    model, tp, cp, seq_len, micro_batch = job.model, layout.tp, layout.cp, job.seq_len, layout.micro_batch
    e = job.element_bytes
    g8 = FP8_SAVED_INPUT_BYTES if job.low_precision else e      # bytes of a saved GEMM input
    h, f = model.hidden, model.ffn_hidden
    tokens = layout.tokens(job)
    sp_div = layout.sp_div
    # two norm inputs (16 bit), two norm outputs = QKV and MLP-up inputs, two dropout masks
    mask = DROPOUT_MASK_BYTES if model.dropout else 0.0
    replicated = replicated_bytes(job, layout, g8, mask)
    q_width = model.heads * model.head_dim
    kv_width = saved_kv_width(job, layout)     # KV heads replicated when g < t, or expanded (§7.3)
    # Q, K, V and the MLP-up outputs in 16 bit; the attention output and the MLP-down input as GEMM inputs
    split = tokens * (e * (q_width + kv_width + (model.mlp_matrices - 1.0) * f) + g8 * (q_width + f)) / tp
    scores: Num = 0.0
    scores_all: Num = 0.0
    if job.attention == "standard":
        # softmax output, and with dropout its dropped-out copy and mask
        scores_all = ((e + e + mask) if model.dropout else e) * micro_batch * (model.heads / tp) * (seq_len / cp) \
            * seq_len
        scores = scores_all * scores_kept(job, layout)
    stored = replicated + split + scores - layout.selective * (
        job.recomputes("layernorm") * norm_output_bytes(job, layout)
        + job.recomputes("mlp") * dense_mlp_activation_bytes(job, layout)[0])
    full_input = e * tokens * h / sp_div
    op_saved = full_input + e * tokens * ((2.0 * q_width + kv_width / 2.0 + f) / tp
                                          + (h if model.mlp == "swiglu" else 0.0))
    eager = eager_extra_bytes(job, layout)
    stored = stored + eager
    if job.remat_policy != "auto":      # MaxText's policy: what it saves (§7.11)
        stored = remat_kept_bytes(job, layout, full_input)
    # the layer being recomputed during backward re-materialises everything, scores included
    rematerialised = replicated + split + scores_all + eager
    if not xp.off(layout.finetune):      # LoRA/QLoRA: each adapter keeps x·A (T×r) for B's weight gradient
        adapters = adapter_activation_bytes_per_layer(job, layout)
        stored, op_saved, rematerialised = stored + adapters, op_saved + adapters, rematerialised + adapters
    kept = xp.where(layout.full_mask > 0, partial_full(layout, full_input, rematerialised),
                    xp.where(layout.op > 0, op_saved, stored))
    return kept, rematerialised


def replicated_bytes(job: Job, layout: Layout, g8: float, mask: float) -> Num:
    """The h-wide tensors of a layer kept for backward [B]: two norm inputs (e), two norm outputs as the QKV and
    MLP-up GEMM inputs (g8), two dropout masks, each ÷t with sequence parallelism; where the framework's
    column-parallel linears save their all-gathered inputs (`Framework.saves_gathered_inputs`, torchtitan's DTensor
    sequence parallelism) the two GEMM inputs are kept at full sequence length: 2·g8·T·h (§7.3)."""
    tokens, h, sp_div = layout.tokens(job), job.model.hidden, layout.sp_div
    gathered = sp_div if not FRAMEWORKS[job.framework].saves_gathered_inputs else 1.0
    return (2.0 * job.element_bytes + 2.0 * mask) * tokens * h / sp_div + 2.0 * g8 * tokens * h / gathered


def partial_full(layout: Layout, full_input: Num, whole: Num) -> Num:
    """What the mean layer keeps under full recompute of a share f of the stage's layers (Layout.full): f of them
    the layer input, the rest everything (`whole`, what a layer holds when not recomputed) [B] (§7.10)."""
    return layout.full * full_input + (1.0 - layout.full) * whole


class ActivationParts(NamedTuple):
    """Activations of one layer for one micro-batch on one device, by part [B] (docs/model.md §7.3, §15.6)."""

    replicated: Num             # norm inputs and outputs, dropout masks (÷t only with SP)
    scores: Num                 # standard attention's s×s tensors kept (0 under recompute or fused attention)
    scores_all: Num             # the same, when the layer is re-materialised
    full_input: Num             # the layer input, all that full recompute keeps


def common_activation_parts(job: Job, layout: Layout) -> ActivationParts:
    """The parts every kind of layer shares: the replicated h-wide tensors, the attention scores of
    standard attention, the layer input (the formulas of activation_bytes_per_layer)."""
    model, e = job.model, job.element_bytes
    g8 = FP8_SAVED_INPUT_BYTES if job.low_precision else e
    tokens, sp_div = layout.tokens(job), layout.sp_div
    mask = DROPOUT_MASK_BYTES if model.dropout else 0.0
    replicated = replicated_bytes(job, layout, g8, mask)
    scores: Num = 0.0
    scores_all: Num = 0.0
    if job.attention == "standard":
        scores_all = ((e + e + mask) if model.dropout else e) * layout.micro_batch * (model.heads / layout.tp) \
            * (job.seq_len / layout.cp) * job.seq_len
        scores = scores_all * scores_kept(job, layout)
    return ActivationParts(replicated=replicated, scores=scores, scores_all=scores_all,
                           full_input=e * tokens * model.hidden / sp_div)


def scores_kept(job: Job, layout: Layout) -> Num:
    """1 where standard attention's s×s tensors are kept for the backward: no recompute, or selective
    recompute whose modules leave out the attention core; else 0."""
    return layout.no_recompute + layout.selective * (1.0 - job.recomputes("core_attn"))


def norm_output_bytes(job: Job, layout: Layout) -> Num:
    """The two norms' outputs (the QKV and MLP-up GEMM inputs, g8 bytes each) a layer keeps, which
    layernorm recompute drops: 2·g8·T·h (÷t with SP) [B]."""
    g8 = FP8_SAVED_INPUT_BYTES if job.low_precision else job.element_bytes
    return 2.0 * g8 * layout.tokens(job) * job.model.hidden / layout.sp_div


def selective_savings(job: Job, layout: Layout) -> tuple[Num, Num, Num, Num]:
    """What selective recompute's modules (besides the attention core) drop from a layer's kept
    activations, per micro-batch [B]: (common: the norm outputs with layernorm; attention: MLA's
    per-head queries, keys and KV up-projection output with mla_up_proj, e·T·(a/t)·(2·d_qk + d_n + d_v);
    a dense MLP's activations with mlp; a MoE block's: the routed experts' activation output (the
    down-projection input, g8·c·f_e) with moe_act and the shared experts' with shared_experts; all it
    keeps with moe). Each is × the selective mask."""
    m, e = job.model, job.element_bytes
    g8 = FP8_SAVED_INPUT_BYTES if job.low_precision else e
    tokens, sel = layout.tokens(job), layout.selective
    common = job.recomputes("layernorm") * norm_output_bytes(job, layout)
    attention: Num = 0.0
    if m.mla is not None and job.recomputes("mla_up_proj"):
        a = m.mla
        attention = e * tokens * m.heads / layout.tp * (2.0 * m.qk_head_dim + a.qk_nope_head_dim + m.v_head_dim)
    dense = job.recomputes("mlp") * dense_mlp_activation_bytes(job, layout)[0]
    moe: Num = 0.0
    if m.moe is not None:
        intermediate = (m.mlp_matrices - 1.0) * e + g8
        shared = tokens * m.moe.shared_experts * m.moe.shared_width / layout.tp
        moe = (job.recomputes("moe_act") * g8 * moe_copies(job, layout) * m.moe.expert_ffn_hidden
               + job.recomputes("shared_experts") * shared * intermediate)
        if job.recomputes("moe"):                   # the whole block: all it keeps beyond its input
            moe = moe_mlp_activation_bytes(job, layout)[0]
    return sel * common, sel * attention, sel * dense, sel * moe


def attention_activation_bytes(job: Job, layout: Layout) -> tuple[Num, Num]:
    """(kept, kept by op recompute) of the attention block beyond the replicated part [B].
    Standard / GQA: e·T·(a·d_h + 2·g_t·d_h)/t + g8·T·a·d_h/t (Q, K, V; the context as GEMM input);
    op keeps Q, V and the context: e·T·(2·a·d_h + g_t·d_h)/t.
    MLA: e·T·a·(2·d_qk + d_n + d_v)/t + g8·T·a·d_v/t (Q and K after RoPE; the KV up-projection's
    output, of which V is a view; the context) plus the latents, replicated over t like their
    projections: T·(e·(r_q + r_kv + d_r) + g8·(r_q + r_kv)) (the down-projections' outputs and their
    normed copies, the up-projections' inputs); op keeps Q, V and the context: e·T·a·(d_qk + 2·d_v)/t."""
    m, e = job.model, job.element_bytes
    g8 = FP8_SAVED_INPUT_BYTES if job.low_precision else e
    tokens, tp = layout.tokens(job), layout.tp
    if m.mla is None:
        q_width = m.heads * m.head_dim
        kv_width = saved_kv_width(job, layout)
        return (tokens * (e * (q_width + kv_width) + g8 * q_width) / tp,
                e * tokens * (2.0 * q_width + kv_width / 2.0) / tp)
    a = m.mla
    heads, d_qk, d_v = m.heads / tp, m.qk_head_dim, m.v_head_dim
    latent = (a.q_lora_rank or 0) + a.kv_lora_rank
    split = tokens * heads * (e * (2.0 * d_qk + a.qk_nope_head_dim + d_v) + g8 * d_v)
    latents = tokens * (e * (latent + a.qk_rope_head_dim) + g8 * latent)
    return split + latents, e * tokens * heads * (d_qk + 2.0 * d_v)


def dense_mlp_activation_bytes(job: Job, layout: Layout) -> tuple[Num, Num]:
    """(kept, kept by op recompute) of a dense MLP [B]: e·T·(k_f − 1)·f/t + g8·T·f/t (the up
    projections' outputs; the down projection's input); op keeps the first matmul's output and with
    SwiGLU the down projection's h-wide output: e·T·(f/t [+ h])."""
    m, e = job.model, job.element_bytes
    g8 = FP8_SAVED_INPUT_BYTES if job.low_precision else e
    tokens, f = layout.tokens(job), m.ffn_hidden
    return (tokens * (e * (m.mlp_matrices - 1.0) * f + g8 * f) / layout.tp,
            e * tokens * (f / layout.tp + (m.hidden if m.mlp == "swiglu" else 0.0)))


ROUTER_ACTIVATION_BYTES_PER_SCORE = 8.0   # FP32 router probabilities and routing map kept for the backward (aux loss)
ROUTING_PROB_BYTES = 4.0   # FP32 probability of each routed row, kept by the probability-weighted expert activation


def moe_mlp_activation_bytes(job: Job, layout: Layout) -> tuple[Num, Num]:
    """(kept, kept by op recompute) of one MoE block on the busiest rank [B], with c = I·T_in·K its
    routed token copies (step/moe.py): the router's scores ROUTER_ACTIVATION_BYTES_PER_SCORE·T_in·E;
    the experts' input rows g8·t_e·c·h (what the dispatch received); their up projections' outputs and
    the down projection's input c·f_e·((k_f − 1)·e + g8); the routing probabilities of the routed
    rows ROUTING_PROB_BYTES·t_e·c, which weight the experts' activation (Megatron-Core's grouped MLP
    multiplies the permuted probabilities into its fused SwiGLU; torchtitan scales the routed inputs
    before the experts), so the combine is an unweighted un-permutation whose backward is a gather
    of the output gradient and keeps no expert outputs; the shared experts as a dense MLP of width
    S·f_s. Op keeps the router's scores, the first matmul's outputs e·(c·f_e + T·S·f_s/t) and with
    SwiGLU the h-wide outputs e·(T_in·K + T)·h."""
    m, moe, e = job.model, job.model.moe, job.element_bytes
    if moe is None:
        raise ValueError(f"{m.name} has no mixture-of-experts layers")
    g8 = FP8_SAVED_INPUT_BYTES if job.low_precision else e
    tokens = layout.tokens(job)
    t_in = tokens / layout.tp
    copies = moe_copies(job, layout)
    shared = tokens * moe.shared_experts * moe.shared_width / layout.tp
    router = ROUTER_ACTIVATION_BYTES_PER_SCORE * t_in * moe.experts
    intermediate = (m.mlp_matrices - 1.0) * e + g8
    latent = g8 * t_in * moe.latent_size if moe.latent_size is not None else 0.0   # LatentMoE's up-projection input
    kept = (router + g8 * layout.etp * copies * m.expert_hidden + copies * moe.expert_ffn_hidden * intermediate
            + ROUTING_PROB_BYTES * layout.etp * copies + shared * intermediate + latent)
    swiglu = e * (t_in * moe.top_k * m.expert_hidden + tokens * m.hidden) if m.mlp == "swiglu" else 0.0
    return kept, router + e * (copies * moe.expert_ffn_hidden + shared) + swiglu


def moe_copies(job: Job, layout: Layout) -> Num:
    """I·T_in·K: the busiest rank's routed token copies per micro-batch (step/moe.py: routed_copies)."""
    moe = job.model.moe
    if moe is None:
        return 0.0
    return expert_load_factor(moe) * layout.tokens(job) / layout.tp * moe.top_k


def dispatch_buffer_bytes(job: Job, layout: Layout) -> Num:
    """The all-to-all send and receive buffers of the MoE layer being computed [B]: the T_in·K
    permuted rows sent and the t_e·I·T_in·K rows received, e·h each (0 for a dense model)."""
    moe = job.model.moe
    if moe is None:
        return 0.0
    t_in = layout.tokens(job) / layout.tp
    return job.element_bytes * job.model.expert_hidden * (t_in * moe.top_k + layout.etp * moe_copies(job, layout))


def mean_activation_bytes_per_layer(job: Job, layout: Layout) -> tuple[Num, Num]:
    """(kept, re-materialised) of the mean layer of a MoE and/or MLA model [B]: the common parts, the
    attention block's and the MLP's (dense layers weighted L_d/L, MoE layers L_m/L); under full
    recompute the layer input, under op recompute what its policy saves (activation_bytes_per_layer);
    a LoRA's adapters' x·A in every mode (`adapter_activation_bytes_per_layer`)."""
    model = job.model
    common = common_activation_parts(job, layout)
    attention, attention_op = attention_activation_bytes(job, layout)
    saved_common, saved_attention, saved_dense, saved_moe = selective_savings(job, layout)
    kinds = [(model.dense_layers_count / model.layers, *dense_mlp_activation_bytes(job, layout), saved_dense)]
    if model.moe is not None:
        kinds.append((model.moe_layers / model.layers, *moe_mlp_activation_bytes(job, layout), saved_moe))
    kept: Num = 0.0
    rematerialised: Num = 0.0
    for weight, mlp, mlp_op, saved_mlp in kinds:
        stored = (common.replicated + attention + mlp + common.scores
                  - (saved_common + saved_attention + saved_mlp))
        op_saved = common.full_input + attention_op + mlp_op
        whole = common.replicated + attention + mlp + common.scores_all
        kept = kept + weight * xp.where(layout.full_mask > 0, partial_full(layout, common.full_input, whole),
                                        xp.where(layout.op > 0, op_saved, stored))
        rematerialised = rematerialised + weight * whole
    if not xp.off(layout.finetune):      # LoRA/QLoRA: x·A of each adapter, the routed experts' over their rows
        adapters = adapter_activation_bytes_per_layer(job, layout, layout.etp * moe_copies(job, layout))
        kept, rematerialised = kept + adapters, rematerialised + adapters
    return kept, rematerialised


def mamba_activation_bytes(job: Job, layout: Layout) -> Num:
    """What a Mamba-2 mixer keeps for its backward beyond its block's norm [B] (mamba_ssm's fused
    mamba_split_conv1d_scan_combined saves the input projection's output and the scan's output and
    recomputes the convolution; the output projection keeps its input): e·T·(2·d_in + 2GN + H)/t +
    e·T·d_in/t + g8·T·d_in/t."""
    b, e = job.model.mamba, job.element_bytes
    g8 = FP8_SAVED_INPUT_BYTES if job.low_precision else e
    tokens = layout.tokens(job)
    return tokens * (e * (b.in_proj_width + b.inner) + g8 * b.inner) / layout.tp


def hybrid_activation_bytes_per_block(job: Job, layout: Layout) -> tuple[Num, Num]:
    """(kept, re-materialised) of a hybrid model's mean block [B]: every block keeps half a transformer
    layer's replicated tensors (its one norm's input and output, its dropout mask), then by kind (each
    weighted by its share of the blocks): attention its block's tensors and standard attention's scores,
    a dense or MoE MLP its tensors (as in a transformer layer), a Mamba-2 mixer `mamba_activation_bytes`;
    full recompute keeps each block's input. Selective recompute's savings are a transformer layer's,
    halved for the norms."""
    model = job.model
    common = common_activation_parts(job, layout)
    half = 0.5 * common.replicated
    saved_common, saved_attention, saved_dense, saved_moe = selective_savings(job, layout)
    attention, _ = attention_activation_bytes(job, layout)
    dense = dense_mlp_activation_bytes(job, layout)[0]
    mamba = mamba_activation_bytes(job, layout)
    # (blocks, kept without full recompute, held while re-materialised)
    kinds = [(model.attention_layers, attention + common.scores - saved_attention, attention + common.scores_all),
             (model.dense_layers_count, dense - saved_dense, dense), (model.mamba_layers, mamba, mamba)]
    if model.moe is not None:
        moe = moe_mlp_activation_bytes(job, layout)[0]
        kinds.append((model.moe_layers, moe - saved_moe, moe))
    kept: Num = 0.0
    rematerialised: Num = 0.0
    for count, stored, full in kinds:
        w = count / model.layers
        kept = kept + w * xp.where(layout.full_mask > 0, partial_full(layout, common.full_input, half + full),
                                   half - 0.5 * saved_common + stored)
        rematerialised = rematerialised + w * (half + full)
    return kept, rematerialised
