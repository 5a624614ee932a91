"""The search itself: the grid enumerated and evaluated, the plans ranked by the objective (then memory, ZeRO
stage, recomputation), the runner-up per knob, and the messages when no layout exists or none fits."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainest.errors import SpecError
from trainest.estimate import Estimate, estimate
from trainest.frameworks import FRAMEWORKS
from trainest.knobs import ASKED_ONLY
from trainest.record import replace
from trainest.scenario import (
    Scenario,
    check_finetune,
    check_framework_finetune,
    check_offload,
    check_quantised_base,
    default_framework,
)
from trainest.search.evaluate import Progress, evaluate_grid
from trainest.search.grid import FINETUNE_NAMES, OFFLOAD_NAMES, RECOMPUTE_NAMES, Grid, enumerate_plans
from trainest.search.job import objective_scale, plan_scenario
from trainest.search.space import EVERY_PLAN, KNOBS, MOE_ONLY, SearchSpace, check_space
from trainest.step.collectives import network_gap


@dataclass(frozen=True)
class SearchStats:
    evaluated: int
    feasible: int
    rejected: dict[str, int]
    seconds: float

    @property
    def plans_per_s(self) -> float:
        return self.evaluated / self.seconds if self.seconds > 0 else float("inf")


@dataclass(frozen=True)
class RunnerUp:
    """The best plan whose value of `knob` differs from the winner's."""

    knob: str
    estimate: Estimate
    score_ratio: float           # its objective / the winner's (≥ 1)


@dataclass(frozen=True)
class SearchResult:
    base: Scenario
    devices: int
    objective: str
    stats: SearchStats
    plans: tuple[Estimate, ...]                    # the top K, best first
    scores: tuple[float, ...]                      # objective value of each
    runner_up_by_knob: dict[str, RunnerUp | None]  # knob -> runner-up (None: no other value fits)
    space: dict[str, list]


def _estimate_at(base: Scenario, devices: int, g: Grid, i: int) -> Estimate:
    def at(knob: str) -> int:
        return int(g.column(knob, i))

    s = plan_scenario(base, devices, tp=at("tp"), pp=at("pp"), cp=at("cp"), vpp=at("vpp"),
                      micro_batch=at("micro_batch"), zero=at("zero"), sequence_parallel=bool(at("sp")),
                      recompute=RECOMPUTE_NAMES[at("recompute")], finetune=FINETUNE_NAMES[at("finetune")],
                      pipeline_split="balanced" if at("balanced") else "even", offload=OFFLOAD_NAMES[at("offload")],
                      ep=at("ep"), etp=at("etp"))
    return estimate(s)


def no_fit_message(base: Scenario, devices: int, g: Grid, ev: Any, space: SearchSpace) -> str:
    """Why no plan fits, from the plan that needs the least memory: its need against the device, what
    fills it (the model states, which no batch or sequence shrinks, or the activations), and the
    changes under which that plan fits (each checked on it: `fitting_changes`)."""
    i = int(np.nanargmin(ev.memory_bytes))
    need = float(ev.memory_bytes[i])
    text = (f"{base.model.name} does not fit on {devices} x {base.hardware.name} in any of {g.size:,} plans: the "
            f"smallest needs {need / 2**30:.1f} GiB per device, the device has "
            f"{base.hardware.training_memory_bytes / 2**30:.1f} GiB"
            + (f" of which {base.memory_headroom_bytes / 2**30:.1f} GiB stay free (--memory-headroom "
               f"{base.memory_headroom})" if base.memory_headroom_bytes else ""))
    smallest = _estimate_at(base, devices, g, i).scenario
    mem = estimate(smallest).memory
    states = mem.weights_bytes + mem.gradients_bytes + mem.optimizer_bytes + mem.overhead_bytes
    usable = base.hardware.training_memory_bytes - base.memory_headroom_bytes
    what = (f"of it {mem.activations_bytes / 2**30:.1f} GiB are activations" if states < usable else
            f"its weights, gradients, optimizer state and fixed overhead alone take {states / 2**30:.1f} GiB, "
            f"whatever the batch or sequence")
    ways = ["more devices"] + (["a shorter sequence"] if states < usable else []) + fitting_changes(smallest, space)
    return f"{text}; {what}; options: {', '.join(ways)}"


