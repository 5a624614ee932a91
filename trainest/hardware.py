"""Hardware entries of the catalog (`specs/hardware/*.yaml`): the device's facts (peaks, memory, the
scale-up and scale-out networks, the intra-node path, the host, its compute units) and its achievable
efficiencies, validated and converted to SI once (`hardware_from_mapping`). Loading by name or path is
`trainest.catalog.load_hardware`."""

from __future__ import annotations

from typing import Any

from trainest import fields as F
from trainest.choices import HARDWARE_KINDS, PRECISIONS
from trainest.errors import SpecError
from trainest.prices import DEFAULT_AMORTISATION_YEARS, Purchase, amortised_usd_per_hour, staleness
from trainest.record import NamedTuple, replace
from trainest.units import BITS_PER_BYTE, GB, MICROSECOND, MILLISECOND, TERA, MiB

# ----------------------------------------------------------------------------------------- hardware

class Efficiency(NamedTuple):
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
    host_per_micro_batch_s: float = 0.0  # host time per micro-batch outside the kernels, where the framework syncs [s]
    kernel_floor_s: float = 0.0      # the shortest a kernel takes on the device (launch, ramp, drain) [s]
    grouped_gemm: float = 1.0        # MoE expert (grouped) GEMMs relative to `gemm` at the same shape
    all_to_all: float = 0.8          # fraction of the link rate (scale-up and scale-out) the MoE all-to-alls reach
    moe_fitted: bool = False         # grouped_gemm/all_to_all come from MoE runs (this device's or a sibling's)
    derived: tuple[str, ...] = ()    # keys a file left out, set to the prior of a device without runs (priors.py)

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
                       "method", "fit_runs", "fit_mape_pct", "host_us_per_kernel", "host_ms_per_micro_batch",
                       "kernel_floor_us", "grouped_gemm", "all_to_all", "moe_fit_runs", "moe_fit_mape_pct",
                       "moe_fitted")
EFFICIENCY_ALL_KEYS = EFFICIENCY_KEYS + EFFICIENCY_OPTIONAL
DEFAULT_GROUPED_GEMM = 1.0          # expert GEMMs at the dense GEMM's efficiency for their shape unless fitted
# MoE dispatch/combine: all-to-all kernels reach ~0.8-0.95 of the link rate at large messages (DeepEP README:
# about 153 of NVLink's ~160 GB/s within an H800 node and about 45 of a 50 GB/s RDMA NIC across nodes; NCCL
# all-to-all ~0.7-0.8 on NVSwitch systems)
DEFAULT_ALL_TO_ALL = 0.8
DEFAULT_LOW_PRECISION_GEMM = 0.85   # FP8 GEMMs reach a lower fraction of their (2x) peak than BF16
DEFAULT_FLASH2_ATTENTION = 1.0     # FlashAttention-2 relative to `attention`: the same unless fitted
# a fixed time per layer pass [µs]; 0: the kernels' host dispatch and floors (docs/model.md §2.9) are
# counted instead (before them, a fitted 30 µs stood in for both)
DEFAULT_LAYER_OVERHEAD_US = 0.0
# Host time per kernel launched from Python (PyTorch eager dispatch: op dispatch, autograd bookkeeping,
# the CUDA launch call): ~10-20 µs per operator for eager PyTorch (PyTorch's own profiler overhead
# notes; the CUDA Graphs post, NVIDIA 2019, measures ~µs-scale launch cost) and more under framework
# hooks. The prior of a hardware entry without a fitted value; fitted on measured small-kernel runs
# (docs/model.md §2.9, docs/validation.md).
DEFAULT_HOST_US_PER_KERNEL = 20.0
# Host time per micro-batch outside the kernels: the training loop's Python for one micro-batch (the data
# iterator's next batch, its broadcast to the tensor-parallel ranks, the masks and position ids, the loss
# bookkeeping, the schedule's calls), of the order of a millisecond in a Megatron loop. It costs the step
# only where the framework synchronises host and device at every micro-batch (`Framework.micro_batch_sync`:
# the device then cannot run ahead of it); elsewhere it hides behind the device's queue. The prior of a
# hardware entry; fitted on measured small-kernel runs of such a framework (docs/model.md §2.9).
DEFAULT_HOST_MS_PER_MICRO_BATCH = 1.0
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
    derived: str = ""                         # "": read from the file; else which figures are a typical server's
    filled: tuple[str, ...] = ()              # the fields with_typical_host filled (a new generation refills them)

    @property
    def known(self) -> bool:
        """Cores, memory and its bandwidth are all given (offload can be estimated)."""
        return None not in (self.cpu_cores, self.memory_bytes, self.memory_bytes_per_s, self.devices)

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


