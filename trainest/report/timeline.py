"""The predicted step as a Chrome trace (the JSON Perfetto and chrome://tracing open), from
`trainest.timeline.Timeline`: one process (the device), one thread per track, every slice a complete
("X") event in microseconds with its FLOPs, bytes, bound, term and micro-batch in `args`, and a
`ProfilerStep#0` annotation around the step, as `torch.profiler` marks its steps, so that
`trainest calibrate --trace` reads trainest's own timelines like a profiler's.

Format: Google's "Trace Event Format" (complete events `ph: X`, metadata events `ph: M` naming the
process and threads; `ts` and `dur` in µs; `displayTimeUnit`).
"""

from __future__ import annotations

from typing import Any

from trainest.timeline import HIDDEN_LANE, TRACKS, Timeline
from trainest.units import MICROSECOND

PID = 0                         # the device
HOST_PID = 1                    # the host (the dispatch track, and the step annotation)
GENERATOR = "trainest"
# the event category a profiler gives each kind of slice: kernels on the device's streams, CPU ops on the host
KERNEL, CPU_OP, ANNOTATION, MODEL = "kernel", "cpu_op", "user_annotation", "trainest"


LANE_OFFSET = 100                   # a stream's lane of hidden (overlapped) traffic: its thread id + this


def _tid(track: str, hidden: bool = False) -> int:
    return TRACKS.index(track) + 1 + (LANE_OFFSET if hidden else 0)


def chrome_trace(t: Timeline, scenario_label: str = "") -> dict[str, Any]:
    """The Chrome trace document of a timeline."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": "device (slowest stage)"}},
        {"ph": "M", "name": "process_name", "pid": HOST_PID, "tid": 0, "args": {"name": "host"}},
    ]
    for track in TRACKS:
        pid = HOST_PID if track == "host dispatch" else PID
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": _tid(track), "args": {"name": track}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": _tid(track),
                       "args": {"sort_index": 2 * _tid(track)}})
        if track != "host dispatch":
            lane = _tid(track, hidden=True)
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": lane,
                           "args": {"name": track + HIDDEN_LANE}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": lane,
                           "args": {"sort_index": 2 * _tid(track) + 1}})
    events.append({"ph": "X", "cat": ANNOTATION, "name": "ProfilerStep#0", "pid": HOST_PID, "tid": 0, "ts": 0.0,
                   "dur": t.step_s / MICROSECOND, "args": {"step_s": t.step_s}})
    for sl in t.slices:
        on_host = sl.track == "host dispatch"
        # bubble and launch overhead are time the device waits: not kernels
        cat = CPU_OP if on_host else (KERNEL if sl.term not in ("bubble", "overhead") else MODEL)
        args: dict[str, Any] = {"term": sl.term, "critical": sl.critical, "phase": sl.phase, "bound": sl.bound,
                                "stream": sl.track}
        if sl.micro_batch is not None:
            args["micro_batch"] = sl.micro_batch
        if sl.layer is not None:
            args["layer"] = sl.layer
        if sl.flops:
            args["flops"] = sl.flops
        if sl.bytes:
            args["bytes"] = sl.bytes
        events.append({"ph": "X", "cat": cat, "name": sl.name, "pid": HOST_PID if on_host else PID,
                       "tid": _tid(sl.track, not sl.critical and not on_host),
                       "ts": sl.start_s / MICROSECOND, "dur": sl.duration_s / MICROSECOND,
                       "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"generator": GENERATOR, "scenario": scenario_label, "step_s": t.step_s,
                          "schedule": t.schedule, "stage": t.stage, "micro_batches": t.micro_batches,
                          "layers": t.layers,
                          "breakdown_s": t.terms}}
