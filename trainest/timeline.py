"""The predicted step as a timeline (docs/model.md §17, `trainest estimate --timeline FILE.json`).

`step_timeline(scenario)` lays out what `step.step_terms` composed for one device of the slowest
pipeline stage as slices on tracks, one track per stream as the model has them: compute (every op of
every layer pass of every micro-batch, the logits, the optimizer, the pipeline's fill and drain, the
launch overhead), the tensor-, context- and expert-parallel collectives, the data-parallel (and ZeRO-3)
collectives, the pipeline sends, the host's dispatch and the offload copies.

The layout is the model's accounting drawn in time, not a simulation: the slices marked `critical`
tile [0, step time] without gap or overlap and each counts in one breakdown term (compute, memory,
communication, bubble, overhead, offload), so the critical path is the reported step time and the
per-term sums are its breakdown exactly (tests/test_timeline.py). Hidden traffic (what overlap hides)
is drawn on its stream ending where its exposed part begins, and the host's launches from the start of
each pass; neither is on the critical path. The micro-batches run in 1F1B order (warm-up forwards on the
first stage, none on the last); the bubble is the model's total, drawn half as fill and half as drain.
A model with two kinds of layer is drawn as its mean layer (docs/model.md §15.4), as the step composes it.
"""

from __future__ import annotations

import math

from trainest.layout import Job, Layout
from trainest.record import NamedTuple
from trainest.scenario import Scenario, job_of, layout_of
from trainest.step import StepTerms, step_terms
from trainest.step.compose import StepParts
from trainest.step.kernels import host_layer_s
from trainest.step.moe import expert_host_layer_s
from trainest.step.mtp import mtp_ops
from trainest.step.roofline import Op

# tracks (streams), in the order a viewer shows them
COMPUTE, TP_STREAM, CP_STREAM, EP_STREAM, DP_STREAM, PP_STREAM, HOST, OFFLOAD = (
    "compute", "tensor-parallel comm", "context-parallel comm", "expert-parallel comm", "data-parallel comm",
    "pipeline send/recv", "host dispatch", "offload copies")
TRACKS = (COMPUTE, TP_STREAM, CP_STREAM, EP_STREAM, DP_STREAM, PP_STREAM, HOST, OFFLOAD)
# what a slice off the critical path counts as
HIDDEN = "hidden"
HIDDEN_LANE = " (overlapped)"       # the lane of a stream that holds its hidden traffic
ROUNDING = 1e-12                    # a residual of the step's sums below this share of the step is rounding
TERMS = ("compute", "memory", "communication", "bubble", "overhead", "offload")


class Slice(NamedTuple):
    """One operation on one track [s, FLOP, B]."""

    name: str
    track: str
    start_s: float
    duration_s: float
    term: str                   # the breakdown term it counts in (TERMS), or HIDDEN off the critical path
    phase: str = "step"         # forward | backward | recompute | step
    micro_batch: int | None = None
    layer: int | None = None
    flops: float = 0.0
    bytes: float = 0.0
    bound: str = "-"            # compute | memory | network | host | -

    @property
    def critical(self) -> bool:
        return self.term != HIDDEN

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


class Timeline(NamedTuple):
    """The slices of one predicted step and the terms they were drawn from."""

    slices: tuple[Slice, ...]
    step_s: float
    terms: dict[str, float]     # the breakdown (StepResult's compute_s ... offload_s, by term)
    micro_batches: int
    layers: float               # layers of the slowest stage
    schedule: str               # 1f1b | interleaved | dualpipe | none
    stage: str                  # the stage drawn, the slowest: first | last (with the logits) | only (no pipeline)


