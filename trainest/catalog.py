"""The bundled catalog (`specs/`): hardware and model presets, loaded into frozen dataclasses.

A name is looked up in the catalog; a value that ends in `.yaml`/`.yml` or names an existing
file is read as a path. Human units in the YAML (TFLOP/s, GB, MiB, GB/s, Gb/s, us) are converted to
SI here, once.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

from trainest import fields as F
from trainest.choices import MLPS, PRECISIONS
from trainest.errors import SpecError, did_you_mean
from trainest.units import BITS_PER_BYTE, GB, MICROSECOND, TERA, MiB

MLP_KINDS = MLPS


@functools.cache
def specs_dir() -> Path:
    """The bundled specs folder: inside the installed package, or the source tree's `specs/`."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "specs", here.parent / "specs"):
        if (candidate / "hardware").is_dir():
            return candidate
    raise SpecError(f"bundled specs not found next to {here} (broken installation?)")


# ----------------------------------------------------------------------------------------- hardware

@dataclass(frozen=True)
class Efficiency:
    """Achievable fractions of peak: per-hardware data, fitted by `trainest calibrate` (docs/model.md)."""

    gemm: float                 # large-GEMM fraction of dense peak
    gemm_half_dim: float        # GEMM dimension at which a dimension's factor is 1/2 [elements]
    attention: float            # fused attention fraction of the 16-bit peak
    memory: float               # fraction of HBM bandwidth reached by streaming kernels
    scale_up: float             # fraction of scale-up bandwidth reached by collectives
    scale_out: float            # fraction of scale-out bandwidth reached by collectives
    low_precision_gemm: float   # FP8/FP4 GEMM efficiency relative to `gemm` (casts, scaling)
    flash2_attention: float     # FlashAttention-2 relative to `attention` (the best fused kernel)
    layer_overhead_s: float     # fixed time per layer pass (kernel launches, sync) [s]
    overlap_contention: float   # share of an overlapped collective's time added to the work hiding it
    fitted: bool
    method: str
    host_per_kernel_s: float = 0.0   # host (CPU) time to dispatch one kernel from Python [s]
    kernel_floor_s: float = 0.0      # the shortest a kernel takes on the device (launch, ramp, drain) [s]
    grouped_gemm: float = 1.0        # MoE expert (grouped) GEMMs relative to `gemm` at the same shape
    all_to_all: float = 0.8          # fraction of the link rate (scale-up and scale-out) the MoE all-to-alls reach

    @property
    def basis(self) -> str:
        """How the fractions were obtained, read from `fitted` and `method`: "fitted" (on this device's
        measured runs, tools/fit_defaults.py or a user file that says fitted), "inherited" (a sibling die's
        fit), "profile" (`trainest calibrate` on the user's runs), "median prior" (the median of the fitted
        devices of its kind: not validated on this device) or "prior" (generic, not validated)."""
        if self.fitted:
            if ": inherited from " in self.method:
                return "inherited"
            return "profile" if self.method.startswith(CALIBRATE_METHOD_PREFIX) else "fitted"
        return "median prior" if self.method.startswith(MEDIAN_PRIOR_PREFIX) else "prior"


CALIBRATE_METHOD_PREFIX = "trainest calibrate"   # the `method` of a profile `trainest calibrate` wrote
MEDIAN_PRIOR_PREFIX = "prior: median of"         # tools/import_hardware.py DERIVED_PRIOR_PREFIX
EFFICIENCY_KEYS = ("gemm", "gemm_half_dim", "attention", "memory", "scale_up", "scale_out")
EFFICIENCY_OPTIONAL = ("low_precision_gemm", "flash2_attention", "layer_overhead_us", "overlap_contention", "fitted",
                       "method", "fit_runs", "fit_mape_pct", "host_us_per_kernel", "kernel_floor_us",
                       "grouped_gemm", "all_to_all", "moe_fit_runs", "moe_fit_mape_pct")
DEFAULT_GROUPED_GEMM = 1.0          # expert GEMMs at the dense GEMM's efficiency for their shape unless fitted
# MoE dispatch/combine: all-to-all kernels reach ~0.8-0.95 of the link rate at large messages (DeepEP README:
# about 153 of NVLink's ~160 GB/s within an H800 node and about 45 of a 50 GB/s RDMA NIC across nodes; NCCL
# all-to-all ~0.7-0.8 on NVSwitch systems)
DEFAULT_ALL_TO_ALL = 0.8
DEFAULT_LOW_PRECISION_GEMM = 0.85   # FP8 GEMMs reach a lower fraction of their (2x) peak than BF16
DEFAULT_FLASH2_ATTENTION = 1.0     # FlashAttention-2 relative to `attention`: the same unless fitted
# a fixed time per layer pass [µs]; 0: the kernels' host dispatch and floors (docs/model.md §2.8) are
# counted instead (before them, a fitted 30 µs stood in for both)
DEFAULT_LAYER_OVERHEAD_US = 0.0
# Host time per kernel launched from Python (PyTorch eager dispatch: op dispatch, autograd bookkeeping,
# the CUDA launch call): ~10-20 µs per operator for eager PyTorch (PyTorch's own profiler overhead
# notes; the CUDA Graphs post, NVIDIA 2019, measures ~µs-scale launch cost) and more under framework
# hooks. The prior of a hardware entry without a fitted value; fitted on measured small-kernel runs
# (docs/model.md §2.8, docs/validation.md).
DEFAULT_HOST_US_PER_KERNEL = 20.0
# The shortest time a kernel occupies the device: launch latency plus the ramp-up and drain of its
# thread blocks, ~3-5 µs on A100/H100 for back-to-back small kernels (CUDA C++ Best Practices Guide,
# "kernel launch overhead"; the H200 measurement in bench/gpu_ground_truth.py measures it where a GPU is
# available). Not fitted.
DEFAULT_KERNEL_FLOOR_US = {"gpu": 4.0, "cpu-gpu": 4.0}
# Collective/compute contention by hardware kind: while a collective runs behind computation, the
# computation slows by this share of the collective's time. GPUs run NCCL/RCCL collectives as kernels
# on their SMs/CUs (one thread block per channel, and they stream through HBM): ~10–25 % of an A100's
# 108 or an H100's 132 SMs at the usual 16–32 channels; 0.15 is the same share trainest already
# leaves exposed of pipelined TP traffic. TPUs (ICI DMA), Gaudi (on-chip RoCE engines) and Trainium
# (collective engines) move collective data off the compute cores: 0. docs/model.md §4.7.
DEFAULT_OVERLAP_CONTENTION = {"gpu": 0.15, "cpu-gpu": 0.15}
DEFAULT_SCALE_UP_LATENCY_US = 3.0   # used when a hardware file gives no latency (NVLink-class)
DEFAULT_SCALE_OUT_LATENCY_US = 8.0  # InfiniBand/RoCE-class


# ------------------------------------------------------------------------ hardware facts (data only)
# Facts for models built elsewhere (the intra-node and host paths, kernel shapes, unified memory, what
# trainest does not model). The estimate reads none of them yet. A fact a file does not know is None
# (null in the YAML, with a note); `Hardware.unknown_fields` names those. Schema: specs/README.md.

EXECUTION_MODELS = ("gpu-like", "wafer-scale", "dataflow-lpu", "ipu")
MODELLED_EXECUTION_MODELS = ("gpu-like",)   # compute reads weights and activations from the device's own DRAM/HBM
# The one line said about an execution model trainest does not model, when a file gives no reason of its own.
UNSUPPORTED_REASONS = {
    "wafer-scale": "wafer-scale engine: weights stream in from external memory and the wafer holds activations in "
                   "on-wafer SRAM; trainest models devices that keep weights, activations and optimizer state in "
                   "their own DRAM/HBM",
    "dataflow-lpu": "deterministic dataflow processor with on-chip SRAM only, built for inference; trainest models "
                    "devices that keep weights, activations and optimizer state in their own DRAM/HBM",
    "ipu": "IPU: weights and activations live in per-tile SRAM, with off-chip streaming memory; trainest models "
           "devices that keep weights, activations and optimizer state in their own DRAM/HBM",
}
MEMORY_KINDS = ("HBM", "HBM2", "HBM2e", "HBM3", "HBM3e", "GDDR6", "GDDR6X", "GDDR7", "LPDDR5", "LPDDR5X", "DDR4",
                "DDR5", "SRAM")     # HBM: generation not stated by the source
INTRA_NODE_KINDS = ("nvswitch", "nvlink", "xgmi", "ici", "neuronlink", "roce", "pcie", "ipu-link", "chip-to-chip",
                    "none")         # none: one device per node, nothing to join