class TypicalHost(NamedTuple):
    """A typical dual-socket server of one PCIe generation: the default host of a device whose file gives none."""

    system: str
    cpu: str
    cpu_cores: int
    memory_gb: float
    memory_gb_per_s: float      # channels × MT/s × 8 B, the CPUs' rated peak
    devices: int                # accelerator cards such a server holds


# by PCIe generation: the dual-socket host NVIDIA built its 8-GPU systems of that generation on (the host facts
# tools/hardware_facts.yaml cites: DGX-1, DGX A100, DGX H100 datasheets and the CPUs' spec pages)
TYPICAL_HOSTS = {
    3: TypicalHost("typical dual-socket PCIe Gen3 server (as DGX-1)", "2x Intel Xeon E5-2698 v4 (20 cores, 4 "
                   "channels of DDR4-2133 each)", 40, 512, 8 * 2133 * 8 / 1000, 8),
    4: TypicalHost("typical dual-socket PCIe Gen4 server (as DGX A100)", "2x AMD EPYC 7742 (64 cores, 8 channels "
                   "of DDR4-3200 each)", 128, 1000, 16 * 3200 * 8 / 1000, 8),
    5: TypicalHost("typical dual-socket PCIe Gen5 server (as DGX H100)", "2x Intel Xeon Platinum 8480+ (56 cores, "
                   "8 channels of DDR5-4800 each)", 112, 2000, 16 * 4800 * 8 / 1000, 8),
}


def with_typical_host(host: Host, pcie_gen: int | None) -> Host:
    """`host` with the figures it lacks (cores, memory, memory bandwidth, devices) taken from the typical server
    of PCIe generation `pcie_gen` (the nearest in TYPICAL_HOSTS), and `derived` saying so; unchanged when it
    gives them all or no generation is known."""
    if host.known or pcie_gen is None:
        return host
    typical = TYPICAL_HOSTS[min(TYPICAL_HOSTS, key=lambda g: (abs(g - pcie_gen), -g))]
    filled = [name for name, value in (("cpu_cores", host.cpu_cores), ("memory_gb", host.memory_bytes),
                                       ("memory_gb_per_s", host.memory_bytes_per_s), ("devices", host.devices))
              if value is None]
    own_system = bool(host.system) and "dependent" not in host.system
    return host._replace(
        filled=(*filled, *(() if own_system else ("system",)), *(() if host.cpu else ("cpu",))),
        system=host.system if own_system else typical.system,
        cpu=host.cpu or typical.cpu,
        cpu_cores=host.cpu_cores if host.cpu_cores is not None else typical.cpu_cores,
        memory_bytes=host.memory_bytes if host.memory_bytes is not None else typical.memory_gb * GB,
        memory_bytes_per_s=(host.memory_bytes_per_s if host.memory_bytes_per_s is not None
                            else typical.memory_gb_per_s * GB),
        devices=host.devices if host.devices is not None else typical.devices,
        derived=f"host.{', host.'.join(filled)} derived: a {typical.system}, {typical.cpu}, "
                f"{typical.memory_gb:g} GB at {typical.memory_gb_per_s:g} GB/s for {typical.devices} cards")


