"""Issue 34: the per-micro-batch buffers torch.distributed.pipelining's stages keep (torch 2.5.1/2.6
`distributed/pipelining/stage.py`; `Framework.stage_buffers_per_micro_batch`, docs/model/07-memory.md §7.4): each
local stage keeps every micro-batch's output through the step and, for each micro-batch, a receive buffer for its
input (but the first stage) and for its output's gradient (but the last)."""

from __future__ import annotations

import pytest

from trainest import memory
from trainest.catalog import model_from_mapping
from helpers import job_and_layout, memory_of

GPT = model_from_mapping({"name": "tiny-gpt", "layers": 8, "hidden": 64, "ffn_hidden": 256, "heads": 4,
                          "vocab": 1000}, "test")
S, T = 512.0, 4.0


def buffers(framework="torchtitan", **kw):
    job, layout = job_and_layout(GPT, framework=framework, seq_len=S, tp=T, sp=1.0, recompute=2.0, **kw)
    m = layout.micro_batches(job)
    in_flight = memory.in_flight_micro_batches(layout.pp, layout.vpp, m)
    return memory.stage_buffer_bytes(job, layout, in_flight)


def test_one_f_one_b_first_device_keeps_an_output_and_a_gradient_buffer_per_micro_batch():
    """p = 4, v = 1, m = 8: the first stage receives nothing; it keeps 8 outputs and 8 gradient buffers of
    e·b·s·h/t each. The last keeps 7 more micro-batches' 16-bit logits and 7 input buffers not in flight."""
    first, last = buffers(pp=4.0, micro_batches=8.0)
    boundary = 2.0 * S * GPT.hidden / T
    assert first == pytest.approx(2.0 * 8.0 * boundary)
    assert last == pytest.approx(7.0 * 2.0 * S * GPT.vocab / T + 7.0 * boundary)


def test_interleaved_devices_keep_them_for_each_local_stage():
    """v = 2: the first device's two stages keep 2·2·m boundaries, and its second stage's input buffers of the
    micro-batches not in flight. p = 8, m = 8: torch's interleaved warm-up runs all m·v = 16 forwards first
    (in_flight = m = 8, in_flight·v − m = 8 of the second stage), so none.
    p = 4, m = 8: 4·(1 + 3/8)·2 = 11, 8 of the first stage and 3 of the second: 5 input buffers idle."""
    boundary = 2.0 * S * GPT.hidden / T
    first, _ = buffers(pp=8.0, vpp=2.0, micro_batches=8.0)
    assert first == pytest.approx(2.0 * 2.0 * 8.0 * boundary)
    first, _ = buffers(pp=4.0, vpp=2.0, micro_batches=8.0)
    assert first == pytest.approx((2.0 * 2.0 * 8.0 + 5.0) * boundary)


def test_no_buffers_without_a_pipeline_or_under_another_framework():
    assert buffers(pp=1.0, micro_batches=8.0) == (0.0, 0.0)
    assert buffers(framework="megatron-core", pp=4.0, micro_batches=8.0) == (0.0, 0.0)


def test_the_buffers_grow_the_heaviest_stage_with_the_micro_batches():
    """More micro-batches at the same micro-batch size: Megatron's 1F1B first stage holds min(m, p) micro-batches
    whatever m; torchtitan's stages also keep m outputs and buffers, so its activations grow with m."""
    def acts(framework, m):
        return memory_of(GPT, framework=framework, seq_len=S, tp=T, sp=1.0, recompute=2.0, pp=4.0,
                         micro_batches=m).activations_bytes
    assert acts("megatron-core", 16.0) == pytest.approx(acts("megatron-core", 8.0))
    assert acts("torchtitan", 16.0) > acts("torchtitan", 8.0)


# ---------------------------------------------------------------- context parallelism's all-gathered K and V

LLAMA = model_from_mapping({"name": "tiny-llama", "layers": 8, "hidden": 256, "ffn_hidden": 1024, "heads": 8,
                            "kv_heads": 2, "vocab": 1000, "mlp": "swiglu"}, "test")


def exchange(framework="torchtitan", cp=4.0, recompute=0.0):
    job, layout = job_and_layout(LLAMA, framework=framework, seq_len=4096.0, tp=2.0, sp=1.0, cp=cp,
                                 recompute=recompute)
    return memory.cp_exchange_bytes(job, layout), job, layout


