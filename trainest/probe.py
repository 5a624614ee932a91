"""Measure the machine trainest runs on, and describe it as a hardware file (`trainest probe -o FILE`).

The CPU probe times numpy GEMMs per dtype over a few square sizes and a large `np.copyto`; the GPU
probe (only where PyTorch sees a CUDA or ROCm device; torch is imported lazily) times torch GEMMs per
precision, a device-to-device copy, an empty-kernel loop and, with two or more GPUs, a peer copy.
`hardware_mapping` turns the results into a mapping that `catalog.hardware_from_mapping` accepts,
and `write_hardware_yaml` writes it, so `trainest estimate --hardware probed.yaml` uses the rates
measured here.

Notation (every rate below is this one formula):

    W    work of one call: FLOPs of an n×n·n×n GEMM, W = 2·n³; bytes of a copy, W = 2·B for a B-byte
         buffer (each byte read once and written once: the read+write convention of datasheet
         memory bandwidth, and of bench/gpu_ground_truth.py); bytes of a peer copy, W = B (one
         direction, the per-direction convention of `system.scale_up_gb_per_s`)
    c    calls timed back to back in one block (the block lasts at least a minimum time, so the
         rate is sustained, not one lucky call)
    t    the block's wall time [s]
    R    = c·W / t, the sustained rate [FLOP/s or bytes/s]; a size's rate is its best block, a
         sweep's rate is its best size

The peaks written are these measured achievable rates, so the efficiency block says 1.0 for
`gemm` and `memory` (a datasheet peak times a fraction < 1 would describe the same number twice).
The timing loop (`run_sweep`) and the arithmetic are pure and take their timer and clock as
arguments, so the tests run them on fake timings; only `_numpy_*` and `_torch_*` touch hardware.
"""

from __future__ import annotations

import datetime
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainest import __version__
from trainest.catalog import CATALOG_NAMES, Hardware, catalog_match, hardware_from_mapping  # noqa: F401 (re-exported)
from trainest.choices import PRECISIONS
from trainest.errors import SpecError, show
from trainest.units import BITS_PER_BYTE, GB, GIGA, MICROSECOND, TERA, GiB, KiB, MiB

if TYPE_CHECKING:   # imported lazily at run time (only the multi-threaded copy needs it)
    from concurrent.futures import ThreadPoolExecutor

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


def round_sig(x: float, digits: int = 4) -> float:
    """`x` rounded to `digits` significant digits (never to 0 for x != 0)."""
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - int(math.floor(math.log10(abs(x)))))


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat()


# ----------------------------------------------------------------------------------- host facts

def _read_text(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def cpu_model_name() -> str:
    """The CPU's marketing name (/proc/cpuinfo, sysctl on macOS, else platform), never empty."""
    text = _read_text("/proc/cpuinfo")
    if text:
        for key in ("model name", "hardware", "processor", "cpu model", "cpu"):
            for line in text.splitlines():
                name, _, value = line.partition(":")
                value = value.strip()
                # "processor : 0" on x86 is an index, not a name
                if name.strip().lower() == key and value and not value.isdigit():
                    return value
    if sys.platform == "darwin":
        import subprocess
        try:
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                 timeout=2, check=False).stdout.strip()
            if out:
                return out
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _meminfo_bytes(key: str) -> float | None:
    """A /proc/meminfo field ("MemTotal") in bytes (the file's "kB" are KiB), or None."""
    text = _read_text("/proc/meminfo")
    for line in (text or "").splitlines():
        name, _, value = line.partition(":")
        parts = value.split()
        if name.strip() == key and parts and parts[0].isdigit():
            return float(parts[0]) * (KiB if parts[1:2] == ["kB"] else 1.0)
    return None


def host_memory_bytes() -> float | None:
    """Total host memory [bytes]: /proc/meminfo on Linux, else the POSIX page count, else None."""
    total = _meminfo_bytes("MemTotal")
    if total is not None:
        return total
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def available_memory_bytes() -> float | None:
    """Memory the probe may use [bytes]: MemAvailable, else the total, else None."""
    return _meminfo_bytes("MemAvailable") or host_memory_bytes()


def _parse_cache_size(text: str) -> float | None:
    """sysfs cache size ("307200K", "32M") in bytes (binary multiples)."""
    text = text.strip().upper()
    factor = {"K": KiB, "M": MiB, "G": GiB}.get(text[-1:], 1.0)
    digits = text[:-1] if text[-1:] in "KMG" else text
    return float(digits) * factor if digits.isdigit() else None


def l3_cache_bytes() -> float | None:
    """The largest cache level of CPU 0 (sysfs), in bytes, or None when it cannot be read."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    sizes = []
    try:
        entries = sorted(base.glob("index*"))
    except OSError:
        return None
    for entry in entries:
        level, size = _read_text(str(entry / "level")), _read_text(str(entry / "size"))
        if level and size and level.strip().isdigit() and int(level) >= 2:
            parsed = _parse_cache_size(size)
            if parsed:
                sizes.append((int(level), parsed))
    return max(sizes)[1] if sizes else None


def core_counts() -> tuple[int | None, int | None]:
    """(logical cores, cores this process may run on)."""
    logical = os.cpu_count()
    usable: int | None
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = logical
    return logical, usable


def blas_info(np: Any) -> tuple[str, int | None]:
    """(BLAS description, thread count or None) for numpy, via threadpoolctl when installed, else
    numpy's build configuration. Informational only: any failure gives "unknown", never an error."""
    try:
        from threadpoolctl import threadpool_info
        for info in threadpool_info():
            if info.get("user_api") == "blas":
                parts = [str(info.get("internal_api") or "blas"), str(info.get("version") or "")]
                extra = ", ".join(f"{k} {info[k]}" for k in ("architecture", "threading_layer") if info.get(k))
                text = " ".join(p for p in parts if p) + (f" ({extra})" if extra else "")
                threads = info.get("num_threads")
                return text, threads if isinstance(threads, int) else None
    except Exception:   # noqa: BLE001 - an optional, informational library: any failure means "not known"
        pass
    threads = None
    for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(var, "")
        if value.isdigit():
            threads = int(value)
            break
    try:
        config = np.show_config(mode="dicts")
        blas = config["Build Dependencies"]["blas"]
        text = " ".join(str(blas.get(k)) for k in ("name", "version") if blas.get(k))
        return (text or "unknown") + " (numpy build configuration)", threads
    except Exception:   # noqa: BLE001 - older numpy (no mode=), or a differently shaped configuration
        pass
    try:
        info = getattr(np.__config__, "blas_opt_info", None) or getattr(np.__config__, "blas_ilp64_opt_info", None)
        if isinstance(info, dict) and info.get("libraries"):
            return ", ".join(map(str, info["libraries"])) + " (numpy build configuration)", threads
    except Exception:   # noqa: BLE001
        pass
    return "unknown", threads


