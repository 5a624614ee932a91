"""A measured trace against the model, class by class, and the hardware's efficiencies fitted to it
(`trainest calibrate --trace`, docs/model.md §17.3).

Measured: per step of the trace (reader.find_steps), each kernel's duration summed by model class
(classify.RULES), the device's idle time (the step's kernel span less the union of its kernels), and the share of
communication time that ran while a compute kernel ran (the overlap). Predicted: the same classes from the step
the model composes for the stated scenario (`step_terms` and its parts: every op of the layer passes × layers ×
micro-batches by its class, each collective in full, hidden or not, by kind; idle = bubble + overhead), or, for a
profile of a few layers (`layers`), those layers' passes of one micro-batch.

The fit: efficiency parameters θ scaled by their start values, x = θ/θ0, minimising
Σ_c ln(t_pred,c(x)/t_meas,c)² + λ Σ_j (x_j − 1)² over the classes c the trace measures, with the projected
Levenberg–Marquardt of trainest/calibrate.py's method (forward-difference Jacobian evaluated in one array pass of
the model, steps clipped to `calibrate.bounds_of`), and the identifiability of the solution
(`calibrate.identifiability`): a parameter whose direction the classes do not see is held at its start value and
reported as not constrained.
"""

from __future__ import annotations

from typing import Any

from trainest.calibrate import MIN_LEVERAGE, FittedParameter, bounds_of, identifiability
from trainest.catalog import Hardware, with_efficiency
from trainest.choices import LOW_PRECISIONS
from trainest.errors import SpecError
from trainest.layout import Job, Layout, Num
from trainest.record import NamedTuple
from trainest.scenario import Scenario, job_of, layout_of
from trainest.step import step_terms
from trainest.step.mtp import mtp_ops
from trainest.step.roofline import Op
from trainest.trace.classify import MODEL_CLASSES, UNCLASSIFIED, model_class
from trainest.trace.reader import PHASES, Kernel, Trace, Window, find_steps, union_intervals

IDLE = "idle"
COMM_CLASSES = ("collective", "all_to_all", "send_recv")
COMPUTE_CLASSES = ("gemm", "grouped_gemm", "attention", "memory_bound", "optimizer")
PHASE_CLASSES = ("gemm", "grouped_gemm", "attention", "memory_bound")   # compared pass by pass where a trace says
MIN_CLASSIFIED_SHARE = 0.95        # below this share of kernel time classified the report warns
OFF_FACTOR = 2.0                   # a class measured more than this factor off the prediction: the scenario mismatches
PRIOR_WEIGHT = 1e-6                # λ: a class measures its parameter directly; the pull only steadies the solver
MAX_ITERATIONS = 60
FD_STEP = 1e-4
TOLERANCE = 1e-12
# what each efficiency parameter moves, for the report (the fit itself reads the model)
PARAMETERS = ("gemm", "low_precision_gemm", "attention", "memory", "scale_up", "scale_out", "grouped_gemm",
              "all_to_all", "host_per_kernel_s")


class Measured(NamedTuple):
    """One trace (one rank), per step [s]: class sums, idle, overlap, over how many steps."""

    path: str
    steps: int
    how: str                        # how the steps were found
    step_s: float                   # mean kernel span of a step
    classes: dict[str, float]       # model class -> seconds per step (kernel durations)
    idle_s: float                   # the device idle within a step's span
    comm_overlap: float             # share of communication kernel time that ran beside compute kernels (0..1)
    classified_share: float         # share of kernel time classified
    unclassified: tuple[tuple[str, float], ...]     # the largest unclassified kernels (name, s per step)
    has_backward: bool
    rank: int | None
    # phase (forward | backward) -> compute class -> seconds per step, where the trace says which pass launched
    # each kernel (reader.kernel_phases); empty where it does not
    phases: dict[str, dict[str, float]] = {}


def _covered_s(a: float, b: float, merged: list[tuple[float, float]], lo: int) -> tuple[float, int]:
    """Length of [a, b] inside the merged intervals, scanning from index lo (a non-decreasing)."""
    while lo < len(merged) and merged[lo][1] <= a:
        lo += 1
    total, i = 0.0, lo
    while i < len(merged) and merged[i][0] < b:
        total += max(0.0, min(b, merged[i][1]) - max(a, merged[i][0]))
        i += 1
    return total, lo