PEER_TO_PEER_FABRICS = ("nvswitch", "nvlink", "xgmi", "ici", "neuronlink", "roce")   # peer_to_peer true unless given
HOST_LINK_KINDS = ("pcie", "nvlink-c2c", "infinity-fabric", "ethernet", "unified", "none")   # unified: one memory
SCALE_OUT_KINDS = ("rdma", "tpu-dcn", "ethernet", "other", "server-dependent", "none")
PCIE_GENERATIONS = (1, 2, 3, 4, 5, 6)
PCIE_LANES = (1, 2, 4, 8, 16)
# Nominal rate per lane per direction [GB/s] (PCI-SIG base specifications): what datasheets double into
# "x16: 32 / 64 / 128 GB/s" for Gen3 / 4 / 5. Gen3-5 carry ~1.5 % less after 128b/130b encoding (Gen4 x16:
# 31.5 GB/s); measured host<->device copies reach ~80 % (Gen4 x16: ~25 GB/s).
PCIE_GB_PER_S_PER_LANE = {1: 0.25, 2: 0.5, 3: 1.0, 4: 2.0, 5: 4.0, 6: 8.0}


def pcie_bytes_per_s(gen: int, lanes: int) -> float:
    """Nominal PCIe link rate per direction [B/s] = lanes · rate per lane of generation `gen`."""
    return lanes * PCIE_GB_PER_S_PER_LANE[gen] * GB


class IntraNodeLink(NamedTuple):
    """The path that joins every device of a node to every other: the scale-up fabric where it spans
    the node (NVSwitch, xGMI, ICI, NeuronLink, Gaudi RoCE), else the host's PCIe. NVLink bridges join
    pairs only, so they stay in `Hardware.scale_up_*` and this is their PCIe path."""

    kind: str | None = None             # INTRA_NODE_KINDS; None = not given; "none" = one device per node
    name: str = ""
    bytes_per_s: float | None = None    # per device, per direction, link peak [B/s]
    latency_s: float | None = None      # one small transfer [s]
    peer_to_peer: bool | None = None    # False: devices cannot address each other; traffic goes through host memory
    pcie_gen: int | None = None         # kind pcie only
    pcie_lanes: int | None = None

    @property
    def via_host(self) -> bool:
        """True when device-to-device traffic is staged through host memory (no peer-to-peer)."""
        return self.peer_to_peer is False


class HostLink(NamedTuple):
    """The link between a device and its host CPU (for CPU offload)."""

    kind: str | None = None             # HOST_LINK_KINDS; None = not given; "unified" = one memory, no link
    name: str = ""
    bytes_per_s: float | None = None    # the whole link, per direction, peak [B/s]
    shared_by: int = 1                  # devices that share this link (GB200: 2 GPUs on one Grace's NVLink-C2C)
    pcie_gen: int | None = None         # kind pcie only
    pcie_lanes: int | None = None

    @property
    def bytes_per_s_per_device(self) -> float | None:
        """Per-direction bandwidth one device gets when every device sharing the link uses it [B/s]."""
        return None if self.bytes_per_s is None else self.bytes_per_s / self.shared_by


class Host(NamedTuple):
    """The CPU side of a typical node, per host (its CPUs and memory), shared by `devices` devices."""

    system: str = ""                          # the reference host the figures describe (DGX H100, Grace, ...)
    cpu: str = ""
    devices: int | None = None                # devices that share these CPUs and this memory
    cpu_cores: int | None = None              # physical cores per host
    memory_kind: str | None = None            # MEMORY_KINDS
    memory_bytes: float | None = None         # per host [B]; None on unified devices (device memory is host memory)
    memory_bytes_per_s: float | None = None   # per host, peak [B/s]
    link: HostLink = HostLink()

    def _per_device(self, value: float | None) -> float | None:
        return None if value is None or self.devices is None else value / self.devices

    @property
    def cpu_cores_per_device(self) -> float | None:
        return self._per_device(self.cpu_cores)

    @property
    def memory_bytes_per_device(self) -> float | None:
        """Host memory per device [B]."""
        return self._per_device(self.memory_bytes)

    @property
    def memory_bytes_per_s_per_device(self) -> float | None:
        """Host memory bandwidth per device [B/s]."""
        return self._per_device(self.memory_bytes_per_s)


class Compute(NamedTuple):
    """Kernel-level facts (for a kernel-cost model): parallel units, GEMM tile, on-chip cache."""

    units: int | None = None                  # SMs, CUs, TensorCores, MMEs, NeuronCores, GPU cores, ...
    unit_name: str = ""
    gemm_tile_m: int | None = None            # typical GEMM output tile per unit [elements]
    gemm_tile_n: int | None = None
    on_chip_cache_bytes: float | None = None  # L2 / last-level cache / SRAM [B]
    on_chip_cache_kind: str = ""


@dataclass(frozen=True)
class Hardware:
    """One accelerator and the system it sits in. All SI: FLOP/s, bytes, bytes/s, s, W."""

    name: str
    display_name: str
    kind: str
    peak_flops_per_s: dict[str, float]     # dense peak by GEMM precision; absent = unsupported
    memory_bytes: float
    memory_bytes_per_s: float
    power_w: float | None
    price_usd_per_hour: float | None
    devices_per_node: int
    scale_up_bytes_per_s: float | None     # per device, per direction
    scale_up_domain: int
    scale_up_latency_s: float
    scale_out_bytes_per_s: float | None    # per device, per direction
    scale_out_latency_s: float
    efficiency: Efficiency
    source: str
    path: str
    # facts for later models (defaults: what a file that gives none of them means)
    execution_model: str = "gpu-like"          # EXECUTION_MODELS
    unsupported_reason: str | None = None      # None: trainest models it; else the one line it says
    memory_kind: str | None = None             # MEMORY_KINDS
    memory_unified: bool = False               # one memory shared with the CPU (DGX Spark, Apple)
    memory_os_reserve_bytes: float | None = 0.0  # unified memory the OS/runtime keeps [B]; None: not given
    intra_node: IntraNodeLink = IntraNodeLink()
    scale_out_kind: str | None = None          # SCALE_OUT_KINDS; None = not given
    scale_out_name: str = ""
    host: Host = Host()
    compute: Compute = Compute()
    vendor: str = ""
    launch_year: int | None = None
    price_source: str = ""                     # where and when the price was read (its date, if any, in the text)
    scale_up_name: str = ""                    # the scale-up fabric (NVLink via NVSwitch, ICI, xGMI, ...)
    probed: bool = False                       # measured on a machine by `trainest probe` (extra.probed)
    probed_on: str = ""                        # when (extra.probe.date), "" when not probed or not said

    def peak(self, precision: str) -> float:
        """Dense peak FLOP/s for `precision`, or a SpecError listing what the device has."""
        if precision not in self.peak_flops_per_s:
            have = ", ".join(p for p in PRECISIONS if p in self.peak_flops_per_s)
            raise SpecError(f"hardware {self.name!r} has no {precision} peak; it supports: {have}")
        return self.peak_flops_per_s[precision]

    @property
    def price_date(self) -> str | None:
        """The first ISO date (YYYY-MM-DD) in `price_source`: when the price was read; None if none given."""
        import re
        match = re.search(r"\b(19|20)\d\d-\d\d-\d\d\b", self.price_source)
        return match.group(0) if match else None

    @property
    def peak_16bit_flops_per_s(self) -> float:
        """The 16-bit matrix peak used for attention and for MFU of mixed precision."""
        for p in ("bf16", "fp16", "tf32", "fp32"):
            if p in self.peak_flops_per_s:
                return self.peak_flops_per_s[p]
        raise SpecError(f"hardware {self.name!r} has no 16- or 32-bit peak")

    @property
    def training_memory_bytes(self) -> float:
        """Device memory left to training [B]: capacity less the OS/runtime reserve of unified memory
        (a discrete device: all of it; `memory_bytes` itself is the vendor's capacity)."""
        return self.memory_bytes - (self.memory_os_reserve_bytes or 0.0)

    @property
    def intra_node_kind(self) -> str | None:
        return self.intra_node.kind

    @property
    def intra_node_bytes_per_s(self) -> float | None:
        """Per-device, per-direction peak of the node-wide path [B/s]; None: unknown or one device per node."""
        return self.intra_node.bytes_per_s

    @property
    def intra_node_latency_s(self) -> float | None:
        return self.intra_node.latency_s

    @property
    def compute_units(self) -> int | None:
        return self.compute.units

    @property
    def gemm_tile_m(self) -> int | None:
        return self.compute.gemm_tile_m

    @property
    def gemm_tile_n(self) -> int | None:
        return self.compute.gemm_tile_n

    @property
    def unknown_fields(self) -> tuple[str, ...]:
        """The facts this hardware's file leaves unknown (null or not given, where they apply), as
        attribute paths (`intra_node.bytes_per_s`, `host.memory_bytes`). A fact that does not apply
        (the PCIe generation of an NVSwitch path, host memory of a unified device) is not listed."""
        unknown: list[str] = []

        def need(path: str, value: object) -> None:
            if value is None:
                unknown.append(path)

        need("memory_kind", self.memory_kind)
        if self.memory_unified:
            need("memory_os_reserve_bytes", self.memory_os_reserve_bytes)
        link = self.intra_node
        need("intra_node.kind", link.kind)
        if link.kind not in (None, "none"):
            pcie = ("pcie_gen", "pcie_lanes") if link.kind == "pcie" else ()
            for attr in ("bytes_per_s", "latency_s", "peer_to_peer") + pcie:
                need(f"intra_node.{attr}", getattr(link, attr))
        need("scale_out_kind", self.scale_out_kind)
        if self.scale_out_kind not in (None, "none"):
            need("scale_out_bytes_per_s", self.scale_out_bytes_per_s)
        host = self.host.link
        need("host.link.kind", host.kind)
        if host.kind not in (None, "none", "unified"):
            for attr in ("bytes_per_s",) + (("pcie_gen", "pcie_lanes") if host.kind == "pcie" else ()):
                need(f"host.link.{attr}", getattr(host, attr))
        need("host.cpu_cores", self.host.cpu_cores)
        if not self.memory_unified:
            need("host.memory_bytes", self.host.memory_bytes)
            need("host.memory_bytes_per_s", self.host.memory_bytes_per_s)
        need("compute.units", self.compute.units)
        need("compute.gemm_tile_m", self.compute.gemm_tile_m)
        need("compute.gemm_tile_n", self.compute.gemm_tile_n)
        need("compute.on_chip_cache_bytes", self.compute.on_chip_cache_bytes)
        return tuple(unknown)


