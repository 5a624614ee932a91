"""Fit one hardware's achievable efficiencies to measured runs (`trainest calibrate`).

Method (docs/validation.md §Calibration). Parameters θ: the efficiency fractions gemm, attention,
memory, scale_up, scale_out; plus low_precision_gemm when a run uses FP8/FP4 and layer_overhead
when a run's model is small (< SMALL_MODEL_PARAMS). Each parameter is scaled by its starting value,
x_j = θ_j / θ0_j, and the fit minimises

    J(x) = (1/n) Σ_i ρ(ln(t_pred,i(x) / t_meas,i)) + λ Σ_j (x_j − 1)²

with ρ the Huber loss (r²/2 for |r| ≤ δ = HUBER_DELTA, linear beyond), so that a few runs the
model cannot represent (errors of 2x and more) do not drag every parameter towards them. t_meas,i is
the measured metric converted to an equivalent step time (`validate.step_time_s_from_metric`: every
metric is t or a constant over t) and λ = PRIOR_WEIGHT is
a weak pull towards the starting values, so that a parameter the runs do not constrain (no multi-node
run: scale_out) stays where it was instead of drifting. The minimiser is a projected
Levenberg–Marquardt: forward-difference Jacobian, damped normal equations, steps clipped to the bounds
(fractions in [MIN_FRACTION, 1]; overhead in [0, MAX_LAYER_OVERHEAD_S]). numpy only.

For speed, one call of `step.step_terms` evaluates a run at all Jacobian points at once: the
efficiency fields are numpy arrays (the model's formulas accept arrays). At scalar inputs this is
exactly `estimate(scenario).step.time_s` (tested).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainest.catalog import (
    DEFAULT_ALL_TO_ALL,
    DEFAULT_GROUPED_GEMM,
    DEFAULT_LAYER_OVERHEAD_US,
    Hardware,
    hardware_from_mapping,
    with_efficiency,
)
from trainest.choices import LOW_PRECISIONS
from trainest.errors import SpecError
from trainest.frameworks import FRAMEWORKS
from trainest.record import replace
from trainest.units import MICROSECOND, MILLISECOND, GiB, plural
from trainest.validate import (  # noqa: F401 - MISSPECIFIED_MEMORY_FACTOR re-exported
    MISSPECIFIED_MEMORY_FACTOR,
    Case,
    RunResult,
    mape_pct,
    result_for,
    step_time_s_from_metric,
)

MIN_FRACTION = 0.2                 # lowest efficiency fraction any parameter may take
MAX_FRACTION = 1.0
MAX_LAYER_OVERHEAD_S = 500e-6      # 0.5 ms per layer pass: far above any launch/sync overhead seen
SMALL_MODEL_PARAMS = 3e9           # below this, fixed per-layer overhead is a visible part of the step
PRIOR_WEIGHT = 3e-3                # λ: pull to the starting values (in units of squared log error)
HUBER_DELTA = 0.2                  # |ln(pred/meas)| beyond which a run's pull grows linearly, not quadratically
FD_STEP = 1e-3                     # forward-difference step in scaled units x
MAX_ITERATIONS = 40
TOLERANCE = 1e-5                   # stop when the objective improves by less than this (relative)
BASE_PARAMETERS = ("gemm", "attention", "memory", "scale_up", "scale_out")
MOE_PARAMETERS = ("grouped_gemm", "all_to_all")   # fitted only when runs of mixture-of-experts models are given
# parameter -> (lower, upper) bounds in the Efficiency dataclass's units (fractions; seconds). They
# keep the fit physical, so that a term the model misses is not silently absorbed by an absurd value:
#   gemm 0.45-0.92: large dense GEMMs reach 0.6-0.9 of dense peak (cuBLAS on A100/H100; this project's
#     H200 measurement 790/989 = 0.80; TPU MaxText MFUs above 0.7 need ≥ 0.8);
#   attention 0.2-0.95: the long-sequence, wide-head limit of fused attention (times the length and
#     head-width factors of step.py, ~0.75 at s = 8k, d_h = 128); FA2 reaches 0.6-0.7 of peak forward;
#   memory 0.5-0.95: streaming kernels reach 0.8-0.9 of HBM bandwidth (H200 copy 4.3/4.8 TB/s);
#   scale_up 0.4-0.95, scale_out 0.3-0.95: NCCL bus bandwidth 0.7-0.9 of link rate at large messages;
#   low_precision_gemm 0.6-1.0: FP8 GEMMs reach 0.6-0.9 of their (2x) peak relative to BF16's fraction;
#   flash2_attention 0.3-1.0: FlashAttention-2 relative to the best kernel (1 on Ampere; FA3 is
#     1.5-2x faster than FA2 on H100, Shah et al. 2024);
#   grouped_gemm 0.5-1.0: grouped (MoE expert) GEMMs against a dense GEMM of the same shape;
#   all_to_all 0.5-0.95: all-to-all kernels reach 0.7-0.95 of the link rate (DeepEP, NCCL).
BOUNDS = {"gemm": (0.45, 0.92), "attention": (MIN_FRACTION, 0.95), "memory": (0.5, 0.95),
          "scale_up": (0.4, 0.95), "scale_out": (0.3, 0.95), "low_precision_gemm": (0.6, MAX_FRACTION),
          "flash2_attention": (0.3, MAX_FRACTION),
          "layer_overhead_s": (0.0, MAX_LAYER_OVERHEAD_S),
          # host time per kernel launched from Python: 5-200 µs (eager PyTorch dispatch is ~10-20 µs per
          # operator; framework hooks, autograd Functions and checkpointing wrappers add to it)
          "host_per_kernel_s": (5e-6, 200e-6),
          # host time per micro-batch outside the kernels, where the framework synchronises there: 0-20 ms
          # (a training loop's Python per micro-batch: the batch's fetch and broadcast, masks, loss bookkeeping)
          "host_per_micro_batch_s": (0.0, 20e-3),
          # the GEMM shape factor's half dimension: 0-512 elements (on top of wave quantization)
          "gemm_half_dim": (0.0, 512.0),
          "grouped_gemm": (0.5, MAX_FRACTION), "all_to_all": (0.5, 0.95)}

Progress = Callable[[int, int], None]   # (runs evaluated, runs) of one pass of the fit


def bounds_of(name: str, hardware: Hardware) -> tuple[float, float]:
    """The physical bounds of parameter `name` on `hardware` (BOUNDS): a GEMM efficiency never above the
    best dense GEMM rate measured on the device over its peak (`Hardware.matmul_ceiling`, docs/model.md §10)."""
    lo, hi = BOUNDS[name]
    ceiling = hardware.matmul_ceiling if name == "gemm" else None
    return (lo, hi) if ceiling is None else (min(lo, ceiling), min(hi, ceiling))


RANK_TOLERANCE = 1e-3              # a singular value below this share of the largest does not count in the rank
MIN_LEVERAGE = 0.5                 # determined by the runs: at least half of it lies in the Jacobian's row space


@dataclass(frozen=True)
class FittedParameter:
    name: str
    start: float
    value: float
    constrained: bool               # False: the runs do not determine it (no run sensitive, or its direction is not
                                    # in the Jacobian's row space): it was kept at its start value
    leverage: float = 1.0           # share of the parameter's direction in the row space of the Jacobian, 0..1
    at_bound: str | None = None     # "lower" | "upper": the fit pushed it to a physical bound (BOUNDS)


@dataclass(frozen=True)
class CalibrationResult:
    hardware: Hardware              # the input hardware with the fitted efficiency
    parameters: tuple[FittedParameter, ...]
    runs: int
    mape_before_pct: float | None   # None: no run compared
    mape_after_pct: float | None
    before: tuple[RunResult, ...]
    after: tuple[RunResult, ...]
    iterations: int
    rank: int = 0                   # rank of the Jacobian of the log residuals (independent directions the runs see)
    condition_number: float = 1.0   # largest / smallest singular value of that Jacobian (inf when rank-deficient)
    fixed: tuple[str, ...] = ()     # not determined by the runs (leverage < MIN_LEVERAGE): the prior sets them
    left_out: tuple[str, ...] = ()  # runs not fitted: "id: why" (they do not fit in trainest's memory model)
    warnings: tuple[str, ...] = ()  # what the fit folds into the hardware's efficiencies, or cannot show (fit_warnings)


def huber(r):
    """Huber loss of log residuals r: r²/2 inside ±δ, δ·(|r| − δ/2) outside (δ = HUBER_DELTA)."""
    import numpy as np

    a = np.abs(r)
    return np.where(a <= HUBER_DELTA, 0.5 * r * r, HUBER_DELTA * (a - 0.5 * HUBER_DELTA))


def parameters_for(cases: Sequence[Case]) -> tuple[str, ...]:
    """The parameters the runs can inform: the base five, FP8 GEMM efficiency when a run uses FP8/FP4,
    and, when a run's model has fewer than SMALL_MODEL_PARAMS parameters (its kernels are small), the
    host time per kernel and the GEMM shape factor's half dimension, and the host time per micro-batch
    when such a run's framework synchronises at every micro-batch (`Framework.micro_batch_sync`)."""
    names = list(BASE_PARAMETERS)
    if any(c.scenario.precision in LOW_PRECISIONS for c in cases):
        names.append("low_precision_gemm")
    if any(c.scenario.attention == "flash2" for c in cases) and any(c.scenario.attention == "flash" for c in cases):
        names.append("flash2_attention")     # only separable from `attention` when both kernels appear
    small = [c for c in cases if c.scenario.model.params < SMALL_MODEL_PARAMS]
    if small:
        names += ["host_per_kernel_s", "gemm_half_dim"]
    if any(FRAMEWORKS[c.scenario.framework].micro_batch_sync for c in small):
        names.append("host_per_micro_batch_s")
    if any(c.scenario.model.moe is not None for c in cases):
        names.extend(MOE_PARAMETERS)
    return tuple(names)


