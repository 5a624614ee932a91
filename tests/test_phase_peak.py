"""Issue 34: what torch frameworks hold at the step's peak (frameworks.py `expands_kv_heads`, `frees_grads`;
memory.py `phase_peak`; docs/model/07-memory.md §7.3, §7.12): K and V kept at the query width where the attention
module expands them before SDPA; gradients and activations not held together where the loop frees the gradients and
the step is one micro-batch; the eager attention output's copy only under standard attention."""

from __future__ import annotations

import pytest

from trainest.estimate import estimate
from trainest.memory import LOGITS_16BIT_BYTES
from trainest.scenario import scenario_from_mapping

H, F_, V, L, HEADS, KV, D = 3072, 8192, 128256, 28, 24, 8, 128      # Llama 3.2 3B
SEQ, MICRO = 4096, 2
TOKENS = SEQ * MICRO
BASE = {"model": "llama3.2-3b", "hardware": "a100-80gb-sxm", "devices": 1, "seq_len": SEQ, "precision": "bf16",
        "master_weights": "none", "parallel": {"tp": 1, "pp": 1, "zero": 0}, "micro_batch": MICRO,
        "global_batch": MICRO, "recompute": "none", "attention": "flash2", "loss": "chunked", "kernels": "fused"}


def est(**changes):
    return estimate(scenario_from_mapping({**BASE, **changes}, "test")).memory


def test_expanded_kv_heads_keep_k_and_v_at_the_query_width():
    """Under a framework whose attention copies each KV head to its query heads (hf-accelerate: repeat_kv), K and
    V are kept at a·d_h: 2 B × 2·(a − g)·d_h more per token and layer than where they are kept at g·d_h."""
    hf = est(framework="hf-accelerate", global_batch=4 * MICRO)        # accumulating: no phase peak
    mc = est(framework="megatron-core", global_batch=4 * MICRO, recompute="none")
    layers = (hf.activations_bytes - hf.logits_bytes) - (mc.activations_bytes - mc.logits_bytes)
    assert layers == pytest.approx(L * TOKENS * 2.0 * 2.0 * (HEADS - KV) * D, rel=1e-9)


def test_eager_standard_attention_keeps_the_output_copy():
    """Only `attn @ v` (standard attention) leaves the output head-major, so the output projection's
    `transpose(1, 2).contiguous()` copies it: e·T·a·d_h per layer more than under flash attention's SDPA."""
    flash = est(framework="hf-accelerate", kernels="eager", global_batch=4 * MICRO, seq_len=512)
    standard = est(framework="hf-accelerate", kernels="eager", global_batch=4 * MICRO, seq_len=512,
                   attention="standard")
    scores = 2.0 * MICRO * HEADS * 512 * 512        # the softmax output standard attention keeps (16 bit)
    copy = 2.0 * MICRO * 512 * HEADS * D
    layers = (standard.activations_bytes - standard.logits_bytes) - (flash.activations_bytes - flash.logits_bytes)
    assert layers == pytest.approx(L * (copy + scores), rel=1e-9)


def test_one_micro_batch_holds_no_gradient_at_the_forward_peak():
    """One micro-batch, gradients freed every step (hf-accelerate), an FP32 loss (12 B per logit): the forward's end
    is the peak, every activation and no gradient; accumulating over 4 micro-batches the earlier ones' gradients
    are alive through the forward: both together."""
    one = est(framework="hf-accelerate", loss="standard")
    four = est(framework="hf-accelerate", loss="standard", global_batch=4 * MICRO)
    assert one.peak_phase == "forward_end" and one.gradients_bytes == 0.0
    assert four.peak_phase == "together" and four.gradients_bytes > 5e9
    assert one.activations_bytes == four.activations_bytes


def test_backward_start_adds_the_output_projections_gradient_beside_the_activations():
    """Once the compiled chunked loss's backward is done (2.25 B per logit at its peak), every activation is still
    kept beside the logits' 16-bit gradient (2 B per logit) and the output projection's whole V·h 16-bit weight
    gradient: more than the loss held, so that is the peak."""
    one = est(framework="hf-accelerate")
    four = est(framework="hf-accelerate", global_batch=4 * MICRO)
    layers = four.activations_bytes - four.logits_bytes
    assert one.peak_phase == "backward_start"
    assert one.gradients_bytes == pytest.approx(2.0 * V * H, rel=1e-9)
    assert one.activations_bytes - layers == pytest.approx(LOGITS_16BIT_BYTES * TOKENS * V, rel=1e-9)
    assert one.logits_bytes == pytest.approx(LOGITS_16BIT_BYTES * TOKENS * V, rel=1e-9)


def test_full_recompute_peaks_at_the_backwards_end_with_every_gradient():
    """Full recompute keeps little; the backward's end holds every 16-bit gradient and one layer re-materialised:
    the gradients are counted whole and the activations are a single layer's, below what the forward holds."""
    full = est(framework="hf-accelerate", recompute="full")
    assert full.peak_phase == "backward_end"
    params = full.weights_bytes / 2.0
    assert full.gradients_bytes == pytest.approx(2.0 * params, rel=1e-9)
    assert full.logits_bytes == 0.0
    per_layer = 2.0 * TOKENS * (16 * H + 6 * F_)     # what one re-materialised compiled Llama layer holds (approx.)
    assert full.activations_bytes < 1.5 * per_layer


def test_frameworks_that_keep_gradient_buffers_count_both_at_once():
    """Megatron-Core keeps its contiguous gradient buffer: weights + gradients + optimizer + activations, as before."""
    m = est(framework="megatron-core", recompute="none")
    assert m.peak_phase == "together" and m.gradients_bytes > 5e9


def test_a_layer_keeps_what_torch_counts_eager_and_compiled():
    """What tools/saved_tensors.py counted on torchtune 0.3.1's Llama layer (torch 2.13, AOTAutograd's min-cut
    partitioner as inductor runs it), per token of one micro-batch, Llama 3.2 3B under hf-accelerate: compiled
    16h + 6f B (the fused count with K and V at the query width), eager 8h + 2f B more (each norm's FP32 input and
    16-bit normalised input, SwiGLU's SiLU output)."""
    from trainest.scenario import job_of, layout_of
    from trainest.step.activations import activation_bytes_per_layer

    def per_token(kernels: str) -> float:
        s = scenario_from_mapping({**BASE, "framework": "hf-accelerate", "kernels": kernels}, "test")
        return float(activation_bytes_per_layer(job_of(s), layout_of(s))[0]) / TOKENS

    assert per_token("fused") == pytest.approx(16 * H + 6 * F_, rel=1e-12)
    assert per_token("eager") - per_token("fused") == pytest.approx(8 * H + 2 * F_, rel=1e-12)
