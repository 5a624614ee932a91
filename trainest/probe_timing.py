"""The probe's timing: its constants (sizes, budget shares, block lengths), the measured records (`Sweep`,
`CpuProbe`, `GpuProbe`), the sweep over sizes that times blocks of calls and keeps the best, and the `Budget`
that shares the seconds among the measurements."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainest.catalog import CATALOG_NAMES, Hardware, catalog_match, hardware_from_mapping  # noqa: F401 (re-exported)
from trainest.units import GiB, MiB

if TYPE_CHECKING:   # imported lazily at run time (only the multi-threaded copy needs it)
    pass


# ---------------------------------------------------------------------------------- assumptions

BLOCKS_PER_SIZE = 3                  # timed blocks per size after one warm-up call; the best block counts
MIN_BLOCK_S = 0.001                  # shortest block worth timing [s] (perf_counter resolution ~1e-7 s)
MAX_BLOCK_S = 0.5                    # longest block asked for [s]; longer ones only cost budget
MAX_CALLS_PER_BLOCK = 100_000

CPU_GEMM_SIZES = (128, 256, 512, 1024, 2048, 4096)     # n of square GEMMs; each skipped when it would not fit
CPU_EMULATED_GEMM_SIZES = (32, 64, 128, 256, 512)      # numpy's float16 loop runs ~100x slower than BLAS
NUMPY_BLAS_DTYPES = ("float32", "float64")  # numpy calls BLAS for these only; other dtypes use its own C loop
# numpy dtype -> sweep label (a trainest precision, or fp64, which trainest does not model)
CPU_DTYPES = (("float32", "fp32"), ("float64", "fp64"), ("float16", "fp16"))
# share of probe_cpu's budget per measurement; the rest (~5 %) is slack for set-up and system queries
CPU_BUDGET_SHARES = {"fp32": 0.35, "copy": 0.3, "fp16": 0.1, "fp64": 0.2}
CPU_ORDER = ("fp32", "copy", "fp16", "fp64")   # most needed first: a late overrun then costs the least
GEMM_MAX_MEMORY_FRACTION = 0.25      # skip a GEMM size whose three n×n arrays exceed this share of free memory

COPY_BUFFER_L3_MULTIPLE = 2          # each copy buffer is this many times the L3 size (both: 4x): the copy streams DRAM
COPY_BUFFER_MIN_BYTES = 64 * MiB
COPY_BUFFER_MAX_BYTES = 2 * GiB
COPY_MAX_MEMORY_FRACTION = 1 / 8     # each of the two buffers at most this share of available memory
# the copy buffers grow with the budget (a short probe allocates little): at most this many bytes per second of
# the probe's budget each, but never below COPY_BUFFER_MIN_BYTES (which still streams DRAM, not L3)
COPY_BUFFER_BYTES_PER_BUDGET_S = 256 * MiB
PROBE_BUDGET_S = (0.1, 3600.0)       # run_probe's budget [s]: the CPU gets at most CPU_BUDGET_MAX_S of it anyway
DEFAULT_L3_BYTES = 32 * MiB          # when the L3 size cannot be read (a large server L3 of 2020-2024)
FAST_16BIT_MIN_RATIO = 1.0           # a 16-bit GEMM rate becomes a peak only when it is at least the fp32 rate

GPU_GEMM_SIZES = (1024, 2048, 4096, 8192, 16384)
GPU_COPY_SIZES = (64 * MiB, 256 * MiB, 1 * GiB)        # bytes per buffer
GPU_COPY_MAX_MEMORY_FRACTION = 1 / 8
GPU_BUDGET_SHARES = {"bf16": 0.18, "fp16": 0.12, "tf32": 0.12, "fp32": 0.12, "fp8": 0.16, "copy": 0.1,
                     "launch": 0.04, "peer": 0.08}
LAUNCH_FLOOR_CALLS = 2000            # empty kernels per timed block of the launch-floor loop
FP8_MIN_CAPABILITY = (8, 9)          # NVIDIA Ada/Hopper and newer have FP8 tensor cores
CPU_BUDGET_MAX_S = 20.0              # run_probe never gives the CPU probe more (more barely changes the rates)
GPU_RUN_CPU_SHARE = 0.15             # with a GPU, the host CPU gets this share of run_probe's budget
GPU_RUN_GPU_SHARE = 0.65             # and the GPU this share; the rest covers importing torch and CUDA start-up

COPY_CONVENTION = "read+write: 2·B bytes per copy of a B-byte buffer (datasheet memory-bandwidth convention)"
PEER_CONVENTION = "one direction: B bytes per copy of a B-byte buffer from device 0 to device 1"


# ------------------------------------------------------------------------------------- results

@dataclass(frozen=True)
class SweepPoint:
    """The best timed block at one size."""

    size: int            # n of an n×n GEMM [elements], or one buffer [bytes]
    calls: int           # c: calls in the block
    seconds: float       # t: wall time of the block [s]
    rate_per_s: float    # R = c·W/t [FLOP/s or bytes/s]


@dataclass(frozen=True)
class Sweep:
    """One measurement over a range of sizes: a GEMM precision, or a copy."""

    label: str                          # fp32, fp64, fp16, bf16, tf32, fp8, copy-1-thread, copy, peer, ...
    points: tuple[SweepPoint, ...]      # ascending size; empty when nothing could be measured
    emulated: bool = False              # computed without a vendor GEMM library (numpy's float16 loop)
    note: str = ""                      # how it was measured, or why it was not

    @property
    def best(self) -> SweepPoint | None:
        return best_point(self.points)

    @property
    def best_rate_per_s(self) -> float | None:
        best = self.best
        return None if best is None else best.rate_per_s


@dataclass(frozen=True)
class CpuProbe:
    """What `probe_cpu` measured and read about the host."""

    cpu_model: str
    logical_cores: int | None           # os.cpu_count()
    usable_cores: int | None            # os.sched_getaffinity(0) where it exists, else logical_cores
    memory_bytes: float | None          # total host memory [bytes] (/proc/meminfo MemTotal)
    l3_bytes: float | None              # last-level cache as read from sysfs [bytes]; None when unknown
    numpy_version: str
    blas: str                           # BLAS library numpy calls, as far as it can be found out
    blas_threads: int | None            # its thread count (threadpoolctl, or *_NUM_THREADS), None when unknown
    platform: str
    python_version: str
    load_average: float | None          # 1-minute load average when the probe started (a busy host measures low)
    gemm: tuple[Sweep, ...]             # labels fp32, fp64, fp16
    copy: tuple[Sweep, ...]             # copy-1-thread and copy-N-threads; sizes are the buffer bytes
    budget_s: float
    elapsed_s: float
    date: str                           # ISO 8601, UTC

    def gemm_sweep(self, label: str) -> Sweep | None:
        return next((s for s in self.gemm if s.label == label), None)

    @property
    def copy_bytes_per_s(self) -> float | None:
        """Best sustained copy bandwidth over the thread counts tried, read+write [bytes/s]."""
        rates = [s.best_rate_per_s for s in self.copy if s.best_rate_per_s is not None]
        return max(rates) if rates else None


@dataclass(frozen=True)
class GpuProbe:
    """What `probe_gpu` measured on device 0 (and device 1 for the peer copy)."""

    device_name: str
    device_count: int
    capability: str                     # compute capability "9.0" (CUDA) or the gfx arch (ROCm)
    memory_bytes: float                 # device memory [bytes]
    torch_version: str
    runtime: str                        # "CUDA 12.4" or "HIP 6.1"
    gemm: tuple[Sweep, ...]             # labels bf16, fp16, tf32, fp32, fp8
    copy: Sweep                         # device-to-device copy, read+write; sizes are buffer bytes
    launch_floor_s: float               # seconds per empty kernel in a back-to-back loop [s]
    peer: Sweep | None                  # device 0 -> 1 copy, one direction; None with one device
    peer_access: bool | None            # torch.cuda.can_device_access_peer(0, 1)
    budget_s: float
    elapsed_s: float
    date: str

    def gemm_sweep(self, label: str) -> Sweep | None:
        return next((s for s in self.gemm if s.label == label), None)


# ---------------------------------------------------------------------------- pure arithmetic

def gemm_flops(n: int) -> float:
    """FLOPs of an n×n by n×n matrix product, W = 2·n³ (a multiply and an add per term) [FLOP]."""
    return 2.0 * float(n) ** 3


def copy_bytes(buffer_bytes: float) -> float:
    """Bytes moved by one copy of a B-byte buffer, counting the read and the write, W = 2·B [bytes]."""
    return 2.0 * float(buffer_bytes)


def sustained_rate(work: float, calls: int, seconds: float) -> float:
    """R = c·W / t: work per call W [FLOP or bytes], c calls, t wall seconds [s] -> [per s]."""
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"a timed block must take a finite, positive time, got {seconds!r} s")
    if calls < 1 or not (math.isfinite(work) and work > 0):
        raise ValueError(f"a timed block needs calls >= 1 and positive work, got {calls} calls of {work!r}")
    return calls * work / seconds


def launch_floor_s(calls: int, seconds: float) -> float:
    """Seconds per kernel of `calls` empty kernels enqueued back to back in `seconds` [s]."""
    return 1.0 / sustained_rate(1.0, calls, seconds)


def best_point(points: Iterable[SweepPoint]) -> SweepPoint | None:
    """The point of highest rate (the first of equals), or None for no points."""
    best = None
    for p in points:
        if best is None or p.rate_per_s > best.rate_per_s:
            best = p
    return best


def calls_for(per_call_s: float, min_block_s: float) -> int:
    """Calls per block so the block lasts at least `min_block_s` [s], given one call's time [s]."""
    if not (per_call_s > 0 and math.isfinite(per_call_s)):
        return 1
    return max(1, min(MAX_CALLS_PER_BLOCK, math.ceil(min_block_s / per_call_s)))