class _Cursor:
    """Lays critical slices end to end on the step's path; hidden ones over the work that hides them."""

    def __init__(self) -> None:
        self.now = 0.0
        self.out: list[Slice] = []
        self.track_end: dict[str, float] = {}

    def put(self, name: str, track: str, duration_s: float, term: str, **kw) -> None:
        if duration_s <= 0.0:
            return
        self.out.append(Slice(name, track, self.now, duration_s, term, **kw))
        self.now += duration_s
        self.track_end[track] = self.now

    def beside(self, name: str, track: str, start_s: float, duration_s: float, **kw) -> None:
        """A slice off the critical path from `start_s`, or where the track's last one ends."""
        if duration_s <= 0.0:
            return
        start = max(start_s, self.track_end.get(track, 0.0))
        self.out.append(Slice(name, track, start, duration_s, HIDDEN, **kw))
        self.track_end[track] = start + duration_s

    def hide(self, name: str, track: str, region: tuple[float, float], hidden_s: float, at_end: bool, **kw) -> None:
        """The hidden part of a collective (or copy) over the work `region` that hides it: ending with the region
        (`at_end`, a reduction behind the backward) or starting with it (a prefetch)."""
        a, b = region
        if hidden_s <= 0.0:
            return
        lane = track + HIDDEN_LANE          # its own lane: hidden traffic overlaps the stream's exposed slices in time
        start = max(b - hidden_s if at_end else a, self.track_end.get(lane, 0.0))
        self.out.append(Slice(name + " (hidden)", track, start, hidden_s, HIDDEN, **kw))
        self.track_end[lane] = start + hidden_s


def _op_slice(c: _Cursor, op: Op, weight: float, mb: int, layer: int | None, phase: str) -> None:
    cs, ms = float(op.compute_s) * weight, float(op.memory_s) * weight
    compute_bound = cs >= ms            # as Op.compute_bound_s: the step's sums count it so
    c.put(op.name, COMPUTE, max(cs, ms), "compute" if compute_bound else "memory", phase=phase, micro_batch=mb,
          layer=layer, flops=float(op.flops) * weight, bytes=float(op.bytes) * weight,
          bound="compute" if compute_bound else "memory")


class _PerLayer(NamedTuple):
    """What one layer pass adds besides its ops, per micro-batch [s]: (forward, backward) pairs."""

    overhead: tuple[float, float]
    tp: tuple[float, float, float, float]      # exposed fwd, exposed bwd, total fwd, total bwd
    cp: tuple[float, float, float, float]
    ep: tuple[float, float, float, float]
    host: tuple[float, float]
    fwd_share: float                            # the forward's share of the pass's device time


def _split(value: float, share_fwd: float) -> tuple[float, float]:
    return value * share_fwd, value * (1.0 - share_fwd)


def _per_layer(job: Job, layout: Layout, terms: StepTerms, p: StepParts) -> _PerLayer:
    lp, m, n = p.layer, float(p.micro_batches), float(p.layers)
    fwd, bwd = float(lp.fwd_c + lp.fwd_m), float(lp.compute_s + lp.memory_s - lp.fwd_c - lp.fwd_m)
    share = fwd / (fwd + bwd) if fwd + bwd > 0 else 0.5
    host_excess = float(terms.layers_host_wait_s) / (m * n) if n > 0 else 0.0
    overhead = float(lp.overhead_s + lp.floor_s) + host_excess

    def comm(exposed: float, total: float) -> tuple[float, float, float, float]:
        return (*_split(exposed, share), *_split(total, share))

    host = float(host_layer_s(job, layout) + expert_host_layer_s(job, layout))
    return _PerLayer(overhead=_split(overhead, share), tp=comm(float(p.tp_exposed_s), float(p.tp_total_s)),
                     cp=comm(float(p.cp.exposed_s), float(p.cp.total_s)),
                     ep=comm(float(p.ep_exposed_s), float(p.ep_total_s)), host=_split(host, share),
                     fwd_share=share)


def _layer_weights(layers: float) -> list[float]:
    """Each drawn layer's weight: 1 for whole layers, the fraction for a last partial one."""
    whole = int(math.floor(layers + 1e-9))
    rest = layers - whole
    return [1.0] * whole + ([rest] if rest > 1e-9 else [])