HW_REQUIRED = ("name", "peak_tflops", "memory", "system", "efficiency", "source")
HW_OPTIONAL = ("display_name", "vendor", "kind", "launch_year", "power_w", "price_usd_per_hour", "price_source",
               "notes", "derived_fields", "on_chip_cache_mb", "extra",   # on_chip_cache_mb: accepted, not read;
               # extra: free-form, of which only extra.probed and extra.probe.date are read
               "execution_model", "unsupported_reason", "compute", "host")
MEMORY_REQUIRED = ("capacity_gb", "bandwidth_gb_per_s")
MEMORY_OPTIONAL = ("type", "kind", "unified", "os_reserve_gb")    # "type" is free text, accepted, not read
SYSTEM_KEYS = ("devices_per_node", "scale_up_name", "scale_up_gb_per_s", "scale_up_domain", "scale_up_latency_us",
               "scale_out_gbit_per_s", "scale_out_latency_us", "scale_out_kind", "scale_out_name", "intra_node")
INTRA_NODE_KEYS = ("kind", "name", "gb_per_s", "latency_us", "peer_to_peer", "pcie_gen", "pcie_lanes")
HOST_KEYS = ("system", "cpu", "devices", "cpu_cores", "memory_kind", "memory_gb", "memory_gb_per_s", "link")
HOST_LINK_KEYS = ("kind", "name", "gb_per_s", "shared_by", "pcie_gen", "pcie_lanes")
COMPUTE_KEYS = ("units", "unit_name", "gemm_tile", "on_chip_cache_mib", "on_chip_cache_kind")
MAX_GEMM_TILE = 4096      # elements per tile side (the largest in use: 320 on Groq, 256 on TPU MXUs and Gaudi MMEs)


def _given(data: dict, key: str, default: object) -> object:
    """data[key], or `default` when the key is absent or null (a given 0 stays 0 and is then validated)."""
    value = data.get(key)
    return default if value is None else value


def default_overlap_contention(kind: str) -> float:
    """The overlap contention of a hardware kind when its file gives none (DEFAULT_OVERLAP_CONTENTION)."""
    return DEFAULT_OVERLAP_CONTENTION.get(kind, 0.0)


def _efficiency_from(data: dict, where: str, kind: str) -> Efficiency:
    F.check_keys(data, where, EFFICIENCY_KEYS, EFFICIENCY_OPTIONAL)
    return Efficiency(
        gemm=F.fraction(data["gemm"], f"{where}.gemm"),
        gemm_half_dim=F.number(data["gemm_half_dim"], f"{where}.gemm_half_dim", allow_zero=True),
        attention=F.fraction(data["attention"], f"{where}.attention"),
        memory=F.fraction(data["memory"], f"{where}.memory"),
        scale_up=F.fraction(data["scale_up"], f"{where}.scale_up"),
        scale_out=F.fraction(data["scale_out"], f"{where}.scale_out"),
        low_precision_gemm=F.fraction(data.get("low_precision_gemm", DEFAULT_LOW_PRECISION_GEMM),
                                      f"{where}.low_precision_gemm"),
        flash2_attention=F.fraction(data.get("flash2_attention", DEFAULT_FLASH2_ATTENTION),
                                    f"{where}.flash2_attention"),
        layer_overhead_s=F.number(data.get("layer_overhead_us", DEFAULT_LAYER_OVERHEAD_US),
                                  f"{where}.layer_overhead_us", allow_zero=True) * MICROSECOND,
        overlap_contention=F.number(_given(data, "overlap_contention", default_overlap_contention(kind)),
                                    f"{where}.overlap_contention", allow_zero=True, maximum=1.0),
        fitted=F.boolean(data.get("fitted", False), f"{where}.fitted"),
        method=F.text(data.get("method", ""), f"{where}.method") or "",
        host_per_kernel_s=F.number(_given(data, "host_us_per_kernel", DEFAULT_HOST_US_PER_KERNEL),
                                   f"{where}.host_us_per_kernel", allow_zero=True, maximum=10_000.0) * MICROSECOND,
        kernel_floor_s=F.number(_given(data, "kernel_floor_us", DEFAULT_KERNEL_FLOOR_US.get(kind, 0.0)),
                                f"{where}.kernel_floor_us", allow_zero=True, maximum=10_000.0) * MICROSECOND,
        grouped_gemm=F.fraction(_given(data, "grouped_gemm", DEFAULT_GROUPED_GEMM), f"{where}.grouped_gemm"),
        all_to_all=F.fraction(_given(data, "all_to_all", DEFAULT_ALL_TO_ALL), f"{where}.all_to_all"),
    )


def _pcie_fields(data: dict, where: str, is_pcie: bool) -> tuple[int | None, int | None]:
    """(pcie_gen, pcie_lanes) of a link mapping; only a PCIe link may give them."""
    gen_raw, lanes_raw = data.get("pcie_gen"), data.get("pcie_lanes")
    if not is_pcie:
        for key, raw in (("pcie_gen", gen_raw), ("pcie_lanes", lanes_raw)):
            if raw is not None:
                raise SpecError(f"{where}.{key}: only a link of kind 'pcie' has a PCIe {key[5:]}; "
                                f"this one is {F.show(data.get('kind'))}")
        return None, None
    gen = None if gen_raw is None else F.integer_choice(gen_raw, f"{where}.pcie_gen", PCIE_GENERATIONS)
    lanes = None if lanes_raw is None else F.integer_choice(lanes_raw, f"{where}.pcie_lanes", PCIE_LANES)
    return gen, lanes


def _link_gb_per_s(data: dict, where: str, gen: int | None, lanes: int | None) -> float | None:
    """`gb_per_s` of a link mapping in B/s (None when null); a PCIe link may not exceed its nominal rate."""
    gb = F.number(data.get("gb_per_s"), f"{where}.gb_per_s", allow_none=True)
    if gb is None:
        return None
    if gen is not None and lanes is not None and gb * GB > pcie_bytes_per_s(gen, lanes) * (1 + 1e-9):
        raise SpecError(f"{where}.gb_per_s: {F.show(data.get('gb_per_s'))} is more than PCIe Gen{gen} x{lanes} carries "
                        f"per direction ({pcie_bytes_per_s(gen, lanes) / GB:g} GB/s)")
    return gb * GB


def _no_values(data: dict, where: str, keys: tuple[str, ...], why: str) -> None:
    given = [k for k in keys if data.get(k) is not None]
    if given:
        raise SpecError(f"{where}: {why}, so it takes no {', '.join(given)}")


def _intra_node_from(data: object, where: str) -> IntraNodeLink:
    d = F.check_keys(data, where, ("kind",), INTRA_NODE_KEYS)
    kind = F.choice(d["kind"], f"{where}.kind", INTRA_NODE_KINDS)
    name = F.text(d.get("name") or "", f"{where}.name") or ""
    if kind == "none":
        _no_values(d, where, ("gb_per_s", "latency_us", "peer_to_peer", "pcie_gen", "pcie_lanes"),
                   "kind 'none' means one device per node")
        return IntraNodeLink(kind=kind, name=name)
    gen, lanes = _pcie_fields(d, where, kind == "pcie")
    p2p_raw = d.get("peer_to_peer")
    if p2p_raw is None:
        p2p = True if kind in PEER_TO_PEER_FABRICS else None
    else:
        p2p = F.boolean(p2p_raw, f"{where}.peer_to_peer")
    latency = F.number(d.get("latency_us"), f"{where}.latency_us", allow_none=True, allow_zero=True)
    return IntraNodeLink(kind=kind, name=name, bytes_per_s=_link_gb_per_s(d, where, gen, lanes),
                         latency_s=None if latency is None else latency * MICROSECOND, peer_to_peer=p2p,
                         pcie_gen=gen, pcie_lanes=lanes)


