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

from trainest.choices import LOW_PRECISIONS
from trainest.errors import SpecError
from trainest.units import GB, GiB

# What a published peak memory measured (docs/model.md §7.5) and the predicted total it is compared with:
# allocated / active (torch.cuda.max_memory_allocated, peak active bytes): the tensors; reserved
# (max_memory_reserved): + the allocator's reserve; device (nvidia-smi, NVML): + the CUDA context and NCCL;
# unspecified (a column that does not say): compared as reserved, what most trainers' logs print.
PEAK_MEMORY_KINDS = ("allocated", "active", "reserved", "device", "unspecified")
PEAK_MEMORY_COMPARED = {"allocated": "allocated_bytes", "active": "allocated_bytes", "reserved": "reserved_bytes",
                        "device": "per_device_bytes", "unspecified": "reserved_bytes"}
MEMORY_ONLY_METRIC = "peak_memory_gib"   # a run's Measurement.metric when it gives a peak memory and no step metric
# the scenario settings that decide most of the memory per device and that a measured record often leaves out: a
# run that is called "does not fit" and took one of them as a default (Scenario.derived, whose names these are)
# names it, since the run's own value may make it fit (the dtype and optimizer-in-backward knobs follow from these
# or are plain off)
MEMORY_SETTINGS = ("parallel.tp", "parallel.pp", "parallel.cp", "parallel.zero", "parallel.dp_shard", "micro_batch",
                   "recompute", "offload", "optimizer", "master_weights", "loss", "fp8_params", "framework")
# the value of a memory setting that holds the least memory, where there is one (docs/model.md §7.8): a run called
# "does not fit" whose record does not state the setting (an importer assumed it, or a default was taken) and that
# fits with this value alone names the setting as the one that decides it (`deciding_settings`)
LIGHTEST_SETTING: dict[str, Any] = {"recompute": "full", "parallel.zero": 3, "micro_batch": 1, "loss": "fused",
                                    "fp8_params": True}
FP8_ONLY_SETTINGS = ("fp8_params",)      # settings that exist only with FP8/FP4 GEMMs (tried only there)
# the memory settings that set the weights, gradients and optimizer state a step holds whatever its activations
# (docs/model.md §7.13): a measured peak below that state contradicts the record's settings, and those of them the
# record does not state are named (`contradicting_settings`)
STATE_SETTINGS = ("optimizer", "master_weights", "parallel.tp", "parallel.pp", "parallel.zero", "parallel.dp_shard",
                  "offload", "fp8_params")
JOINT = "+"      # deciding settings that make a run fit only together: one entry, their keys joined by it
# the reason a record that ran out of memory is kept not expressible with (tools/memory_runs.py writes it): a boundary
# point with no measured peak, whose stated configuration trainest must call "does not fit" (`oom_verdicts`)
OOM_REASON_PREFIX = "outcome OOM"


@dataclass(frozen=True)
class Conflict:
    """A setting a run's record states one way and another statement of the same run (the configuration it ran
    with, where that is known) another (runs key `conflicting`): which of the two ran is not known. The run is
    predicted as its record states; where that does not fit, validate says whether the other values do."""

    key: str            # a scenario key (setting_keys)
    stated: Any         # the record's value: what trainest predicts
    otherwise: Any      # the other statement's value


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
    assumed: tuple[str, ...] = ()     # settings its importer assumed, the record not stating them (runs key `assumed`)
    deciding: tuple[str, ...] = ()    # of the unstated and assumed, those whose lightest value alone makes it fit
    state_bytes: float = 0.0          # predicted weights + gradients + optimizer state on the device at the peak
    contradicting: tuple[str, ...] = ()   # measured below state_bytes: the STATE_SETTINGS its record does not state
    conflicting: tuple[Conflict, ...] = ()   # settings its record states one way and its own configuration another
    fits_otherwise: bool | None = None       # called "does not fit": whether it fits with `conflicting`'s values

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
    contradicted: int = 0             # runs whose measured peak is below the state their record's settings hold
    consistent_mape_pct: float | None = None   # the MAPE of the others (None: no other run)


