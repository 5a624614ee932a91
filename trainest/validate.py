"""Accuracy against published runs: load runs files, predict each run, compare like with like.

A runs file (`specs/runs/*.yaml`, schema in specs/README.md) holds measured training runs. Each
expressible record is a scenario mapping; `measured` holds ONE of these metrics, compared in its own
unit (the first one present, in this order):

    step_time_s                         seconds per optimizer step
    tokens_per_s                        tokens per second, all devices together
    tokens_per_s_per_device             tokens per second of one device (torchtitan's tps, NeMo's per GPU)
    tflops_per_device + flops_formula   the source's TFLOP/s per device, reproduced with the source's
                                        own FLOP count F (trainest.conventions.FLOPS_FORMULAS)
    mfu + flops_formula                 the source's MFU (fraction of the dense peak of the run's precision;
                                        of the bf16 peak with mfu_peak: bf16, as torchtitan reports FP8 runs)
    device_hours + tokens               device-hours to train `tokens` tokens

Every metric is a monotonic function of the step time t, so one pair of functions converts both ways
(`metric_from_step_time_s`, `step_time_s_from_metric`): prediction = metric(t_predicted) and, for
calibration, the measured value is turned into an equivalent measured step time.

A runs file may name the set its runs belong to (`set: NAME`; absent: `public`, the published
vendor and paper runs). Every Case and RunResult carries it (`run_set`); reports summarize by set
as well as by source and hardware, and the accuracy gates about published runs keep `public`.

Records with `expressible: false` keep their `reason`; a record whose scenario does not validate
(SpecError, e.g. pp does not divide layers) is counted as not expressible with that message. Nothing
is dropped silently. This module builds results only; the CLI renders them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainest import SCHEMA_VERSION  # noqa: F401 - re-exported
from trainest import fields as F
from trainest.catalog import Hardware, specs_dir
from trainest.conventions import FLOPS_FORMULAS
from trainest.errors import SpecError, show
from trainest.record import replace
from trainest.scenario import RUN_ONLY_KEYS, SCENARIO_KEYS, Scenario, relative_to_file, scenario_from_mapping
from trainest.units import GiB, parse_count
from trainest.validate_memory import (  # noqa: F401 - peak_memory_limit_bytes re-exported
    MEMORY_ONLY_METRIC,
    PEAK_MEMORY_COMPARED,
    PEAK_MEMORY_KINDS,
    Conflict,
    MemoryResult,
    as_it_ran,
    assumed_of,
    check_peak_memory,
    compare_memory,
    conflicting_of,
    deciding_settings,
    fits_otherwise,
    peak_memory_limit_bytes,
    run_memory,
    setting_of,
    setting_word,
    state_bytes_of,
    unstated_settings,
    with_record_setting,
)
from trainest.validate_metrics import (  # noqa: F401 - re-exported: the metric algebra lived here
    SECONDS_PER_HOUR,
    active_flops_per_step,
    metric_from_step_time_s,
    source_flops_per_step,
    step_time_s_from_metric,
)

RUNS_FILE_KEYS = ("runs",)
RUNS_FILE_OPTIONAL_KEYS = ("source", "set")   # source: the default of records that give none
PUBLIC_SET = "public"               # the run set of a runs file without `set:` (published runs)
MEASURED_KEYS = ("step_time_s", "tokens_per_s", "tokens_per_s_per_device", "tflops_per_device", "mfu", "flops_formula",
                 "device_hours", "tokens",
                 "peak_memory_gib", "peak_memory_kind", "mfu_peak")
# the peak an `mfu` is a fraction of: the dense peak of the run's precision (the default), or the bf16 peak, which
# torchtitan and other loggers divide by even for an FP8 run
MFU_PEAKS = ("precision", "bf16")
CONFIDENCE = ("high", "medium", "low")

# metric -> (label, unit); the order is the order of preference when a record has several.
METRICS: dict[str, tuple[str, str]] = {
    "step_time_s": ("step time", "s"),
    "tokens_per_s": ("tokens/s", "tokens/s"),
    "tokens_per_s_per_device": ("tokens/s per device", "tokens/s"),
    "tflops_per_device": ("TFLOP/s per device", "TFLOP/s"),
    "mfu": ("MFU", "fraction"),
    "device_hours": ("device-hours", "h"),
}


# ------------------------------------------------------------------------------------------- loading

@dataclass(frozen=True)
class Measurement:
    """What a source measured for one run, in the source's own terms."""

    metric: str                     # a key of METRICS
    value: float                    # in METRICS[metric]'s unit
    flops_formula: str | None       # FLOPS_FORMULAS key, for tflops_per_device and mfu
    tokens: float | None            # training tokens, for device_hours
    peak_memory_bytes: float | None = None   # published peak device memory, when the source gives it
    mfu_peak: str = "precision"     # MFU_PEAKS: the peak an mfu is a fraction of
    peak_memory_kind: str = "unspecified"    # PEAK_MEMORY_KINDS: what the peak memory measured


