"""trainest.search and `trainest plan`: exhaustive, vectorized, and consistent with `estimate`."""

from __future__ import annotations

import itertools
import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest
from helpers import call_entry
from typer.testing import CliRunner

from trainest import search as S
from trainest.cli import app
from trainest.errors import SpecError
from trainest.estimate import estimate
from trainest.scenario import scenario_from_mapping
from trainest.search import RECOMPUTE_NAMES

runner = CliRunner()


def job(**kw):
    return S.job_scenario({"model": "gpt3-1.3b", "hardware": "a100-80gb-sxm", "global_batch": 64, **kw})


def run_cli(*args):
    return runner.invoke(app, list(args))


# ------------------------------------------------------------------------------- choices it makes

def test_small_model_on_one_node_is_pure_data_parallel():
    """A 125M model fits whole on every device: splitting it only adds communication."""
    r = S.search(S.job_scenario({"model": "gpt3-125m", "hardware": "h100-sxm", "global_batch": 64}), 8)
    p = r.plans[0].scenario.parallel
    assert (p.tp, p.pp, p.cp, p.dp) == (1, 1, 1, 8)
    assert r.plans[0].memory.fits


def test_model_that_needs_sharding_shards_weights():
    """Llama 3 70B: 140 GB of 16-bit weights alone exceed an 80 GB H100, so the weights must be split."""
    base = S.job_scenario({"model": "llama3-70b", "hardware": "h100-sxm", "global_batch": 64})
    unsharded = S.SearchSpace(tp=(1,), pp=(1,), zero=(0, 1, 2))
    with pytest.raises(SpecError, match="does not fit"):
        S.search(base, 32, unsharded)
    p = S.search(base, 32).plans[0].scenario.parallel
    assert p.zero == 3 or p.tp * p.pp > 1


def test_one_replica_lists_each_plan_once_not_once_per_zero_stage():
    """On one device ZeRO has nothing to shard over: z0..z3 are one plan, listed once (the least stage
    searched); with ZeRO-Offload once too, at the least stage from 1 up (DeepSpeed's offload runs on ZeRO 1-3;
    every stage gave the same step and memory, so z0..z3 were four copies of one plan)."""
    base = S.job_scenario({"model": "gpt3-125m", "hardware": "h100-sxm", "global_batch": 32})
    plans = S.search(base, 1, top=20).plans
    layouts = [(e.scenario.parallel.tp, e.scenario.parallel.pp, e.scenario.micro_batch, e.scenario.recompute)
               for e in plans]
    assert len(layouts) == len(set(layouts)) and {e.scenario.parallel.zero for e in plans} == {0}
    only_3 = S.search(base, 1, S.SearchSpace(zero=(3,))).plans[0]      # the least allowed stage is kept
    assert only_3.scenario.parallel.zero == 3
    assert only_3.step.time_s == pytest.approx(plans[0].step.time_s, rel=1e-12)
    offload = S.job_scenario({"model": "gpt3-125m", "hardware": "gh200", "global_batch": 32, "offload": "optimizer"})
    assert {e.scenario.parallel.zero for e in S.search(offload, 1, top=50).plans} == {1}
    wider = S.search(base, 2, top=20).plans                              # two replicas: ZeRO stages differ
    assert len({e.scenario.parallel.zero for e in wider if e.scenario.parallel.dp == 2}) > 1


def test_restricting_the_space_never_finds_a_faster_plan():
    base = job()
    best = S.search(base, 16).plans[0].step.time_s
    for space in (S.SearchSpace(zero=(0,)), S.SearchSpace(recompute=("full",)), S.SearchSpace(max_tp=2),
                  S.SearchSpace(pp=(1, 2))):
        assert S.search(base, 16, space).plans[0].step.time_s >= best


def test_plans_are_ranked_and_runner_ups_are_the_best_with_another_value():
    base = job()
    r = S.search(base, 16, top=10)
    times = [e.step.time_s for e in r.plans]
    assert times == sorted(times)
    winner = S.plan_knobs(r.plans[0].scenario)
    for knob, ru in r.runner_up_by_knob.items():
        if ru is None:
            continue
        value = S.plan_knobs(ru.estimate.scenario)[knob]
        assert value != winner[knob]
        assert ru.score_ratio >= 1.0
        others = tuple(v for v in r.space[knob] if v != winner[knob]) if knob in r.space else None
        if knob in ("tp", "pp", "cp", "zero", "recompute"):   # (sp=on alone keeps t = 1 plans, as off)
            restricted = S.search(base, 16, S.SearchSpace(**{knob: others}))
            assert restricted.plans[0].step.time_s == pytest.approx(ru.estimate.step.time_s, rel=1e-12)


def test_objectives_agree_at_a_fixed_device_count():
    """Cost and energy are step time times constants when N is fixed, so the same plan wins."""
    base = job()
    winners = {o: S.plan_knobs(S.search(base, 16, objective=o).plans[0].scenario) for o in S.OBJECTIVES}
    assert winners["time"] == winners["cost"] == winners["energy"]


# ------------------------------------------------------------------------------- exhaustive, counted

