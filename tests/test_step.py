"""trainest.step: the composition of one training step (limit cases by name, conservation, the
pipeline bubble, the FLOP counts against their closed forms)."""

from __future__ import annotations

import dataclasses

from trainest.record import replace
import math

import numpy as np
import pytest

from trainest.catalog import load_hardware, load_model, model_from_mapping, with_efficiency
from trainest.step.collectives import all_gather_s, all_reduce_s, reduce_scatter_s, tiers_of
from helpers import step_of
ACTIVATION_BYTES = 2.0   # e at bf16 (trainest.layout.ELEMENT_BYTES)
from trainest.memory import MAIN_GRAD_BYTES, stage_params
from trainest.step.flops import CAUSAL_FRACTION, layer_flops_forward, model_flops_per_step
from trainest.step.layer import EAGER_EXTRA_F_WIDE_PASSES, EAGER_EXTRA_H_WIDE_PASSES, ROPE_PASSES
from trainest.step.schedule import bubble_slots

A100 = load_hardware("a100-80gb-sxm")
GPT3_13B = load_model("gpt3-13b")
# A small GPT block (g = a, f = 4h) with a tiny vocabulary, so the logits barely count.
SMALL = model_from_mapping({"name": "small", "layers": 8, "hidden": 1024, "ffn_hidden": 4096, "heads": 16,
                            "vocab": 8}, "test")


def ideal(hw=A100, *, compute=False):
    """The hardware with an infinitely fast network and memory (and, with compute=True, infinitely
    fast compute too), no launch overhead (nor a collective call's fixed cost) and a flat GEMM efficiency."""
    hw = replace(hw, memory_bytes_per_s=1e30, scale_up_bytes_per_s=1e30, scale_out_bytes_per_s=1e30,
                             scale_up_latency_s=0.0, scale_out_latency_s=0.0, collective_call_s=0.0)
    if compute:
        hw = replace(hw, peak_flops_per_s={k: 1e30 for k in hw.peak_flops_per_s},
                                 memory_bytes_per_s=hw.memory_bytes_per_s)
    # no host dispatch, no kernel floors, no wave quantization: the roofline alone (infinitely fast compute
    # includes the exponentials: no softmax ceiling on fused attention)
    hw = replace(hw, compute=hw.compute._replace(units=None, exp_per_s=None if compute else hw.compute.exp_per_s))
    return with_efficiency(hw, gemm_half_dim=0.0, layer_overhead_s=0.0, attention=hw.efficiency.gemm,
                           host_per_kernel_s=0.0, kernel_floor_s=0.0)


def terms(model=SMALL, hw=A100, precision="bf16", attention="flash", *, seq_len=2048.0, global_batch=32.0, **layout):
    lay = dict(tp=1.0, pp=1.0, dp=1.0, cp=1.0, vpp=1.0, micro_batch=1.0, zero=0.0, sp=0.0, recompute=0.0)
    lay.update({k: float(v) if not isinstance(v, np.ndarray) else v for k, v in layout.items()})
    return step_of(model, hw, precision, attention, seq_len=seq_len, global_batch=global_batch,
                   devices_per_node=hw.devices_per_node, **lay)


# --------------------------------------------------------------------------------------- FLOP counts

def test_layer_forward_flops_of_a_gpt_block():
    """24·T·h² + 4·T·s·h for g = a, f = 4h, GeLU (non-causal)."""
    h, s, T = SMALL.hidden, 2048.0, 4096.0
    assert layer_flops_forward(SMALL, T, s) == pytest.approx(24 * T * h**2 + 4 * T * s * h)
    assert layer_flops_forward(SMALL, T, s, 0.5) == pytest.approx(24 * T * h**2 + 2 * T * s * h)


def test_model_flops_match_korthikanti_eq7_with_full_attention():
    """72·B·s·L·h²·(1 + s/(6h) + V/(12hL)) (Korthikanti et al. 2022 eq. 7, non-causal)."""
    m, B, s = load_model("gpt3-175b"), 1536.0, 2048.0
    L, h, V = m.layers, m.hidden, m.vocab
    closed = 72 * B * s * L * h**2 * (1 + s / (6 * h) + V / (12 * h * L))
    assert model_flops_per_step(m, s, B, causal=False) == pytest.approx(closed, rel=1e-12)


def test_model_flops_causal_convention_halves_the_score_term():
    """The code's default (causal) count: 72·B·s·L·h²·(1 + s/(12h) + V/(12hL))."""
    m, B, s = load_model("gpt3-175b"), 1536.0, 2048.0
    L, h, V = m.layers, m.hidden, m.vocab
    causal = model_flops_per_step(m, s, B)
    assert causal == pytest.approx(72 * B * s * L * h**2 * (1 + s / (12 * h) + V / (12 * h * L)), rel=1e-12)
    full = model_flops_per_step(m, s, B, causal=False)
    assert full - causal == pytest.approx(3 * L * 4 * B * s * s * h * (1 - CAUSAL_FRACTION), rel=1e-12)


def test_model_flops_are_about_six_n_per_token_for_short_sequences():
    """6·P·tokens (Kaplan et al. 2020) when s ≪ h and norms are negligible."""
    m = load_model("gpt3-175b")
    ratio = model_flops_per_step(m, 128.0, 1.0) / (6 * m.params * 128.0)
    assert ratio == pytest.approx(1.0, abs=0.01)


def test_hardware_flops_add_the_recomputed_forward():
    """Full recompute: 96·B·s·L·h²·(1 + s/(12h) + V/(16hL)) (Narayanan et al. 2021 eq. 3, causal count)."""
    m = GPT3_13B
    B, s = 32.0, 2048.0
    L, h, V = m.layers, m.hidden, m.vocab
    none = terms(m, global_batch=B, tp=8)
    full = terms(m, global_batch=B, tp=8, recompute=2)
    selective = terms(m, global_batch=B, tp=8, recompute=1)
    assert none.hardware_flops == none.model_flops
    assert full.hardware_flops == pytest.approx(96 * B * s * L * h**2 * (1 + s / (12 * h) + V / (16 * h * L)),
                                                rel=1e-12)
    assert selective.hardware_flops - selective.model_flops == pytest.approx(2 * B * s * s * h * L, rel=1e-12)
    assert full.model_flops == none.model_flops == selective.model_flops


# -------------------------------------------------------------------------------------- conservation

@pytest.mark.parametrize("layout", [
    {}, {"tp": 8, "sp": 1}, {"tp": 4, "pp": 2, "dp": 2, "vpp": 2}, {"dp": 8, "zero": 3}, {"dp": 8, "zero": 1},
    {"cp": 2, "tp": 2, "dp": 2, "recompute": 2}, {"pp": 4, "recompute": 1},
])
def test_step_terms_sum_to_the_step_time(layout):
    t = terms(GPT3_13B, global_batch=64.0, **layout)
    parts = t.compute_s + t.memory_s + t.communication_s + t.bubble_s + t.overhead_s
    assert t.time_s == pytest.approx(parts, rel=1e-12)
    detail = t.tp_comm_s + t.cp_comm_s + t.pp_comm_s + t.dp_comm_s
    assert t.communication_s == pytest.approx(detail, rel=1e-12)
    assert min(t.compute_s, t.memory_s, t.communication_s, t.bubble_s, t.overhead_s) >= 0.0


# --------------------------------------------------------------------------------------- limit cases

def test_no_parallelism_means_no_communication_and_no_bubble():
    t = terms(GPT3_13B)
    assert t.communication_s == 0.0
    assert t.bubble_s == 0.0
    assert t.no_overlap_time_s == pytest.approx(t.time_s, rel=1e-12)   # nothing to overlap


def test_no_overlap_bound_exposes_every_collective_in_full():
    """ZeRO-3 on 8 GPUs with plenty of compute: the estimate hides all but a share of the gathers; the
    no-overlap bound adds all of them (3 collectives per layer per micro-batch) and the full TP traffic."""
    m, B = GPT3_13B, 64.0
    free = terms(m, with_efficiency(A100, overlap_contention=0.0), global_batch=B)
    z3 = terms(m, dp=8.0, zero=3, global_batch=B)
    assert z3.no_overlap_time_s > z3.time_s
    tiers = tiers_of(A100, A100.devices_per_node)
    P = stage_params(m, 1.0)
    per_mb = 2 * all_gather_s(P * 2.0, 8.0, 1.0, tiers) + reduce_scatter_s(P * MAIN_GRAD_BYTES, 8.0, 1.0, tiers)
    mb = B / 8.0
    # compute per device is 1/8 of the single-device step's; the gathers add per micro-batch (ring
    # latency per layer makes the per-layer sum a little larger than the whole-model collectives)
    assert z3.no_overlap_time_s - free.time_s / 8.0 == pytest.approx(mb * per_mb, rel=0.05)
    tp = terms(m, tp=8.0, global_batch=B)
    assert tp.no_overlap_time_s == pytest.approx(tp.time_s, rel=1e-12)    # TP is exposed either way


