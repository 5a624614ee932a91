"""Traces in (trainest/trace/, `trainest calibrate --trace`, docs/model.md §17.2-17.3): reading PyTorch profiler
and Nsight Systems traces, the kernel classification on real kernel names, the class comparison, the fit
(round trip of trainest's own timelines), several ranks, and bad input."""

from __future__ import annotations

import dataclasses

from trainest.record import replace
import gzip
import json
import sqlite3
from pathlib import Path

import pytest
from helpers import call_entry

from trainest.calibrate import bounds_of
from trainest.catalog import with_efficiency
from trainest.errors import SpecError
from trainest.report.timeline import chrome_trace
from trainest.scenario import scenario_from_mapping
from trainest.timeline import step_timeline
from trainest.trace.calibrate import calibrate_trace
from trainest.trace.classify import kernel_class, model_class
from trainest.trace.compare import measure
from trainest.trace.reader import find_steps, read_trace

# DeepSeek's published H800 trace (deepseek-ai/profile-data @ 4496024, train.json; ../shared/reference/traces),
# vendored gzipped so that a clean clone has it
DEEPSEEK = Path(__file__).parent / "data" / "deepseek-v3-train-h800-ep64.json.gz"
# DeepSeek-V3's settings (DeepSeek-AI 2024 §3.2-3.3): DeepEP's dispatch (once per node, forwarded over NVLink),
# recompute of the RMSNorms and MLA's up-projections only, BF16 Adam moments
DEEPSEEK_ARGS = ["--model", "deepseek-v3", "--hardware", "h800-sxm", "--devices", "2048", "--pp", "16", "--ep", "64",
                 "--pipeline-schedule", "dualpipe", "--pipeline-split", "balanced", "--precision", "fp8",
                 "--seq-len", "4096", "--global-batch", "15360", "--trace-layers", "4", "--moe-dispatcher", "deepep",
                 "--recompute", "selective", "--recompute-modules", "layernorm,mla_up_proj", "--adam-moments", "bf16"]


@pytest.mark.parametrize("name, cls", [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
     "__5x_cublas", "gemm"),
    ("ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_tn", "gemm"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT", "gemm"),
    ("void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel>(dpsk::grouped_gemm::cuda::"
     "fp8_ptp128c::GemmKernel::Params)", "gemm"),
    ("void cutlass::device_kernel<dpsk::grouped_gemm::cuda::m_grouped_fp8_ptp128c::GemmKernel>(...)",
     "grouped_gemm"),
    ("void flash::compute_attn_ws<Flash_fwd_kernel_traits<192, 128, 128, 12, 2, false, 1, cutlass::bfloat16_t, 128>>",
     "attention"),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>",
     "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3", "attention"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "all_reduce"),
    ("ncclKernel_ReduceScatter_RING_LL_Sum_bf16(ncclDevComm*, unsigned long, ncclWork*)", "reduce_scatter"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "all_gather"),
    ("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", "send_recv"),
    ("void dpsk::ep::internode::dispatch<false, 8, false, 8>(int4*, float*, long*)", "all_to_all"),
    ("void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*)", "all_to_all"),
    ("void layer_norm::ln_fwd_kernel<layer_norm::Kernel_traits<__nv_bfloat16, float, 7168u>>", "norm"),
    ("void cuda::per_token_cast_to_fp8_with_channels<__nv_bfloat16, 128, false, 128, false>(...)", "cast"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>", "elementwise"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", "elementwise"),
    ("rotary_kernel", "elementwise"),
    ("void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>>", "optimizer"),
    ("Memcpy HtoD (Pinned -> Device)", "host_copy"),
    ("Memcpy DtoD (Device -> Device)", "device_copy"),
    # Mamba-2: mamba_ssm's SSD Triton kernels (the scan, compared with the model's scan at the attention rate) and
    # causal-conv1d's convolution
    ("_chunk_scan_fwd_kernel", "scan"), ("_chunk_state_bwd_db_kernel", "scan"), ("_bmm_chunk_fwd_kernel", "scan"),
    ("_state_passing_fwd_kernel", "scan"), ("void causal_conv1d_fwd_kernel<Causal_conv1d_fwd_kernel_traits<128>>",
                                            "conv"),
    # trainest's own op names (its timelines read back)
    ("qkv.dgrad", "gemm"), ("mla.kv_up.wgrad", "gemm"), ("experts_up", "grouped_gemm"), ("attention", "attention"),
    ("elementwise", "elementwise"), ("tp.collectives", "all_reduce"), ("ep.all_to_all", "all_to_all"),
    ("pp.send_recv", "send_recv"), ("optimizer.adam", "optimizer"), ("offload.grads_down", "host_copy"),
    # DeepEP's barrier on the token counts: waiting on the other ranks, not bytes (before its dispatch and combine)
    ("void dpsk::ep::internode::cached_notify<false>(int, int, int, int, int, int, int, int)", "ep_notify"),
    ("void dpsk::ep::internode::notify_dispatch<false, 8>(int const*, int*, int, int const*)", "ep_notify"),
    ("void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8>(int4*, float*)", "all_to_all"),
])
def test_the_classification_table_on_real_kernel_names(name, cls):
    assert kernel_class(name) == cls