def fitting_changes(s: Scenario, space: SearchSpace) -> list[str]:
    """The options (as command-line text) under which the plan `s` fits: offload to host memory, BF16
    Adam moments, LoRA, ZeRO-3 and full recompute where the search did not already try them; each is
    estimated on `s`, so only what makes it fit is named."""
    p = s.parallel
    trials: list[tuple[str, Any]] = []
    if space.offload is None and s.offload == "none":
        trials += [(f"--offload {o}", lambda o=o: replace(s, offload=o)) for o in ("optimizer", "activations")]
    if s.adam_moments == "fp32" and s.optimizer == "adamw" and not s.offload.startswith("optimizer"):
        trials.append(("--adam-moments bf16", lambda: replace(s, adam_moments="bf16")))   # (no CPU Adam)
        trials.append(("--optimizer adamw-8bit", lambda: replace(s, optimizer="adamw-8bit")))
    if 3 not in space.zero and p.dp * p.cp > 1:
        trials.append(("--allow zero=3", lambda: replace(s, parallel=replace(p, zero=3))))
    if "full" not in space.recompute:
        trials.append(("--allow recompute=full", lambda: replace(s, recompute="full")))
    if s.finetune.method == "full" and space.finetune is None and s.model.hybrid is None:   # the first that fits
        trials += [(f"--finetune {m}", lambda m=m: _with_method(s, m)) for m in ("lora", "qlora")]
    found: list[str] = []
    for text, changed in trials:
        if text == "--finetune qlora" and "--finetune lora" in found:
            continue
        try:
            trial = changed()
            if text.startswith("--offload"):
                check_offload(trial.offload, trial.hardware, text)
            if estimate(trial).memory.fits:
                found.append(text)
        except SpecError:       # the change does not apply here (unified memory, no host described, ...)
            continue
    return found


def _with_method(s: Scenario, method: str) -> Scenario:
    """The plan `s` fine-tuned by `method`, as `--finetune method` would run it: a QLoRA under a framework with
    no QLoRA takes a QLoRA's default framework where the framework was derived (with its kernels, and full
    recompute for a mode it lacks); a SpecError where it cannot (a framework given, a pipeline it lacks)."""
    ft = check_finetune(method, s.model, s.precision, method)
    if method == "qlora":
        check_quantised_base(4, s.hardware, s.framework, f"--finetune {method}")
    if method != "qlora" or FRAMEWORKS[s.framework].qlora or "framework" not in s.derived:
        check_framework_finetune(s.framework, method, f"--finetune {method}")
        return replace(s, finetune=ft)
    name = default_framework(s.hardware, method)
    fw = FRAMEWORKS[name]
    check_framework_finetune(name, method, f"--finetune {method}")
    if s.parallel.pp > 1 and not fw.pipeline:
        raise SpecError(f"--finetune {method}: {name} has no pipeline parallelism")
    return replace(s, finetune=ft, framework=name, kernels=fw.kernels if "kernels" in s.derived else s.kernels,
                   recompute=s.recompute if s.recompute in fw.recompute_modes else "full")


def no_layout_message(base: Scenario, devices: int, g: Grid) -> str:
    r = g.structural_rejects
    return (f"no layout of {devices} devices for {base.model.name}: tp·pp·cp (tp from {g.values['tp']}, "
            f"pp dividing layers={base.model.layers}, cp dividing seq_len={base.seq_len}) must divide devices and "
            f"the resulting dp must divide global_batch={base.global_batch} "
            f"({r['devices_indivisible']} indivisible by devices, {r['batch_indivisible']} by the batch, "
            f"{r['interleaving_indivisible']} interleaved with micro-batches per step not a multiple of pp)")


def _first_rows(keys: tuple[np.ndarray, ...], count: int, among: np.ndarray | None = None) -> np.ndarray:
    """The positions of the first `count` rows of `keys` (aligned arrays, the last the primary key) in
    np.lexsort's order (ties kept in position order), of the positions `among` (default: all). Only
    the rows whose primary key is at most the count-th smallest are sorted: they are the order's
    first rows."""
    rows = np.arange(keys[-1].size) if among is None else among
    primary = keys[-1][rows]
    if rows.size > count:
        rows = rows[primary <= np.partition(primary, count - 1)[count - 1]]
    return rows[np.lexsort(tuple(k[rows] for k in keys))[:count]]