def test_dp_1_gives_zero_dp_traffic():
    for zero in (0, 1, 2, 3):
        assert terms(GPT3_13B, tp=8, zero=zero).dp_comm_s == 0.0


def test_tp_1_gives_zero_tp_traffic_and_pp_1_zero_pp_traffic():
    t = terms(GPT3_13B, dp=8)
    assert t.tp_comm_s == 0.0 and t.pp_comm_s == 0.0 and t.cp_comm_s == 0.0


def test_huge_bandwidth_gives_about_zero_communication_time():
    t = terms(GPT3_13B, ideal(), tp=4, pp=2, dp=4, cp=2, vpp=2, global_batch=64.0)
    assert t.communication_s < 1e-12 * t.time_s
    z3 = terms(GPT3_13B, ideal(), dp=8, zero=3)
    assert z3.communication_s < 1e-12 * z3.time_s


def test_compute_bound_step_equals_flops_over_achievable_flops():
    """On an ideal network and memory, with a flat GEMM efficiency η: step = FLOPs/(C·η) on one device.
    Standard attention computes the full s×s scores, so the non-causal count applies."""
    hw = ideal()
    B, s = 8.0, 1024.0
    t = terms(GPT3_13B, hw, attention="standard", seq_len=s, global_batch=B)
    achievable = hw.peak("bf16") * hw.efficiency.gemm
    assert t.time_s == pytest.approx(model_flops_per_step(GPT3_13B, s, B, causal=False) / achievable, rel=1e-9)
    assert t.compute_s == pytest.approx(t.time_s, rel=1e-9)


def test_full_recompute_costs_one_more_forward_of_the_layers():
    hw = ideal()
    B, s = 8.0, 1024.0
    none = terms(GPT3_13B, hw, attention="standard", seq_len=s, global_batch=B)
    full = terms(GPT3_13B, hw, attention="standard", seq_len=s, global_batch=B, recompute=2)
    extra = GPT3_13B.layers * layer_flops_forward(GPT3_13B, B * s, s)
    assert full.time_s - none.time_s == pytest.approx(extra / (hw.peak("bf16") * hw.efficiency.gemm), rel=1e-9)


@pytest.mark.parametrize("knob", ["tp", "dp"])
def test_ideal_scaling_halves_the_time_per_device(knob):
    hw = ideal()
    one = terms(GPT3_13B, hw, attention="standard", global_batch=16.0)
    two = terms(GPT3_13B, hw, attention="standard", global_batch=16.0, **{knob: 2})
    assert two.time_s == pytest.approx(one.time_s / 2, rel=1e-9)


@pytest.mark.parametrize("knob, values", [("tp", (1, 2, 4, 8)), ("dp", (1, 2, 4, 8)), ("pp", (1, 2, 4, 8)),
                                          ("cp", (1, 2, 4, 8))])
def test_more_devices_never_raise_per_device_work(knob, values):
    """At a fixed global batch, splitting the model or the batch further never adds compute per device."""
    compute = [terms(GPT3_13B, global_batch=64.0, **{knob: v}).compute_s for v in values]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(compute, compute[1:]))
    assert compute[-1] < compute[0]


# -------------------------------------------------------------------------------- pipeline schedule

def test_bubble_fraction_is_p_minus_one_over_v_m():
    """1F1B: bubble = (p−1)·t_mb; interleaved with v chunks: (p−1)/v·t_mb (Narayanan et al. 2021 §2.2)."""
    p, B = 4, 32.0
    for v in (1, 2):
        t = terms(SMALL, ideal(), pp=p, vpp=v, global_batch=B)
        m = B
        assert t.bubble_s / (m * t.micro_batch_s) == pytest.approx((p - 1) / (v * m), rel=2e-3)


def test_interleaving_divides_the_bubble_by_v():
    one = terms(SMALL, ideal(), pp=4, vpp=1)
    two = terms(SMALL, ideal(), pp=4, vpp=2)
    assert two.bubble_s == pytest.approx(one.bubble_s / 2, rel=1e-12)
    real1, real2 = terms(GPT3_13B, pp=4, vpp=1), terms(GPT3_13B, pp=4, vpp=2)
    assert real2.bubble_s < real1.bubble_s
    assert real2.pp_comm_s == pytest.approx(2 * real1.pp_comm_s)    # v chunks: v times the transfers


@pytest.mark.parametrize("v", [1, 2, 4])
def test_one_micro_batch_takes_p_stage_times_whatever_the_interleaving(v):
    """With m = 1 nothing overlaps: the micro-batch crosses the p stages one after the other, so the
    step is at least p times one stage's micro-batch time, interleaved or not (issue 11, case 1)."""
    p = 4
    t = terms(SMALL, ideal(), pp=p, vpp=v, global_batch=1.0)
    assert t.time_s >= 0.999 * p * t.micro_batch_s
    assert t.bubble_s == pytest.approx((p - 1) * t.micro_batch_s, rel=2e-3)


@pytest.mark.parametrize("m", [1, 2, 3, 4, 8])
def test_bubble_for_any_number_of_micro_batches(m):
    """1F1B takes m + p − 1 slots for every m; interleaved: (p−1)/v once m ≥ p, and
    (p − m) + (m − 1)/v slots of bubble with fewer micro-batches than stages (schedule.bubble_slots)."""
    p, v = 4, 2
    one = terms(SMALL, ideal(), pp=p, vpp=1, global_batch=float(m))
    assert one.bubble_s / one.micro_batch_s == pytest.approx(p - 1, rel=2e-3)
    two = terms(SMALL, ideal(), pp=p, vpp=v, global_batch=float(m))
    want = (p - 1) / v if m >= p else (p - m) + (m - 1) / v
    assert two.bubble_s / two.micro_batch_s == pytest.approx(want, rel=2e-3)
    assert bubble_slots(float(p), float(v), float(m)) == pytest.approx(want, rel=1e-12)


def test_bubble_does_not_grow_with_the_number_of_micro_batches():
    few, many = terms(GPT3_13B, pp=4, global_batch=16.0), terms(GPT3_13B, pp=4, global_batch=64.0)
    assert many.bubble_s == pytest.approx(few.bubble_s)
    assert many.bubble_s / many.time_s < few.bubble_s / few.time_s


# ----------------------------------------------------------------------------------- collectives

def layer_tp_s(t) -> float:
    """The layers' TP collectives of a step: tp_comm_s less the embedding's and the loss's."""
    return t.tp_comm_s - t.parts.micro_batches * t.parts.head_tp_s


def test_tp_traffic_is_four_all_reduces_per_layer_and_six_with_full_recompute():
    m, B, t_ = GPT3_13B, 32.0, 8.0
    tiers = tiers_of(A100, A100.devices_per_node)
    one = all_reduce_s(ACTIVATION_BYTES * 2048.0 * m.hidden, t_, 1.0, tiers)
    none = terms(m, tp=t_, global_batch=B)
    assert layer_tp_s(none) == pytest.approx(B * m.layers * 4 * one, rel=1e-12)
    assert layer_tp_s(terms(m, tp=t_, global_batch=B, recompute=2)) == pytest.approx(1.5 * layer_tp_s(none))
    assert terms(m, tp=t_, global_batch=B, recompute=1).tp_comm_s == pytest.approx(none.tp_comm_s)
    assert terms(m, tp=t_, global_batch=B, sp=1).tp_comm_s == pytest.approx(none.tp_comm_s)   # RS + AG = AR
    # beside the layers' all-reduces, the embedding's and the loss's (docs/model.md §2.9)
    assert none.tp_comm_s - layer_tp_s(none) == pytest.approx(B * none.parts.head_tp_s) and none.parts.head_tp_s > 0