def predicted_step_times_s(case: Case, hardware: Hardware, values: dict[str, Any]):
    """Predicted step time [s] of `case` on `hardware` with efficiency fields replaced by `values`
    (floats, or numpy arrays to evaluate several parameter sets in one pass)."""
    from trainest.scenario import job_of, layout_of
    from trainest.step import step_terms

    s = case.scenario
    return step_terms(job_of(s, with_efficiency(hardware, **values)), layout_of(s)).time_s


def _log_residuals(cases, measured_s, hardware, names, scale, x, progress=None):
    """ln(t_pred/t_meas) for every case (rows) at every parameter set (rows of x, shape (m, k));
    `progress(done, total)` after each case, when given."""
    import numpy as np

    x = np.atleast_2d(x)
    values = {n: scale[j] * x[:, j] for j, n in enumerate(names)}
    out = np.empty((len(cases), x.shape[0]))
    for i, c in enumerate(cases):
        out[i] = np.broadcast_to(np.asarray(predicted_step_times_s(c, hardware, values), dtype=float), (x.shape[0],))
        if progress is not None:
            progress(i + 1, len(cases))
    return np.log(out / measured_s[:, None])


def identifiability(jac) -> tuple[int, float, list[float]]:
    """(rank, condition number, leverage of each parameter) of a Jacobian of log residuals (rows: runs,
    columns: parameters in scaled units). rank = singular values ≥ RANK_TOLERANCE · the largest;
    leverage_j = Σ_{i<rank} V_ij², the share of parameter j's direction the runs see (1: determined,
    0: invisible to them)."""
    import numpy as np

    if jac.size == 0:
        return 0, float("inf"), [0.0] * jac.shape[1]
    sv, vt = np.linalg.svd(jac, full_matrices=True)[1:]
    top = float(sv[0]) if sv.size else 0.0
    rank = int(np.count_nonzero(sv >= RANK_TOLERANCE * top)) if top > 0 else 0
    k = jac.shape[1]
    cond = float(top / sv[-1]) if rank == k and sv[-1] > 0 else float("inf")
    leverage = [float(np.sum(vt[:rank, j] ** 2)) for j in range(k)]
    return rank, cond, leverage