class Compute(NamedTuple):
    """Kernel-level facts (for a kernel-cost model): parallel units, GEMM tile, on-chip cache."""

    units: int | None = None                  # SMs, CUs, TensorCores, MMEs, NeuronCores, GPU cores, ...
    unit_name: str = ""
    gemm_tile_m: int | None = None            # typical GEMM output tile per unit [elements]
    gemm_tile_n: int | None = None
    on_chip_cache_bytes: float | None = None  # L2 / last-level cache / SRAM [B]
    on_chip_cache_kind: str = ""
    flash2_relative: float = DEFAULT_FLASH2_ATTENTION   # FlashAttention-2 against the best fused attention kernel
    # the best dense 16-bit GEMM rate measured on the device over a sweep of shapes (a micro-benchmark's maximum
    # achievable matmul FLOP/s, MAMF) [FLOP/s]; None: none read. It bounds the fitted GEMM efficiency (§10).
    measured_matmul_flops_per_s: float | None = None
    # the softmax exponentials the special-function units compute per second [1/s]; None: not known (no ceiling).
    # Fused attention's forward computes one per score and 4·d̄ FLOPs around it (docs/model.md §2.4).
    exp_per_s: float | None = None


class Hardware(NamedTuple):
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
    usable_memory_bytes: float | None = None   # what a program sees (nvidia-smi/mem_get_info total) [B]; None: capacity
    usable_memory_source: str = ""             # where usable_memory_bytes comes from (a citation or the rule)
    intra_node: IntraNodeLink = IntraNodeLink()
    scale_out_kind: str | None = None          # SCALE_OUT_KINDS; None = not given
    scale_out_name: str = ""
    host: Host = Host()
    compute: Compute = Compute()
    vendor: str = ""
    launch_year: int | None = None
    price_source: str = ""                     # where and when the price was read (its date, if any, in the text)
    purchase: Purchase | None = None           # a device sold, not rented: price_usd_per_hour is its amortisation
    price_unknown: str = ""                    # why there is no price ("" where there is one)
    scale_up_name: str = ""                    # the scale-up fabric (NVLink via NVSwitch, ICI, xGMI, ...)
    probed: bool = False                       # measured on a machine by `trainest probe` (extra.probed)
    probed_on: str = ""                        # when (extra.probe.date), "" when not probed or not said
    collective_call_s: float | None = None     # fixed cost of one collective call [s]; None: by kind (§3.3a)

    def peak(self, precision: str) -> float:
        """Dense peak FLOP/s for `precision`, or a SpecError listing what the device has."""
        if precision not in self.peak_flops_per_s:
            have = ", ".join(p for p in PRECISIONS if p in self.peak_flops_per_s)
            raise SpecError(f"hardware {self.name!r} has no {precision} peak; it supports: {have}")
        return self.peak_flops_per_s[precision]

    @property
    def price_date(self) -> str | None:
        """The first ISO date in the price's source (YYYY-MM-DD, or YYYY-MM of a purchase): when it was read;
        None if none given."""
        import re
        text = self.purchase.source if self.purchase is not None else self.price_source
        match = re.search(r"\b(19|20)\d\d-\d\d(-\d\d)?\b", text)
        return match.group(0) if match else None

    @property
    def price_basis(self) -> str:
        """How `price_usd_per_hour` was obtained: 'on-demand', 'amortised purchase' or '' (no price)."""
        if self.price_usd_per_hour is None:
            return ""
        return "amortised purchase" if self.purchase is not None else "on-demand"

    @property
    def price_text(self) -> str:
        """Where the price comes from, in one phrase (for notes and the scenario table)."""
        if self.purchase is not None:
            return (f"${self.purchase.usd:,.0f} purchase ({self.purchase.source}) over "
                    f"{self.purchase.amortisation_years:g} years of continuous use")
        return self.price_source or self.price_unknown

    @property
    def price_stale(self) -> str:
        """'' for a price read within a year, else why it is flagged (trainest.prices.staleness); '' without one."""
        if self.price_usd_per_hour is None:
            return ""
        return staleness(self.purchase.source if self.purchase is not None else self.price_source)

    @property
    def peak_16bit_flops_per_s(self) -> float:
        """The 16-bit matrix peak used for attention and for MFU of mixed precision."""
        for p in ("bf16", "fp16", "tf32", "fp32"):
            if p in self.peak_flops_per_s:
                return self.peak_flops_per_s[p]
        raise SpecError(f"hardware {self.name!r} has no 16- or 32-bit peak")

    @property
    def matmul_ceiling(self) -> float | None:
        """The measured best dense 16-bit GEMM rate over the 16-bit peak, at most 1: the largest GEMM
        efficiency a fit may take (docs/model.md §10); None where no measurement was read."""
        measured = self.compute.measured_matmul_flops_per_s
        if measured is None:
            return None
        return min(1.0, measured / self.peak_16bit_flops_per_s)

    @property
    def device_memory_bytes(self) -> float:
        """The device's memory as a program sees it [B]: `usable_memory_bytes` (nvidia-smi's or ROCm's total,
        `torch.cuda.mem_get_info`'s second value; H100 80GB: 81,559 MiB), else the vendor's capacity
        (`memory_bytes`: "80 GB" as 80e9 B) where the file gives none (docs/model.md §7.6)."""
        return self.memory_bytes if self.usable_memory_bytes is None else self.usable_memory_bytes

    @property
    def training_memory_bytes(self) -> float:
        """Device memory left to training [B]: what a program sees (`device_memory_bytes`) less the OS/runtime
        reserve of unified memory (a discrete device: all of it)."""
        return self.device_memory_bytes - (self.memory_os_reserve_bytes or 0.0)

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


