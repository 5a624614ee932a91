"""The predicted step as a Chrome trace (trainest/timeline.py, trainest/report/timeline.py, `trainest estimate
--timeline`, docs/model.md §17): a valid trace, its critical path the step time, its per-term sums the breakdown."""

from __future__ import annotations

import json

import pytest
from helpers import call_entry

from trainest.estimate import estimate
from trainest.report.timeline import chrome_trace
from trainest.scenario import scenario_from_mapping
from trainest.timeline import TERMS, step_timeline, term_sums_s
from trainest.units import MICROSECOND

DEEPSEEK_DUALPIPE = {"model": "deepseek-v3", "hardware": "h800-sxm", "devices": 2048, "precision": "fp8",
                     "seq_len": 4096, "global_batch": 2048, "moe_dispatcher": "deepep",
                     "parallel": {"pp": 16, "ep": 64, "pipeline_schedule": "dualpipe", "pipeline_split": "balanced"}}
CASES = {
    "default": {},
    "deepseek-v3-dualpipe": DEEPSEEK_DUALPIPE,
    "deepseek-v3-deepep": {**DEEPSEEK_DUALPIPE, "parallel": {**DEEPSEEK_DUALPIPE["parallel"], "moe_overlap": "deepep"}},
    "gpt3-interleaved-tp-sp": {"model": "gpt3-175b", "hardware": "a100-80gb-sxm", "devices": 64, "seq_len": 2048,
                               "global_batch": 64, "parallel": {"tp": 8, "pp": 8, "vpp": 3, "sequence_parallel": True},
                               "recompute": "selective"},
    "moe-1f1b": {"model": "qwen3-30b-a3b", "hardware": "h100-sxm", "devices": 64, "seq_len": 4096,
                 "global_batch": 256, "parallel": {"pp": 4, "ep": 8, "zero": 1}},
    "qlora-zero3-tp": {"model": "llama3-8b", "devices": 8, "parallel": {"zero": 3, "tp": 2}, "global_batch": 32,
                       "finetune": "qlora", "seq_len": 2048},
    "lora-one-gpu": {"model": "llama3-8b", "devices": 1, "global_batch": 8, "finetune": "lora", "seq_len": 2048},
    "offload-gh200": {"model": "llama3-8b", "hardware": "gh200", "devices": 1, "seq_len": 4096, "global_batch": 8,
                      "offload": "optimizer+weights", "recompute": "full"},
    # standard attention with context parallelism: DeepSpeed's (Megatron-Core's runs fused kernels only: rules.py)
    "cp-dp-standard": {"model": "llama3-8b", "devices": 16, "parallel": {"cp": 2, "zero": 1}, "seq_len": 8192,
                       "attention": "standard", "global_batch": 16, "framework": "deepspeed"},
    "small-host-bound": {"model": "llama3.2-3b", "hardware": "dgx-spark", "devices": 1, "seq_len": 256,
                         "global_batch": 8},
}


def check_chrome_trace(doc: dict) -> list[dict]:
    """The Trace Event Format as Perfetto and chrome://tracing read it: a traceEvents list of metadata
    (ph M, naming a process or thread) and complete events (ph X: name, pid, tid, ts ≥ 0, dur ≥ 0, finite,
    JSON-serialisable args), and on each thread complete events that do not partly overlap (they nest or
    follow each other). Returns the complete events."""
    json.loads(json.dumps(doc, allow_nan=False))     # plain JSON, no NaN or inf
    assert isinstance(doc["traceEvents"], list)
    complete, named = [], set()
    for e in doc["traceEvents"]:
        assert e["ph"] in ("X", "M"), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name", "thread_sort_index") and "args" in e
            if e["name"] == "thread_name":
                named.add((e["pid"], e["tid"]))
            continue
        assert isinstance(e["name"], str) and e["name"]
        assert isinstance(e["ts"], float | int) and isinstance(e["dur"], float | int)
        assert e["ts"] >= 0 and e["dur"] >= 0
        complete.append(e)
    by_thread: dict[tuple[int, int], list[dict]] = {}
    for e in complete:
        by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    for key, evs in by_thread.items():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[float] = []
        for e in evs:
            while stack and stack[-1] <= e["ts"] + 1e-6:
                stack.pop()
            end = e["ts"] + e["dur"]
            assert not stack or end <= stack[-1] + 1e-6, (key, e["name"], e["ts"])   # nests inside, or no overlap
            stack.append(end)
    return complete


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    s = scenario_from_mapping(CASES[request.param], "t")
    return request.param, s, step_timeline(s), estimate(s)


def test_the_critical_path_tiles_the_step_and_ends_at_the_step_time(case):
    _, _, t, e = case
    crit = sorted((sl for sl in t.slices if sl.critical), key=lambda sl: sl.start_s)
    assert crit[0].start_s == 0.0
    for a, b in zip(crit, crit[1:], strict=False):
        assert b.start_s == pytest.approx(a.end_s, rel=1e-12, abs=1e-15)    # no gap, no overlap
    assert crit[-1].end_s == pytest.approx(e.step.time_s, rel=1e-9)
    assert t.step_s == e.step.time_s


