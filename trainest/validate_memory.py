"""Memory against measured peaks: one comparison per run that gives `measured.peak_memory_gib`, like with like
(the predicted total of the kind the source measured, docs/model.md §7.5), summarized per memory kind.

A run may give a peak memory beside its step metric (torchtitan's tables), or give only the peak (a memory-only
run: specs/runs/memory-given.yaml, `set: memory`); both are compared here, and only the first has a step time.
This module builds results only; trainest/report/validate.py renders them.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# What a published peak memory measured (docs/model.md §7.5) and the predicted total it is compared with:
# allocated / active (torch.cuda.max_memory_allocated, peak active bytes): the tensors; reserved
# (max_memory_reserved): + the allocator's reserve; device (nvidia-smi, NVML): + the CUDA context and NCCL;
# unspecified (a column that does not say): compared as reserved, what most trainers' logs print.
PEAK_MEMORY_KINDS = ("allocated", "active", "reserved", "device", "unspecified")
PEAK_MEMORY_COMPARED = {"allocated": "allocated_bytes", "active": "allocated_bytes", "reserved": "reserved_bytes",
                        "device": "per_device_bytes", "unspecified": "reserved_bytes"}
MEMORY_ONLY_METRIC = "peak_memory_gib"   # a run's Measurement.metric when it gives a peak memory and no step metric
# the scenario settings that decide most of the memory per device and that a measured record often leaves out: a
# run that is called "does not fit" and took one of them as a default (Scenario.derived) names it, since the run's
# own value may make it fit (the dtype and optimizer-in-backward knobs follow from these or are plain off)
MEMORY_SETTINGS = ("tp", "pp", "cp", "zero", "dp_shard", "micro_batch", "recompute", "offload", "optimizer",
                   "master_weights", "loss", "framework")


@dataclass(frozen=True)
class MemoryResult:
    """One run's measured peak memory per device against the predicted total of the same kind [B]."""

    id: str
    source: str
    hardware: str
    run_set: str
    kind: str                         # PEAK_MEMORY_KINDS: what the source measured
    compared_with: str                # the MemoryResult total it is compared with (PEAK_MEMORY_COMPARED)
    measured_bytes: float
    predicted_bytes: float
    fits: bool                        # trainest's verdict (the device total against the usable capacity)
    unstated: tuple[str, ...] = ()    # MEMORY_SETTINGS the record left out (defaults taken)

    @property
    def error_pct(self) -> float:
        """(predicted − measured) / measured · 100."""
        return (self.predicted_bytes - self.measured_bytes) / self.measured_bytes * 100.0


@dataclass(frozen=True)
class MemorySummary:
    """The memory errors of the runs of one memory kind."""

    runs: int
    mape_pct: float
    mean_error_pct: float
    max_ape_pct: float
    not_fitting: int                  # runs that ran, called "does not fit"


def memory_result(case: Any, memory: Any, hardware: str) -> MemoryResult:
    """The MemoryResult of `case` (a validate.Case with a measured peak) from its estimate's MemoryResult."""
    kind = case.measurement.peak_memory_kind
    compared = PEAK_MEMORY_COMPARED[kind]
    unstated = tuple(k for k in MEMORY_SETTINGS if k in case.scenario.derived)
    return MemoryResult(id=case.id, source=case.source, hardware=hardware, run_set=case.run_set, kind=kind,
                        compared_with=compared.removesuffix("_bytes"),
                        measured_bytes=float(case.measurement.peak_memory_bytes),
                        predicted_bytes=float(getattr(memory, compared)), fits=bool(memory.fits), unstated=unstated)


def summarize_memory(results: Iterable[MemoryResult]) -> MemorySummary | None:
    rows = list(results)
    errors = [r.error_pct for r in rows]
    fits = [r.fits for r in rows]
    if not errors:
        return None
    return MemorySummary(len(errors), statistics.fmean(abs(e) for e in errors), statistics.fmean(errors),
                         max(abs(e) for e in errors), sum(1 for f in fits if not f))


def by_kind(results: Iterable[MemoryResult]) -> dict[str, MemorySummary]:
    """MemorySummary per memory kind, in PEAK_MEMORY_KINDS order."""
    rows = list(results)
    out = {}
    for kind in PEAK_MEMORY_KINDS:
        s = summarize_memory(r for r in rows if r.kind == kind)
        if s is not None:
            out[kind] = s
    return out


def compare_memory(case: Any, hardware: Any = None) -> MemoryResult:
    """Predict a memory-only run (a validate.Case with a measured peak memory and no step metric) on its hardware
    (or on `hardware`, a profile) and compare like with like."""
    from trainest.estimate import estimate
    from trainest.record import replace

    s = case.scenario if hardware is None else replace(case.scenario, hardware=hardware)
    return memory_result(case, estimate(s).memory, s.hardware.name)


def run_memory(r: Any) -> MemoryResult:
    """The MemoryResult of a step run (a validate.RunResult) that gives a measured peak memory."""
    kind = r.measured_memory_kind or "unspecified"
    return MemoryResult(id=r.id, source=r.source, hardware=r.hardware, run_set=r.run_set, kind=kind,
                        compared_with=PEAK_MEMORY_COMPARED[kind].removesuffix("_bytes"),
                        measured_bytes=float(r.measured_memory_bytes or 0.0),
                        predicted_bytes=float(r.predicted_memory_bytes or 0.0), fits=r.fits,
                        unstated=tuple(k for k in MEMORY_SETTINGS if k in r.derived))