def fit_efficiency(cases: Sequence[Case], hardware: Hardware | None = None,
                   names: Sequence[str] | None = None, prior_weight: float = PRIOR_WEIGHT,
                   unpulled: Sequence[str] = (), hold_undetermined: bool = False,
                   progress: Progress | None = None) -> CalibrationResult:
    """Fit the efficiency of `hardware` (default: the runs' own) to `cases` (see module docstring),
    and say what the runs determine (`identifiability` of the Jacobian at the solution). Directions the
    runs do not see (rank below the number of parameters: fewer independent runs than parameters, or
    parameters that move the step time together) are set by the prior pull λ, which keeps them at their
    start values: the fit is regularised, and each parameter's leverage says how much of it the runs
    determined. Refused when the runs determine nothing. `prior_weight` is λ; 0 fits the runs alone;
    `unpulled`: parameters the runs alone set (λ = 0 for them: their runs determine them, and their prior
    says nothing about the framework that ran them, e.g. the host time per kernel on the vTrain rows).
    `hold_undetermined`: the parameters the runs do not determine (leverage < MIN_LEVERAGE) are then held
    at their start values and the rest refitted (`_held_refit`), so that they are exactly the prior: what
    `trainest calibrate` does, whose table says so. The shipped fit (tools/fit_defaults.py) keeps the
    partly seen directions: with tens of runs per device and a holdout to check them they carry
    information (held, the public dense holdout MAPE goes 5.5 → 6.0 %, GB300's 5.9 → 10.7 %). `progress(done,
    total)` is called as each pass over the runs goes (the CLI's progress bar)."""
    if not cases:
        raise SpecError("calibrate: no expressible runs to fit")
    hardware = hardware or cases[0].scenario.hardware
    names = tuple(names or parameters_for(cases))
    result = _fit(cases, hardware, names, prior_weight, tuple(unpulled), progress)
    if result.rank == 0:
        raise SpecError(f"calibrate: the {len(cases)} runs do not determine any of {', '.join(names)} (no run's step "
                        f"time moves with them); add runs whose time depends on compute, memory or the network")
    undetermined = tuple(p.name for p in result.parameters if not p.constrained or p.leverage < MIN_LEVERAGE)
    if hold_undetermined and undetermined and len(undetermined) < len(names):
        result = _held_refit(cases, hardware, names, undetermined, result, prior_weight, tuple(unpulled), progress)
    return replace(result, fixed=undetermined)


