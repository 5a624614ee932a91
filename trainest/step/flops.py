"""FLOPs of a training step (docs/model.md §1): model FLOPs (forward + backward, no recompute) and
the hardware FLOPs that recomputation and materialised attention scores add. A mixture-of-experts
model counts the weights each token uses (its active parameters, §15.1), and multi-head latent
attention its own projections and head widths (§15.5).
Sources: Narayanan et al. 2021 §5.1 (per-layer count), Korthikanti et al. 2022 (MFU vs HFU)."""

from __future__ import annotations

from trainest.layout import Job, Layout, Num
from trainest.models import Model
from trainest.step.rates import window_fraction

CAUSAL_FRACTION = 0.5              # causal attention computes about half of the s×s scores


def mean_window_fraction(model: Model, seq_len: float) -> float:
    """The share of the causal scores the model's mean attention layer computes: (L_a − L_w + L_w·φ_w)/L_a,
    φ_w the window's share over s tokens (rates.window_fraction; unpacked: model FLOPs do not count packing);
    1 without a window [1]."""
    window = model.attention_window
    if window is None:
        return 1.0
    windowed = model.windowed_layers / model.attention_layers
    return 1.0 - windowed + windowed * window_fraction(window.kind, float(window.size), float(seq_len))


def attention_core_flops_per_token(model: Model, seq_len: Num, causal_fraction: float = 1.0) -> Num:
    """2·s·a·(d_qk + d_v)·φ: Q·Kᵀ over d_qk and softmax·V over d_v of one token's row [FLOP]
    (= 4·s·a·d_h·φ without MLA)."""
    return 2.0 * seq_len * model.heads * (model.qk_head_dim + model.v_head_dim) * causal_fraction


def mla_projection_params(model: Model) -> float:
    """The weights of MLA's five projections (its GEMMs; the latent norms excluded): h·r_q +
    r_q·a·d_qk (or h·a·d_qk), h·(r_kv + d_r), r_kv·a·(d_n + d_v), a·d_v·h [params]."""
    a, h, heads = model.mla, model.hidden, model.heads
    if a is None:
        raise ValueError(f"{model.name} has no multi-head latent attention")
    q = h * heads * a.qk_head_dim if a.q_lora_rank is None else a.q_lora_rank * (h + heads * a.qk_head_dim)
    return float(q + h * (a.kv_lora_rank + a.qk_rope_head_dim)
                 + a.kv_lora_rank * heads * (a.qk_nope_head_dim + a.v_head_dim) + heads * a.v_head_dim * h)


def moe_mlp_params_per_token(model: Model) -> float:
    """The MLP weights one token uses in a MoE layer: router h·E + K·k_f·h·f_e + S·k_f·h·f_s [params]."""
    moe = model.moe
    if moe is None:
        raise ValueError(f"{model.name} has no mixture-of-experts layers")
    return float(model.router_params + moe.top_k * model.params_per_expert
                 + model.shared_expert_params_per_moe_layer)


def mean_mlp_params_per_token(model: Model) -> float:
    """(L_d·k_f·h·f + L_m·moe_mlp_params_per_token) / L: the MLP weights a token uses in the mean layer."""
    dense = float(model.dense_mlp_params)
    if model.moe is None:
        return dense
    return (model.dense_layers_count * dense + model.moe_layers * moe_mlp_params_per_token(model)) / model.layers


def ssd_flops_per_token(model: Model, causal_fraction: float = CAUSAL_FRACTION) -> float:
    """Forward FLOPs of the Mamba-2 chunked scan (SSD, Dao & Gu 2024 §6) per token, all heads [FLOP]:
    within each chunk of Q tokens C·Bᵀ per group (2·Q·N per token and group, computed in full) and the
    masked scores times X per head (2·Q·P·φ: the causal half of the Q×Q block); between chunks each
    head's chunk state Bᵀ·X and its output C·state (2·N·P each):
        2·G·Q·N + H·(2·Q·P·φ + 4·N·P)."""
    if model.hybrid is None:
        raise ValueError(f"{model.name} has no Mamba-2 blocks")
    b = model.mamba
    return float(2.0 * b.groups * b.chunk * b.state_dim
                 + b.heads * (2.0 * b.chunk * b.head_dim * causal_fraction + 4.0 * b.state_dim * b.head_dim))


def mamba_projection_params(model: Model) -> float:
    """The weights of a Mamba-2 block's two GEMMs: in_proj h·(2·d_in + 2GN + H) and out_proj d_in·h [params]."""
    if model.hybrid is None:
        raise ValueError(f"{model.name} has no Mamba-2 blocks")
    b = model.mamba
    return float(model.hidden * (b.in_proj_width + b.inner))


def mamba_block_flops_per_token(model: Model, causal_fraction: float = CAUSAL_FRACTION) -> float:
    """Forward FLOPs of one Mamba-2 block per token: its two GEMMs 2·(h·(2·d_in + 2GN + H) + d_in·h),
    the causal convolution 2·k·(d_in + 2GN) and the scan (ssd_flops_per_token) [FLOP]."""
    b = model.mamba
    return (2.0 * mamba_projection_params(model) + 2.0 * b.conv_kernel * b.conv_channels
            + ssd_flops_per_token(model, causal_fraction))