@dataclass(frozen=True)
class Case:
    """One expressible run: the scenario trainest predicts and what was measured."""

    id: str
    source: str                     # group key: the runs file's stem (e.g. `korthikanti2022`)
    citation: str                   # the record's own `source` text
    scenario: Scenario
    measurement: Measurement
    confidence: str | None
    run_set: str = PUBLIC_SET       # the runs file's `set` (public: published vendor and paper runs)
    unmodelled: tuple[str, ...] = ()   # settings the record states that trainest has no input for
    assumed: tuple[str, ...] = ()      # settings its importer assumed, the record not stating them
    conflicting: tuple[Conflict, ...] = ()   # settings its record states one way and its own configuration another
    otherwise: Scenario | None = None  # the scenario with `conflicting`'s other values (None: no conflict)


@dataclass(frozen=True)
class NotExpressible:
    id: str
    source: str
    hardware: str
    reason: str
    run_set: str = PUBLIC_SET


@dataclass(frozen=True)
class LoadedRuns:
    cases: tuple[Case, ...]
    memory_cases: tuple[Case, ...]       # runs that give a peak memory and no step metric (validate_memory.py)
    not_expressible: tuple[NotExpressible, ...]
    duplicates: tuple[str, ...] = ()     # ids of repeated transcriptions (`duplicate_of`), counted once
    warnings: tuple[str, ...] = ()       # measured metrics of one run that disagree (metric_disagreements)


def split_memory_only(cases: list[Case]) -> tuple[tuple[Case, ...], tuple[Case, ...]]:
    """(the runs with a step metric, the memory-only runs) of `cases`."""
    memory = tuple(c for c in cases if c.measurement.metric == MEMORY_ONLY_METRIC)
    return tuple(c for c in cases if c.measurement.metric != MEMORY_ONLY_METRIC), memory


def bundled_runs_files() -> list[Path]:
    """The runs files shipped in specs/runs/, sorted by name."""
    return sorted((specs_dir() / "runs").glob("*.yaml"))


def runs_files(paths: Iterable[str | Path]) -> list[Path]:
    """The runs files given by name; a blank name is an error (Path('') is the directory '.')."""
    names = [str(p) for p in paths]
    blank = [name for name in names if not name.strip()]
    if blank:
        raise SpecError(f"runs file {blank[0]!r} is an empty name; give a runs YAML file")
    return [Path(name) for name in names]


def run_sets(paths: Iterable[str | Path] | None = None, *, user_files: bool = False) -> list[str]:
    """The run sets the runs files declare (the bundled files by default), sorted: each file's `set:` and the
    sets its records declare of their own (a record's `set:` overrides its file's)."""
    files = runs_files(paths) if paths else bundled_runs_files()
    sets = set()
    for path in files:
        doc = runs_document(path)
        sets.add(run_set_of(doc, path, user_files))
        runs = doc.get("runs")
        sets.update(run_set_of(rec, path) for rec in (runs if isinstance(runs, list) else [])
                    if isinstance(rec, dict) and rec.get("set") is not None)
    return sorted(sets)


def runs_document(path: Path) -> dict[str, Any]:
    """A runs file as a mapping: a bare list of run records is `{runs: [...]}`."""
    data = F.load_yaml(path, "runs")
    if isinstance(data, list):
        return {"runs": data}
    if not isinstance(data, dict):
        raise SpecError(f"runs file {str(path)!r} must hold a list of run records or a mapping with `runs:`, not a "
                        f"{type(data).__name__}")
    return data


def measurement_from_mapping(data: Any, where: str) -> Measurement:
    """Validate a `measured` mapping and pick its metric (the first of METRICS present)."""
    F.check_keys(data, where, (), MEASURED_KEYS)
    present = [m for m in METRICS if data.get(m) is not None] or \
        ([MEMORY_ONLY_METRIC] if data.get(MEMORY_ONLY_METRIC) is not None else [])
    if not present:
        raise SpecError(f"{where}: no measured value; give one of {', '.join(METRICS)}, or peak_memory_gib alone")
    metric = present[0]
    value = F.number(data[metric], f"{where}.{metric}")
    formula = None
    if metric in ("tflops_per_device", "mfu"):
        if data.get("flops_formula") is None:
            raise SpecError(f"{where}: {metric} needs flops_formula (one of {', '.join(FLOPS_FORMULAS)})")
        formula = F.choice(data["flops_formula"], f"{where}.flops_formula", tuple(FLOPS_FORMULAS))
    mfu_peak = F.choice(data.get("mfu_peak", "precision"), f"{where}.mfu_peak", MFU_PEAKS)
    if data.get("mfu_peak") is not None and data.get("mfu") is None:
        raise SpecError(f"{where}.mfu_peak: {mfu_peak} says which peak an mfu is a fraction of, and no mfu is given; "
                        f"give mfu, or drop mfu_peak")
    if metric == "mfu" and value > 1.0:
        raise SpecError(f"{where}.mfu: {value!r} must be a fraction in (0, 1] (0.42 = 42 %)")
    tokens = None
    if metric == "device_hours":
        if data.get("tokens") is None:
            raise SpecError(f"{where}.tokens: a number is required (device_hours needs the tokens trained, e.g. 10B)")
        tokens = parse_count(data["tokens"], f"{where}.tokens:")    # as a run's `tokens:` (300B, 3.0e11)
    peak = F.number(data.get("peak_memory_gib"), f"{where}.peak_memory_gib", allow_none=True)
    kind = F.choice(data.get("peak_memory_kind", "unspecified"), f"{where}.peak_memory_kind", PEAK_MEMORY_KINDS)
    if data.get("peak_memory_kind") is not None and peak is None:
        raise SpecError(f"{where}.peak_memory_kind: {kind} says what peak_memory_gib measured, and none is given; "
                        f"give peak_memory_gib, or drop peak_memory_kind")
    return Measurement(metric=metric, value=value, flops_formula=formula, tokens=tokens,
                       peak_memory_bytes=None if peak is None else peak * GiB, mfu_peak=mfu_peak,
                       peak_memory_kind=kind)