def _held_refit(cases: Sequence[Case], hardware: Hardware, names: tuple[str, ...], held: tuple[str, ...],
                first: CalibrationResult, prior_weight: float, unpulled: tuple[str, ...],
                progress: Progress | None = None) -> CalibrationResult:
    """The fit again with the parameters the runs do not determine (`held`) at their start values: the
    first pass moves them along directions the runs barely see, so that "set by the prior" would not be
    true. The rank and condition number stay the first pass's (what the runs see of all `names`)."""
    kept = tuple(n for n in names if n not in held)
    second = _fit(cases, hardware, kept, prior_weight, tuple(u for u in unpulled if u in kept), progress)
    refit = {p.name: p for p in second.parameters}
    params = tuple(refit.get(p.name, replace(p, value=p.start, at_bound=None)) for p in first.parameters)
    return replace(second, parameters=params, rank=first.rank, condition_number=first.condition_number)


def _fit(cases: Sequence[Case], hardware: Hardware, names: tuple[str, ...],
         prior_weight: float, unpulled: tuple[str, ...] = (), progress: Progress | None = None) -> CalibrationResult:
    """The projected Levenberg–Marquardt fit of `names` (module docstring), with the identifiability of
    the solution."""
    import numpy as np

    cases = [replace(c, scenario=replace(c.scenario, hardware=hardware)) for c in cases]
    eff = hardware.efficiency
    start = np.array([getattr(eff, n) for n in names], dtype=float)
    scale = start.copy()
    for j, _name in enumerate(names):     # a zero overhead cannot be a scale: use the catalog default instead
        if scale[j] <= 0:
            scale[j] = DEFAULT_LAYER_OVERHEAD_US * MICROSECOND
    lo = np.array([bounds_of(n, hardware)[0] for n in names]) / scale
    hi = np.array([bounds_of(n, hardware)[1] for n in names]) / scale
    x0 = np.clip(start / scale, lo, hi)
    n, k = len(cases), len(names)
    measured_s = np.array([step_time_s_from_metric(c) for c in cases])

    pull = np.array([0.0 if name in unpulled else prior_weight for name in names])    # λ per parameter

    def objective(r_cases, x):
        return float(np.mean(huber(r_cases)) + np.sum(pull * (x - x0) ** 2))

    x = x0.copy()
    r = _log_residuals(cases, measured_s, hardware, names, scale, x, progress)[:, 0]
    cost = objective(r, x)
    damping = 1e-2
    iterations = 0
    for iterations in range(1, MAX_ITERATIONS + 1):  # noqa: B007 - reported after the loop
        # forward differences, stepping inwards at an upper bound
        h = np.where(x + FD_STEP <= hi, FD_STEP, -FD_STEP)
        points = np.vstack([x] + [x + np.eye(k)[j] * h[j] for j in range(k)])
        res = _log_residuals(cases, measured_s, hardware, names, scale, points, progress)
        r = res[:, 0]
        jac = (res[:, 1:] - r[:, None]) / h[None, :]
        # stacked least squares: rows (1/√n)·r_i and √λ·(x_j − x0_j)
        # Gauss-Newton model of the Huber loss (IRLS weights w = ψ(r)/r: 1 inside ±δ, δ/|r| outside)
        w = np.minimum(1.0, HUBER_DELTA / np.maximum(np.abs(r), 1e-300))
        a = jac.T @ (w[:, None] * jac) / n + np.diag(pull)
        g = jac.T @ (w * r) / n + pull * (x - x0)
        # active set: a parameter on a bound whose gradient pushes it outwards is held there
        held = ((x <= lo + 1e-12) & (g > 0)) | ((x >= hi - 1e-12) & (g < 0))
        free = ~held
        if not free.any():
            break
        improved = False
        while damping < 1e10:
            step = np.zeros(k)
            af = a[np.ix_(free, free)]
            step[free] = np.linalg.solve(af + damping * np.diag(np.diag(af)), -g[free])
            x_new = np.clip(x + step, lo, hi)
            r_new = _log_residuals(cases, measured_s, hardware, names, scale, x_new, progress)[:, 0]
            cost_new = objective(r_new, x_new)
            if cost_new < cost:
                improved = True
                gain = (cost - cost_new) / max(cost, 1e-300)
                x, r, cost = x_new, r_new, cost_new
                damping = max(damping / 3.0, 1e-9)
                break
            damping *= 4.0
        if not improved or gain < TOLERANCE:
            break

    return _result(cases, hardware, names, start, scale, x, lo, hi, measured_s, iterations)