def attention_projection_params(model: Model) -> float:
    """The attention block's projection weights: h·(a + 2g)·d_h + a·d_h·h, or MLA's [params]."""
    if model.mla is not None:
        return mla_projection_params(model)
    return float(model.hidden * (model.heads + 2 * model.kv_heads) * model.head_dim
                 + model.heads * model.head_dim * model.hidden)


def hybrid_block_flops_forward(model: Model, tokens: Num, seq_len: Num, causal_fraction: float = 1.0) -> Num:
    """Forward FLOPs of a hybrid model's mean block for `tokens` tokens [FLOP]: the shares of its
    attention blocks (projections and core), dense MLP blocks (2·k·h·f), MoE blocks (2·P_mlp,token)
    and Mamba-2 blocks (mamba_block_flops_per_token), each its count over the L blocks."""
    L = model.layers
    attention = model.attention_layers / L * (2.0 * attention_projection_params(model)
                                             + attention_core_flops_per_token(model, seq_len, causal_fraction))
    dense = model.dense_layers_count / L * 2.0 * model.dense_mlp_params
    moe = model.moe_layers / L * 2.0 * moe_mlp_params_per_token(model) if model.moe is not None else 0.0
    mamba = model.mamba_layers / L * mamba_block_flops_per_token(model)
    return tokens * (attention + dense + moe + mamba)


def layer_flops_forward(model: Model, tokens: Num, seq_len: Num, causal_fraction: float = 1.0) -> Num:
    """Forward FLOPs of one layer for `tokens` tokens of length-`seq_len` sequences, whole layer:
    2·T·h·(a + 2g)·d_h + 4·T·s·a·d_h·causal + 2·T·a·d_h·h + 2·k·T·h·f (Narayanan 2021 §5.1;
    with a·d_h = h and g = a this is 24·T·h² + 4·T·s·h for GeLU, f = 4h) [FLOP]. A MoE or MLA model:
    the mean layer, 2·T·(attention projections + mean_mlp_params_per_token) + T·attention core; a
    hybrid model its mean block (hybrid_block_flops_forward)."""
    if model.hybrid is not None:
        return hybrid_block_flops_forward(model, tokens, seq_len, causal_fraction)
    if model.moe is not None or model.mla is not None:
        return mean_layer_flops_forward(model, tokens, seq_len, causal_fraction)
    h, f = model.hidden, model.ffn_hidden
    q_width = model.heads * model.head_dim
    qkv = 2.0 * tokens * h * (q_width + 2.0 * model.kv_heads * model.head_dim)
    attn = 4.0 * tokens * seq_len * q_width * causal_fraction
    return qkv + attn + 2.0 * tokens * q_width * h + 2.0 * model.mlp_matrices * tokens * h * f


def mean_layer_flops_forward(model: Model, tokens: Num, seq_len: Num, causal_fraction: float = 1.0) -> Num:
    """Forward FLOPs of the mean layer of a MoE and/or MLA model [FLOP]: 2·T·(P_attn + P_mlp,token) +
    T·attention core, with P_attn the attention projections' weights (standard: h·(a + 2g)·d_h +
    a·d_h·h; MLA: mla_projection_params) and P_mlp,token = mean_mlp_params_per_token."""
    if model.mla is None:
        projections = float(model.hidden * (model.heads + 2 * model.kv_heads) * model.head_dim
                            + model.heads * model.head_dim * model.hidden)
    else:
        projections = mla_projection_params(model)
    return (2.0 * tokens * (projections + mean_mlp_params_per_token(model))
            + tokens * attention_core_flops_per_token(model, seq_len, causal_fraction))


def model_flops_per_step(model: Model, seq_len: Num, global_batch: Num, causal: bool = True) -> Num:
    """3 × forward FLOPs of all layers plus the logits GEMM, for B·s tokens (no recompute) [FLOP]. The
    causal attention counts what a window computes (`mean_window_fraction`, docs/model.md §1)."""
    tokens = global_batch * seq_len
    frac = CAUSAL_FRACTION * mean_window_fraction(model, float(seq_len)) if causal else 1.0
    fwd = model.layers * layer_flops_forward(model, tokens, seq_len, frac) + 2.0 * tokens * model.hidden * model.vocab
    return 3.0 * fwd


def mtp_flops_per_step(model: Model, seq_len: Num, global_batch: Num, causal: bool = True) -> Num:
    """3 × the forward FLOPs of the multi-token-prediction modules for B·s tokens [FLOP]: each of the
    `depth` modules its blocks (2 FLOPs per active weight and token, plus the attention core of its
    attention blocks), its 2h -> h projection and the output head again; 0 without MTP."""
    mtp = model.mtp
    if mtp is None:
        return 0.0
    tokens = global_batch * seq_len
    frac = CAUSAL_FRACTION * mean_window_fraction(model, float(seq_len)) if causal else 1.0
    weights = sum(model.block_params(k, active=True) for k in mtp.pattern) + 2.0 * model.hidden ** 2
    core = mtp.pattern.count("*") * attention_core_flops_per_token(model, seq_len, frac)
    if "M" in mtp.pattern:
        core = core + mtp.pattern.count("M") * (ssd_flops_per_token(model, frac)
                                               + 2.0 * model.mamba.conv_kernel * model.mamba.conv_channels)
    return 3.0 * mtp.depth * tokens * (2.0 * weights + core + 2.0 * model.hidden * model.vocab)