def memory_result(case: Any, memory: Any, hardware: str, deciding: tuple[str, ...] = (),
                  fits_otherwise: bool | None = None) -> MemoryResult:
    """The MemoryResult of `case` (a validate.Case with a measured peak) from its estimate's MemoryResult."""
    kind = case.measurement.peak_memory_kind
    compared = PEAK_MEMORY_COMPARED[kind]
    measured, state = float(case.measurement.peak_memory_bytes), state_bytes_of(memory)
    unstated = unstated_settings(case.scenario)
    return MemoryResult(id=case.id, source=case.source, hardware=hardware, run_set=case.run_set, kind=kind,
                        compared_with=compared.removesuffix("_bytes"), measured_bytes=measured,
                        predicted_bytes=float(getattr(memory, compared)), fits=bool(memory.fits),
                        unstated=unstated, assumed=case.assumed, deciding=deciding, state_bytes=state,
                        contradicting=contradicting_settings(measured, state, case.assumed + unstated),
                        conflicting=case.conflicting, fits_otherwise=fits_otherwise)


def state_bytes_of(memory: Any) -> float:
    """The weights, gradients and optimizer state an estimate's MemoryResult holds on the device at its peak [B]:
    what a step holds whatever its activations, so a lower bound of any measured peak of the run (§7.13)."""
    return float(memory.weights_bytes + memory.gradients_bytes + memory.optimizer_bytes)


def contradicting_settings(measured_bytes: float, state_bytes: float, candidates: Iterable[str]) -> tuple[str, ...]:
    """Where a measured peak is below the weights, gradients and optimizer state the run's settings hold
    (`state_bytes`), the record's settings are not what ran: of `candidates` (the settings its record does not
    state), those that set that state (STATE_SETTINGS), in STATE_SETTINGS order; () where the peak is not below it
    or the record states every such setting (then the count, not the record, is in question) (§7.13)."""
    if not measured_bytes < state_bytes:
        return ()
    given = set(candidates)
    return tuple(k for k in STATE_SETTINGS if k in given)


def as_it_ran(scenario: Any) -> Any:
    """A measured run's scenario judged as it ran: against the usable capacity with no planning margin (the default
    memory_headroom is a margin a plan keeps free, which a run that ran did not need), unless its record gives one
    (docs/model.md §7.8)."""
    from trainest.record import replace

    if "memory_headroom" not in scenario.derived:
        return scenario
    return replace(scenario, memory_headroom="0%", memory_headroom_bytes=0.0)


def unstated_settings(scenario: Any) -> tuple[str, ...]:
    """The MEMORY_SETTINGS a scenario took as defaults (its record left them out), but those that exist only with
    FP8/FP4 GEMMs in a run without them."""
    return unstated_of(scenario.derived, scenario.precision)


def unstated_of(derived: Iterable[str], precision: str) -> tuple[str, ...]:
    """The MEMORY_SETTINGS among a run's defaulted values (`derived`) that apply at its precision."""
    low = precision in LOW_PRECISIONS
    return tuple(k for k in MEMORY_SETTINGS if k in derived and (low or k not in FP8_ONLY_SETTINGS))