def _result(cases, hardware, names, start, scale, x, lo, hi, measured_s, iterations) -> CalibrationResult:
    """The fitted hardware, each parameter (start, value, sensitivity, leverage, bound), the errors before
    and after, and the identifiability of the solution x."""
    import numpy as np

    n, k = len(cases), len(names)
    # a parameter is constrained by the data when some run's step time moves with it
    res = _log_residuals(cases, measured_s, hardware, names, scale, np.vstack([x] + [x + np.eye(k)[j] * np.where(
        x[j] + FD_STEP <= hi[j], FD_STEP, -FD_STEP) for j in range(k)]))
    steps = np.where(x + FD_STEP <= hi, FD_STEP, -FD_STEP)
    jac = (res[:, 1:] - res[:, :1]) / steps[None, :]
    sensitivity = np.max(np.abs(jac), axis=0)
    rank, cond, leverage = identifiability(jac)
    fitted = {nm: float(x[j] * scale[j]) for j, nm in enumerate(names)}
    new_hw = with_efficiency(hardware, **fitted)
    before = tuple(result_for(c, float(predicted_step_times_s(c, hardware, {}))) for c in cases)
    after = tuple(result_for(replace(c, scenario=replace(c.scenario, hardware=new_hw)),
                             float(predicted_step_times_s(c, new_hw, {}))) for c in cases)
    bound = ["lower" if x[j] <= lo[j] + 1e-9 else "upper" if x[j] >= hi[j] - 1e-9 else None for j in range(k)]
    params = tuple(FittedParameter(nm, float(start[j]), fitted[nm], bool(sensitivity[j] > 1e-6),
                                   leverage=leverage[j], at_bound=bound[j] if sensitivity[j] > 1e-6 else None)
                   for j, nm in enumerate(names))
    return CalibrationResult(hardware=new_hw, parameters=params, runs=n, mape_before_pct=mape_pct(before),
                             mape_after_pct=mape_pct(after), before=before, after=after, iterations=iterations,
                             rank=rank, condition_number=cond)