def test_dp_traffic_when_nothing_hides_it():
    """Infinitely fast compute: the whole gradient reduction is exposed. ZeRO 0: all-reduce of FP32
    gradients; ZeRO 1/2: reduce-scatter of gradients + all-gather of 16-bit weights."""
    hw = ideal(A100, compute=True)
    hw = replace(hw, memory_bytes_per_s=1e30, scale_up_bytes_per_s=A100.scale_up_bytes_per_s,
                             scale_out_bytes_per_s=A100.scale_out_bytes_per_s,
                             scale_up_latency_s=A100.scale_up_latency_s, scale_out_latency_s=A100.scale_out_latency_s)
    tiers = tiers_of(hw, hw.devices_per_node)
    m, d, t_ = GPT3_13B, 16.0, 8.0
    P = stage_params(m, 1.0) / t_
    z0 = terms(m, hw, tp=t_, dp=d, global_batch=16.0)
    assert z0.dp_comm_s == pytest.approx(bucketed(all_reduce_s, P * MAIN_GRAD_BYTES, P, d, d, t_, tiers), rel=1e-9)
    z1 = terms(m, hw, tp=t_, dp=d, zero=1, global_batch=16.0)
    expected = (bucketed(reduce_scatter_s, P * MAIN_GRAD_BYTES, P, d, d, t_, tiers)
                + bucketed(all_gather_s, P * 2.0, P, d, d, t_, tiers))
    assert z1.dp_comm_s == pytest.approx(expected, rel=1e-9)



def bucketed(collective, size_bytes, params, dp, *args):
    """A data-parallel collective as Megatron-Core runs it (the default framework): ⌈P/B⌉ calls of
    B = max(40M, 1M·d) parameters each, the same bytes in all (traffic.dp_collective_calls)."""
    calls = max(math.ceil(params / max(40e6, 1e6 * dp)), 1)
    return calls * collective(size_bytes / calls, *args)

NO_CONTENTION = with_efficiency(A100, overlap_contention=0.0)


def calls_of(params, dp):
    """Megatron-Core's gradient buckets: ⌈P / max(40M, 1M·d)⌉ (traffic.dp_collective_calls)."""
    return max(math.ceil(params / max(40e6, 1e6 * dp)), 1)


def test_dp_reduction_hides_behind_backward_except_its_last_bucket():
    """The reduction of the last backward's buckets hides behind it except the last bucket (its gradients
    are ready only when the backward ends): one of the n_b calls, not one layer's worth."""
    m, d = load_model("gpt3-1.3b"), 8.0
    tiers = tiers_of(A100, A100.devices_per_node)
    t = terms(m, NO_CONTENTION, dp=d, micro_batch=4, global_batch=32.0 * 4)
    p = stage_params(m, 1.0)
    full = bucketed(all_reduce_s, p * MAIN_GRAD_BYTES, p, d, d, 1.0, tiers)
    assert t.dp_comm_s == pytest.approx(full / calls_of(p, d), rel=1e-9)


def test_fewer_bigger_buckets_leave_more_of_the_reduction_exposed():
    """Bucket by bucket: with the same bytes, a framework whose buckets are bigger (DeepSpeed's 5e8
    elements against Megatron-Core's max(40M, 1M·d)) leaves a bigger last bucket behind the backward;
    one bucket holding everything cannot hide at all (the whole reduction waits for the last gradient),
    and more buckets never expose more."""
    from helpers import job_and_layout
    from trainest.step import step_terms
    from trainest.step.overlap import dp_exposed_parts
    from trainest.step.traffic import DpTraffic, dp_collective_calls
    m, d = load_model("gpt3-1.3b"), 8.0
    p = stage_params(m, 1.0)
    kw = dict(dp=d, micro_batch=4, global_batch=32.0 * 4)
    megatron = step_of(m, NO_CONTENTION, **kw)
    job, lay = job_and_layout(m, NO_CONTENTION, framework="megatron-deepspeed", **kw)
    ds = step_terms(job, lay)
    calls = dp_collective_calls(job, lay, p)
    assert calls == math.ceil(p / 5e8) < calls_of(p, d)
    assert ds.dp_comm_s > megatron.dp_comm_s > 0.0
    assert ds.dp_comm_s == pytest.approx(float(ds.parts.dp.reduce_s) / calls, rel=1e-9)
    # the limits on a pure DpTraffic: t = 1 s behind a 10 s window, n_b buckets, no contention
    exposed = [float(dp_exposed_parts(lay, DpTraffic(1.0, 0.0, 0.0, 0.0, 1.0 / n, 0.0, 0.0), (10.0, 10.0), 0.0,
                                      1.0).reduce_s) for n in (1, 2, 8, 64, 10**6)]
    assert exposed[0] == 1.0 and exposed[-1] == pytest.approx(0.0, abs=1e-5)
    assert all(a >= b for a, b in zip(exposed, exposed[1:]))


def test_deepspeed_gathers_the_updated_weights_at_the_end_of_the_step():
    """ZeRO-1: Megatron-Core hides the all-gather of the updated weights behind the next forward
    (--overlap-param-gather); DeepSpeed's ZeRO-1/2 optimizer gathers them at the end of its step: the
    same bytes, exposed in full, and only the gather differs."""
    from helpers import job_and_layout
    from trainest.step import step_terms
    m, d = load_model("gpt3-1.3b"), 8.0
    kw = dict(dp=d, zero=1, micro_batch=4, global_batch=32.0 * 4)
    ds = step_terms(*job_and_layout(m, NO_CONTENTION, framework="megatron-deepspeed", **kw))
    megatron = step_of(m, NO_CONTENTION, **kw)
    assert float(ds.parts.dp.gather_s) > 0.0
    assert float(ds.parts.dp_exposed.gather_s) == pytest.approx(float(ds.parts.dp.gather_s), rel=1e-12)
    assert float(megatron.parts.dp_exposed.gather_s) < 0.5 * float(megatron.parts.dp.gather_s)
    assert ds.time_s > megatron.time_s


def test_hidden_traffic_costs_its_contention_share():
    """A fully hidden collective still slows the computation hiding it by κ × its time (NCCL kernels
    on the SMs), or shows its last bucket, whichever is more; κ = 0 on hardware whose collectives run
    off the compute cores (TPU ICI DMA)."""
    m, d = load_model("gpt3-1.3b"), 8.0
    tiers = tiers_of(A100, A100.devices_per_node)
    p = stage_params(m, 1.0)
    full = bucketed(all_reduce_s, p * MAIN_GRAD_BYTES, p, d, d, 1.0, tiers)
    kappa = A100.efficiency.overlap_contention
    assert kappa == pytest.approx(0.15)
    no_host = with_efficiency(A100, host_per_kernel_s=0.0)      # no wait for the host: the window is all busy
    t = terms(m, no_host, dp=d, micro_batch=4, global_batch=32.0 * 4)
    assert t.host_wait_s == 0.0
    assert t.dp_comm_s == pytest.approx(max(full / m.layers, kappa * full), rel=1e-9)
    # with the host's launches the device waits for it a little (the smooth maximum, §2.9): that part of the
    # window runs nothing beside the traffic, so the contention share is smaller, and never larger
    t = terms(m, dp=d, micro_batch=4, global_batch=32.0 * 4)
    assert t.host_wait_s > 0.0 and max(full / m.layers, 0.0) < t.dp_comm_s < kappa * full
    more = terms(m, with_efficiency(A100, overlap_contention=0.3), dp=d, micro_batch=4, global_batch=32.0 * 4)
    assert more.time_s > t.time_s > terms(m, NO_CONTENTION, dp=d, micro_batch=4, global_batch=32.0 * 4).time_s
    assert load_hardware("tpu-v5p").efficiency.overlap_contention == 0.0


def test_traffic_hidden_behind_a_wait_for_the_host_contends_with_nothing():
    """§4.7: of a window W of which the device waits I for the host, hidden traffic slows the computation only
    by what the idle time cannot carry: κ·max(min(t, W) − I, 0); what exceeds the window and the last bucket
    unchanged."""
    from trainest.step.overlap import overlapped_exposed_s
    assert overlapped_exposed_s(1.0, 10.0, 0.0, 0.15) == pytest.approx(0.15)
    assert overlapped_exposed_s(1.0, 10.0, 0.0, 0.15, 0.5) == pytest.approx(0.075)
    assert overlapped_exposed_s(1.0, 10.0, 0.0, 0.15, 5.0) == 0.0
    assert overlapped_exposed_s(1.0, 10.0, 0.3, 0.15, 10.0) == pytest.approx(0.3)
    assert overlapped_exposed_s(12.0, 10.0, 0.0, 0.15, 5.0) == pytest.approx(2.0)
    assert overlapped_exposed_s(10.0, 10.0, 0.0, 0.15, 4.0) == pytest.approx(0.15 * 6.0)
    assert overlapped_exposed_s(1.0, 0.0, 0.0, 0.15, 0.0) == pytest.approx(1.0)


