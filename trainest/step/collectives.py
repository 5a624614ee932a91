"""Collective costs on the network tiers (ring algorithms; Patarasuk & Yuan 2009; NCCL docs;
scaling-book "Collectives").

For n ranks, S bytes per rank and a per-rank bus bandwidth W (per direction):
reduce-scatter and all-gather move (n−1)/n·S, all-reduce twice that. A group that fits in the
scale-up domain runs at the scale-up bandwidth; one that fits in a node beyond it (NVLink-bridged
PCIe cards) at the node's intra-node path (PCIe). A group that spans nodes is limited by the NICs:
with k of its ranks inside each node, the k NICs work in parallel (rail-optimised clusters), so
the bus bandwidth is min(W_inner, k·W_out·η_out) (hierarchical/multi-ring NCCL). A flat ring
(`aggregate_nics` false) leaves every node through one rank's NIC, so k = 1: W = min(W_inner, W_out).
A group lies inside a domain only if every group of its kind does: the groups' blocks of n·stride
consecutive ranks tile the U ranks the job uses per domain (the largest divisor of N not above D);
otherwise some group straddles a boundary and, a ring or an all-to-all being as slow as its slowest
link, the step runs at that group's pace (`inside`, `group_ranks_per_domain`).
Devices without a scale-up fabric form their first tier over the intra-node path (PCIe, peer to
peer or staged through host memory), and a path the hardware data lacks is never given a
placeholder rate: `network_gap` says why such a layout cannot be estimated.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

from trainest import xp
from trainest.hardware import Hardware, pcie_bytes_per_s
from trainest.record import NamedTuple

if TYPE_CHECKING:
    from trainest.layout import Job, Layout, Num

# The intra-node path of devices without a node-wide scale-up fabric is the host's PCIe
# (Hardware.intra_node). Its nominal rate per direction (PCI-SIG: lanes x 2 GB/s for Gen4, 4 GB/s for
# Gen5) is not what a collective reaches: transaction-layer headers and flow control leave ~85 % of the
# raw rate for payload, and measured device<->host and peer copies reach ~80 % (25-26 GB/s on Gen4 x16,
# 50-53 GB/s on Gen5 x16: NVIDIA bandwidthTest / nvbandwidth, nccl-tests busbw on PCIe-only servers).
# trainest applies PCIE_ACHIEVABLE_FRACTION to the nominal rate instead of the hardware's `scale_up`
# efficiency, which is fitted (or set) for its NVLink/fabric traffic.
PCIE_ACHIEVABLE_FRACTION = 0.8
# Without peer-to-peer (GeForce cards; GPUs under different CPU sockets) NCCL stages every transfer
# through host memory: the bytes cross PCIe twice (device -> host, host -> device), so about half the rate.
HOST_STAGED_FRACTION = 0.5
DEFAULT_PCIE_LATENCY_S = 10e-6     # a small PCIe transfer, when the hardware file gives no latency (assumption)
# One NCCL/RCCL collective call costs a fixed time besides its ring steps: the kernel's launch and the
# handshake that starts the protocol on every rank. Measured: NCCL all-reduce on one 8-GPU A100 NVSwitch node
# (vTrain's lookup tables, VIA-Research/vTrain @ f8dda8473a trace/a100/AR_GPU<n>_1M_1024M_LUT, as transcribed
# in tests/data/allreduce-a100-vtrain.yaml): 1 MiB takes 44 µs on 2 GPUs and 93 µs on 8, where its bytes at the
# large-message bus bandwidth (200-230 GB/s) take 4-8 µs and its 2(n-1) hops at 3 µs 6-42 µs; the time left
# is 30-40 µs at every n. NCCL_CALL_S is 30 µs: with it the model is within 25 % of all 868 rows (MAPE 9 %,
# 16 % without; tests/test_comm.py). GPUs only: a TPU's collectives are compiled into the step's program (XLA),
# and no measured table says what HCCL or the Neuron runtime pay.
NCCL_CALL_S = 30e-6
NCCL_KINDS = ("gpu", "cpu-gpu")


class Tiers(NamedTuple):
    """Achievable per-device bandwidths [B/s] and latencies [s] of the tiers: the scale-up domain
    (D ranks), the node beyond it (up to `node_domain` ranks over the intra-node path, e.g. PCIe
    between NVLink-bridged pairs; absent when the scale-up domain spans the node) and the network.
    NaN marks a path the hardware data does not have (no scale-out network, an unknown intra-node
    rate): a layout that needs it is refused before the model runs (`network_gap`)."""

    up_bytes_per_s: float
    up_latency_s: float
    domain: int                 # ranks per scale-up domain
    out_bytes_per_s: float
    out_latency_s: float
    aggregate_nics: bool = True     # False: flat rings, one NIC per rank (k = 1 in the bus bandwidth)
    node_bytes_per_s: float = math.inf   # inside a node, beyond the scale-up domain (≤ up_bytes_per_s)
    node_latency_s: float = 0.0
    node_domain: int = 0        # ranks per node when it exceeds the scale-up domain (0: none)
    devices: float = math.inf   # N, the job's devices (inf: not said; every domain boundary may be crossed)
    call_s: float = 0.0         # fixed cost of one collective call (NCCL_CALL_S on GPUs)

    @property
    def node_extent(self) -> int:
        """E = max(D, devices per node): the ranks a group may span without leaving the node."""
        return max(self.domain, self.node_domain)


def intra_node_bytes_per_s(hardware: Hardware) -> tuple[float, float]:
    """(achievable rate [B/s], latency [s]) of the hardware's node-wide path (`Hardware.intra_node`):
    a PCIe link at PCIE_ACHIEVABLE_FRACTION of its nominal rate (halved when staged through host memory,
    peer_to_peer false or unknown), a fabric at the hardware's `scale_up` efficiency; NaN when the rate
    is unknown."""
    link = hardware.intra_node
    rate = link.bytes_per_s
    if rate is None and link.kind == "pcie" and link.pcie_gen is not None and link.pcie_lanes is not None:
        rate = pcie_bytes_per_s(link.pcie_gen, link.pcie_lanes)
    if rate is None or link.kind in (None, "none"):
        return math.nan, DEFAULT_PCIE_LATENCY_S
    if link.kind == "pcie":
        staged = HOST_STAGED_FRACTION if link.peer_to_peer is not True else 1.0
        return rate * PCIE_ACHIEVABLE_FRACTION * staged, link.latency_s or DEFAULT_PCIE_LATENCY_S
    return rate * hardware.efficiency.scale_up, link.latency_s or hardware.scale_up_latency_s


def scale_up_domain(hardware: Hardware, devices_per_node: int) -> int:
    """D: the devices of one scale-up domain. A fabric that ends at the node (HGX/DGX boards, xGMI, PCIe
    bridges: the file's domain is at most its default devices per node) has no more devices than the
    node: min(scale_up_domain, devices_per_node), so a 4-GPU node is a 4-GPU NVLink domain. A fabric
    that spans several nodes (NVL72/NVL36 racks, TPU pods' ICI: domain above the default node size)
    keeps its domain whatever the node size; a device without a fabric has the node."""
    if not hardware.scale_up_bytes_per_s:
        return max(devices_per_node, 1)
    domain = max(hardware.scale_up_domain, 1)
    node_bound = domain <= hardware.devices_per_node
    return max(min(domain, devices_per_node), 1) if node_bound else domain


def tiers_of(hardware: Hardware, devices_per_node: int, devices: float = math.inf) -> Tiers:
    """The tiers with their achievable fractions applied (η_up, η_out from the hardware data; the
    intra-node path by `intra_node_bytes_per_s`) over the `scale_up_domain` for this node size, for a
    job of `devices` devices (inf: not said). Without a scale-up fabric the node's devices form the
    first tier over the intra-node path; with a fabric smaller than the node (NVLink-bridged PCIe
    cards) the rest of the node is the second tier."""
    eff = hardware.efficiency
    node_rate, node_lat = intra_node_bytes_per_s(hardware)
    domain = scale_up_domain(hardware, devices_per_node)
    extra: dict[str, Any] = {}
    if hardware.scale_up_bytes_per_s:
        up, up_lat = hardware.scale_up_bytes_per_s * eff.scale_up, hardware.scale_up_latency_s
        if devices_per_node > domain:
            extra = {"node_bytes_per_s": math.nan if math.isnan(node_rate) else min(up, node_rate),
                     "node_latency_s": max(up_lat, node_lat), "node_domain": devices_per_node}
    else:
        up, up_lat = node_rate, node_lat
    out = hardware.scale_out_bytes_per_s * eff.scale_out if hardware.scale_out_bytes_per_s else math.nan
    return Tiers(up_bytes_per_s=up, up_latency_s=up_lat, domain=domain, out_bytes_per_s=out,
                 out_latency_s=hardware.scale_out_latency_s, devices=devices, call_s=collective_call_s(hardware),
                 **extra)


def collective_call_s(hardware: Hardware) -> float:
    """The fixed cost of one collective call on `hardware` [s]: its file's `system.collective_call_us` where
    given, else NCCL_CALL_S where NCCL/RCCL run it (GPUs) and 0 elsewhere."""
    if hardware.collective_call_s is not None:
        return hardware.collective_call_s
    return NCCL_CALL_S if hardware.kind in NCCL_KINDS else 0.0


def job_tiers(job: Job) -> Tiers:
    """The tiers of a job's collectives: its hardware, node size and device count (`tiers_of`)."""
    return tiers_of(job.hardware, job.devices_per_node, job.devices)


MAX_DEVICES_PER_SERVER = 16     # the most accelerators one server takes (PCIe cards: 8-10 in a 4U chassis)


def network_gap(hardware: Hardware, devices_per_node: int, devices: int, node_option: str = "devices_per_node",
                hardware_option: str = "hardware") -> str | None:
    """Why `devices` devices cannot be joined by the paths the hardware data lists (a group would
    need a network or an intra-node rate the file does not give), or None. Every layout of N devices
    has a group that spans all N ranks, so this depends on N alone."""
    t = tiers_of(hardware, devices_per_node)
    name = hardware.name
    unknown_up = devices > 1 and t.domain > 1 and math.isnan(t.up_bytes_per_s)
    unknown_node = devices > t.domain and t.node_extent > t.domain and math.isnan(t.node_bytes_per_s)
    if unknown_up or unknown_node:
        domain = (f"; or, if its scale-up fabric ({hardware.scale_up_bytes_per_s / 1e9:g} GB/s) joins the node's "
                  f"{t.node_extent} devices, system.scale_up_domain: {t.node_extent} (it is {t.domain})"
                  if unknown_node and hardware.scale_up_bytes_per_s and t.domain < t.node_extent else "")
        return (f"{devices} {name} devices share a node whose device-to-device path is unknown "
                f"(system.intra_node gives no rate); give {hardware_option} FILE with system.intra_node "
                f"(kind pcie with pcie_gen, pcie_lanes and peer_to_peer, or gb_per_s){domain}")
    if devices > t.node_extent and math.isnan(t.out_bytes_per_s):
        nodes = -(-devices // t.node_extent)
        kind = hardware.scale_out_kind or "not given"
        one_server = devices <= MAX_DEVICES_PER_SERVER and hardware.intra_node.kind not in (None, "none")
        inside = (f"; if they share one server give {node_option} {devices} ({hardware.intra_node.name or 'PCIe'})"
                  if one_server else "")
        return (f"{devices} {name} devices span {nodes} nodes of {t.node_extent} (devices per node), and {name} has "
                f"no scale-out network in the catalog (scale_out_kind: {kind}){inside}; or give {hardware_option} FILE "
                f"with system.scale_out_gbit_per_s (the NIC bandwidth per device)")
    return None


def assumed_facts(hardware: Hardware, devices_per_node: int, devices: int) -> list[str]:
    """The hardware facts that are unknown in its file (`Hardware.unknown_fields`) and that a layout of
    `devices` devices uses anyway, each with the value assumed for it."""
    link, t = hardware.intra_node, tiers_of(hardware, devices_per_node)
    uses_path = (devices > 1 and not hardware.scale_up_bytes_per_s) or \
        (devices > t.domain and t.node_extent > t.domain)
    if not uses_path or link.kind in (None, "none"):
        return []
    out = []
    if link.latency_s is None:
        out.append(f"intra_node.latency_s (assumed {DEFAULT_PCIE_LATENCY_S * 1e6:g} µs)")
    if link.kind == "pcie" and link.peer_to_peer is None:
        out.append("intra_node.peer_to_peer (assumed false: staged through host memory, half the rate)")
    if link.bytes_per_s is None and link.kind == "pcie" and link.pcie_gen is not None and link.pcie_lanes is not None:
        out.append(f"intra_node.bytes_per_s (assumed PCIe Gen{link.pcie_gen} x{link.pcie_lanes} nominal)")
    return out


def ranks_per_domain(size: Num, stride: Num, domain: Num) -> Num:
    """k: how many ranks of a group (size n, rank stride) share one domain of `domain` ranks (≥ 1, ≤ n)."""
    return xp.maximum(1.0, xp.minimum(size, domain / stride))


@functools.lru_cache(maxsize=256)
def ranks_used_per_block(span: int, devices: float) -> int:
    """U: the ranks a job of N devices places in each block of `span` (a scale-up domain, a node): the
    largest divisor of N not above the span, i.e. the job spreads over the fewest blocks that take equal
    shares (256 GPUs on 72-GPU NVL72 racks: 4 racks of 64, as Slurm's block topology places them; 144:
    2 full racks; N ≤ span: one block of N). The span itself when N is not said (inf) or N is a multiple
    of it (every node-bound domain of a job of whole nodes)."""
    if not math.isfinite(devices) or devices <= 0 or devices % span == 0:
        return span
    n = int(devices)
    return max(d for d in range(1, min(span, n) + 1) if n % d == 0)


def inside(size: Num, stride: Num, used: Num) -> Num:
    """1 where every group of n ranks `stride` apart lies inside one block of which the job uses `used`
    consecutive ranks (`ranks_used_per_block`): the groups' blocks of n·stride ranks tile it,
    U % (n·stride) = 0. Otherwise some group straddles two blocks (tp 16 on two full NVL72 racks: ranks
    64–79 span both), and the collective runs at that group's pace: a ring or an all-to-all is as slow
    as its slowest link."""
    return xp.fmod(used, size * stride) == 0


def in_domain(size: Num, stride: Num, tiers: Tiers) -> Num:
    """1 where every group (n ranks, `stride` apart) lies inside one scale-up domain (`inside`)."""
    return inside(size, stride, ranks_used_per_block(tiers.domain, tiers.devices))


def in_node(size: Num, stride: Num, tiers: Tiers) -> Num:
    """1 where every group lies inside one node (E = max(D, devices per node) ranks, `inside`)."""
    return inside(size, stride, ranks_used_per_block(tiers.node_extent, tiers.devices))


def group_ranks_per_domain(size: Num, stride: Num, tiers: Tiers) -> Num:
    """k of a group that leaves the node, at its node with the fewest of its ranks: the U ranks the job
    uses per node (`ranks_used_per_block`) and the group's n·stride ranks share blocks of gcd(U, n·stride)
    ranks, the smallest piece a boundary cuts a group into (U when one divides the other, as for every
    group of whole nodes; 8 for tp 16 on two full 72-GPU racks, whose ranks 64–79 split 8 + 8), so
    k = max(1, min(n, gcd(U, n·stride)/stride)) (`ranks_per_domain`)."""
    used = ranks_used_per_block(tiers.node_extent, tiers.devices)
    return ranks_per_domain(size, stride, xp.gcd(used, size * stride))


def _inner(size: Num, stride: Num, tiers: Tiers) -> tuple[Num, Num]:
    """(bandwidth, latency) of the links a group uses inside its node: the scale-up tier while the
    group's ranks in a node lie in one scale-up domain, else the intra-node path (the slower)."""
    k = group_ranks_per_domain(size, stride, tiers)
    in_up = k * stride <= tiers.domain
    # with one rank per node (k = 1) no link inside the node is used
    return (xp.where(k > 1, xp.where(in_up, tiers.up_bytes_per_s, tiers.node_bytes_per_s), math.inf),
            xp.where(in_up, tiers.up_latency_s, tiers.node_latency_s))


def bus_bandwidth_bytes_per_s(size: Num, stride: Num, tiers: Tiers) -> Num:
    """Per-rank bus bandwidth of a group: scale-up inside a domain, the intra-node path inside a node
    beyond it, else NIC-limited: min(W_inner, k·W_out) with k ranks of the group per node (see the
    module doc)."""
    k = group_ranks_per_domain(size, stride, tiers) if tiers.aggregate_nics else 1.0
    inner, _ = _inner(size, stride, tiers)
    across = xp.minimum(inner, k * tiers.out_bytes_per_s)
    bw = xp.where(in_domain(size, stride, tiers), tiers.up_bytes_per_s,
                  xp.where(in_node(size, stride, tiers), tiers.node_bytes_per_s, across))
    return xp.where(size > 1, bw, math.inf)     # one rank moves nothing, over whatever path


def _hop_latency_s(size: Num, stride: Num, tiers: Tiers) -> Num:
    """α of the slowest hop of a group spanning size·stride ranks."""
    return xp.where(in_domain(size, stride, tiers), tiers.up_latency_s,
                    xp.where(in_node(size, stride, tiers), tiers.node_latency_s, tiers.out_latency_s))


def ring_latency_s(size: Num, stride: Num, tiers: Tiers) -> Num:
    """Latency of one ring pass over the group: n−1 steps [s]. Inside one domain (or node) every step
    is a hop on its links: (n−1)·α. A ring over nodes visits a node's k ranks in a row, so of its n−1
    steps n/k − 1 cross the network and the others stay inside a node: (n/k − 1)·α_out + (n − n/k)·α_inner
    (NCCL's tuning model counts a ring's intra- and inter-node steps apart, `ncclTopoTuneModel`). NCCL
    runs reduce-scatter and all-gather as rings only, so this term grows linearly with n."""
    k = group_ranks_per_domain(size, stride, tiers)
    _, inner_latency = _inner(size, stride, tiers)
    nodes = size / k
    across = (nodes - 1.0) * tiers.out_latency_s + (size - nodes) * inner_latency
    inside_s = (size - 1.0) * _hop_latency_s(size, stride, tiers)
    return xp.where(in_node(size, stride, tiers), inside_s, across)


def tree_latency_s(size: Num, stride: Num, tiers: Tiers) -> Num:
    """Latency of a tree pass: (k−1)·α_inner inside a node + log2(n/k)·α_out across nodes (NCCL's
    double binary tree for all-reduce at scale) [s]."""
    k = group_ranks_per_domain(size, stride, tiers)
    _, inner_latency = _inner(size, stride, tiers)
    return (k - 1.0) * inner_latency + xp.log2(xp.maximum(size / k, 1.0)) * tiers.out_latency_s


def reduce_scatter_s(size_bytes: Num, size: Num, stride: Num, tiers: Tiers) -> Num:
    """(n−1)/n · S/W + (n−1)·α + α_call [s]; S is the full (unsharded) buffer per rank [B]. 0 for n = 1."""
    bw = bus_bandwidth_bytes_per_s(size, stride, tiers)
    return ((size - 1.0) / size * size_bytes / bw + ring_latency_s(size, stride, tiers)
            + tiers.call_s * xp.mask(size > 1))


def all_gather_s(size_bytes: Num, size: Num, stride: Num, tiers: Tiers) -> Num:
    """Same cost as reduce-scatter: (n−1)/n · S/W + (n−1)·α [s]; S is the gathered buffer [B]."""
    return reduce_scatter_s(size_bytes, size, stride, tiers)


def owner_broadcasts_s(size_bytes: Num, size: Num, stride: Num, tiers: Tiers) -> Num:
    """A buffer of S bytes [B] sharded over n ranks, made whole on every rank by n broadcasts, one per
    owner of S/n, one after another: the all-gather's bandwidth, (n−1)/n · S/W, but each broadcast a
    chain over the group that pays a ring's latency and a call: n · ((n−1)·α + α_call) [s]. 0 for n = 1."""
    bw = bus_bandwidth_bytes_per_s(size, stride, tiers)
    return ((size - 1.0) / size * size_bytes / bw
            + size * (ring_latency_s(size, stride, tiers) + tiers.call_s) * xp.mask(size > 1))


def all_reduce_s(size_bytes: Num, size: Num, stride: Num, tiers: Tiers) -> Num:
    """2(n−1)/n · S/W + 2·min(ring, tree) latency + α_call [s]: the bandwidth of reduce-scatter + all-gather,
    with NCCL choosing the tree when latency dominates, in one call."""
    bw = bus_bandwidth_bytes_per_s(size, stride, tiers)
    latency = xp.minimum(ring_latency_s(size, stride, tiers), tree_latency_s(size, stride, tiers))
    return (2.0 * ((size - 1.0) / size * size_bytes / bw + latency * xp.mask(size > 1))
            + tiers.call_s * xp.mask(size > 1))


def send_recv_s(size_bytes: Num, size: Num, stride: Num, tiers: Tiers) -> Num:
    """Point-to-point transfer between neighbours of a group (n ranks, `stride` apart): S/W + α on
    the slowest link of the group: scale-up only when the whole group lies in one domain, the
    intra-node path when it lies in one node [s]."""
    # across nodes: the network, and the links inside a node that some neighbour pairs use
    up_hops = xp.where(stride < tiers.domain, tiers.up_bytes_per_s, math.inf)
    node_hops = xp.where(stride < tiers.node_extent, tiers.node_bytes_per_s, math.inf)
    across = xp.minimum(xp.minimum(up_hops, node_hops), tiers.out_bytes_per_s)
    bw = xp.where(in_domain(size, stride, tiers), tiers.up_bytes_per_s,
                  xp.where(in_node(size, stride, tiers), tiers.node_bytes_per_s, across))
    return size_bytes / xp.where(size > 1, bw, math.inf) + _hop_latency_s(size, stride, tiers)


def all_to_all_s(size_bytes: Num, size: Num, stride: Num, tiers: Tiers) -> Num:
    """All-to-all of S bytes per rank (S/n to each of the n ranks, `stride` apart) [s].

    Inside one node: (n−1)/n · S/W with W the scale-up rate while the group lies in one scale-up
    domain, else the intra-node path. A group that spans nodes has k ranks per node (§3.2); each
    rank sends (k−1)/n·S to its node peers over the inner links and (n−k)/n·S to the others through
    its own NIC, both at once: max((k−1)/n·S/W_inner, (n−k)/n·S/W_out) + α_out. The pairwise
    exchanges are issued together (NCCL group of sends and receives, DeepEP), so the latency is one
    hop's, not n−1. 0 for n = 1 (Lepikhin et al. 2020 GShard; scaling-book)."""
    k = group_ranks_per_domain(size, stride, tiers)
    inner, _ = _inner(size, stride, tiers)
    in_node_bw = xp.where(in_domain(size, stride, tiers), tiers.up_bytes_per_s, tiers.node_bytes_per_s)
    within = (size - 1.0) / size * size_bytes / in_node_bw
    across = xp.maximum((k - 1.0) / size * size_bytes / inner,
                        (size - k) / size * size_bytes / tiers.out_bytes_per_s)
    latency = _hop_latency_s(size, stride, tiers)
    # one rank exchanges nothing, over whatever (possibly absent) link
    return xp.where(size > 1, xp.where(in_node(size, stride, tiers), within, across) + latency, 0.0)


def tied_embedding_s(job: Job, layout: Layout, tiers: Tiers) -> Num:
    """The all-reduce of the tied word-embedding gradient between the first and the last pipeline stage,
    once per step (Megatron `_allreduce_embedding_grads`, DeepSpeed PipelineEngine `_exec_reduce_tied_grads`):
    V·h/t gradients over 2 ranks (t·c·d·(p−1) apart, on the tiers the pipeline's p·t·c·d ranks span);
    0 with p = 1, untied embeddings or a frozen base (LoRA: the embedding gets no gradient) [s]."""
    model = job.model
    if not model.tied_embeddings:
        return 0.0
    size = model.vocab * model.hidden / layout.tp * job.grad_bytes
    # the pair spans the pipeline's p·t·c·d ranks: a group of 2 at stride p·t·c·d/2 crosses the same tiers
    stride = layout.tp * layout.cp * layout.dp * layout.pp / 2.0
    trained = 1.0 if xp.off(layout.finetune) else 1.0 - layout.frozen
    return xp.where(layout.pp > 1, all_reduce_s(size, 2.0, stride, tiers) * trained, 0.0)
