"""trainest.comm: ring collectives on the scale-up and scale-out tiers (limit cases by name)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from trainest.step import collectives as comm
from trainest.catalog import load_hardware
from trainest.step.collectives import (Tiers, all_gather_s, all_reduce_s, bus_bandwidth_bytes_per_s, ranks_per_domain,
                           reduce_scatter_s, ring_latency_s, send_recv_s, tiers_of, tree_latency_s)

UP = 300e9        # [B/s] per device, per direction (NVLink-class)
OUT = 50e9        # [B/s] per device (a 400 Gb/s NIC)
DOMAIN = 8
S = 1e9           # [B]


def tiers(up=UP, out=OUT, up_lat=0.0, out_lat=0.0, domain=DOMAIN) -> Tiers:
    return Tiers(up_bytes_per_s=up, up_latency_s=up_lat, domain=domain, out_bytes_per_s=out, out_latency_s=out_lat)


# ----------------------------------------------------------------------------------- limit cases

@pytest.mark.parametrize("collective", [reduce_scatter_s, all_gather_s, all_reduce_s])
def test_one_rank_costs_nothing(collective):
    assert collective(S, 1.0, 1.0, tiers(up_lat=5e-6, out_lat=5e-6)) == 0.0


def test_huge_bandwidth_and_no_latency_cost_about_nothing():
    t = tiers(up=1e30, out=1e30)
    assert all_reduce_s(S, 64.0, 8.0, t) < 1e-18


def test_huge_bandwidth_leaves_only_latency():
    t = tiers(up=1e30, out=1e30, up_lat=3e-6, out_lat=8e-6)
    assert reduce_scatter_s(S, 8.0, 1.0, t) == pytest.approx(7 * 3e-6)
    assert all_reduce_s(S, 8.0, 1.0, t) == pytest.approx(2 * 7 * 3e-6)   # ring and tree agree inside a domain


def test_all_reduce_costs_twice_a_reduce_scatter():
    """Bandwidth term: ring all-reduce = reduce-scatter + all-gather (no latency)."""
    t = tiers()
    for n, stride in ((2, 1), (8, 1), (16, 1), (4, 8), (64, 8)):
        assert all_reduce_s(S, n, stride, t) == pytest.approx(2 * reduce_scatter_s(S, n, stride, t))


def test_all_reduce_latency_never_exceeds_two_ring_passes():
    """With latency, all-reduce may take the tree (log n) instead of the ring (n − 1): never slower."""
    t = tiers(up_lat=3e-6, out_lat=8e-6)
    for n, stride in ((2, 1), (8, 1), (16, 1), (64, 8), (1024, 8)):
        assert all_reduce_s(S, n, stride, t) <= 2 * reduce_scatter_s(S, n, stride, t) * (1 + 1e-12)
    small = tiers(up_lat=3e-6, out_lat=8e-6)
    n, stride = 1024.0, 8.0    # latency-bound: the tree wins
    assert all_reduce_s(1.0, n, stride, small) == pytest.approx(
        2 * ((n - 1) / n / OUT + tree_latency_s(n, stride, small)))


def test_all_gather_costs_the_same_as_reduce_scatter():
    t = tiers(up_lat=3e-6, out_lat=8e-6)
    assert all_gather_s(S, 16.0, 1.0, t) == reduce_scatter_s(S, 16.0, 1.0, t)


def test_ring_reduce_scatter_moves_n_minus_one_over_n_of_the_buffer():
    for n in (2, 4, 8):
        assert reduce_scatter_s(S, n, 1.0, tiers()) == pytest.approx((n - 1) / n * S / UP)


def test_per_byte_cost_grows_with_group_size_towards_two_s_over_w():
    costs = [all_reduce_s(S, n, 1.0, tiers()) for n in (2, 4, 8)]
    assert costs == sorted(costs)
    assert costs[-1] < 2 * S / UP


# ----------------------------------------------------------------------------------------- tiers

def test_group_inside_the_scale_up_domain_uses_scale_up_bandwidth():
    assert bus_bandwidth_bytes_per_s(8.0, 1.0, tiers()) == UP          # tp = 8 in an 8-GPU node
    assert bus_bandwidth_bytes_per_s(4.0, 2.0, tiers()) == UP          # stride 2, spans 8 ranks


def test_group_with_one_rank_per_domain_is_limited_by_one_nic():
    # data parallelism across nodes with tp = 8: one rank of the group per node
    assert ranks_per_domain(16.0, 8.0, DOMAIN) == 1.0
    assert bus_bandwidth_bytes_per_s(16.0, 8.0, tiers()) == OUT


def test_group_spanning_domains_is_nic_limited_with_k_nics_in_parallel():
    # 16 consecutive ranks: k = 8 per domain, their 8 NICs carry the inter-node traffic together
    assert ranks_per_domain(16.0, 1.0, DOMAIN) == 8.0
    assert bus_bandwidth_bytes_per_s(16.0, 1.0, tiers()) == min(UP, 8 * OUT)
    # stride 2: k = 4
    assert bus_bandwidth_bytes_per_s(16.0, 2.0, tiers()) == min(UP, 4 * OUT)
    # when k NICs out-run the scale-up links, the scale-up links bind
    assert bus_bandwidth_bytes_per_s(16.0, 1.0, tiers(out=100e9)) == UP


def test_spanning_group_is_never_faster_than_the_same_group_inside_a_domain():
    inside = reduce_scatter_s(S, 8.0, 1.0, tiers())
    spanning = reduce_scatter_s(S, 8.0, 1.0, tiers(domain=4))
    assert spanning > inside


def test_ring_latency_counts_its_network_and_its_inner_steps_apart():
    """n − 1 steps; a ring over nodes visits each node's k ranks in a row, so n/k − 1 of its steps cross
    the network and n − n/k stay on the scale-up links (NCCL's tuning model)."""
    t = tiers(up_lat=3e-6, out_lat=8e-6)
    assert ring_latency_s(8.0, 1.0, t) == pytest.approx(7 * 3e-6)                  # inside one domain
    assert ring_latency_s(64.0, 1.0, t) == pytest.approx(7 * 8e-6 + 56 * 3e-6)     # 8 nodes of 8
    assert ring_latency_s(16.0, 8.0, t) == pytest.approx(15 * 8e-6)                # one rank per node: all network
    assert ring_latency_s(1.0, 1.0, t) == 0.0
    assert ring_latency_s(64.0, 1.0, t) < 63 * 8e-6                                # below n − 1 network hops


def test_tree_latency_is_ring_inside_and_log_across_domains():
    t = tiers(up_lat=3e-6, out_lat=8e-6)
    assert tree_latency_s(8.0, 1.0, t) == pytest.approx(7 * 3e-6)                       # k = n = 8
    assert tree_latency_s(64.0, 1.0, t) == pytest.approx(7 * 3e-6 + math.log2(8) * 8e-6)  # k = 8, 8 domains
    assert tree_latency_s(16.0, 8.0, t) == pytest.approx(math.log2(16) * 8e-6)           # k = 1


def test_reduce_scatter_adds_one_ring_latency_pass():
    t = tiers(up_lat=3e-6, out_lat=8e-6)
    assert reduce_scatter_s(S, 8.0, 1.0, t) == pytest.approx(7 / 8 * S / UP + 7 * 3e-6)


def test_send_recv_inside_and_across_domains():
    t = tiers(up_lat=3e-6, out_lat=8e-6)
    assert send_recv_s(S, 2.0, 1.0, t) == pytest.approx(S / UP + 3e-6)
    assert send_recv_s(S, 8.0, 1.0, t) == pytest.approx(S / UP + 3e-6)   # the whole group in one domain
    assert send_recv_s(S, 2.0, 8.0, t) == pytest.approx(S / OUT + 8e-6)  # next node: one NIC


def test_send_recv_group_spanning_domains_uses_the_slowest_link():
    """t=2, p=8 on 8-device domains: stride 2 < 8, but the stage boundary 6 -> 8 crosses nodes."""
    t = tiers(up_lat=3e-6, out_lat=8e-6)
    assert send_recv_s(S, 8.0, 2.0, t) == pytest.approx(S / OUT + 8e-6)


# ----------------------------------------------------------------------------- from hardware data

def test_tiers_of_applies_the_achievable_fractions():
    hw = load_hardware("a100-80gb-sxm")
    t = tiers_of(hw, hw.devices_per_node)
    assert t.up_bytes_per_s == pytest.approx(hw.scale_up_bytes_per_s * hw.efficiency.scale_up)
    assert t.out_bytes_per_s == pytest.approx(hw.scale_out_bytes_per_s * hw.efficiency.scale_out)
    assert t.domain == hw.scale_up_domain
    assert t.up_latency_s == hw.scale_up_latency_s


def test_no_scale_up_fabric_uses_the_pcie_path_and_no_network_is_unknown_not_a_placeholder():
    """Issue 11, case 2: a PCIe card's first tier is its PCIe link at PCIE_ACHIEVABLE_FRACTION of the
    nominal rate, halved without peer-to-peer (staged through host memory); a network the hardware
    does not list is NaN (refused before the model runs), never the old 1 GB/s placeholder."""
    l40s, rtx = load_hardware("l40s"), load_hardware("rtx-4090")
    t = tiers_of(l40s, 8)
    assert t.up_bytes_per_s == pytest.approx(32e9 * comm.PCIE_ACHIEVABLE_FRACTION)      # Gen4 x16, P2P
    assert t.domain == 8 and t.up_latency_s == l40s.intra_node_latency_s
    assert math.isnan(t.out_bytes_per_s)
    assert rtx.intra_node.peer_to_peer is False
    assert tiers_of(rtx, 4).up_bytes_per_s == pytest.approx(32e9 * comm.PCIE_ACHIEVABLE_FRACTION
                                                            * comm.HOST_STAGED_FRACTION)


def test_bridged_pairs_in_a_pcie_server_use_nvlink_inside_a_pair_and_pcie_across_pairs():
    """H100 PCIe, 8 per server: NVLink bridges join pairs (the scale-up domain of 2), the rest of the
    server talks over PCIe Gen5 x16, and leaving the server needs the NIC the file does not give."""
    hw = load_hardware("h100-pcie")
    t = tiers_of(hw, 8)
    up = hw.scale_up_bytes_per_s * hw.efficiency.scale_up
    pcie = 64e9 * comm.PCIE_ACHIEVABLE_FRACTION
    assert (t.domain, t.node_extent) == (2, 8)
    assert bus_bandwidth_bytes_per_s(2.0, 1.0, t) == pytest.approx(up)
    assert bus_bandwidth_bytes_per_s(8.0, 1.0, t) == pytest.approx(pcie)
    assert bus_bandwidth_bytes_per_s(4.0, 2.0, t) == pytest.approx(pcie)
    assert math.isnan(bus_bandwidth_bytes_per_s(16.0, 1.0, t))
    assert ring_latency_s(8.0, 1.0, t) == pytest.approx(7 * hw.intra_node_latency_s)
    assert send_recv_s(S, 4.0, 2.0, t) == pytest.approx(S / pcie + hw.intra_node_latency_s)


def test_a_group_of_one_rank_costs_nothing_even_over_an_unknown_path():
    t = tiers_of(load_hardware("dgx-spark"), 1)        # one device per node: no intra-node path at all
    assert math.isnan(t.up_bytes_per_s)
    for collective in (reduce_scatter_s, all_gather_s, all_reduce_s):
        assert collective(S, 1.0, 1.0, t) == 0.0
    assert all_reduce_s(S, 2.0, 1.0, t) > 0          # two Sparks over their NIC: a number, not NaN


@pytest.mark.parametrize("name, devices, per_node, words", [
    ("l40s", 8, 1, ("8 l40s devices span 8 nodes of 1", "no scale-out network", "--devices-per-node 8")),
    ("h100-pcie", 8, 2, ("span 4 nodes of 2", "no scale-out network", "system.scale_out_gbit_per_s")),
    ("tpu-v4", 8192, 4, ("span 2 nodes of 4096",)),
])
def test_network_gap_names_the_missing_network_and_the_fix(name, devices, per_node, words):
    gap = comm.network_gap(load_hardware(name), per_node, devices, "--devices-per-node", "--hardware")
    assert gap is not None
    for w in words:
        assert w in gap
    assert comm.network_gap(load_hardware(name), per_node, 1) is None
    assert comm.network_gap(load_hardware("l40s"), 8, 8) is None          # one 8-card server: its PCIe


def test_arrays_give_the_same_answer_as_floats():
    t = tiers(up_lat=3e-6, out_lat=8e-6)
    sizes = np.array([1.0, 2.0, 8.0, 16.0, 64.0])
    strides = np.array([1.0, 1.0, 1.0, 8.0, 2.0])
    got = all_reduce_s(S, sizes, strides, t)
    for i in range(len(sizes)):
        assert got[i] == pytest.approx(all_reduce_s(S, float(sizes[i]), float(strides[i]), t))


def test_flat_rings_use_one_nic_per_rank_across_domains():
    """Flat rings (aggregate_nics false): a group spanning domains gets one NIC per rank, k = 1,
    whatever its stride; a group inside one domain still runs on the scale-up links."""
    flat = tiers()._replace(aggregate_nics=False)
    assert bus_bandwidth_bytes_per_s(16.0, 1.0, flat) == OUT
    assert bus_bandwidth_bytes_per_s(16.0, 2.0, flat) == OUT
    assert bus_bandwidth_bytes_per_s(8.0, 1.0, flat) == UP
    # never faster than the hierarchical rings, and the same where k = 1 anyway
    for n, stride in ((16.0, 1.0), (64.0, 2.0), (16.0, 8.0), (4.0, 1.0)):
        assert reduce_scatter_s(S, n, stride, flat) >= reduce_scatter_s(S, n, stride, tiers())
    assert all_reduce_s(S, 16.0, 8.0, flat) == all_reduce_s(S, 16.0, 8.0, tiers())


# ------------------------------------------------------------------ node size and straddling groups

def test_a_node_smaller_than_the_boards_is_a_smaller_scale_up_domain():
    """A node-bound fabric (HGX: domain ≤ the default node) ends at the node: 4 H100 per node are a
    4-GPU NVLink domain. A rack- or pod-scale fabric (NVL72, TPU ICI) keeps its domain whatever the node."""
    h100, gb200, tpu = load_hardware("h100-sxm"), load_hardware("gb200"), load_hardware("tpu-v5p")
    assert [tiers_of(h100, n).domain for n in (8, 4, 2, 1)] == [8, 4, 2, 1]
    assert tiers_of(h100, 16).domain == 8 and tiers_of(h100, 16).node_extent == 16    # beyond the board
    assert tiers_of(gb200, 4).domain == tiers_of(gb200, 8).domain == 72
    assert tiers_of(tpu, 1).domain == tpu.scale_up_domain
    # the NICs are per device: a group over 2-GPU nodes aggregates 2 of them (k = 2)
    two = tiers_of(h100, 2)
    assert bus_bandwidth_bytes_per_s(8.0, 1.0, two) == pytest.approx(min(two.up_bytes_per_s, 2 * two.out_bytes_per_s))


def test_expert_parallel_time_grows_as_the_node_shrinks():
    """moe.md #2: Qwen3-30B-A3B, 16 H100, ep 8: the all-to-all leaves NVLink once the node holds fewer than 8."""
    from trainest.estimate import estimate
    from trainest.scenario import scenario_from_mapping
    ep = [estimate(scenario_from_mapping(
        {"model": "qwen3-30b-a3b", "devices": 16, "devices_per_node": n, "seq_len": 4096, "global_batch": 256,
         "parallel": {"ep": 8, "zero": 1}}, "t")).step.communication_detail_s["ep"] for n in (8, 4, 2, 1)]
    assert ep[0] < ep[1] < ep[2] < ep[3]


def test_the_job_spreads_over_the_fewest_domains_in_equal_shares():
    assert comm.ranks_used_per_block(72, 144.0) == 72      # two full NVL72 racks
    assert comm.ranks_used_per_block(72, 256.0) == 64      # four racks of 64 (Slurm block topology)
    assert comm.ranks_used_per_block(72, 64.0) == 64       # one rack, partly used
    assert comm.ranks_used_per_block(8, 64.0) == 8         # whole nodes
    assert comm.ranks_used_per_block(8, math.inf) == 8     # N not said: the domain


def test_groups_that_straddle_two_domains_run_at_the_network_rate():
    """physics.md #3: tp 16 on two full 72-GPU racks: 72 % 16 ≠ 0, ranks 64–79 span both racks and split
    8 + 8, so every TP group waits for that one's 8 NICs; in one rack, or 64 per rack, all are on NVLink."""
    rack = tiers(domain=72)
    assert bus_bandwidth_bytes_per_s(16.0, 1.0, rack._replace(devices=144.0)) == min(UP, 8 * OUT)
    for devices in (64.0, 256.0):
        assert bus_bandwidth_bytes_per_s(16.0, 1.0, rack._replace(devices=devices)) == UP
    assert bus_bandwidth_bytes_per_s(8.0, 1.0, rack._replace(devices=144.0)) == UP       # 72 % 8 = 0
    t = tiers(domain=72, up_lat=3e-6, out_lat=8e-6)._replace(devices=144.0)
    assert ring_latency_s(16.0, 1.0, t) == pytest.approx(1 * 8e-6 + 14 * 3e-6)   # 8 + 8: one crossing each way
    # vectorised as on floats
    sizes = np.array([8.0, 16.0, 24.0, 36.0])
    arr = bus_bandwidth_bytes_per_s(sizes, 1.0, rack._replace(devices=144.0))
    assert list(arr) == [bus_bandwidth_bytes_per_s(float(n), 1.0, rack._replace(devices=144.0)) for n in sizes]


def test_tensor_parallelism_straddling_nvl72_racks_is_slower_than_inside_one():
    from trainest.estimate import estimate
    from trainest.scenario import scenario_from_mapping

    def tp_s(tp, devices):      # 8 micro-batches per step in every case
        return estimate(scenario_from_mapping(
            {"model": "llama3-70b", "hardware": "gb200", "devices": devices, "global_batch": 8 * devices // tp,
             "parallel": {"tp": tp, "zero": 1, "sequence_parallel": True}}, "t")).step.communication_detail_s["tp"]
    assert tp_s(16, 144) > 1.2 * tp_s(16, 64)
    assert tp_s(8, 144) == pytest.approx(tp_s(8, 64), rel=1e-12)


# ------------------------------------------------------------------ data-parallel buckets: one latency per call

def _dp_job(framework, devices, zero=2, model="gpt3-1.3b"):
    from trainest.estimate import job_of, layout_of
    from trainest.scenario import scenario_from_mapping
    s = scenario_from_mapping({"model": model, "hardware": "h100-sxm", "devices": devices, "framework": framework,
                               "global_batch": devices, "micro_batch": 1, "seq_len": 2048,
                               "parallel": {"tp": 1, "pp": 1, "dp": devices, "zero": zero}})
    return job_of(s), layout_of(s)


def test_dp_collectives_are_bucketed_as_the_framework_does():
    """Megatron-Core reduces its gradients in buckets of max(40M, 1M·d) parameters, DeepSpeed in 5e8-element
    buckets, PyTorch FSDP (llm-foundry, torchtitan) once per wrapped block, i.e. per layer."""
    from trainest.step.traffic import dp_collective_calls
    job, lay = _dp_job("megatron-core", 64)
    assert dp_collective_calls(job, lay, 1.3e9) == math.ceil(1.3e9 / 64e6)     # B = 1M · 64 > 40M
    job, lay = _dp_job("megatron-core", 8)
    assert dp_collective_calls(job, lay, 1.3e9) == math.ceil(1.3e9 / 40e6)
    assert dp_collective_calls(*_dp_job("deepspeed", 8), 1.3e9) == 3
    assert dp_collective_calls(*_dp_job("deepspeed", 8), 1e6) == 1
    job, lay = _dp_job("llm-foundry", 8)
    assert dp_collective_calls(job, lay, 1.3e9) == job.model.layers


def test_megatron_buckets_grow_with_the_ranks_the_gradients_are_reduced_over():
    """The per-rank term of Megatron-Core's bucket keeps each ring chunk B/n bandwidth-bound over the n = d·c
    ranks the gradients are reduced over: 64 data-parallel ranks with 4 context-parallel ranks each make a
    256-rank reduction, buckets of 256M parameters, fewer calls (and latencies) than at d = 64 alone, the
    same as at d = 256; with c = 1 nothing changes."""
    from trainest.step.traffic import dp_collective_calls
    job, lay = _dp_job("megatron-core", 64)
    ring = lay._replace(cp=4.0)
    assert dp_collective_calls(job, ring, 4e9) == math.ceil(4e9 / 256e6) < dp_collective_calls(job, lay, 4e9)
    assert dp_collective_calls(*_dp_job("megatron-core", 256), 4e9) == dp_collective_calls(job, ring, 4e9)
    assert dp_collective_calls(job, lay._replace(cp=1.0), 4e9) == math.ceil(4e9 / 64e6)


def test_bucketing_moves_the_same_bytes_and_pays_one_latency_per_call():
    """Split into n calls, a collective keeps its bandwidth term and pays n latencies: with latency-free
    links the per-layer (FSDP) and the bucketed (Megatron) reductions cost the same; with the catalog's
    latencies the per-layer one costs (n − n')·(the ring latency + a call's fixed cost) more, which grows with the ranks (the
    multi-node llm-foundry runs slow down from 128 to 512 GPUs at a fixed per-GPU batch)."""
    from trainest.step.collectives import job_tiers, ring_latency_s
    from trainest.step.traffic import dp_collective_calls, dp_traffic
    for devices in (128, 512):
        (fsdp, lay), (mcore, lay_m) = _dp_job("llm-foundry", devices), _dp_job("megatron-core", devices)
        p = 1.3e9
        free = job_tiers(fsdp)._replace(up_latency_s=0.0, out_latency_s=0.0, node_latency_s=0.0, call_s=0.0)
        a, b = dp_traffic(fsdp, lay, free, p), dp_traffic(mcore, lay_m, free, p)
        assert a.reduce_s == pytest.approx(b.reduce_s, rel=1e-12) and a.gather_s == pytest.approx(b.gather_s, rel=1e-12)
        tiers = job_tiers(fsdp)
        n, n_m = dp_collective_calls(fsdp, lay, p), dp_collective_calls(mcore, lay_m, p)
        extra = dp_traffic(fsdp, lay, tiers, p).reduce_s - dp_traffic(mcore, lay_m, tiers, p).reduce_s
        assert extra == pytest.approx((n - n_m) * (ring_latency_s(float(devices), 1.0, tiers) + tiers.call_s), rel=1e-9)
        assert extra > 0


ALLREDUCE_TABLE = Path(__file__).resolve().parent / "data" / "allreduce-a100-vtrain.yaml"


def _measured_all_reduce() -> list[tuple[int, float, float]]:
    """(GPUs, bytes, measured seconds) of every row of vTrain's A100 all-reduce tables (tests/data)."""
    doc = yaml.safe_load(ALLREDUCE_TABLE.read_text(encoding="utf-8"))
    return [(t["gpus"], float(size), time_us * 1e-6) for t in doc["tables"] for size, time_us in t["rows"]]


def test_all_reduce_matches_the_measured_a100_table():
    """Issue 31: NCCL all-reduce inside one A100 node, 2-8 GPUs, 1 MiB - 1 GiB (868 measured rows). With the
    fixed cost of a call (NCCL_CALL_S) the model is within 30 % of every row and 12 % on average; the ring
    alone (no fixed cost) was 76 % too fast at 1 MiB on 2 GPUs."""
    hw = load_hardware("a100-80gb-sxm")
    errors, bare = [], []
    for gpus, size, measured_s in _measured_all_reduce():
        tiers = comm.tiers_of(hw, 8, gpus)
        predicted = float(all_reduce_s(size, gpus, 1, tiers))
        errors.append(predicted / measured_s - 1.0)
        bare.append(float(all_reduce_s(size, gpus, 1, tiers._replace(call_s=0.0))) / measured_s - 1.0)
    assert len(errors) == 868
    assert max(abs(e) for e in errors) <= 0.30
    assert sum(abs(e) for e in errors) / len(errors) <= 0.12
    assert sum(abs(e) for e in errors) < sum(abs(e) for e in bare)


def test_a_collective_call_costs_its_fixed_time_on_gpus_only():
    gpu, tpu = comm.tiers_of(load_hardware("h100-sxm"), 8, 8), comm.tiers_of(load_hardware("tpu-v5p"), 4, 8)
    assert gpu.call_s == comm.NCCL_CALL_S and tpu.call_s == 0.0
    tiny = 1.0
    assert float(all_reduce_s(tiny, 8, 1, gpu)) >= comm.NCCL_CALL_S
    assert float(reduce_scatter_s(tiny, 2, 1, gpu)) >= comm.NCCL_CALL_S
    assert float(all_reduce_s(tiny, 1, 1, gpu)) == 0.0