# ------------------------------------------------------------------------------ CPU measuring

def _timed_calls(fn: Callable[[], Any], calls: int, stop_at: float) -> tuple[int, float]:
    """(calls done, wall seconds) of up to `calls` calls of `fn`, stopping after any call that ends
    past `stop_at` (time.perf_counter time base); for synchronous (CPU) work."""
    t0 = time.perf_counter()
    done = 0
    while done < calls:
        fn()
        done += 1
        if time.perf_counter() >= stop_at:
            break
    return done, time.perf_counter() - t0


def _numpy_gemm_timer(np: Any, dtype: str) -> TimeBlock:
    """time_block for np.matmul(a, b, out=c) on n×n arrays of `dtype` (arrays made once per n)."""
    rng = np.random.default_rng(0)
    arrays: dict[int, tuple] = {}

    def time_block(n: int, calls: int, stop_at: float) -> tuple[int, float]:
        if n not in arrays:
            arrays.clear()   # one size's arrays at a time
            a = rng.standard_normal((n, n), dtype=np.float32).astype(dtype)
            b = rng.standard_normal((n, n), dtype=np.float32).astype(dtype)
            arrays[n] = (a, b, np.empty((n, n), dtype=dtype))
        a, b, c = arrays[n]
        return _timed_calls(lambda: np.matmul(a, b, out=c), calls, stop_at)

    return time_block


def _gemm_sizes_that_fit(sizes: Iterable[int], itemsize: int, free_bytes: float | None) -> tuple[int, ...]:
    if free_bytes is None:
        return tuple(sizes)
    return tuple(n for n in sizes if 3 * n * n * itemsize <= GEMM_MAX_MEMORY_FRACTION * free_bytes)


