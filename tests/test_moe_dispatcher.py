"""The MoE token dispatcher (`moe_dispatcher`, docs/model.md §15.11): what each one sends, the SMs it keeps
beside computation, and whether the host waits on it; and its input at the boundary."""

from __future__ import annotations

import pytest
import yaml
from helpers import call_entry, job_and_layout, step_of
from test_moe import H100, MOE, moe_model

from trainest.catalog import with_efficiency
from trainest.errors import SpecError
from trainest.scenario import scenario_from_mapping
from trainest.step import moe as M
from trainest.step import rates as R
from trainest.step.collectives import all_to_all_s, tiers_of


def local(model, **knobs):
    job, layout = job_and_layout(model, H100, seq_len=2048.0, **knobs)
    return job, layout, R.rates_of(job, layout), R.local_shape(job, layout)


def test_nccl_all_to_all_sends_every_copy_across_domains_deepep_and_hybridep_once_per_domain():
    """Across 4 domains with top-8 routing, NCCL's all-to-all (alltoall) sends every copy through the NICs
    (r = 1) while DeepEP and HybridEP send a token once per remote domain (r < 1), so theirs is faster."""
    model = moe_model(experts=64, top_k=8)
    times, shares = {}, {}
    for d in ("alltoall", "deepep", "hybridep"):
        job, layout, _, x = local(model, dp=32.0, ep=32.0, moe_dispatcher=d)
        tiers = tiers_of(job.hardware, job.devices_per_node)
        shares[d] = M.remote_domain_share(job, layout, tiers)
        times[d] = M.ep_all_to_all_s(job, layout, x, tiers)
    assert shares["alltoall"] == 1.0 and shares["deepep"] == shares["hybridep"] < 0.6
    assert times["deepep"] == pytest.approx(times["hybridep"]) and times["deepep"] < 0.8 * times["alltoall"]