def _host_link_from(data: object, where: str, unified: bool) -> HostLink:
    d = F.check_keys(data, where, ("kind",), HOST_LINK_KEYS)
    kind = F.choice(d["kind"], f"{where}.kind", HOST_LINK_KINDS)
    name = F.text(d.get("name") or "", f"{where}.name") or ""
    shared_by = F.integer(_given(d, "shared_by", 1), f"{where}.shared_by", maximum=10**6)
    if kind == "unified" and not unified:
        raise SpecError(f"{where}.kind: 'unified' (CPU and device share one memory) needs memory.unified: true")
    if kind in ("unified", "none"):
        _no_values(d, where, ("gb_per_s", "pcie_gen", "pcie_lanes"), f"kind {kind!r} has no link to measure")
        return HostLink(kind=kind, name=name, shared_by=shared_by)
    gen, lanes = _pcie_fields(d, where, kind == "pcie")
    return HostLink(kind=kind, name=name, bytes_per_s=_link_gb_per_s(d, where, gen, lanes), shared_by=shared_by,
                    pcie_gen=gen, pcie_lanes=lanes)


def _host_from(data: object, where: str, unified: bool) -> Host:
    d = F.check_keys(data, where, (), HOST_KEYS)
    if unified:
        _no_values(d, where, ("memory_gb", "memory_gb_per_s", "memory_kind"),
                   "memory.unified is true (the host's memory is the device's memory, memory.capacity_gb)")
    memory_gb = F.number(d.get("memory_gb"), f"{where}.memory_gb", allow_none=True)
    memory_gb_per_s = F.number(d.get("memory_gb_per_s"), f"{where}.memory_gb_per_s", allow_none=True)
    cores = F.integer(d.get("cpu_cores"), f"{where}.cpu_cores", allow_none=True, maximum=10**6)
    devices = F.integer(d.get("devices"), f"{where}.devices", allow_none=True, maximum=10**6)
    if devices is None and any(v is not None for v in (memory_gb, memory_gb_per_s, cores)):
        raise SpecError(f"{where}.devices: required with cpu_cores / memory_gb / memory_gb_per_s (the number of "
                        f"devices that share this host's CPUs and memory)")
    kind_raw = d.get("memory_kind")
    return Host(
        system=F.text(d.get("system") or "", f"{where}.system") or "",
        cpu=F.text(d.get("cpu") or "", f"{where}.cpu") or "",
        devices=devices,
        cpu_cores=cores,
        memory_kind=None if kind_raw is None else F.canonical_choice(kind_raw, f"{where}.memory_kind", MEMORY_KINDS),
        memory_bytes=None if memory_gb is None else memory_gb * GB,
        memory_bytes_per_s=None if memory_gb_per_s is None else memory_gb_per_s * GB,
        link=HostLink() if d.get("link") is None else _host_link_from(d["link"], f"{where}.link", unified),
    )


def _compute_from(data: object, where: str) -> Compute:
    d = F.check_keys(data, where, (), COMPUTE_KEYS)
    tile = d.get("gemm_tile")
    m = n = None
    if tile is not None:
        if not isinstance(tile, list) or len(tile) != 2:
            raise SpecError(f"{where}.gemm_tile: expected [m, n] (two whole numbers), got {F.show(tile)}")
        m, n = (F.integer(t, f"{where}.gemm_tile[{i}]", maximum=MAX_GEMM_TILE) for i, t in enumerate(tile))
    cache = F.number(d.get("on_chip_cache_mib"), f"{where}.on_chip_cache_mib", allow_none=True)
    return Compute(
        units=F.integer(d.get("units"), f"{where}.units", allow_none=True, maximum=10**8),
        unit_name=F.text(d.get("unit_name") or "", f"{where}.unit_name") or "",
        gemm_tile_m=m, gemm_tile_n=n,
        on_chip_cache_bytes=None if cache is None else cache * MiB,
        on_chip_cache_kind=F.text(d.get("on_chip_cache_kind") or "", f"{where}.on_chip_cache_kind") or "",
    )


def _memory_facts(mem: dict, where: str, capacity_gb: float) -> tuple[str | None, bool, float | None]:
    """(memory kind, unified, OS/runtime reserve [B]) from the `memory` mapping."""
    unified = F.boolean(_given(mem, "unified", False), f"{where}.unified")
    kind = None if mem.get("kind") is None else F.canonical_choice(mem["kind"], f"{where}.kind", MEMORY_KINDS)
    reserve_gb = F.number(mem.get("os_reserve_gb"), f"{where}.os_reserve_gb", allow_none=True, allow_zero=True)
    if not unified:
        if reserve_gb is not None:
            raise SpecError(f"{where}.os_reserve_gb: only unified memory (memory.unified: true) is shared with the "
                            f"OS; a discrete device's memory is all its own")
        return kind, False, 0.0
    if reserve_gb is not None and reserve_gb >= capacity_gb:
        raise SpecError(f"{where}.os_reserve_gb: {F.show(mem.get('os_reserve_gb'))} must be less than "
                        f"memory.capacity_gb ({capacity_gb:g})")
    return kind, True, None if reserve_gb is None else reserve_gb * GB


def _execution_from(data: dict, where: str) -> tuple[str, str | None]:
    """(execution model, unsupported reason); the reason is None exactly when trainest models it."""
    model = F.choice(_given(data, "execution_model", "gpu-like"), f"{where}.execution_model", EXECUTION_MODELS)
    reason = F.text(data.get("unsupported_reason"), f"{where}.unsupported_reason", allow_none=True) or None
    if model in MODELLED_EXECUTION_MODELS:
        if reason is not None:
            raise SpecError(f"{where}.unsupported_reason: only for an execution model trainest does not model "
                            f"({', '.join(m for m in EXECUTION_MODELS if m not in MODELLED_EXECUTION_MODELS)}); "
                            f"execution_model is {model!r}")
        return model, None
    return model, reason or UNSUPPORTED_REASONS[model]


def _probed_from(extra: object, where: str) -> tuple[bool, str]:
    """(probed, date) from the free-form `extra` block: `extra.probed: true` marks a file that `trainest
    probe` wrote, `extra.probe.date` says when."""
    if extra is None:
        return False, ""
    if not isinstance(extra, dict):
        raise SpecError(f"{where}.extra: expected a mapping, got {F.show(extra)}")
    probed = F.boolean(_given(extra, "probed", False), f"{where}.extra.probed")
    probe = extra.get("probe")
    date = probe.get("date") if isinstance(probe, dict) else None
    return probed, str(date) if probed and date is not None else ""