def copy_buffer_bytes(l3_bytes: float | None, available_bytes: float | None) -> int:
    """One copy buffer [bytes]: COPY_BUFFER_L3_MULTIPLE × L3, within [COPY_BUFFER_MIN_BYTES,
    COPY_BUFFER_MAX_BYTES] and at most COPY_MAX_MEMORY_FRACTION of available memory; a multiple of 4 KiB."""
    size = COPY_BUFFER_L3_MULTIPLE * (l3_bytes or DEFAULT_L3_BYTES)
    size = min(max(size, COPY_BUFFER_MIN_BYTES), COPY_BUFFER_MAX_BYTES)
    if available_bytes:
        size = min(size, COPY_MAX_MEMORY_FRACTION * available_bytes)
    return max(4 * KiB, int(size // (4 * KiB)) * 4 * KiB)


def _numpy_copy_timer(np: Any, src: Any, dst: Any, threads: int) -> tuple[TimeBlock, ThreadPoolExecutor | None]:
    """(time_block, pool) for np.copyto(dst, src), split into `threads` slices copied by a thread pool
    (numpy releases the GIL while it copies); `size` is ignored (one buffer size). The pool (None on
    one thread) is the caller's to shut down."""
    if threads <= 1:
        def time_block_one_thread(_size: int, calls: int, stop_at: float) -> tuple[int, float]:
            return _timed_calls(lambda: np.copyto(dst, src), calls, stop_at)
        return time_block_one_thread, None

    from concurrent.futures import ThreadPoolExecutor
    n = src.shape[0]
    bounds = [(i * n // threads, (i + 1) * n // threads) for i in range(threads)]
    pool = ThreadPoolExecutor(max_workers=threads)

    def copy_slice(bound: tuple[int, int]) -> None:
        lo, hi = bound
        np.copyto(dst[lo:hi], src[lo:hi])

    def time_block_threaded(_size: int, calls: int, stop_at: float) -> tuple[int, float]:
        return _timed_calls(lambda: list(pool.map(copy_slice, bounds)), calls, stop_at)

    return time_block_threaded, pool


def _numpy_copy_sweeps(np: Any, buffer: int, cores: int, budget_s: float) -> list[Sweep]:
    """The copy bandwidth on two `buffer`-byte float64 buffers, on one thread and on `cores` threads."""
    t0 = time.perf_counter()
    src = np.empty(buffer // 8, dtype=np.float64)
    dst = np.empty_like(src)
    src.fill(1.0)
    dst.fill(0.0)   # touch every page now: first writes into fresh pages would be timed as page faults
    options = [1] + ([cores] if cores > 1 else [])
    sweeps = []
    for i, threads in enumerate(options):
        left = budget_s - (time.perf_counter() - t0)
        timer, pool = _numpy_copy_timer(np, src, dst, threads)
        try:
            points = run_sweep([buffer], copy_bytes, timer, budget_s=max(0.0, left) / (len(options) - i))
        finally:
            if pool is not None:
                pool.shutdown()
        label = "copy-1-thread" if threads == 1 else f"copy-{threads}-threads"
        sweeps.append(Sweep(label=label, points=points,
                            note=f"np.copyto between two float64 buffers of {buffer} bytes each, {threads} "
                                 f"thread(s); {COPY_CONVENTION}"))
    return sweeps


def probe_cpu(budget_s: float = 20.0) -> CpuProbe:
    """Measure this host's numpy GEMM rates (fp32, fp64, fp16) and copy bandwidth within `budget_s` [s].

    Each GEMM dtype sweeps square sizes (float16 only small ones: numpy computes it without BLAS,
    `emulated`); the copy runs on buffers well above the L3 size, single-threaded and then split
    over the usable cores. Host facts (model, cores, memory, BLAS) are read, not measured.
    """
    import numpy as np

    if not (math.isfinite(budget_s) and budget_s > 0):
        raise SpecError(f"probe budget {show(budget_s)} must be a positive number of seconds")
    t_start = time.perf_counter()
    date = now_iso()
    logical, usable = core_counts()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = None
    blas, blas_threads = blas_info(np)
    free = available_memory_bytes()
    l3 = l3_cache_bytes()

    budget = Budget(budget_s, CPU_BUDGET_SHARES, start=t_start)
    sweeps = {}
    buffer = copy_buffer_bytes(l3, free)
    copies = []
    for label in CPU_ORDER:
        if label == "copy":
            copies = _numpy_copy_sweeps(np, buffer, usable or 1, budget.take("copy"))
            continue
        dtype = dict((lbl, dt) for dt, lbl in CPU_DTYPES)[label]
        emulated = dtype not in NUMPY_BLAS_DTYPES
        sizes = _gemm_sizes_that_fit(CPU_EMULATED_GEMM_SIZES if emulated else CPU_GEMM_SIZES,
                                     np.dtype(dtype).itemsize, free)
        points = run_sweep(sizes, gemm_flops, _numpy_gemm_timer(np, dtype), budget_s=budget.take(label))
        note = (f"numpy {np.__version__} np.matmul, {dtype}, "
                + ("numpy's own C loop (no BLAS for this dtype): emulated, single-threaded" if emulated
                   else f"BLAS: {blas}"))
        sweeps[label] = Sweep(label=label, points=points, emulated=emulated, note=note)

    return CpuProbe(cpu_model=cpu_model_name(), logical_cores=logical, usable_cores=usable,
                    memory_bytes=host_memory_bytes(), l3_bytes=l3, numpy_version=np.__version__, blas=blas,
                    blas_threads=blas_threads, platform=platform.platform(), python_version=platform.python_version(),
                    load_average=load, gemm=tuple(sweeps[lbl] for _, lbl in CPU_DTYPES), copy=tuple(copies),
                    budget_s=budget_s, elapsed_s=time.perf_counter() - t_start, date=date)


# ------------------------------------------------------------------------------ GPU measuring

def gpu_unavailable_reason() -> str | None:
    """Why `probe_gpu` returns None (PyTorch missing or broken, or no CUDA/ROCm device), or None when a
    GPU can be probed."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed (pip install torch), so no GPU can be probed"
    except Exception as exc:   # noqa: BLE001 - a broken install raises OSError, RuntimeError, ...
        return f"PyTorch failed to import ({type(exc).__name__}: {exc})"
    try:
        available = torch.cuda.is_available()
    except Exception as exc:   # noqa: BLE001
        return f"PyTorch {torch.__version__} could not query CUDA ({type(exc).__name__}: {exc})"
    if not available:
        runtime = torch.version.cuda or getattr(torch.version, "hip", None) or "none (CPU-only build)"
        return f"PyTorch {torch.__version__} sees no CUDA/ROCm device (runtime: {runtime})"
    return None


def _torch_sync(torch: Any, devices: Iterable[int] = (0,)) -> None:
    for d in devices:
        torch.cuda.synchronize(d)


# The torch timers run every call they are asked for (kernels are queued asynchronously, so a
# deadline could only be checked at the final synchronisation); their blocks are short.

def _torch_gemm_timer(torch: Any, label: str) -> TimeBlock:
    """time_block for an n×n GEMM on cuda:0 in precision `label` (fp8 through torch._scaled_mm)."""
    device = torch.device("cuda", 0)
    tensors: dict[int, tuple] = {}
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}.get(label)

    def setup(n: int) -> Callable[[], Any]:
        gen = torch.Generator(device=device).manual_seed(0)
        if label == "fp8":
            fp8 = torch.float8_e4m3fn
            if getattr(torch.version, "hip", None) and hasattr(torch, "float8_e4m3fnuz"):
                fp8 = torch.float8_e4m3fnuz   # MI300-class FP8 format
            a = torch.randn(n, n, device=device, generator=gen).to(fp8)
            b = torch.randn(n, n, device=device, generator=gen).to(fp8).t()   # column-major, as _scaled_mm needs
            one = torch.ones((), device=device)
            return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        a = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
        b = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
        c = torch.empty(n, n, device=device, dtype=dtype)
        return lambda: torch.matmul(a, b, out=c)

    def time_block(n: int, calls: int, _stop_at: float) -> tuple[int, float]:
        if n not in tensors:
            tensors.clear()
            torch.cuda.empty_cache()
            tensors[n] = (setup(n),)
        (fn,) = tensors[n]
        _torch_sync(torch)
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        _torch_sync(torch)
        return calls, time.perf_counter() - t0

    return time_block


def _torch_copy_timer(torch: Any, src_device: int, dst_device: int) -> TimeBlock:
    """time_block for dst.copy_(src) of `size`-byte buffers (same device: HBM; two devices: peer)."""
    buffers: dict[int, tuple] = {}

    def time_block(nbytes: int, calls: int, _stop_at: float) -> tuple[int, float]:
        if nbytes not in buffers:
            buffers.clear()
            torch.cuda.empty_cache()
            src = torch.empty(nbytes // 4, dtype=torch.float32, device=torch.device("cuda", src_device)).fill_(1.0)
            dst = torch.empty(nbytes // 4, dtype=torch.float32, device=torch.device("cuda", dst_device)).fill_(0.0)
            buffers[nbytes] = (src, dst)
        src, dst = buffers[nbytes]
        devices = {src_device, dst_device}
        _torch_sync(torch, devices)
        t0 = time.perf_counter()
        for _ in range(calls):
            dst.copy_(src, non_blocking=True)
        _torch_sync(torch, devices)
        return calls, time.perf_counter() - t0

    return time_block


def _torch_launch_timer(torch: Any) -> TimeBlock:
    """time_block for `size` empty kernels (x.add_(1) on one element), synchronised at the end only."""
    x = torch.empty(1, device=torch.device("cuda", 0))

    def time_block(kernels: int, calls: int, _stop_at: float) -> tuple[int, float]:
        _torch_sync(torch)
        t0 = time.perf_counter()
        for _ in range(calls * kernels):
            x.add_(1)
        _torch_sync(torch)
        return calls, time.perf_counter() - t0

    return time_block


def _fp8_unsupported(torch: Any) -> str | None:
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return f"PyTorch {torch.__version__} has no torch._scaled_mm / float8_e4m3fn"
    if getattr(torch.version, "hip", None):
        return None   # ROCm: attempted; an unsupported GPU raises, and the sweep notes it
    if torch.cuda.get_device_capability(0) < FP8_MIN_CAPABILITY:
        return f"compute capability {torch.cuda.get_device_capability(0)} has no FP8 tensor cores"
    return None


def probe_gpu(budget_s: float = 40.0) -> GpuProbe | None:
    """Measure GPU 0 (GEMM per precision, HBM copy, launch floor; peer copy 0 -> 1 with two or more
    GPUs) within `budget_s` [s]; None when `gpu_unavailable_reason()` gives a reason."""
    if not (math.isfinite(budget_s) and budget_s > 0):
        raise SpecError(f"probe budget {show(budget_s)} must be a positive number of seconds")
    if gpu_unavailable_reason() is not None:
        return None
    import torch

    t_start = time.perf_counter()
    date = now_iso()
    count = torch.cuda.device_count()
    props = torch.cuda.get_device_properties(0)
    hip = getattr(torch.version, "hip", None)
    capability = getattr(props, "gcnArchName", None) if hip else "{}.{}".format(*torch.cuda.get_device_capability(0))
    free_bytes, _total = torch.cuda.mem_get_info(0)
    shares = {k: v for k, v in GPU_BUDGET_SHARES.items() if k != "peer" or count >= 2}
    budget = Budget(budget_s, shares, start=t_start)

    sweeps = []
    saved_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        for label in ("bf16", "fp16", "tf32", "fp32", "fp8"):
            share = budget.take(label)
            sizes = [n for n in GPU_GEMM_SIZES if 3 * n * n * 4 <= GEMM_MAX_MEMORY_FRACTION * free_bytes]
            if label == "fp8" and (why := _fp8_unsupported(torch)):
                sweeps.append(Sweep(label=label, points=(), note=f"not measured: {why}"))
                continue
            torch.backends.cuda.matmul.allow_tf32 = label == "tf32"
            try:
                points = run_sweep(sizes, gemm_flops, _torch_gemm_timer(torch, label), budget_s=share)
                how = ("torch._scaled_mm e4m3, unit scales, bf16 out, use_fast_accum=False" if label == "fp8"
                       else "torch.matmul(out=)" + (", allow_tf32" if label == "tf32" else ""))
                sweeps.append(Sweep(label=label, points=points, note=f"{how}, square n×n, torch {torch.__version__}"))
            except (RuntimeError, TypeError) as exc:   # an FP8 path the build or device lacks; OOM on a small GPU
                sweeps.append(Sweep(label=label, points=(), note=f"not measured: {type(exc).__name__}: {exc}"[:300]))
            torch.cuda.empty_cache()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved_tf32

    copy_sizes = [b for b in GPU_COPY_SIZES if b <= GPU_COPY_MAX_MEMORY_FRACTION * free_bytes] or [GPU_COPY_SIZES[0]]
    copy = Sweep(label="copy", points=run_sweep(copy_sizes, copy_bytes, _torch_copy_timer(torch, 0, 0),
                                                budget_s=budget.take("copy")),
                 note=f"Tensor.copy_ on cuda:0, float32 buffers; {COPY_CONVENTION}")
    torch.cuda.empty_cache()

    launch = run_sweep([LAUNCH_FLOOR_CALLS], lambda kernels: float(kernels), _torch_launch_timer(torch),
                       budget_s=budget.take("launch"))
    fastest = best_point(launch)
    if fastest is None:   # run_sweep's first size always yields a point, unless every block read 0 s
        raise RuntimeError("the launch-floor loop timed no block (every block read 0 s on the clock)")
    floor = launch_floor_s(fastest.calls * fastest.size, fastest.seconds)

    peer, peer_access = None, None
    if count >= 2:
        peer_access = bool(torch.cuda.can_device_access_peer(0, 1))
        peer = Sweep(label="peer", points=run_sweep(copy_sizes, float, _torch_copy_timer(torch, 0, 1),
                                                    budget_s=budget.take("peer")),
                     note=f"Tensor.copy_ cuda:0 -> cuda:1 (peer access: {peer_access}); {PEER_CONVENTION}")
        torch.cuda.empty_cache()

    return GpuProbe(device_name=torch.cuda.get_device_name(0), device_count=count, capability=str(capability),
                    memory_bytes=float(props.total_memory), torch_version=str(torch.__version__),
                    runtime=f"HIP {hip}" if hip else f"CUDA {torch.version.cuda}", gemm=tuple(sweeps), copy=copy,
                    launch_floor_s=floor, peer=peer, peer_access=peer_access, budget_s=budget_s,
                    elapsed_s=time.perf_counter() - t_start, date=date)


# ------------------------------------------------------------------------- the hardware mapping

def _tflops(rate_per_s: float) -> float:
    return round_sig(rate_per_s / TERA)


def _gflops(rate_per_s: float | None) -> float | None:
    return None if rate_per_s is None else round_sig(rate_per_s / GIGA)


def _gb(value: float | None) -> float | None:
    return None if value is None else round_sig(value / GB)


def _sweep_record(s: Sweep, unit: str) -> dict[str, Any]:
    """A sweep for the provenance block: best rate, its size, every size's rate, how."""
    scale = {"gflop_per_s": GIGA, "tflop_per_s": TERA, "gb_per_s": GB}[unit]
    best = s.best
    return {
        f"best_{unit}": None if best is None else round_sig(best.rate_per_s / scale),
        "best_size": None if best is None else best.size,
        f"sweep_{unit}": {p.size: round_sig(p.rate_per_s / scale) for p in s.points},
        "emulated": s.emulated,
        "how": s.note,
    }


def cpu_peaks(cpu: CpuProbe) -> tuple[dict[str, float], list[str]]:
    """peak_tflops from the CPU's measured GEMM rates, and notes on what was left out and why.

    fp32 is numpy's BLAS rate. A 16-bit rate is given only when a BLAS computed it and it is at least
    FAST_16BIT_MIN_RATIO of the fp32 rate: numpy's float16 GEMM is an emulated loop far slower than fp32,
    which no trainer would run in (never a peak, even when a busy machine measured fp32 low), and numpy
    has no bfloat16 at all. fp64 is recorded but trainest has no fp64 peak.
    """
    fp32 = cpu.gemm_sweep("fp32")
    fp32_best = None if fp32 is None else fp32.best
    if fp32_best is None:
        raise SpecError("the CPU probe measured no fp32 GEMM rate; trainest needs at least one peak")
    fp32_rate = fp32_best.rate_per_s
    peaks = {"fp32": _tflops(fp32_rate)}
    notes = [f"peak_tflops.fp32 = the best sustained numpy float32 GEMM rate measured here "
             f"({_gflops(fp32_rate)} GFLOP/s at n={fp32_best.size}; BLAS: {cpu.blas})."]
    fp16 = cpu.gemm_sweep("fp16")
    if fp16 is not None and fp16.best_rate_per_s is not None:
        rate = fp16.best_rate_per_s
        if not fp16.emulated and rate >= FAST_16BIT_MIN_RATIO * fp32_rate:
            peaks["fp16"] = _tflops(rate)
            notes.append(f"peak_tflops.fp16 = the measured numpy float16 GEMM rate ({_gflops(rate)} GFLOP/s), "
                         f"at least the fp32 rate.")
        else:
            how = "emulated (no BLAS)" if fp16.emulated else "slow"
            notes.append(f"fp16 left out: numpy's float16 GEMM is {how}, "
                         f"{_gflops(rate)} GFLOP/s = {rate / fp32_rate:.2g}x the fp32 rate; a CPU run "
                         f"computes in fp32, so estimate with --precision fp32.")
    notes.append("bf16 left out: numpy has no bfloat16 dtype, so no bf16 rate was measured; an estimate on this "
                 "file without --precision takes the precision it has (fp16 where kept, else fp32).")
    fp64 = cpu.gemm_sweep("fp64")
    if fp64 is not None and fp64.best_rate_per_s is not None:
        notes.append(f"fp64 measured ({_gflops(fp64.best_rate_per_s)} GFLOP/s) but not a trainest precision; "
                     f"recorded under extra.probe only.")
    return peaks, notes


def gpu_peaks(gpu: GpuProbe) -> tuple[dict[str, float], list[str]]:
    """peak_tflops from the GPU's measured GEMM rates (best of each sweep), and notes on the ones not measured."""
    peaks, notes = {}, []
    for s in gpu.gemm:
        best = s.best
        if best is not None and s.label in PRECISIONS:
            peaks[s.label] = _tflops(best.rate_per_s)
            notes.append(f"peak_tflops.{s.label} = measured {_tflops(best.rate_per_s)} TFLOP/s at n={best.size} "
                         f"({s.note}).")
        else:
            notes.append(f"{s.label}: {s.note or 'not measured'}; left out.")
    notes.append("fp4 is never measured by the probe; left out.")
    if not peaks:
        raise SpecError("the GPU probe measured no GEMM rate; trainest needs at least one peak")
    return peaks, notes


def _provenance(cpu: CpuProbe | None, gpu: GpuProbe | None, base: Hardware | None, measured: list[str],
                read: list[str], from_base: list[str], assumed: list[str]) -> dict[str, Any]:
    """The `extra.probe` block: when, with what, what was measured, taken from the catalog, assumed."""
    probed = gpu if gpu is not None else cpu
    if probed is None:   # hardware_mapping, the only caller, has already refused this
        raise RuntimeError("_provenance needs a CPU or a GPU probe")
    record: dict[str, Any] = {
        "date": probed.date,
        "tool": f"trainest probe (trainest {__version__}, trainest/probe.py)",
        "trainest_version": __version__,
        "python": platform.python_version(),
        "measured": measured,
        "read_from_system": read,
        "from_catalog": {"entry": base.name if base else None, "file": base.path if base else None,
                         "fields": from_base},
        "assumed": assumed,
    }
    if cpu is not None:
        record["host"] = {
            "cpu_model": cpu.cpu_model, "logical_cores": cpu.logical_cores, "usable_cores": cpu.usable_cores,
            "memory_gb": _gb(cpu.memory_bytes),
            "l3_mb": None if cpu.l3_bytes is None else round_sig(cpu.l3_bytes / MiB),
            "platform": cpu.platform, "numpy_version": cpu.numpy_version, "blas": cpu.blas,
            "blas_threads": cpu.blas_threads,
            "load_average_1min_at_start": None if cpu.load_average is None else round(cpu.load_average, 2),
        }
        record["cpu"] = {
            "budget_s": cpu.budget_s, "elapsed_s": round(cpu.elapsed_s, 2),
            "gemm": {s.label: _sweep_record(s, "gflop_per_s") for s in cpu.gemm},
            "copy": {s.label: _sweep_record(s, "gb_per_s") for s in cpu.copy},
            "copy_convention": COPY_CONVENTION,
        }
    if gpu is not None:
        record["gpu"] = {
            "device_name": gpu.device_name, "device_count": gpu.device_count, "capability": gpu.capability,
            "memory_gb": _gb(gpu.memory_bytes), "torch_version": gpu.torch_version, "runtime": gpu.runtime,
            "budget_s": gpu.budget_s, "elapsed_s": round(gpu.elapsed_s, 2),
            "gemm": {s.label: _sweep_record(s, "tflop_per_s") for s in gpu.gemm},
            "copy": _sweep_record(gpu.copy, "gb_per_s"), "copy_convention": COPY_CONVENTION,
            "launch_floor_us": round_sig(gpu.launch_floor_s / MICROSECOND),
            "peer": None if gpu.peer is None else _sweep_record(gpu.peer, "gb_per_s"),
            "peer_access": gpu.peer_access, "peer_convention": PEER_CONVENTION,
        }
    return record


def _cpu_parts(cpu: CpuProbe) -> dict[str, Any]:
    peaks, notes = cpu_peaks(cpu)
    bandwidth = cpu.copy_bytes_per_s
    if bandwidth is None:
        raise SpecError("the CPU probe measured no copy bandwidth")
    if cpu.memory_bytes is None:
        raise SpecError("host memory size unknown (no /proc/meminfo, no sysconf page count)")
    measured_copies = [(s, best) for s in cpu.copy if (best := s.best) is not None]
    best_copy, _ = max(measured_copies, key=lambda pair: pair[1].rate_per_s)
    notes.append(f"memory.bandwidth_gb_per_s = the best sustained np.copyto bandwidth measured here "
                 f"({best_copy.label}, {COPY_CONVENTION}); memory.capacity_gb = total host memory.")
    method = (f"trainest probe {cpu.date}: not fitted. peak_tflops and memory.bandwidth_gb_per_s ARE achievable rates "
              f"measured on this machine (best sustained numpy GEMM over a size sweep; np.copyto read+write), so "
              f"gemm = memory = 1.0. gemm_half_dim = 0: no size dependence assumed (the measured sweep is in "
              f"extra.probe.cpu.gemm). attention = 1.0: not measured, charged at the fp32 GEMM rate times trainest's "
              f"own sequence-length and head-dim factors. scale_up/scale_out = 1.0: unused, no fabric. "
              f"layer_overhead_us and overlap_contention: the catalog defaults.")
    return {
        "kind": "cpu",
        "display_name": f"{cpu.cpu_model} ({cpu.usable_cores} cores, probed)",
        "peak_tflops": peaks,
        "memory": {"capacity_gb": _gb(cpu.memory_bytes), "bandwidth_gb_per_s": _gb(bandwidth)},
        "system": {"devices_per_node": 1, "scale_up_gb_per_s": None, "scale_out_gbit_per_s": None},
        "efficiency": {"gemm": 1.0, "gemm_half_dim": 0, "attention": 1.0, "memory": 1.0, "scale_up": 1.0,
                       "scale_out": 1.0, "fitted": False, "method": method},
        "notes": notes,
        "measured": ["peak_tflops." + p for p in peaks] + ["memory.bandwidth_gb_per_s"],
        "read": ["memory.capacity_gb (host MemTotal)"],
        "from_base": [],
        "assumed": ["system.devices_per_node = 1 (one CPU host)", "no scale-up or scale-out fabric",
                    "efficiency block as stated in efficiency.method"],
    }


def _gpu_parts(gpu: GpuProbe, base: Hardware | None) -> dict[str, Any]:
    peaks, notes = gpu_peaks(gpu)
    bandwidth = gpu.copy.best_rate_per_s
    if bandwidth is None:
        raise SpecError("the GPU probe measured no copy bandwidth")
    measured = ["peak_tflops." + p for p in peaks] + ["memory.bandwidth_gb_per_s"]
    from_base, assumed = [], [f"system.devices_per_node = {gpu.device_count} (the GPUs PyTorch sees)"]
    measured_16 = next(peaks[p] * TERA for p in ("bf16", "fp16", "tf32", "fp32") if p in peaks)
    system: dict[str, Any] = {"devices_per_node": gpu.device_count, "scale_up_gb_per_s": None,
                              "scale_out_gbit_per_s": None}
    eff: dict[str, Any] = {"gemm": 1.0, "gemm_half_dim": 0, "attention": 1.0, "memory": 1.0, "scale_up": 1.0,
                           "scale_out": 1.0}
    peer_rate = gpu.peer.best_rate_per_s if gpu.peer is not None else None
    if base is not None:
        e = base.efficiency
        # fused attention reaches an absolute rate (base fraction × base 16-bit peak); keep that rate
        # against the measured 16-bit peak
        eff.update(gemm_half_dim=e.gemm_half_dim, scale_up=e.scale_up, scale_out=e.scale_out,
                   attention=round_sig(min(1.0, e.attention * base.peak_16bit_flops_per_s / measured_16)),
                   flash2_attention=e.flash2_attention, layer_overhead_us=round_sig(e.layer_overhead_s / MICROSECOND),
                   overlap_contention=e.overlap_contention)
        from_base += ["efficiency.gemm_half_dim", "efficiency.attention (rescaled to the measured 16-bit peak)",
                      "efficiency.scale_up", "efficiency.scale_out", "efficiency.flash2_attention",
                      "efficiency.layer_overhead_us", "efficiency.overlap_contention", "power_w",
                      "price_usd_per_hour", "system.scale_out_gbit_per_s", "system.scale_out_latency_us"]
        if base.scale_out_bytes_per_s:
            system["scale_out_gbit_per_s"] = round_sig(base.scale_out_bytes_per_s * BITS_PER_BYTE / GB)
            system["scale_out_latency_us"] = round_sig(base.scale_out_latency_s / MICROSECOND)
        if gpu.device_count >= 2 and base.scale_up_bytes_per_s:
            system.update(scale_up_gb_per_s=_gb(base.scale_up_bytes_per_s),
                          scale_up_domain=min(base.scale_up_domain, gpu.device_count),
                          scale_up_latency_us=round_sig(base.scale_up_latency_s / MICROSECOND))
            from_base += ["system.scale_up_gb_per_s (the measured peer copy is in extra.probe.gpu.peer)",
                          "system.scale_up_latency_us"]
    if "fp8" in peaks:
        eff["low_precision_gemm"] = 1.0   # the FP8 peak is itself a measured rate
    if system["scale_up_gb_per_s"] is None and gpu.device_count >= 2 and peer_rate:
        system.update(scale_up_gb_per_s=_gb(peer_rate), scale_up_domain=gpu.device_count)
        measured.append("system.scale_up_gb_per_s (peer copy 0 -> 1, one direction)")
        assumed.append("scale-up latency: the catalog default")
    method = (f"trainest probe {gpu.date}: not fitted. peak_tflops and memory.bandwidth_gb_per_s ARE achievable rates "
              f"measured on this GPU (best sustained GEMM over a size sweep; Tensor.copy_ read+write), so gemm = "
              f"memory = 1.0" + ("; FP8 measured, so low_precision_gemm = 1.0" if "fp8" in peaks else "") + ". "
              + (f"The rest from catalog entry {base.name}'s efficiency block (attention rescaled so its absolute "
                 f"rate is unchanged)." if base is not None else
                 "No catalog entry: gemm_half_dim = 0 (no size dependence), attention = 1.0 of the measured 16-bit "
                 "rate (not measured; optimistic), scale_up/scale_out = 1.0, layer_overhead_us and "
                 "overlap_contention: the catalog defaults."))
    eff.update(fitted=False, method=method)
    notes.append(f"memory.bandwidth_gb_per_s = the best device-to-device copy measured here ({COPY_CONVENTION}); "
                 f"memory.capacity_gb = the device's total memory; kernel launch floor "
                 f"{round_sig(gpu.launch_floor_s / MICROSECOND)} us (recorded, not used by the model).")
    parts = {
        "kind": base.kind if base is not None else "gpu",
        "display_name": f"{gpu.device_name} (probed)",
        "peak_tflops": peaks,
        "memory": {"capacity_gb": _gb(gpu.memory_bytes), "usable_mib": round(gpu.memory_bytes / MiB),
                   "usable_source": "probed: torch.cuda.get_device_properties total_memory",
                   "bandwidth_gb_per_s": _gb(bandwidth)},
        "system": system, "efficiency": eff, "notes": notes, "measured": measured,
        "read": ["memory.capacity_gb, memory.usable_mib (torch.cuda.get_device_properties)"],
        "from_base": from_base, "assumed": assumed,
    }
    return parts


def hardware_mapping(cpu: CpuProbe | None, gpu: GpuProbe | None, *, base: Hardware | None = None,
                     name: str | None = None) -> dict[str, Any]:
    """A hardware mapping (specs/README.md schema) of the probed machine, accepted by
    `catalog.hardware_from_mapping`.

    With a GPU probe it describes the GPU (the CPU probe, if given, is recorded as the host); else
    the CPU (`kind: cpu`, one device per node, no fabric). `base`, a catalog entry, supplies what a
    probe cannot measure: power, price, scale-out and (with two or more GPUs) scale-up, and the
    efficiency fields that are not rates. Provenance goes under `extra.probe`; `extra.probed: true`
    marks the file (the loader rejects unknown top-level keys and does not read `extra`).
    """
    if gpu is not None:
        parts = _gpu_parts(gpu, base)
        date, what = gpu.date, "GPU 0: " + gpu.device_name
    elif cpu is not None:
        parts = _cpu_parts(cpu)
        date, what = cpu.date, "CPU: " + cpu.cpu_model
    else:
        raise SpecError("nothing was probed: give a CPU or a GPU probe")
    from_base = list(parts["from_base"])
    power = base.power_w if base is not None else None
    price = base.price_usd_per_hour if base is not None else None
    if base is not None and gpu is None:
        from_base += ["power_w", "price_usd_per_hour"]
    mapping: dict[str, Any] = {
        "name": name or ("probed-" + (base.name if base is not None else ("gpu" if gpu is not None else "cpu"))),
        "display_name": parts["display_name"],
        "kind": parts["kind"],
        "peak_tflops": parts["peak_tflops"],
        "memory": parts["memory"],
        "power_w": power,
        "price_usd_per_hour": price,
    }
    if base is not None and price is not None:
        mapping["price_source"] = f"catalog entry {base.name} (its price_source there)"
    mapping.update({
        "system": parts["system"],
        "efficiency": parts["efficiency"],
        "source": [f"measured by trainest probe (trainest {__version__}) on {date}, {what}"]
                  + ([f"power, price and the non-rate fields listed in extra.probe.from_catalog: catalog entry "
                      f"{base.name} ({base.source})"] if base is not None else []),
        "notes": parts["notes"],
        "derived_fields": [f"measured: {', '.join(parts['measured'])}"]
                          + ([f"read from the system: {', '.join(parts['read'])}"] if parts["read"] else [])
                          + ([f"from catalog entry {base.name}: {', '.join(from_base)}"]
                             if base is not None and from_base else [])
                          + [f"assumed: {a}" for a in parts["assumed"]],
        "extra": {"probed": True,
                  "probe": _provenance(cpu, gpu, base, parts["measured"], parts["read"], from_base, parts["assumed"])},
    })
    hardware_from_mapping(mapping, "probed hardware")   # the guarantee: `--hardware FILE` will accept it
    return mapping


# --------------------------------------------------------------------------------------- writing

def check_output_path(path: str | os.PathLike[str]) -> Path:
    """The output file, or a SpecError: it must end in .yaml/.yml (so `--hardware` reads it as a file,
    never as a catalog name), must not be a directory, and its folder must exist and be writable."""
    p = Path(path)
    shown = show(str(p), 200)
    if p.suffix.lower() not in (".yaml", ".yml"):
        raise SpecError(f"probe output {shown} must end in .yaml or .yml (so --hardware reads it as a file)")
    try:
        if p.is_dir():
            example = show(str(p / "probed.yaml"))
            raise SpecError(f"probe output {shown} is a directory; give a file name such as {example}")
        parent = p.parent if str(p.parent) else Path(".")
        if not parent.exists():
            raise SpecError(f"cannot write probe output {shown}: folder {show(str(parent))} does not exist")
        if not parent.is_dir():
            raise SpecError(f"cannot write probe output {shown}: {show(str(parent))} is not a folder")
        if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
            raise SpecError(f"cannot write probe output {shown}: permission denied")
    except OSError as exc:   # a name too long, a broken mount
        raise SpecError(f"cannot write probe output {shown}: {exc.strerror or exc}") from None
    return p


def yaml_header(mapping: dict[str, Any]) -> str:
    """The comment block at the top of a probed file."""
    probe = mapping.get("extra", {}).get("probe", {})
    measured = ", ".join(probe.get("measured", [])) or "nothing"
    read = ", ".join(probe.get("read_from_system", []))
    base = (probe.get("from_catalog") or {}).get("entry")
    lines = [f"Probed by `trainest probe` (trainest {probe.get('trainest_version', __version__)}) on "
             f"{probe.get('date', now_iso())}: {mapping.get('display_name', '')}.",
             f"Measured on this machine: {measured}." + (f" Read from the system: {read}." if read else ""),
             (f"Taken from catalog entry {base}: see derived_fields." if base else "Nothing taken from the catalog."),
             "The efficiency block is not fitted (efficiency.method says why each value is what it is).",
             "Provenance: extra.probe. Re-run `trainest probe -o FILE` to refresh; edit by hand at will."]
    return "".join(f"# {line}\n" for line in lines)


def write_hardware_yaml(mapping: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Validate `mapping`, then write it as YAML with a header comment to `path` (a file is replaced,
    a directory never); SpecError when the path cannot be written."""
    import yaml

    p = check_output_path(path)
    hardware_from_mapping(mapping, str(p))
    text = yaml_header(mapping) + yaml.safe_dump(mapping, sort_keys=False, width=110, allow_unicode=True)
    try:
        p.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot write probe output {show(str(p), 200)}: {exc.strerror or exc}") from None
    return p


# ---------------------------------------------------------------------------------- the command

def _summary(cpu: CpuProbe | None, gpu: GpuProbe | None, mapping: dict[str, Any], path: Path,
             elapsed_s: float) -> list[str]:
    from trainest.report import fmt_gib, fmt_seconds, fmt_si

    lines = []
    if cpu is not None:
        rates = ", ".join(f"{s.label}{' (emulated)' if s.emulated else ''} {fmt_si(s.best_rate_per_s, 'FLOP/s')}"
                          for s in cpu.gemm if s.best is not None)
        lines.append(f"cpu: {cpu.cpu_model}, {cpu.usable_cores} cores, "
                     f"{fmt_gib(cpu.memory_bytes) if cpu.memory_bytes else 'memory unknown'}")
        lines.append(f"  GEMM {rates}; copy {fmt_si(cpu.copy_bytes_per_s, 'B/s')} (read+write)")
    if gpu is not None:
        rates = ", ".join(f"{s.label} {fmt_si(s.best_rate_per_s, 'FLOP/s')}" for s in gpu.gemm if s.best is not None)
        lines.append(f"gpu: {gpu.device_name} x{gpu.device_count}, {fmt_gib(gpu.memory_bytes)}")
        lines.append(f"  GEMM {rates}; copy {fmt_si(gpu.copy.best_rate_per_s, 'B/s')} (read+write); "
                     f"launch floor {gpu.launch_floor_s / MICROSECOND:.3g} us"
                     + (f"; peer {fmt_si(gpu.peer.best_rate_per_s, 'B/s')}" if gpu.peer and gpu.peer.best else ""))
    lines.append(f"wrote {path} (hardware {mapping['name']!r}, peaks: {', '.join(mapping['peak_tflops'])}) "
                 f"in {fmt_seconds(elapsed_s)}")
    if gpu is None:
        lines.append(f"use it: trainest estimate --hardware {path} --precision fp32 ...")
    return lines


def run_probe(output: str, *, budget_s: float = 60.0, quiet: bool = False) -> int:
    """`trainest probe -o FILE`: probe this machine within about `budget_s` [s], write the hardware
    file, print a short summary on stderr. Exit code 0, or 1 with one `Error: ...` line on stderr.

    CPU only: the CPU probe gets min(budget_s, CPU_BUDGET_MAX_S). With a GPU: the host CPU gets
    GPU_RUN_CPU_SHARE and the GPU GPU_RUN_GPU_SHARE of the budget (the rest covers torch start-up);
    the GPU's catalog entry, matched by device name, supplies power, price and links.
    """
    from trainest.catalog import load_hardware

    t0 = time.perf_counter()
    try:
        if not (isinstance(budget_s, (int, float)) and math.isfinite(budget_s) and budget_s > 0):
            raise SpecError(f"--budget {show(budget_s)} must be a positive number of seconds")
        path = check_output_path(output)      # before spending the budget
        reason = gpu_unavailable_reason()
        if reason is None:
            cpu = probe_cpu(min(CPU_BUDGET_MAX_S, GPU_RUN_CPU_SHARE * budget_s))
            gpu = probe_gpu(GPU_RUN_GPU_SHARE * budget_s)
        else:
            cpu = probe_cpu(min(CPU_BUDGET_MAX_S, budget_s))
            gpu = None
        base = None
        if gpu is not None and (match := catalog_match(gpu.device_name)):
            base = load_hardware(match)
        mapping = hardware_mapping(cpu, gpu, base=base, name=path.stem)
        write_hardware_yaml(mapping, path)
    except SpecError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    if not quiet:
        if reason is not None:
            print(f"note: {reason}; probed the CPU only", file=sys.stderr)
        for line in _summary(cpu, gpu, mapping, path, time.perf_counter() - t0):
            print(line, file=sys.stderr)
    return 0