def test_the_attention_backward_holds_the_gathered_sequence_and_fp32_gradients():
    """Without recompute: W·T·(2·e·c + 12 + 3·e + 16) with W = a·d_h/t (K and V expanded to the query heads)."""
    got, job, layout = exchange(cp=4.0)
    width, tokens = LLAMA.heads * LLAMA.head_dim / 2.0, 4096.0 / 4.0
    assert got == pytest.approx(width * tokens * (2.0 * 2.0 * 4.0 + 12.0 + 6.0 + 16.0))


def test_the_gathered_part_grows_with_the_context_ranks_at_constant_tokens_per_rank():
    """c = 2 → 8 at the same T: only the gathered K and V grow, by 2·e·W·T per added rank."""
    small, job, layout = exchange(cp=2.0)
    job8, layout8 = job_and_layout(LLAMA, framework="torchtitan", seq_len=4.0 * 4096.0, tp=2.0, sp=1.0, cp=8.0)
    large = memory.cp_exchange_bytes(job8, layout8)
    width, tokens = LLAMA.heads * LLAMA.head_dim / 2.0, 4096.0 / 2.0
    assert large - small == pytest.approx(2.0 * 2.0 * 6.0 * width * tokens)


def test_no_exchange_without_context_parallelism_or_under_megatron():
    assert exchange(cp=1.0)[0] == 0.0
    assert exchange(framework="megatron-core")[0] == 0.0


def test_the_exchange_raises_a_first_pipeline_stage_but_not_a_loss_bound_single_stage(monkeypatch):
    """A first pipeline stage (no logits) peaks at the attention backward where its exchange exceeds the
    recomputed layer; without a pipeline the loss's moment (every activation and the logits) is the larger."""
    kw = dict(seq_len=8.0 * 4096.0, tp=2.0, sp=1.0, cp=8.0, recompute=2.0, micro_batches=1.0)
    big_vocab = model_from_mapping({"name": "tiny-llama-32k", "layers": 8, "hidden": 256, "ffn_hidden": 1024,
                                    "heads": 8, "kv_heads": 2, "mlp": "swiglu", "vocab": 32000}, "test")
    small_vocab = model_from_mapping({"name": "tiny-llama-128", "layers": 8, "hidden": 256, "ffn_hidden": 1024,
                                      "heads": 8, "kv_heads": 2, "mlp": "swiglu", "vocab": 128}, "test")
    cases = ((small_vocab, 4.0), (big_vocab, 1.0))
    with_exchange = [memory.activation_parts(*job_and_layout(m, framework="torchtitan", pp=pp, **kw))
                     for m, pp in cases]
    monkeypatch.setattr(memory, "cp_exchange_bytes", lambda job, layout: 0.0 * layout.tp)
    without = [memory.activation_parts(*job_and_layout(m, framework="torchtitan", pp=pp, **kw)) for m, pp in cases]
    assert with_exchange[0][0] > without[0][0]
    assert with_exchange[0][1] == 0.0 < without[0][1]   # the heaviest is now the first stage, which has no logits
    assert with_exchange[1] == pytest.approx(without[1])    # the loss bounds the single stage


def test_the_last_stage_merges_its_kept_logits_at_the_steps_end():
    """The schedule concatenates the m kept logits while they are kept: (m + 1) more micro-batches' logits than the
    m − 1 the buffers count, 2·m in all; with many micro-batches this end of the step is the heaviest moment."""
    job, layout = job_and_layout(GPT, framework="torchtitan", seq_len=S, tp=T, sp=1.0, recompute=2.0, pp=4.0,
                                 micro_batches=32.0)
    logits = 2.0 * S * GPT.vocab / T
    assert memory.merged_output_bytes(job, layout) == pytest.approx(33.0 * logits)
    _, last = buffers(pp=4.0, micro_batches=32.0)
    assert memory.activation_parts(job, layout)[0] == pytest.approx(last + 33.0 * logits)
    assert memory.merged_output_bytes(*job_and_layout(GPT, framework="megatron-core", pp=4.0, micro_batches=32.0)) == 0
    assert memory.merged_output_bytes(*job_and_layout(GPT, framework="torchtitan", pp=1.0, micro_batches=32.0)) == 0
