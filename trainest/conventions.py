"""FLOP-counting conventions used by the sources of measured runs.

A published "TFLOP/s per GPU" or "MFU" is only meaningful together with the formula that produced
it: sources differ in whether they count the recompute forward pass, causal masking, the logit
layer, GQA, or gated MLPs. Each function below reproduces one source's convention and returns the
FLOPs of ONE optimizer step (forward + backward over ``global_batch`` sequences of ``seq_len``
tokens). Divide by (step time x devices) to get the source's TFLOP/s per device.

All functions take the same keyword arguments (see ``FLOPS_FORMULAS``):

    layers, hidden, ffn_hidden, heads, kv_heads, vocab, mlp, seq_len, global_batch

``mlp`` is ``"gelu"`` (two matrices, h->f->h) or ``"swiglu"`` (three matrices). Formulas that
ignore an argument say so. Some accept extra keyword-only options with defaults.

Symbols: B = global batch (sequences), s = sequence length, l = layers, h = hidden size,
f = FFN hidden size, a = attention heads, g = KV heads (query groups), V = vocabulary size,
d = head dim (h / a unless given).

Pure Python on purpose (no numpy): these are small closed forms used by tests and the importer.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = [
    "narayanan_eq3",
    "korthikanti_eq7",
    "megatron_core",
    "megatron_core_causal",
    "llm_foundry",
    "llm_foundry_params",
    "maxtext",
    "six_n",
    "palm",
    "matmul_params",
    "FLOPS_FORMULAS",
]


def _check_mlp(mlp: str) -> int:
    """Number of h x f weight matrices of the MLP block."""
    if mlp == "gelu":
        return 2
    if mlp == "swiglu":
        return 3
    raise ValueError(f"mlp must be 'gelu' or 'swiglu', got {mlp!r}")


def narayanan_eq3(*, layers, hidden, ffn_hidden=None, heads=None, kv_heads=None, vocab, mlp="gelu",
                  seq_len, global_batch) -> float:
    """Narayanan et al. 2021 (SC21, arXiv:2104.04473), Eq. 3.

    F = 96 * B * s * l * h^2 * (1 + s / (6 h) + V / (16 l h))      [FLOPs per iteration]

    Assumes a GPT block with MHA and a 4h GeLU MLP (``ffn_hidden``, ``heads``, ``kv_heads`` and
    ``mlp`` are ignored) and COUNTS THE RECOMPUTE FORWARD PASS of full activation checkpointing
    (4 forward-equivalents per layer: 72 -> 96). The attention score term is non-causal. The paper's
    "teraFLOP/s per GPU" is F / (iteration time * n); Korthikanti et al. 2022 call this HFU.
    """
    B, s, l, h, V = global_batch, seq_len, layers, hidden, vocab
    return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h))


def korthikanti_eq7(*, layers, hidden, ffn_hidden=None, heads=None, kv_heads=None, vocab, mlp="gelu",
                    seq_len, global_batch) -> float:
    """Korthikanti et al. 2022 (arXiv:2205.05198, MLSys 2023), Eq. 7: model FLOPs for MFU.

    F = 72 * B * s * l * h^2 * (1 + s / (6 h) + V / (12 h l))       [FLOPs per iteration]

    Same GPT assumptions as Eq. 3 (4h GeLU MLP, MHA, non-causal attention; ``ffn_hidden``,
    ``heads``, ``kv_heads``, ``mlp`` ignored) but WITHOUT recompute: forward + backward = 3x forward.
    MFU = F / (iteration time * n * peak).
    """
    B, s, l, h, V = global_batch, seq_len, layers, hidden, vocab
    return 72.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * h * l))


def _megatron(layers, hidden, ffn_hidden, heads, kv_heads, vocab, mlp, seq_len, global_batch,
              head_dim, causal) -> float:
    n_mats = _check_mlp(mlp)
    B, s, l, h, f, a, V = global_batch, seq_len, layers, hidden, ffn_hidden, heads, vocab
    g = kv_heads if kv_heads else a
    d = head_dim if head_dim else h / a
    q_ratio = a * d / h                      # query projection size / hidden
    score = s / h / 2.0 if causal else s / h
    gated = n_mats / 2.0                     # 1 for gelu, 3/2 for swiglu
    return 12.0 * B * s * l * h * h * (
        (1.0 + g / a + score) * q_ratio      # QKV + output projections, QK^T and AV
        + (f / h) * gated                    # MLP
        + V / (2.0 * l * h)                  # logit layer
    )


def megatron_core(*, layers, hidden, ffn_hidden, heads, kv_heads, vocab, mlp, seq_len, global_batch,
                  head_dim=None) -> float:
    """Megatron-LM / Megatron-Core ``num_floating_point_operations`` (as of r0.8, 2024) and the
    NeMo "Model TFLOP/sec/GPU" of releases before the 2025 causal change (e.g. NeMo 24.03, 24.07,
    25.04): model FLOPs, no recompute, FULL (non-causal) attention, forward + backward = 3x forward.

    F = 12 B s l h^2 [ (1 + g/a + s/h) (a d / h) + (f/h) * k + V / (2 l h) ]

    with k = 1 for a 2-matrix (GeLU/ReLU^2) MLP and 3/2 for SwiGLU, d = head_dim (default h/a),
    g = KV heads (GQA). Checked against NeMo 24.07: LLAMA2-7B at 16,934 tokens/s/GPU gives 780
    TFLOP/s/GPU (table: 780).
    """
    return _megatron(layers, hidden, ffn_hidden, heads, kv_heads, vocab, mlp, seq_len, global_batch,
                     head_dim, causal=False)


def megatron_core_causal(*, layers, hidden, ffn_hidden, heads, kv_heads, vocab, mlp, seq_len,
                         global_batch, head_dim=None) -> float:
    """Megatron-Core / NeMo / Megatron-Bridge model FLOPs AFTER the 2025 change that discounts
    causal attention (NeMo FLOPs formulas from 2025-08; Megatron-Bridge releases 25.09 onwards):
    identical to :func:`megatron_core` except the attention-score term s/h becomes s/(2h).

    F = 12 B s l h^2 [ (1 + g/a + s/(2h)) (a d / h) + (f/h) * k + V / (2 l h) ]

    Checked against Megatron-Bridge 25.11: LLAMA3_8B (GB300, FP8-CS) at 37,556 tokens/s/GPU gives
    1933 TFLOP/s/GPU (table: 1933); the non-causal form would give 2175.
    """
    return _megatron(layers, hidden, ffn_hidden, heads, kv_heads, vocab, mlp, seq_len, global_batch,
                     head_dim, causal=True)


def llm_foundry_params(*, layers, hidden, ffn_hidden, heads, kv_heads, vocab, mlp, seq_len,
                       bias=True, learned_pos_emb=True, tied_embeddings=True) -> int:
    """Parameter count N as llm-foundry reports it for its MPT benchmark models (sum of all
    parameter tensors): per layer attention (q, k, v, out), MLP, LayerNorm weight+bias, linear
    biases; plus the token embedding (counted once when tied), a learned positional embedding of
    ``seq_len`` rows (so N grows with the sequence length) and the final LayerNorm.

    Reproduces the NumParams column of the llm-foundry benchmark README, e.g. MPT-7b at seq 2048:
    6,658,859,008.
    """
    n_mats = _check_mlp(mlp)
    h, f, a, V, s = hidden, ffn_hidden, heads, vocab, seq_len
    g = kv_heads if kv_heads else a
    d = h // a
    kv = g * d
    attn = h * h + 2 * h * kv + h * h
    mlp_w = n_mats * h * f
    per_layer = attn + mlp_w
    if bias:
        per_layer += (h + 2 * kv) + h + (f * (n_mats - 1)) + h   # qkv, out, fc1 (and gate), fc2
        per_layer += 4 * h                                      # two LayerNorms, weight + bias
        final_norm = 2 * h
    else:
        per_layer += 2 * h
        final_norm = h
    emb = V * h * (1 if tied_embeddings else 2)
    pos = s * h if learned_pos_emb else 0
    return layers * per_layer + emb + pos + final_norm


def llm_foundry(*, layers, hidden, ffn_hidden, heads, kv_heads, vocab, mlp, seq_len, global_batch,
                bias=True, learned_pos_emb=True, tied_embeddings=True) -> float:
    """MosaicML llm-foundry ``scripts/train/benchmarking/README.md`` model FLOPs (MFU column):

    flops_per_seq      = 2 * N * s                         (N from :func:`llm_foundry_params`)
    attn_flops_per_seq = l * 2 * 2 * (h * s^2)
    F = B * (3 * flops_per_seq + 3 * attn_flops_per_seq) = B * (6 N s + 12 l h s^2)

    No recompute (the README's HFU uses 4x instead of 3x), non-causal attention, N includes the
    embedding and learned positional embedding as llm-foundry counts it. Checked: MPT-70b on 512
    H100 at 251 samples/s gives 408 TFLOP/s/GPU (table: 408, MFU 41.25 %).
    """
    N = llm_foundry_params(layers=layers, hidden=hidden, ffn_hidden=ffn_hidden, heads=heads,
                           kv_heads=kv_heads, vocab=vocab, mlp=mlp, seq_len=seq_len, bias=bias,
                           learned_pos_emb=learned_pos_emb, tied_embeddings=tied_embeddings)
    B, s, l, h = global_batch, seq_len, layers, hidden
    return B * (6.0 * N * s + 12.0 * l * h * s * s)


def maxtext(*, layers, hidden, ffn_hidden, heads, kv_heads, vocab, mlp, seq_len, global_batch,
            head_dim=None) -> float:
    """Google MaxText ``calculate_tflops_training_per_device`` (MaxText/maxtext_utils.py, 2024),
    summed over all devices (MaxText reports it per device with per_device_batch_size):

    ffn   = 2 B s f h * n_act + 2 B s f h      (n_act = len(mlp_activations): 2 for SwiGLU
                                                 'silu,linear', 1 for GeLU)
    qkv   = 2 B s h (a + 2 g) d
    proj  = 2 B s h a d
    emb   = 2 B s h V                          (logit layer)
    attn  = 4 B s^2 a d                        (QK^T and AV, NOT halved for causality)
    F = 3 * [ l (ffn + qkv + proj) + emb ] + 3 * l * attn

    d = head_dim, 128 for MaxText's synthetic global_parameter_scale models even when a*d != h.
    Earlier MaxText (2023) used 6 N s B + 12 a l d s^2 B, which differs only in counting the input
    embedding.
    """
    n_mats = _check_mlp(mlp)
    B, s, l, h, f, a, V = global_batch, seq_len, layers, hidden, ffn_hidden, heads, vocab
    g = kv_heads if kv_heads else a
    d = head_dim if head_dim else h / a
    ffn = 2.0 * B * s * f * h * (n_mats - 1) + 2.0 * B * s * f * h
    qkv = 2.0 * B * s * h * (a + 2 * g) * d
    proj = 2.0 * B * s * h * a * d
    emb = 2.0 * B * s * h * V
    attn = 4.0 * B * s * s * a * d
    return 3.0 * (l * (ffn + qkv + proj) + emb) + 3.0 * l * attn


def matmul_params(*, layers, hidden, ffn_hidden, heads, kv_heads, vocab, mlp, head_dim=None) -> float:
    """Parameters that take part in matrix multiplies: per-layer Q, K, V, output projections and
    MLP weights, plus the output (logit) projection V x h. The input-embedding lookup does no
    FLOPs and is excluded; norms and biases are ignored."""
    n_mats = _check_mlp(mlp)
    h, a = hidden, heads
    g = kv_heads if kv_heads else a
    d = head_dim if head_dim else h / a
    attn = h * a * d + 2 * h * g * d + a * d * h
    return layers * (attn + n_mats * h * ffn_hidden) + vocab * h


def six_n(*, layers, hidden, ffn_hidden, heads, kv_heads, vocab, mlp, seq_len, global_batch,
          head_dim=None) -> float:
    """The "6N" rule (Kaplan et al. 2020): 6 FLOPs per matmul parameter per token
    (2 forward + 4 backward), no attention-score term, no recompute.

    F = 6 * N * B * s      with N = :func:`matmul_params` (includes the logit projection)
    """
    N = matmul_params(layers=layers, hidden=hidden, ffn_hidden=ffn_hidden, heads=heads,
                      kv_heads=kv_heads, vocab=vocab, mlp=mlp, head_dim=head_dim)
    return 6.0 * N * global_batch * seq_len


def palm(*, layers, hidden, ffn_hidden, heads, kv_heads, vocab, mlp, seq_len, global_batch,
         head_dim=None) -> float:
    """PaLM's model FLOPs (Chowdhery et al. 2022, Appendix B), which torchtitan's MFU
    (``get_num_flop_per_token``) and nanoGPT's ``estimate_mfu`` use: 6 FLOPs per non-embedding
    parameter per token plus the attention scores, not halved for causality, no recompute.

    F = (6 N + 12 l a d s) * B * s      with N = :func:`matmul_params` (the parameters without the input
                                        embedding, the logit projection included) and d the head dim
    """
    N = matmul_params(layers=layers, hidden=hidden, ffn_hidden=ffn_hidden, heads=heads,
                      kv_heads=kv_heads, vocab=vocab, mlp=mlp, head_dim=head_dim)
    d = head_dim if head_dim else hidden / heads
    return (6.0 * N + 12.0 * layers * heads * d * seq_len) * global_batch * seq_len


FLOPS_FORMULAS: dict[str, Callable[..., float]] = {
    "narayanan-eq3": narayanan_eq3,
    "korthikanti-eq7": korthikanti_eq7,
    "megatron-core": megatron_core,
    "megatron-core-causal": megatron_core_causal,
    "llm-foundry": llm_foundry,
    "maxtext": maxtext,
    "6n": six_n,
    "palm": palm,
    "torchtitan": palm,     # torchtitan's MFU is PaLM's count (its get_num_flop_per_token)
}

# the formulas that count any model from its active matmul parameters and attention layers (a mixture of
# experts, latent attention, Mamba blocks: `validate.source_flops_per_step`); the others are closed forms of
# a dense transformer's shape and would count an MoE layer as one dense MLP
ACTIVE_PARAM_FORMULAS = ("6n", "palm", "torchtitan")
