"""FLOPs of a training step (docs/model.md §1): model FLOPs (forward + backward, no recompute) and
the hardware FLOPs that recomputation and materialised attention scores add.
Sources: Narayanan et al. 2021 §5.1 (per-layer count), Korthikanti et al. 2022 (MFU vs HFU)."""

from __future__ import annotations

from trainest.catalog import Model
from trainest.layout import Job, Layout, Num

CAUSAL_FRACTION = 0.5              # causal attention computes about half of the s×s scores


def layer_flops_forward(model: Model, tokens: Num, seq_len: Num, causal_fraction: float = 1.0) -> Num:
    """Forward FLOPs of one layer for `tokens` tokens of length-`seq_len` sequences, whole layer:
    2·T·h·(a + 2g)·d_h + 4·T·s·a·d_h·causal + 2·T·a·d_h·h + 2·k·T·h·f (Narayanan 2021 §5.1;
    with a·d_h = h and g = a this is 24·T·h² + 4·T·s·h for GeLU, f = 4h) [FLOP]."""
    h, f = model.hidden, model.ffn_hidden
    q_width = model.heads * model.head_dim
    qkv = 2.0 * tokens * h * (q_width + 2.0 * model.kv_heads * model.head_dim)
    attn = 4.0 * tokens * seq_len * q_width * causal_fraction
    return qkv + attn + 2.0 * tokens * q_width * h + 2.0 * model.mlp_matrices * tokens * h * f


def model_flops_per_step(model: Model, seq_len: Num, global_batch: Num, causal: bool = True) -> Num:
    """3 × forward FLOPs of all layers plus the logits GEMM, for B·s tokens (no recompute) [FLOP]."""
    tokens = global_batch * seq_len
    frac = CAUSAL_FRACTION if causal else 1.0
    fwd = model.layers * layer_flops_forward(model, tokens, seq_len, frac) + 2.0 * tokens * model.hidden * model.vocab
    return 3.0 * fwd


def recompute_flops_per_step(job: Job, layout: Layout) -> Num:
    """FLOPs the hardware computes beyond the model FLOPs, all devices [FLOP]: the recomputed
    forward (full: the layer; selective: the attention core; op: 2·(h·g·d_h + a·d_h·h + h·f) per
    token), and with standard attention the masked half of the scores in every pass."""
    model, s = job.model, job.seq_len
    tokens_step = job.tokens_per_step
    attn_fwd_per_token = 4.0 * s * model.heads * model.head_dim * CAUSAL_FRACTION
    op_params = model.hidden * model.kv_heads * model.head_dim + model.heads * model.head_dim * model.hidden \
        + model.hidden * model.ffn_hidden
    extra = tokens_step * model.layers * (
        layout.full * layer_flops_forward(model, 1.0, s, CAUSAL_FRACTION)
        + layout.selective * attn_fwd_per_token + layout.op * 2.0 * op_params)
    if job.attention == "standard":
        extra = extra + tokens_step * model.layers * attn_fwd_per_token * (3.0 + layout.full + layout.selective)
    return extra
