"""One knob over a range (`trainest sweep`): the estimate, or the best plan, at each value.

The swept knob is one of SWEEPABLE (its value a range or a list); every other input is the scenario's.
Each point is the scenario with that one value changed: `estimate()` of it, or with `plan=True` the plan
search at it (a searched knob, such as tp or the micro-batch, is then fixed at the value and the other
layout knobs searched; a job knob, such as the device count or the sequence, changes the job). A
point that does not validate (a layout that does not divide, a precision the hardware lacks, a job
that fits nowhere) is kept with its reason.

Ranges: `a..b` doubles from a up to b (8..8192: 8, 16, ..., 8192), `a..b:s` steps by s (1024..4096:1024),
`a,b,c` is a list (bf16,fp8,fp4). At most MAX_POINTS points. A ZeRO range steps by one (0..3: every stage),
and sequence lengths read as --seq-len reads them (2k..8k: 2048, 4096, 8192).

Scaling efficiency (the device count swept): η(N) = (X(N) / N) / (X(N₀) / N₀), X the tokens per
second and N₀ the first point that runs: 1 is linear (ideal) scaling.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainest.errors import SpecError, head
from trainest.estimate import Estimate, host_misfit_words
from trainest.knobs import BY_NAME, CLI, PARALLEL, SHAPE, SWEEP_BY_ONE, SWEEP_RANGES, Knob
from trainest.units import parse_count, parse_length

# the knobs `sweep` varies; with --plan, those the search varies are fixed at each value through the space
SWEEPABLE = SWEEP_RANGES
MAX_POINTS = 64
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class SweepPoint:
    value: Any                     # the knob's value at this point
    estimate: Estimate | None      # None: the point does not run (see error)
    error: str = ""
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class SweepResult:
    knob: str                      # a name of SWEEPABLE
    plan: bool                     # each point is the best plan (else the estimate of the given layout)
    points: tuple[SweepPoint, ...]

    def scaling_efficiency(self) -> list[float | None]:
        """η per point when the device count is swept (module docstring); None elsewhere."""
        ok = [p for p in self.points if p.estimate is not None]
        if self.knob != "devices" or not ok:
            return [None] * len(self.points)
        ref = ok[0].estimate
        assert ref is not None
        per_device = ref.throughput.tokens_per_s_per_device
        return [None if p.estimate is None else p.estimate.throughput.tokens_per_s_per_device / per_device
                for p in self.points]


def is_range(text: Any) -> bool:
    """Whether an option value is a range or a list (the swept knob) rather than one value."""
    return isinstance(text, str) and (".." in text or "," in text)


# knobs whose values may be 0 and whose a..b ranges step by one (a stage number, not a size that doubles)
STAGE_KNOBS = SWEEP_BY_ONE


def _number(k: Knob, text: str, where: str) -> Any:
    if k.name == "tokens":
        return parse_count(text, where)
    if k.kind == "length":          # a sequence length as it is quoted: 8k = 8192, as --seq-len reads it
        return parse_length(text, where)
    if k.name in STAGE_KNOBS and text == "0":
        return 0
    value = parse_count(text, where, "8..64, 8..64:8 or 1,2,4")
    if value != int(value):
        raise SpecError(f"{head(where)}{text!r} must be a whole number")
    return int(value)


def parse_values(k: Knob, text: str) -> list[Any]:
    """The values of knob `k` that `text` names (module docstring: a..b, a..b:s or a list)."""
    where = f"--{k.name.replace('_', '-')} {text!r}"
    if k.kind == "choice":
        if ".." in text:
            raise SpecError(f"{head(where)}{k.name} takes a list of values (e.g. {','.join(k.choice_values[:3])}), "
                            f"not a range")
        values: list[Any] = [v.strip() for v in text.split(",") if v.strip()]
        bad = [v for v in values if v not in k.choice_values]
        if bad:
            raise SpecError(f"{head(where)}{bad[0]!r} is not one of {', '.join(k.choice_values)}")
    elif ".." in text:
        lo_text, _, rest = text.partition("..")
        hi_text, _, step_text = rest.partition(":")
        lo, hi = _number(k, lo_text.strip(), where), _number(k, hi_text.strip(), where)
        if k.name in STAGE_KNOBS and not step_text:
            step_text = "1"                 # 0..3: every stage
        if lo > hi or (lo <= 0 and not step_text):
            raise SpecError(f"{head(where)}the range is empty or does not double ({lo}..{hi})")
        if step_text:
            step = _number(k, step_text.strip(), where)
            if step <= 0:
                raise SpecError(f"{head(where)}the step must be positive")
            values = list(range(lo, hi + 1, step))
        else:
            values = []
            v = lo
            while v <= hi:
                values.append(v)
                v *= 2
    else:
        values = [_number(k, v.strip(), where) for v in text.split(",") if v.strip()]
    values = list(dict.fromkeys(values))
    if not values:
        raise SpecError(f"{head(where)}no value to sweep")
    if len(values) > MAX_POINTS:
        raise SpecError(f"{head(where)}{len(values)} points (at most {MAX_POINTS}); narrow the range or use a step")
    return values


def range_note(k: Knob, text: str, points: list[Any]) -> str | None:
    """A note when a doubling range `a..b` stops short of b (8..100 sweeps 8, 16, 32, 64), else None."""
    if ".." not in text or ":" in text or k.kind == "choice" or not points:
        return None
    hi = _number(k, text.partition("..")[2].strip(), f"--{k.name.replace('_', '-')} {text!r}")
    if points[-1] == hi:
        return None
    return (f"--{k.name.replace('_', '-')} {text}: a range doubles from its start, so it stops at {points[-1]} "
            f"({points[-1] * 2} is past {hi}); give a step (a..b:s) for every s-th value")


def swept_knob(values: dict[str, Any]) -> tuple[Knob, list[Any]]:
    """(the knob, its values) of the one option given as a range or list; SpecError otherwise."""
    swept = [name for name in SWEEPABLE if is_range(values.get(name))]
    if len(swept) != 1:
        given = ", ".join(f"--{n.replace('_', '-')}" for n in swept)
        raise SpecError("sweep takes one knob as a range or list, e.g. --devices 8..8192 or --precision "
                         "bf16,fp8; " + (f"got {given}" if swept else "none was given"))
    k = BY_NAME[swept[0]]
    return k, parse_values(k, values[swept[0]])


def with_value(mapping: dict[str, Any], k: Knob, value: Any) -> dict[str, Any]:
    """A copy of the scenario mapping with knob `k` set to `value` (at its path: `parallel.tp`, `seq_len`)."""
    if k.group == SHAPE:
        raise SpecError(f"{k.name}: model-shape knobs are not swept")
    out = dict(mapping)
    if k.group == PARALLEL:
        out["parallel"] = {**(out.get("parallel") or {}), k.yaml_key: value}
    else:
        out[k.yaml_key] = value
    return out


def _point_estimate(mapping: dict[str, Any], shape: dict[str, Any]) -> tuple[Estimate, tuple[str, ...]]:
    from trainest.estimate import estimate
    from trainest.scenario import scenario_from_mapping
    s = scenario_from_mapping(mapping, CLI, shape=shape)
    e = estimate(s)
    from trainest.adapter_cost import slower_than_full_warning
    from trainest.estimate import low_precision_slower_warning
    slower = tuple(w for w in (low_precision_slower_warning(e), slower_than_full_warning(e)) if w)
    return e, (() if e.memory.fits else (misfit_words(e),)) + slower


def misfit_words(e: Estimate) -> str:
    """Why a point does not fit: the device's memory, or the host's (offload)."""
    if not e.memory.host_fits and e.memory.device_fits:
        return f"does not fit in host memory: {host_misfit_words(e.memory)}"
    return f"does not fit: needs {e.memory.per_device_bytes / 2**30:.1f} GiB per device of " \
           f"{e.memory.capacity_bytes / 2**30:.1f}" + ("" if e.memory.host_fits else "; and the host memory")


def _point_plan(mapping: dict[str, Any], k: Knob, value: Any, batch_devices: int,
                shape: dict[str, Any]) -> tuple[Estimate, tuple[str, ...]]:
    from trainest import search as S
    allow = []
    if k.searched:
        word = {True: "on", False: "off"}.get(value, value) if k.name == "sequence_parallel" else value
        allow = [f"{k.name}={word}"]
    base = S.job_scenario(mapping, CLI, default_batch_devices=batch_devices, shape=shape)
    res = S.search(base, int(mapping.get("devices") or batch_devices), S.space_from_options(allow), top=1)
    return res.plans[0], ()


def sweep(mapping: dict[str, Any], k: Knob, values: list[Any], *, plan: bool = False,
          shape: dict[str, Any] | None = None, progress: Progress | None = None) -> SweepResult:
    """The estimate (or best plan) of the scenario `mapping` at each value of knob `k`."""
    # without a global batch each plan takes the default of `plan` (0.5M tokens, a multiple of the device
    # count): of the largest count swept, so that a devices sweep keeps one batch at every point
    if plan:
        from trainest import search as S
        batch_devices = max(values) if k.name == "devices" else int(mapping.get("devices")
                                                                    or S.default_devices(mapping))
    else:
        batch_devices = 0               # (each estimate takes its own defaults)
    points = []
    for i, value in enumerate(values):
        try:
            m = with_value(mapping, k, value)
            e, warnings = (_point_plan(m, k, value, batch_devices, shape or {}) if plan
                           else _point_estimate(m, shape or {}))
            points.append(SweepPoint(value, e, "", warnings))
        except SpecError as exc:
            points.append(SweepPoint(value, None, str(exc)))
        if progress is not None:
            progress(i + 1, len(values))
    return SweepResult(k.name, plan, tuple(points))