def test_contention_never_slows_a_communication_bound_step():
    """When the traffic exceeds its window the step waits for the network anyway: the contention
    slows only the computation that was hidden behind it, so the exposed time is the excess."""
    m = load_model("gpt3-13b")
    slow = replace(A100, scale_up_bytes_per_s=2e9, scale_out_bytes_per_s=2e9)
    base = terms(m, with_efficiency(slow, overlap_contention=0.0), dp=64.0, zero=3, global_batch=64.0)
    with_k = terms(m, slow, dp=64.0, zero=3, global_batch=64.0)
    assert base.communication_s > base.compute_s       # communication-bound
    assert with_k.time_s == pytest.approx(base.time_s, rel=1e-12)


def test_zero1_weight_gather_hides_behind_the_forward_except_one_bucket():
    """ZeRO-1: the gradient reduce-scatter hides behind the last micro-batch's backward and the
    all-gather of the updated weights behind the first one's forward; with enough work in both,
    one bucket of each remains."""
    m, d = load_model("gpt3-1.3b"), 8.0
    tiers = tiers_of(A100, A100.devices_per_node)
    t = terms(m, NO_CONTENTION, dp=d, zero=1, micro_batch=4, global_batch=32.0 * 4)
    p = stage_params(m, 1.0)
    rs = bucketed(reduce_scatter_s, p * MAIN_GRAD_BYTES, p, d, d, 1.0, tiers)
    ag = bucketed(all_gather_s, p * 2.0, p, d, d, 1.0, tiers)
    assert t.dp_comm_s == pytest.approx((rs + ag) / calls_of(p, d), rel=1e-9)
    # with a slow network neither window is big enough: all of both transfers beyond the windows show,
    # and the gather never shows more than it costs
    slow = replace(A100, scale_up_bytes_per_s=1e9)
    ts = terms(m, slow, dp=d, zero=1, micro_batch=1, global_batch=8.0)
    tiers_slow = tiers_of(slow, slow.devices_per_node)
    total = (reduce_scatter_s(p * MAIN_GRAD_BYTES, d, 1.0, tiers_slow) + all_gather_s(p * 2.0, d, 1.0, tiers_slow))
    assert total * 0.5 < ts.dp_comm_s < total


def test_zero3_exposes_more_traffic_than_zero1():
    """ZeRO-3 gathers the weights twice and reduce-scatters the gradients every micro-batch."""
    z1 = terms(GPT3_13B, dp=8, zero=1, global_batch=64.0)
    z3 = terms(GPT3_13B, dp=8, zero=3, global_batch=64.0)
    assert z3.dp_comm_s > z1.dp_comm_s > 0.0


def test_tp_overlap_never_exposes_more_than_no_overlap():
    narrow = model_from_mapping({"layers": 8, "hidden": 512, "ffn_hidden": 2048, "heads": 16, "vocab": 1000}, "test")
    base = dict(global_batch=16.0, tp=8, sp=1)
    for tp in (8, 16):    # inside one node and across two
        base["tp"] = tp
        assert terms(narrow, **base, tp_overlap=1).tp_comm_s <= terms(narrow, **base).tp_comm_s


def test_tp_overlap_hides_nothing_when_the_tp_group_leaves_the_scale_up_domain():
    """physics.md #4: userbuffers overlap runs inside one NVLink domain: tp 16 over two H100 nodes is exposed."""
    base = dict(global_batch=16.0, tp=16, sp=1)
    assert terms(GPT3_13B, **base, tp_overlap=1).tp_comm_s == terms(GPT3_13B, **base).tp_comm_s
    tp = np.array([8.0, 16.0])
    over = terms(GPT3_13B, global_batch=16.0, tp=tp, sp=1, tp_overlap=1).tp_comm_s
    plain = terms(GPT3_13B, global_batch=16.0, tp=tp, sp=1).tp_comm_s
    assert over[0] < plain[0] and over[1] == plain[1]


def test_tp_overlap_hides_traffic_behind_large_gemms():
    base = dict(global_batch=16.0, tp=8, sp=1)
    assert terms(GPT3_13B, **base, tp_overlap=1).tp_comm_s < terms(GPT3_13B, **base).tp_comm_s


# ------------------------------------------------------------------------------------------- arrays

def test_arrays_give_the_same_answer_as_floats():
    tp = np.array([1.0, 2.0, 4.0, 8.0])
    pp = np.array([8.0, 4.0, 2.0, 1.0])
    dp = np.array([1.0, 1.0, 1.0, 1.0])
    zero = np.array([0.0, 1.0, 3.0, 0.0])
    rec = np.array([0.0, 1.0, 2.0, 1.0])
    arr = terms(GPT3_13B, global_batch=64.0, tp=tp, pp=pp, dp=dp, zero=zero, recompute=rec)
    for i in range(len(tp)):
        one = terms(GPT3_13B, global_batch=64.0, tp=tp[i], pp=pp[i], dp=dp[i], zero=zero[i], recompute=rec[i])
        assert arr.time_s[i] == pytest.approx(one.time_s, rel=1e-12)
        assert arr.bubble_s[i] == pytest.approx(one.bubble_s, rel=1e-12)
        assert arr.hardware_flops[i] == pytest.approx(one.hardware_flops, rel=1e-12)


def test_hybrid_sharding_with_one_group_is_plain_zero():
    for zero in (1, 3):
        plain = terms(GPT3_13B, dp=8, zero=zero, global_batch=64.0)
        same = step_of(GPT3_13B, A100, "bf16", "flash", seq_len=2048.0, global_batch=64.0, devices_per_node=8,
                          tp=1.0, pp=1.0, dp=8.0, cp=1.0, vpp=1.0, micro_batch=1.0, zero=float(zero), sp=0.0,
                          recompute=0.0, dp_shard=8.0)
        assert same.time_s == pytest.approx(plain.time_s, rel=1e-12)


def test_hybrid_sharding_adds_a_replica_all_reduce_when_nothing_hides_it():
    """HSDP: ZeRO collectives inside a shard group, then the dp/dp_shard replicas all-reduce their
    gradient shard once per step."""
    hw = replace(ideal(A100, compute=True), scale_up_bytes_per_s=A100.scale_up_bytes_per_s,
                             scale_out_bytes_per_s=A100.scale_out_bytes_per_s)
    tiers = tiers_of(hw, hw.devices_per_node)
    P = stage_params(GPT3_13B, 1.0)
    kw = dict(seq_len=2048.0, global_batch=16.0, devices_per_node=8, tp=1.0, pp=1.0, dp=16.0, cp=1.0, vpp=1.0,
              micro_batch=1.0, zero=1.0, sp=0.0, recompute=0.0)
    t = step_of(GPT3_13B, hw, "bf16", "flash", **kw, dp_shard=8.0)
    expected = (reduce_scatter_s(P * MAIN_GRAD_BYTES, 8.0, 1.0, tiers) + all_gather_s(P * 2.0, 8.0, 1.0, tiers)
                + all_reduce_s(P / 8 * MAIN_GRAD_BYTES, 2.0, 8.0, tiers))
    assert t.dp_comm_s == pytest.approx(expected, rel=1e-9)


def test_hybrid_sharding_replica_all_reduce_is_never_hidden():
    """With plenty of compute to hide behind, the shard group's traffic hides (one bucket of each
    remains) but the replicas' all-reduce over the slow tier stays exposed in full."""
    tiers = tiers_of(A100, A100.devices_per_node)
    P = stage_params(GPT3_13B, 1.0)
    kw = dict(seq_len=2048.0, global_batch=64.0, devices_per_node=8, tp=1.0, pp=1.0, dp=16.0, cp=1.0, vpp=1.0,
              micro_batch=4.0, zero=1.0, sp=0.0, recompute=0.0)
    hsdp = step_of(GPT3_13B, NO_CONTENTION, "bf16", "flash", **kw, dp_shard=8.0)
    replica = bucketed(all_reduce_s, P / 8 * MAIN_GRAD_BYTES, P, 16.0, 2.0, 8.0, tiers)
    one_bucket = (bucketed(reduce_scatter_s, P * MAIN_GRAD_BYTES, P, 16.0, 8.0, 1.0, tiers)
                  + bucketed(all_gather_s, P * 2.0, P, 16.0, 8.0, 1.0, tiers)) / calls_of(P, 16.0)
    assert hsdp.dp_comm_s == pytest.approx(replica + one_bucket, rel=1e-9)


# ------------------------------------------------------------------ ZeRO-2, attention kernels, KV, CP

def test_zero2_with_gradient_accumulation_reduces_every_micro_batch():
    """ZeRO-2 keeps only a gradient shard, so every micro-batch's gradients are reduce-scattered
    (DeepSpeed ZeRO-2): more DP traffic than ZeRO-1 when m > 1, the same when m = 1."""
    one_mb = dict(dp=8, global_batch=8.0)                  # m = 1
    many = dict(dp=8, global_batch=64.0)                   # m = 8
    assert terms(GPT3_13B, zero=2, **one_mb).dp_comm_s == pytest.approx(terms(GPT3_13B, zero=1, **one_mb).dp_comm_s)
    assert terms(GPT3_13B, zero=2, **many).dp_comm_s > terms(GPT3_13B, zero=1, **many).dp_comm_s