def test_the_deepseek_trace_reads_end_to_end_with_its_kernel_time_classified():
    t = read_trace(str(DEEPSEEK))
    assert t.source == "pytorch" and t.has_backward and t.rank == 0 and t.world_size == 64
    assert len([k for k in t.kernels if "Memcpy" not in k.name and "Memset" not in k.name]) == 963
    how, steps = find_steps(t)
    assert how == "ProfilerStep annotations" and len(steps) == 1
    m = measure(t)
    assert m.classified_share >= 0.95
    # the published trace overlaps DeepEP's all-to-alls with the other micro-batch's computation (DualPipe)
    assert m.classes["all_to_all"] > 0 and m.comm_overlap > 0.5


def test_the_deepseek_trace_is_compared_class_by_class(tmp_path, capsys):
    code, out, err = call_entry(["calibrate", "--trace", str(DEEPSEEK), *DEEPSEEK_ARGS, "-o", str(tmp_path / "p.yaml"),
                                 "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    classes = {c["class"]: c for c in doc["classes"]}
    assert {"gemm", "grouped_gemm", "attention", "memory_bound", "all_to_all"} <= set(classes)
    assert all(c["measured_s"] > 0 and c["predicted_s"] > 0 for c in classes.values() if c["class"] != "unclassified")
    assert doc["classified_share"] >= 0.95 and doc["trace_layers"] == 4
    # a class more than 2x off is named in a warning, and not fitted; DeepSeek's trace runs its experts' weight
    # gradients as dense DeepGEMM kernels: the dense and grouped GEMMs are off in opposite directions, their sum is not
    off = [c for c in classes.values() if c["ratio"] and not 0.5 <= c["ratio"] <= 2.0]
    for c in off:
        assert f"class {c['class']}:" in err or (c["class"] in ("gemm", "grouped_gemm")
                                                 and "classes gemm and grouped_gemm:" in err)
    gemms = [classes[n] for n in ("gemm", "grouped_gemm")]
    assert 0.5 <= sum(c["measured_s"] for c in gemms) / sum(c["predicted_s"] for c in gemms) <= 2.0


def test_the_moe_layer_model_against_the_deepseek_trace_class_by_class(tmp_path, capsys):
    """Issue 33: DeepSeek's 4 + 4 MoE layer passes (one sequence of 4096 tokens per micro-batch: the GEMMs, the
    element-wise kernels and the all-to-alls all scale with it, and all three agree at b = 1, each would be ~0.5x
    at b = 2) against trainest's same passes at the H800's prior efficiencies: the GEMMs (dense and grouped
    together: the trace runs the experts' weight gradients as dense DeepGEMM kernels), the memory-bound kernels
    (norms, casts, SwiGLU, permutation) and the all-to-alls' overlap (the share of the all-to-all time beside
    computation against the predicted hidden share under DualPipe) within 15 %; DeepEP's all-to-all time itself is
    checked apart (test_the_deepseek_trace_all_to_all_agrees_with_the_shipped_all_to_all_efficiency). Attention is not:
    its FLOPs are counted as the kernels compute them (s²·a·(d_qk + d_v)/2 per layer forward, 2.6x that
    backward: (3·d_qk + 2·d_v)/(d_qk + d_v)), but FlashAttention-3 on H800 runs at about 0.44 of the 16-bit peak where the H800's unfitted
    prior, with its length and head-width factors, gives 0.36: measured 0.65-0.8x of predicted."""
    from trainest.scenario import job_of, layout_of, scenario_from_mapping
    from trainest.step.compose import layer_terms
    code, out, err = call_entry(["calibrate", "--trace", str(DEEPSEEK), *DEEPSEEK_ARGS, "-o", str(tmp_path / "p.yaml"),
                                 "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    rows = {c["class"]: (c["measured_s"], c["predicted_s"]) for c in doc["classes"]}
    gemm = tuple(rows["gemm"][i] + rows["grouped_gemm"][i] for i in (0, 1))
    assert 0.85 <= gemm[0] / gemm[1] <= 1.15, gemm
    # the memory-bound class: 1.09 before the fifth session's refit, 1.153 after it (the H800's prior is the median
    # of the fitted devices' memory efficiencies, which rose), 1.188 after the eighth session's (the H800 inherits
    # the H100 SXM's fit, whose memory efficiency rose 0.624 -> 0.644 when the GCP A3 runs, 100 Gb/s per GPU, moved
    # to their own device); issue 33's 15 % is missed by it, and this guard holds it from moving further
    assert 0.85 <= rows["memory_bound"][0] / rows["memory_bound"][1] <= 1.20, rows["memory_bound"]
    assert 0.65 <= rows["attention"][0] / rows["attention"][1] <= 0.8
    s = scenario_from_mapping({"model": "deepseek-v3", "hardware": "h800-sxm", "devices": 2048, "precision": "fp8",
                               "seq_len": 4096, "global_batch": 15360, "moe_dispatcher": "deepep",
                               "recompute": "selective", "recompute_modules": ["layernorm", "mla_up_proj"],
                               "adam_moments": "bf16", "parallel": {"pp": 16, "ep": 64, "pipeline_schedule": "dualpipe",
                                                                    "pipeline_split": "balanced"}}, "deepseek")
    mean = layer_terms(job_of(s), layout_of(s)).mean
    hidden = 1.0 - mean.ep_exposed_s / mean.ep_total_s
    assert 0.85 <= doc["comm_overlap"] / hidden <= 1.15, (doc["comm_overlap"], hidden)


def test_the_deepseek_trace_all_to_all_agrees_with_the_shipped_all_to_all_efficiency(tmp_path, capsys):
    """DeepEP's dispatch and combine kernels in DeepSeek's trace (80.5 ms) within 15 % of trainest's all-to-alls
    at the shipped H800 all_to_all efficiency (fitted on the bundled H100 runs, mostly NCCL's all-to-all). The
    bug this catches: DeepEP's notify kernels (33 ms: a barrier on the token counts, whose length is the ranks'
    skew) were counted as all-to-all bytes, so the trace measured 1.23x the prediction and seemed to want an
    efficiency of 0.52 where the bundled runs want 0.65; they are idle time now (classify: ep_notify)."""
    code, out, err = call_entry(["calibrate", "--trace", str(DEEPSEEK), *DEEPSEEK_ARGS, "-o", str(tmp_path / "p.yaml"),
                                 "--json"], capsys)
    assert code == 0, err
    measured, predicted = next((c["measured_s"], c["predicted_s"]) for c in json.loads(out)["classes"]
                               if c["class"] == "all_to_all")
    assert 0.85 <= measured / predicted <= 1.15, (measured, predicted)


def test_dense_and_grouped_gemms_off_in_opposite_directions_are_fitted_as_one_class_only_when_their_sum_agrees():
    from trainest.trace.compare import ClassRow, joint_gemm_row
    split = [ClassRow("gemm", 5.0, 2.0, "compute"), ClassRow("grouped_gemm", 2.0, 5.0, "compute")]
    assert joint_gemm_row(split) == ClassRow("gemm+grouped_gemm", 7.0, 7.0, "compute")
    assert joint_gemm_row([split[0], ClassRow("grouped_gemm", 0.1, 50.0, "compute")]) is None   # the sum is off too
    assert joint_gemm_row([split[0], ClassRow("grouped_gemm", 5.0, 5.0, "compute")]) is None   # not opposite


ROUND_TRIP = {
    "tp-pp-dense": {"model": "llama3-8b", "devices": 16, "parallel": {"tp": 2, "pp": 2, "zero": 1}, "seq_len": 4096,
                    "global_batch": 64},
    "moe-ep": {"model": "qwen3-30b-a3b", "hardware": "h100-sxm", "devices": 64, "seq_len": 4096, "global_batch": 256,
               "parallel": {"pp": 4, "ep": 8, "zero": 1}},
    "one-gpu": {"model": "llama3.2-3b", "hardware": "h100-sxm", "devices": 1, "seq_len": 2048, "global_batch": 8},
    "hybrid": {"model": "nemotron-3-nano", "hardware": "h100-sxm", "devices": 16, "seq_len": 8192, "global_batch": 64,
               "parallel": {"ep": 8, "zero": 1}},
}
# the efficiencies the timelines are made with: the hardware's start values times these
MADE_WITH = {"gemm": 0.9, "attention": 1.1, "memory": 0.93, "scale_up": 0.85, "grouped_gemm": 0.95,
             "all_to_all": 1.05}


@pytest.mark.parametrize("name", list(ROUND_TRIP))
def test_a_timeline_fed_back_recovers_the_efficiencies_it_was_made_with(name, tmp_path):
    s = scenario_from_mapping(ROUND_TRIP[name], "t")
    e = s.hardware.efficiency
    # each value inside its physical bounds (a fitted start on a bound, e.g. grouped_gemm 0.5, times 0.95
    # would ask the fit for a value it may not take)
    made = {k: min(max(getattr(e, k) * f, 1.02 * bounds_of(k, s.hardware)[0]), 0.98 * bounds_of(k, s.hardware)[1])
            for k, f in MADE_WITH.items() if k not in ("grouped_gemm", "all_to_all") or s.model.moe is not None}
    truth = replace(s, hardware=with_efficiency(s.hardware, **made))
    path = tmp_path / "step.json"
    path.write_text(json.dumps(chrome_trace(step_timeline(truth))))
    r = calibrate_trace(s, [str(path)])
    fitted = {p.name: p for p in r.parameters}
    checked = 0
    for k, v in made.items():
        if fitted[k].constrained:
            assert fitted[k].value == pytest.approx(v, rel=0.01), k
            checked += 1
    assert checked >= 3
    assert not r.warnings


@pytest.mark.parametrize("name", list(ROUND_TRIP))
def test_a_timeline_fed_back_agrees_with_the_prediction_pass_by_pass(name, tmp_path):
    """trainest's own timeline (each op's phase in its args) read back: every compute class matches the
    prediction in the forward and in the backward (recomputation counted with the backward)."""
    s = scenario_from_mapping(ROUND_TRIP[name], "t")
    path = tmp_path / "step.json"
    path.write_text(json.dumps(chrome_trace(step_timeline(s))))
    r = calibrate_trace(s, [str(path)])
    assert {p.phase for p in r.phases} == {"forward", "backward"}
    for row in r.phases:
        assert row.measured_s == pytest.approx(row.predicted_s, rel=0.02), row


def test_kernels_launched_inside_pytorchs_autograd_functions_are_the_backward_pass(tmp_path):
    """A PyTorch profiler trace marks no pass by name on its kernels: a kernel whose launch (its runtime call, by
    correlation id) lies inside an `autograd::engine::evaluate_function` CPU op is the backward's, one launched
    outside is the forward's; without such ranges no kernel gets a pass and no pass table is printed."""
    from trainest.trace.reader import read_trace

    def event(name, cat, ts, dur, **args):
        return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 0, "tid": 1, "args": args}

    events = [event("ProfilerStep#1", "user_annotation", 0, 1000),
              event("cudaLaunchKernel", "cuda_runtime", 10, 2, correlation=1),
              event(GEMM, "kernel", 20, 100, correlation=1, stream=7),
              event("autograd::engine::evaluate_function: MmBackward0", "cpu_op", 200, 50),
              event("cudaLaunchKernel", "cuda_runtime", 210, 2, correlation=2),
              event(GEMM, "kernel", 220, 200, correlation=2, stream=7),
              event("cudaLaunchKernel", "cuda_runtime", 260, 2, correlation=3),
              event(FLASH_BWD, "kernel", 430, 50, correlation=3, stream=7)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    phases = [k.phase for k in read_trace(str(path)).kernels]
    assert phases == ["forward", "backward", "forward"]
    m = measure(read_trace(str(path)))
    assert m.phases == {"forward": {"gemm": pytest.approx(100e-6), "attention": pytest.approx(50e-6)},
                        "backward": {"gemm": pytest.approx(200e-6)}}
    path.write_text(json.dumps({"traceEvents": [e for e in events if e["cat"] != "cpu_op"]}))
    assert measure(read_trace(str(path))).phases == {}
    # a range around the whole step named for both passes (Megatron's forward_backward_func) marks neither
    step = event("forward_backward_step", "user_annotation", 5, 900)
    path.write_text(json.dumps({"traceEvents": [e for e in events if e["cat"] != "cpu_op"] + [step]}))
    assert measure(read_trace(str(path))).phases == {}
    # a backward annotation (DeepSpeed's engine.backward, an NVTX range) marks the kernels launched inside it
    bwd = event("DeepSpeedEngine.backward", "user_annotation", 150, 300)
    path.write_text(json.dumps({"traceEvents": [e for e in events if e["cat"] != "cpu_op"] + [bwd]}))
    assert [k.phase for k in read_trace(str(path)).kernels] == ["forward", "backward", "backward"]


def test_the_deepseek_trace_pass_by_pass():
    """DeepSeek's annotations (attn(F), mlp(B), mlp(W), ...) put each kernel in its pass (docs/model.md §17.3): the
    forward's memory-bound kernels agree with the model within 15 % (1.04x), the backward's measure 1.28x (its
    FP8-cached activations re-quantised there: test_the_deepseek_traces_memory_bound_miss_is_its_own_recipes_backward
    _casts); attention 0.66x forward and 0.75x backward (the H800's inherited η_a, §2.4); the dense and grouped
    GEMMs together 0.76x forward (DeepGEMM's grouped kernels faster than Transformer Engine's, whose runs set
    grouped_gemm) and 0.98x backward."""
    s = scenario_from_mapping({"model": "deepseek-v3", "hardware": "h800-sxm", "devices": 2048, "precision": "fp8",
                               "seq_len": 4096, "global_batch": 15360, "moe_dispatcher": "deepep",
                               "recompute": "selective", "recompute_modules": ["layernorm", "mla_up_proj"],
                               "adam_moments": "bf16", "parallel": {"pp": 16, "ep": 64, "pipeline_schedule": "dualpipe",
                                                                    "pipeline_split": "balanced"}}, "deepseek")
    r = calibrate_trace(s, [str(DEEPSEEK)], 4.0)
    rows = {(p.phase, p.name): p for p in r.phases}
    assert len(rows) == 8
    assert 0.85 <= rows[("forward", "memory_bound")].ratio <= 1.15
    assert rows[("backward", "memory_bound")].ratio > 1.15
    for phase, lo, hi in (("forward", 0.6, 0.85), ("backward", 0.85, 1.15)):
        gemms = [rows[(phase, c)] for c in ("gemm", "grouped_gemm")]
        assert lo <= sum(g.measured_s for g in gemms) / sum(g.predicted_s for g in gemms) <= hi, phase
    # every compute kernel of the trace has its pass: the pass table sums to the class table
    classes = {c.name: c.measured_s for c in r.rows}
    for c in ("gemm", "grouped_gemm", "attention", "memory_bound"):
        assert rows[("forward", c)].measured_s + rows[("backward", c)].measured_s == pytest.approx(classes[c])


# scenarios whose layers hold every kind of op trainest names: dense, standard attention, context parallelism,
# sliding windows, LoRA and QLoRA, MoE with MLA and shared experts, the hybrid Mamba-2/attention/LatentMoE blocks
OP_KINDS = {
    "dense": {"model": "llama3-8b"},
    "standard-full-recompute": {"model": "gpt3-175b", "attention": "standard", "devices": 64, "framework":
                                "megatron-deepspeed", "parallel": {"tp": 8, "pp": 8}, "recompute": "full"},
    "cp-fp8": {"model": "llama3-8b", "precision": "fp8", "devices": 16, "seq_len": 65536, "parallel": {"tp": 2, "cp": 4}},
    "window-moe": {"model": "gpt-oss-120b", "hardware": "b200", "devices": 64, "parallel": {"ep": 8}},
    "mla-moe": {"model": "deepseek-v3", "hardware": "h800-sxm", "devices": 2048, "precision": "fp8",
                "parallel": {"pp": 16, "ep": 64, "pipeline_split": "balanced"}},
    "lora": {"model": "llama3-8b", "finetune": {"method": "lora"}},
    "qlora": {"model": "llama3-8b", "devices": 1, "global_batch": 8, "seq_len": 2048, "finetune": {"method": "qlora"}},
    "moe-lora": {"model": "qwen3-30b-a3b", "devices": 8, "parallel": {"ep": 8},
                 "finetune": {"method": "lora", "targets": "all"}},
    "hybrid-latent-moe": {"model": "nemotron-3-super", "hardware": "gb200", "devices": 64, "precision": "fp8",
                          "parallel": {"tp": 2, "sequence_parallel": True, "ep": 64}},
}


@pytest.mark.parametrize("name", list(OP_KINDS))
def test_every_op_trainest_predicts_is_compared_with_the_kernels_of_its_kind(name):
    """The class table reads trainest's own op names (a prediction's classes, its timelines read back): every op of
    a layer pass and of the logits has a class, an op that moves bytes and computes nothing is memory-bound, and a
    weight or data gradient is a GEMM. The bug this catches: a hybrid model's ops are named inside their block
    (`mamba.in_proj`, `moe.experts_up`, `attention.qkv`), and the table took the Mamba-2 projections for attention
    and left the rest unclassified, as it did standard attention's score and context GEMMs, a context-parallel
    ring's merges and a windowed layer's attention, so a trace of such a step was compared with a prediction
    whose time sat mostly in `unclassified`."""
    from trainest.scenario import job_of, layout_of
    from trainest.step import step_terms
    from trainest.trace.compare import _step_op_passes
    s = scenario_from_mapping(OP_KINDS[name], name)
    ops = [op for op, _, _ in _step_op_passes(step_terms(job_of(s), layout_of(s)).parts)]
    assert ops
    for op in ops:
        cls = model_class(op.name)
        assert cls != "unclassified", op.name
        if float(op.flops) == 0.0 and float(op.bytes) > 0.0:      # (a frozen base's weight gradients: zero ops)
            assert cls == "memory_bound", (op.name, cls)
        if op.name.endswith((".dgrad", ".wgrad")):
            assert cls in ("gemm", "grouped_gemm"), (op.name, cls)


@pytest.mark.parametrize("name", list(OP_KINDS))
def test_a_timeline_of_every_op_kind_reads_back_fully_classified_and_as_predicted(name, tmp_path):
    """trainest's own timeline of each kind of step read back: every kernel classified, and every class (the MTP
    modules' ops included: DeepSeek-V3's and Nemotron 3 Super's) as the prediction has it. The bug this catches:
    the MTP modules were one `mtp modules` slice, unclassified in the trace and absent from the predicted classes."""
    s = scenario_from_mapping(OP_KINDS[name], name)
    path = tmp_path / "step.json"
    path.write_text(json.dumps(chrome_trace(step_timeline(s))))
    r = calibrate_trace(s, [str(path)])
    assert r.slowest.classified_share == pytest.approx(1.0)
    for row in r.rows:
        if row.name not in ("idle", "unclassified"):
            assert row.measured_s == pytest.approx(row.predicted_s, rel=1e-6), (name, row)


def _nsys_db(path: Path, kernels: list[tuple[str, int, int, int]], nvtx: list[tuple[str, int, int]],
             memcpy: list[tuple[int, int, int, int]] = ()) -> None:
    """A small Nsight Systems SQLite export with the documented schema (nsys export --type sqlite): StringIds,
    CUPTI_ACTIVITY_KIND_KERNEL (start, end [ns], deviceId, streamId, correlationId, demangledName -> StringIds),
    CUPTI_ACTIVITY_KIND_MEMCPY (bytes, copyKind: 1 HtoD, 2 DtoH, 8 DtoD), NVTX_EVENTS (start, end, text)."""
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER,
            contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER,
            shortName INTEGER, gridX INTEGER, gridY INTEGER, gridZ INTEGER, blockX INTEGER, blockY INTEGER,
            blockZ INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER,
            contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, bytes INTEGER,
            copyKind INTEGER, srcKind INTEGER, dstKind INTEGER);
        CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER, rangeId INTEGER,
            category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
            domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER,
            int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
    """)
    names = sorted({k[0] for k in kernels})
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", list(enumerate(names)))
    for i, (name, start, end, stream) in enumerate(kernels):
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, correlationId,"
                    " demangledName, shortName) VALUES (?, ?, 0, 1, ?, ?, ?, ?)",
                    (start, end, stream, i, names.index(name), names.index(name)))
    for start, end, nbytes, kind in memcpy:
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, streamId, correlationId, bytes, "
                    "copyKind) VALUES (?, ?, 0, 7, 0, ?, ?)", (start, end, nbytes, kind))
    for text, start, end in nvtx:
        con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text) VALUES (?, ?, 59, ?)", (start, end, text))
    con.commit()
    con.close()


GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
FLASH_BWD = "void flash_bwd_dq_dk_dv_loop_kernel<Flash_bwd_kernel_traits<128>>"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def test_a_synthetic_nsight_export_reads_its_kernels_copies_and_nvtx_steps(tmp_path):
    db = tmp_path / "rank0.sqlite"
    ms = 1_000_000
    kernels = []
    for step in range(2):
        t0 = step * 20 * ms
        kernels += [(GEMM, t0, t0 + 6 * ms, 7), (FLASH_BWD, t0 + 6 * ms, t0 + 9 * ms, 7),
                    (NCCL, t0 + 5 * ms, t0 + 8 * ms, 13)]
    _nsys_db(db, kernels, [("train_step 0", 0, 19 * ms), ("train_step 1", 20 * ms, 39 * ms)],
             memcpy=[(9 * ms, 10 * ms, 1 << 20, 1)])
    t = read_trace(str(db))
    assert t.source == "nsys" and t.has_backward
    how, steps = find_steps(t)
    assert how == "NVTX step ranges" and len(steps) == 2
    m = measure(t)
    assert m.classes["gemm"] == pytest.approx(6e-3) and m.classes["attention"] == pytest.approx(3e-3)
    assert m.classes["collective"] == pytest.approx(3e-3) and m.classes["host_copy"] == pytest.approx(0.5e-3)
    assert m.comm_overlap == pytest.approx(1.0)          # the all-reduce ran beside the GEMM and the attention


def test_an_nsight_export_without_step_marks_is_split_at_idle_gaps(tmp_path):
    db = tmp_path / "gaps.sqlite"
    ms = 1_000_000
    kernels = [(GEMM, s * 50 * ms + i * ms, s * 50 * ms + i * ms + 900_000, 7) for s in range(3) for i in range(10)]
    _nsys_db(db, kernels, [])
    how, steps = find_steps(read_trace(str(db)))
    assert how == "idle gaps" and len(steps) == 3


def test_a_gzipped_trace_reads_as_the_plain_one(tmp_path):
    plain = read_trace(str(DEEPSEEK))
    raw = gzip.decompress(DEEPSEEK.read_bytes())
    p = tmp_path / "t.json"
    p.write_bytes(raw)
    assert read_trace(str(p)).kernels == plain.kernels


def test_several_ranks_report_the_slowest_and_the_spread(tmp_path):
    s = scenario_from_mapping(ROUND_TRIP["one-gpu"], "t")
    paths = []
    for i, f in enumerate((1.0, 0.9)):
        slow = replace(s, hardware=with_efficiency(s.hardware, gemm=s.hardware.efficiency.gemm * f))
        p = tmp_path / f"rank{i}.json"
        p.write_text(json.dumps(chrome_trace(step_timeline(slow))))
        paths.append(str(p))
    r = calibrate_trace(s, paths)
    assert r.slowest.path == paths[1]
    assert 0 < r.spread < 0.2
    assert {p.name: p for p in r.parameters}["gemm"].value == pytest.approx(s.hardware.efficiency.gemm * 0.9, rel=0.01)


def _one_error(code: int, out: str, err: str) -> str:
    assert code == 1 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize("content, says", [
    (b"hello, this is not a trace", "not a trace"),
    (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "gemm", "ts": 1, "dur": 2}', "truncated JSON"),
    (b'{"schema": 1}', "without a traceEvents"),
    (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2}]}', "no GPU kernels"),
    (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", "truncated or corrupt gzip"),
])
def test_bad_trace_files_get_one_line(tmp_path, capsys, content, says):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    err = _one_error(*call_entry(["calibrate", "--trace", str(p), "-o", str(tmp_path / "o.yaml")], capsys))
    assert says in err


def test_an_inference_trace_without_a_backward_is_refused(tmp_path, capsys):
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "ts": 0, "dur": 100},
              {"ph": "X", "cat": "kernel", "name": GEMM, "ts": 1, "dur": 50, "args": {"stream": 7}},
              {"ph": "X", "cat": "kernel", "name": "void flash_fwd_kernel<...>", "ts": 51, "dur": 20}]
    p = tmp_path / "infer.json"
    p.write_text(json.dumps({"traceEvents": events}))
    err = _one_error(*call_entry(["calibrate", "--trace", str(p), "-o", str(tmp_path / "o.yaml")], capsys))
    assert "no backward pass" in err


def test_a_trace_whose_scenario_does_not_match_names_the_class_off_by_more_than_2x(tmp_path, capsys):
    s = scenario_from_mapping(ROUND_TRIP["one-gpu"], "t")
    p = tmp_path / "step.json"
    p.write_text(json.dumps(chrome_trace(step_timeline(s))))
    # the user states a 4x longer sequence than what ran: attention is off by far more than 2x
    code, out, err = call_entry(["calibrate", "--trace", str(p), "--model", "llama3.2-3b", "--hardware", "h100-sxm",
                                 "--devices", "1", "--seq-len", "8192", "--global-batch", "2", "-o",
                                 str(tmp_path / "o.yaml"), "--json"], capsys)
    assert code == 0
    assert "class attention:" in err and "not fitted" in err


def test_the_written_profile_loads_as_hardware_and_estimates_with_the_fitted_values(tmp_path, capsys):
    s = scenario_from_mapping(ROUND_TRIP["one-gpu"], "t")
    slow = replace(s, hardware=with_efficiency(s.hardware, gemm=s.hardware.efficiency.gemm * 0.9))
    p = tmp_path / "step.json"
    p.write_text(json.dumps(chrome_trace(step_timeline(slow))))
    out = tmp_path / "mine.yaml"
    code, _, err = call_entry(["calibrate", "--trace", str(p), "--model", "llama3.2-3b", "--hardware", "h100-sxm",
                               "--devices", "1", "--seq-len", "2048", "--global-batch", "8", "-o", str(out)], capsys)
    assert code == 0, err
    from trainest.catalog import load_hardware
    hw = load_hardware(str(out))
    assert hw.efficiency.gemm == pytest.approx(s.hardware.efficiency.gemm * 0.9, rel=0.01)


def test_calibrate_needs_runs_or_a_trace(tmp_path, capsys):
    err = _one_error(*call_entry(["calibrate", "-o", str(tmp_path / "o.yaml")], capsys))
    assert "--runs" in err and "--trace" in err


def test_a_missing_trace_file_is_one_line(tmp_path, capsys):
    with pytest.raises(SpecError, match="no such file"):
        read_trace(str(tmp_path / "nope.json"))
    assert model_class("qkv") == "gemm"


def test_the_trace_json_matches_its_schema(tmp_path, capsys):
    import jsonschema
    from test_json_schema import undocumented_keys

    sch = json.loads((Path(__file__).parent.parent / "docs" / "schema" / "calibrate-trace.schema.json").read_text())
    code, out, err = call_entry(["calibrate", "--trace", str(DEEPSEEK), *DEEPSEEK_ARGS, "-o", str(tmp_path / "p.yaml"),
                                 "--json"], capsys)
    doc = json.loads(out)
    jsonschema.validate(doc, sch, cls=jsonschema.Draft202012Validator)
    assert not undocumented_keys(doc, sch)


def launch_gaps_us(path: Path, wait_us: float = 1000.0) -> list[float]:
    """The host's time between consecutive kernel launches (cudaLaunchKernel/-ExC) on each host thread of a
    PyTorch profiler trace [µs], gaps of `wait_us` or more left out: there the host waited (on the device, on
    another rank's token counts), it was not launching."""
    events = json.loads(gzip.open(path).read())["traceEvents"]
    by_thread: dict = {}
    for e in events:
        if e.get("cat") == "cuda_runtime" and "LaunchKernel" in e.get("name", ""):
            by_thread.setdefault(e["tid"], []).append(float(e["ts"]))
    gaps = []
    for starts in by_thread.values():
        starts.sort()
        gaps += [b - a for a, b in zip(starts, starts[1:]) if b - a < wait_us]
    return gaps


def test_the_deepseek_trace_host_time_per_launch_is_near_megatron_cores_fitted_one():
    """An anchor for the host time per kernel that the MoE runs fit for Megatron-Core (its host scale times plain
    PyTorch's 20 µs, docs/model.md §2.9, §15.2): DeepSeek's H800 trace, a Python training framework with autograd
    and MoE layers like Megatron-Core's, spends about 47 µs of host time per kernel launch (the mean gap between
    launches on its two host threads, waits of 1 ms or more left out; 911 launches). Another framework and host
    CPU: a sanity band (×1.5 either way), not a fit. Before the routing kernels were counted from the code (stop
    48) the fit gave 34 µs per kernel; it gives about 42 µs now."""
    from trainest.catalog import DEFAULT_HOST_US_PER_KERNEL
    from trainest.frameworks import FRAMEWORKS
    gaps = launch_gaps_us(DEEPSEEK)
    measured_us = sum(gaps) / len(gaps)
    assert len(gaps) > 900 and 40.0 < measured_us < 55.0
    tau_us = DEFAULT_HOST_US_PER_KERNEL * FRAMEWORKS["megatron-core"].host_factor
    assert measured_us / 1.5 < tau_us < measured_us * 1.5


def test_the_deepseek_traces_memory_bound_miss_is_its_own_recipes_backward_casts():
    """Issue 33's memory-bound class (1.19x), split by kernel: DeepSeek's FP8 casts (its 1×128 per-token and 128×1
    per-channel casts, their transposes and the casts back of the FP8-cached activations) against the model's
    (LOW_PRECISION_CAST_PASSES per GEMM-input element forward, BACKWARD_TRAFFIC_RATIO × that backward), and every
    other memory-bound kernel against the rest of the model's element-wise traffic. The other kernels agree within
    15 % (16.9 ms measured, 19.4 ms predicted); the casts measure 1.8x: DeepSeek re-quantises its activations in the
    backward, which no Transformer Engine recipe does (docs/model.md §17.3, §2.5)."""
    from trainest.scenario import job_of, layout_of
    from trainest.step import moe
    from trainest.step.layer import BACKWARD_TRAFFIC_RATIO, LOW_PRECISION_CAST_PASSES
    from trainest.step.rates import local_shape, rates_of
    from trainest.trace.classify import classify
    measured = {"cast": 0.0, "other": 0.0}
    for k in read_trace(str(DEEPSEEK)).kernels:
        rule = classify(k.name)
        if rule is not None and rule.model_class == "memory_bound":
            measured["cast" if rule.kernel_class == "cast" else "other"] += k.duration_s
    s = scenario_from_mapping({"model": "deepseek-v3", "hardware": "h800-sxm", "devices": 2048, "precision": "fp8",
                               "seq_len": 4096, "global_batch": 15360, "moe_dispatcher": "deepep",
                               "recompute": "selective", "recompute_modules": ["layernorm", "mla_up_proj"],
                               "adam_moments": "bf16", "parallel": {"pp": 16, "ep": 64, "pipeline_schedule": "dualpipe",
                                                                    "pipeline_split": "balanced"}}, "deepseek")
    job, layout = job_of(s), layout_of(s)
    x, r = local_shape(job, layout), rates_of(job, layout)
    m, mo = job.model, job.model.moe
    copies = moe.routed_copies(job, layout, x)
    cast_elements = ((2.0 + 1.0) * x.tokens * m.hidden + x.tokens * mo.shared_experts * mo.shared_width
                     + copies * m.expert_hidden + copies * mo.expert_ffn_hidden)
    cast_s = 4 * (1.0 + BACKWARD_TRAFFIC_RATIO) * LOW_PRECISION_CAST_PASSES * cast_elements / r.memory_bytes_per_s
    from trainest.trace.compare import predicted_classes
    predicted = float(predicted_classes(job, layout, layers=4.0)["memory_bound"])
    assert 0.85 <= measured["other"] / (predicted - cast_s) <= 1.15, (measured, predicted, cast_s)
    assert measured["cast"] / cast_s > 1.5