HW_REQUIRED = ("name", "peak_tflops", "memory", "system", "source")
HW_OPTIONAL = ("efficiency", "display_name", "vendor", "kind", "launch_year", "power_w", "price_usd_per_hour",
               "price_source", "purchase", "price_unknown", "notes", "derived_fields", "execution_model",
               "unsupported_reason", "compute", "host", "on_chip_cache_mb", "extra")  # on_chip_cache_mb: accepted,
# not read; extra: free-form, of which only extra.probed and extra.probe.date are read
MEMORY_REQUIRED = ("capacity_gb", "bandwidth_gb_per_s")
# A usable size above the capacity by more than this is a typo: a vendor's "GB" read as GiB is 7.4 % more.
USABLE_OVER_CAPACITY_MAX = 1.1
# "type" is free text, accepted, not read
MEMORY_OPTIONAL = ("type", "kind", "unified", "os_reserve_gb", "usable_mib", "usable_source")
SYSTEM_KEYS = ("devices_per_node", "scale_up_name", "scale_up_gb_per_s", "scale_up_domain", "scale_up_latency_us",
               "scale_out_gbit_per_s", "scale_out_latency_us", "scale_out_kind", "scale_out_name", "intra_node",
               "collective_call_us")
SYSTEM_NEEDS = ("devices_per_node", "intra_node where a node's devices have no scale-up fabric (kind pcie with "
                "pcie_gen and pcie_lanes, or gb_per_s)")
INTRA_NODE_KEYS = ("kind", "name", "gb_per_s", "latency_us", "peer_to_peer", "pcie_gen", "pcie_lanes")
HOST_KEYS = ("system", "cpu", "devices", "cpu_cores", "memory_kind", "memory_gb", "memory_gb_per_s", "link")
HOST_LINK_KEYS = ("kind", "name", "gb_per_s", "shared_by", "pcie_gen", "pcie_lanes")
PURCHASE_KEYS = ("usd", "source", "amortisation_years")
COMPUTE_KEYS = ("units", "unit_name", "gemm_tile", "on_chip_cache_mib", "on_chip_cache_kind", "flash2_relative",
                "measured_matmul_tflops", "exp_tera_per_s")
MAX_GEMM_TILE = 4096      # elements per tile side (the largest in use: 320 on Groq, 256 on TPU MXUs and Gaudi MMEs)


