"""trainest.memory: weights, gradients, optimizer state per ZeRO stage; activations after Korthikanti
et al. 2022 (eq. 1-2 and §4), reproduced exactly for the paper's GPT block."""

from __future__ import annotations

import numpy as np
import pytest

from trainest import memory
from trainest.catalog import model_from_mapping
from helpers import activations_of as activation_bytes_per_layer
from helpers import job_and_layout
from helpers import memory_of as memory_per_device
from trainest.memory import in_flight_micro_batches, optimizer_bytes_per_param, stage_params, weight_bytes_per_param

# A tiny GPT block: g = a, f = 4h, GeLU (the paper's shape).
GPT = model_from_mapping({"name": "tiny-gpt", "layers": 4, "hidden": 64, "ffn_hidden": 256, "heads": 4,
                          "vocab": 100}, "test")
S, B = 128.0, 2.0


def act(model=GPT, *, b=B, s=S, t=1.0, c=1.0, sp=0.0, recompute=0.0, attention="standard"):
    kept, _stored = activation_bytes_per_layer(model, micro_batch=b, seq_len=s, tp=t, cp=c, sp=sp,
                                               recompute=recompute, attention=attention)
    return kept


def mem(model=GPT, precision="bf16", **layout):
    kw = dict(seq_len=S, micro_batch=1.0, micro_batches=8.0, tp=1.0, pp=1.0, dp=1.0, cp=1.0, vpp=1.0, zero=0.0,
              sp=0.0, recompute=0.0, attention="flash")
    kw.update(layout)
    return memory_per_device(model, precision, **kw)


# ------------------------------------------------------------------------------ activations (eq. 1-2)

def test_korthikanti_eq1_no_parallelism_no_recompute_standard_attention():
    """sbh(34 + 5as/h) bytes per layer."""
    h, a = GPT.hidden, GPT.heads
    assert act() == pytest.approx(S * B * h * (34 + 5 * a * S / h), rel=1e-12)


@pytest.mark.parametrize("t", [1.0, 2.0, 4.0])
def test_korthikanti_eq2_tensor_parallel(t):
    """sbh(10 + 24/t + 5as/(ht)): norms, inputs and masks stay replicated without SP."""
    h, a = GPT.hidden, GPT.heads
    assert act(t=t) == pytest.approx(S * B * h * (10 + 24 / t + 5 * a * S / (h * t)), rel=1e-12)


@pytest.mark.parametrize("t", [2.0, 4.0])
def test_sequence_parallel_divides_everything_by_t(t):
    """Korthikanti §4.2.2: sbh/t·(34 + 5as/h)."""
    h, a = GPT.hidden, GPT.heads
    assert act(t=t, sp=1.0) == pytest.approx(S * B * h / t * (34 + 5 * a * S / h), rel=1e-12)


def test_selective_recompute_drops_the_score_term():
    """Korthikanti §5 with SP: sbh·34/t."""
    h = GPT.hidden
    assert act(t=4.0, sp=1.0, recompute=1.0) == pytest.approx(S * B * h * 34 / 4, rel=1e-12)


def test_flash_attention_stores_what_selective_recompute_stores():
    assert act(attention="flash") == pytest.approx(act(recompute=1.0))
    assert act(attention="flash") < act()


def test_full_recompute_stores_the_layer_input_2sbh():
    h = GPT.hidden
    assert act(recompute=2.0) == pytest.approx(2 * S * B * h)
    assert act(t=4.0, recompute=2.0) == pytest.approx(2 * S * B * h)            # replicated without SP
    assert act(t=4.0, sp=1.0, recompute=2.0) == pytest.approx(2 * S * B * h / 4)


def test_full_recompute_also_returns_what_one_layer_stores_while_it_is_recomputed():
    kept, stored = activation_bytes_per_layer(GPT, micro_batch=B, seq_len=S, tp=1.0, cp=1.0, sp=0.0,
                                              recompute=2.0, attention="flash")
    assert kept == pytest.approx(2 * S * B * GPT.hidden)
    assert stored == pytest.approx(act(attention="flash"))


def test_context_parallel_divides_the_tokens():
    assert act(c=2.0) == pytest.approx(act() / 2)


def test_gqa_stores_smaller_k_and_v():
    """Generalised eq.: the TP part is e·T·(2h + 2g·d_h + k·f); with g = a/4 K and V shrink 4×."""
    gqa = model_from_mapping({"layers": 4, "hidden": 64, "ffn_hidden": 256, "heads": 4, "kv_heads": 1,
                              "vocab": 100}, "test")
    d_h = GPT.hidden // GPT.heads
    saved = 2.0 * S * B * 2 * (GPT.kv_heads - gqa.kv_heads) * d_h
    assert act() - act(gqa) == pytest.approx(saved)