def test_flash2_is_slower_than_the_best_kernel_by_its_relative_factor():
    """flash2 runs attention at flash2_attention × the rate of `flash`; at 1 the two are the same."""
    slow = with_efficiency(A100, flash2_attention=0.5)
    assert terms(GPT3_13B, slow, "bf16", "flash2").time_s > terms(GPT3_13B, slow, "bf16", "flash").time_s
    same = with_efficiency(A100, flash2_attention=1.0)
    assert terms(GPT3_13B, same, "bf16", "flash2").time_s == pytest.approx(
        terms(GPT3_13B, same, "bf16", "flash").time_s, rel=1e-12)


def _attention_flops_per_s(seq_len, cp=1.0, model=SMALL):
    """Achieved FLOP/s of fused attention (forward + backward) on a hardware whose only finite
    resource is attention: the step time with a finite attention rate minus that with an infinite one."""
    hw = ideal()
    fast = terms(model, with_efficiency(hw, attention=1e30), seq_len=seq_len, global_batch=8.0, cp=cp).time_s
    real = terms(model, hw, seq_len=seq_len, global_batch=8.0, cp=cp).time_s
    flops_fwd = 4.0 * 8.0 * seq_len * seq_len * model.heads * model.head_dim * CAUSAL_FRACTION * model.layers / cp
    from trainest.step.layer import FLASH_BACKWARD_EFFICIENCY, FLASH_BACKWARD_FLOP_RATIO
    # forward at rate r, backward 2.5× the FLOPs at 0.85·r: time = F/r·(1 + 2.5/0.85)
    return flops_fwd * (1.0 + FLASH_BACKWARD_FLOP_RATIO / FLASH_BACKWARD_EFFICIENCY) / (real - fast)


def _products_flops(s: int, d_qk: int, d_v: int) -> tuple[int, int]:
    """(forward, backward) FLOPs of fused attention over an s×s score block, product by product: forward
    S = Q·Kᵀ (s×d_qk by d_qk×s) and O = P·V (s×s by s×d_v); backward S again, dP = dO·Vᵀ, dV = Pᵀ·dO,
    dQ = dS·K, dK = dSᵀ·Q (each 2·m·n·k)."""
    def mm(m: int, k: int, n: int) -> int:
        return 2 * m * k * n
    forward = mm(s, d_qk, s) + mm(s, s, d_v)
    backward = mm(s, d_qk, s) + mm(s, d_v, s) + mm(s, s, d_v) + mm(s, s, d_qk) + mm(s, s, d_qk)
    return forward, backward


@pytest.mark.parametrize("d_qk, d_v", [(128, 128), (64, 64), (192, 128), (576, 512)])
def test_the_attention_backward_counts_its_five_products_with_their_own_widths(d_qk, d_v):
    """FlashAttention's backward recomputes Q·Kᵀ and runs dP, dV over the value width and dQ, dK over the
    query/key width: (3·d_qk + 2·d_v)/(d_qk + d_v) of the forward's FLOPs, 2.5 for equal widths, 2.6 for
    DeepSeek-V3's MLA (192, 128). The bug this catches: MLA's backward was charged 2.5× its forward."""
    from trainest.step.layer import FLASH_BACKWARD_FLOP_RATIO, flash_backward_flop_ratio
    forward, backward = _products_flops(256, d_qk, d_v)
    assert flash_backward_flop_ratio(d_qk, d_v) == pytest.approx(backward / forward, rel=1e-12)
    if d_qk == d_v:
        assert flash_backward_flop_ratio(d_qk, d_v) == FLASH_BACKWARD_FLOP_RATIO


def test_an_mla_layer_charges_its_attention_backward_by_its_own_widths():
    """DeepSeek-V3 (d_qk 192, d_v 128): the attention op's backward FLOPs are 2.6× its forward's; a model with
    equal widths keeps 2.5×."""
    from trainest.scenario import job_of, layout_of, scenario_from_mapping
    from trainest.step.compose import layer_terms
    for model, ratio in (("deepseek-v3", 2.6), ("llama3-8b", 2.5)):
        s = scenario_from_mapping({"model": model, "hardware": "h100-sxm", "devices": 64, "precision": "bf16",
                                   "seq_len": 4096, "micro_batch": 1, "global_batch": 64,
                                   "parallel": {"ep": 64 if model == "deepseek-v3" else 1, "zero": 1}}, "t")
        ops = next(iter(dict(layer_terms(job_of(s), layout_of(s)).mean.parts).values())).lp.ops
        fwd = next(o for o in ops.attention_forward if o.name == "attention")
        bwd = next(o for o in ops.attention_backward if o.name == "attention")
        assert bwd.flops / fwd.flops == pytest.approx(ratio, rel=1e-12)


@pytest.mark.parametrize("precision", ["fp8", "fp4"])
def test_the_output_layer_runs_in_16_bit_under_a_low_precision_recipe(precision):
    """Megatron-Core's output layer is a plain ColumnParallelLinear outside Transformer Engine's FP8 context
    (torchtitan's float8 leaves `output` out too): under an FP8/FP4 recipe its three GEMMs take what the same
    GEMMs take in a BF16 run, while the layers' GEMMs run faster than in BF16. The bug this catches: the logits
    were charged at the FP8/FP4 rate, 4 % of Nemotron 3 Super's step on GB300."""
    from trainest.scenario import job_of, layout_of, scenario_from_mapping
    from trainest.step.compose import layer_terms
    def terms(p):
        s = scenario_from_mapping({"model": "llama3-8b", "hardware": "b200", "devices": 8, "precision": p,
                                   "seq_len": 8192, "micro_batch": 1, "global_batch": 64,
                                   "parallel": {"zero": 1}}, "t")
        return layer_terms(job_of(s), layout_of(s))
    low, bf16 = terms(precision), terms("bf16")
    for name in ("logits", "logits.dgrad", "logits.wgrad"):
        a = next(o for o in low.logits if o.name == name)
        b = next(o for o in bf16.logits if o.name == name)
        assert (a.compute_s, a.bytes) == pytest.approx((b.compute_s, b.bytes), rel=1e-12)
    assert low.mean.lp.linear_s < bf16.mean.lp.linear_s


def test_fused_attention_rate_rises_with_the_per_rank_sequence_length():
    """η_a · s/(s + ATTENTION_HALF_SEQ) · d_h/(d_h + ATTENTION_HALF_HEAD_DIM), s the per-rank length s/c
    (FlashAttention-2 benchmark curves, Dao 2023)."""
    from trainest.step.rates import ATTENTION_HALF_HEAD_DIM, ATTENTION_HALF_SEQ
    hw = ideal()
    rates = [_attention_flops_per_s(s) for s in (512.0, 1024.0, 4096.0)]
    assert rates[0] < rates[1] < rates[2]
    d_h = SMALL.head_dim
    expected = (hw.peak("bf16") * hw.efficiency.attention * 4096.0 / (4096.0 + ATTENTION_HALF_SEQ)
                * d_h / (d_h + ATTENTION_HALF_HEAD_DIM))
    assert rates[2] == pytest.approx(expected, rel=1e-6)
    # context parallelism shortens the sequence each rank's kernel sees
    assert _attention_flops_per_s(4096.0, cp=2.0) == pytest.approx(_attention_flops_per_s(2048.0), rel=1e-6)