def _matches(text: str | None, pattern: str | None) -> bool:
    return pattern is None or (text is not None and pattern.lower() in str(text).lower())


USER_SET = "user"                   # the set of a user's runs file without `set:` whose name is no set name


def user_set_name(path: Path) -> str:
    """The set of a user's runs file without `set:`: its file stem, lower-cased (`my-cluster` for
    my-cluster.yaml), or `user` when the stem is no set name: never `public`, the published runs."""
    stem = path.stem.lower()
    ok = stem and stem != PUBLIC_SET and all(c.isascii() and (c.isalnum() or c in "-_.") for c in stem)
    return stem if ok else USER_SET


def run_set_of(doc: dict[str, Any], path: Path, user_file: bool = False) -> str:
    """The run set a runs file declares (`set:`, a lower-case name); when absent, `public` for a bundled
    file and `user_set_name` for a user's (`user_file`: given with --runs)."""
    if doc.get("set") is None:
        return user_set_name(path) if user_file else PUBLIC_SET
    name = doc["set"]
    if not isinstance(name, str) or not name or name != name.lower() \
            or not all(c.isascii() and (c.isalnum() or c in "-_.") for c in name):
        raise SpecError(f"{path}: set: {show(name)} must be a lower-case name (letters, digits, '-', '_', '.'), "
                        f"e.g. {PUBLIC_SET!r}")
    return name


# what a measured run cannot be interpreted without (every bundled record gives them; specs/README.md)
REQUIRED_RUN_KEYS = ("model", "hardware", "devices", "seq_len")
BATCH_RUN_KEYS = ("global_batch", "global_batch_tokens")
# A run whose memory trainest counts above this multiple of the device's is mis-specified: the memory
# model is some 10-15 % off the measured peaks (docs/validation.md, memory); a run it puts 50 % over the
# device (the report's 70B on 8 H100 without sharding: 25x) did not run as written. `calibrate` leaves it out
# of its fit, and `validate` gives its MAPE without such runs too (`ValidationReport.without_misspecified`).
MISSPECIFIED_MEMORY_FACTOR = 1.5
METRIC_AGREEMENT = 0.01     # two given metrics whose step times differ by more than this share disagree


def check_run_keys(rec: dict[str, Any], where: str) -> None:
    """An expressible record gives model, hardware, devices, seq_len and a batch size: without them the
    measurement is compared against a default scenario and its error means nothing."""
    missing = [k for k in REQUIRED_RUN_KEYS if rec.get(k) is None]
    if all(rec.get(k) is None for k in BATCH_RUN_KEYS):
        missing.append("global_batch")
    if missing:
        raise SpecError(f"{where}: missing required key{'s' if len(missing) > 1 else ''} {', '.join(missing)}: a "
                        f"measured run cannot be interpreted without {'them' if len(missing) > 1 else 'it'} (give "
                        f"{', '.join(REQUIRED_RUN_KEYS)} and global_batch or global_batch_tokens; specs/README.md)")


def metric_disagreements(case: Case, measured: dict[str, Any], where: str) -> list[str]:
    """Warnings for the metrics of `measured` besides the one compared whose equivalent step time differs
    from the compared one's by more than METRIC_AGREEMENT."""
    if case.measurement.metric == MEMORY_ONLY_METRIC:
        return []           # a memory-only run: no step metric to disagree with
    out = []
    compared_s = step_time_s_from_metric(case)
    for metric in METRICS:
        if metric == case.measurement.metric or measured.get(metric) is None:
            continue
        try:
            other = measurement_from_mapping({k: v for k, v in measured.items()
                                              if k not in METRICS or k == metric}, where)
            other_s = step_time_s_from_metric(replace(case, measurement=other))
        except SpecError:
            continue     # (e.g. mfu without a flops_formula: not comparable, and not the metric compared)
        if abs(other_s - compared_s) > METRIC_AGREEMENT * compared_s:
            hint = ""
            if "mfu" in (metric, case.measurement.metric) and bf16_peak_mfu_likely(case, other, other_s, compared_s):
                hint = (f"; the mfu may be a fraction of the bf16 peak (torchtitan and others report it so for "
                        f"{case.scenario.precision} runs), not of the {case.scenario.precision} peak: if so, give "
                        f"measured.mfu_peak: bf16")
            out.append(f"{where}: measured {metric} {measured[metric]} means a step of {other_s:.4g} s, but "
                       f"{case.measurement.metric} {case.measurement.value:g} (the metric compared) means "
                       f"{compared_s:.4g} s; they disagree by {abs(other_s / compared_s - 1):.0%}{hint}")
    return out