def test_the_per_term_sums_are_the_breakdown(case):
    _, _, t, e = case
    sums = term_sums_s(t)
    for term in TERMS:
        assert sums[term] == pytest.approx(getattr(e.step, f"{term}_s"), rel=1e-9, abs=1e-12 * e.step.time_s), term


def test_every_slice_is_finite_and_non_negative_and_the_named_residuals_vanish_without_their_part(case):
    name, s, t, _ = case
    assert all(sl.duration_s > 0 and sl.start_s >= 0 for sl in t.slices)
    # the MTP modules are drawn op by op (step/mtp.py: mtp_ops), named mtp.…, and only where the model has them
    mtp = [sl for sl in t.slices if sl.name.startswith("mtp.")]
    assert bool(mtp) == (s.model.mtp_layers > 0), name


def test_the_chrome_trace_is_valid_and_its_events_add_up_to_the_step(case):
    _, _, t, e = case
    events = check_chrome_trace(chrome_trace(t))
    critical_us = sum(ev["dur"] for ev in events if ev["args"].get("critical"))
    assert critical_us * MICROSECOND == pytest.approx(e.step.time_s, rel=1e-9)
    steps = [ev for ev in events if ev["name"].startswith("ProfilerStep#")]
    assert len(steps) == 1 and steps[0]["dur"] * MICROSECOND == pytest.approx(e.step.time_s, rel=1e-12)


def test_every_micro_batch_runs_its_forward_before_its_backward_and_all_layers_each_way(case):
    _, _, t, _ = case
    for mb in range(t.micro_batches):
        mine = [sl for sl in t.slices if sl.micro_batch == mb and sl.track == "compute" and sl.layer is not None]
        fwd = [sl for sl in mine if sl.phase == "forward"]
        bwd = [sl for sl in mine if sl.phase in ("backward", "recompute")]
        assert fwd and bwd and max(sl.end_s for sl in fwd) <= min(sl.start_s for sl in bwd) + 1e-12
        assert len({sl.layer for sl in fwd}) == len({sl.layer for sl in bwd}) >= int(t.layers)


@pytest.mark.parametrize("name", ["moe-1f1b", "gpt3-interleaved-tp-sp", "deepseek-v3-dualpipe"])
def test_the_drawn_stage_warms_up_with_its_forwards_then_alternates(name):
    """1F1B: the first stage runs p − 1 forwards before its first backward, the last stage none."""
    s = scenario_from_mapping(CASES[name], "t")
    t = step_timeline(s)
    passes = []
    for sl in sorted((sl for sl in t.slices if sl.track == "compute" and sl.layer == 0), key=lambda sl: sl.start_s):
        key = (sl.micro_batch, sl.phase == "forward")
        if not passes or passes[-1] != key:
            passes.append(key)
    warm = 0 if t.stage == "last" else s.parallel.pp - 1
    forwards = [f for _, f in passes]
    assert forwards[:warm + 1] == [True] * (warm + 1) and forwards[warm + 1] is False
    assert forwards[warm + 1:warm + 5] == [False, True, False, True]


def test_hidden_traffic_is_off_the_path_and_exposed_traffic_on_it():
    t = step_timeline(scenario_from_mapping(CASES["deepseek-v3-deepep"], "t"))
    ep = [sl for sl in t.slices if sl.track == "expert-parallel comm"]
    assert any(not sl.critical for sl in ep) and any(sl.critical for sl in ep)
    assert all(sl.term == "communication" for sl in ep if sl.critical)


def test_offload_draws_its_copies_on_their_own_stream():
    t = step_timeline(scenario_from_mapping(CASES["offload-gh200"], "t"))
    off = [sl for sl in t.slices if sl.track == "offload copies"]
    assert off and sum(sl.duration_s for sl in off if sl.critical) == pytest.approx(t.terms["offload"], rel=1e-9)


def test_the_cli_writes_the_timeline_and_refuses_an_unwritable_path(tmp_path, capsys):
    path = tmp_path / "step.json"
    code, out, err = call_entry(["estimate", "--json", "--timeline", str(path)], capsys)
    assert code == 0
    doc = json.loads(path.read_text())
    events = check_chrome_trace(doc)
    step = json.loads(out)["step"]["time_s"]
    assert sum(ev["dur"] for ev in events if ev["args"].get("critical")) * MICROSECOND == pytest.approx(step, rel=1e-9)
    code, out, err = call_entry(["estimate", "--timeline", str(tmp_path / "no" / "such" / "dir.json")], capsys)
    assert code == 1 and out == "" and err.count("\n") == 1 and "--timeline" in err