def hardware_from_mapping(data: dict, where: str) -> Hardware:
    """Validate one hardware mapping (schema in specs/README.md) and convert it to SI."""
    F.check_keys(data, where, HW_REQUIRED, HW_OPTIONAL)
    peaks_raw = F.check_keys(data["peak_tflops"], f"{where}.peak_tflops", (), PRECISIONS)
    peaks = {p: F.number(v, f"{where}.peak_tflops.{p}") * TERA for p, v in peaks_raw.items() if v is not None}
    if not peaks:
        raise SpecError(f"{where}.peak_tflops: at least one precision needs a peak")
    mem = F.check_keys(data["memory"], f"{where}.memory", MEMORY_REQUIRED, MEMORY_OPTIONAL)
    capacity_gb = F.number(mem["capacity_gb"], f"{where}.memory.capacity_gb")
    memory_kind, unified, os_reserve_bytes = _memory_facts(mem, f"{where}.memory", capacity_gb)
    sys_ = F.check_keys(data["system"], f"{where}.system", ("devices_per_node",), SYSTEM_KEYS)
    up = F.number(sys_.get("scale_up_gb_per_s"), f"{where}.system.scale_up_gb_per_s", allow_none=True)
    out = F.number(sys_.get("scale_out_gbit_per_s"), f"{where}.system.scale_out_gbit_per_s", allow_none=True)
    scale_out_kind = (None if sys_.get("scale_out_kind") is None
                      else F.choice(sys_["scale_out_kind"], f"{where}.system.scale_out_kind", SCALE_OUT_KINDS))
    if scale_out_kind == "none" and out is not None:
        raise SpecError(f"{where}.system.scale_out_kind: 'none' (no NIC) contradicts scale_out_gbit_per_s = "
                        f"{F.show(sys_.get('scale_out_gbit_per_s'))}")
    devices_per_node = F.integer(sys_["devices_per_node"], f"{where}.system.devices_per_node")
    domain = F.integer(_given(sys_, "scale_up_domain", 1), f"{where}.system.scale_up_domain")
    kind = F.text(data.get("kind") or "gpu", f"{where}.kind")
    execution_model, unsupported_reason = _execution_from(data, where)
    probed, probed_on = _probed_from(data.get("extra"), where)
    return Hardware(
        name=F.text(data["name"], f"{where}.name"),
        display_name=F.text(data.get("display_name") or data["name"], f"{where}.display_name"),
        kind=kind,
        peak_flops_per_s=peaks,
        memory_bytes=capacity_gb * GB,
        memory_bytes_per_s=F.number(mem["bandwidth_gb_per_s"], f"{where}.memory.bandwidth_gb_per_s") * GB,
        power_w=F.number(data.get("power_w"), f"{where}.power_w", allow_none=True),
        price_usd_per_hour=F.number(data.get("price_usd_per_hour"), f"{where}.price_usd_per_hour", allow_none=True),
        devices_per_node=devices_per_node,
        scale_up_bytes_per_s=up * GB if up else None,
        scale_up_domain=domain if up else 1,
        scale_up_latency_s=F.number(_given(sys_, "scale_up_latency_us", DEFAULT_SCALE_UP_LATENCY_US),
                                    f"{where}.system.scale_up_latency_us",
                                    allow_zero=True) * MICROSECOND,
        scale_out_bytes_per_s=out * GB / BITS_PER_BYTE if out else None,
        scale_out_latency_s=F.number(_given(sys_, "scale_out_latency_us", DEFAULT_SCALE_OUT_LATENCY_US),
                                     f"{where}.system.scale_out_latency_us",
                                     allow_zero=True) * MICROSECOND,
        efficiency=_efficiency_from(data["efficiency"], f"{where}.efficiency", kind),
        source=F.text(data["source"], f"{where}.source"),
        path=where,
        execution_model=execution_model,
        unsupported_reason=unsupported_reason,
        memory_kind=memory_kind,
        memory_unified=unified,
        memory_os_reserve_bytes=os_reserve_bytes,
        intra_node=(IntraNodeLink() if sys_.get("intra_node") is None
                    else _intra_node_from(sys_["intra_node"], f"{where}.system.intra_node")),
        scale_out_kind=scale_out_kind,
        scale_out_name=F.text(sys_.get("scale_out_name") or "", f"{where}.system.scale_out_name") or "",
        host=Host() if data.get("host") is None else _host_from(data["host"], f"{where}.host", unified),
        compute=Compute() if data.get("compute") is None else _compute_from(data["compute"], f"{where}.compute"),
        vendor=F.text(data.get("vendor") or "", f"{where}.vendor") or "",
        launch_year=F.integer(data.get("launch_year"), f"{where}.launch_year", allow_none=True, maximum=3000),
        price_source=F.text(data.get("price_source") or "", f"{where}.price_source") or "",
        scale_up_name=F.text(sys_.get("scale_up_name") or "", f"{where}.system.scale_up_name") or "",
        probed=probed,
        probed_on=probed_on,
    )


# ------------------------------------------------------------------------------------------- models
# Symbols (docs/model.md; all counts in elements or parameters): L layers, h hidden, f dense MLP width,
# a heads, g KV heads, d_h head dim, V vocab, k MLP matrices (2 GeLU, 3 gated), E routed experts,
# K top-k, f_e expert MLP width, S shared experts, f_s shared-expert width, L_d dense and L_m MoE layers,
# r_q / r_kv MLA query / key-value latent ranks, d_n / d_r / d_v MLA no-RoPE / RoPE / value head dims.

class MoE(NamedTuple):
    """The mixture-of-experts MLP of a model's MoE layers (its dense layers keep `Model.ffn_hidden`).

    Layout: the first `dense_layers` layers are dense; after them every `layer_frequency`-th layer is
    MoE, counting the k-th: layer i (0-based) is MoE when i >= d and (i - d + 1) mod k = 0, so
    L_m = (L - d) // k (Llama 4 `interleave_moe_layer_step`, Qwen `decoder_sparse_step`, DeepSeek
    `first_k_dense_replace`).
    """

    experts: int                                 # E: routed experts per MoE layer
    top_k: int                                   # K: routed experts each token goes to
    expert_ffn_hidden: int                       # f_e: MLP width of one routed expert [elements]
    shared_experts: int = 0                      # S: experts every token goes through (DeepSeek, Llama 4)
    shared_expert_ffn_hidden: int | None = None  # f_s: width of one shared expert; None (no shared experts) = f_e
    dense_layers: int = 0                        # d: leading dense layers
    layer_frequency: int = 1                     # k: every k-th layer after them is MoE
    capacity_factor: float | None = None         # expert capacity over the mean load; None = dropless
    imbalance: float = 1.0                       # tokens on the busiest expert over the mean (1 = forced balance)

    @property
    def shared_width(self) -> int:
        """f_s [elements]: the shared experts' MLP width (f_e unless given)."""
        return self.expert_ffn_hidden if self.shared_expert_ffn_hidden is None else self.shared_expert_ffn_hidden