def test_every_combination_is_enumerated_and_tallies_add_up():
    """Count the space by brute force over the Cartesian product and compare."""
    base = S.job_scenario({"model": "gpt3-125m", "hardware": "a100-80gb-sxm", "global_batch": 32, "seq_len": 64})
    n = 16
    m = base.model
    divs = lambda k: [d for d in range(1, k + 1) if k % d == 0]  # noqa: E731
    complete, structural = 0, 0
    # pipeline sizes: divisors of L (even split) and those only the balanced split allows (p | L + 2)
    pps = divs(m.layers) + [p for p in divs(m.layers + 2) if p not in divs(m.layers) and p <= m.layers]
    for tp, pp, cp in itertools.product([d for d in divs(m.heads) if d <= 8], pps, divs(64)):
        if n % (tp * pp * cp) or 32 % (n // (tp * pp * cp)):
            structural += 1
            continue
        dp = n // (tp * pp * cp)
        units = m.layers // pp if m.layers % pp == 0 else (m.layers + 2) // pp
        vpps = divs(units) if pp > 1 else [1]
        for vpp, mb in itertools.product(vpps, divs(32 // dp)):
            if vpp > 1 and (32 // (dp * mb)) % pp:     # the interleaved schedule's rule: counted once
                structural += 1
                continue
            for zero, rec, sp in itertools.product(range(4), range(3), (0, 1)):
                complete += not (sp and tp == 1)
    g = S.enumerate_plans(base, n, S.SearchSpace())
    assert g.size == complete
    assert sum(g.structural_rejects.values()) == structural
    r = S.search(base, n)
    assert r.stats.evaluated == complete + structural
    assert r.stats.evaluated == r.stats.feasible + sum(r.stats.rejected.values())
    assert r.stats.rejected["out_of_memory"] + r.stats.feasible == complete


def test_vectorized_evaluation_equals_estimate_plan_by_plan():
    """A random sample of plans (fitting or not), each rebuilt through scenario_from_mapping."""
    base = S.job_scenario({"model": "llama3-8b", "hardware": "h100-sxm", "global_batch": 128, "seq_len": 4096})
    n = 64
    g = S.enumerate_plans(base, n, S.SearchSpace())
    ev = S.evaluate_grid(base, g)
    rng = np.random.default_rng(7)
    fit_idx = np.flatnonzero(ev.fits)
    sample = np.concatenate([rng.choice(fit_idx, 25, replace=False), rng.choice(g.size, 15, replace=False)])
    for i in sample:
        s = scenario_from_mapping({
            "model": "llama3-8b", "hardware": "h100-sxm", "global_batch": 128, "seq_len": 4096, "devices": n,
            "parallel": {"tp": int(g.tp[i]), "pp": int(g.pp[i]), "cp": int(g.cp[i]), "vpp": int(g.vpp[i]),
                         "zero": int(g.zero[i]), "sequence_parallel": bool(g.sp[i])},
            "micro_batch": int(g.micro_batch[i]), "recompute": RECOMPUTE_NAMES[int(g.recompute[i])]})
        e = estimate(s)
        assert ev.memory_bytes[i] == pytest.approx(e.memory.per_device_bytes, rel=1e-9)
        assert bool(ev.fits[i]) == e.memory.fits
        if ev.fits[i]:
            assert ev.time_s[i] == pytest.approx(e.step.time_s, rel=1e-9)


# ------------------------------------------------------------------------------- the CLI

JOB_ARGS = ["--model", "gpt3-1.3b", "--hardware", "a100-80gb-sxm", "--global-batch", "64", "--seq-len", "2048"]


def test_plan_json_matches_estimate_cli_for_the_top_plans():
    res = run_cli("plan", *JOB_ARGS, "--devices", "16", "--top", "3", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    s = doc["search"]
    assert s["evaluated"] == s["feasible"] + sum(s["rejected"].values())
    assert s["plans_per_s"] > 0
    plans = doc["plans"] + [p for p in doc["runner_up_by_knob"].values() if p is not None]
    for plan in plans[:5]:
        est = run_cli("estimate", *JOB_ARGS, *plan["estimate_args"], "--json")
        assert est.exit_code == 0, est.output
        e = json.loads(est.stdout)
        for part in ("step", "memory", "throughput", "training"):
            assert set(plan[part]) == set(e[part])
            for key, value in e[part].items():
                if isinstance(value, float):
                    assert plan[part][key] == pytest.approx(value, rel=1e-12), (part, key)
                else:
                    assert plan[part][key] == value, (part, key)
        assert plan["parallel"] == e["inputs"]["parallel"]


def test_plan_table_output_and_allow_options():
    res = run_cli("plan", *JOB_ARGS, "--devices", "16", "--allow", "zero=0,1", "--allow", "recompute=full",
                  "--max-tp", "2")
    assert res.exit_code == 0, res.output
    assert "plans/s" in res.stdout and "Runner-up" in res.stdout
    doc = json.loads(run_cli("plan", *JOB_ARGS, "--devices", "16", "--allow", "zero=0,1", "--allow",
                             "recompute=full", "--max-tp", "2", "--json").stdout)
    for p in doc["plans"]:
        assert p["parallel"]["zero"] in (0, 1) and p["recompute"] == "full" and p["parallel"]["tp"] <= 2


@pytest.mark.parametrize("args, needle", [
    (["--model", "gpt3-125m", "--devices", "11", "--global-batch", "8"], "no layout of 11 devices"),
    (["--model", "gpt3-175b", "--hardware", "a100-80gb-sxm", "--devices", "1", "--global-batch", "8"], "does not fit"),
    (["--model", "gpt3-125m", "--devices", "8", "--global-batch-tokens", "0.3k"], "not a whole number"),
    (["--model", "gpt3-125m", "--devices", "8", "--global-batch", "8", "--allow", "zero=5"], "zero"),
    (["--model", "gpt3-175b", "--hardware", "a100-80gb-sxm", "--devices", "1..4", "--global-batch", "8"],
     "no layout fits at any device count in 1..4"),
])
def test_bad_input_is_one_line_on_stderr_and_exit_1(args, needle):
    res = run_cli("plan", *args)
    assert res.exit_code == 1
    assert res.stdout == ""
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("Error: ") and needle in res.stderr


def test_deadline_picks_the_smallest_device_count_that_meets_it():
    base = S.job_scenario({"model": "gpt3-1.3b", "hardware": "a100-80gb-sxm", "global_batch": 256, "tokens": "26B"})
    counts = S.device_counts(8, 256, "pow2", base.devices_per_node)
    assert counts == [8, 16, 32, 64, 128, 256]
    one_day = 86400.0
    ds = S.smallest_devices(base, counts, deadline_s=one_day)
    assert ds.result.plans[0].training.time_s <= one_day
    for t in ds.trials[:-1]:
        assert not t.meets and (t.time_s is None or t.time_s > one_day)
    # a deadline met by the smallest count returns it; an impossible one the closest count, with why (exit 3)
    assert S.smallest_devices(base, counts, deadline_s=1e9).devices == 8
    missed = S.smallest_devices(base, counts, deadline_s=1.0)     # a gate not met: the closest count, and why
    assert "no device count" in missed.gate_failed
    res = run_cli("plan", "--model", "gpt3-1.3b", "--hardware", "a100-80gb-sxm", "--global-batch", "256",
                  "--tokens", "26B", "--devices", "8..256", "--deadline", "1d", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["devices_search"]["chosen"] == ds.devices


def test_device_counts_in_node_multiples():
    assert S.device_counts(20, 50, "node", 8) == [24, 32, 40, 48]
    assert S.parse_devices("256..8192") == (256, 8192)
    with pytest.raises(SpecError):
        S.parse_devices("64..8")


def test_a_devices_range_takes_a_step():
    # the hint said "use e.g. 64, 8..1024 or 8..1024:8", and 8..1024:8 was then refused as "not a number";
    # a step is now taken (tests/test_device_ranges.py)
    assert S.parse_devices("8..64:8") == (8, 64) and S.device_step("8..64:8") == 8
    with pytest.raises(SpecError) as err:
        S.parse_devices("eight")
    assert "'eight'" in str(err.value)


def test_cli_start_up_does_not_import_numpy_or_rich():
    code = "import sys, trainest.cli; sys.exit(int('numpy' in sys.modules or 'rich' in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_no_non_finite_numbers_in_a_search():
    r = S.search(job(), 16)
    assert r.stats.rejected["non_finite"] == 0
    assert all(math.isfinite(e.step.time_s) for e in r.plans)


def test_top_plan_through_the_installed_console_entry_gives_the_same_step():
    """The real entry point (`python -m trainest`, which may take a fast path without typer)."""
    doc = json.loads(run_cli("plan", *JOB_ARGS, "--devices", "16", "--top", "1", "--json").stdout)
    best = doc["plans"][0]
    out = subprocess.run([sys.executable, "-m", "trainest", "estimate", *JOB_ARGS, *best["estimate_args"], "--json"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    e = json.loads(out.stdout)
    assert e["step"]["time_s"] == pytest.approx(best["step"]["time_s"], rel=1e-12)
    assert e["memory"]["per_device_bytes"] == pytest.approx(best["memory"]["per_device_bytes"], rel=1e-12)


def test_tp_overlap_applies_to_every_plan_and_reproduces_with_estimate():
    """--tp-overlap is a framework capability: every plan gets it, its estimate_args carry it, the
    step times agree with `trainest estimate`, and hiding TP traffic never makes the best plan slower."""
    args = ("--model", "gpt3-13b", "--hardware", "h100-sxm", "--global-batch", "256", "--devices", "64")
    plain = json.loads(run_cli("plan", *args, "--top", "1", "--json").stdout)["plans"][0]
    over_res = run_cli("plan", *args, "--top", "1", "--tp-overlap", "--json")
    assert over_res.exit_code == 0, over_res.output
    over = json.loads(over_res.stdout)["plans"][0]
    assert over["parallel"]["tp_overlap"] is True and "--tp-overlap" in over["estimate_args"]
    assert over["step"]["time_s"] <= plain["step"]["time_s"] * (1 + 1e-12)
    est = json.loads(run_cli("estimate", "--model", "gpt3-13b", "--hardware", "h100-sxm", *over["estimate_args"],
                             "--json").stdout)
    assert est["step"]["time_s"] == pytest.approx(over["step"]["time_s"], rel=1e-12)


def test_balanced_pipeline_split_is_searched_and_matches_estimate():
    """126 layers: p = 8 or 16 only exist with the balanced split ((126 + 2) / p layers per stage);
    those plans are enumerated, and each evaluates exactly as `estimate` does."""
    base = S.job_scenario({"model": "llama3.1-405b", "hardware": "h100-sxm", "global_batch": 256})
    g = S.enumerate_plans(base, 512, S.SearchSpace(pp=(8, 16), tp=(8,), zero=(1,), recompute=("none",),
                                                   sequence_parallel=(True,)))
    assert g.size > 0 and set(np.unique(g.balanced)) == {1.0}
    ev = S.evaluate_grid(base, g)
    for i in range(0, g.size, max(1, g.size // 7)):
        e = S._estimate_at(base, 512, g, i)
        assert e.scenario.parallel.pipeline_split == "balanced"
        assert e.memory.per_device_bytes == pytest.approx(ev.memory_bytes[i], rel=1e-12)
        if ev.fits[i]:
            assert e.step.time_s == pytest.approx(ev.time_s[i], rel=1e-12)


def test_flat_dp_collectives_apply_to_every_plan_and_reproduce_with_estimate():
    """--dp-collectives flat describes the user's framework: every plan gets it, its estimate_args
    carry it, and its step time agrees with `trainest estimate`; one NIC per rank is never faster."""
    args = ("--model", "gpt3-13b", "--hardware", "a100-80gb-sxm", "--global-batch", "512", "--devices", "256",
            "--allow", "zero=3", "--allow", "tp=1")
    plain = json.loads(run_cli("plan", *args, "--top", "1", "--json").stdout)["plans"][0]
    res = run_cli("plan", *args, "--top", "1", "--dp-collectives", "flat", "--json")
    assert res.exit_code == 0, res.output
    flat = json.loads(res.stdout)["plans"][0]
    assert flat["parallel"]["dp_collectives"] == "flat"
    assert flat["estimate_args"][-2:] == ["--dp-collectives", "flat"]
    assert flat["step"]["time_s"] >= plain["step"]["time_s"] * (1 - 1e-12)
    est = json.loads(run_cli("estimate", "--model", "gpt3-13b", "--hardware", "a100-80gb-sxm",
                             *flat["estimate_args"], "--json").stdout)
    assert est["step"]["time_s"] == pytest.approx(flat["step"]["time_s"], rel=1e-12)


def test_plans_keep_the_interleaved_schedule_rule_and_count_what_breaks_it():
    """Issue 11, case 1: the Llama 3 70B deadline plan picked vpp 20 with one micro-batch per step (4.3 %
    bubble; really a 2-stage pipeline with nothing to overlap). Every plan with v > 1 must have
    m = B/(d·b) a multiple of p, and the layouts that break it are rejected and counted."""
    base = S.job_scenario({"model": "llama3-70b", "hardware": "h100-sxm", "global_batch": 1024, "tokens": "15T"})
    r = S.search(base, 8192, top=10)
    chosen = list(r.plans) + [ru.estimate for ru in r.runner_up_by_knob.values() if ru is not None]
    for e in chosen:
        p, m = e.scenario.parallel, e.scenario.micro_batches
        assert p.vpp == 1 or m % p.pp == 0, (p, m)
        assert e.step.bubble_s >= e.step.micro_batch_s * 0.99 * (p.pp - 1) / p.vpp * (0.9 if m >= p.pp else 1.0)
    assert r.stats.rejected["interleaving_indivisible"] > 0
    assert r.stats.evaluated == r.stats.feasible + sum(r.stats.rejected.values())


@pytest.mark.parametrize("hardware", ["cerebras-wse-3", "groq-lpu", "graphcore-bow"])
def test_plan_refuses_hardware_whose_execution_model_trainest_does_not_have(hardware):
    result = run_cli("plan", "--hardware", hardware, "--devices", "4", "--global-batch", "8")
    assert result.exit_code == 1 and result.stdout == ""
    assert "cannot be estimated" in result.stderr and len(result.stderr.splitlines()) == 1


def test_plan_winners_leave_the_memory_headroom_free():
    """Issue 11, case 9: a winner at 71.4 of 74.5 GiB was shown as a safe fit. The fit decision keeps
    --memory-headroom free (default 5 % of capacity); 0 turns it off."""
    base = S.job_scenario({"model": "llama3-70b", "hardware": "h100-sxm", "global_batch": 256})
    assert base.memory_headroom == "5%" and base.memory_headroom_bytes == pytest.approx(0.05 * 81559 * 2**20)
    r = S.search(base, 64, top=20)
    for e in r.plans:
        assert e.memory.per_device_bytes <= 0.95 * e.memory.capacity_bytes and e.memory.fits
    none = S.search(S.job_scenario({"model": "llama3-70b", "hardware": "h100-sxm", "global_batch": 256,
                                    "memory_headroom": "0"}), 64)
    assert none.stats.feasible > r.stats.feasible
    result = run_cli("plan", "--model", "llama3-70b", "--devices", "64", "--global-batch", "256",
                     "--memory-headroom", "10GiB", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["job"]["memory_headroom"] == "10GiB"
    assert all(pl["memory"]["per_device_bytes"] + 10 * 2**30 <= pl["memory"]["capacity_bytes"] for pl in doc["plans"])


def _budget_job():
    return S.job_scenario({"model": "llama3-8b", "hardware": "h100-sxm", "global_batch": 512, "tokens": "1T"})


def test_budget_picks_the_fastest_count_within_it():
    """Issue 11, case 7: --budget returned the fewest devices (8, 165 days) although 1024 devices cost about
    the same and finish in 1.4 days. The objective is said and used: the fastest within the budget."""
    base, counts = _budget_job(), S.device_counts(8, 1024, "pow2", 8)
    ds = S.smallest_devices(base, counts, budget_usd=2e6)
    meeting = [t for t in ds.trials if t.meets]
    assert len(ds.trials) == len(counts) and len(meeting) > 1
    assert ds.result.plans[0].training.time_s == min(t.time_s for t in meeting)
    assert ds.devices == 1024 and "fastest" in ds.rule
    cheapest = S.smallest_devices(base, counts, budget_usd=2e6, objective="cost")
    assert cheapest.result.plans[0].training.cost_usd == min(t.cost_usd for t in cheapest.trials if t.meets)


def test_a_budget_that_cannot_be_met_reports_the_cheapest_count():
    base, counts = _budget_job(), S.device_counts(8, 1024, "pow2", 8)
    missed = S.smallest_devices(base, counts, budget_usd=1e5)
    # 8 H100 fit the job since they expose 79.6 GiB (issue 34), and they are the cheapest count
    assert re.search(r"the cheapest, 8 devices, takes .* and costs \$11[0-9],[0-9]{3}", missed.gate_failed)
    assert missed.devices == 8


def test_a_device_range_without_deadline_or_budget_gives_the_fewest_that_fit_and_each_count():
    res = run_cli("plan", "--model", "llama3-70b", "--devices", "8..128", "--global-batch", "256", "--json")
    assert res.exit_code == 0, res.stderr
    ds = json.loads(res.stdout)["devices_search"]
    assert [t["devices"] for t in ds["tried"]] == [8, 16, 32, 64, 128]
    fitting = [t["devices"] for t in ds["tried"] if t["time_s"] is not None]
    assert ds["chosen"] == min(fitting) and ds["rule"] == "the fewest devices that fit"
    table = run_cli("plan", "--model", "llama3-70b", "--devices", "8..128", "--global-batch", "256", "-q")
    assert "Chosen: " in table.stdout and "the fewest devices that fit" in table.stdout


# ------------------------------------------------------------------------------------ shared layer terms

def _layer_term_jobs():
    """(job, devices, space) of several kinds: dense, LoRA/QLoRA with offload, MoE with MLA, DeepEP,
    standard attention with eager kernels, packed sequences, torchtitan's op recompute."""
    moe = S.SearchSpace(tp=(1, 2, 8), pp=(4, 8), cp=(1, 2), zero=(1, 3))
    # QLoRA plans run under a framework that has QLoRA, as `plan --allow finetune=...,qlora` picks it
    lora = {"model": "llama3-8b", "hardware": "h100-sxm", "global_batch": 32}
    lora_space = S.SearchSpace(finetune=("full", "lora", "qlora"), offload=("none", "optimizer", "activations"),
                               pp=(1, 2))
    return [
        (job(), 16, S.SearchSpace()),
        (S.with_search_framework(S.job_scenario(lora), lora, lora_space, "options"), 8, lora_space),
        (S.job_scenario({"model": "deepseek-v3", "hardware": "h100-sxm", "global_batch": 256, "seq_len": 4096,
                         "precision": "fp8"}), 256, moe),
        (S.job_scenario({"model": "qwen3-30b-a3b", "hardware": "b200", "global_batch": 128,
                         "parallel": {"moe_overlap": "deepep"}}), 64, S.SearchSpace()),
        # standard attention over packed sequences: DeepSpeed's (Megatron-Core runs packing through fused kernels only)
        (job(attention="standard", kernels="eager", packed_length=512, framework="deepspeed"), 16, S.SearchSpace()),
        (S.job_scenario({"model": "llama3-8b", "hardware": "h100-sxm", "global_batch": 64,
                         "framework": "torchtitan"}), 16, S.SearchSpace(recompute=("none", "op", "full"))),
    ]


def test_shared_terms_read_only_their_knobs():
    """The search computes the layer terms once per distinct LAYER_KNOBS combination and the
    data-parallel collectives once per DP_KNOBS combination (and split): that is only right if they
    read no other knob of the layout (the job-wide ones and the call's pipeline split aside)."""
    from trainest.layout import Layout
    from trainest.scenario import job_of, layout_of
    from trainest.step.compose import DP_KNOBS, LAYER_KNOBS, layer_terms, step_dp_traffic
    read: set[str] = set()
    fields = set(Layout._fields)

    class Watched(Layout):
        __slots__ = ()

        def __getattribute__(self, name):
            if name in fields:
                read.add(name)
            return super().__getattribute__(name)

    # recompute_share (partial recompute, docs/model.md §7.10) is read by the layer terms: it is 1 unless the job
    # gives recompute_layers, and then it follows pp and vpp, which evaluate_grid adds to the layer knobs
    # (tests/test_recompute_layers.py checks the grid against estimate)
    for terms, knobs, job_wide in ((layer_terms, LAYER_KNOBS, {"tp_overlap", "moe_overlap", "pipeline_schedule",
                                                               "recompute_share"}),
                                   (step_dp_traffic, DP_KNOBS, {"dp_collectives", "dp_shard", "pipeline_split",
                                                                "pipeline_schedule"})):
        read.clear()
        for base, n, space in _layer_term_jobs():
            g = S.enumerate_plans(base, n, space)
            assert g.size > 0
            sel = np.arange(0, g.size, max(1, g.size // 500))
            for split in ("even", "balanced"):
                lay = g.layout(sel, pipeline_split=split, tp_overlap=1.0, dp_collectives="flat",
                               moe_overlap=base.parallel.moe_overlap)
                terms(job_of(base), Watched(*lay))
            one = layout_of(S._estimate_at(base, n, g, int(sel[-1])).scenario)       # floats, as estimate
            terms(job_of(base), Watched(*one))
        assert read <= set(knobs) | job_wide, read - set(knobs)
        assert set(knobs) <= read


def test_shared_terms_give_the_whole_step_bit_for_bit():
    """evaluate_grid's step times (layer terms and data-parallel collectives shared by the plans of a
    combination) equal step_terms computed whole for each plan, exactly."""
    from trainest.scenario import job_of
    from trainest.step import step_terms
    for base, n, space in _layer_term_jobs():
        g = S.enumerate_plans(base, n, space)
        ev = S.evaluate_grid(base, g)
        assert ev.fits.any()
        balanced = g.balanced
        for split, flag in (("even", 0.0), ("balanced", 1.0)):
            idx = np.flatnonzero(ev.fits_memory & (balanced == flag))
            if idx.size:
                lay = g.layout(idx, pipeline_split=split, tp_overlap=1.0 if base.parallel.tp_overlap else 0.0,
                               dp_collectives=base.parallel.dp_collectives,
                               dp_overlap=1.0 if base.parallel.dp_overlap else 0.0,
                               moe_overlap=base.parallel.moe_overlap)
                job = job_of(base)._replace(devices=float(n))     # the grid's N (base is the job on one device)
                assert np.array_equal(step_terms(job, lay).time_s, ev.time_s[idx], equal_nan=True)


def test_first_rows_are_lexsorts_first_rows():
    """The top plans and the runner-ups, found without sorting every plan, are np.lexsort's first
    rows, ties (many here) in position order."""
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(1, 400))
        keys = tuple(rng.integers(0, 3, n).astype(float) for _ in range(3)) + (rng.integers(0, 6, n) * 0.5,)
        order = np.lexsort(keys)
        for count in (1, 3, 7, n + 2):
            assert np.array_equal(S._first_rows(keys, count), order[:count])
        among = np.flatnonzero(rng.random(n) < 0.4)
        if among.size:
            sub = among[np.lexsort(tuple(k[among] for k in keys))]
            assert np.array_equal(S._first_rows(keys, 2, among), sub[:2])


def test_a_search_without_a_global_batch_takes_the_estimates_default_rounded_to_the_device_count():
    # 0.5M tokens at 8192 = 64 sequences, a multiple of 8 and of 64; at 96 devices rounded up to 96
    for devices, expected in ((8, 64), (64, 64), (96, 96)):
        base = S.job_scenario({"model": "llama3-8b", "hardware": "h100-sxm"}, default_batch_devices=devices)
        assert base.global_batch == expected and "global_batch" in base.derived
    with pytest.raises(SpecError, match="needs the global batch"):
        S.job_scenario({"model": "llama3-8b", "hardware": "h100-sxm"})
    given = S.job_scenario({"model": "llama3-8b", "hardware": "h100-sxm", "global_batch": 8}, default_batch_devices=8)
    assert given.global_batch == 8 and "global_batch" not in given.derived


def test_a_default_batch_rounded_up_by_a_large_count_says_how_many_tokens_it_is():
    """`plan --devices 256..8192` without a batch takes 8192 sequences (67 M tokens per step: 0.5M rounded up to a
    multiple of 8192) and said only '(default: 0.5M tokens, a multiple of the device count)' (found walking issue
    36's pretraining task)."""
    from trainest.report.plan import batch_default_note
    from trainest.units import fmt_si
    small = S.job_scenario({"model": "llama3-8b", "hardware": "h100-sxm"}, default_batch_devices=8)
    large = S.job_scenario({"model": "llama3-8b", "hardware": "h100-sxm"}, default_batch_devices=8192)
    assert large.global_batch == 8192 and small.global_batch * small.seq_len <= 2 * 2**19
    assert "rounded up" not in batch_default_note(small)
    note = batch_default_note(large)
    assert f"{fmt_si(large.global_batch * large.seq_len)} tokens per step" in note and "--global-batch" in note


def test_plan_without_a_global_batch_says_it_took_the_default():
    res = run_cli("plan", "--model", "gpt3-125m", "--devices", "8")
    assert res.exit_code == 0, res.output
    assert "(default: 0.5M tokens, a multiple of the device count)" in " ".join(res.stdout.split())   # (wrapped)
    doc = json.loads(run_cli("plan", "--model", "gpt3-125m", "--devices", "8", "--json").stdout)
    assert doc["job"]["derived"] == ["global_batch"]
    given = json.loads(run_cli("plan", "--model", "gpt3-125m", "--devices", "8", "--global-batch", "64",
                               "--json").stdout)
    assert "derived" not in given["job"]


def test_when_nothing_fits_the_error_names_options_that_make_the_smallest_plan_fit():
    """The advice used to be the same generic line whatever filled the memory ("a smaller global batch"
    for a model whose weights and optimizer alone overflow); now it says what fills it and lists only
    changes that were checked to make the smallest plan fit."""
    job = ["--model", "llama3-70b", "--devices", "8", "--global-batch", "2"]      # (16 H100 fit it: 79.6 GiB each)
    res = run_cli("plan", *job)
    assert res.exit_code == 1 and res.stdout == "" and res.stderr.count("\n") == 1
    assert "whatever the batch or sequence" in res.stderr and "smaller global batch" not in res.stderr
    options = res.stderr.split("options: ")[1].strip().split(", ")
    assert options[0] == "more devices" and "--offload optimizer" in options
    for option in options[1:]:
        assert run_cli("plan", *job, *option.split()).exit_code == 0, option
    spark = run_cli("plan", "--model", "llama3-70b", "--hardware", "dgx-spark", "--devices", "1", "--global-batch", "2")
    assert spark.exit_code == 1 and "--finetune qlora" in spark.stderr and "--offload" not in spark.stderr
    long = run_cli("plan", "--model", "gpt3-1.3b", "--devices", "1", "--seq-len", "1048576", "--global-batch", "1")
    assert long.exit_code == 1 and "are activations" in long.stderr and "a shorter sequence" in long.stderr


@pytest.mark.parametrize("args, needle", [
    (["--allow", "tp=3"], "--allow tp=3: does not divide the 32 heads of llama3-8b; allowed: 1, 2, 4, 8, 16, 32"),
    (["--allow", "cp=3"], "--allow cp=3: does not divide seq_len=8192"),
    (["--top", "0"], "--top 0 must be at least 1"),                    # it was replaced by 5, silently
    (["--devices", "0"], "Error: --devices '0' must be"),              # the value once, not twice
])
def test_plan_refuses_what_it_cannot_search(args, needle):
    res = run_cli("plan", "--model", "llama3-8b", *args)
    assert res.exit_code == 1 and res.stdout == "" and needle in res.stderr and res.stderr.count("\n") == 1


def test_plan_takes_the_batch_in_tokens_without_a_device_count():
    """--global-batch-tokens without --devices: the default count's lookup must not add a batch in sequences
    (it did: 'give the global batch once')."""
    res = run_cli("plan", "--model", "llama3-8b", "--global-batch-tokens", "0.5M", "--json")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["job"]["global_batch"] == 64


def test_adapter_plans_of_a_full_job_train_a_fine_tuning_set_by_default():
    """--allow finetune=lora without --tokens: the LoRA plans took the job's pre-training budget (20 tokens per
    parameter) for their days and cost; they take the fine-tuning default, and given tokens stay."""
    from trainest.scenario import DEFAULT_FINETUNE_TOKENS
    base = S.job_scenario({"model": "llama3-8b", "hardware": "h100-sxm", "global_batch": 32})
    res = S.search(base, 8, S.space_from_options(["finetune=full,lora"]), top=50)
    tokens = {e.scenario.finetune.method: e.scenario.tokens for e in res.plans}
    assert tokens["lora"] == DEFAULT_FINETUNE_TOKENS and tokens.get("full", base.tokens) == base.tokens
    given = S.job_scenario({"model": "llama3-8b", "hardware": "h100-sxm", "global_batch": 32, "tokens": "1B"})
    res = S.search(given, 8, S.space_from_options(["finetune=lora"]), top=1)
    assert res.plans[0].scenario.tokens == 1e9


def test_tp_overlap_gives_no_gain_to_tp_beyond_the_node_and_estimate_warns():
    """physics.md #4: with --tp-overlap a TP group over two H100 nodes is timed exposed in the search, as in
    estimate, and estimate says so (tp 8 inside the node keeps the overlap and no warning)."""
    base = S.job_scenario({"model": "llama3-70b", "hardware": "h100-sxm", "global_batch": 128})
    over = S.job_scenario({"model": "llama3-70b", "hardware": "h100-sxm", "global_batch": 128,
                           "parallel": {"tp_overlap": True}})
    space = S.SearchSpace(tp=(8, 16), zero=(1,), recompute=("selective",), sequence_parallel=(True,))
    g = S.enumerate_plans(base, 64, space)
    plain, hidden = S.evaluate_grid(base, g).time_s, S.evaluate_grid(over, g).time_s
    ok = np.isfinite(plain)
    wide, narrow = ok & (g.tp == 16), ok & (g.tp == 8)
    assert wide.any() and narrow.any()
    assert np.array_equal(hidden[wide], plain[wide])
    assert (hidden[narrow] < plain[narrow]).all()
    args = ("--model", "llama3-70b", "--devices", "32", "--sequence-parallel", "--global-batch", "32", "--tp-overlap",
            "--json")
    warned = json.loads(run_cli("estimate", *args, "--tp", "16").stdout)["warnings"]
    assert any(w.startswith("tp_overlap: the 16-way TP groups span") for w in warned)
    assert not any(w.startswith("tp_overlap") for w in json.loads(run_cli("estimate", *args, "--tp", "8").stdout)["warnings"])


def test_the_search_times_straddling_groups_as_estimate_and_prefers_those_inside():
    """physics.md #3: on 144 GB200 (two full NVL72 racks) tp 16 straddles; the vectorised grid (which knows its
    144 devices) times it as estimate does, and the best plan keeps TP inside the racks."""
    base = S.job_scenario({"model": "llama3-70b", "hardware": "gb200", "global_batch": 144})
    g = S.enumerate_plans(base, 144, S.SearchSpace(tp=(8, 16), zero=(1,), sequence_parallel=(True,)))
    ev = S.evaluate_grid(base, g)
    wide = np.flatnonzero(ev.fits & (g.tp == 16))
    assert wide.size
    for i in wide[:: max(1, wide.size // 5)]:
        assert S._estimate_at(base, 144, g, int(i)).step.time_s == pytest.approx(ev.time_s[i], rel=1e-12)
    best = S.search(base, 144, S.SearchSpace(tp=(8, 16), zero=(1,), sequence_parallel=(True,)), top=1)
    assert best.plans[0].scenario.parallel.tp == 8


def test_a_cost_objective_over_a_device_range_picks_the_cheapest_count(capsys):
    """`plan --devices 8..128 --objective cost` chose 8 devices, "the fewest that fit", where 16 were cheaper
    (and twice as fast); the table said "the fastest plan at each" of plans ranked by cost."""
    import json

    code, out, err = call_entry(["plan", "--model", "llama3-8b", "--devices", "8..128", "--tokens", "1T",
                                 "--objective", "cost", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    trials = [t for t in doc["devices_search"]["tried"] if t["meets"]]
    cheapest = min(trials, key=lambda t: t["cost_usd"])
    # (with 79.6 GiB per H100, issue 34, the fewest that fit, 8, are also the cheapest)
    assert doc["devices_search"]["chosen"] == doc["plans"][0]["devices"] == cheapest["devices"]
    code, out, err = call_entry(["plan", "--model", "llama3-8b", "--devices", "8..128", "--tokens", "1T",
                                 "--objective", "cost"], capsys)
    assert "the cheapest plan at each" in out and "the cheapest count that fits" in " ".join(out.split())


MOE_JOB = {"model": "qwen3-30b-a3b", "hardware": "b200", "global_batch": 128}


def test_the_plan_search_over_the_job_choices_is_the_best_of_one_search_per_value():
    """Issue 33: the MoE dispatcher (and CUDA graphs, the all-to-all overlap) is a choice a user makes, so `plan
    --allow moe_dispatcher=alltoall,deepep,hybridep` searches the layouts once per value and ranks every plan:
    the winner is the best of the per-value searches, its runner-up in the dispatcher the best of the other
    values, and every plan carries its value."""
    space = S.space_from_options(["moe_dispatcher=alltoall,deepep,hybridep"])
    assert space.job_choices == (("moe_dispatcher", ("alltoall", "deepep", "hybridep")),)
    base = S.job_scenario(MOE_JOB)
    r = S.search(base, 16, space, top=4)
    single = {v: S.search(S.job_variant(base, {"moe_dispatcher": v}), 16, S.space_from_options([]), top=1)
              for v in ("alltoall", "deepep", "hybridep")}
    best = min(single, key=lambda v: single[v].scores[0])
    assert r.scores[0] == pytest.approx(single[best].scores[0])
    assert r.plans[0].scenario.knob("moe_dispatcher") == best
    assert list(r.scores) == sorted(r.scores)
    ru = r.runner_up_by_knob["moe_dispatcher"]
    assert ru is not None and ru.estimate.scenario.knob("moe_dispatcher") != best
    others = min(single[v].scores[0] for v in single if v != best)
    assert ru.score_ratio == pytest.approx(others / single[best].scores[0])
    assert r.space["moe_dispatcher"] == ["alltoall", "deepep", "hybridep"]


def test_a_job_choice_is_given_once_and_only_where_the_model_runs_it(capsys):
    """A dispatcher both given and searched is refused in one line; a dense model cannot search DeepEP."""
    code, out, err = call_entry(["plan", "--model", "qwen3-30b-a3b", "--hardware", "b200", "--devices", "16",
                                 "--global-batch", "128", "--moe-dispatcher", "deepep",
                                 "--allow", "moe_dispatcher=alltoall,hybridep"], capsys)
    assert code != 0 and out == "" and "give it once" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SpecError, match="dense"):
        S.search(S.job_scenario({**MOE_JOB, "model": "llama3-8b"}), 8,
                 S.space_from_options(["moe_dispatcher=alltoall,deepep"]))
    # the switches (FP8 weights, FP8 attention, the fused grouped MLP) take on and/or off, each where it runs
    assert S.space_from_options(["fp8_params=on,off"]).job_choices == (("fp8_params", (False, True)),)
    with pytest.raises(SpecError, match="on and/or off"):
        S.space_from_options(["fp8_params=maybe"])
    with pytest.raises(SpecError, match="precision is bf16"):
        S.search(S.job_scenario(MOE_JOB), 16, S.space_from_options(["fp8_params=on,off"]))
    r = S.search(S.job_scenario({**MOE_JOB, "precision": "fp8"}), 16, S.space_from_options(["fp8_params=on,off"]))
    assert r.runner_up_by_knob["fp8_params"] is not None
    assert {r.plans[0].scenario.knob("fp8_params"), r.runner_up_by_knob["fp8_params"].estimate.scenario.knob(
        "fp8_params")} == {False, True}


def test_plans_with_standard_attention_keep_cp_1_under_megatron_core():
    """Megatron-Core runs context parallelism through fused attention only (rules.CP_FUSED_ATTENTION): with
    `attention: standard` no plan, winner or runner-up, splits the sequence; with flash attention the same
    long-sequence job does search cp > 1."""
    job = {"model": "llama3-8b", "hardware": "h100-sxm", "seq_len": 32768, "global_batch": 16, "tokens": "1B"}
    standard = S.search(S.job_scenario({**job, "attention": "standard"}), 16, top=10)
    chosen = list(standard.plans) + [ru.estimate for ru in standard.runner_up_by_knob.values() if ru is not None]
    assert chosen and all(e.scenario.parallel.cp == 1 for e in chosen)
    flash = S.search(S.job_scenario({**job, "attention": "flash"}), 16, top=50)
    assert any(e.scenario.parallel.cp > 1 for e in flash.plans) or flash.runner_up_by_knob["cp"] is not None
