"""ZeRO-1 as InternEvo runs it (Framework.zero_all_reduce, docs/model.md §4.4): the gradients all-reduced over
the whole data-parallel group, the updated weights broadcast by each shard owner in turn, at the end of the step."""

from __future__ import annotations

import pytest
from helpers import job_and_layout

from trainest.catalog import load_hardware, load_model
from trainest.frameworks import FRAMEWORKS
from trainest.step import step_terms
from trainest.step.collectives import (
    all_gather_s,
    all_reduce_s,
    bus_bandwidth_bytes_per_s,
    owner_broadcasts_s,
    reduce_scatter_s,
    ring_latency_s,
    tiers_of,
)

ROCE = load_hardware("a100-80gb-sxm-roce400")      # 8 A100s per node, 4x100 Gb RoCE


def _step(framework: str, dp: float, dp_shard: float | None = None):
    m = load_model("llama2-7b")
    job, layout = job_and_layout(m, ROCE, dp=dp, zero=1, micro_batch=2, micro_batches=4, dp_shard=dp_shard,
                                 framework=framework)
    return step_terms(job, layout)


def test_owner_broadcasts_move_the_all_gathers_bytes_and_pay_a_ring_latency_per_owner():
    """n broadcasts of S/n bytes, one per owner: the bandwidth term of one all-gather of S, but each broadcast is a
    chain over the n ranks that pays (n−1) hops and a call, so n − 1 more ring latencies and calls than the
    all-gather; the latency part grows as n², not n."""
    tiers = tiers_of(ROCE, 8)
    size = 14e9
    for n in (16.0, 256.0, 1024.0):
        extra = owner_broadcasts_s(size, n, 1.0, tiers) - all_gather_s(size, n, 1.0, tiers)
        assert extra == pytest.approx((n - 1.0) * (ring_latency_s(n, 1.0, tiers) + tiers.call_s), rel=1e-9)
    latency = [owner_broadcasts_s(size, n, 1.0, tiers) - (n - 1.0) / n * size / bus_bandwidth_bytes_per_s(n, 1.0, tiers)
               for n in (256.0, 512.0, 1024.0)]
    assert latency[1] > 3.5 * latency[0] and latency[2] > 3.5 * latency[1]
    assert owner_broadcasts_s(size, 1.0, 1.0, tiers) == 0.0


def test_internevo_all_reduces_gradients_and_broadcasts_weights_exposed():
    """InternEvo's ZeRO-1 over every rank: the gradient reduction is the all-reduce over the data-parallel group
    (the bytes of twice the reduce-scatter Megatron-Core's distributed optimizer runs) and the weights' broadcasts
    are exposed in full; Megatron-Core's all-gather hides behind the next forward."""
    intern, megatron = _step("internevo", 64.0), _step("megatron-core", 64.0)
    assert FRAMEWORKS["internevo"].zero_all_reduce and not FRAMEWORKS["megatron-core"].zero_all_reduce
    p = intern.parts
    assert float(p.dp_exposed.gather_s) == pytest.approx(float(p.dp.gather_s), rel=1e-12)
    assert float(megatron.parts.dp_exposed.gather_s) < 0.5 * float(megatron.parts.dp.gather_s)
    # same gradient bytes per call: an all-reduce costs about twice the reduce-scatter's bandwidth
    assert 1.8 < float(p.dp.reduce_s) / float(megatron.parts.dp.reduce_s) < 2.2
    assert float(p.dp.replica_s) == 0.0


def test_internevo_shard_group_inside_a_node_keeps_the_broadcasts_off_the_network():
    """zero1=8 (the shard group one node) against zero1 over all 1024 ranks: the same gradient all-reduce over
    every rank, but the weights broadcast over NVLink by 8 owners instead of over RoCE by 1024, each a chain
    of 1024 ranks: seconds per step at 1024 GPUs, a little at 16, and the gap grows with the ranks."""
    gaps = []
    for dp in (16.0, 256.0, 1024.0):
        node, whole = _step("internevo", dp, dp_shard=8.0), _step("internevo", dp)
        assert float(node.parts.dp.reduce_s) == pytest.approx(float(whole.parts.dp.reduce_s), rel=1e-9)
        assert float(node.parts.dp.replica_s) == 0.0
        gaps.append(float(whole.time_s - node.time_s))
    assert 0.0 < gaps[0] < gaps[1] < gaps[2]
    assert gaps[2] > 2.0 and gaps[0] < 0.5


def test_the_other_frameworks_keep_reduce_scatter_and_all_gather():
    """Only a framework with zero_all_reduce changes: Megatron-Core's ZeRO-1 reduce-scatters the gradients over
    its shard group and all-gathers the weights in buckets, as before."""
    from trainest.step.traffic import dp_collective_calls
    m = load_model("llama2-7b")
    job, layout = job_and_layout(m, ROCE, dp=64.0, zero=1, micro_batch=2, micro_batches=4)
    t = step_terms(job, layout)
    tiers = tiers_of(ROCE, 8)
    calls = float(dp_collective_calls(job, layout, t.parts.trained_params))
    per_call = float(t.parts.trained_params) / calls
    assert float(t.parts.dp.reduce_s) == pytest.approx(
        calls * reduce_scatter_s(per_call * job.grad_bytes, 64.0, 1.0, tiers), rel=1e-9)
    assert float(t.parts.dp.gather_s) == pytest.approx(
        calls * all_gather_s(per_call * job.weight_bytes, 64.0, 1.0, tiers), rel=1e-9)
    assert all_reduce_s(1e9, 64.0, 1.0, tiers) > reduce_scatter_s(1e9, 64.0, 1.0, tiers)