# -------------------------------------------------------------------------------- writing a profile

def _round(x: float, digits: int = 4) -> float | int:
    """`x` to `digits` significant digits; a whole number is written without `.0`."""
    y = float(f"{x:.{digits}g}")
    return int(y) if y.is_integer() else y


def efficiency_block(hardware: Hardware, *, method: str, fit_runs: int | None, fit_mape_pct: float | None,
                     fitted: bool = True) -> dict[str, Any]:
    """The `efficiency:` mapping of a hardware YAML (human units: overhead in microseconds)."""
    e = hardware.efficiency
    block: dict[str, Any] = {"gemm": _round(e.gemm), "gemm_half_dim": _round(e.gemm_half_dim),
                             "attention": _round(e.attention), "memory": _round(e.memory),
                             "scale_up": _round(e.scale_up), "scale_out": _round(e.scale_out),
                             "low_precision_gemm": _round(e.low_precision_gemm),
                             "flash2_attention": _round(e.flash2_attention),
                             "layer_overhead_us": _round(e.layer_overhead_s / MICROSECOND),
                             "host_us_per_kernel": _round(e.host_per_kernel_s / MICROSECOND),
                             "host_ms_per_micro_batch": _round(e.host_per_micro_batch_s / MILLISECOND),
                             "kernel_floor_us": _round(e.kernel_floor_s / MICROSECOND),
                             "overlap_contention": _round(e.overlap_contention),
                             "fitted": fitted, "method": method}
    if fit_runs is not None:
        block["fit_runs"] = fit_runs
    if fit_mape_pct is not None:
        block["fit_mape_pct"] = round(fit_mape_pct, 2)
    # the MoE efficiencies only where they differ from the catalog's priors (fitted on MoE runs)
    if e.grouped_gemm != DEFAULT_GROUPED_GEMM or e.all_to_all != DEFAULT_ALL_TO_ALL:
        block["grouped_gemm"] = _round(e.grouped_gemm)
        block["all_to_all"] = _round(e.all_to_all)
        if not e.moe_fitted:
            block["moe_fitted"] = False
    return block


