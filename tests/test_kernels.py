"""Kernel-level costs (docs/model.md §2.2 wave quantization, §2.9 kernels and the host): limits,
monotonicity and the framework input."""

from __future__ import annotations

import dataclasses

from trainest.record import replace

import pytest
from helpers import call_entry, job_and_layout, step_of

from trainest.catalog import load_hardware, model_from_mapping, with_efficiency
from trainest.frameworks import FRAMEWORKS, substituted
from trainest.step.collectives import tied_embedding_s, tiers_of
from trainest.step.kernels import (
    HEAD_HOST_PER_KERNEL_S,
    attention_kernels,
    cross_entropy_bytes_per_logit,
    head_host_s,
    head_kernels,
    head_tp_s,
    host_layer_s,
    layer_kernels,
    pass_kernels,
    softmax_fallback,
    softmax_fallback_ops,
)
from trainest.step.optimizer import optimizer_kernels, optimizer_s
from trainest.step.roofline import wave_efficiency

A100 = load_hardware("a100-80gb-sxm")
SMALL = model_from_mapping({"name": "small", "layers": 12, "hidden": 1024, "ffn_hidden": 4096, "heads": 16,
                            "vocab": 50304, "tied_embeddings": True}, "test")


# ------------------------------------------------------------------------------------ wave quantization

def test_full_waves_of_whole_tiles_keep_every_unit_busy():
    assert wave_efficiency(128 * 108, 128, 4096, units=108, tile_m=128, tile_n=128) == pytest.approx(1.0)


def test_a_few_tiles_leave_units_idle_and_split_k_helps_only_with_a_long_k():
    short = wave_efficiency(1024, 384, 128, units=108, tile_m=128, tile_n=128)      # 24 tiles, no split-K
    long = wave_efficiency(1024, 384, 4096, units=108, tile_m=128, tile_n=128)      # split-K 4: 96 tiles
    assert short == pytest.approx(24 / 108) and long == pytest.approx(96 / 108)


def test_edge_tiles_are_partly_filled_and_batches_count_together():
    assert wave_efficiency(96, 128, 512, units=1, tile_m=128, tile_n=128) == pytest.approx(0.75)
    # a skinny matrix gets a tile of its own width (a rank-16 LoRA adapter is not padded to 128)
    assert wave_efficiency(16, 128, 512, units=1, tile_m=128, tile_n=128) == pytest.approx(1.0)
    one = wave_efficiency(1024, 1024, 64, units=108, tile_m=128, tile_n=128)
    batched = wave_efficiency(1024, 1024, 64, units=108, tile_m=128, tile_n=128, batch=27)
    assert one == pytest.approx(64 / 108) and batched == pytest.approx(1.0)


# ------------------------------------------------------------------------------------ host and floors

def _kw(**layout):
    return dict(seq_len=1024.0, global_batch=8.0, **layout)


def test_kernel_counts_follow_the_recompute_mode():
    job, none = job_and_layout(SMALL, A100, "fp16", "standard", **_kw(recompute=0.0))
    _, full = job_and_layout(SMALL, A100, "fp16", "standard", **_kw(recompute=2.0))
    forward, backward, recompute = pass_kernels(job, full)
    assert recompute == forward and layer_kernels(job, full) == layer_kernels(job, none) + forward
    assert backward > forward


def test_without_host_time_or_floors_the_step_is_the_roofline():
    bare = with_efficiency(A100, host_per_kernel_s=0.0, kernel_floor_s=0.0)
    t = step_of(SMALL, bare, "fp16", "standard", **_kw(micro_batch=1.0))
    assert t.overhead_s == pytest.approx(0.0, abs=1e-15)


def test_a_slow_host_makes_the_step_host_bound():
    slow = with_efficiency(A100, host_per_kernel_s=1e-3, kernel_floor_s=0.0)
    t = step_of(SMALL, slow, "fp16", "standard", **_kw())
    job, layout = job_and_layout(SMALL, slow, "fp16", "standard", **_kw())
    micro_batches = 8.0
    assert t.overhead_s > t.compute_s + t.memory_s
    assert t.time_s >= micro_batches * SMALL.layers * float(host_layer_s(job, layout))


