"""Collective costs on the network tiers (ring algorithms; Patarasuk & Yuan 2009; NCCL docs;
scaling-book "Collectives").

For n ranks, S bytes per rank and a per-rank bus bandwidth W (per direction):
reduce-scatter and all-gather move (n−1)/n·S, all-reduce twice that. A group that fits in the
scale-up domain runs at the scale-up bandwidth. A group that spans domains is limited by the NICs:
with k of its ranks inside each domain, the k NICs work in parallel (rail-optimised clusters), so
the bus bandwidth is min(W_up·η_up, k·W_out·η_out) (hierarchical/multi-ring NCCL). A flat ring
(`aggregate_nics` false) leaves every domain through one rank's NIC, so k = 1: W = min(W_up, W_out).
"""

from __future__ import annotations

from typing import NamedTuple

from trainest import xp
from trainest.catalog import Hardware

PCIE_FALLBACK_BYTES_PER_S = 25e9   # devices in one node with no scale-up fabric talk over PCIe 4 x16
PCIE_FALLBACK_LATENCY_S = 10e-6
NO_NETWORK_BYTES_PER_S = 1e9       # a group that would need a network the hardware does not list


class Tiers(NamedTuple):
    """Achievable per-device bandwidths [B/s] and latencies [s] of the two tiers."""

    up_bytes_per_s: float
    up_latency_s: float
    domain: int                 # ranks per scale-up domain
    out_bytes_per_s: float
    out_latency_s: float
    aggregate_nics: bool = True     # False: flat rings, one NIC per rank (k = 1 in the bus bandwidth)


def tiers_of(hardware: Hardware, devices_per_node: int) -> Tiers:
    """The tiers with their achievable fractions applied (η_up, η_out from the hardware data)."""
    eff = hardware.efficiency
    if hardware.scale_up_bytes_per_s:
        up, up_lat, domain = hardware.scale_up_bytes_per_s * eff.scale_up, hardware.scale_up_latency_s, \
            hardware.scale_up_domain
    else:
        up, up_lat, domain = PCIE_FALLBACK_BYTES_PER_S * eff.scale_up, PCIE_FALLBACK_LATENCY_S, devices_per_node
    out = hardware.scale_out_bytes_per_s * eff.scale_out if hardware.scale_out_bytes_per_s else NO_NETWORK_BYTES_PER_S
    return Tiers(up_bytes_per_s=up, up_latency_s=up_lat, domain=max(domain, 1), out_bytes_per_s=out,
                 out_latency_s=hardware.scale_out_latency_s)


def ranks_per_domain(size, stride, domain: int):
    """k: how many ranks of a group (size n, rank stride) share one scale-up domain (≥ 1, ≤ n)."""
    return xp.maximum(1.0, xp.minimum(size, domain / stride))


def bus_bandwidth_bytes_per_s(size, stride, tiers: Tiers):
    """Per-rank bus bandwidth of a group: scale-up inside a domain, else NIC-limited (see module doc)."""
    k = ranks_per_domain(size, stride, tiers.domain) if tiers.aggregate_nics else 1.0
    inside = size * stride <= tiers.domain
    return xp.where(inside, tiers.up_bytes_per_s, xp.minimum(tiers.up_bytes_per_s, k * tiers.out_bytes_per_s))


def ring_latency_s(size, stride, tiers: Tiers):
    """Latency of one ring pass over the group: (n−1)·α, with α of the slowest link in the ring
    (α_out once the ring leaves the scale-up domain). NCCL runs reduce-scatter and all-gather as
    rings only, so this term grows linearly with n [s]."""
    inside = size * stride <= tiers.domain
    return (size - 1.0) * xp.where(inside, tiers.up_latency_s, tiers.out_latency_s)


def tree_latency_s(size, stride, tiers: Tiers):
    """Latency of a tree pass: (k−1)·α_up inside a domain + log2(n/k)·α_out across domains (NCCL's
    double binary tree for all-reduce at scale) [s]."""
    k = ranks_per_domain(size, stride, tiers.domain)
    return (k - 1.0) * tiers.up_latency_s + xp.log2(xp.maximum(size / k, 1.0)) * tiers.out_latency_s


def reduce_scatter_s(size_bytes, size, stride, tiers: Tiers):
    """(n−1)/n · S/W + (n−1)·α [s]; S is the full (unsharded) buffer per rank [B]. 0 for n = 1."""
    bw = bus_bandwidth_bytes_per_s(size, stride, tiers)
    return (size - 1.0) / size * size_bytes / bw + ring_latency_s(size, stride, tiers)


def all_gather_s(size_bytes, size, stride, tiers: Tiers):
    """Same cost as reduce-scatter: (n−1)/n · S/W + (n−1)·α [s]; S is the gathered buffer [B]."""
    return reduce_scatter_s(size_bytes, size, stride, tiers)


def all_reduce_s(size_bytes, size, stride, tiers: Tiers):
    """2(n−1)/n · S/W + 2·min(ring, tree) latency [s]: the bandwidth of reduce-scatter + all-gather,
    with NCCL choosing the tree when latency dominates."""
    bw = bus_bandwidth_bytes_per_s(size, stride, tiers)
    latency = xp.minimum(ring_latency_s(size, stride, tiers), tree_latency_s(size, stride, tiers))
    return 2.0 * ((size - 1.0) / size * size_bytes / bw + latency * xp.mask(size > 1))


def send_recv_s(size_bytes, size, stride, tiers: Tiers):
    """Point-to-point transfer between neighbours of a group (n ranks, `stride` apart): S/W + α on
    the slowest link of the group, scale-up only when the whole group lies in one domain [s]."""
    inside = size * stride <= tiers.domain
    bw = xp.where(inside, tiers.up_bytes_per_s, xp.minimum(tiers.up_bytes_per_s, tiers.out_bytes_per_s))
    lat = xp.where(inside, tiers.up_latency_s, tiers.out_latency_s)
    return size_bytes / bw + lat


def all_to_all_s(size_bytes, size, stride, tiers: Tiers):
    """All-to-all of S bytes per rank (S/n to each of the n ranks, `stride` apart) [s].

    Inside one scale-up domain: (n−1)/n · S/W_up + α_up. A group that spans domains has k ranks per
    domain (§3.2); each rank sends (k−1)/n·S to its domain peers over the scale-up fabric and
    (n−k)/n·S to the others through its own NIC, both at once: max((k−1)/n·S/W_up, (n−k)/n·S/W_out)
    + α_out. The pairwise exchanges are issued together (NCCL group of sends and receives, DeepEP),
    so the latency is one hop's, not n−1. 0 for n = 1 (Lepikhin et al. 2020 GShard; scaling-book)."""
    inside = size * stride <= tiers.domain
    k = ranks_per_domain(size, stride, tiers.domain)
    within = (size - 1.0) / size * size_bytes / tiers.up_bytes_per_s
    across = xp.maximum((k - 1.0) / size * size_bytes / tiers.up_bytes_per_s,
                        (size - k) / size * size_bytes / tiers.out_bytes_per_s)
    latency = xp.where(inside, tiers.up_latency_s, tiers.out_latency_s) * xp.mask(size > 1)
    return xp.where(inside, within, across) + latency
