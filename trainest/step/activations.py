"""Activations one layer keeps for its backward (docs/model.md §7.3): Korthikanti et al. 2022 eq. 1–2
generalised to GQA, gated MLPs, FP8 inputs, each recompute mode and LoRA adapters. Here, in the step
package, because the step needs it too (activation offload, §14); `trainest.memory` re-exports it."""

from __future__ import annotations

from trainest import xp
from trainest.layout import ACTIVATION_BYTES, Job, Layout, Num
from trainest.step.finetune import adapter_activation_bytes_per_layer

DROPOUT_MASK_BYTES = 1.0         # one byte per element
FP8_SAVED_INPUT_BYTES = 1.0      # FP8/FP4 recipes (Transformer Engine) keep the GEMM inputs saved for
                                 # the backward pass as their FP8 copies, not in 16 bit


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
    model, tp, cp, seq_len, micro_batch = job.model, layout.tp, layout.cp, job.seq_len, layout.micro_batch
    e = ACTIVATION_BYTES
    g8 = FP8_SAVED_INPUT_BYTES if job.low_precision else e      # bytes of a saved GEMM input
    h, f = model.hidden, model.ffn_hidden
    tokens = layout.tokens(job)
    sp_div = layout.sp_div
    # two norm inputs (16 bit), two norm outputs = QKV and MLP-up inputs, two dropout masks
    mask = DROPOUT_MASK_BYTES if model.dropout else 0.0
    replicated = (2.0 * e + 2.0 * g8 + 2.0 * mask) * tokens * h / sp_div
    q_width = model.heads * model.head_dim
    kv_width = 2.0 * xp.maximum(model.kv_heads, tp) * model.head_dim     # KV heads replicated when g < t
    # Q, K, V and the MLP-up outputs in 16 bit; the attention output and the MLP-down input as GEMM inputs
    split = tokens * (e * (q_width + kv_width + (model.mlp_matrices - 1.0) * f) + g8 * (q_width + f)) / tp
    scores: Num = 0.0
    scores_all: Num = 0.0
    if job.attention == "standard":
        # softmax output, and with dropout its dropped-out copy and mask
        scores_all = ((e + e + mask) if model.dropout else e) * micro_batch * (model.heads / tp) * (seq_len / cp) \
            * seq_len
        scores = scores_all * layout.no_recompute
    stored = replicated + split + scores
    full_input = e * tokens * h / sp_div
    op_saved = full_input + e * tokens * ((2.0 * q_width + kv_width / 2.0 + f) / tp
                                          + (h if model.mlp == "swiglu" else 0.0))
    # the layer being recomputed during backward re-materialises everything, scores included
    rematerialised = replicated + split + scores_all
    if not xp.off(layout.finetune):      # LoRA/QLoRA: each adapter keeps x·A (T×r) for B's weight gradient
        adapters = adapter_activation_bytes_per_layer(job, layout)
        stored, op_saved, rematerialised = stored + adapters, op_saved + adapters, rematerialised + adapters
    kept = xp.where(layout.full > 0, full_input, xp.where(layout.op > 0, op_saved, stored))
    return kept, rematerialised
