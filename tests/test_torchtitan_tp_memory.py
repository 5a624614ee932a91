"""Issue 34: what torchtitan (Dec 2024) holds under tensor parallelism, counted from the code that runs
(docs/model.md §7.3, §7.4): its loss inside `loss_parallel()` (DTensor's vocabulary-parallel cross-entropy, 16 B per
logit at its backward) and the all-gathered inputs its column-parallel linears save under sequence parallelism."""

from __future__ import annotations

import pytest

from trainest import memory
from trainest.catalog import model_from_mapping
from trainest.step.activations import replicated_bytes
from helpers import activations_of, job_and_layout, memory_of

GPT = model_from_mapping({"name": "tiny-gpt", "layers": 4, "hidden": 64, "ffn_hidden": 256, "heads": 4,
                          "vocab": 1000}, "test")
S = 512.0


def test_torchtitans_loss_holds_four_fp32_tensors_per_logit_only_under_tensor_parallelism():
    """Without tp its loss is aten's cross-entropy (12 B); with tp, loss_parallel's backward (16 B). Megatron's
    loss is the same at any tp."""
    for tp, want in ((1.0, 12.0), (4.0, 16.0)):
        assert memory.held_bytes_per_logit(*job_and_layout(GPT, framework="torchtitan", tp=tp)) == want
    for tp in (1.0, 4.0):
        assert memory.held_bytes_per_logit(*job_and_layout(GPT, framework="megatron-core", tp=tp)) == 6.0


def test_a_loss_the_user_chose_is_not_the_loss_parallel_one():
    job, layout = job_and_layout(GPT, framework="torchtitan", tp=4.0)
    from trainest.record import replace
    chunked = replace(job, loss="chunked")
    assert memory.held_bytes_per_logit(chunked, layout) == memory.loss_bytes_per_logit(chunked)


def test_the_logits_line_is_sixteen_bytes_per_local_logit_at_tp_four():
    m = memory_of(GPT, framework="torchtitan", seq_len=S, tp=4.0, sp=1.0, recompute=2.0)
    assert m.logits_bytes == pytest.approx(16.0 * S * GPT.vocab / 4.0)


@pytest.mark.parametrize("tp", [2.0, 8.0])
def test_torchtitan_keeps_the_gathered_gemm_inputs_megatron_keeps_the_shard(tp):
    """With sequence parallelism the two norm outputs (the QKV and MLP-up inputs) are kept at full sequence
    length by torchtitan and ÷t by Megatron-Core: the difference is 2·e·T·h·(1 − 1/t); without SP none."""
    kw = dict(seq_len=S, tp=tp, sp=1.0)
    titan = replicated_bytes(*job_and_layout(GPT, framework="torchtitan", **kw), 2.0, 0.0)
    mcore = replicated_bytes(*job_and_layout(GPT, framework="megatron-core", **kw), 2.0, 0.0)
    assert titan - mcore == pytest.approx(2.0 * 2.0 * S * GPT.hidden * (1.0 - 1.0 / tp))
    no_sp = dict(seq_len=S, tp=tp, sp=0.0)
    assert replicated_bytes(*job_and_layout(GPT, framework="torchtitan", **no_sp), 2.0, 0.0) == pytest.approx(
        replicated_bytes(*job_and_layout(GPT, framework="megatron-core", **no_sp), 2.0, 0.0))


def test_under_full_recompute_the_gathered_inputs_are_held_by_the_recomputed_layer_only():
    """Full recompute keeps each layer's ÷t input whatever the framework; the layer being recomputed holds the
    gathered inputs, so the working layer grows by 2·e·T·h·(1 − 1/t) and nothing else does."""
    t = 4.0
    kw = dict(seq_len=S, tp=t, sp=1.0, recompute=2.0)
    kept_titan, whole_titan = activations_of(GPT, framework="torchtitan", **kw)
    kept_mcore, whole_mcore = activations_of(GPT, framework="megatron-core", **kw)
    assert kept_titan == pytest.approx(kept_mcore) == pytest.approx(2.0 * S * GPT.hidden / t)
    assert whole_titan - whole_mcore == pytest.approx(2.0 * 2.0 * S * GPT.hidden * (1.0 - 1.0 / t))