@pytest.mark.parametrize("host_us", [0.0, 10.0, 60.0, 300.0])
def test_more_host_time_per_kernel_is_never_faster(host_us):
    a = step_of(SMALL, with_efficiency(A100, host_per_kernel_s=host_us * 1e-6), "fp16", "standard", **_kw(tp=2.0))
    b = step_of(SMALL, with_efficiency(A100, host_per_kernel_s=(host_us + 5) * 1e-6), "fp16", "standard",
                **_kw(tp=2.0))
    assert b.time_s >= a.time_s


def test_a_higher_kernel_floor_is_never_faster():
    a = step_of(SMALL, with_efficiency(A100, kernel_floor_s=2e-6, host_per_kernel_s=0.0), "fp16", "standard",
                **_kw(tp=8.0))
    b = step_of(SMALL, with_efficiency(A100, kernel_floor_s=20e-6, host_per_kernel_s=0.0), "fp16", "standard",
                **_kw(tp=8.0))
    assert b.time_s > a.time_s


def test_a_compiled_xla_step_has_no_host_time():
    assert FRAMEWORKS["maxtext"].host_factor == 0.0
    job, layout = job_and_layout(SMALL, A100, "bf16", "flash", **_kw(), framework="maxtext")
    assert host_layer_s(job, layout) == 0.0


def test_megatron_deepspeeds_fitted_host_scale_goes_with_the_framework_not_the_hardware():
    """specs/frameworks.json: the host time per kernel the vTrain rows fit is Megatron-DeepSpeed's
    (its scale over plain PyTorch's), so it applies on any hardware and not to other frameworks."""
    import json

    from trainest.frameworks import fitted_file
    from trainest.step.kernels import host_per_kernel_s
    path = fitted_file()
    assert path is not None
    entry = json.loads(path.read_text())["frameworks"]["megatron-deepspeed"]
    assert 1.5 < entry["host_scale"] < 5.0
    assert FRAMEWORKS["megatron-deepspeed"].host_scale == entry["host_scale"]
    h100 = load_hardware("h100-sxm")
    for hw in (A100, h100):
        md, _ = job_and_layout(SMALL, hw, "fp16", "standard", **_kw(), framework="megatron-deepspeed")
        hf, _ = job_and_layout(SMALL, hw, "fp16", "standard", **_kw(), framework="hf-accelerate")
        assert host_per_kernel_s(md) == pytest.approx(entry["host_scale"] * host_per_kernel_s(hf))
    assert A100.efficiency.host_per_kernel_s == pytest.approx(entry["prior_host_us_per_kernel"] * 1e-6)
    # the head's plain operators keep plain PyTorch's time
    md, lay = job_and_layout(SMALL, A100, "fp16", "standard", **_kw(), framework="megatron-deepspeed")
    hf, _ = job_and_layout(SMALL, A100, "fp16", "standard", **_kw(), framework="hf-accelerate")
    assert head_host_s(md, lay)[1] == pytest.approx(head_host_s(hf, lay)[1] * (1 + 0 * lay.tp))


def test_without_bucketing_the_gradient_reduction_is_exposed_in_full():
    kw = _kw(dp=8.0, micro_batch=1.0)
    overlapped = step_of(SMALL, A100, "fp16", "standard", **kw)
    exposed = step_of(SMALL, A100, "fp16", "standard", **kw, dp_overlap=0.0)
    assert exposed.dp_comm_s > overlapped.dp_comm_s
    assert exposed.time_s > overlapped.time_s


# ------------------------------------------------------------------------------------ the framework input