def test_a_context_parallel_ring_merges_partial_results_and_launches_per_step():
    """Each ring step after the first writes a partial output that is merged into the running one (4
    e-byte passes of the rank's output forward; of dQ, dK, dV backward) and launches the fused kernels
    again with its send/receive and merges: nothing at c = 1, growing with c, bounded in bytes by the
    whole sequence's."""
    from helpers import job_and_layout
    from trainest.step.kernels import CP_STEP_EXTRA_KERNELS, FLASH_KERNELS, attention_kernels
    from trainest.step.layer import CP_MERGE_PASSES, cp_merge_ops
    from trainest.step.rates import local_shape, rates_of
    m = load_model("llama3-8b")
    merged = {}
    for c in (1.0, 2.0, 4.0, 16.0):
        job, lay = job_and_layout(m, A100, seq_len=32768.0, cp=c, tp=2.0, global_batch=1.0)
        x = local_shape(job, lay)
        ops = cp_merge_ops(job, lay, rates_of(job, lay), x)
        merged[c] = sum(o.bytes for o in ops)
        if c == 1.0:
            assert ops == [] and attention_kernels(job, lay) == FLASH_KERNELS
            continue
        out = 2.0 * x.tokens * m.heads * m.head_dim / 2.0
        assert ops[0].bytes == pytest.approx(CP_MERGE_PASSES * (c - 1.0) * out, rel=1e-12)
        assert ops[1].bytes == pytest.approx(ops[0].bytes * (1.0 + 2.0 * m.kv_heads / m.heads), rel=1e-12)
        fwd, bwd = attention_kernels(job, lay)
        assert fwd == c * FLASH_KERNELS[0] + (c - 1.0) * CP_STEP_EXTRA_KERNELS[0]
        assert bwd == c * FLASH_KERNELS[1] + (c - 1.0) * CP_STEP_EXTRA_KERNELS[1]
    assert merged[1.0] == 0.0 < merged[2.0] < merged[4.0] < merged[16.0]
    whole = 2.0 * 32768.0 * m.heads * m.head_dim / 2.0 * CP_MERGE_PASSES * (1.0 + (1.0 + 2.0 * m.kv_heads / m.heads))
    assert merged[16.0] < whole


def test_standard_attention_hardware_flops_count_the_masked_half():
    """Materialised scores compute all s×s: HFU counts 3·L·B·s·(2·s·a·d_h) more than MFU (no recompute)."""
    m, B, s = SMALL, 8.0, 2048.0
    std = terms(m, attention="standard", seq_len=s, global_batch=B)
    masked = 3.0 * m.layers * B * s * 4.0 * s * m.heads * m.head_dim * (1.0 - CAUSAL_FRACTION)
    assert std.hardware_flops - std.model_flops == pytest.approx(masked, rel=1e-12)
    assert terms(m, seq_len=s, global_batch=B).hardware_flops == terms(m, seq_len=s, global_batch=B).model_flops


def test_kv_heads_are_replicated_when_fewer_than_tp_ranks():
    """With g < t each TP rank keeps one KV head (Megatron replicates them): the GEMMs and attention
    of g = 1 cost what g = t costs."""
    shape = {"layers": 8, "hidden": 4096, "ffn_hidden": 16384, "heads": 32, "vocab": 8}
    mqa = model_from_mapping({**shape, "kv_heads": 1}, "test")
    g8 = model_from_mapping({**shape, "kv_heads": 8}, "test")
    g32 = model_from_mapping({**shape, "kv_heads": 32}, "test")
    a = terms(mqa, tp=8, global_batch=8.0)
    b = terms(g8, tp=8, global_batch=8.0)
    assert a.compute_s == pytest.approx(b.compute_s, rel=1e-12)
    assert terms(g32, tp=8, global_batch=8.0).compute_s > b.compute_s


def test_context_parallel_ranks_join_the_gradient_reduction():
    """Weights are replicated over the c CP ranks: gradients are reduced over the d·c ranks (stride t),
    so d = 4, c = 2 moves what d = 8, c = 1 moves when nothing hides it."""
    hw = replace(ideal(A100, compute=True), scale_up_bytes_per_s=A100.scale_up_bytes_per_s,
                             scale_out_bytes_per_s=A100.scale_out_bytes_per_s,
                             scale_up_latency_s=A100.scale_up_latency_s, scale_out_latency_s=A100.scale_out_latency_s)
    for zero in (0, 1):
        dc = terms(GPT3_13B, hw, tp=2, dp=4, cp=2, zero=zero, global_batch=16.0)
        d = terms(GPT3_13B, hw, tp=2, dp=8, cp=1, zero=zero, global_batch=16.0)
        assert dc.dp_comm_s == pytest.approx(d.dp_comm_s, rel=1e-12)
        assert dc.dp_comm_s > terms(GPT3_13B, hw, tp=2, dp=4, cp=1, zero=zero, global_batch=16.0).dp_comm_s


def test_tp_overlap_exposes_at_least_the_residual():
    """exposed = max(tp_total − GEMM time, TP_OVERLAP_RESIDUAL·tp_total), never above tp_total."""
    from trainest.step.traffic import TP_OVERLAP_RESIDUAL
    base = dict(global_batch=16.0, tp=8, sp=1)
    plain = terms(GPT3_13B, **base).tp_comm_s
    over = terms(GPT3_13B, **base, tp_overlap=1).tp_comm_s
    assert TP_OVERLAP_RESIDUAL * plain * (1 - 1e-12) <= over <= plain


def test_balanced_split_with_one_stage_is_the_even_split():
    """p = 1: the balanced split has nothing to balance; the step is the even split's."""
    from helpers import step_of as st
    kw = dict(seq_len=2048.0, global_batch=16.0, devices_per_node=8, tp=2.0, pp=1.0, dp=2.0, cp=1.0, vpp=1.0,
              micro_batch=1.0, zero=1.0, sp=0.0, recompute=0.0)
    even = st(GPT3_13B, A100, "bf16", "flash", **kw)
    bal = st(GPT3_13B, A100, "bf16", "flash", **kw, pipeline_split="balanced")
    assert bal.time_s == pytest.approx(even.time_s, rel=1e-12)


def test_balanced_split_heaviest_stage_holds_ceil_l_plus_2_over_p_layers():
    """L = 40, p = 4: even split 10 layers per stage (the last also runs the logits); balanced
    ceil(42/4) = 11 on the middle stages and 10 + logits on the last, so never faster."""
    kw = dict(seq_len=2048.0, global_batch=16.0, devices_per_node=8, tp=1.0, pp=4.0, dp=1.0, cp=1.0, vpp=1.0,
              micro_batch=1.0, zero=0.0, sp=0.0, recompute=0.0)
    even = step_of(GPT3_13B, A100, "bf16", "flash", **kw)
    bal = step_of(GPT3_13B, A100, "bf16", "flash", **kw, pipeline_split="balanced")
    assert GPT3_13B.layers == 40
    assert bal.time_s > even.time_s


def test_zero3_pays_three_ring_latencies_per_layer_per_micro_batch():
    """ZeRO-3: all-gather forward, all-gather backward, reduce-scatter per layer (and the embeddings
    once), every micro-batch; with no bandwidth limit and no compute to hide behind, only the
    (n−1)·α ring latencies remain."""
    hw = replace(ideal(A100, compute=True), scale_up_latency_s=3e-6, scale_out_latency_s=8e-6)
    d, B = 8.0, 32.0
    t = terms(GPT3_13B, hw, dp=d, zero=3, global_batch=B)
    m = B / d
    ring = (d - 1) * 3e-6                                  # inside one 8-GPU domain
    assert t.dp_comm_s == pytest.approx(m * (3 * GPT3_13B.layers + 3) * ring, rel=1e-6)


def _flat_vs_hier(model, hw, **kw):
    lay = dict(seq_len=2048.0, global_batch=64.0, devices_per_node=8, tp=1.0, pp=1.0, dp=64.0, cp=1.0, vpp=1.0,
               micro_batch=1.0, zero=3.0, sp=0.0, recompute=2.0)
    lay.update(kw)
    return tuple(step_of(model, hw, "bf16", "flash", **lay, dp_collectives=c)
                 for c in ("flat", "hierarchical"))


def test_flat_dp_collectives_are_never_faster_and_change_only_dp_traffic():
    for kw in (dict(), dict(zero=0.0), dict(zero=1.0), dict(zero=2.0, global_batch=256.0),
               dict(tp=8.0, dp=8.0, global_batch=8.0), dict(dp=8.0, global_batch=8.0)):
        flat, hier = _flat_vs_hier(GPT3_13B, A100, **kw)
        assert flat.time_s >= hier.time_s * (1 - 1e-12), kw
        assert flat.compute_s == hier.compute_s and flat.tp_comm_s == hier.tp_comm_s, kw
    # a DP group inside one node (dp 8, 8 per node) and one with one rank per node (tp 8) see no change
    for kw in (dict(dp=8.0, global_batch=8.0), dict(tp=8.0, dp=8.0, global_batch=8.0)):
        flat, hier = _flat_vs_hier(GPT3_13B, A100, **kw)
        assert flat.time_s == pytest.approx(hier.time_s, rel=1e-12), kw