def default_overlap_contention(kind: str) -> float:
    """The overlap contention of a hardware kind when its file gives none (DEFAULT_OVERLAP_CONTENTION)."""
    return DEFAULT_OVERLAP_CONTENTION.get(kind, 0.0)


def _efficiency_from(data: dict[str, Any], where: str, kind: str,
                     flash2_prior: float = DEFAULT_FLASH2_ATTENTION) -> Efficiency:
    return Efficiency(     # (keys checked by _efficiency_of)
        gemm=F.fraction(data["gemm"], f"{where}.gemm"),
        gemm_half_dim=F.number(data["gemm_half_dim"], f"{where}.gemm_half_dim", allow_zero=True),
        attention=F.fraction(data["attention"], f"{where}.attention"),
        memory=F.fraction(data["memory"], f"{where}.memory"),
        scale_up=F.fraction(data["scale_up"], f"{where}.scale_up"),
        scale_out=F.fraction(data["scale_out"], f"{where}.scale_out"),
        low_precision_gemm=F.fraction(data.get("low_precision_gemm", DEFAULT_LOW_PRECISION_GEMM),
                                      f"{where}.low_precision_gemm"),
        flash2_attention=F.fraction(F.given(data, "flash2_attention", flash2_prior),
                                    f"{where}.flash2_attention"),
        layer_overhead_s=F.number(data.get("layer_overhead_us", DEFAULT_LAYER_OVERHEAD_US),
                                  f"{where}.layer_overhead_us", allow_zero=True) * MICROSECOND,
        overlap_contention=F.number(F.given(data, "overlap_contention", default_overlap_contention(kind)),
                                    f"{where}.overlap_contention", allow_zero=True, maximum=1.0),
        fitted=F.boolean(data.get("fitted", False), f"{where}.fitted"),
        method=F.text(data.get("method", ""), f"{where}.method") or "",
        host_per_kernel_s=F.number(F.given(data, "host_us_per_kernel", DEFAULT_HOST_US_PER_KERNEL),
                                   f"{where}.host_us_per_kernel", allow_zero=True, maximum=10_000.0) * MICROSECOND,
        host_per_micro_batch_s=F.number(F.given(data, "host_ms_per_micro_batch", DEFAULT_HOST_MS_PER_MICRO_BATCH),
                                        f"{where}.host_ms_per_micro_batch", allow_zero=True,
                                        maximum=10_000.0) * MILLISECOND,
        kernel_floor_s=F.number(F.given(data, "kernel_floor_us", DEFAULT_KERNEL_FLOOR_US.get(kind, 0.0)),
                                f"{where}.kernel_floor_us", allow_zero=True, maximum=10_000.0) * MICROSECOND,
        grouped_gemm=F.fraction(F.given(data, "grouped_gemm", DEFAULT_GROUPED_GEMM), f"{where}.grouped_gemm"),
        all_to_all=F.fraction(F.given(data, "all_to_all", DEFAULT_ALL_TO_ALL), f"{where}.all_to_all"),
        # given MoE efficiencies are fitted ones unless the file says they are a derived prior (moe_fitted: false)
        moe_fitted=F.boolean(F.given(data, "moe_fitted", data.get("grouped_gemm") is not None), f"{where}.moe_fitted"),
    )


def _efficiency_of(data: dict[str, Any], where: str, kind: str, flash2_prior: float) -> Efficiency:
    """The efficiency block; a required fraction it leaves out (or all) is a no-run prior (priors.with_no_run_prior)."""
    block = {} if (given := data.get("efficiency")) is None else F.check_keys(given, where, (), EFFICIENCY_ALL_KEYS)
    if all(block.get(k) is not None for k in EFFICIENCY_KEYS):
        return _efficiency_from(block, where, kind, flash2_prior)
    from trainest.priors import with_no_run_prior
    filled, derived = with_no_run_prior(block, where, kind, data)
    return replace(_efficiency_from(filled, where, kind, flash2_prior), derived=derived)


def _pcie_fields(data: dict[str, Any], where: str, is_pcie: bool) -> tuple[int | None, int | None]:
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