# why a measurement can mean a step faster than the device's peak: the likely slip, per metric
IMPOSSIBLE_CAUSES = {
    "step_time_s": "it may be the time of one micro-batch or of one device's share, not of one optimizer step "
                   "of global_batch sequences (the file's value is the whole step's)",
    "tokens_per_s": "it may count more devices than the run's {devices} (the file's value is the tokens/s of the "
                    "run's {devices} devices together), or devices or model may not be the run's",
    "tokens_per_s_per_device": "it may be the whole job's tokens/s (the file's value is one device's; the total "
                               "is tokens_per_s), or devices or model may not be the run's",
    "tflops_per_device": "it may be the whole job's TFLOP/s (the file's value is per device), or flops_formula may "
                         "not be the source's",
    "mfu": "flops_formula may count fewer FLOPs than the source's",
    "device_hours": "it may be wall-clock hours (the file's value is hours × devices), or tokens may be more "
                    "than the run trained",
}


def implied_mfu(case: Case, model_flops_per_step: float) -> float:
    """The MFU the measurement implies: model FLOPs of one step (trainest's count) over the measured step
    time t, the devices N and the dense peak C at the run's precision: F / (t·N·C). Above 1 is impossible."""
    s = case.scenario
    return model_flops_per_step / (step_time_s_from_metric(case) * s.devices * s.hardware.peak(s.precision))


def check_possible(case: Case, where: str) -> None:
    """SpecError when the measurement means model FLOPs per device per second above the device's peak at
    the run's precision (`implied_mfu` > 1): no run goes faster than its hardware, so the value was
    transcribed in another unit or for another job. A slow measurement is legitimate and is kept."""
    from trainest.estimate import estimate

    try:
        flops = estimate(case.scenario).throughput.model_flops_per_step
    except SpecError:
        return                  # not estimable: the comparison says so (not expressible)
    mfu = implied_mfu(case, flops)
    if mfu <= 1.0:
        return
    s, meas = case.scenario, case.measurement
    value = f"{meas.value:g}" if meas.metric != "mfu" else f"{meas.value:g} ({meas.flops_formula})"
    cause = IMPOSSIBLE_CAUSES[meas.metric].format(devices=s.devices)
    raise SpecError(f"{where}.{meas.metric}: {value} means a step of {step_time_s_from_metric(case):.4g} s, an "
                    f"implied MFU of {mfu * 100:.0f} % of {s.hardware.name}'s {s.precision} peak on {s.devices} "
                    f"devices, faster than the hardware can run (allowed: an implied MFU of at most 100 %); {cause}")

BF16_PEAK_MATCH = 0.1     # an mfu's step within 10 % of the bf16-peak reading: it was probably read against it


def bf16_peak_mfu_likely(case: Case, other: Measurement, other_s: float, compared_s: float) -> bool:
    """Whether an mfu read against the run's low-precision peak (mfu_peak: precision) disagrees with the other
    metric by the ratio of the bf16 peak to that peak (~2x for FP8): the mfu was then a fraction of the bf16 peak."""
    s = case.scenario
    mfu_meas, mfu_s, rest_s = (other, other_s, compared_s) if other.metric == "mfu" else \
        (case.measurement, compared_s, other_s)
    if s.precision == "bf16" or mfu_meas.mfu_peak == "bf16":
        return False
    try:
        ratio = s.hardware.peak("bf16") / s.hardware.peak(s.precision)
    except SpecError:
        return False
    return ratio < 1.0 and abs(mfu_s / rest_s / ratio - 1.0) < BF16_PEAK_MATCH


def check_measurement(case: Case, where: str, user_file: bool) -> None:
    """In a user's runs file (given with --runs): a measurement faster than the hardware, or a peak memory
    above what the device holds, is an error (`check_possible`, `check_peak_memory`). Bundled files mark
    such records not expressible."""
    if user_file:
        if case.measurement.metric != MEMORY_ONLY_METRIC:
            check_possible(case, where)
        check_peak_memory(case, where)


def run_scenario(rec: dict[str, Any], where: str, user_file: bool) -> Scenario | str:
    """A record's Scenario; one that does not validate is a SpecError in a user's file (a typo in a value) and
    the not-expressible reason (a str) in a bundled one."""
    try:
        return scenario_from_mapping(rec, where)
    except SpecError as exc:
        if user_file:
            text = str(exc) if str(exc).startswith(where) else f"{where}: {exc}"
            raise SpecError(f"{text} (fix the value, or mark the run `expressible: false` with a reason)") from None
        return f"does not validate: {exc}"