def test_the_framework_is_an_input_echoed_in_the_json(capsys):
    import json
    code, out, err = call_entry(["estimate", "--framework", "megatron-deepspeed", "--model", "gpt3-125m",
                                 "--devices", "8", "--global-batch", "64", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["inputs"]["framework"] == "megatron-deepspeed"
    assert doc["inputs"]["parallel"]["dp_overlap"] is True


def test_an_unknown_framework_lists_the_known_ones(capsys):
    code, out, err = call_entry(["estimate", "--framework", "jax-magic"], capsys)
    assert code == 2 or code == 1
    assert out == "" and "megatron-core" in err and err.count("\n") == 1


def test_a_framework_without_the_interleaved_schedule_refuses_virtual_stages(capsys):
    code, out, err = call_entry(["estimate", "--framework", "megatron-deepspeed", "--model", "gpt3-1.3b",
                                 "--devices", "8", "--pp", "4", "--vpp", "2", "--global-batch", "16"], capsys)
    assert code == 1 and out == "" and "interleaved" in err and "megatron-deepspeed" in err


def test_plan_does_not_search_virtual_stages_for_a_framework_without_them():
    from trainest import search as S
    base = S.job_scenario({"model": "gpt3-1.3b", "global_batch": 64, "framework": "megatron-deepspeed"})
    g = S.enumerate_plans(base, 16, S.SearchSpace())
    assert set(g.vpp.tolist()) == {1.0}
    base = replace(base, framework="megatron-core")
    assert max(S.enumerate_plans(base, 16, S.SearchSpace()).vpp) > 1


def test_the_host_and_device_meet_in_a_smooth_maximum_between_their_max_and_their_sum():
    from trainest.step.kernels import host_wait_s
    d = 1e-3
    for h in (0.0, 0.2e-3, 1e-3, 3e-3, 10e-3):
        t = d + host_wait_s(h, d)
        assert max(h, d) <= t <= h + d
    assert host_wait_s(0.0, d) == 0.0                                    # no host time: no wait
    assert d + host_wait_s(d, d) == pytest.approx(2.0 ** 0.25 * d)       # p = 4 at equal times
    assert host_wait_s(5e-3, d, exponent=200.0) == pytest.approx(4e-3, rel=1e-3)   # p → ∞: the plain max
    waits = [host_wait_s(h, d) for h in (0.1e-3, 0.5e-3, 1e-3, 2e-3)]
    assert waits == sorted(waits)                                        # more host time, more wait


def test_a_host_bound_step_says_so_and_a_device_bound_one_does_not():
    from trainest.estimate import estimate
    from trainest.scenario import scenario_from_mapping
    base = {"model": "gpt2-350m", "hardware": "a100-80gb-sxm", "devices": 8, "precision": "fp16", "seq_len": 1024,
            "framework": "megatron-deepspeed", "attention": "standard", "recompute": "full",
            "parallel": {"tp": 8, "pp": 1}}
    small = estimate(scenario_from_mapping({**base, "micro_batch": 1, "global_batch": 8}))
    big = estimate(scenario_from_mapping({**base, "model": "gpt3-13b", "seq_len": 2048, "micro_batch": 4,
                                          "global_batch": 32}))
    assert small.step.bound_by == "host" and big.step.bound_by == "device"
    # a device-bound step waits for the host only at each micro-batch's synchronisation (its get_batch)
    from trainest.scenario import job_of
    from trainest.step.kernels import micro_batch_host_s
    synced = 8 * micro_batch_host_s(job_of(big.scenario))
    assert synced < big.step.overhead_detail_s["host_wait"] < synced + 1e-3 * big.step.time_s


# ------------------------------------------------------------------------------------ Megatron's fused softmax

def test_the_fused_softmax_falls_back_where_its_kernel_does_not_take_the_shape():
    # a = 16 heads: b·a/t must be a multiple of 4 (s = 1024 >= 256)
    def fallback(**kw):
        knobs = {**_kw(), **kw}
        job, layout = job_and_layout(SMALL, A100, "fp16", knobs.pop("attention", "standard"), **knobs)
        return softmax_fallback(job, layout)
    assert fallback(tp=8.0, micro_batch=1.0) == 1.0 and fallback(tp=8.0, micro_batch=3.0) == 1.0
    assert fallback(tp=8.0, micro_batch=2.0) == 0.0 and fallback(tp=4.0, micro_batch=1.0) == 0.0
    assert fallback(tp=8.0, micro_batch=1.0, attention="flash") == 0.0          # no softmax kernel at all
    assert fallback(tp=8.0, micro_batch=1.0, framework="hf-accelerate") == 0.0  # not Megatron's module
    assert fallback(tp=1.0, seq_len=8192.0) == 1.0                              # rows beyond 4096: no kernel


def test_the_fp32_fallback_adds_kernels_bytes_and_time():
    job, one = job_and_layout(SMALL, A100, "fp16", "standard", **_kw(tp=8.0, micro_batch=1.0))
    _, two = job_and_layout(SMALL, A100, "fp16", "standard", **_kw(tp=8.0, micro_batch=2.0))
    assert attention_kernels(job, one)[0] == attention_kernels(job)[0] + 4.0
    assert attention_kernels(job, two) == attention_kernels(job)
    fwd, bwd = softmax_fallback_ops(job, one, 1e12, 1e6)
    assert fwd[0].bytes == pytest.approx(33e6) and bwd[0].bytes == pytest.approx(35e6)
    assert softmax_fallback_ops(job, two, 1e12, 1e6) == ([], [])
    # the same shape without the fallback (a framework without Megatron's softmax) is faster
    megatron = step_of(SMALL, A100, "fp16", "standard", **_kw(tp=8.0, micro_batch=1.0, framework="megatron-deepspeed"))
    plain = FRAMEWORKS["megatron-deepspeed"]._replace(megatron_softmax=False)
    with substituted(plain):
        fused = step_of(SMALL, A100, "fp16", "standard", **_kw(tp=8.0, micro_batch=1.0, framework="megatron-deepspeed"))
    assert megatron.time_s > fused.time_s


def test_standard_attention_softmax_bytes_are_counted_by_pass():
    """Forward 9 B per score (fused softmax 2 + 2, dropout 2 + 2 + a 1-byte mask); backward 11 (the dropout's
    backward 2 + 1 + 2, the softmax backward 2 + 2 + 2), not twice the forward; without dropout 4 and 6."""
    from trainest.step.layer import attention_ops
    from trainest.step.rates import local_shape, rates_of

    def softmax_bytes_per_score(model):
        job, layout = job_and_layout(model, A100, "fp16", "standard", **_kw(tp=2.0, micro_batch=4.0))
        x = local_shape(job, layout)
        fwd, bwd = attention_ops(job, layout, rates_of(job, layout), x)
        pick = [next(o for o in ops if o.name == "attention.softmax") for ops in (fwd, bwd)]
        return [o.bytes / x.score_elements for o in pick]
    assert softmax_bytes_per_score(SMALL) == pytest.approx([9.0, 11.0])
    assert softmax_bytes_per_score(replace(SMALL, dropout=False)) == pytest.approx([4.0, 6.0])


# ------------------------------------------------------------------------------------ outside the layers

def test_the_loss_and_embedding_kernels_and_collectives():
    job, tp1 = job_and_layout(SMALL, A100, "fp16", "standard", **_kw())
    _, tp8 = job_and_layout(SMALL, A100, "fp16", "standard", **_kw(tp=8.0))
    assert head_kernels(job, tp1) == (23.0, 44.0) and head_kernels(job, tp8) == (29.0, 48.0)
    tiers = tiers_of(A100, 8)
    assert head_tp_s(job, tp1, 1024.0, tiers) == (0.0, 0.0)
    small, big = head_tp_s(job, tp8, 1024.0, tiers), head_tp_s(job, tp8, 8192.0, tiers)
    assert 0.0 < small[0] < big[0] and small[1] > small[0] and big[1] > big[0]
    # one plain operator costs at most HEAD_HOST_PER_KERNEL_S, and nothing in a compiled step
    first, last = head_host_s(job, tp1)
    assert last == pytest.approx(44.0 * min(A100.efficiency.host_per_kernel_s, HEAD_HOST_PER_KERNEL_S))
    xla, _ = job_and_layout(SMALL, A100, "bf16", "flash", **_kw(), framework="maxtext")
    assert head_host_s(xla, tp1) == (0.0, 0.0)


def test_a_host_bound_loss_adds_its_host_time_and_never_less():
    slow = with_efficiency(A100, host_per_kernel_s=1e-3, kernel_floor_s=0.0)   # the layers: host-bound
    t = step_of(SMALL, slow, "fp16", "standard", **_kw(micro_batch=1.0))
    job, layout = job_and_layout(SMALL, slow, "fp16", "standard", **_kw(micro_batch=1.0))
    first, last = head_host_s(job, layout)
    assert t.host_s == pytest.approx(8.0 * (SMALL.layers * float(host_layer_s(job, layout)) + first + last))
    assert t.time_s >= t.host_s            # host-bound: the device waits for every launch
    assert t.host_wait_s == pytest.approx(t.overhead_s)
    # with pipeline stages the loss and the embedding sit on different stages: no stage has both
    pp = step_of(SMALL, slow, "fp16", "standard", **_kw(micro_batch=1.0, pp=2.0))
    assert pp.micro_batch_s < t.micro_batch_s


def test_megatrons_unfused_cross_entropy_moves_52_bytes_per_logit():
    ds, _ = job_and_layout(SMALL, A100, "fp16", "standard", **_kw(), framework="megatron-deepspeed")
    mc, _ = job_and_layout(SMALL, A100, "fp16", "standard", **_kw(), framework="megatron-core")
    assert cross_entropy_bytes_per_logit(ds) == 52.0 and cross_entropy_bytes_per_logit(mc) == 16.0


# ------------------------------------------------------------------------------------ optimizer and tied embeddings

def test_optimizer_kernels_are_multi_tensor_launches():
    assert optimizer_kernels(1.0) == 3.0 and optimizer_kernels(320 * 65536.0) == 3.0
    assert optimizer_kernels(320 * 65536.0 + 1.0) == 6.0
    many = [optimizer_kernels(p) for p in (1e6, 1e8, 1e9, 1e10)]
    assert many == sorted(many)
    _, layout = job_and_layout(SMALL, A100, "fp16", "standard", **_kw())
    assert optimizer_s(layout, 1e6, 1e12) == pytest.approx(34e6 / 1e12)          # no floor: the bytes
    assert optimizer_s(layout, 1e6, 1e12, kernel_floor_s=1e-3) == pytest.approx(3e-3)   # floors bound it


def test_the_tied_embedding_gradient_is_all_reduced_between_first_and_last_stage():
    tiers = tiers_of(A100, 8)
    job, pp1 = job_and_layout(SMALL, A100, "fp16", "standard", **_kw())
    _, pp2 = job_and_layout(SMALL, A100, "fp16", "standard", **_kw(pp=2.0))
    _, pp2_tp2 = job_and_layout(SMALL, A100, "fp16", "standard", **_kw(pp=2.0, tp=2.0))
    assert tied_embedding_s(job, pp1, tiers) == 0.0
    assert tied_embedding_s(job, pp2, tiers) > tied_embedding_s(job, pp2_tp2, tiers) > 0.0
    untied = job._replace(model=replace(SMALL, tied_embeddings=False))
    assert tied_embedding_s(untied, pp2, tiers) == 0.0


def test_the_step_is_host_bound_only_when_its_layers_are():
    """`bound_by` says what paces the layers. A large step whose only host wait is the embedding's few
    launches (bug: Llama 3 8B at 8k tokens was labelled "host-bound" for 3.7 ms of a 7.8 s step) is
    device-bound; a small model at micro-batch 1 with a slow host is host-bound."""
    from trainest.estimate import estimate
    from trainest.scenario import scenario_from_mapping
    big = estimate(scenario_from_mapping({}))
    assert big.step.overhead_detail_s["host_wait"] > 0.0 and big.step.bound_by == "device"
    slow = with_efficiency(A100, host_per_kernel_s=1e-3, kernel_floor_s=0.0)
    t = step_of(SMALL, slow, "fp16", "standard", **_kw(micro_batch=1.0))
    assert 0.0 < t.layers_host_wait_s <= t.host_wait_s
    fast = step_of(SMALL, with_efficiency(A100, host_per_kernel_s=0.0, kernel_floor_s=0.0), "fp16", "standard",
                   **_kw(micro_batch=1.0))
    assert fast.layers_host_wait_s == 0.0


def test_list_frameworks_shows_each_and_its_fitted_host_scale(capsys):
    code, out, err = call_entry(["list", "frameworks"], capsys)
    assert code == 0 and err == ""
    for name in FRAMEWORKS:
        assert name in out
    assert f"{FRAMEWORKS['megatron-deepspeed'].host_scale:.2f}*" in out
    code, out, _ = call_entry(["list", "frameworks", "--sort", "price"], capsys)
    assert code != 0 and out == ""


# ------------------------------------------------------------------------ the host's work per micro-batch

def test_only_a_framework_that_syncs_every_micro_batch_pays_its_host_time():
    """docs/model.md §2.9: Megatron-DeepSpeed's get_batch copies the batch sizes to the host every
    micro-batch, so its Python there is on the path; a framework whose device runs ahead pays nothing."""
    from trainest.step.kernels import micro_batch_host_s
    synced = [f.name for f in FRAMEWORKS.values() if f.micro_batch_sync]
    assert synced == ["megatron-deepspeed", "hf-accelerate"]
    for name in FRAMEWORKS:
        job, _ = job_and_layout(SMALL, A100, "fp16", "standard", **_kw(), framework=name)
        t = micro_batch_host_s(job)
        if name in synced:
            f = FRAMEWORKS[name]
            assert t == pytest.approx(A100.efficiency.host_per_micro_batch_s * f.micro_batch_host_scale) and t > 0
            if name == "hf-accelerate":                 # no measured run: the system's prior, not fitted
                assert f.micro_batch_host_scale == 1.0
        else:
            assert t == 0.0


def test_the_host_time_per_micro_batch_adds_once_per_micro_batch():
    """Conservation: without a pipeline, raising the system's host time per micro-batch by δ makes the
    step exactly m·δ longer (m micro-batches), all of it overhead, and changes nothing else."""
    from trainest.frameworks import FRAMEWORKS as F
    delta = 1e-3
    for m in (1.0, 4.0, 16.0):
        kw = dict(_kw(), global_batch=m, framework="megatron-deepspeed")
        base = step_of(SMALL, A100, "fp16", "standard", **kw)
        more = step_of(SMALL, with_efficiency(A100, host_per_micro_batch_s=A100.efficiency.host_per_micro_batch_s
                                              + delta), "fp16", "standard", **kw)
        added = m * delta * F["megatron-deepspeed"].micro_batch_host_scale
        assert more.time_s - base.time_s == pytest.approx(added, rel=1e-9)
        assert more.overhead_s - base.overhead_s == pytest.approx(added, rel=1e-9)
        assert (more.compute_s, more.memory_s, more.communication_s) == (base.compute_s, base.memory_s,
                                                                         base.communication_s)


def test_megatron_deepspeeds_fitted_micro_batch_host_time_goes_with_the_framework():
    import json

    from trainest.frameworks import fitted_file
    entry = json.loads(fitted_file().read_text())["frameworks"]["megatron-deepspeed"]
    assert FRAMEWORKS["megatron-deepspeed"].micro_batch_host_scale == entry["micro_batch_host_scale"]
    assert 0.1 < entry["host_ms_per_micro_batch"] < 20.0          # within calibrate's bounds, not at them
    assert A100.efficiency.host_per_micro_batch_s == pytest.approx(entry["prior_host_ms_per_micro_batch"] * 1e-3)


def test_calibrate_fits_the_micro_batch_host_time_only_where_a_run_syncs_there():
    from trainest.calibrate import parameters_for
    from helpers import bundled_cases
    vtrain = list(bundled_cases("vtrain-single-node"))[:5]
    assert "host_per_micro_batch_s" in parameters_for(vtrain)
    public_small = [c for c in bundled_cases("public") if c.scenario.model.params < 3e9][:5]
    assert public_small and "host_per_micro_batch_s" not in parameters_for(public_small)


def test_the_framework_registry_is_read_only_and_names_the_choices():
    """FRAMEWORKS is built once (no code changes it by assignment), in the order and with the names of the
    --framework vocabulary (choices.FRAMEWORKS)."""
    from trainest.choices import FRAMEWORKS as NAMES
    assert tuple(FRAMEWORKS) == NAMES
    with pytest.raises(TypeError):
        FRAMEWORKS["megatron-core"] = FRAMEWORKS["nemo"]   # type: ignore[index]