def _window_stats(w: Window) -> tuple[dict[str, float], float, float, float, dict[str, float]]:
    """(class sums, idle, communication overlapped with compute, communication, unclassified by name) of a step."""
    classes: dict[str, float] = {}
    unclassified: dict[str, float] = {}
    comm: list[Kernel] = []
    compute: list[tuple[float, float]] = []
    for k in w.kernels:
        c = model_class(k.name)
        if c == IDLE:      # a kernel that waits on the other ranks (classify: ep_notify): its time is idle time
            continue
        classes[c] = classes.get(c, 0.0) + k.duration_s
        if c == UNCLASSIFIED:
            unclassified[k.name] = unclassified.get(k.name, 0.0) + k.duration_s
        elif c in COMM_CLASSES:
            comm.append(k)
        elif c in COMPUTE_CLASSES:
            compute.append((k.start_s, k.end_s))
    busy = sum(b - a for a, b in union_intervals([(k.start_s, k.end_s) for k in w.kernels
                                                  if model_class(k.name) != IDLE]))
    merged, lo, overlapped = union_intervals(compute), 0, 0.0
    for k in sorted(comm, key=lambda k: k.start_s):
        part, lo = _covered_s(k.start_s, k.end_s, merged, lo)
        overlapped += part
    return classes, max(w.span_s - busy, 0.0), overlapped, sum(k.duration_s for k in comm), unclassified


def _phase_sums(w: Window) -> dict[str, dict[str, float]]:
    """phase -> class -> seconds of a step's compute kernels whose pass the trace says (PHASE_CLASSES)."""
    out: dict[str, dict[str, float]] = {}
    for k in w.kernels:
        c = model_class(k.name)
        if k.phase in PHASES and c in PHASE_CLASSES:
            out.setdefault(k.phase, {})
            out[k.phase][c] = out[k.phase].get(c, 0.0) + k.duration_s
    return out


def measure(trace: Trace) -> Measured:
    """The per-step class sums of a trace (mean over its steps), and by pass where the trace says."""
    how, windows = find_steps(trace)
    n = float(len(windows))
    classes: dict[str, float] = {}
    unclassified: dict[str, float] = {}
    phases: dict[str, dict[str, float]] = {}
    idle = overlapped = comm = span = 0.0
    for w in windows:
        for phase, sums in _phase_sums(w).items():
            for k, v in sums.items():
                phases.setdefault(phase, {})
                phases[phase][k] = phases[phase].get(k, 0.0) + v / n
        c, i, o, t, u = _window_stats(w)
        for k, v in c.items():
            classes[k] = classes.get(k, 0.0) + v / n
        for k, v in u.items():
            unclassified[k] = unclassified.get(k, 0.0) + v / n
        idle, overlapped, comm, span = idle + i / n, overlapped + o, comm + t, span + w.span_s / n
    total = sum(classes.values())
    top = tuple(sorted(unclassified.items(), key=lambda kv: -kv[1])[:5])
    return Measured(path=trace.path, steps=len(windows), how=how, step_s=span, classes=classes, idle_s=idle,
                    comm_overlap=overlapped / comm if comm > 0 else 0.0,
                    classified_share=1.0 - classes.get(UNCLASSIFIED, 0.0) / total if total > 0 else 0.0,
                    unclassified=top, has_backward=trace.has_backward, rank=trace.rank, phases=phases)


def _add(out: dict[str, Any], cls: str, value: Num) -> None:
    out[cls] = out.get(cls, 0.0) + value


def _layer_op_passes(lp: Any, count: Num = 1.0) -> list[tuple[Op, Num, str]]:
    """(op, times it runs, pass) of a layer pass's ops: its forward and backward ops, and each recomputed group's
    (× its mask) in the backward, where recomputation runs; none where the pass keeps no ops."""
    ops = lp.ops
    if ops is None:
        return []
    out = [(op, count, _pass_of(op.phase)) for op in list(ops.forward) + list(ops.backward)]
    for group in ops.recomputed:
        out += [(op, count * group.mask, "backward") for op in group.ops]
    return out


def _step_op_passes(p: Any) -> list[tuple[Op, Num, str]]:
    """(op, times it runs, pass) of a step's compute ops on its slowest stage: the layer passes × layers ×
    micro-batches, and on the last stage the logits and the MTP modules × micro-batches."""
    m, last = p.micro_batches, p.last_is_max
    head = list(p.logits) + ([] if p.mtp is None else mtp_ops(p.mtp, p.logits))
    return _layer_op_passes(p.layer, p.layers * m) + [(op, m * last, _pass_of(op.phase)) for op in head]