class MLA(NamedTuple):
    """Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434 §2.1; DeepSeek-V3; Kimi K2): queries
    and keys/values are projected through low-rank latents; each head's key is d_n latent-derived dims
    plus d_r RoPE dims shared by all heads. Every head has its own keys and values (no GQA)."""

    q_lora_rank: int | None      # r_q: query latent rank; None = a plain h × a·(d_n + d_r) query projection
    kv_lora_rank: int            # r_kv: key/value latent rank
    qk_nope_head_dim: int        # d_n: per-head query/key dims without RoPE
    qk_rope_head_dim: int        # d_r: per-head query/key dims with RoPE
    v_head_dim: int              # d_v: per-head value dims

    @property
    def qk_head_dim(self) -> int:
        """d_n + d_r: the query/key width of one head (the model's head_dim) [elements]."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer's shape: dense, or with mixture-of-experts MLPs (`moe`) and/or
    multi-head latent attention (`mla`). Biases, attention sinks and QK-norms are not counted."""

    name: str
    layers: int
    hidden: int
    ffn_hidden: int             # f: MLP width of the dense layers (with `moe` and no dense layer: f_e, unused)
    heads: int
    kv_heads: int
    vocab: int
    mlp: str                    # gelu (2 matrices) | swiglu (3 matrices: any gated MLP, experts included)
    seq_len: int                # default sequence length
    tied_embeddings: bool
    source: str
    head_dim: int               # d_h; usually h/a (MaxText synthetic models use 128 regardless; MLA: d_n + d_r)
    dropout: bool = True        # trained with dropout (masks stored, extra traffic); modern LLMs: false
    moe: MoE | None = None      # mixture-of-experts MLPs; None = every layer dense
    mla: MLA | None = None      # multi-head latent attention; None = standard multi-head / grouped-query attention

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.mlp == "swiglu" else 2

    # --- layer layout

    @property
    def moe_layers(self) -> int:
        """L_m = (L - d) // k: layers whose MLP is a mixture of experts (0 for a dense model)."""
        if self.moe is None:
            return 0
        return (self.layers - self.moe.dense_layers) // self.moe.layer_frequency

    @property
    def dense_layers_count(self) -> int:
        """L_d = L - L_m: layers with the dense MLP of width f."""
        return self.layers - self.moe_layers

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer `index` (0-based) is MoE: index >= d and (index - d + 1) mod k = 0."""
        if self.moe is None or index < self.moe.dense_layers:
            return False
        return (index - self.moe.dense_layers + 1) % self.moe.layer_frequency == 0

    # --- parameters of the parts of a layer [params]

    @property
    def attention_params(self) -> int:
        """Weights of one attention block [params].

        Standard / grouped-query: Q h·a·d_h, K and V 2·h·g·d_h, output a·d_h·h.
        MLA: query h·r_q + r_q (latent norm) + r_q·a·(d_n + d_r), or h·a·(d_n + d_r) when r_q is None;
        KV down-projection h·(r_kv + d_r), KV latent norm r_kv, KV up-projection r_kv·a·(d_n + d_v),
        output a·d_v·h (DeepSeek-V2, arXiv:2405.04434, §2.1).
        """
        h, a = self.hidden, self.heads
        if self.mla is None:
            qkv = h * (a + 2 * self.kv_heads) * self.head_dim
            return qkv + a * self.head_dim * h
        m = self.mla
        if m.q_lora_rank is None:
            q = h * a * m.qk_head_dim
        else:
            q = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * a * m.qk_head_dim
        kv_down = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank          # latent + shared RoPE key, norm
        kv_up = m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim)
        kv = kv_down + kv_up
        return q + kv + a * m.v_head_dim * h

    @property
    def layer_norm_params(self) -> int:
        """The two RMS/LayerNorm gains of a layer, 2h [params]."""
        return 2 * self.hidden

    @property
    def dense_mlp_params(self) -> int:
        """k·h·f: the MLP of a dense layer [params]."""
        return self.mlp_matrices * self.hidden * self.ffn_hidden

    @property
    def params_per_expert(self) -> int:
        """k·h·f_e: one routed expert's MLP [params] (0 for a dense model)."""
        return 0 if self.moe is None else self.mlp_matrices * self.hidden * self.moe.expert_ffn_hidden

    @property
    def router_params(self) -> int:
        """h·E: the router (gate) of one MoE layer [params] (its bias or score-correction bias ignored)."""
        return 0 if self.moe is None else self.hidden * self.moe.experts

    @property
    def expert_params_per_moe_layer(self) -> int:
        """E·k·h·f_e: the routed experts of one MoE layer [params]."""
        return 0 if self.moe is None else self.moe.experts * self.params_per_expert

    @property
    def shared_expert_params_per_moe_layer(self) -> int:
        """S·k·h·f_s: the shared experts of one MoE layer [params]."""
        if self.moe is None:
            return 0
        return self.moe.shared_experts * self.mlp_matrices * self.hidden * self.moe.shared_width

    # --- parameters per layer [params]

    @property
    def params_per_dense_layer(self) -> int:
        """Weights of one dense layer: attention + k·h·f + 2h (for a dense standard-attention model:
        QKV h·(a + 2g)·d_h, output a·d_h·h, MLP k·h·f, two norms 2h; biases ignored)."""
        return self.attention_params + self.dense_mlp_params + self.layer_norm_params

    @property
    def params_per_moe_layer(self) -> int:
        """Weights of one MoE layer: attention + router h·E + routed experts E·k·h·f_e + shared experts
        S·k·h·f_s + 2h (0 for a dense model)."""
        if self.moe is None:
            return 0
        return (self.attention_params + self.router_params + self.expert_params_per_moe_layer
                + self.shared_expert_params_per_moe_layer + self.layer_norm_params)

    @property
    def active_params_per_moe_layer(self) -> int:
        """Weights one token uses in a MoE layer: attention + router h·E + K·k·h·f_e + S·k·h·f_s + 2h."""
        if self.moe is None:
            return 0
        return (self.attention_params + self.router_params + self.moe.top_k * self.params_per_expert
                + self.shared_expert_params_per_moe_layer + self.layer_norm_params)

    @property
    def params_per_layer(self) -> float:
        """Weights of one layer [params]. Dense model: params_per_dense_layer = QKV h·(a + 2g)·d_h +
        output a·d_h·h + MLP k·h·f + two norms 2h (biases ignored). MoE model: the mean over the layers,
        (L_d·P_dense + L_m·P_moe) / L, so that L·params_per_layer + embedding_params = params."""
        if self.moe is None:
            return self.params_per_dense_layer
        return (self.dense_layers_count * self.params_per_dense_layer
                + self.moe_layers * self.params_per_moe_layer) / self.layers

    @property
    def expert_params_per_layer(self) -> float:
        """L_m·E·k·h·f_e / L: the routed experts' weights per layer, as a mean over the layers [params]
        (the part of params_per_layer that expert parallelism shards; 0 for a dense model)."""
        return 0.0 if self.moe is None else self.expert_params / self.layers

    # --- attention widths [elements]

    @property
    def qk_head_dim(self) -> int:
        """d_qk: query/key width of one head (d_h; MLA: d_n + d_r)."""
        return self.head_dim if self.mla is None else self.mla.qk_head_dim

    @property
    def v_head_dim(self) -> int:
        """d_v: value (and attention output) width of one head (d_h; MLA: v_head_dim)."""
        return self.head_dim if self.mla is None else self.mla.v_head_dim

    # --- whole model [params]

    @property
    def embedding_params(self) -> float:
        """Input embedding V·h, plus the output layer V·h when not tied, plus the final norm."""
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2) + self.hidden

    @property
    def expert_params(self) -> int:
        """L_m·E·k·h·f_e: the routed experts of all MoE layers [params] (what expert parallelism shards)."""
        return self.moe_layers * self.expert_params_per_moe_layer

    @property
    def params(self) -> float:
        """Total weights: L·params_per_layer + embedding_params (dense), or
        L_d·P_dense + L_m·P_moe + embedding_params (MoE) [params]."""
        if self.moe is None:
            return self.layers * self.params_per_layer + self.embedding_params
        return (self.dense_layers_count * self.params_per_dense_layer + self.moe_layers * self.params_per_moe_layer
                + self.embedding_params)

    @property
    def active_params(self) -> float:
        """Weights one token uses: L_d·P_dense + L_m·P_moe_active + embedding_params [params]; = params for
        a dense model. Both embedding tables count (some model cards leave out the input embedding)."""
        if self.moe is None:
            return self.params
        return (self.dense_layers_count * self.params_per_dense_layer
                + self.moe_layers * self.active_params_per_moe_layer + self.embedding_params)


def unmodelled_features(model: Model) -> tuple[str, ...]:
    """What `model` has that the step-time and memory model does not compute: empty for every model
    the schema can express (dense, mixture-of-experts and multi-head latent attention models are all
    modelled: docs/model.md §15). Kept for features added to the schema before their physics."""
    del model
    return ()


MODEL_REQUIRED = ("layers", "hidden", "ffn_hidden", "heads", "vocab")
MODEL_OPTIONAL = ("name", "display_name", "source", "kv_heads", "mlp", "seq_len", "tied_embeddings", "aliases", "notes",
                  "params_b", "head_dim", "params", "active_params", "dropout", "moe", "mla")
MOE_REQUIRED = ("experts", "top_k", "expert_ffn_hidden")
MOE_OPTIONAL = ("shared_experts", "shared_expert_ffn_hidden", "dense_layers", "layer_frequency", "capacity_factor",
                "imbalance")
MLA_REQUIRED = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
MLA_OPTIONAL = ("q_lora_rank",)


def _moe_from(data: object, where: str, layers: int) -> MoE:
    """Validate a `moe:` mapping (specs/README.md) against the model's layer count."""
    data = F.check_keys(data, where, MOE_REQUIRED, MOE_OPTIONAL)
    experts = F.integer(data["experts"], f"{where}.experts", maximum=10**6)
    top_k = F.integer(data["top_k"], f"{where}.top_k", maximum=10**6)
    if top_k > experts:
        raise SpecError(f"{where}.top_k: {top_k} must be at most experts={experts} (each token goes to top_k "
                        f"different experts)")
    shared = F.integer(_given(data, "shared_experts", 0), f"{where}.shared_experts", minimum=0, maximum=10**6)
    width = F.integer(data["expert_ffn_hidden"], f"{where}.expert_ffn_hidden", maximum=10**8)
    shared_width = F.integer(data.get("shared_expert_ffn_hidden"), f"{where}.shared_expert_ffn_hidden",
                             maximum=10**8, allow_none=True)
    if shared_width is not None and shared == 0:
        raise SpecError(f"{where}.shared_expert_ffn_hidden: {shared_width} is given but shared_experts is 0; "
                        f"set shared_experts (at least 1) or remove shared_expert_ffn_hidden")
    dense = F.integer(_given(data, "dense_layers", 0), f"{where}.dense_layers", minimum=0, maximum=10**5)
    if dense >= layers:
        raise SpecError(f"{where}.dense_layers: {dense} must be less than layers={layers} (at least one layer "
                        f"must be MoE); allowed: 0 to {layers - 1}")
    frequency = F.integer(_given(data, "layer_frequency", 1), f"{where}.layer_frequency", maximum=10**5)
    if (layers - dense) // frequency < 1:
        raise SpecError(f"{where}.layer_frequency: {frequency} leaves no MoE layer among the {layers - dense} "
                        f"layers after dense_layers={dense}; allowed: 1 to {layers - dense}")
    capacity = F.number(data.get("capacity_factor"), f"{where}.capacity_factor", allow_none=True, maximum=10**6)
    imbalance_value = _given(data, "imbalance", 1.0)
    imbalance = F.number(imbalance_value, f"{where}.imbalance", minimum=-F.MAX_REASONABLE)   # range checked below
    most = experts / top_k   # the busiest expert can at most receive every token: T over the mean T·K/E
    if not 1.0 <= imbalance <= most:
        raise SpecError(f"{where}.imbalance: {F.show(imbalance_value)} must be between 1 (forced balance) and "
                        f"experts/top_k = {most:g} (the busiest expert receives every token)")
    return MoE(experts=experts, top_k=top_k, expert_ffn_hidden=width, shared_experts=shared,
               shared_expert_ffn_hidden=(shared_width or width) if shared else None, dense_layers=dense,
               layer_frequency=frequency, capacity_factor=capacity, imbalance=imbalance)