def _pass(c: _Cursor, p: StepParts, per: _PerLayer, mb: int, backward: bool) -> tuple[float, float]:
    """One micro-batch's forward or backward through the stage's layers; returns the pass's span."""
    ops = p.layer.ops
    i = 1 if backward else 0
    phase = "backward" if backward else "forward"
    first = c.now
    for layer, w in enumerate(_layer_weights(float(p.layers))):
        start = c.now
        c.beside("launch", HOST, start, per.host[i] * w, phase=phase, micro_batch=mb, layer=layer, bound="host")
        if ops is not None:
            run: list[tuple[Op, str]] = []
            if backward:
                for group in ops.recomputed:
                    if float(group.mask):
                        run += [(o, "recompute") for o in group.ops]
                run += [(o, "backward") for o in ops.backward]
            else:
                run += [(o, "forward") for o in ops.forward]
            for op, ph in run:
                if float(op.time_s) > 0:
                    _op_slice(c, op, w, mb, layer, ph)
        ops_region = (start, c.now)
        c.put("layer overhead", COMPUTE, per.overhead[i] * w, "overhead", phase=phase, micro_batch=mb, layer=layer,
              bound="host")
        for name, track, v in (("tp.collectives", TP_STREAM, per.tp), ("cp.kv_ring", CP_STREAM, per.cp),
                               ("ep.all_to_all", EP_STREAM, per.ep)):
            kw = {"phase": phase, "micro_batch": mb, "layer": layer, "bound": "network"}
            c.hide(name, track, ops_region, max(v[2 + i] - v[i], 0.0) * w, at_end=True, **kw)
            c.put(name, track, v[i] * w, "communication", **kw)
    return first, c.now


def _order(m: int, p: StepParts, layout: Layout) -> list[tuple[int, bool]]:
    """(micro-batch, is backward) in 1F1B order on the drawn stage: the first stage warms up with
    p − 1 forwards, the last (with the logits) with none."""
    pp = int(float(layout.pp))
    warm = 0 if pp <= 1 or float(p.last_is_max) > 0 else min(pp - 1, m)
    if pp <= 1:
        return [(i, b) for i in range(m) for b in (False, True)]
    order = [(i, False) for i in range(warm)]
    f, b = warm, 0
    while b < m:
        if f < m:
            order.append((f, False))
            f += 1
        order.append((b, True))
        b += 1
    return order


def _micro_batch_rest(terms: StepTerms, p: StepParts, per: _PerLayer, mtp: list[Op]) -> dict[str, float]:
    """Per micro-batch, what lies outside the layers' ops [s]: the residuals of the step's own sums
    (the logits on the last stage, the MTP modules, the head's host time and collectives)."""
    lp, m, n = p.layer, float(p.micro_batches), float(p.layers)
    logits_c = sum(float(o.compute_bound_s) for o in p.logits)
    logits_t = sum(float(o.time_s) for o in p.logits)
    last = float(p.last_is_max)
    mtp_c = sum(float(o.compute_bound_s) for o in mtp)
    mtp_t = sum(float(o.time_s) for o in mtp)
    comp = float(terms.compute_s) / m - n * float(lp.compute_s) - last * (logits_c + mtp_c)
    mem = ((float(terms.memory_s) - float(terms.optimizer_s)) / m - n * float(lp.memory_s)
           - last * (logits_t - logits_c + mtp_t - mtp_c))
    over = float(terms.overhead_s) / m - n * sum(per.overhead)
    # rounding of the step's own sums (no MTP, no head host time) is no slice
    floor = ROUNDING * float(terms.time_s) / m
    return {k: v if v > floor else 0.0 for k, v in (("compute", comp), ("memory", mem), ("overhead", over))}


class _Hidden(NamedTuple):
    """Per micro-batch pass, the step-level traffic that hides behind it [s]: (hidden, exposed) pairs."""

    zero2: tuple[float, float]          # ZeRO-2's reduce-scatter of each micro-batch but the last
    offload: dict[str, tuple[float, float]]     # host-link copies per pass (hidden only; exposed at the tail)