def check_formula(case: Case, where: str, user_file: bool) -> str | None:
    """Whether the case's flops_formula can count its model (`source_flops_per_step`): None when it can or
    the metric needs none; else a SpecError in a user's file, the not-expressible reason in a bundled one."""
    if case.measurement.flops_formula is None:
        return None
    try:
        source_flops_per_step(case)
    except SpecError as exc:
        text = str(exc).replace(f"run {case.id!r}: ", "")
        if user_file:
            raise SpecError(f"{where}.measured.flops_formula: {text}") from None
        return f"does not validate: {text}"
    return None


def load_runs(paths: Iterable[str | Path] | None = None, *, source: str | None = None,
              hardware: str | None = None, run_set: str | None = None, user_files: bool = False) -> LoadedRuns:
    """Read and check runs files; build a Scenario for every expressible record.

    `source` keeps records whose file stem, file-level or record `source` contains it (case-insensitive);
    `hardware` keeps records whose hardware name equals it; `run_set` keeps the records whose set equals
    it: the record's own `set:`, else its file's (`public` for neither). Schema errors (unknown keys, a bad
    `measured`, duplicate ids, a missing key a measurement needs) raise SpecError; a scenario that does not
    validate is not expressible in a bundled file, and an error in a user's (`user_files`: given with --runs,
    where it is a typo in a value, not a run trainest cannot express).
    """
    files = runs_files(paths) if paths else bundled_runs_files()
    if not files:
        raise SpecError(f"no runs files found in {specs_dir() / 'runs'}")
    hw_filter = hardware.strip().lower() if hardware else None
    cases: list[Case] = []
    skipped: list[NotExpressible] = []
    seen: dict[str, str] = {}
    duplicates: list[str] = []
    warnings: list[str] = []
    for path in files:
        doc = runs_document(path)
        F.check_keys(doc, str(path), RUNS_FILE_KEYS, RUNS_FILE_OPTIONAL_KEYS)
        file_source = None if doc.get("source") is None else F.text(doc["source"], f"{path}: source")
        file_set = run_set_of(doc, path, user_files)
        if not isinstance(doc["runs"], list):
            raise SpecError(f"{path}: runs: expected a list of run records, got {type(doc['runs']).__name__}")
        group = path.stem
        for i, rec in enumerate(doc["runs"]):
            where = f"{path}: runs[{i}]"
            F.check_keys(rec, where, ("id",), SCENARIO_KEYS + RUN_ONLY_KEYS)
            rec = relative_to_file(rec, path.parent)     # its model and hardware files are the runs file's
            run_id = F.text(rec["id"], f"{where}.id")
            where = f"{path}: run {run_id!r}"
            rec_set = file_set if rec.get("set") is None else run_set_of(rec, Path(where))
            if run_set is not None and rec_set != run_set.strip().lower():
                continue
            if run_id in seen:
                raise SpecError(f"{where}: duplicate id (also in {seen[run_id]})")
            seen[run_id] = str(path)
            expressible = F.boolean(rec.get("expressible", True), f"{where}.expressible")
            if rec.get("source") is None and file_source is None:
                raise SpecError(f"{where}: no source; give the run's `source` (where the measurement comes from), or a "
                                f"file-level `source:` for every run of the file")
            citation = F.text(rec.get("source") or file_source, f"{where}.source")
            confidence = None if rec.get("confidence") is None else \
                F.choice(rec["confidence"], f"{where}.confidence", CONFIDENCE)
            hw_raw = rec.get("hardware")
            hw_name = str(hw_raw).strip().lower() if isinstance(hw_raw, str) else "?"
            if source is not None and not (_matches(group, source) or _matches(file_source or "", source)
                                           or _matches(citation, source)):
                continue
            if hw_filter is not None and hw_name != hw_filter:
                continue
            if rec.get("duplicate_of") is not None:
                # the same measurement transcribed twice: the other record is compared, this one is not
                duplicates.append(run_id)
                continue
            if not expressible:
                reason = F.text(rec.get("reason") or "no reason given", f"{where}.reason")
                skipped.append(NotExpressible(run_id, group, hw_name, reason, rec_set))
                continue
            if rec.get("measured") is None:
                raise SpecError(f"{where}: missing required key 'measured' (an expressible run needs a measurement)")
            measurement = measurement_from_mapping(rec["measured"], f"{where}.measured")
            check_run_keys(rec, where)
            scenario = run_scenario(rec, where, user_files)
            if isinstance(scenario, str):
                skipped.append(NotExpressible(run_id, group, hw_name, scenario, rec_set))
                continue
            case = Case(run_id, group, citation, scenario, measurement, confidence, rec_set,
                        *unstated_keys_of(rec, where), *conflicts_of(rec, scenario, where))
            problem = check_formula(case, where, user_files)
            if problem is not None:
                skipped.append(NotExpressible(run_id, group, hw_name, problem, rec_set))
                continue
            check_measurement(case, f"{where}.measured", user_files)
            warnings += metric_disagreements(case, rec["measured"], where)
            cases.append(case)
    return LoadedRuns(*split_memory_only(cases), tuple(skipped), tuple(duplicates), tuple(warnings))