def min_block_s_for(budget_s: float, sizes: int, blocks: int = BLOCKS_PER_SIZE) -> float:
    """A block length that lets every size run its warm-up and blocks within the budget [s]."""
    return min(MAX_BLOCK_S, max(MIN_BLOCK_S, budget_s / (max(sizes, 1) * (blocks + 1))))


# (size, calls, stop_at) -> (calls done, their wall seconds): up to `calls` back-to-back calls, stopping
# early, after at least one, once the clock passes `stop_at` (the budget's deadline, in the clock's time base)
TimeBlock = Callable[[int, int, float], tuple[int, float]]


def run_sweep(sizes: Iterable[int], work_of: Callable[[int], float], time_block: TimeBlock, *, budget_s: float,
              blocks: int = BLOCKS_PER_SIZE, min_block_s: float | None = None,
              clock: Callable[[], float] = time.perf_counter) -> tuple[SweepPoint, ...]:
    """Time each size (ascending) with one warm-up call and up to `blocks` blocks; keep each size's best.

    A size is skipped, and the sweep ends, when its warm-up plus one call, predicted from the best
    rate so far, would overrun the budget (larger sizes take longer still); a block is skipped when
    it would overrun. The first size always yields a point, so a sweep never comes back empty
    because the budget was small. `time_block(size, calls, stop_at)` does any set-up for `size`
    itself (untimed) and returns the calls done and their wall time, stopping early at `stop_at`;
    `clock` measures the budget [s] (the real timers use time.perf_counter, the default).
    """
    ordered = sorted(set(int(s) for s in sizes))
    if min_block_s is None:
        min_block_s = min_block_s_for(budget_s, len(ordered), blocks)
    deadline = clock() + budget_s
    points: list[SweepPoint] = []
    best_rate = 0.0
    for size in ordered:
        work = work_of(size)
        if points and 2.0 * work / best_rate > deadline - clock():
            break
        _, per_call = time_block(size, 1, math.inf)    # warm-up: caches, threads, library heuristics
        best: SweepPoint | None = None
        timed = attempts = 0
        while timed < blocks and attempts < 2 * blocks:
            attempts += 1
            calls = calls_for(per_call, min_block_s)
            clipped = False
            if points or best is not None:             # (the first size's first block always runs)
                fit = math.floor((deadline - clock()) / per_call) if per_call > 0 else calls
                clipped = fit < calls
                calls = min(calls, fit)
                if calls < 1:
                    break
            # a block stops at the deadline, or at twice its planned length (the host got busy)
            stop_at = min(deadline, clock() + 2.0 * max(min_block_s, calls * per_call))
            calls, seconds = time_block(size, calls, stop_at)
            if seconds <= 0:                           # below the clock's resolution: ask for more calls
                per_call = min_block_s / MAX_CALLS_PER_BLOCK
                continue
            per_call = seconds / calls
            # a block far shorter than asked for (the warm-up call was slow) calibrates the next one;
            # it counts only when nothing longer can follow
            if seconds < 0.5 * min_block_s and not clipped and calls < MAX_CALLS_PER_BLOCK and attempts < 2 * blocks:
                continue
            timed += 1
            point = SweepPoint(size=size, calls=calls, seconds=seconds, rate_per_s=sustained_rate(work, calls, seconds))
            if best is None or point.rate_per_s > best.rate_per_s:
                best = point
        if best is None:
            break
        points.append(best)
        best_rate = max(best_rate, best.rate_per_s)
    return tuple(points)


class Budget:
    """Seconds for each of several measurements: each gets its share of the time LEFT when it starts,
    so an overrun (or a skipped measurement) is absorbed by the later ones and the total holds.
    The shares may sum to less than 1; the rest is slack for set-up outside the measurements."""

    def __init__(self, budget_s: float, shares: dict[str, float], *, start: float | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.deadline = (clock() if start is None else start) + budget_s * sum(shares.values())
        self.left = dict(shares)

    def take(self, label: str) -> float:
        """`label`'s seconds [s] (0 once the deadline has passed); each label is taken once."""
        share = self.left.pop(label)
        return max(0.0, self.deadline - self.clock()) * share / (share + sum(self.left.values()))