def predicted_classes(job: Job, layout: Layout, layers: float | None = None) -> dict[str, Any]:
    """Seconds per step by model class (module docstring) of `job` under `layout`, floats or arrays (efficiency
    fields as arrays); `layers`: the classes of that many layer passes (forward and backward) of one micro-batch
    only (a MoE model's MoE layers)."""
    from trainest.step.compose import layer_terms
    terms = step_terms(job, layout)
    p = terms.parts
    if p is None:
        raise ValueError("step_terms returned no parts")
    out: dict[str, Any] = {}
    if layers is not None:
        blocks = dict(layer_terms(job, layout).mean.parts)
        block = blocks.get("moe") or next(iter(blocks.values()))
        for op, count, _ in _layer_op_passes(block.lp, layers):
            _add(out, model_class(op.name), op.time_s * count)
        _add(out, "collective", block.tp_total_s * layers)
        _add(out, "all_to_all", block.ep_total_s * layers)
        _add(out, "send_recv", p.cp.total_s * layers)
        return out
    m, n = p.micro_batches, p.layers
    for op, count, _ in _step_op_passes(p):
        _add(out, model_class(op.name), op.time_s * count)
    _add(out, "optimizer", terms.optimizer_s)
    dp = p.dp
    _add(out, "collective", (p.tp_total_s * n + p.head_tp_s + p.z3_s) * m + dp.reduce_s + dp.gather_s + dp.replica_s
         + layout.z2 * (m - 1.0) * dp.zero2_rs_s + p.tied_s)
    _add(out, "send_recv", (p.cp.total_s * n + p.pp_s) * m)
    _add(out, "all_to_all", (p.ep_total_s * n + p.mtp_ep_s) * m)
    if p.offload is not None:
        off = p.offload
        _add(out, "host_copy", off.grads_down_s + off.fetch_s + off.activations_s + off.weights_up_s)
    _add(out, IDLE, terms.bubble_s + terms.overhead_s)
    return out


def _pass_of(phase: str) -> str:
    """The pass an op of `phase` runs in: recomputation happens in the backward."""
    return "forward" if phase == "forward" else "backward"


def predicted_phases(job: Job, layout: Layout, layers: float | None = None) -> dict[str, dict[str, float]]:
    """phase -> class -> seconds per step of the compute classes PHASE_CLASSES, as `predicted_classes` counts them
    (the layer passes and the logits; recomputed ops in the backward): what a trace's kernels are compared with pass
    by pass."""
    from trainest.step.compose import layer_terms
    if layers is not None:
        blocks = dict(layer_terms(job, layout).mean.parts)
        passes = _layer_op_passes((blocks.get("moe") or next(iter(blocks.values()))).lp, layers)
    else:
        p = step_terms(job, layout).parts
        if p is None:
            raise ValueError("step_terms returned no parts")
        passes = _step_op_passes(p)
    out: dict[str, dict[str, float]] = {ph: {} for ph in PHASES}
    for op, count, ph in passes:
        c = model_class(op.name)
        if c in PHASE_CLASSES:
            out[ph][c] = out[ph].get(c, 0.0) + float(op.time_s * count)
    return out


class PhaseRow(NamedTuple):
    """One compute class in one pass: measured and predicted seconds per step."""

    phase: str
    name: str
    measured_s: float
    predicted_s: float

    @property
    def ratio(self) -> float | None:
        """measured / predicted (None where nothing is predicted)."""
        return self.measured_s / self.predicted_s if self.predicted_s > 0 else None


def phase_rows(measured: Measured, predicted: dict[str, dict[str, float]]) -> list[PhaseRow]:
    """The classes measured or predicted in each pass, where the trace says which pass launched its kernels."""
    if not measured.phases:
        return []
    return [PhaseRow(ph, c, measured.phases.get(ph, {}).get(c, 0.0), predicted.get(ph, {}).get(c, 0.0))
            for ph in PHASES for c in PHASE_CLASSES
            if measured.phases.get(ph, {}).get(c, 0.0) > 0 or predicted.get(ph, {}).get(c, 0.0) > 0]


class ClassRow(NamedTuple):
    name: str
    measured_s: float
    predicted_s: float
    bound: str                      # compute | memory | network | host link | host/idle

    @property
    def ratio(self) -> float | None:
        """measured / predicted (None where nothing is predicted)."""
        return self.measured_s / self.predicted_s if self.predicted_s > 0 else None