def _link_gb_per_s(data: dict[str, Any], where: str, gen: int | None, lanes: int | None) -> float | None:
    """`gb_per_s` of a link mapping in B/s (None when null); a PCIe link may not exceed its nominal rate."""
    gb = F.number(data.get("gb_per_s"), f"{where}.gb_per_s", allow_none=True)
    if gb is None:
        return None
    if gen is not None and lanes is not None and gb * GB > pcie_bytes_per_s(gen, lanes) * (1 + 1e-9):
        raise SpecError(f"{where}.gb_per_s: {F.show(data.get('gb_per_s'))} is more than PCIe Gen{gen} x{lanes} carries "
                        f"per direction ({pcie_bytes_per_s(gen, lanes) / GB:g} GB/s)")
    return gb * GB


def _no_values(data: dict[str, Any], where: str, keys: tuple[str, ...], why: str) -> None:
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
    shared_by = F.integer(F.given(d, "shared_by", 1), f"{where}.shared_by", maximum=10**6)
    if kind == "unified" and not unified:
        raise SpecError(f"{where}.kind: 'unified' (CPU and device share one memory) needs memory.unified: true")
    if kind in ("unified", "none"):
        _no_values(d, where, ("gb_per_s", "pcie_gen", "pcie_lanes"), f"kind {kind!r} has no link to measure")
        return HostLink(kind=kind, name=name, shared_by=shared_by)
    gen, lanes = _pcie_fields(d, where, kind == "pcie")
    return HostLink(kind=kind, name=name, bytes_per_s=_link_gb_per_s(d, where, gen, lanes), shared_by=shared_by,
                    pcie_gen=gen, pcie_lanes=lanes)


def _prices_from(data: dict[str, Any], where: str) -> tuple[float | None, Purchase | None, str]:
    """(USD per device-hour, the purchase it amortises or None, why there is none): an on-demand price, or a
    purchase spread over its amortisation period (trainest.prices), not both."""
    hourly = F.number(data.get("price_usd_per_hour"), f"{where}.price_usd_per_hour", allow_none=True)
    raw = data.get("purchase")
    purchase = None
    if raw is not None:
        d = F.check_keys(raw, f"{where}.purchase", ("usd", "source"), PURCHASE_KEYS)
        if hourly is not None:
            raise SpecError(f"{where}.purchase: give an on-demand price_usd_per_hour or a purchase, not both")
        purchase = Purchase(usd=F.number(d["usd"], f"{where}.purchase.usd"),
                            source=F.text(d["source"], f"{where}.purchase.source"),
                            amortisation_years=F.number(F.given(d, "amortisation_years", DEFAULT_AMORTISATION_YEARS),
                                                        f"{where}.purchase.amortisation_years", maximum=100.0))
        hourly = amortised_usd_per_hour(purchase.usd, purchase.amortisation_years)
    unknown = F.text(data.get("price_unknown") or "", f"{where}.price_unknown") or ""
    if hourly is None and not unknown:
        unknown = "none given in the hardware file"
    return hourly, purchase, "" if hourly is not None else unknown


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
        flash2_relative=F.fraction(F.given(d, "flash2_relative", DEFAULT_FLASH2_ATTENTION), f"{where}.flash2_relative"),
        measured_matmul_flops_per_s=_tera(F.number(d.get("measured_matmul_tflops"), f"{where}.measured_matmul_tflops",
                                                   allow_none=True)),
        exp_per_s=_tera(F.number(d.get("exp_tera_per_s"), f"{where}.exp_tera_per_s", allow_none=True)),
    )


def _tera(tflops: float | None) -> float | None:
    return None if tflops is None else tflops * TERA


def _memory_facts(mem: dict[str, Any], where: str, capacity_gb: float) -> tuple[str | None, bool, float | None]:
    """(memory kind, unified, OS/runtime reserve [B]) from the `memory` mapping."""
    unified = F.boolean(F.given(mem, "unified", False), f"{where}.unified")
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


