"""Read a profiler trace: PyTorch profiler (Chrome trace format, `.json` or `.json.gz`, as `torch.profiler`
exports it; trainest's own `--timeline` files alike) or an Nsight Systems SQLite export (`nsys export --type
sqlite`: its CUPTI_ACTIVITY_KIND_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET, NVTX_EVENTS,
CUPTI_ACTIVITY_KIND_RUNTIME and StringIds tables, read with the standard library's sqlite3), and find its
steps (docs/model.md §17.2). Every time in seconds.

Bad input is one SpecError line: a file that is neither JSON nor SQLite, truncated JSON or gzip, JSON
without trace events, an SQLite file without a kernel table, a trace with no GPU kernel (a CPU-only profile).
"""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
import zlib
from pathlib import Path
from typing import Any

from trainest.errors import SpecError
from trainest.record import NamedTuple
from trainest.units import MICROSECOND, NANOSECOND

KERNEL_CATEGORIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
ANNOTATION_CATEGORIES = ("user_annotation", "gpu_user_annotation")
# names that only a backward pass has: autograd's engine, kernels' and annotations' backward markers
BACKWARD = re.compile(r"backward|bwd|dgrad|wgrad|autograd::engine|\((B|W)\)", re.IGNORECASE)
STEP_ANNOTATION = re.compile(r"^ProfilerStep#\d+$")
# PyTorch's autograd engine runs each backward function inside a CPU op of this name (profiler traces since 1.10)
AUTOGRAD_FUNCTION = "autograd::engine::evaluate_function"
# a range whose name also says forward (a whole step's forward_backward_step) marks no pass
FORWARD = re.compile(r"forward|\(F\)", re.IGNORECASE)
PHASES = ("forward", "backward")
NVTX_STEP = re.compile(r"(?i)^(train[_ ]?)?(step|iteration|iter)\b[\s#_:=]*\d*")
# CUPTI_ACTIVITY_MEMCPY_KIND: 1 HtoD, 2 DtoH, 8 DtoD, 10 PtoP (peer)
MEMCPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH",
                10: "PtoP"}


class Kernel(NamedTuple):
    """One GPU activity: a kernel, a memory copy or a memset [s, B]."""

    name: str
    start_s: float
    duration_s: float
    stream: str
    device: int
    launch_s: float | None = None     # when the host launched it (its runtime call), if the trace says
    bytes: float = 0.0
    phase: str | None = None          # forward | backward (kernel_phases), None where the trace does not say

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


class Range(NamedTuple):
    """An annotated range on the host (a PyTorch user annotation, an NVTX range) [s]."""

    name: str
    start_s: float
    duration_s: float

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


class Trace(NamedTuple):
    """What a trace file holds that the comparison needs."""

    path: str
    source: str                     # pytorch | nsys | trainest
    kernels: tuple[Kernel, ...]
    ranges: tuple[Range, ...]
    has_backward: bool              # a backward pass is seen (kernel, op or annotation names; autograd)
    rank: int | None = None
    world_size: int | None = None
    device_name: str | None = None