BOUND_OF = {"gemm": "compute", "grouped_gemm": "compute", "attention": "compute", "memory_bound": "memory",
            "optimizer": "memory", "collective": "network", "all_to_all": "network", "send_recv": "network",
            "host_copy": "host link", IDLE: "host / schedule", UNCLASSIFIED: "-"}


def class_rows(measured: Measured, predicted: dict[str, float], with_idle: bool) -> list[ClassRow]:
    names = [c for c in (*MODEL_CLASSES, *((IDLE,) if with_idle else ()), UNCLASSIFIED)
             if measured.classes.get(c, 0.0) > 0 or float(predicted.get(c, 0.0)) > 0
             or (c == IDLE and measured.idle_s > 0)]
    rows = []
    for c in names:
        meas = measured.idle_s if c == IDLE else measured.classes.get(c, 0.0)
        rows.append(ClassRow(c, meas, float(predicted.get(c, 0.0)), BOUND_OF[c]))
    return rows


GEMM_PAIR = ("gemm", "grouped_gemm")
JOINT = "+"                         # a class of the fit that sums classes names cannot tell apart


def joint_gemm_row(rows: list[ClassRow]) -> ClassRow | None:
    """The dense and the grouped GEMMs as one class, where each is off by more than OFF_FACTOR in opposite
    directions and their sum is not: a framework may run some expert GEMMs as dense kernels (DeepGEMM's per-expert
    weight gradients in DeepSeek's trace), which kernel names cannot tell from the dense layers' GEMMs."""
    by = {r.name: r for r in rows}
    if not all(n in by and by[n].ratio is not None for n in GEMM_PAIR):
        return None
    a, b = (by[n] for n in GEMM_PAIR)
    if a.ratio is None or b.ratio is None:      # (checked above; for the type checker)
        return None
    meas, pred = a.measured_s + b.measured_s, a.predicted_s + b.predicted_s
    split = (a.ratio > OFF_FACTOR and b.ratio < 1.0 / OFF_FACTOR) or (b.ratio > OFF_FACTOR and a.ratio < 1 / OFF_FACTOR)
    if not split or not 1.0 / OFF_FACTOR <= meas / pred <= OFF_FACTOR:
        return None
    return ClassRow(JOINT.join(GEMM_PAIR), meas, pred, "compute")


def mismatch_warnings(rows: list[ClassRow], measured: Measured, layers: float | None) -> list[str]:
    """What the trace says that the fit cannot use, or that says the scenario is not what ran."""
    out = []
    if not measured.has_backward:
        out.append(f"{measured.path}: no backward pass in the trace (an inference or forward-only profile?): the "
                   f"classes are compared with a training step's; nothing is fitted")
    if measured.classified_share < MIN_CLASSIFIED_SHARE:
        names = ", ".join(n[:60] for n, _ in measured.unclassified[:3])
        out.append(f"{measured.path}: only {measured.classified_share:.0%} of the kernel time is classified "
                   f"(largest unclassified: {names})")
    joint = joint_gemm_row(rows)
    if joint is not None:
        both = joint.measured_s / joint.predicted_s
        out.append(f"classes gemm and grouped_gemm: measured {rows_ratio(rows, 'gemm'):.2f}x and "
                   f"{rows_ratio(rows, 'grouped_gemm'):.2f}x the prediction, their sum {both:.2f}x: the trace runs "
                   f"some expert GEMMs as dense kernels (names cannot tell them apart); the GEMMs are fitted as one "
                   f"class")
    for r in rows:
        if r.name in (UNCLASSIFIED, IDLE) or r.measured_s <= 0 or (joint is not None and r.name in GEMM_PAIR):
            continue
        if r.predicted_s <= 0:
            out.append(f"class {r.name}: {r.measured_s * 1e3:.3g} ms measured per step, none predicted: the scenario "
                       f"does not match the trace (its layout or model has no such kernels)")
        elif r.ratio is not None and not 1.0 / OFF_FACTOR <= r.ratio <= OFF_FACTOR:
            out.append(f"class {r.name}: measured {r.ratio:.2f}x the prediction (off by more than {OFF_FACTOR:g}x): "
                       f"the scenario may not match the trace{'' if layers is None else ' or --trace-layers'}; "
                       f"this class is not fitted")
    return out