def _mla_from(data: object, where: str, hidden: int, heads: int) -> MLA:
    """Validate an `mla:` mapping (specs/README.md): every rank a true low-rank factor of its projection."""
    data = F.check_keys(data, where, MLA_REQUIRED, MLA_OPTIONAL)
    nope = F.integer(data["qk_nope_head_dim"], f"{where}.qk_nope_head_dim", maximum=10**5)
    rope = F.integer(data["qk_rope_head_dim"], f"{where}.qk_rope_head_dim", maximum=10**5)
    v = F.integer(data["v_head_dim"], f"{where}.v_head_dim", maximum=10**5)
    if rope % 2:
        raise SpecError(f"{where}.qk_rope_head_dim: {rope} must be even (RoPE rotates pairs of dimensions)")
    kv_rank = F.integer(data["kv_lora_rank"], f"{where}.kv_lora_rank", maximum=10**7)
    q_rank = F.integer(data.get("q_lora_rank"), f"{where}.q_lora_rank", maximum=10**7, allow_none=True)
    factors = (("kv_lora_rank", kv_rank, heads * (nope + v), "heads·(qk_nope_head_dim + v_head_dim)"),
               ("q_lora_rank", q_rank, heads * (nope + rope), "heads·(qk_nope_head_dim + qk_rope_head_dim)"))
    for key, rank, out, out_text in factors:
        if rank is not None and rank >= min(hidden, out):
            raise SpecError(f"{where}.{key}: {rank} must be less than hidden={hidden} and {out_text} = {out} "
                            f"(a low-rank latent of the projection)")
    return MLA(q_lora_rank=q_rank, kv_lora_rank=kv_rank, qk_nope_head_dim=nope, qk_rope_head_dim=rope, v_head_dim=v)


def model_from_mapping(data: dict, where: str, *, default_seq_len: int = 2048) -> Model:
    """Validate one model mapping (schema in specs/README.md)."""
    has_moe = isinstance(data, dict) and data.get("moe") is not None
    # with `moe`, ffn_hidden (the dense layers' MLP width) may be left out when no layer is dense
    required = tuple(k for k in MODEL_REQUIRED if not (has_moe and k == "ffn_hidden"))
    F.check_keys(data, where, required, MODEL_OPTIONAL + ("ffn_hidden",))
    heads = F.integer(data["heads"], f"{where}.heads")
    kv_heads = F.integer(_given(data, "kv_heads", heads), f"{where}.kv_heads")
    hidden = F.integer(data["hidden"], f"{where}.hidden", maximum=10**7)
    layers = F.integer(data["layers"], f"{where}.layers", maximum=10**5)
    mla = None if data.get("mla") is None else _mla_from(data["mla"], f"{where}.mla", hidden, heads)
    if mla is not None:
        if kv_heads != heads:
            raise SpecError(f"{where}.kv_heads: {kv_heads} must equal heads={heads} with mla (MLA's key/value "
                            f"up-projection gives every head its own keys and values)")
        given_head_dim = data.get("head_dim")
        if given_head_dim is not None and given_head_dim != mla.qk_head_dim:
            raise SpecError(f"{where}.head_dim: {F.show(given_head_dim)} must equal qk_nope_head_dim + "
                            f"qk_rope_head_dim = {mla.qk_head_dim} with mla (or be left out)")
        head_dim_default = mla.qk_head_dim
    else:
        if data.get("head_dim") is None and hidden % heads:
            raise SpecError(f"{where}: hidden={hidden} is not divisible by heads={heads} (give head_dim if intended)")
        head_dim_default = hidden // heads
    if heads % kv_heads:
        raise SpecError(f"{where}: heads={heads} is not divisible by kv_heads={kv_heads}")
    moe = _moe_from(data["moe"], f"{where}.moe", layers) if has_moe else None
    if moe is not None and data.get("ffn_hidden") is None:   # (without moe, check_keys requires it)
        dense_count = layers - (layers - moe.dense_layers) // moe.layer_frequency
        if dense_count:
            raise SpecError(f"{where}: missing required key 'ffn_hidden' (the MLP width of the {dense_count} "
                            f"dense layers)")
        ffn_hidden = moe.expert_ffn_hidden
    else:
        ffn_hidden = F.integer(data["ffn_hidden"], f"{where}.ffn_hidden", maximum=10**8)
    return Model(
        name=F.text(data.get("name") or "custom", f"{where}.name"),
        layers=layers,
        hidden=hidden,
        ffn_hidden=ffn_hidden,
        heads=heads,
        kv_heads=kv_heads,
        vocab=F.integer(data["vocab"], f"{where}.vocab", maximum=10**8),
        mlp=F.choice(data.get("mlp", "gelu"), f"{where}.mlp", MLP_KINDS),
        seq_len=F.integer(_given(data, "seq_len", default_seq_len), f"{where}.seq_len", maximum=10**8),
        tied_embeddings=F.boolean(data.get("tied_embeddings", False), f"{where}.tied_embeddings"),
        source=F.text(data.get("source") or "user-defined", f"{where}.source"),
        head_dim=F.integer(_given(data, "head_dim", head_dim_default), f"{where}.head_dim", maximum=10**6),
        # absent: counted (the conservative choice, and Korthikanti et al.'s formulas); the presets say
        dropout=F.boolean(_given(data, "dropout", True), f"{where}.dropout"),
        moe=moe,
        mla=mla,
    )


def model_mapping(model: Model) -> dict:
    """The model as a mapping of the model schema that `model_from_mapping` turns back into an equal Model
    (for with_shape, and for echoing a resolved model as input)."""
    data: dict = {f: getattr(model, f) for f in ("name", "layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab",
                                                 "mlp", "seq_len", "tied_embeddings", "source", "head_dim", "dropout")}
    if model.moe is not None:
        e = model.moe
        data["moe"] = {"experts": e.experts, "top_k": e.top_k, "expert_ffn_hidden": e.expert_ffn_hidden,
                       "shared_experts": e.shared_experts, "dense_layers": e.dense_layers,
                       "layer_frequency": e.layer_frequency, "capacity_factor": e.capacity_factor,
                       "imbalance": e.imbalance}
        if e.shared_experts:
            data["moe"]["shared_expert_ffn_hidden"] = e.shared_width
    if model.mla is not None:
        a = model.mla
        data["mla"] = {"q_lora_rank": a.q_lora_rank, "kv_lora_rank": a.kv_lora_rank,
                       "qk_nope_head_dim": a.qk_nope_head_dim, "qk_rope_head_dim": a.qk_rope_head_dim,
                       "v_head_dim": a.v_head_dim}
    return data


# ------------------------------------------------------------------------------------------ lookups

def _looks_like_path(value: str) -> bool:
    if value.endswith((".yaml", ".yml")) or "/" in value:
        return True
    try:
        return Path(value).is_file()
    except OSError:   # a name too long for the file system is not a file
        return False


# ------------------------------------------------------------------ bundled catalog: JSON read cache
# The YAML files in specs/ are the source of truth. specs/_catalog.json holds, for each bundled
# hardware and model file, its exact text and the mapping yaml.safe_load made of it, so that an
# estimate with bundled specs never imports or runs the YAML parser (start-up time). An entry is used
# only when the file's current text equals the recorded text: an edited or new file is read as YAML,
# so a stale cache can cost time but never change a result. Rebuild it with
# `python tools/build_catalog_cache.py`; tests/test_startup.py fails while it is out of date.

CATALOG_CACHE_NAME = "_catalog.json"
CATALOG_CACHE_FORMAT = 2       # 2: entries keep the text's length and CRC-32, not the text
CATALOG_KINDS = ("hardware", "models")