def replace_efficiency_block(text: str, block: dict[str, Any], where: str = "hardware file") -> str:
    """`text` (a hardware YAML) with its top-level `efficiency:` block replaced by `block`; every
    other line is kept byte for byte."""
    import yaml

    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if re.match(r"efficiency:\s*(#.*)?$", ln.rstrip("\n"))), None)
    if start is None:
        raise SpecError(f"{where}: no top-level 'efficiency:' block to replace")
    end = start + 1
    while end < len(lines):
        ln = lines[end]
        if ln.strip() and not ln[0].isspace():
            break
        end += 1
    while end > start + 1 and not lines[end - 1].strip():   # keep blank lines that precede the next key
        end -= 1
    new = yaml.safe_dump({"efficiency": block}, sort_keys=False, width=120, allow_unicode=True,
                         default_flow_style=False)
    return "".join(lines[:start]) + new + "".join(lines[end:])


def profile_text(hardware: Hardware, result: CalibrationResult, runs_label: str, date: str | None = None) -> str:
    """The original hardware file's text with the fitted efficiency block; checked to load again."""
    import yaml

    path = Path(hardware.path)
    if not path.is_file():
        raise SpecError(f"calibrate: cannot read the hardware file {hardware.path!r} to copy it")
    day = date or datetime.date.today().isoformat()
    method = f"trainest calibrate on {runs_label}, {result.runs} runs, {day}"
    original = path.read_text(encoding="utf-8")
    body = "".join(ln for i, ln in enumerate(original.splitlines(keepends=True))
                   if not (ln.startswith("#") and all(x.startswith("#") for x in original.splitlines()[:i])))
    text = profile_header(hardware, result, runs_label, day) + replace_efficiency_block(
        body, efficiency_block(result.hardware, method=method, fit_runs=result.runs,
                               fit_mape_pct=result.mape_after_pct), str(path))
    hardware_from_mapping(yaml.safe_load(text), "calibrated profile")   # must load back
    return text


def profile_header(hardware: Hardware, result: CalibrationResult, runs_label: str, day: str) -> str:
    """The comment that opens a calibrated profile: what it was calibrated on, when, the error before
    and after, and what the runs did not determine (not a generated catalog file)."""
    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.1f} %"
    undetermined = (f"# Not determined by these runs (set by the prior): {', '.join(result.fixed)}.\n"
                    if result.fixed else "")
    return (f"# Calibrated profile of {hardware.name}, written by `trainest calibrate` on {day}: its efficiency block\n"
            f"# was fitted to {plural(result.runs, 'measured run')} ({runs_label}); MAPE "
            f"{pct(result.mape_before_pct)} before, "
            f"{pct(result.mape_after_pct)} after.\n"
            f"# Jacobian rank {result.rank} of {len(result.parameters)} parameters. The other facts are copied from "
            f"{Path(hardware.path).name}.\n{undetermined}"
            f"# Use it with --hardware PATH (estimate, plan) and `trainest validate --hardware PATH`.\n")


def hardware_names_of(cases: Sequence[Case]) -> list[str]:
    return sorted({c.scenario.hardware.name for c in cases})


def calibrate_runs(paths: Sequence[str], hardware: str | None = None,
                   progress: Progress | None = None) -> tuple[Hardware, CalibrationResult]:
    """Load runs files, pick one hardware (by name or a hardware YAML path), fit it (`progress` as
    `fit_efficiency`).

    Returns (the starting hardware, the result). Several hardware names without `hardware`: SpecError."""
    from trainest.catalog import load_hardware
    from trainest.validate import load_runs

    loaded = load_runs(paths, user_files=True)
    cases = list(loaded.cases)
    if hardware is not None:
        hw = load_hardware(hardware)
        cases = [c for c in cases if c.scenario.hardware.name == hw.name]
        if not cases:
            raise SpecError(f"--hardware {hardware!r}: no expressible run in {', '.join(paths)} uses {hw.name!r}; "
                            f"runs use: {', '.join(hardware_names_of(loaded.cases)) or 'none'}")
    else:
        names = hardware_names_of(cases)
        if not names:
            raise SpecError(f"no expressible runs in {', '.join(paths)} "
                            f"({len(loaded.not_expressible)} not expressible)")
        if len(names) > 1:
            raise SpecError(f"the runs use several hardware ({', '.join(names)}); choose one with --hardware")
        hw = cases[0].scenario.hardware
    cases, left_out = split_fitting(cases, hw)
    if not cases:
        raise SpecError(f"no run of {', '.join(paths)} fits in trainest's memory model, so none can be fitted: "
                        + "; ".join(left_out[:3]) + "; check their layout, zero and recompute")
    result = fit_efficiency(cases, hw, hold_undetermined=True, progress=progress)
    return hw, replace(result, left_out=tuple(left_out), warnings=tuple(fit_warnings(cases, result)))