def test_swiglu_stores_one_more_f_wide_tensor():
    swi = model_from_mapping({"layers": 4, "hidden": 64, "ffn_hidden": 256, "heads": 4, "vocab": 100,
                              "mlp": "swiglu"}, "test")
    assert act(swi) - act() == pytest.approx(2.0 * S * B * GPT.ffn_hidden)


# --------------------------------------------------------------------------------------- in flight

def test_in_flight_is_p_micro_batches_on_the_first_stage():
    assert in_flight_micro_batches(4.0, 1.0, 16.0) == 4.0
    assert in_flight_micro_batches(1.0, 1.0, 16.0) == 1.0          # gradient accumulation: one at a time
    assert in_flight_micro_batches(8.0, 1.0, 2.0) == 2.0           # m < p: only m exist


def test_interleaving_adds_one_plus_p_minus_one_over_pv():
    assert in_flight_micro_batches(8.0, 3.0, 64.0) == pytest.approx(8 * (1 + 7 / 24))


def test_interleaving_never_holds_more_forwards_than_there_are():
    """m = p = 8, v = 2: the warm-up, (v−1)·p + 2·(p−1) = 22 chunk forwards, is capped at the m·v = 16 there are
    (Megatron-Core's all_warmup_microbatches, torch's min(warmup_ops, m·v)): 8 whole-device micro-batches, not
    8·(1 + 7/16) = 11.5. Between the cap and p·(1 + (p−1)/(p·v)) the count follows m."""
    assert in_flight_micro_batches(8.0, 2.0, 8.0) == pytest.approx(8.0)
    assert in_flight_micro_batches(8.0, 2.0, 16.0) == pytest.approx(8.0 * (1.0 + 7.0 / 16.0))
    assert in_flight_micro_batches(4.0, 2.0, 5.0) == pytest.approx(5.0)


# ----------------------------------------------------------------------- weights, grads, optimizer

def test_bytes_per_parameter_of_mixed_precision_adam():
    assert weight_bytes_per_param("bf16") == 2.0
    assert weight_bytes_per_param("fp8") == 2.0            # FP8 recipes keep 16-bit weights
    assert weight_bytes_per_param("fp32") == 4.0
    assert optimizer_bytes_per_param("bf16") == 12.0       # FP32 master + m + v
    assert optimizer_bytes_per_param("fp32") == 8.0        # no separate master copy


def test_stage_params_one_stage_holds_the_whole_model():
    assert stage_params(GPT, 1.0) == pytest.approx(GPT.params)


def test_stage_params_pipeline_stage_holds_its_layers_and_one_embedding():
    assert stage_params(GPT, 2.0) == pytest.approx(2 * GPT.params_per_layer + GPT.vocab * GPT.hidden)


@pytest.mark.parametrize("zero, w, g, o", [
    (0, 2.0, 4.0, 12.0),          # replicated: 2 + 4 + 12 = 18 B/param (Megatron, FP32 main grads)
    (1, 2.0, 4.0, 12.0 / 4),      # optimizer state sharded over d
    (2, 2.0, 4.0 / 4, 12.0 / 4),  # + gradients
    (3, 0.0, 4.0 / 4, 12.0 / 4),  # + weights: the FP32 master shard is the parameter (FSDP), no 16-bit shard
])
def test_zero_stages_shard_what_they_should(zero, w, g, o):
    P = GPT.params
    m = mem(dp=4.0, zero=float(zero))
    gathered = 2.0 * GPT.params_per_layer * 2.0 if zero == 3 else 0.0   # ZeRO-3: current + prefetched layer
    assert m.weights_bytes == pytest.approx(P * w + gathered)
    assert m.gradients_bytes == pytest.approx(P * g)
    assert m.optimizer_bytes == pytest.approx(P * o)