def rows_ratio(rows: list[ClassRow], name: str) -> float:
    return next(r.ratio for r in rows if r.name == name and r.ratio is not None)


def fit_classes(s: Scenario, rows: list[ClassRow], layers: float | None,
                hardware: Hardware | None = None) -> tuple[Hardware, tuple[FittedParameter, ...], int, float]:
    """(fitted hardware, parameters, rank, condition number) of the efficiencies fitted to the classes whose
    measured and predicted times are both positive and within OFF_FACTOR (module docstring)."""
    import numpy as np

    hw = hardware or s.hardware
    joint = joint_gemm_row(rows)
    if joint is not None:
        rows = [r for r in rows if r.name not in GEMM_PAIR] + [joint]
    used = [r for r in rows if r.name not in (UNCLASSIFIED,) and r.measured_s > 0 and r.predicted_s > 0
            and r.ratio is not None and 1.0 / OFF_FACTOR <= r.ratio <= OFF_FACTOR]
    if not used:
        raise SpecError("calibrate --trace: no class of the trace is both measured and predicted within "
                        f"{OFF_FACTOR:g}x: nothing to fit (check the scenario options against the trace)")
    # FP8/FP4 GEMMs run at gemm × low_precision_gemm: the trace's GEMMs fit the low-precision factor only
    low = s.precision in LOW_PRECISIONS
    names = [n for n in PARAMETERS if (n != "low_precision_gemm" or low) and (n != "gemm" or not low)
             and float(getattr(hw.efficiency, n)) > 0]
    if s.model.moe is None:
        names = [n for n in names if n not in ("grouped_gemm", "all_to_all")]
    start = np.array([float(getattr(hw.efficiency, n)) for n in names])
    lo = np.array([bounds_of(n, hw)[0] for n in names]) / start
    hi = np.array([bounds_of(n, hw)[1] for n in names]) / start
    meas = np.array([r.measured_s for r in used])
    job0, layout = job_of(s), layout_of(s)

    def residuals(x):
        x = np.atleast_2d(x)
        values = {n: start[j] * x[:, j] for j, n in enumerate(names)}
        job = job0._replace(hardware=with_efficiency(hw, **values))
        pred = predicted_classes(job, layout, layers)
        cols = [np.broadcast_to(np.asarray(sum(pred.get(n, 0.0) for n in r.name.split(JOINT)), dtype=float),
                                (x.shape[0],)) for r in used]
        return np.log(np.maximum(np.array(cols), 1e-300) / meas[:, None])

    x = np.clip(np.ones(len(names)), lo, hi)
    lam, mu = PRIOR_WEIGHT, 1e-3
    k = len(names)

    def cost(r, xv):
        return float(np.sum(r ** 2) + lam * np.sum((xv - 1.0) ** 2))

    jac = np.zeros((len(used), k))
    for _ in range(MAX_ITERATIONS):
        pts = np.vstack([x] + [x + FD_STEP * np.eye(k)[j] for j in range(k)])
        r_all = residuals(pts)
        r0 = r_all[:, 0]
        jac = (r_all[:, 1:] - r0[:, None]) / FD_STEP
        c0 = cost(r0, x)
        a = jac.T @ jac + lam * np.eye(k)
        g = jac.T @ r0 + lam * (x - 1.0)
        improved = False
        for _ in range(12):
            step = np.linalg.solve(a + mu * np.diag(np.diag(a) + 1e-12), -g)
            x_new = np.clip(x + step, lo, hi)
            c_new = cost(residuals(x_new)[:, 0], x_new)
            if c_new < c0:
                x, mu, improved = x_new, max(mu / 10.0, 1e-12), True
                break
            mu *= 10.0
        if not improved or abs(c0 - c_new) <= TOLERANCE * max(c0, 1e-30):
            break
    rank, cond, leverage = identifiability(jac)
    params = []
    values = {}
    for j, n in enumerate(names):
        seen = leverage[j] >= MIN_LEVERAGE and bool(np.any(jac[:, j] != 0))
        value = float(start[j] * x[j]) if seen else float(start[j])
        values[n] = value
        bound = "lower" if seen and x[j] <= lo[j] * (1 + 1e-9) else "upper" if seen and x[j] >= hi[j] * (1 - 1e-9) \
            else None
        params.append(FittedParameter(n, float(start[j]), value, seen, leverage[j], bound))
    return with_efficiency(hw, **values), tuple(params), rank, cond