def op_recompute_params(model: Model) -> float:
    """Weights of the matmuls op recompute re-runs per token: K (MLA: the KV down-projection), the
    output projection, and one f-wide MLP matrix (MoE: K experts' and the shared experts') [params]."""
    if model.mla is None:
        attention = model.hidden * model.kv_heads * model.head_dim + model.heads * model.head_dim * model.hidden
    else:
        a = model.mla
        attention = model.hidden * (a.kv_lora_rank + a.qk_rope_head_dim) + model.heads * a.v_head_dim * model.hidden
    if model.moe is None:
        return float(attention + model.hidden * model.ffn_hidden)
    moe = model.moe
    moe_third = (model.expert_hidden * moe.top_k * moe.expert_ffn_hidden
                 + model.hidden * moe.shared_experts * moe.shared_width)
    third = (model.dense_layers_count * model.hidden * model.ffn_hidden + model.moe_layers * moe_third) / model.layers
    return float(attention + third)


def recompute_flops_per_step(job: Job, layout: Layout) -> Num:
    """FLOPs the hardware computes beyond the model FLOPs, all devices [FLOP]: the recomputed
    forward (full: the layer; selective: the attention core; op: 2·(h·g·d_h + a·d_h·h + h·f) per
    token), and with standard attention the masked half of the scores in every pass. A window: the
    recomputed attention is the window's (`mean_window_fraction` φ̄); standard attention computes the
    whole s×s scores whatever the mask, so its extra is (2 − φ̄) causal halves per pass, not 1."""
    model, s = job.model, job.seq_len
    window = mean_window_fraction(model, s)
    tokens_step = job.tokens_per_step
    attn_fwd_per_token: Num
    op_params: float
    if model.moe is None and model.mla is None:
        attn_fwd_per_token = 4.0 * s * model.heads * model.head_dim * CAUSAL_FRACTION
        op_params = float(model.hidden * model.kv_heads * model.head_dim + model.heads * model.head_dim * model.hidden
                          + model.hidden * model.ffn_hidden)
    else:
        attn_fwd_per_token = attention_core_flops_per_token(model, s, CAUSAL_FRACTION)
        op_params = op_recompute_params(model)
    core = job.recomputes("core_attn")
    # a hybrid model's attention is in its attention blocks only: the scores' FLOPs per mean block
    attn_fwd_per_token = attn_fwd_per_token * model.attention_layers / model.layers
    extra = tokens_step * model.layers * (
        layout.full * (layer_flops_forward(model, 1.0, s, CAUSAL_FRACTION * window) - offloaded_qkv_flops(job))
        + layout.selective * (core * attn_fwd_per_token * window + 2.0 * selective_module_params(job))
        + layout.op * 2.0 * op_params)
    if job.attention == "standard":
        extra = extra + tokens_step * model.layers * attn_fwd_per_token * (2.0 - window) * (
            3.0 + layout.full + layout.selective * core)
    return extra


def offloaded_qkv_flops(job: Job) -> float:
    """FLOPs per token of the Q, K, V projections that MaxText's qkv_proj_offloaded does not re-run (fetched from
    host memory): 2·h·(a + 2g)·d_h; 0 under other policies (docs/model.md §7.11)."""
    m = job.model
    if job.remat_policy != "qkv_proj_offloaded":
        return 0.0
    return 2.0 * m.hidden * (m.heads + 2.0 * m.kv_heads) * m.head_dim


def selective_module_params(job: Job) -> float:
    """Weights per layer (the mean layer) whose GEMMs selective recompute's modules re-run, for the
    hardware FLOPs (2 per weight and token): MLA's query and KV up-projections (mla_up_proj), a dense
    layer's MLP (mlp, dense layers' share), the shared experts (shared_experts or moe, MoE layers' share),
    the router and a token's K routed experts (moe);
    the attention core and the norms and activations have no weights."""
    m = job.model
    total = 0.0
    if m.mla is not None and job.recomputes("mla_up_proj"):
        a = m.mla
        total += ((a.q_lora_rank or 0) * m.heads * m.qk_head_dim
                  + a.kv_lora_rank * m.heads * (a.qk_nope_head_dim + m.v_head_dim))
    mlp_params = m.mlp_matrices * m.hidden
    if job.recomputes("mlp"):
        total += m.dense_layers_count / m.layers * mlp_params * m.ffn_hidden
    if m.moe is not None and (job.recomputes("shared_experts") or job.recomputes("moe")):
        total += m.moe_layers / m.layers * mlp_params * m.moe.shared_experts * m.moe.shared_width
    if m.moe is not None and job.recomputes("moe"):          # the router and the K routed experts of a token
        total += m.moe_layers / m.layers * (m.router_params + m.moe.top_k * m.params_per_expert)
    return total