def assumed_of(value: Any, where: str) -> tuple[str, ...]:
    """A record's `assumed`: the settings its importer assumed because the record does not state them, each a
    scenario key (`recompute`, `parallel.zero`, `finetune.base_bits`, ...); none: ()."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise SpecError(f"{where}: expected a list of scenario keys, got {type(value).__name__}")
    for i, key in enumerate(value):
        check_setting_key(key, f"{where}[{i}]")
    return tuple(value)


def setting_keys() -> tuple[str, ...]:
    """The scenario keys a run record may name as one setting: a top-level key, parallel.<key>, finetune.<key>."""
    from trainest.knobs import FINETUNE, KNOBS, PARALLEL_KEYS
    from trainest.scenario import SCENARIO_KEYS

    return (*SCENARIO_KEYS, *(f"parallel.{k}" for k in PARALLEL_KEYS),
            *(f"finetune.{k.yaml_key}" for k in KNOBS if k.group == FINETUNE))


def check_setting_key(key: Any, where: str) -> None:
    """SpecError unless `key` is a scenario key (setting_keys)."""
    if key not in setting_keys():
        raise SpecError(f"{where}: {key!r} is not a scenario key; allowed: a top-level key (recompute, "
                        f"micro_batch, ...), parallel.<key> or finetune.<key> (specs/README.md)")


def conflicting_of(value: Any, where: str) -> tuple[tuple[str, Any], ...]:
    """A record's `conflicting`: a mapping of scenario keys to the value another statement of the same run gives
    (a number, a word or true/false); none: ()."""
    if value is None:
        return ()
    if not isinstance(value, dict) or not value:
        raise SpecError(f"{where}: expected a mapping of scenario keys to values (parallel.pp: 4), got "
                        f"{type(value).__name__ if not isinstance(value, dict) else 'an empty mapping'}")
    for key, v in value.items():
        check_setting_key(key, f"{where}.{key}")
        if isinstance(v, (list, dict)) or v is None:
            raise SpecError(f"{where}.{key}: expected one value (a number, a word or true/false), got "
                            f"{'nothing' if v is None else type(v).__name__}")
    return tuple(value.items())


def setting_word(value: Any) -> str:
    """A setting's value as a runs file writes it (true/false for a flag)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def with_record_setting(rec: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """A copy of run record `rec` with setting `key` (setting_keys) at `value`."""
    group, dot, name = key.partition(".")
    if not dot:
        return {**rec, key: value}
    inner = rec.get(group)
    return {**rec, group: {**(inner if isinstance(inner, dict) else {}), name: value}}


def with_setting(scenario: Any, key: str, value: Any) -> Any:
    """`scenario` with the setting `key` (a scenario key: top-level, a simple knob, or parallel.<key>) at `value`."""
    from trainest.record import replace

    if key.startswith("parallel."):
        return replace(scenario, parallel=replace(scenario.parallel, **{key.removeprefix("parallel."): value}))
    if key in dict(scenario.knobs):
        return replace(scenario, knobs=tuple((k, value if k == key else v) for k, v in scenario.knobs))
    return replace(scenario, **{key: value})


def setting_of(scenario: Any, key: str) -> Any:
    """The value of setting `key` in `scenario` (with_setting's keys)."""
    if key.startswith("parallel."):
        return getattr(scenario.parallel, key.removeprefix("parallel."))
    knobs = dict(scenario.knobs)
    return knobs[key] if key in knobs else getattr(scenario, key)


def fits_with(scenario: Any, keys: Iterable[str]) -> bool:
    """Whether `scenario` fits with each of `keys` at its lightest value; an invalid combination does not."""
    from trainest.estimate import estimate

    for key in keys:
        scenario = with_setting(scenario, key, LIGHTEST_SETTING[key])
    try:
        return bool(estimate(scenario).memory.fits)
    except (SpecError, TypeError, ValueError):
        return False                # not a valid scenario with those values: they decide nothing


def deciding_settings(scenario: Any, candidates: Iterable[str]) -> tuple[str, ...]:
    """Of `candidates` (settings a run's record does not state), those whose lightest value (LIGHTEST_SETTING)
    alone makes the run fit, in the order given; where none does alone but all together do, one entry of their
    keys joined by JOINT. A candidate already at its lightest value, or without one, is left out."""
    keys = [k for k in dict.fromkeys(candidates)
            if k in LIGHTEST_SETTING and setting_of(scenario, k) != LIGHTEST_SETTING[k]
            and (k not in FP8_ONLY_SETTINGS or scenario.precision in LOW_PRECISIONS)]
    alone = tuple(k for k in keys if fits_with(scenario, (k,)))
    if alone or len(keys) < 2:
        return alone
    return (JOINT.join(keys),) if fits_with(scenario, keys) else ()