def _usable_memory(mem: dict[str, Any], where: str, capacity_gb: float,
                   os_reserve_bytes: float | None) -> tuple[float | None, str]:
    """(usable bytes or None, its source) from `usable_mib` / `usable_source`: a positive size in MiB no more
    than 10 % above the capacity (a "GB" figure read as GiB is 7.4 % more) and above a unified reserve."""
    mib = F.number(mem.get("usable_mib"), f"{where}.usable_mib", allow_none=True)
    source = F.text(mem.get("usable_source"), f"{where}.usable_source", allow_none=True) or ""
    if mib is None:
        if source:
            raise SpecError(f"{where}.usable_source: given without usable_mib")
        return None, ""
    usable = mib * MiB
    if usable > USABLE_OVER_CAPACITY_MAX * capacity_gb * GB:
        raise SpecError(f"{where}.usable_mib: {F.show(mem.get('usable_mib'))} MiB is more than the capacity "
                        f"({capacity_gb:g} GB) read as GiB; allowed: at most "
                        f"{USABLE_OVER_CAPACITY_MAX * capacity_gb * GB / MiB:,.0f}")
    if os_reserve_bytes is not None and usable <= os_reserve_bytes:
        raise SpecError(f"{where}.usable_mib: {F.show(mem.get('usable_mib'))} MiB must be more than os_reserve_gb")
    return usable, source


def _execution_from(data: dict[str, Any], where: str) -> tuple[str, str | None]:
    """(execution model, unsupported reason); the reason is None exactly when trainest models it."""
    model = F.choice(F.given(data, "execution_model", "gpu-like"), f"{where}.execution_model", EXECUTION_MODELS)
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
    probed = F.boolean(F.given(extra, "probed", False), f"{where}.extra.probed")
    probe = extra.get("probe")
    date = probe.get("date") if isinstance(probe, dict) else None
    return probed, str(date) if probed and date is not None else ""