def test_torchtitan_keeps_a_pipeline_stage_gathered_under_zero3():
    """torchtitan (Framework.pp_unsharded_zero3) does not reshard after forward with p > 1 and
    accumulates the gradients unsharded: the stage's 16-bit weights and FP32 gradients in full, the
    optimizer state still sharded. Megatron-Core, p = 1, or a single shard rank: unchanged."""
    kw = dict(dp=4.0, zero=3.0, micro_batches=4)
    stage = stage_params(GPT, 2.0)
    titan = mem(pp=2.0, framework="torchtitan", **kw)
    assert titan.weights_bytes == pytest.approx(stage * 2.0)
    assert titan.gradients_bytes == pytest.approx(stage * 4.0)
    assert titan.optimizer_bytes == pytest.approx(mem(pp=2.0, **kw).optimizer_bytes)
    assert mem(pp=2.0, **kw).gradients_bytes == pytest.approx(stage * 4.0 / 4)
    assert mem(pp=1.0, framework="torchtitan", **kw).gradients_bytes == pytest.approx(GPT.params * 4.0 / 4)
    flat = mem(pp=2.0, framework="torchtitan", zero=3.0, micro_batches=4)        # dp = 1: nothing sharded
    assert flat.weights_bytes == pytest.approx(mem(pp=2.0, zero=3.0, micro_batches=4).weights_bytes)


def test_zero_without_data_parallelism_shards_nothing():
    assert mem(zero=1.0).optimizer_bytes == mem(zero=0.0).optimizer_bytes


def test_tensor_and_pipeline_parallelism_divide_the_parameters():
    base = mem()
    assert mem(tp=2.0).optimizer_bytes == pytest.approx(base.optimizer_bytes / 2)
    assert mem(pp=2.0).optimizer_bytes == pytest.approx(
        base.optimizer_bytes * stage_params(GPT, 2.0) / GPT.params)


def test_overhead_is_a_constant_plus_fragmentation_and_the_total_adds_up():
    m = mem()
    subtotal = m.weights_bytes + m.gradients_bytes + m.optimizer_bytes + m.activations_bytes
    assert m.overhead_bytes == pytest.approx(memory.RUNTIME_CONTEXT_BYTES + memory.FRAGMENTATION_FRACTION * subtotal)
    assert m.total_bytes == pytest.approx(subtotal + m.overhead_bytes)


def test_tensor_and_runtime_lines_add_up_to_the_allocated_reserved_and_device_totals():
    """Issue 34: the tensors (torch max_memory_allocated), + the allocator's reserve (max_memory_reserved),
    + the CUDA context and NCCL's buffers (nvidia-smi) are each their own line and add up."""
    m = mem(tp=2.0, dp=4.0, pp=2.0, zero=1.0, micro_batches=1.0)     # one micro-batch: the last stage is heaviest
    assert m.allocated_bytes == pytest.approx(m.weights_bytes + m.gradients_bytes + m.optimizer_bytes
                                              + m.activations_bytes)
    assert m.reserved_bytes == pytest.approx(m.allocated_bytes * (1.0 + memory.FRAGMENTATION_FRACTION))
    assert m.total_bytes == pytest.approx(m.reserved_bytes + m.context_bytes + m.nccl_bytes)
    assert m.overhead_bytes == pytest.approx(m.allocator_bytes + m.context_bytes + m.nccl_bytes)
    assert m.context_bytes == memory.RUNTIME_CONTEXT_BYTES == 1343 * 2**20
    assert m.nccl_bytes == pytest.approx(3 * memory.NCCL_COMMUNICATOR_BYTES)       # tensor, pipeline, data
    assert 0.0 < m.logits_bytes <= m.activations_bytes


def test_one_device_holds_no_nccl_buffers_and_each_parallel_dimension_adds_a_communicator():
    assert mem().nccl_bytes == 0.0
    assert mem(dp=2.0).nccl_bytes == pytest.approx(memory.NCCL_COMMUNICATOR_BYTES)
    assert mem(dp=2.0, tp=2.0).nccl_bytes == pytest.approx(2 * memory.NCCL_COMMUNICATOR_BYTES)


def test_a_tpu_holds_no_cuda_context_nccl_buffers_or_allocator_slack():
    """A TPU program is compiled by XLA with its buffers assigned ahead of time and its collectives over ICI:
    the device total is the tensors; the same job on a GPU adds the CUDA runtime's three lines."""
    from trainest.catalog import load_hardware
    from trainest.memory import memory_per_device as per_device
    knobs = dict(tp=2.0, dp=4.0, zero=1.0, micro_batches=4.0)
    gpu = per_device(*job_and_layout(GPT, load_hardware("h100-sxm"), **knobs))
    tpu = per_device(*job_and_layout(GPT, load_hardware("tpu-v5p"), framework="maxtext", **knobs))
    assert tpu.context_bytes == tpu.nccl_bytes == tpu.allocator_bytes == tpu.overhead_bytes == 0.0
    assert tpu.total_bytes == pytest.approx(tpu.allocated_bytes) == pytest.approx(tpu.reserved_bytes)
    assert gpu.context_bytes > 0.0 and gpu.nccl_bytes > 0.0 and gpu.allocator_bytes > 0.0
    assert gpu.total_bytes > gpu.allocated_bytes