def test_flat_zero3_is_bound_by_one_nic_per_device():
    """Pure ZeRO-3 over many nodes with no compute to hide behind and no latency: the step is the
    per-device traffic (all-gather 2x 16-bit weights, reduce-scatter FP32 gradients: 8 B per
    parameter, times (n-1)/n) over ONE NIC."""
    from trainest.step.collectives import tiers_of
    hw = replace(ideal(A100, compute=True), scale_out_bytes_per_s=25e9, scale_up_bytes_per_s=300e9)
    flat, hier = _flat_vs_hier(GPT3_13B, hw, dp=512.0, global_batch=512.0)
    w_out = tiers_of(hw, 8).out_bytes_per_s
    traffic_s = 8.0 * GPT3_13B.params * 511 / 512 / w_out
    assert flat.dp_comm_s == pytest.approx(traffic_s, rel=1e-3)
    assert hier.dp_comm_s < flat.dp_comm_s / 4      # eight NICs per node with hierarchical rings


# ------------------------------------------------------------------ eager (unfused) element-wise kernels

def test_eager_kernels_add_only_element_wise_traffic():
    """Eager PyTorch moves the extra bytes of its unfused norms, SwiGLU and RoPE forward, twice that backward,
    once more when the forward is recomputed; compute and communication are unchanged."""
    m = load_model("llama3-8b")
    hw = A100
    mem_bw = hw.memory_bytes_per_s * hw.efficiency.memory
    B, s = 8.0, 2048.0
    for recompute, passes in ((0, 3.0), (2, 4.0)):
        kw = dict(seq_len=s, global_batch=B, devices_per_node=8, tp=1.0, pp=1.0, dp=1.0, cp=1.0, vpp=1.0,
                  micro_batch=1.0, zero=0.0, sp=0.0, recompute=float(recompute))
        fused = step_of(m, hw, "bf16", "flash", **kw)
        eager = step_of(m, hw, "bf16", "flash", **kw, kernels="eager")
        rope = (ROPE_PASSES["eager"] - ROPE_PASSES["fused"]) * ACTIVATION_BYTES * s * (m.heads + m.kv_heads) * m.head_dim
        extra_fwd = (EAGER_EXTRA_H_WIDE_PASSES * ACTIVATION_BYTES * s * m.hidden
                     + EAGER_EXTRA_F_WIDE_PASSES["swiglu"] * ACTIVATION_BYTES * s * m.ffn_hidden + rope) / mem_bw
        assert eager.memory_s - fused.memory_s == pytest.approx(B * m.layers * passes * extra_fwd, rel=1e-9)
        assert eager.compute_s == fused.compute_s
        assert eager.communication_s == fused.communication_s
    assert EAGER_EXTRA_F_WIDE_PASSES["gelu"] == 0.0     # GeLU is one kernel either way


def test_op_recompute_reruns_k_o_and_one_mlp_matmul_and_the_element_wise_ops():
    """torchtitan per-op checkpointing: the hardware FLOPs add the forward of K, the output projection
    and one f-wide matmul; the time lies between selective (attention core) and full recompute for a
    model whose attention is a small part of the layer."""
    m = load_model("llama3-8b")
    B, s = 8.0, 2048.0
    kw = dict(seq_len=s, global_batch=B, devices_per_node=8, tp=1.0, pp=1.0, dp=1.0, cp=1.0, vpp=1.0,
              micro_batch=1.0, zero=0.0, sp=0.0)
    none, sel, full, op = (step_of(m, A100, "bf16", "flash", **kw, recompute=r) for r in (0.0, 1.0, 2.0, 3.0))
    h, f = m.hidden, m.ffn_hidden
    extra = B * s * m.layers * 2.0 * (h * m.kv_heads * m.head_dim + m.heads * m.head_dim * h + h * f)
    assert op.hardware_flops - none.hardware_flops == pytest.approx(extra, rel=1e-12)
    assert op.model_flops == none.model_flops
    assert sel.time_s < op.time_s < full.time_s
    assert none.tp_comm_s == op.tp_comm_s == 0.0
    tp = {**kw, "tp": 8.0, "sp": 1.0}
    base = step_of(m, A100, "bf16", "flash", **tp, recompute=0.0)
    with_op = step_of(m, A100, "bf16", "flash", **tp, recompute=3.0)
    assert layer_tp_s(with_op) == pytest.approx(layer_tp_s(base) * 5.0 / 4.0, rel=1e-12)   # the re-gathers


def test_a_model_trained_without_dropout_moves_fewer_element_wise_bytes():
    """No mask writes in the two bias-dropout-adds (2 B per h-wide element forward) and, with
    materialised scores, no dropout over them (5 B per score); forward, backward and nothing else."""
    from trainest.record import replace as with_fields
    from trainest.step.layer import (
        NO_DROPOUT_H_WIDE_SAVING,
        NO_DROPOUT_SOFTMAX_BACKWARD_SAVING,
        NO_DROPOUT_SOFTMAX_SAVING,
    )
    m = GPT3_13B
    plain = with_fields(m, dropout=False)
    B, s = 4.0, 2048.0
    kw = dict(seq_len=s, global_batch=B, devices_per_node=8, tp=1.0, pp=1.0, dp=1.0, cp=1.0, vpp=1.0,
              micro_batch=1.0, zero=0.0, sp=0.0, recompute=0.0)
    mem_bw = A100.memory_bytes_per_s * A100.efficiency.memory
    # the h-wide saving forward and twice in the backward; the scores' forward and backward savings apart
    for attention, per_score in (("flash", 0.0), ("standard", NO_DROPOUT_SOFTMAX_SAVING + NO_DROPOUT_SOFTMAX_BACKWARD_SAVING)):
        with_d = step_of(m, A100, "bf16", attention, **kw)
        without = step_of(plain, A100, "bf16", attention, **kw)
        per_layer = (3.0 * NO_DROPOUT_H_WIDE_SAVING * s * m.hidden + per_score * m.heads * s * s) / mem_bw
        assert with_d.memory_s - without.memory_s == pytest.approx(B * m.layers * per_layer, rel=1e-9)
        assert with_d.compute_s == without.compute_s


# ------------------------------------------------------------------------- PCIe cards (issue 11, case 2)

def test_pcie_cards_in_one_server_are_faster_than_one_card():
    """8 L40S in one server (PCIe Gen4 x16, peer to peer) at the same global batch: data parallelism
    over PCIe costs far less than the 8x less compute saves (before, with the catalog's one device per
    node: 9.6 s against 3.5 s on one card, every collective at the 1 GB/s no-network placeholder; that
    layout is now refused, test_bad_input's network-missing-l40s)."""
    from trainest.estimate import estimate
    from trainest.scenario import scenario_from_mapping
    job = {"model": "gpt3-1.3b", "hardware": "l40s", "global_batch": 32, "recompute": "none", "parallel": {"zero": 0}}
    one = estimate(scenario_from_mapping({**job, "devices": 1}, "test"))
    eight = estimate(scenario_from_mapping({**job, "devices": 8, "devices_per_node": 8}, "test"))
    assert eight.step.time_s < one.step.time_s / 3
    assert eight.step.communication_detail_s["dp"] < 0.5 * eight.step.time_s


def test_tensor_parallelism_over_pcie_costs_its_all_reduces_at_the_pcie_rate():
    """tp 8 on 8 H100 PCIe in one server: each of the 4 all-reduces per layer and micro-batch moves
    2·(7/8)·e·T·h over PCIe Gen5 x16 at PCIE_ACHIEVABLE_FRACTION (before: 240 s of TP traffic per step
    at the 1 GB/s placeholder; now ~10 s)."""
    from trainest.step.collectives import NCCL_CALL_S, PCIE_ACHIEVABLE_FRACTION
    hw, m = load_hardware("h100-pcie"), load_model("llama3-8b")
    t = step_of(m, hw, seq_len=8192.0, global_batch=32.0, devices_per_node=8, tp=8.0, pp=1.0, dp=1.0, cp=1.0,
                vpp=1.0, micro_batch=1.0, zero=0.0, sp=0.0, recompute=0.0)
    w = 64e9 * PCIE_ACHIEVABLE_FRACTION
    per_all_reduce = (2 * 7 / 8 * ACTIVATION_BYTES * 8192 * m.hidden / w + 2 * 7 * hw.intra_node_latency_s
                      + NCCL_CALL_S)                       # and the call's fixed cost (§3.3a)
    assert layer_tp_s(t) == pytest.approx(32 * m.layers * 4 * per_all_reduce, rel=1e-9)