def _counted(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} ({v} run{'s' if v != 1 else ''})" for k, v in sorted(counts.items()))


def run_kind(case: Case) -> str:
    """What a run trains beyond plain pre-training: `lora` / `qlora` fine-tuning, `offload optimizer`, ...;
    `plain training` (pre-training or a full fine-tune, on the device) for neither."""
    s = case.scenario
    parts = ([s.finetune.method] if s.finetune.method != "full" else []) + \
        ([f"offload {s.offload}"] if s.offload != "none" else [])
    return " + ".join(parts) or "plain training"


def fit_warnings(cases: Sequence[Case], result: CalibrationResult) -> list[str]:
    """Warnings about what a fit means: runs of several frameworks, or fine-tuning / offload runs mixed with
    plain pre-training, whose differences the fit folds into the one hardware's efficiencies; and a fit with
    no more runs than the parameters it sets, whose MAPE after measures the fit, not a prediction."""
    out = []
    hw = result.hardware.name
    frameworks: dict[str, int] = {}
    kinds: dict[str, int] = {}
    for c in cases:
        frameworks[c.scenario.framework] = frameworks.get(c.scenario.framework, 0) + 1
        kinds[run_kind(c)] = kinds.get(run_kind(c), 0) + 1
    if len(frameworks) > 1:
        out.append(f"the fitted runs use {len(frameworks)} frameworks: {_counted(frameworks)}; their differences "
                   f"(host dispatch, overlap, kernels) go into {hw}'s efficiencies: calibrate one framework at a time")
    if len(kinds) > 1:
        out.append(f"the fitted runs mix {_counted(kinds)}; what trainest's fine-tuning and offload terms miss goes "
                   f"into {hw}'s efficiencies: calibrate them apart")
    # what the fit moves: its determined parameters, and at least the directions the runs see (the Jacobian's
    # rank), so that a fit none of whose parameters reaches MIN_LEVERAGE (one run for seven) still says so
    free = max(len(result.parameters) - len(result.fixed), result.rank)
    if 0 < result.runs <= free:
        out.append(f"{result.runs} run{'s' if result.runs != 1 else ''} for the {free} parameter"
                   f"{'s' if free != 1 else ''} the fit sets: "
                   f"'MAPE after' measures how closely the fit matches these runs, not how well the profile "
                   f"predicts new ones; keep some runs out of the fit and compare them with "
                   f"`trainest validate --runs FILE --hardware PROFILE`")
    return out




def split_fitting(cases: Sequence[Case], hardware: Hardware) -> tuple[list[Case], list[str]]:
    """(the runs to fit, "id: why" for those left out: trainest's memory model says they need more than
    MISSPECIFIED_MEMORY_FACTOR times the device's memory). Fitting efficiencies to the step time of such a
    run would bend them to a scenario that did not run."""
    from trainest.estimate import estimate
    kept, left_out = [], []
    for c in cases:
        m = estimate(replace(c.scenario, hardware=hardware)).memory
        if m.per_device_bytes <= MISSPECIFIED_MEMORY_FACTOR * m.capacity_bytes:
            kept.append(c)
        else:
            left_out.append(f"{c.id}: does not fit in trainest's memory model (needs {m.per_device_bytes / GiB:,.0f} "
                            f"GiB per device of {m.capacity_bytes / GiB:,.0f}, more than "
                            f"{MISSPECIFIED_MEMORY_FACTOR:g}x)")
    return kept, left_out