def test_the_logits_line_is_what_the_loss_holds_on_the_heaviest_stage():
    one = mem()
    assert one.logits_bytes == pytest.approx(6.0 * S * GPT.vocab)        # Megatron-Core: 6 B per logit
    deep = mem(pp=2.0, micro_batches=8.0)            # the first stage (p micro-batches in flight) is heaviest
    assert deep.logits_bytes == 0.0


def test_activations_without_pipeline_are_one_micro_batch_plus_logits():
    m = mem(attention="standard")
    layer = act(b=1.0)
    logits = 6.0 * S * GPT.vocab          # Megatron-Core: 16-bit logits + the in-place FP32 softmax
    assert m.activations_bytes == pytest.approx(GPT.layers * layer + logits)


def test_the_loss_holds_what_its_framework_keeps_per_logit():
    """Megatron's in-place FP32 softmax (6 B per logit), torchtitan's unfused FP32 cross-entropy (12),
    a framework not examined (2 FP32 copies, 8): the rest of the activations is the same."""
    by = {f: mem(framework=f).activations_bytes for f in ("megatron-core", "torchtitan", "maxtext")}
    assert by["torchtitan"] - by["megatron-core"] == pytest.approx(6.0 * S * GPT.vocab)
    assert by["maxtext"] - by["megatron-core"] == pytest.approx(2.0 * S * GPT.vocab)
    job, _layout = job_and_layout(GPT, framework="torchtitan")
    assert memory.loss_bytes_per_logit(job) == 3 * memory.LOGITS_BYTES


def test_full_recompute_keeps_one_layer_fully_materialised():
    """Every layer keeps its input; the layer being recomputed re-materialises the rest of it."""
    m = mem(recompute=2.0)
    logits = 6.0 * S * GPT.vocab          # Megatron-Core: 16-bit logits + the in-place FP32 softmax
    layer_input = act(b=1.0, recompute=2.0)
    assert m.activations_bytes == pytest.approx(
        GPT.layers * layer_input + (act(b=1.0, attention="flash") - layer_input) + logits)


def test_more_parallelism_never_raises_memory_per_device():
    """The tensors (and the allocator's share of them) never grow with more parallelism; each parallel dimension
    adds one communicator's NCCL buffers (128 MiB), which for this 4-layer toy outweigh what it shards."""
    base = mem(dp=1.0)
    for layout in ({"tp": 2.0}, {"tp": 4.0, "sp": 1.0}, {"pp": 2.0}, {"dp": 8.0, "zero": 3.0}, {"cp": 2.0}):
        m = mem(**layout)
        assert m.reserved_bytes <= base.reserved_bytes
        assert m.total_bytes - m.nccl_bytes <= base.total_bytes


def test_recompute_never_raises_memory():
    none, sel, full = (mem(recompute=r, attention="standard").total_bytes for r in (0.0, 1.0, 2.0))
    assert full < sel < none


def test_arrays_give_the_same_answer_as_floats():
    tps = np.array([1.0, 2.0, 4.0])
    zeros = np.array([0.0, 1.0, 3.0])
    arr = mem(tp=tps, zero=zeros, dp=np.array([4.0, 4.0, 4.0]), sp=np.array([0.0, 1.0, 1.0]))
    for i in range(3):
        one = mem(tp=float(tps[i]), zero=float(zeros[i]), dp=4.0, sp=[0.0, 1.0, 1.0][i])
        assert arr.total_bytes[i] == pytest.approx(one.total_bytes)


# ------------------------------------------------------------------------- pipeline split and HSDP

def test_even_split_puts_l_over_p_layers_on_every_stage():
    from trainest.memory import stage_layers
    assert stage_layers(GPT, 2.0) == (2.0, 2.0)


def test_balanced_split_counts_embedding_and_loss_as_one_layer_each():
    """Megatron's account-for-embedding-and-loss split: u = ceil((L+2)/(p·v))·v layer slots per stage."""
    from trainest.memory import stage_layers
    big = model_from_mapping({"layers": 96, "hidden": 64, "ffn_hidden": 256, "heads": 4, "vocab": 100}, "t")
    heavy, last = stage_layers(big, 8.0, 1.0, "balanced")
    assert (heavy, last) == (13.0, 12.0)                  # ceil(98/8) = 13; the last stage also runs the loss
    assert 2 * last + 6 * heavy >= big.layers             # every layer has a stage
    assert stage_layers(big, 1.0, 1.0, "balanced") == (96.0, 96.0)