@functools.cache
def _catalog_cache() -> dict[str, dict]:
    """"kind/file.yaml" -> {"chars": ..., "crc32": ..., "data": ...}; empty when the cache is missing or
    unreadable."""
    import json
    try:
        doc = json.loads((specs_dir() / CATALOG_CACHE_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("format") != CATALOG_CACHE_FORMAT or not isinstance(doc.get("files"), dict):
        return {}
    return doc["files"]


def _crc32(text: str) -> int:
    """CRC-32 of a spec file's text: the cache entry is used only for exactly the text it was made from."""
    import zlib
    return zlib.crc32(text.encode("utf-8"))


def _read_spec(path: Path, what: str) -> dict:
    """The mapping in a spec file: from the JSON cache when `path` is a bundled file whose text is
    exactly the text the cache entry was made from, else via `fields.load_yaml_mapping`."""
    if path.parent.parent == specs_dir():
        entry = _catalog_cache().get(f"{path.parent.name}/{path.name}")
        if isinstance(entry, dict) and isinstance(entry.get("data"), dict):
            try:
                current = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                current = None
            if current is not None and [len(current), _crc32(current)] == [entry.get("chars"), entry.get("crc32")]:
                import copy
                return copy.deepcopy(entry["data"])
    return F.load_yaml_mapping(path, what)


def build_catalog_cache() -> dict:
    """The cache document for the current specs/ files (what `tools/build_catalog_cache.py` writes).
    A file that does not load, or whose mapping does not survive a JSON round trip unchanged (dates,
    non-string keys), is left out and so is always read as YAML."""
    import json
    files: dict[str, dict] = {}
    for kind in CATALOG_KINDS:
        for path in sorted((specs_dir() / kind).glob("*.yaml")):
            try:
                text = path.read_text(encoding="utf-8")
                data = F.load_yaml_mapping(path, kind)
                encoded = json.dumps(data, allow_nan=False)   # keeps key order
            except (SpecError, OSError, UnicodeDecodeError, TypeError, ValueError):
                continue
            if json.loads(encoded) == data:
                files[f"{kind}/{path.name}"] = {"chars": len(text), "crc32": _crc32(text), "data": data}
    return {"format": CATALOG_CACHE_FORMAT, "files": files}


def catalog_cache_text(doc: dict) -> str:
    """The cache document as file text: deterministic, one line per spec file."""
    import json
    lines = [json.dumps(name) + ": " + json.dumps(entry, ensure_ascii=False)
             for name, entry in sorted(doc["files"].items())]
    return ('{"format": ' + json.dumps(doc["format"]) + ', "files": {\n' + ",\n".join(lines) + "\n}}\n")


@functools.cache
def _catalog_files(kind: str) -> dict[str, Path]:
    """name (and alias) -> file for one catalog folder (`hardware` or `models`)."""
    folder = specs_dir() / kind
    try:
        names = sorted(os.listdir(folder))   # (cheaper than Path.glob + sorting Paths: start-up time)
    except OSError:
        return {}
    return {name[:-len(".yaml")]: folder / name for name in names if name.endswith(".yaml")}


@functools.cache
def _model_aliases() -> dict[str, Path]:
    """alias -> file, read from the presets' `aliases` lists (only when a name is not a file stem)."""
    aliases: dict[str, Path] = {}
    for path in _catalog_files("models").values():
        for alias in _read_spec(path, "model").get("aliases") or []:
            aliases.setdefault(str(alias).lower(), path)
    return aliases


def hardware_names() -> list[str]:
    return sorted(_catalog_files("hardware"))


def model_names() -> list[str]:
    return sorted(n for n in _catalog_files("models") if not n.startswith("_"))


@functools.cache
def _load_hardware_path(path: str) -> Hardware:
    return hardware_from_mapping(_read_spec(Path(path), "hardware"), path)


def load_hardware(value: str) -> Hardware:
    """A catalog name (`h100-sxm`) or a path to a hardware YAML file."""
    value = str(value).strip()
    files = _catalog_files("hardware")
    key = value.lower()
    if key in files:
        return _load_hardware_path(str(files[key]))
    if _looks_like_path(value):
        return _load_hardware_path(value)
    if "," in value and all(part.strip().lower() in files for part in value.split(",")):
        raise SpecError(f"hardware {F.show(value)} names several entries; an estimate or a plan takes one: compare "
                        f"them with `trainest compare --hardware {value}`")
    raise SpecError(f"unknown hardware {F.show(value)}{did_you_mean(key, files)}; run `trainest list hardware` "
                    f"for the catalog, or give a path to a hardware YAML file")


@functools.cache
def _load_model_path(path: str) -> Model:
    return model_from_mapping(_read_spec(Path(path), "model"), path)


def model_from_hf_config(data: dict, where: str) -> Model:
    """The Model of a parsed Hugging Face config.json (trainest/hf_config.py reads it into a mapping)."""
    from trainest import hf_config  # only here: a YAML or preset model never pays for it (start-up time)
    return model_from_mapping(hf_config.hf_model_mapping(data, where), where)


@functools.cache
def _load_hf_config_path(path: str) -> Model:
    from trainest import hf_config  # only here: a YAML or preset model never pays for it (start-up time)
    return model_from_mapping(hf_config.read_hf_config(Path(path)), path)


# Models people ask for that trainest cannot express, and why (said instead of "unknown model").
NOT_EXPRESSIBLE_MODELS = {
    **dict.fromkeys(("nemotron-3-nano", "nemotron-3-super", "nemotron-3-ultra", "nemotron-3.5-lightning"),
                    "its layers are a hybrid of Mamba-2 state-space, attention and MoE layers; trainest models "
                    "transformer layers (attention + MLP) only"),
    "deepseek-v4-flash": "its attention (compressed sparse attention with an indexer, one shared KV head, grouped "
                         "output low-rank projections) and hyper-connections are neither standard attention nor MLA",
}


def _hf_config_file(value: str) -> Path | None:
    """The config.json `value` names (a `.json` path, or a folder holding config.json), else None."""
    if value.lower().endswith(".json"):
        return Path(value)
    try:
        is_dir = Path(value).is_dir()
    except OSError:   # a name too long for the file system is not a folder
        return None
    if not is_dir:
        return None
    if not (Path(value) / "config.json").is_file():
        raise SpecError(f"model file {F.show(value, F.MAX_SHOWN_PATH_CHARS)} is a directory holding no config.json; "
                        f"give a model YAML file, or a Hugging Face config.json or its folder")
    return Path(value) / "config.json"


def load_model(value: str) -> Model:
    """A preset name (`llama3-8b`), a path to a model YAML file, or a Hugging Face `config.json` (or
    the folder holding it; read offline by trainest/hf_config.py)."""
    value = str(value).strip()
    files = _catalog_files("models")
    key = value.lower()
    if key in files:
        return _load_model_path(str(files[key]))
    hf = _hf_config_file(value)
    if hf is not None:
        return _load_hf_config_path(str(hf))
    if _looks_like_path(value):
        return _load_model_path(value)
    if key in _model_aliases():
        return _load_model_path(str(_model_aliases()[key]))
    if key in NOT_EXPRESSIBLE_MODELS:
        raise SpecError(f"model {F.show(value)} is not expressible in trainest: {NOT_EXPRESSIBLE_MODELS[key]}")
    hint = did_you_mean(key, set(files) | set(_model_aliases()))
    raise SpecError(f"unknown model {F.show(value)}{hint}; run "
                    f"`trainest list models` for the presets, or give a path to a model YAML file or a Hugging Face "
                    f"config.json")


# with_shape's names for the `moe:` keys it overrides (the CLI's --experts, --top-k, --expert-ffn-hidden,
# --moe-imbalance)
MOE_OVERRIDES = {"experts": "experts", "top_k": "top_k", "expert_ffn_hidden": "expert_ffn_hidden",
                 "moe_imbalance": "imbalance"}


def with_shape(model: Model, **overrides: object) -> Model:
    """A copy of `model` with shape fields replaced (None means keep), re-validated.

    Dense keys: layers, hidden, ffn_hidden, heads, kv_heads, vocab, mlp (and any other Model field).
    MoE keys (MOE_OVERRIDES): experts, top_k, expert_ffn_hidden, moe_imbalance. Shared experts as wide as
    the routed ones stay as wide when expert_ffn_hidden changes (as MHA's kv_heads follow heads). On a
    dense model, experts (with top_k; expert_ffn_hidden defaults to ffn_hidden) makes every MLP a
    mixture of experts."""
    changed = {k: v for k, v in overrides.items() if v is not None}
    if not changed:
        return model
    data = model_mapping(model)
    resized = ("hidden" in changed or "heads" in changed) and model.head_dim == model.hidden // model.heads
    if model.mla is not None or resized:   # derived again (MLA: always qk_nope_head_dim + qk_rope_head_dim)
        data["head_dim"] = None
    if "heads" in changed and "kv_heads" not in changed and model.kv_heads == model.heads:
        changed["kv_heads"] = changed["heads"]
    name = f"{model.name} (modified: {', '.join(sorted(changed))})"
    moe_changed = {MOE_OVERRIDES[k]: changed.pop(k) for k in list(changed) if k in MOE_OVERRIDES}
    if moe_changed:
        if model.moe is None:
            if "experts" not in moe_changed or "top_k" not in moe_changed:
                raise SpecError(f"model options: {', '.join(sorted(moe_changed))} need a mixture-of-experts model, "
                                f"and {model.name} is dense; give both experts and top_k to make its MLPs mixtures "
                                f"of experts")
            data["moe"] = {"expert_ffn_hidden": model.ffn_hidden}
        elif ("expert_ffn_hidden" in moe_changed and model.moe.shared_experts
              and model.moe.shared_width == model.moe.expert_ffn_hidden):
            data["moe"]["shared_expert_ffn_hidden"] = moe_changed["expert_ffn_hidden"]
        data["moe"].update(moe_changed)
    data.update(changed)
    data["name"] = name
    return model_from_mapping(data, "model options")


def with_efficiency(hardware: Hardware, **values: Any) -> Hardware:
    """A copy of `hardware` with some efficiency fields replaced (floats, or arrays of trial values
    in calibration)."""
    return replace(hardware, efficiency=replace(hardware.efficiency, **values))