def unstated_keys_of(rec: dict[str, Any], where: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A record's (`unmodelled`, `assumed`): what it states that trainest has no input for, and the scenario keys
    its importer assumed (validate_memory.assumed_of)."""
    return (unmodelled_of(rec.get("unmodelled"), f"{where}.unmodelled"),
            assumed_of(rec.get("assumed"), f"{where}.assumed"))


def conflicts_of(rec: dict[str, Any], scenario: Scenario,
                 where: str) -> tuple[tuple[Conflict, ...], Scenario | None]:
    """A record's `conflicting` (settings another statement of the same run gives otherwise: validate_memory.Conflict)
    and the scenario with those values; ((), None) without one. The values must make a valid run: a record whose
    other statement does not validate is a SpecError naming it."""
    pairs = conflicting_of(rec.get("conflicting"), f"{where}.conflicting")
    if not pairs:
        return (), None
    other = {k: v for k, v in rec.items() if k != "conflicting"}
    for key, value in pairs:
        other = with_record_setting(other, key, value)
    try:
        otherwise = scenario_from_mapping(other, f"{where}.conflicting")
    except SpecError as exc:
        why = str(exc).removeprefix(f"{where}.conflicting: ").removeprefix(f"{where}.conflicting.")
        raise SpecError(f"{where}.conflicting: with " + ", ".join(f"{k} {setting_word(v)}" for k, v in pairs)
                        + f" the run does not validate: {why}") from None
    return tuple(Conflict(k, setting_of(scenario, k), v) for k, v in pairs), otherwise


def unmodelled_of(value: Any, where: str) -> tuple[str, ...]:
    """A record's `unmodelled`: a list of the settings it states that trainest has no input for (none: ())."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise SpecError(f"{where}: expected a list of settings, got {type(value).__name__}")
    return tuple(F.text(v, f"{where}[{i}]") for i, v in enumerate(value))


# ---------------------------------------------------------------------------------------- comparing

@dataclass(frozen=True)
class RunResult:
    """One run compared: `measured` and `predicted` are the same metric in the same unit."""

    id: str
    source: str
    hardware: str
    metric: str
    unit: str
    measured: float
    predicted: float
    error_pct: float                # (predicted − measured) / measured · 100
    step_ratio: float               # predicted / measured-equivalent step time (> 1: model too slow)
    measured_step_s: float
    predicted_step_s: float
    flops_formula: str | None
    bottleneck: str
    fits: bool
    params_b: float
    devices: int
    tp: int
    pp: int
    dp: int
    cp: int
    vpp: int
    zero: int
    sequence_parallel: bool
    recompute: str
    precision: str
    seq_len: int
    micro_batch: int
    global_batch: int
    confidence: str | None
    citation: str
    measured_memory_bytes: float | None = None    # published peak memory per device, if any
    predicted_memory_bytes: float | None = None   # trainest's memory per device for the same run, of the same kind
    measured_memory_kind: str | None = None       # PEAK_MEMORY_KINDS of the measured peak (None: none given)
    predicted_no_overlap_step_s: float | None = None   # the step with every collective exposed (upper bound)
    run_set: str = PUBLIC_SET                     # the runs file's `set` (public: published runs)
    model: str = ""                               # the model's name
    architecture: str = "dense"                   # ARCHITECTURES: dense | moe (mixture of experts) | hybrid
    active_params_b: float = 0.0                  # parameters one token uses [billions] (= params_b when dense)
    ep: int = 1
    etp: int = 1
    derived: tuple[str, ...] = ()                 # the scenario values the record left out (defaults taken)
    framework: str = ""                           # the training framework the run was predicted for (frameworks.py)
    finetune: str = "full"                        # FINETUNES: full | lora | qlora
    offload: str = "none"                         # OFFLOADS: none | optimizer | optimizer+weights | activations
    misspecified: bool = False                    # needs more than MISSPECIFIED_MEMORY_FACTOR x the device's memory
    mfu_peak: str | None = None                   # metric mfu: MFU_PEAKS, the peak it is a fraction of
    hardware_calibrated: bool = True              # the hardware's efficiencies fitted on measured runs (else priors)
    unmodelled: tuple[str, ...] = ()              # settings the record states that trainest has no input for
    assumed: tuple[str, ...] = ()                 # settings its importer assumed, the record not stating them
    deciding: tuple[str, ...] = ()                # of the assumed and defaulted, those whose lightest value fits
    predicted_state_bytes: float = 0.0            # weights + gradients + optimizer state per device at the peak
    conflicting: tuple[Conflict, ...] = ()        # settings its record states one way and its configuration another
    fits_otherwise: bool | None = None            # called "does not fit": whether it fits with `conflicting`'s values


ARCHITECTURES = ("dense", "moe", "hybrid")


def architecture_of(s: Scenario) -> str:
    """`hybrid` for a model of Mamba-2 blocks (with or without experts), `moe` for a mixture-of-experts
    transformer, else `dense` (multi-head latent attention alone is dense)."""
    return "hybrid" if s.model.hybrid is not None else "moe" if s.model.moe is not None else "dense"


def compare(case: Case, hardware: Hardware | None = None) -> RunResult:
    """Predict `case` with `estimate()` (on `hardware` if given) and compare with the measurement."""
    from trainest.estimate import estimate

    s = as_it_ran(case.scenario if hardware is None else replace(case.scenario, hardware=hardware))
    e = estimate(s)
    measured = case.measurement.peak_memory_bytes
    kind = case.measurement.peak_memory_kind
    deciding = () if e.memory.fits else deciding_settings(s, case.assumed + unstated_settings(s))
    return replace(result_for(replace(case, scenario=s), e.step.time_s, e.step.bottleneck, e.memory.fits),
                   deciding=deciding, predicted_state_bytes=state_bytes_of(e.memory),
                   fits_otherwise=None if e.memory.fits else fits_otherwise(case.otherwise, hardware),
                   measured_memory_bytes=measured,
                   predicted_memory_bytes=(e.memory.per_device_bytes if measured is None
                                           else getattr(e.memory, PEAK_MEMORY_COMPARED[kind])),
                   measured_memory_kind=None if measured is None else kind,
                   predicted_no_overlap_step_s=e.step.no_overlap_time_s,
                   hardware_calibrated=bool(s.hardware.efficiency.fitted),
                   misspecified=e.memory.per_device_bytes > MISSPECIFIED_MEMORY_FACTOR * e.memory.capacity_bytes)


def result_for(case: Case, predicted_step_s: float, bottleneck: str = "?", fits: bool = True) -> RunResult:
    """A RunResult from a predicted step time [s]."""
    s, meas, p = case.scenario, case.measurement, case.scenario.parallel
    predicted = metric_from_step_time_s(case, predicted_step_s)
    measured_step_s = step_time_s_from_metric(case)
    return RunResult(
        id=case.id, source=case.source, hardware=s.hardware.name, metric=meas.metric, unit=METRICS[meas.metric][1],
        measured=meas.value, predicted=predicted, error_pct=(predicted - meas.value) / meas.value * 100.0,
        step_ratio=predicted_step_s / measured_step_s, measured_step_s=measured_step_s,
        predicted_step_s=predicted_step_s, flops_formula=meas.flops_formula, bottleneck=bottleneck, fits=fits,
        params_b=s.model.params / 1e9, devices=s.devices, tp=p.tp, pp=p.pp, dp=p.dp, cp=p.cp, vpp=p.vpp,
        zero=p.zero, sequence_parallel=p.sequence_parallel, recompute=s.recompute, precision=s.precision,
        seq_len=s.seq_len, micro_batch=s.micro_batch, global_batch=s.global_batch, confidence=case.confidence,
        citation=case.citation, run_set=case.run_set, model=s.model.name, architecture=architecture_of(s),
        active_params_b=s.model.active_params / 1e9, ep=p.ep, etp=p.etp, derived=s.derived, framework=s.framework,
        finetune=s.finetune.method, offload=s.offload, mfu_peak=meas.mfu_peak if meas.metric == "mfu" else None,
        unmodelled=case.unmodelled, assumed=case.assumed, conflicting=case.conflicting)


@dataclass(frozen=True)
class Summary:
    """Absolute percentage errors of a group of runs (None when the group has no expressible run)."""

    runs: int
    mape_pct: float | None          # mean |error|
    median_ape_pct: float | None
    max_ape_pct: float | None
    mean_error_pct: float | None    # signed mean of each run's metric error: > 0 means predictions of that metric
                                    # are high on average (a throughput too high, or a time too long)
    not_expressible: int
    mean_step_error_pct: float | None = None   # signed mean of the step-time error (step_error_pct): < 0 means
                                               # steps predicted too fast on average, whatever each run's metric


def step_error_pct(r: RunResult) -> float:
    """A run's step-time error [%]: predicted / measured step time − 1 (< 0: the step predicted too fast). One sign
    for every metric, where `error_pct` follows the metric's (a throughput's is > 0 when the step is too fast)."""
    return (r.step_ratio - 1.0) * 100.0


def summarize(results: Iterable[RunResult], not_expressible: int = 0) -> Summary:
    rows = list(results)
    errors = [r.error_pct for r in rows]
    if not errors:
        return Summary(0, None, None, None, None, not_expressible)
    ape = [abs(x) for x in errors]
    return Summary(len(errors), statistics.fmean(ape), statistics.median(ape), max(ape), statistics.fmean(errors),
                   not_expressible, statistics.fmean(step_error_pct(r) for r in rows))


def mape_pct(results: Iterable[RunResult]) -> float | None:
    return summarize(results).mape_pct


@dataclass(frozen=True)
class ValidationReport:
    summary: Summary
    by_source: dict[str, Summary]
    by_hardware: dict[str, Summary]
    runs: tuple[RunResult, ...]
    not_expressible: tuple[NotExpressible, ...]
    duplicates: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()       # measured metrics of one run that disagree (LoadedRuns.warnings)
    profile: str | None = None           # the hardware file the runs of its hardware were predicted with
    memory_runs: tuple[MemoryResult, ...] = ()   # the memory-only runs' comparisons (LoadedRuns.memory_cases)

    @property
    def memory(self) -> tuple[MemoryResult, ...]:
        """Every measured peak memory compared: the step runs' that give one, then the memory-only runs'."""
        return tuple(run_memory(r) for r in self.runs if r.measured_memory_bytes is not None) + self.memory_runs

    @property
    def without_misspecified(self) -> Summary:
        """The summary of the runs that are not mis-specified (`RunResult.misspecified`: more than
        MISSPECIFIED_MEMORY_FACTOR times the device's memory), whose errors say little."""
        return summarize([r for r in self.runs if not r.misspecified], self.summary.not_expressible)

    @property
    def by_set(self) -> dict[str, Summary]:
        """Summary per run set (`public`, `vtrain-single-node`, ...)."""
        return grouped(self.runs, self.not_expressible, "run_set")

    @property
    def by_architecture(self) -> dict[str, Summary]:
        """Summary per architecture (`dense`, `moe`); not-expressible records are not counted here."""
        return grouped(self.runs, (), "architecture")


def grouped(results: Iterable[RunResult], skipped: Iterable[NotExpressible], key: str) -> dict[str, Summary]:
    """Summary per value of `key` (`source`, `hardware`, `run_set`, `architecture`, `model`), sorted."""
    res: dict[str, list[RunResult]] = {}
    nx: dict[str, int] = {}
    for r in results:
        res.setdefault(getattr(r, key), []).append(r)
    for n in skipped:
        nx[getattr(n, key)] = nx.get(getattr(n, key), 0) + 1
    return {k: summarize(res.get(k, []), nx.get(k, 0)) for k in sorted(set(res) | set(nx))}


def build_report(results: Iterable[RunResult], skipped: Iterable[NotExpressible],
                 duplicates: Iterable[str] = ()) -> ValidationReport:
    results, skipped = tuple(results), tuple(skipped)
    return ValidationReport(summary=summarize(results, len(skipped)), by_source=grouped(results, skipped, "source"),
                            by_hardware=grouped(results, skipped, "hardware"), runs=results, not_expressible=skipped,
                            duplicates=tuple(duplicates))


def validate_runs(paths: Iterable[str | Path] | None = None, source: str | None = None, hardware: str | None = None,
                  *, run_set: str | None = None, user_files: bool = False,
                  progress: Callable[[int, int], None] | None = None) -> ValidationReport:
    """Load runs (the bundled ones by default), predict each expressible one, compare, summarize.

    `hardware` is a catalog name (keeps that hardware's runs) or a hardware file, e.g. a profile that
    `trainest calibrate` wrote: its hardware's runs are predicted with the file's numbers.
    `run_set` keeps one set of runs (`public`: the published runs the accuracy gates measure).
    `progress(done, total)` is called after each run (the CLI draws a progress bar with it)."""
    profile = None
    if hardware is not None and (hardware.endswith((".yaml", ".yml")) or "/" in hardware or Path(hardware).is_file()):
        from trainest.catalog import load_hardware
        profile = load_hardware(hardware)
        hardware = profile.name
    loaded = load_runs(paths, source=source, hardware=hardware, run_set=run_set, user_files=user_files)
    results: list[RunResult] = []
    skipped = list(loaded.not_expressible)
    memory: list[MemoryResult] = []
    every = loaded.cases + loaded.memory_cases
    for i, case in enumerate(every):
        try:
            if case.measurement.metric == MEMORY_ONLY_METRIC:
                memory.append(compare_memory(case, profile))
            else:
                results.append(compare(case, profile))
        except SpecError as exc:
            skipped.append(NotExpressible(case.id, case.source, case.scenario.hardware.name,
                                          f"cannot be estimated: {exc}", case.run_set))
        if progress is not None:
            progress(i + 1, len(every))
    return replace(build_report(results, skipped, loaded.duplicates), warnings=loaded.warnings,
                   profile=None if profile is None else profile.path, memory_runs=tuple(memory))


# --------------------------------------------------------------------------------------- the two bounds

def overlap_bounds(results: Iterable[RunResult]) -> dict[str, int]:
    """Where each measured step falls against the overlap policy's two bounds: below the overlapped
    prediction (`faster`), between it and the no-overlap bound (`inside`), above that (`slower`)."""
    counts = {"faster": 0, "inside": 0, "slower": 0}
    for r in results:
        if r.predicted_no_overlap_step_s is None:
            continue
        key = ("faster" if r.measured_step_s < r.predicted_step_s
               else "inside" if r.measured_step_s <= r.predicted_no_overlap_step_s else "slower")
        counts[key] += 1
    return counts