def hardware_from_mapping(data: dict[str, Any], where: str) -> Hardware:
    """Validate one hardware mapping (schema in specs/README.md) and convert it to SI."""
    F.check_keys(data, where, HW_REQUIRED, HW_OPTIONAL, nested={"memory": MEMORY_REQUIRED, "system": SYSTEM_NEEDS})
    peaks_raw = F.check_keys(data["peak_tflops"], f"{where}.peak_tflops", (), PRECISIONS)
    peaks = {p: F.number(v, f"{where}.peak_tflops.{p}") * TERA for p, v in peaks_raw.items() if v is not None}
    if not peaks:
        raise SpecError(f"{where}.peak_tflops: at least one precision needs a peak")
    mem = F.check_keys(data["memory"], f"{where}.memory", MEMORY_REQUIRED, MEMORY_OPTIONAL)
    capacity_gb = F.number(mem["capacity_gb"], f"{where}.memory.capacity_gb")
    memory_kind, unified, os_reserve_bytes = _memory_facts(mem, f"{where}.memory", capacity_gb)
    usable_bytes, usable_source = _usable_memory(mem, f"{where}.memory", capacity_gb, os_reserve_bytes)
    sys_ = F.check_keys(data["system"], f"{where}.system", ("devices_per_node",), SYSTEM_KEYS)
    up = F.number(sys_.get("scale_up_gb_per_s"), f"{where}.system.scale_up_gb_per_s", allow_none=True)
    out = F.number(sys_.get("scale_out_gbit_per_s"), f"{where}.system.scale_out_gbit_per_s", allow_none=True)
    scale_out_kind = (None if sys_.get("scale_out_kind") is None
                      else F.choice(sys_["scale_out_kind"], f"{where}.system.scale_out_kind", SCALE_OUT_KINDS))
    if scale_out_kind == "none" and out is not None:
        raise SpecError(f"{where}.system.scale_out_kind: 'none' (no NIC) contradicts scale_out_gbit_per_s = "
                        f"{F.show(sys_.get('scale_out_gbit_per_s'))}")
    devices_per_node = F.integer(sys_["devices_per_node"], f"{where}.system.devices_per_node")
    domain = F.integer(F.given(sys_, "scale_up_domain", 1), f"{where}.system.scale_up_domain")
    kind = F.choice(F.given(data, "kind", "gpu"), f"{where}.kind", HARDWARE_KINDS)
    execution_model, unsupported_reason = _execution_from(data, where)
    probed, probed_on = _probed_from(data.get("extra"), where)
    compute = Compute() if data.get("compute") is None else _compute_from(data["compute"], f"{where}.compute")
    price_usd_per_hour, purchase, price_unknown = _prices_from(data, where)
    host = Host() if data.get("host") is None else _host_from(data["host"], f"{where}.host", unified)
    if not unified and host.link.kind == "pcie":
        host = with_typical_host(host, host.link.pcie_gen)
    return Hardware(
        name=F.text(data["name"], f"{where}.name"),
        display_name=F.text(data.get("display_name") or data["name"], f"{where}.display_name"),
        kind=kind,
        peak_flops_per_s=peaks,
        memory_bytes=capacity_gb * GB,
        memory_bytes_per_s=F.number(mem["bandwidth_gb_per_s"], f"{where}.memory.bandwidth_gb_per_s") * GB,
        power_w=F.number(data.get("power_w"), f"{where}.power_w", allow_none=True),
        price_usd_per_hour=price_usd_per_hour,
        devices_per_node=devices_per_node,
        scale_up_bytes_per_s=up * GB if up else None,
        scale_up_domain=domain if up else 1,
        scale_up_latency_s=F.number(F.given(sys_, "scale_up_latency_us", DEFAULT_SCALE_UP_LATENCY_US),
                                    f"{where}.system.scale_up_latency_us",
                                    allow_zero=True) * MICROSECOND,
        scale_out_bytes_per_s=out * GB / BITS_PER_BYTE if out else None,
        scale_out_latency_s=F.number(F.given(sys_, "scale_out_latency_us", DEFAULT_SCALE_OUT_LATENCY_US),
                                     f"{where}.system.scale_out_latency_us",
                                     allow_zero=True) * MICROSECOND,
        collective_call_s=(None if sys_.get("collective_call_us") is None else
                           F.number(sys_["collective_call_us"], f"{where}.system.collective_call_us",
                                    allow_zero=True) * MICROSECOND),
        efficiency=_efficiency_of(data, f"{where}.efficiency", kind, compute.flash2_relative),
        source=F.text(data["source"], f"{where}.source"),
        path=where,
        execution_model=execution_model,
        unsupported_reason=unsupported_reason,
        memory_kind=memory_kind,
        memory_unified=unified,
        memory_os_reserve_bytes=os_reserve_bytes,
        usable_memory_bytes=usable_bytes,
        usable_memory_source=usable_source,
        intra_node=(IntraNodeLink() if sys_.get("intra_node") is None
                    else _intra_node_from(sys_["intra_node"], f"{where}.system.intra_node")),
        scale_out_kind=scale_out_kind,
        scale_out_name=F.text(sys_.get("scale_out_name") or "", f"{where}.system.scale_out_name") or "",
        host=host,
        compute=compute,
        vendor=F.text(data.get("vendor") or "", f"{where}.vendor") or "",
        launch_year=F.integer(data.get("launch_year"), f"{where}.launch_year", allow_none=True, maximum=3000),
        price_source=F.text(data.get("price_source") or "", f"{where}.price_source") or "",
        purchase=purchase,
        price_unknown=price_unknown,
        scale_up_name=F.text(sys_.get("scale_up_name") or "", f"{where}.system.scale_up_name") or "",
        probed=probed,
        probed_on=probed_on,
    )


def with_efficiency(hardware: Hardware, **values: Any) -> Hardware:
    """A copy of `hardware` with some efficiency fields replaced (floats, or trial arrays in calibration)."""
    kept = tuple(k for k in hardware.efficiency.derived if k not in values and k.replace("_us", "_s") not in values)
    return replace(hardware, efficiency=replace(hardware.efficiency, derived=kept, **values))