def summarize_memory(results: Iterable[MemoryResult]) -> MemorySummary | None:
    rows = list(results)
    errors = [r.error_pct for r in rows]
    fits = [r.fits for r in rows]
    if not errors:
        return None
    consistent = [abs(r.error_pct) for r in rows if not r.contradicting]
    return MemorySummary(len(errors), statistics.fmean(abs(e) for e in errors), statistics.fmean(errors),
                         max(abs(e) for e in errors), sum(1 for f in fits if not f),
                         contradicted=len(rows) - len(consistent),
                         consistent_mape_pct=statistics.fmean(consistent) if consistent else None)


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

    s = as_it_ran(case.scenario if hardware is None else replace(case.scenario, hardware=hardware))
    memory = estimate(s).memory
    deciding = () if memory.fits else deciding_settings(s, case.assumed + unstated_settings(s))
    return memory_result(case, memory, s.hardware.name, deciding,
                         None if memory.fits else fits_otherwise(case.otherwise, hardware))


def fits_otherwise(otherwise: Any, hardware: Any = None) -> bool | None:
    """Whether a run fits as the other statement of its settings gives them (`otherwise`: the scenario with its
    record's `conflicting` values; None: its record gives none), judged as it ran (on `hardware` if given)."""
    from trainest.estimate import estimate
    from trainest.record import replace

    if otherwise is None:
        return None
    return bool(estimate(as_it_ran(otherwise if hardware is None else replace(otherwise, hardware=hardware)))
                .memory.fits)


def run_memory(r: Any) -> MemoryResult:
    """The MemoryResult of a step run (a validate.RunResult) that gives a measured peak memory."""
    kind = r.measured_memory_kind or "unspecified"
    measured, unstated = float(r.measured_memory_bytes or 0.0), unstated_of(r.derived, r.precision)
    return MemoryResult(id=r.id, source=r.source, hardware=r.hardware, run_set=r.run_set, kind=kind,
                        compared_with=PEAK_MEMORY_COMPARED[kind].removesuffix("_bytes"),
                        measured_bytes=measured,
                        predicted_bytes=float(r.predicted_memory_bytes or 0.0), fits=r.fits,
                        unstated=unstated, assumed=r.assumed, deciding=r.deciding,
                        state_bytes=r.predicted_state_bytes,
                        contradicting=contradicting_settings(measured, r.predicted_state_bytes,
                                                             r.assumed + unstated),
                        conflicting=r.conflicting, fits_otherwise=r.fits_otherwise)


# ------------------------------------------------------------------------ the measured peak's bounds

def peak_memory_limit_bytes(hardware: Any) -> float:
    """The most memory a device can report as its peak [B]: what a program sees (`Hardware.device_memory_bytes`:
    H100 80GB 81,559 MiB), or where the file gives no usable size the vendor's capacity figure read as GiB,
    since "80 GB" parts hold 80 GiB and frameworks report GiB (torch.cuda.max_memory_*)."""
    if hardware.usable_memory_bytes is not None:
        return hardware.usable_memory_bytes
    return hardware.memory_bytes / GB * GiB


def check_peak_memory(case: Any, where: str) -> None:
    """SpecError when the measured peak memory per device is more than the device holds: it is then another
    quantity (the node's or the job's), not one device's peak."""
    peak, hw = case.measurement.peak_memory_bytes, case.scenario.hardware
    if peak is None or peak <= peak_memory_limit_bytes(hw):
        return
    raise SpecError(f"{where}.peak_memory_gib: {peak / GiB:g} is more than a {hw.name} holds "
                    f"({hw.memory_bytes / GB:g} GB; allowed: at most {peak_memory_limit_bytes(hw) / GiB:.1f} GiB per "
                    f"device); it may be the node's or the job's total (the file's value is one device's peak)")


def oom_verdicts(path: Any) -> tuple[tuple[str, bool], ...]:
    """(id, predicted fits) of every record of the runs file `path` that ran out of memory (its `reason` starts
    with OOM_REASON_PREFIX): a measured "does not fit", against which a predicted fit is a memory-model error."""
    from pathlib import Path

    from trainest.estimate import estimate
    from trainest.validate import run_scenario, runs_document
    out = []
    for rec in runs_document(Path(path)).get("runs") or []:
        if str(rec.get("reason") or "").startswith(OOM_REASON_PREFIX):
            scenario = run_scenario(rec, str(rec.get("id")), user_file=False)
            if not isinstance(scenario, str):
                out.append((str(rec["id"]), bool(estimate(scenario).memory.fits)))
    return tuple(out)