@pytest.mark.parametrize("layers, vpp", [(30, 1.0), (62, 4.0), (94, 12.0)])
def test_balanced_split_over_two_stages_holds_every_layer_once(layers, vpp):
    """Regression: with p = 2 there is no middle stage; the heaviest stage was counted as u layers (a
    phantom middle stage), one more than either real stage. Conservation: first + last = L when the
    L + 2 units divide evenly; the first stage also holds the input embedding's parameters."""
    from trainest.memory import stage_layers, stage_params
    m = model_from_mapping({"layers": layers, "hidden": 64, "ffn_hidden": 256, "heads": 4, "vocab": 100}, "t")
    heavy, last = stage_layers(m, 2.0, vpp, "balanced")
    assert heavy + last == layers and heavy == last == layers / 2
    assert stage_params(m, 2.0, vpp, "balanced") == pytest.approx(heavy * m.params_per_layer + m.vocab * m.hidden)
    heavy4, _ = stage_layers(m, 4.0, 1.0, "balanced")
    assert heavy4 == -(-(layers + 2) // 4)                 # a middle stage holds all its u units as layers


def test_hybrid_sharding_shards_over_the_shard_group_only():
    P = GPT.params
    hsdp = mem(dp=8.0, zero=3.0, dp_shard=2.0)
    full = mem(dp=8.0, zero=3.0)
    assert hsdp.optimizer_bytes == pytest.approx(P * 12.0 / 2)
    assert full.optimizer_bytes == pytest.approx(P * 12.0 / 8)
    assert mem(dp=8.0, zero=3.0, dp_shard=8.0).total_bytes == pytest.approx(full.total_bytes)


def test_kv_activations_are_replicated_when_fewer_kv_heads_than_tp_ranks():
    """g < t: every TP rank keeps one KV head (Megatron replicates them), so K and V per rank are
    max(g, t)·d_h/t wide: g = 1 stores what g = t stores, and more than g·d_h/t would give."""
    shape = {"layers": 4, "hidden": 64, "ffn_hidden": 256, "heads": 4, "vocab": 100}
    mqa = model_from_mapping({**shape, "kv_heads": 1}, "test")
    g4 = model_from_mapping({**shape, "kv_heads": 4}, "test")
    assert act(mqa, t=4.0) == pytest.approx(act(g4, t=4.0))
    d_h = 16.0
    unreplicated = act(g4, t=4.0) - 2.0 * S * B * 2 * (4 - 1) * d_h / 4.0
    assert act(mqa, t=4.0) > unreplicated


def test_context_parallel_ranks_share_the_zero_shards():
    """Weights are replicated over the c CP ranks, so ZeRO shards over d·c ranks."""
    P = GPT.params
    assert mem(dp=2.0, cp=2.0, zero=1.0).optimizer_bytes == pytest.approx(P * 12.0 / 4)
    assert mem(dp=2.0, cp=2.0, zero=3.0).weights_bytes == pytest.approx(mem(dp=4.0, zero=3.0).weights_bytes)
    assert mem(dp=1.0, cp=4.0, zero=2.0).gradients_bytes == pytest.approx(P * 4.0 / 4)



def test_fp8_keeps_gemm_inputs_as_one_byte_copies():
    """GeLU, f = 4h, g = a, t = 1, no SP: 16 bit keeps 34·T·h; FP8 keeps 8 + 19 = 27·T·h."""
    kw = dict(micro_batch=1.0, seq_len=float(S), tp=1.0, cp=1.0, sp=0.0, recompute=0.0, attention="flash")
    bf16, _ = activation_bytes_per_layer(GPT, precision="bf16", **kw)
    fp8, _ = activation_bytes_per_layer(GPT, precision="fp8", **kw)
    th = S * GPT.hidden
    assert bf16 == pytest.approx(34 * th)
    assert fp8 == pytest.approx(27 * th)


def test_fp16_training_keeps_half_size_gradients():
    """Loss-scaled FP16 keeps and reduces FP16 gradients; BF16/FP8 mixed precision FP32 ones."""
    from trainest.memory import grad_bytes_per_param
    assert grad_bytes_per_param("fp16") == 2.0
    assert grad_bytes_per_param("bf16") == grad_bytes_per_param("fp8") == grad_bytes_per_param("fp32") == 4.0


def test_zero3_sharded_state_is_16_bytes_per_parameter():
    """ZeRO-3 over d ranks: BF16 (FSDP: FP32 master shard + FP32 gradient shard + Adam moments) and
    FP16 (DeepSpeed: 16-bit shard + 16-bit gradients + FP32 master and moments) both keep 16 bytes
    per parameter, sharded, besides the two gathered layers."""
    from trainest.catalog import load_model
    from trainest.memory import stage_params
    m = load_model("gpt3-13b")
    d = 64.0
    for precision in ("bf16", "fp16"):
        mem = memory_per_device(m, precision, seq_len=2048.0, micro_batch=1.0, micro_batches=1.0, tp=1.0, pp=1.0,
                                dp=d, cp=1.0, vpp=1.0, zero=3.0, sp=0.0, recompute=2.0, attention="flash")
        gathered = 2.0 * m.params_per_layer * 2.0
        state = float(mem.weights_bytes + mem.gradients_bytes + mem.optimizer_bytes) - gathered
        assert state == pytest.approx(16.0 * stage_params(m, 1.0) / d, rel=1e-9), precision


def test_zero3_at_one_data_parallel_rank_still_keeps_16_bytes_per_parameter():
    """Issue 32 item 6: ZeRO-3 BF16 keeps the FP32 master as the parameter and casts one layer at a time
    to 16 bit whether the shard spans one rank or many, so trading data for tensor parallelism on the
    same devices (d·t fixed) never raises memory; 18 B/parameter at d = 1 made t = 4, d = 1 need more
    than t = 2, d = 2 (Qwen3 32B on four TPU v5p: 150.3 against 136.7 GiB)."""
    one = mem(dp=1.0, zero=3.0)
    gathered = 2.0 * GPT.params_per_layer * 2.0
    state = float(one.weights_bytes + one.gradients_bytes + one.optimizer_bytes) - gathered
    assert state == pytest.approx(16.0 * GPT.params)
    fp16 = mem(precision="fp16", dp=1.0, zero=3.0)     # a 16-bit shard (DeepSpeed FP16): one copy, nothing gathered
    assert fp16.weights_bytes == pytest.approx(2.0 * GPT.params)
    for t, d in ((1.0, 4.0), (2.0, 2.0), (4.0, 1.0)):
        assert mem(tp=t, dp=d, zero=3.0, sp=1.0).reserved_bytes <= mem(tp=t / 2 if t > 1 else 1.0,
                                                                     dp=d * 2 if t > 1 else d, zero=3.0,
                                                                     sp=1.0).reserved_bytes * (1.0 + 1e-12)


def test_more_tensor_parallelism_on_the_same_devices_never_raises_zero3_memory_of_a_real_model():
    from trainest.estimate import estimate
    from trainest.scenario import scenario_from_mapping
    base = {"model": "qwen3-32b", "hardware": "tpu-v5p", "devices": 4, "global_batch": 4, "seq_len": 4096,
            "recompute": "full"}
    need = [estimate(scenario_from_mapping({**base, "parallel": {"tp": t, "zero": 3}})).memory.per_device_bytes
            for t in (1, 2, 4)]
    assert need[2] <= need[1] <= need[0]


def test_op_recompute_keeps_the_input_and_the_saved_matmul_outputs():
    """torchtitan's per-op policy: the layer input, Q and V, the attention output and the first MLP
    matmul's output (GeLU); SwiGLU also keeps the down projection's h-wide output."""
    h, f = GPT.hidden, GPT.ffn_hidden
    d = GPT.head_dim
    gelu = act(recompute=3.0, attention="flash")
    assert gelu == pytest.approx(2 * S * B * (h + 2 * GPT.heads * d + GPT.kv_heads * d + f))
    assert act(recompute=2.0, attention="flash") < gelu < act(recompute=0.0, attention="flash")
    swiglu = model_from_mapping({"layers": 4, "hidden": 1024, "ffn_hidden": 2816, "heads": 16, "kv_heads": 4,
                                 "vocab": 1000, "mlp": "swiglu"}, "test")
    kept = act(swiglu, recompute=3.0, attention="flash")
    assert kept == pytest.approx(2 * S * B * (1024 + 2 * 1024 + 4 * 64 + 2816 + 1024))


def test_op_recompute_sits_between_full_and_none_in_memory():
    none, op, full = (mem(recompute=r, attention="flash").total_bytes for r in (0.0, 3.0, 2.0))
    assert full < op < none


def test_a_model_trained_without_dropout_stores_no_masks():
    """Korthikanti's 10·T·h replicated term holds two 1-byte dropout masks and the 5·a·s/h score term
    the dropout's output and mask: without dropout, 8·T·h and only the 2-byte softmax output."""
    from trainest.record import replace
    plain = replace(GPT, dropout=False)
    h, a = GPT.hidden, GPT.heads
    assert act(GPT) - act(plain) == pytest.approx(2 * S * B * h + 3 * B * a * S * S)
    assert act(GPT, attention="flash") - act(plain, attention="flash") == pytest.approx(2 * S * B * h)


def test_bf16_adam_moments_save_four_bytes_of_state_and_eight_of_traffic_per_parameter():
    """adam_moments bf16 (DeepSeek-V3; Megatron's precision-aware optimizer): the optimizer state is 8 B per
    parameter instead of 12 and the step moves 26 B instead of 34; weights, gradients and activations are
    unchanged; with optimizer offload it is refused."""
    from trainest.errors import SpecError
    from trainest.estimate import estimate
    from trainest.precision import optimizer_bytes_per_param
    from trainest.scenario import scenario_from_mapping
    from trainest.step.optimizer import adam_bytes_per_param
    assert optimizer_bytes_per_param("bf16", "bf16") == 8.0 and optimizer_bytes_per_param("bf16") == 12.0
    assert adam_bytes_per_param("bf16") == 26.0 and adam_bytes_per_param() == 34.0
    base = {"model": "llama3-8b", "devices": 8, "global_batch": 64, "parallel": {"zero": 1}}
    fp32, bf16 = (estimate(scenario_from_mapping({**base, "adam_moments": m})) for m in ("fp32", "bf16"))
    assert bf16.memory.optimizer_bytes == pytest.approx(fp32.memory.optimizer_bytes * 8.0 / 12.0, rel=1e-12)
    for k in ("weights_bytes", "gradients_bytes", "activations_bytes"):
        assert getattr(bf16.memory, k) == getattr(fp32.memory, k)
    assert bf16.step.optimizer_s == pytest.approx(fp32.step.optimizer_s * 26.0 / 34.0, rel=1e-9)
    with pytest.raises(SpecError, match="adam_moments: bf16 with offload 'optimizer'"):
        scenario_from_mapping({**base, "adam_moments": "bf16", "offload": "optimizer", "devices": 1,
                               "hardware": "gh200", "global_batch": 8})


def test_plan_and_compare_take_the_optimizer_and_framework_inputs(capsys):
    """The job inputs of estimate reach plan and compare too (plan had no --adam-moments or --packed-length,
    compare no --framework), and their reproduce lines carry them."""
    from helpers import call_entry
    code, out, _ = call_entry(["plan", "--model", "llama3-8b", "--devices", "8", "--global-batch", "64",
                               "--adam-moments", "bf16", "--packed-length", "512"], capsys)
    assert code == 0 and "--adam-moments bf16" in " ".join(out.split())
    code, out, _ = call_entry(["compare", "--model", "llama3-8b", "--hardware", "h100-sxm,b200", "--devices", "8",
                               "--global-batch", "64", "--framework", "torchtitan", "--adam-moments", "bf16"], capsys)
    assert code == 0 and "--framework torchtitan --adam-moments bf16" in " ".join(out.split())


def test_deepspeed_zero3_keeps_at_most_its_live_parameter_budget_gathered():
    """FSDP gathers a whole block and prefetches the next: 2 layers. DeepSpeed ZeRO-3 gathers submodule
    by submodule within stage3_max_live_parameters + stage3_prefetch_bucket_size (1.5e9): the same for a
    model whose two layers are smaller than that, capped (but never below one MLP matrix) for one whose
    layers are larger."""
    from trainest.frameworks import DS_ZERO3_LIVE_PARAMS
    kw = dict(dp=8.0, zero=3.0, micro_batches=1)
    assert mem(framework="deepspeed", **kw).weights_bytes == pytest.approx(mem(**kw).weights_bytes)
    big = model_from_mapping({"name": "wide", "layers": 4, "hidden": 16384, "ffn_hidden": 65536, "heads": 128,
                              "vocab": 32000}, "t")
    assert 2 * big.params_per_layer > DS_ZERO3_LIVE_PARAMS
    fsdp, ds = mem(big, **kw), mem(big, framework="deepspeed", **kw)
    sharded = big.params * 2.0 / 8.0 * 0.0      # bf16 ZeRO-3: no 16-bit shard, only the gathered layers
    assert fsdp.weights_bytes == pytest.approx(sharded + 2.0 * big.params_per_layer * 2.0)
    assert ds.weights_bytes == pytest.approx(sharded + DS_ZERO3_LIVE_PARAMS * 2.0)
    assert ds.gradients_bytes == fsdp.gradients_bytes and ds.optimizer_bytes == fsdp.optimizer_bytes
    tp8 = mem(big, framework="deepspeed", tp=8.0, **kw)      # a layer's share on 8 TP ranks fits the budget
    assert tp8.weights_bytes == pytest.approx(mem(big, tp=8.0, **kw).weights_bytes)


# ------------------------------------------------------------------------------ element bytes per precision

@pytest.mark.parametrize("recompute", [0.0, 1.0, 2.0])
def test_fp32_and_tf32_activations_are_twice_the_bf16_ones(recompute):
    """FP32/TF32 training keeps its activations in FP32 (e = 4), 16-bit mixed precision in 16 bit (e = 2):
    the same layout keeps twice the bytes per layer (Llama 3: no dropout masks, whose 1 B does not scale)."""
    from trainest.catalog import load_model
    llama = load_model("llama3-8b")

    def kept(precision):
        return activation_bytes_per_layer(llama, precision=precision, micro_batch=2.0, seq_len=2048.0,
                                          recompute=recompute)[0]
    assert kept("fp32") == pytest.approx(2.0 * kept("bf16"), rel=1e-12)
    assert kept("tf32") == kept("fp32")
    assert kept("fp16") == kept("bf16")


def test_fp8_and_fp4_keep_16_bit_activations():
    """FP8/FP4 recipes cast their GEMM inputs inside the GEMM: the tensors between kernels stay 16-bit."""
    from trainest.layout import ELEMENT_BYTES
    assert ELEMENT_BYTES == {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 2.0, "fp4": 2.0}


@pytest.mark.parametrize("optimizer, state, traffic", [("adamw", 8.0, 34.0), ("adamw-8bit", 2.0 * (1 + 4 / 2048), 22.0),
                                                       ("adafactor", 0.0, 18.0), ("sgd", 4.0, 26.0)])
def test_each_optimizer_keeps_its_state_and_moves_its_bytes(optimizer, state, traffic):
    """Issue 34: the optimizer sets the state beside the FP32 master and, consistently, the step's traffic:
    AdamW's 34 B less 2·(8 − state)."""
    from trainest.estimate import estimate
    from trainest.precision import optimizer_bytes_per_param
    from trainest.scenario import scenario_from_mapping
    from trainest.step.optimizer import adam_bytes_per_param
    assert optimizer_bytes_per_param("bf16", "fp32", optimizer) == pytest.approx(4.0 + state)
    assert optimizer_bytes_per_param("fp32", "fp32", optimizer) == pytest.approx(state)
    assert adam_bytes_per_param("fp32", optimizer) == pytest.approx(traffic, abs=0.01)
    base = {"model": "llama3-8b", "devices": 8, "global_batch": 64, "parallel": {"zero": 1}}
    adamw, other = (estimate(scenario_from_mapping({**base, "optimizer": o})) for o in ("adamw", optimizer))
    assert other.memory.optimizer_bytes == pytest.approx(adamw.memory.optimizer_bytes * (4.0 + state) / 12.0)
    for k in ("weights_bytes", "gradients_bytes", "activations_bytes"):
        assert getattr(other.memory, k) == getattr(adamw.memory, k)
    assert other.step.optimizer_s <= adamw.step.optimizer_s


def test_optimizer_refusals_name_the_allowed_values(capsys):
    from helpers import call_entry
    from trainest.errors import SpecError
    from trainest.scenario import scenario_from_mapping
    base = {"model": "llama3-8b", "devices": 8, "global_batch": 64}
    with pytest.raises(SpecError, match="adam_moments: bf16 is the dtype of AdamW's moments; optimizer 'sgd'"):
        scenario_from_mapping({**base, "optimizer": "sgd", "adam_moments": "bf16"})
    with pytest.raises(SpecError, match="optimizer: 'adafactor' with offload 'optimizer' is not modelled"):
        scenario_from_mapping({**base, "optimizer": "adafactor", "offload": "optimizer", "devices": 1,
                               "hardware": "gh200", "global_batch": 8})
    with pytest.raises(SpecError, match="optimizer"):
        scenario_from_mapping({**base, "optimizer": "lion"})
    code, out, err = call_entry(["estimate", "--model", "llama3-8b", "--optimizer", "lion"], capsys)
    assert code != 0 and out == "" and "adamw-8bit" in err and "Traceback" not in err
    code, out, _ = call_entry(["plan", "--model", "llama3-8b", "--devices", "8", "--global-batch", "64",
                               "--optimizer", "adamw-8bit"], capsys)
    assert code == 0 and "--optimizer adamw-8bit" in " ".join(out.split())