def test_packed_sequences_cut_attention_to_each_document():
    """Packed sequences (docs/model.md §2.4): examples of mean length L attend only to themselves, so
    fused attention computes L/s of a full causal mask's FLOPs, at the rate its length factor gives
    for L; its bytes, the GEMMs and the model FLOPs do not change. Unpacked (or L = s) is the old model."""
    from trainest.scenario import job_of, layout_of
    from trainest.scenario import scenario_from_mapping
    from trainest.step.layer import attention_ops, linear_gemms
    from trainest.step.rates import ATTENTION_HALF_SEQ, attention_span, local_shape, packed_fraction, rates_of

    base = {"model": "llama2-7b", "hardware": "h100-sxm", "devices": 8, "precision": "bf16", "seq_len": 4096,
            "global_batch": 8, "micro_batch": 1, "parallel": {"tp": 1, "pp": 1}}

    def parts(**extra):
        s = scenario_from_mapping({**base, **extra}, "test")
        job, layout = job_of(s), layout_of(s)
        r, x = rates_of(job, layout), local_shape(job, layout)
        fwd, bwd = attention_ops(job, layout, r, x)
        return job, layout, r, fwd[0], bwd[0], linear_gemms(job, layout, r, x), s

    job0, layout0, r0, f0, b0, g0, s0 = parts()
    job, layout, r, f, b, g, s = parts(packed_length=256)
    assert packed_fraction(job0) == 1.0 and packed_fraction(job) == pytest.approx(256.0 / 4096.0)
    assert attention_span(job0, layout0) == 4096.0 and attention_span(job, layout) == 256.0
    assert f.flops == pytest.approx(f0.flops * 256.0 / 4096.0, rel=1e-12)
    assert b.flops == pytest.approx(b0.flops * 256.0 / 4096.0, rel=1e-12)
    assert f.bytes == pytest.approx(f0.bytes, rel=1e-12)
    # the rate's length factor at L instead of s
    ratio = (256.0 / (256.0 + ATTENTION_HALF_SEQ)) / (4096.0 / (4096.0 + ATTENTION_HALF_SEQ))
    assert r.attention_flops_per_s == pytest.approx(r0.attention_flops_per_s * ratio, rel=1e-12)
    assert [o.time_s for o in g] == [o.time_s for o in g0]
    # a whole-sequence "document" is the unpacked model; the step is faster when packed, same FLOP count
    assert parts(packed_length=4096)[3].flops == pytest.approx(f0.flops, rel=1e-12)
    from trainest.step import step_terms
    packed, unpacked = step_terms(job_of(s), layout_of(s)), step_terms(job_of(s0), layout_of(s0))
    assert packed.time_s < unpacked.time_s
    assert packed.model_flops == pytest.approx(unpacked.model_flops, rel=1e-12)
    with pytest.raises(Exception, match="packed_length"):
        scenario_from_mapping({**base, "packed_length": 8192}, "test")


def test_rope_adds_two_passes_of_queries_and_keys_fused_and_ten_eager():
    """A RoPE model's element-wise forward bytes exceed the same model's with learned positions by
    ROPE_PASSES·e·T·(a + g)·d_h/t: 2 passes fused, 10 eager; ALiBi and learned positions add nothing;
    the rotary kernels are 2 (fused) or 10 (eager) more per layer forward."""
    from trainest.record import replace

    from helpers import job_and_layout

    from trainest.step.kernels import elementwise_kernels
    from trainest.step.layer import elementwise_bytes
    from trainest.step.rates import local_shape
    H100 = load_hardware("h100-sxm")
    llama = load_model("llama3-8b")
    assert llama.positional == "rope" and load_model("gpt3-175b").positional == "learned"
    learned = replace(llama, positional="learned")
    for kernels, passes in (("fused", 2.0), ("eager", 10.0)):
        for tp in (1.0, 4.0):
            job_r, lay_r = job_and_layout(llama, H100, "bf16", "flash", kernels=kernels, tp=tp)
            job_l, lay_l = job_and_layout(learned, H100, "bf16", "flash", kernels=kernels, tp=tp)
            x = local_shape(job_r, lay_r)
            extra = elementwise_bytes(job_r, lay_r, x) - elementwise_bytes(job_l, lay_l, local_shape(job_l, lay_l))
            want = passes * 2.0 * x.tokens * (llama.heads + llama.kv_heads) * llama.head_dim / tp
            assert extra == pytest.approx(want, rel=1e-12)
            assert elementwise_kernels(job_r) - elementwise_kernels(job_l) == passes
    alibi = replace(llama, positional="alibi")
    job_a, lay_a = job_and_layout(alibi, H100, "bf16", "flash")
    job_l, lay_l = job_and_layout(learned, H100, "bf16", "flash")
    assert elementwise_bytes(job_a, lay_a, local_shape(job_a, lay_a)) == elementwise_bytes(
        job_l, lay_l, local_shape(job_l, lay_l))


@pytest.mark.parametrize("op", ["elementwise", "tp.all_reduce"])
def test_an_fp32_memory_bound_op_takes_twice_the_bf16_one(op):
    """The element-wise kernels move e-byte activations: 4 B at FP32, 2 B at BF16, so a memory-bound op
    takes twice as long, and a collective of activations moves twice the bytes; GPT-2 has dropout: its masks are in the 15 h-wide passes."""
    from trainest.estimate import estimate_ops
    from trainest.scenario import scenario_from_mapping

    def row(precision):
        ops, _ = estimate_ops(scenario_from_mapping({"model": "gpt2-350m", "hardware": "a100-80gb-sxm", "devices": 2,
                                                     "seq_len": 1024, "global_batch": 2, "precision": precision,
                                                     "parallel": {"tp": 2}}, "test"))
        return next(o for o in ops if o.name == op and o.phase in ("forward", "step"))
    bf16, fp32 = row("bf16"), row("fp32")
    assert fp32.bytes == pytest.approx(2.0 * bf16.bytes, rel=1e-12)
    if op == "elementwise":                      # the collective adds its latency, which does not scale
        assert fp32.time_s == pytest.approx(2.0 * bf16.time_s, rel=1e-12)


def test_zero3_backward_traffic_cannot_borrow_the_forwards_slack():
    """ZeRO-3/FSDP: the forward's all-gathers hide behind the forward only, the backward's all-gathers
    and reduce-scatters behind the backward only (docs/model.md §4.5). When the backward's traffic
    outlasts the backward while the micro-batch's traffic still fits in the micro-batch's work, the
    excess shows (one window over the whole micro-batch would have hidden it); each pass keeps its own
    waited-for layer; with both passes hidden only the contention share of the traffic remains."""
    from trainest.step.compose import zero3_pass_exposed_s
    from trainest.step.traffic import Zero3Traffic
    z3 = Zero3Traffic(layer_s=0.3, total_s=3.5, forward_s=0.5, layer_gather_s=0.1)
    # forward: 0.5 s of gathers in a 2 s forward; backward: 3 s of traffic in a 2 s backward
    exposed = zero3_pass_exposed_s(z3, 2.0, 4.0, 0.0)
    assert exposed == pytest.approx((3.0 - 2.0) + 0.1, rel=1e-12)
    assert exposed > max(z3.total_s - 4.0, z3.layer_s)      # what one window over both passes leaves
    # both passes hide their traffic: the waited-for layers, or the contention share of all of it
    small = Zero3Traffic(layer_s=0.003, total_s=0.35, forward_s=0.05, layer_gather_s=0.001)
    assert zero3_pass_exposed_s(small, 2.0, 4.0, 0.0) == pytest.approx(0.003, rel=1e-12)
    assert zero3_pass_exposed_s(small, 2.0, 4.0, 0.15) == pytest.approx(0.15 * 0.35, rel=1e-12)
    # more backward work never exposes more
    assert zero3_pass_exposed_s(z3, 2.0, 5.0, 0.15) <= zero3_pass_exposed_s(z3, 2.0, 4.0, 0.15)


def test_zero3_step_shows_at_least_what_the_backward_cannot_hide():
    """A whole step under ZeRO-3 on a slow network: the exposed traffic per micro-batch is at least the
    backward's collectives (an all-gather and a reduce-scatter per layer) less the backward's work."""
    from helpers import job_and_layout
    from trainest.step import step_terms
    from trainest.step.traffic import zero3_s
    slow = replace(A100, scale_up_bytes_per_s=20e9, scale_out_bytes_per_s=20e9)
    job, lay = job_and_layout(GPT3_13B, slow, dp=8.0, zero=3.0, global_batch=8.0)
    t = step_terms(job, lay)
    tiers = tiers_of(slow, slow.devices_per_node)
    z3 = zero3_s(job, lay, tiers, float(GPT3_13B.layers), float(t.parts.trained_params))
    lp = t.parts.layer
    backward_work = GPT3_13B.layers * (lp.compute_s + lp.memory_s + lp.overhead_s + lp.floor_s
                                       - lp.fwd_c - lp.fwd_m - lp.fwd_floor_s)
    assert float(z3.total_s - z3.forward_s) > backward_work          # the backward is communication-bound
    assert float(t.dp_comm_s) >= float(z3.total_s - z3.forward_s) - backward_work