def read_trace(path: str) -> Trace:
    """The trace in `path` (module docstring); SpecError with one line on bad input."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"--trace {path!r}: no such file")
    with open(p, "rb") as fh:
        head = fh.read(16)
    if head.startswith(b"SQLite format 3\x00"):
        trace = _read_nsys(p)
    else:
        trace = _read_chrome(p, _load_json(p, gz=head[:2] == b"\x1f\x8b"))
    if not trace.kernels:
        raise SpecError(f"--trace {path!r} holds no GPU kernels (a CPU-only profile?): profile with CUDA activities "
                        f"(torch.profiler activities=[CPU, CUDA]; nsys --trace cuda)")
    return trace


def _load_json(p: Path, gz: bool) -> Any:
    try:
        raw = gzip.decompress(p.read_bytes()) if gz else p.read_bytes()
    except (EOFError, OSError, zlib.error):
        raise SpecError(f"--trace {str(p)!r}: truncated or corrupt gzip file") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"--trace {str(p)!r} is not a trace: neither JSON (Chrome trace, .json or .json.gz) nor an "
                        f"Nsight Systems SQLite export") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.pos >= len(text.rstrip()) - 1:
            raise SpecError(f"--trace {str(p)!r}: truncated JSON (it ends at byte {len(raw):,} inside the document)") \
                from None
        raise SpecError(f"--trace {str(p)!r} is not a trace: not valid JSON (line {exc.lineno}: {exc.msg})") from None


def _read_chrome(p: Path, doc: Any) -> Trace:
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events[:100]):
        raise SpecError(f"--trace {str(p)!r} is not a trace: JSON without a traceEvents list (Chrome trace format)")
    launches: dict[Any, float] = {}
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and isinstance(e.get("args"), dict):
            corr = e["args"].get("correlation")
            if corr is not None and _num(e.get("ts")) is not None:
                launches[corr] = float(e["ts"]) * MICROSECOND
    kernels, ranges, backward, autograd = [], [], False, []
    for e in events:
        if e.get("ph") != "X" or _num(e.get("ts")) is None or _num(e.get("dur")) is None:
            continue
        name, cat = str(e.get("name", "")), e.get("cat")
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        if cat in KERNEL_CATEGORIES:
            phase = args.get("phase")       # trainest's own timelines say each op's phase
            kernels.append(Kernel(name, float(e["ts"]) * MICROSECOND, float(e["dur"]) * MICROSECOND,
                                  str(args.get("stream", e.get("tid"))), _int(args.get("device", e.get("pid"))) or 0,
                                  launches.get(args.get("correlation")), float(_num(args.get("bytes")) or 0.0),
                                  "backward" if phase == "recompute" else phase if phase in PHASES else None))
        elif cat in ANNOTATION_CATEGORIES:
            ranges.append(Range(name, float(e["ts"]) * MICROSECOND, float(e["dur"]) * MICROSECOND))
        elif cat == "cpu_op" and name.startswith(AUTOGRAD_FUNCTION):
            autograd.append((float(e["ts"]) * MICROSECOND, float(e["ts"] + e["dur"]) * MICROSECOND))
        if not backward and (BACKWARD.search(name) or args.get("phase") == "backward"):
            backward = True
    kernels = kernel_phases(kernels, backward_ranges(ranges) + autograd)
    backward = backward or any(e.get("cat") == "fwdbwd" for e in events)
    other = doc.get("otherData", {}) if isinstance(doc, dict) else {}
    dist = doc.get("distributedInfo", {}) if isinstance(doc, dict) else {}
    props = doc.get("deviceProperties") if isinstance(doc, dict) else None
    source = "trainest" if isinstance(other, dict) and other.get("generator") == "trainest" else "pytorch"
    return Trace(path=str(p), source=source, kernels=tuple(sorted(kernels, key=lambda k: k.start_s)),
                 ranges=tuple(ranges), has_backward=backward,
                 rank=_int(dist.get("rank")) if isinstance(dist, dict) else None,
                 world_size=_int(dist.get("world_size")) if isinstance(dist, dict) else None,
                 device_name=props[0].get("name") if isinstance(props, list) and props and isinstance(props[0], dict)
                 else None)


def backward_ranges(ranges: list[Range]) -> list[tuple[float, float]]:
    """(start, end) of the annotation or NVTX ranges whose name marks a backward pass (`BACKWARD`) and not also a
    forward (a whole step's `forward_backward` range marks neither) [s]."""
    return [(r.start_s, r.end_s) for r in ranges if BACKWARD.search(r.name) and not FORWARD.search(r.name)]


def union_intervals(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of [a, b] intervals as sorted, disjoint intervals."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def kernel_phases(kernels: list[Kernel], intervals: list[tuple[float, float]]) -> list[Kernel]:
    """The kernels with their pass: backward where the host launched it inside one of `intervals`, the ranges that
    mark a backward (an annotation or NVTX range named as one: `backward_ranges`; PyTorch's autograd functions,
    AUTOGRAD_FUNCTION), forward where it launched outside them, as the trace says where it does (trainest's
    timelines); none where the trace marks no backward range or does not say when the kernel was launched
    (docs/model.md §17.3)."""
    import bisect

    if not intervals:
        return kernels
    merged = union_intervals(intervals)
    starts = [a for a, _ in merged]

    def phase_at(t: float) -> str:
        i = bisect.bisect_right(starts, t) - 1
        return "backward" if i >= 0 and t <= merged[i][1] else "forward"

    return [k if k.phase is not None or k.launch_s is None else k._replace(phase=phase_at(k.launch_s))
            for k in kernels]


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _int(x: Any) -> int | None:
    try:
        return int(x)
    except (TypeError, ValueError):
        return None


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _read_nsys(p: Path) -> Trace:
    try:
        con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        try:
            return _nsys_trace(p, con)
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        raise SpecError(f"--trace {str(p)!r}: unreadable SQLite file ({exc})") from None


def _nsys_trace(p: Path, con: sqlite3.Connection) -> Trace:
    tables = _tables(con)
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables and "CUPTI_ACTIVITY_KIND_MEMCPY" not in tables:
        raise SpecError(f"--trace {str(p)!r}: an SQLite file without CUPTI_ACTIVITY_KIND_KERNEL (not an `nsys export "
                        f"--type sqlite` of a CUDA trace, or a CPU-only profile)")
    strings = dict(con.execute("SELECT id, value FROM StringIds")) if "StringIds" in tables else {}
    launches: dict[int, float] = {}
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        launches = {c: s * NANOSECOND for c, s in con.execute("SELECT correlationId, start FROM "
                                                              "CUPTI_ACTIVITY_KIND_RUNTIME")}
    kernels = []
    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        for start, end, dev, stream, corr, name_id in con.execute(
                "SELECT start, end, deviceId, streamId, correlationId, demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL"):
            kernels.append(Kernel(str(strings.get(name_id, name_id)), start * NANOSECOND, (end - start) * NANOSECOND,
                                  str(stream), int(dev), launches.get(corr)))
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        for start, end, dev, stream, corr, nbytes, kind in con.execute(
                "SELECT start, end, deviceId, streamId, correlationId, bytes, copyKind "
                "FROM CUPTI_ACTIVITY_KIND_MEMCPY"):
            kernels.append(Kernel(f"Memcpy {MEMCPY_KINDS.get(kind, kind)}", start * NANOSECOND,
                                  (end - start) * NANOSECOND, str(stream), int(dev), launches.get(corr), float(nbytes)))
    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        for start, end, dev, stream, nbytes in con.execute(
                "SELECT start, end, deviceId, streamId, bytes FROM CUPTI_ACTIVITY_KIND_MEMSET"):
            kernels.append(Kernel("Memset", start * NANOSECOND, (end - start) * NANOSECOND, str(stream), int(dev),
                                  None, float(nbytes)))
    ranges = []
    if "NVTX_EVENTS" in tables:
        for start, end, text, text_id in con.execute("SELECT start, end, text, textId FROM NVTX_EVENTS "
                                                     "WHERE end IS NOT NULL AND end > start"):
            name = text if text is not None else strings.get(text_id, "")
            ranges.append(Range(str(name), start * NANOSECOND, (end - start) * NANOSECOND))
    backward = any(BACKWARD.search(k.name) for k in kernels) or any(BACKWARD.search(r.name) for r in ranges)
    kernels = kernel_phases(kernels, backward_ranges(ranges))
    return Trace(path=str(p), source="nsys", kernels=tuple(sorted(kernels, key=lambda k: k.start_s)),
                 ranges=tuple(ranges), has_backward=backward)


class Window(NamedTuple):
    """One step of the trace and its GPU activity [s]; it spans its kernels and its mark."""

    name: str
    kernels: tuple[Kernel, ...]
    mark: Range | None = None       # the step's annotation, where the trace marks its steps

    @property
    def start_s(self) -> float:
        """The first kernel's start, or the step mark's where it starts before (a bubble at the start)."""
        first = min(k.start_s for k in self.kernels)
        return first if self.mark is None else min(first, self.mark.start_s)

    @property
    def end_s(self) -> float:
        last = max(k.end_s for k in self.kernels)
        return last if self.mark is None else max(last, self.mark.end_s)

    @property
    def span_s(self) -> float:
        """From its first kernel's start to its last kernel's end."""
        return self.end_s - self.start_s


# a gap between kernels this many times the median gap, and at least GAP_MIN_S, separates two steps
GAP_FACTOR = 50.0
GAP_MIN_S = 1e-3


def find_steps(trace: Trace) -> tuple[str, list[Window]]:
    """(how, the steps): `ProfilerStep#N` annotations (PyTorch), NVTX ranges named step or iteration (Nsight), or
    else idle gaps of at least GAP_FACTOR median gaps and GAP_MIN_S; a trace with none of these is one window.
    A kernel belongs to the step its host launch lies in (its start where the trace gives no launch)."""
    marks = sorted((r for r in trace.ranges if STEP_ANNOTATION.match(r.name)), key=lambda r: r.start_s)
    how = "ProfilerStep annotations"
    if not marks:
        marks = sorted((r for r in trace.ranges if NVTX_STEP.match(r.name)), key=lambda r: r.start_s)
        how = "NVTX step ranges"
    if marks:
        windows = []
        for i, r in enumerate(marks):
            end = marks[i + 1].start_s if i + 1 < len(marks) else float("inf")
            ks = tuple(k for k in trace.kernels if r.start_s <= (k.launch_s if k.launch_s is not None else k.start_s)
                       < end)
            if ks:
                windows.append(Window(r.name, ks, r))
        if windows:
            return how, windows
    return _gap_steps(trace.kernels)


def _gap_steps(kernels: tuple[Kernel, ...]) -> tuple[str, list[Window]]:
    ks = sorted(kernels, key=lambda k: k.start_s)
    gaps, end = [], ks[0].end_s
    for k in ks[1:]:
        gaps.append(k.start_s - end)
        end = max(end, k.end_s)
    positive = sorted(g for g in gaps if g > 0)
    if not positive:
        return "one window (no step marks)", [Window("window", tuple(ks))]
    threshold = max(GAP_FACTOR * positive[len(positive) // 2], GAP_MIN_S)
    windows: list[Window] = []
    current = [ks[0]]
    for k, g in zip(ks[1:], gaps, strict=True):
        if g > threshold:
            windows.append(Window(f"step {len(windows)}", tuple(current)))
            current = []
        current.append(k)
    windows.append(Window(f"step {len(windows)}", tuple(current)))
    how = "idle gaps" if len(windows) > 1 else "one window (no step marks)"
    return how, windows