def _hidden_parts(p: StepParts, layout: Layout) -> _Hidden:
    m = float(p.micro_batches)
    rs_total = float(layout.z2) * (m - 1.0) * float(p.dp.zero2_rs_s)
    rs_exposed = float(p.dp_exposed.zero2_s)
    each = 1.0 / (m - 1.0) if m > 1 else 0.0
    off: dict[str, tuple[float, float]] = {}
    if p.offload is not None:
        o = p.offload
        off = {"offload.grads_down": (0.0, max(float(o.grads_down_s - o.grads_exposed_s), 0.0) / m),
               "offload.weights_fetch": (max(float(o.fetch_s - o.fetch_exposed_s), 0.0) / (2 * m),) * 2,
               "offload.activations": (max(float(o.activations_s - o.activations_exposed_s), 0.0) / (2 * m),) * 2}
    return _Hidden(zero2=(max(rs_total - rs_exposed, 0.0) * each, rs_exposed * each), offload=off)


def _micro_batch(c: _Cursor, p: StepParts, per: _PerLayer, rest: dict[str, float], mb: int, backward: bool,
                 hid: _Hidden, mtp: list[Op]) -> None:
    """One micro-batch's forward or its backward on the stage, with what comes with it."""
    phase = "backward" if backward else "forward"
    half = 0.5                  # the head's and the MTP modules' work, the sends: half with each pass
    kw = {"phase": phase, "micro_batch": mb}
    net = {"bound": "network", **kw}
    m = int(round(float(p.micro_batches)))
    if not backward:
        c.put("embedding/loss host", COMPUTE, rest["overhead"] * half, "overhead", bound="host", **kw)
        region = _pass(c, p, per, mb, backward=False)
        z3_h = max(float(p.z3_s) - float(p.z3_exposed_s), 0.0)
        fwd_share = per.fwd_share
        c.hide("zero3.gather", DP_STREAM, region, z3_h * fwd_share, at_end=False, **net)
        c.put("zero3.gather", DP_STREAM, float(p.z3_exposed_s) * fwd_share, "communication", **net)
        if mb == 0:
            ex = p.dp_exposed
            c.hide("dp.weight_gather", DP_STREAM, region, max(float(p.dp.gather_s - ex.gather_s), 0.0), at_end=False,
                   bound="network")
            c.put("dp.weight_gather", DP_STREAM, float(ex.gather_s), "communication", bound="network")
        for name, (f, _) in hid.offload.items():
            c.hide(name, OFFLOAD, region, f, at_end=False, bound="host link", **kw)
    last = float(p.last_is_max) > 0
    logits = [o for o in p.logits if (o.phase == "forward") != backward] if last else []
    if backward:
        for o in logits:
            _op_slice(c, o, 1.0, mb, None, phase)
    if last:                                # the MTP modules, op by op (step/mtp.py: mtp_ops)
        for o in mtp:
            if (o.phase == "forward") != backward:
                _op_slice(c, o, 1.0, mb, None, phase)
    if not backward:
        for o in logits:
            _op_slice(c, o, 1.0, mb, None, phase)
    c.put("tp.embedding_loss", TP_STREAM, float(p.head_tp_s) * half, "communication", **net)
    c.put("ep.mtp_all_to_all", EP_STREAM, float(p.mtp_ep_s) * half, "communication", **net)
    c.put("pp.send_recv", PP_STREAM, float(p.pp_s) * half, "communication", **net)
    if backward:
        region = _pass(c, p, per, mb, backward=True)
        c.put("embedding/loss host", COMPUTE, rest["overhead"] * half, "overhead", bound="host", **kw)
        z3_h = max(float(p.z3_s) - float(p.z3_exposed_s), 0.0)
        bwd_share = 1.0 - per.fwd_share
        c.hide("zero3.reduce", DP_STREAM, region, z3_h * bwd_share, at_end=True, **net)
        c.put("zero3.reduce", DP_STREAM, float(p.z3_exposed_s) * bwd_share, "communication", **net)
        if mb < m - 1:
            c.hide("zero2.grad_reduce_scatter", DP_STREAM, region, hid.zero2[0], at_end=True, **net)
            c.put("zero2.grad_reduce_scatter", DP_STREAM, hid.zero2[1], "communication", **net)
        else:
            ex = p.dp_exposed
            c.hide("dp.grad_reduce", DP_STREAM, region, max(float(p.dp.reduce_s - ex.reduce_s), 0.0), at_end=True,
                   bound="network")
        for name, (_, b) in hid.offload.items():
            c.hide(name, OFFLOAD, region, b, at_end=True, bound="host link", **kw)