def search(base: Scenario, devices: int, space: SearchSpace = EVERY_PLAN, *, objective: str = "time",
           top: int = 5, progress: Progress | None = None) -> SearchResult:
    """Evaluate every plan of `devices` devices and return the best `top` and the per-knob runner-ups.

    Raises SpecError when no layout exists or none fits in device memory."""
    if devices < 1:
        raise SpecError(f"devices={devices} must be at least 1")
    if top < 1:
        raise SpecError(f"--top {top} must be at least 1")
    if space.job_choices:
        return search_job_choices(base, devices, space, objective=objective, top=top, progress=progress)
    gap = network_gap(base.hardware, base.devices_per_node, devices, "--devices-per-node", "--hardware")
    if gap:
        raise SpecError(gap)
    scale = objective_scale(base, devices, objective)
    check_space(base, space)
    t0 = time.perf_counter()
    g = enumerate_plans(base, devices, space)
    if g.size == 0:
        raise SpecError(no_layout_message(base, devices, g))
    ev = evaluate_grid(base, g, progress)
    rejected = dict(g.structural_rejects)
    rejected["out_of_memory"] = int(g.size - np.count_nonzero(ev.fits_memory))
    rejected["non_finite"] = int(g.size - np.count_nonzero(ev.fits) - rejected["out_of_memory"])
    feasible = int(np.count_nonzero(ev.fits))
    evaluated = feasible + sum(rejected.values())
    if feasible == 0:
        raise SpecError(no_fit_message(base, devices, g, ev, space))
    idx = np.flatnonzero(ev.fits)
    # by the objective, then memory, ZeRO stage and recomputation (np.lexsort's keys: the last first)
    ranking = (g.column("recompute", idx), g.column("zero", idx), ev.memory_bytes[idx], ev.time_s[idx] * scale)
    first = _first_rows(ranking, top)                # positions in idx
    best = idx[first]
    plans = tuple(_estimate_at(base, devices, g, int(i)) for i in best)
    best_score = float(ev.time_s[best[0]] * scale)
    runner: dict[str, RunnerUp | None] = {}
    for knob in KNOBS:
        if knob in ASKED_ONLY + MOE_ONLY and knob not in g.values:
            continue                  # not searched: every plan has the job's value
        values = g.column("sp" if knob == "sequence_parallel" else knob, idx)
        others = np.flatnonzero(values != values[first[0]])
        if others.size == 0:
            runner[knob] = None
            continue
        j = int(idx[_first_rows(ranking, 1, others)[0]])
        runner[knob] = RunnerUp(knob=knob, estimate=_estimate_at(base, devices, g, j),
                                score_ratio=float(ev.time_s[j] * scale) / best_score)
    stats = SearchStats(evaluated=evaluated, feasible=feasible, rejected=rejected, seconds=time.perf_counter() - t0)
    return SearchResult(base=base, devices=devices, objective=objective, stats=stats, plans=plans,
                        scores=tuple(float(ev.time_s[i] * scale) for i in best), runner_up_by_knob=runner,
                        space=g.values)


def search_job_choices(base: Scenario, devices: int, space: SearchSpace, *, objective: str, top: int,
                       progress: Progress | None) -> SearchResult:
    """`search` over the job's choices of `space.job_choices` (the MoE dispatcher, CUDA graphs, the all-to-all
    overlap: `--allow moe_dispatcher=alltoall,deepep`): one search of the layouts per combination of their values
    (`job_variant`), the best `top` plans of all, and for each such knob the best plan with another value as its
    runner-up. A combination the job cannot run is refused as an estimate would refuse it; one whose search finds
    no plan that fits is left out, and the search fails only where every combination does."""
    import itertools
    from dataclasses import replace as with_fields

    from trainest.search.job import job_variant
    knobs = tuple(k for k, _ in space.job_choices)
    inner = with_fields(space, job_choices=())
    found: list[tuple[tuple[str, ...], SearchResult]] = []
    failures: list[str] = []
    for values in itertools.product(*(v for _, v in space.job_choices)):
        variant = job_variant(base, dict(zip(knobs, values, strict=True)))
        try:
            found.append((values, search(variant, devices, inner, objective=objective, top=top, progress=progress)))
        except SpecError as exc:
            failures.append(f"{', '.join(f'{k} {v}' for k, v in zip(knobs, values, strict=True))}: {exc}")
    if not found:
        raise SpecError(failures[0] if len(failures) == 1 else "no combination has a plan: " + "; ".join(failures))
    pooled = [(score, i, e) for i, (_, r) in enumerate(found) for score, e in zip(r.scores, r.plans, strict=True)]
    ranked = sorted(pooled, key=lambda x: (x[0], x[1]))[:top]
    best_score, won = ranked[0][0], ranked[0][1]
    winner_values, winner = found[won]
    runner = dict(winner.runner_up_by_knob)
    for j, knob in enumerate(knobs):
        others = [(r.scores[0], r.plans[0]) for values, r in found if values[j] != winner_values[j]]
        best = min(others, key=lambda x: x[0], default=None)
        runner[knob] = None if best is None else RunnerUp(knob=knob, estimate=best[1], score_ratio=best[0] / best_score)
    rejected: dict[str, int] = {}
    for _, r in found:
        for k, v in r.stats.rejected.items():
            rejected[k] = rejected.get(k, 0) + v
    stats = SearchStats(evaluated=sum(r.stats.evaluated for _, r in found),
                        feasible=sum(r.stats.feasible for _, r in found), rejected=rejected,
                        seconds=sum(r.stats.seconds for _, r in found))
    return SearchResult(base=base, devices=devices, objective=objective, stats=stats,
                        plans=tuple(e for _, _, e in ranked), scores=tuple(x[0] for x in ranked),
                        runner_up_by_knob=runner, space={**winner.space, **{k: list(v) for k, v in space.job_choices}})