def test_inside_a_domain_deepep_and_hybridep_send_a_token_once_per_rank():
    """Inside one domain NCCL's all-to-all sends each of a token's K copies to its expert's rank; DeepEP and
    HybridEP send the token once to each rank holding one of its experts: ρ·K = the mean number of distinct
    ranks a token's K experts fall on, counted by brute force over every choice of K of E experts (E/e per
    rank), and the all-to-all takes ρ times NCCL's. The bug this catches: the three were taken to send the
    same rows inside a domain, so the NVL72 runs' HybridEP all-to-alls were charged every copy."""
    from itertools import combinations
    for experts, top_k, ep in ((16, 2, 8.0), (16, 4, 8.0), (32, 8, 8.0), (8, 1, 8.0)):
        model = moe_model(experts=experts, top_k=top_k)
        per_rank = experts // int(ep)
        picks = list(combinations(range(experts), top_k))
        distinct = sum(len({e // per_rank for e in p}) for p in picks) / len(picks)
        times = {}
        for d in ("alltoall", "deepep", "hybridep"):
            job, layout, _, x = local(model, dp=ep, ep=ep, moe_dispatcher=d)
            times[d] = M.ep_all_to_all_s(job, layout, x, tiers_of(job.hardware, job.devices_per_node))
            share = M.rank_share(job, layout)
            assert share * top_k == pytest.approx(distinct if d != "alltoall" else top_k, rel=1e-12)
        assert times["deepep"] == pytest.approx(times["hybridep"])
        tiers = M.all_to_all_tiers(job, tiers_of(job.hardware, job.devices_per_node))
        latency = all_to_all_s(0.0, ep, 1.0, tiers)             # what an empty exchange costs: one hop
        ratio = (times["deepep"] - latency) / (times["alltoall"] - latency)
        assert ratio == pytest.approx(distinct / top_k, rel=1e-9)
        assert ratio <= 1.0 + 1e-12 and (top_k > 1 or ratio == pytest.approx(1.0))


def test_the_permutation_outside_the_all_to_all_depends_on_the_dispatcher():
    """Forward bytes of the permutation (§15.2, §15.11): NCCL's all-to-all permutes the T_in tokens into their K
    copies, sorts and unsorts the C received rows, unpermutes: e·h·(2·T_in·(1 + K) + 4·C); DeepEP's receiver
    permutes its R = ρ·C received rows into the C expert rows and back: e·h·2·(R + C); HybridEP does it inside its
    dispatch and combine kernels: none. The layer's element-wise bytes differ by exactly that."""
    job, layout, _, x = local(MOE, dp=8.0, ep=8.0)
    rows = job.element_bytes * job.model.expert_hidden
    copies = M.routed_copies(job, layout, x)
    t_in = M.moe_tokens_per_rank(layout, x)
    k = MOE.moe.top_k
    by = {}
    for d in ("alltoall", "deepep", "hybridep"):
        jd, ld, _, xd = local(MOE, dp=8.0, ep=8.0, moe_dispatcher=d)
        by[d] = M.permutation_bytes(jd, ld, xd)
        assert M.moe_elementwise_bytes(jd, ld, xd) - by[d] == pytest.approx(
            M.moe_elementwise_bytes(job, layout, x) - by["alltoall"] if d != "alltoall" else
            M.moe_elementwise_bytes(jd, ld, xd) - by[d])
    share = M.rank_share(*local(MOE, dp=8.0, ep=8.0, moe_dispatcher="deepep")[:2])
    assert by["alltoall"] == pytest.approx(rows * (2.0 * t_in * (1 + k) + 4.0 * copies))
    assert by["deepep"] == pytest.approx(rows * 2.0 * (share + 1.0) * copies)
    assert by["hybridep"] == 0.0
    assert by["hybridep"] < by["deepep"] < by["alltoall"]


def test_a_hidden_dispatch_slows_the_computation_by_the_sms_it_keeps():
    """Hidden behind another micro-batch (moe_overlap deepep), DeepEP's kernels keep 20 of the device's
    SMs and HybridEP's 32: what shows is max(κ, s/U) of the hidden time; NCCL's is the hardware's contention
    share κ. Exposed (moe_overlap none), all three show the all-to-alls in full."""
    units, kappa = H100.compute_units, 0.1
    hw = with_efficiency(H100, overlap_contention=kappa)
    exposed = {}
    for d in ("alltoall", "deepep", "hybridep"):
        job, layout = job_and_layout(MOE, hw, seq_len=2048.0, dp=8.0, ep=8.0, moe_overlap="deepep", moe_dispatcher=d)
        x = R.local_shape(job, layout)
        tiers = tiers_of(job.hardware, job.devices_per_node)
        total, exposed[d] = M.ep_layer_s(job, layout, x, tiers, 1.0)       # a window far longer than the a2a
        none = job_and_layout(MOE, hw, seq_len=2048.0, dp=8.0, ep=8.0, moe_dispatcher=d)
        assert M.ep_layer_s(*none, x, tiers, 1.0) == (pytest.approx(total), pytest.approx(total))
    assert exposed["alltoall"] == pytest.approx(kappa * total)
    for d, sms in (("deepep", 20.0), ("hybridep", 32.0)):
        assert exposed[d] == pytest.approx(max(kappa, sms / units) * total)
    assert exposed["alltoall"] < exposed["deepep"] < exposed["hybridep"] < total


def test_every_dispatcher_reads_the_token_counts_unless_the_iteration_is_graphed():
    """Many small experts at micro-batch 1 inside one node (nothing overlapped): each layer's host reads the
    per-expert token counts (Transformer Engine's GroupedLinear takes m_splits as a host list, whichever dispatcher delivered the rows; HybridEP without a per-rank capacity
    also sizes its output from the received count), so the host's per-expert launches after that read cannot
    hide under the attention before it. The three dispatchers launch alike and the device waits on each
    (DeepEP and HybridEP move fewer bytes, §15.11, so their device has less to hide the launches behind and waits
    longer); full CUDA graphs (no launches, no read) leave no wait in the layers and are faster. The bug this
    catches: HybridEP was taken not to wait, which made the hybrid Nemotron runs (HybridEP, TE-scoped graphs,
    8 local experts) too fast."""
    many = moe_model(experts=128, top_k=8, width=256)
    knobs = {"seq_len": 4096.0, "dp": 8.0, "micro_batches": 8, "ep": 8.0}
    dispatchers = ("alltoall", "deepep", "hybridep")
    step = {d: step_of(many, H100, "fp8", moe_dispatcher=d, **knobs) for d in dispatchers}
    graphs = {d: step_of(many, H100, "fp8", moe_dispatcher=d, cuda_graphs="full", **knobs) for d in dispatchers}
    assert step["alltoall"].host_s == pytest.approx(step["deepep"].host_s) == pytest.approx(step["hybridep"].host_s)
    for d in dispatchers:
        assert step[d].layers_host_wait_s > 0.1 * step[d].time_s
        assert graphs[d].layers_host_wait_s == pytest.approx(0.0, abs=1e-6) and graphs[d].time_s < step[d].time_s
    assert step["alltoall"].layers_host_wait_s < step["deepep"].layers_host_wait_s < step["hybridep"].layers_host_wait_s
    # the segment after the read: the forward's per-expert launches against the experts' forward GEMMs
    for d in ("alltoall", "hybridep"):
        job, layout, r, x = local(many, dp=8.0, ep=8.0, micro_batches=8, moe_dispatcher=d)
        host, device = M.dispatch_sync_segment_s(job, layout, r, x)
        assert host == pytest.approx(M.expert_host_pass_s(job, layout)[0]) and device > 0.0
    graphed = local(many, dp=8.0, ep=8.0, micro_batches=8, moe_dispatcher="hybridep", cuda_graphs="full")
    assert M.dispatch_sync_segment_s(*graphed) == (0.0, 0.0)


def test_the_dispatcher_is_an_input_checked_at_the_boundary(capsys):
    """Default alltoall, listed as derived; deepep or hybridep on a dense model is refused in one line; a
    word not in the list is refused by the command line."""
    s = scenario_from_mapping({"model": "qwen3-30b-a3b"})
    assert s.knob("moe_dispatcher") == "alltoall" and "moe_dispatcher" in s.derived
    assert scenario_from_mapping({"model": "qwen3-30b-a3b", "moe_dispatcher": "hybridep"}).knob("moe_dispatcher") \
        == "hybridep"
    with pytest.raises(SpecError, match="moe_dispatcher: deepep needs a mixture-of-experts model"):
        scenario_from_mapping({"model": "llama3-8b", "moe_dispatcher": "deepep"})
    code, out, err = call_entry(["estimate", "--model", "llama3-8b", "--moe-dispatcher", "hybridep"], capsys)
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1 and "hybridep" in err
    code, out, err = call_entry(["estimate", "--model", "qwen3-30b-a3b", "--moe-dispatcher", "nccl"], capsys)
    assert code == 2 and out == "" and "nccl" in err


# --- the recipes' settings trainest has no input for, named where a run that ran is called no-fit -------------
def test_every_bundled_moe_run_called_no_fit_names_the_settings_its_record_lacks():
    """Issue 33: a bundled mixture-of-experts (or hybrid) Megatron-Bridge run that ran is called "does not fit"
    only where its record states settings trainest has no input for (`unmodelled`: FP8 parameters, BF16
    gradient buffers, activation offloading...), and the validate output names them."""
    from trainest.report.validate import run_notes
    from trainest.validate import validate_runs
    report = validate_runs(["specs/runs/megatron-bridge.yaml"])
    nofit = [r for r in report.runs if not r.fits and r.architecture in ("moe", "hybrid")]
    assert all(r.unmodelled for r in nofit), [r.id for r in nofit if not r.unmodelled]
    notes = "\n".join(run_notes(report))
    for r in nofit:
        assert f"{r.id} does not fit; its record states settings trainest has no input for" in notes
        assert ", ".join(r.unmodelled) in notes


def test_a_runs_files_unmodelled_settings_are_a_list_of_words(tmp_path, capsys):
    run = {"id": "r", "source": "s", "model": "qwen3-30b-a3b", "hardware": "h100-sxm", "devices": 8, "seq_len": 4096,
           "global_batch": 64, "parallel": {"ep": 8}, "measured": {"step_time_s": 5.0}}
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [dict(run, unmodelled=["fp8_param true"])]}))
    from trainest.validate import load_runs
    assert load_runs([path]).cases[0].unmodelled == ("fp8_param true",)
    path.write_text(yaml.safe_dump({"runs": [dict(run, unmodelled="fp8_param true")]}))
    code, out, err = call_entry(["validate", str(path)], capsys)
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1 and "unmodelled" in err
