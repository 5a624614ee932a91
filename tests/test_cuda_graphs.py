"""CUDA graphs (docs/model.md §2.10): what each scope removes of the host's launches, never the device's work."""

from __future__ import annotations

import pytest
from helpers import job_and_layout

from trainest.catalog import load_hardware, load_model
from trainest.step import step_terms
from trainest.step.kernels import GRAPH_LAUNCHES_PER_PASS, host_per_kernel_s, host_pass_s
from trainest.step.moe import expert_host_pass_s

H100 = load_hardware("h100-sxm")


def _jobs(model, **knobs):
    job, layout = job_and_layout(load_model(model), H100, **knobs)
    return {g: job._replace(cuda_graphs=g) for g in ("none", "partial", "full")}, layout


def test_full_graphs_launch_one_graph_per_layer_and_pass():
    jobs, layout = _jobs("qwen3-30b-a3b", precision="fp8", seq_len=4096.0, dp=8.0, ep=8.0, micro_batches=8)
    tau = host_per_kernel_s(jobs["full"])
    assert host_pass_s(jobs["full"], layout) == pytest.approx((GRAPH_LAUNCHES_PER_PASS * tau,) * 2)
    assert expert_host_pass_s(jobs["full"], layout) == (0.0, 0.0)


def test_partial_graphs_keep_the_routed_experts_launches():
    """partial captures the static-shape parts: less host time than none, more than full for a MoE model;
    the per-expert launches stay; a dense model's layers are all static, so partial equals full."""
    jobs, layout = _jobs("qwen3-30b-a3b", precision="fp8", seq_len=4096.0, dp=8.0, ep=8.0, micro_batches=8)
    none, partial, full = (sum(host_pass_s(jobs[g], layout)) for g in ("none", "partial", "full"))
    assert full < partial < none
    assert expert_host_pass_s(jobs["partial"], layout) == expert_host_pass_s(jobs["none"], layout)
    dense, layout = _jobs("llama3-8b", seq_len=4096.0, tp=2.0, dp=4.0, micro_batches=8, sp=1.0)
    assert host_pass_s(dense["partial"], layout) == pytest.approx(host_pass_s(dense["full"], layout))


def test_graphs_remove_host_time_not_device_work():
    """A host-bound MoE step (64 local experts at micro-batch 1) gets faster with each scope; the device's
    compute, memory and communication terms stay; a device-bound step barely moves."""
    jobs, layout = _jobs("qwen3-30b-a3b", precision="fp8", seq_len=4096.0, dp=8.0, ep=2.0, micro_batches=4)
    steps = {g: step_terms(j, layout) for g, j in jobs.items()}
    assert steps["none"].host_bound > 0
    assert steps["full"].time_s < steps["partial"].time_s < steps["none"].time_s
    for g in ("partial", "full"):
        assert steps[g].compute_s == pytest.approx(steps["none"].compute_s)
        assert steps[g].memory_s == pytest.approx(steps["none"].memory_s)
    jobs, layout = _jobs("llama3-70b", seq_len=8192.0, tp=8.0, dp=1.0, micro_batch=1.0, micro_batches=8, sp=1.0)
    none, full = step_terms(jobs["none"], layout), step_terms(jobs["full"], layout)
    assert full.time_s <= none.time_s
    assert full.time_s > 0.97 * none.time_s


def test_cuda_graphs_is_an_input_validated_echoed_and_derived(capsys, tmp_path):
    """--cuda-graphs takes none|partial|full; not given it is none, listed as derived; a bad value in a scenario
    file is one line naming the key and the allowed values, exit 1, nothing on stdout."""
    import json

    from helpers import call_entry
    base = ["estimate", "--model", "qwen3-30b-a3b", "--hardware", "b200", "--devices", "8", "--ep", "8",
            "--precision", "fp8", "--seq-len", "4096", "--global-batch", "512", "--json"]
    code, out, _ = call_entry(base, capsys)
    doc = json.loads(out)
    assert code == 0 and doc["inputs"]["cuda_graphs"] == "none" and "cuda_graphs" in doc["inputs"]["derived"]
    times = {}
    for g in ("none", "partial", "full"):
        code, out, _ = call_entry(base + ["--cuda-graphs", g], capsys)
        doc = json.loads(out)
        assert code == 0 and doc["inputs"]["cuda_graphs"] == g and "cuda_graphs" not in doc["inputs"]["derived"]
        times[g] = doc["step"]["time_s"]
    assert times["full"] < times["partial"] < times["none"]
    bad = tmp_path / "s.yaml"
    bad.write_text("model: llama3-8b\ncuda_graphs: sometimes\n")
    code, out, err = call_entry(["estimate", "--config", str(bad)], capsys)
    assert code == 1 and out == ""
    assert "cuda_graphs" in err and "none, partial, full" in err and len(err.strip().splitlines()) == 1
