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

import math
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from trainest import __version__  # noqa: F401 (re-exported)
from trainest.catalog import CATALOG_NAMES, Hardware, catalog_match, hardware_from_mapping  # noqa: F401 (re-exported)
from trainest.errors import SpecError, show
from trainest.probe_host import (  # noqa: F401 (re-exported: trainest.probe is the probe's one entry)
    available_memory_bytes,
    blas_info,
    core_counts,
    cpu_model_name,
    host_memory_bytes,
    l3_cache_bytes,
    now_iso,
    round_sig,
)
from trainest.probe_record import (  # noqa: F401 (re-exported: trainest.probe is the probe's one entry)
    check_output_path,
    cpu_peaks,
    gpu_peaks,
    hardware_mapping,
    summary_lines,
    write_hardware_yaml,
    yaml_header,
)
from trainest.probe_timing import (  # noqa: F401 (re-exported: trainest.probe is the probe's one entry)
    BLOCKS_PER_SIZE,
    COPY_BUFFER_BYTES_PER_BUDGET_S,
    COPY_BUFFER_L3_MULTIPLE,
    COPY_BUFFER_MAX_BYTES,
    COPY_BUFFER_MIN_BYTES,
    COPY_CONVENTION,
    COPY_MAX_MEMORY_FRACTION,
    CPU_BUDGET_MAX_S,
    CPU_BUDGET_SHARES,
    CPU_DTYPES,
    CPU_EMULATED_GEMM_SIZES,
    CPU_GEMM_SIZES,
    CPU_ORDER,
    DEFAULT_L3_BYTES,
    FP8_MIN_CAPABILITY,
    GEMM_MAX_MEMORY_FRACTION,
    GPU_BUDGET_SHARES,
    GPU_COPY_MAX_MEMORY_FRACTION,
    GPU_COPY_SIZES,
    GPU_GEMM_SIZES,
    GPU_RUN_CPU_SHARE,
    GPU_RUN_GPU_SHARE,
    LAUNCH_FLOOR_CALLS,
    MAX_BLOCK_S,
    MAX_CALLS_PER_BLOCK,
    MIN_BLOCK_S,
    NUMPY_BLAS_DTYPES,
    PEER_CONVENTION,
    PROBE_BUDGET_S,
    Budget,
    CpuProbe,
    GpuProbe,
    Sweep,
    SweepPoint,
    TimeBlock,
    best_point,
    calls_for,
    copy_bytes,
    gemm_flops,
    launch_floor_s,
    min_block_s_for,
    run_sweep,
    sustained_rate,
)
from trainest.units import KiB

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

if TYPE_CHECKING:   # imported lazily at run time (only the multi-threaded copy needs it)
    from concurrent.futures import ThreadPoolExecutor


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


def copy_buffer_bytes(l3_bytes: float | None, available_bytes: float | None, budget_s: float | None = None) -> int:
    """One copy buffer [bytes]: COPY_BUFFER_L3_MULTIPLE × L3, within [COPY_BUFFER_MIN_BYTES,
    COPY_BUFFER_MAX_BYTES], at most COPY_BUFFER_BYTES_PER_BUDGET_S per second of the probe's `budget_s` (not
    below the minimum) and COPY_MAX_MEMORY_FRACTION of available memory; a multiple of 4 KiB."""
    size = COPY_BUFFER_L3_MULTIPLE * (l3_bytes or DEFAULT_L3_BYTES)
    if budget_s is not None:
        size = min(size, COPY_BUFFER_BYTES_PER_BUDGET_S * budget_s)
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
    buffer = copy_buffer_bytes(l3, free, budget_s)
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
        low, high = PROBE_BUDGET_S
        if isinstance(budget_s, bool) or not (isinstance(budget_s, (int, float)) and low <= budget_s <= high):
            raise SpecError(f"--budget {show(budget_s)} must be a number of seconds from {low:g} to {high:g}")
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
        for line in summary_lines(cpu, gpu, mapping, path, time.perf_counter() - t0):
            print(line, file=sys.stderr)
    return 0