def _step_tail(c: _Cursor, terms: StepTerms, p: StepParts) -> None:
    """After the last backward: the data-parallel collectives' exposed parts, the optimizer, the offload's."""
    ex = p.dp_exposed
    for name, exposed in (("dp.grad_reduce", ex.reduce_s), ("dp.replica_all_reduce", ex.replica_s),
                          ("pp.tied_embedding", p.tied_s)):
        c.put(name, DP_STREAM, float(exposed), "communication", bound="network")
    c.put("optimizer.adam", COMPUTE, float(terms.optimizer_s), "memory", bound="memory")
    off = p.offload
    if off is not None:
        for name, exposed in (("offload.grads_down", off.grads_exposed_s),
                              ("offload.weights_fetch", off.fetch_exposed_s),
                              ("offload.activations", off.activations_exposed_s)):
            c.put(name, OFFLOAD, float(exposed), "offload", bound="host link")
        c.put("offload.cpu_adam / weights_up", OFFLOAD, float(off.tail_s), "offload", bound="host")
        # what offload_s holds beyond its named parts (0 by the model's own sum; kept so the path adds up)
        named = float(off.grads_exposed_s + off.fetch_exposed_s + off.activations_exposed_s + off.tail_s)
        c.put("offload.other", OFFLOAD, float(terms.offload_s) - named, "offload", bound="host link")


def schedule_name(layout: Layout) -> str:
    if float(layout.pp) <= 1:
        return "none"
    if layout.dualpipe:
        return "dualpipe"
    return "interleaved" if float(layout.vpp) > 1 else "1f1b"


def step_timeline(s: Scenario) -> Timeline:
    """The predicted step of `s` as slices (module docstring)."""
    job, layout = job_of(s), layout_of(s)
    terms = step_terms(job, layout)
    p = terms.parts
    if p is None:           # step_terms always returns its parts; a guard for the type checker
        raise ValueError("step_terms returned no parts")
    m = int(round(float(p.micro_batches)))
    per = _per_layer(job, layout, terms, p)
    mtp = [] if p.mtp is None else mtp_ops(p.mtp, p.logits)
    rest = _micro_batch_rest(terms, p, per, mtp)
    c = _Cursor()
    bubble = float(terms.bubble_s)
    hid = _hidden_parts(p, layout)
    c.put("pipeline fill", COMPUTE, bubble / 2.0, "bubble")
    for mb, backward in _order(m, p, layout):
        _micro_batch(c, p, per, rest, mb, backward, hid, mtp)
    c.put("pipeline drain", COMPUTE, bubble / 2.0, "bubble")
    _step_tail(c, terms, p)
    breakdown = {k: float(getattr(terms, f"{k}_s")) for k in TERMS}
    return Timeline(slices=tuple(c.out), step_s=float(terms.time_s), terms=breakdown, micro_batches=m,
                    layers=float(p.layers), schedule=schedule_name(layout),
                    stage="only" if float(layout.pp) <= 1 else "last" if float(p.last_is_max) > 0 else "first")


def term_sums_s(t: Timeline) -> dict[str, float]:
    """Seconds of the critical slices per breakdown term."""
    out = dict.fromkeys(TERMS, 0.0)
    for sl in t.slices:
        if sl.critical:
            out[sl.term] += sl.duration_s
    return out
