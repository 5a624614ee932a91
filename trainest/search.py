"""The plan search: every parallel layout of one training job on N devices, evaluated at once.

A job is everything but the layout (model, hardware, sequence length, precision, global batch B,
token budget, price). A plan adds the layout: tensor t, pipeline p, context c and data d parallel
sizes (N = t·p·c·d), virtual stages v, micro-batch b, ZeRO stage, recomputation and sequence
parallelism. The search enumerates the whole space, builds numpy arrays of the knobs and calls
`memory_per_device` and `step_terms` on them (the same functions `estimate()` calls with floats),
so a plan's numbers here are the numbers `trainest estimate` prints for it. The parts of the step
that depend on a few knobs only (the layer terms, the data-parallel collectives) are computed once
per distinct combination of those knobs and handed to `step_terms`: the same numbers, bit for bit.

Counting (the search summary): candidates are enumerated as nested choices, t → p → c (then d =
N/(t·p·c)) → v → b → ZeRO → recompute → SP. A (t, p, c) whose product does not divide N, or whose d
does not divide B, has no valid completion and is counted once as rejected ("devices_indivisible",
"batch_indivisible"); a (t, p, c, v, b) with v > 1 whose micro-batches per step m = B/(d·b) are not a
multiple of p breaks the interleaved schedule's rule (docs/model.md §5.2) and is counted once
("interleaving_indivisible"); every complete plan is counted once and is either feasible or rejected
("out_of_memory", or "non_finite" should the model produce no number). So
evaluated = feasible + Σ rejected. Values outside the space the user allowed are not counted.

Ranking: objective "time" ranks by step time (the job's step count is fixed, so also by time to
train); "cost" by steps·t_step·N·price; "energy" by steps·t_step·N·P·PUE (rated power). Device price
and power do not depend on the layout in this model, so at a fixed N the three rank plans identically
and differ only in the `objective_value` reported. Ties are broken by the lower memory per device, then
the lower ZeRO stage and recomputation.

Device counts (`smallest_devices`, a `--devices LO..HI` range): candidate counts are tried smallest
first, each with its own exhaustive search, and one is chosen by a rule the output states
(`device_rule`): with `--deadline` alone the fewest devices that meet it; with `--budget` the best by
`--objective` among the counts that meet every constraint (time: the fastest within the budget);
with neither the fewest devices that fit (every count is searched: the table shows the fastest plan at
each). When none qualifies the error names the cheapest count (a budget was missed) or the fastest.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np

from trainest import training
from trainest.choices import (
    DEFAULT_RECOMPUTE_MODULES,
    DEVICE_COUNTS,
    FINETUNE_CODES,
    FINETUNES,
    OBJECTIVES,
    OFFLOAD_CODES,
    OFFLOADS,
    RECOMPUTE_CODES,
    RECOMPUTES,
)
from trainest.errors import SpecError
from trainest.estimate import Estimate, estimate
from trainest.frameworks import FRAMEWORKS
from trainest.knobs import ALLOW_NAMES, ASKED_ONLY, JOB_KEYS, JOB_PARALLEL_KEYS, SEARCHED
from trainest.layout import Job, Layout
from trainest.memory import memory_per_device
from trainest.scenario import (
    FineTune,
    Parallel,
    Scenario,
    check_finetune,
    check_framework_finetune,
    check_offload,
    check_quantised_base,
    check_scenario_keys,
    default_framework,
    default_global_batch,
    default_tokens,
    job_of,
    lora_base_bits,
    scenario_from_mapping,
)
from trainest.step import step_terms
from trainest.step.collectives import network_gap, tiers_of
from trainest.step.compose import DP_KNOBS, LAYER_KNOBS, layer_terms, step_dp_traffic
from trainest.step.traffic import DpTraffic
from trainest.units import fmt_seconds, fmt_si, parse_count

RECOMPUTE = RECOMPUTES
MOE_ONLY = ("ep", "etp")   # searched for mixture-of-experts models only
RECOMPUTE_NAMES = {code: name for name, code in RECOMPUTE_CODES.items()}
FINETUNE_NAMES = {code: name for name, code in FINETUNE_CODES.items()}
OFFLOAD_NAMES = {code: name for name, code in OFFLOAD_CODES.items()}

KNOBS = SEARCHED          # the knobs every plan sets (trainest.knobs), in the runner-up table's order
DEVICE_COUNT_MODES = DEVICE_COUNTS
REJECT_REASONS = ("out_of_memory", "devices_indivisible", "batch_indivisible", "interleaving_indivisible",
                  "non_finite")
ZERO_STAGES = (0, 1, 2, 3)
CHUNK_PLANS = 16384        # plans per vectorized call: 16k-element arrays stay in cache (~3x faster than one call)
MAX_DEVICE_COUNTS = 4096   # a device range may hold at most this many candidate counts
# recompute modes searched by default: those of every framework (torchtitan's `op` only when allowed)
SEARCH_RECOMPUTE = ("none", "selective", "full")
ALLOW_KEYS = ALLOW_NAMES
WORD_KNOBS = {"recompute": RECOMPUTE, "finetune": FINETUNES, "offload": OFFLOADS}   # knobs --allow gives by word

Progress = Callable[[int, int], None]   # (done, total) in plans (or device counts)


# ------------------------------------------------------------------------------------ the space

@dataclass(frozen=True)
class SearchSpace:
    """Which values each knob may take. `None` = every valid value (a divisor of the relevant size);
    a tuple restricts to those values (`--allow`); `max_*` caps a knob (`--max-tp`...)."""

    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = None
    vpp: tuple[int, ...] | None = None
    micro_batch: tuple[int, ...] | None = None
    zero: tuple[int, ...] = ZERO_STAGES
    recompute: tuple[str, ...] = SEARCH_RECOMPUTE
    sequence_parallel: tuple[bool, ...] = (False, True)
    finetune: tuple[str, ...] | None = None   # None: the job's method only (searched only when allowed)
    offload: tuple[str, ...] | None = None    # None: the job's offload only
    ep: tuple[int, ...] | None = None         # MoE models only; None: every divisor of the experts that fits
    etp: tuple[int, ...] | None = None        # MoE models only; None: every divisor of tp that divides f_e
    max_tp: int | None = None          # None: the scale-up domain (no cap when `tp` lists values)
    max_pp: int | None = None
    max_cp: int | None = None
    max_vpp: int | None = None
    max_micro_batch: int | None = None


def _int_list(text: str, where: str, *, minimum: int = 1, maximum: int = 10**7) -> tuple[int, ...]:
    values = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or not minimum <= int(part) <= maximum:
            raise SpecError(f"{where}: {part!r} is not an integer in {minimum}..{maximum}")
        values.append(int(part))
    return tuple(sorted(set(values)))


def space_from_options(allow: list[str] | None = None, **maxima: int | None) -> SearchSpace:
    """Build a SearchSpace from `--allow KNOB=V1,V2` strings and `max_tp=...` style caps.

    KNOB is tp, pp, cp, vpp, micro_batch (mb), zero, recompute (none|selective|full|op), sp
    (sequence_parallel: on|off), finetune (full|lora|qlora) or offload (none|optimizer|...)."""
    values: dict[str, Any] = {}
    seen: dict[str, str] = {}          # knob -> the --allow item that gave it
    for item in allow or []:
        key, sep, rest = item.partition("=")
        key = key.strip().lower().replace("-", "_")
        where = f"--allow {item!r}"
        if not sep or key not in ALLOW_KEYS or not rest.strip():
            raise SpecError(f"{where}: use KNOB=V1,V2 with KNOB one of {', '.join(sorted(set(ALLOW_KEYS)))}")
        knob = ALLOW_KEYS[key]
        if knob in seen:
            raise SpecError(f"{where}: {knob} is already given ({seen[knob]!r}); give its values once, "
                            f"--allow {key}=V1,V2")
        seen[knob] = item
        if knob in WORD_KNOBS:
            vocabulary = WORD_KNOBS[knob]
            got = tuple(dict.fromkeys(v.strip().lower() for v in rest.split(",")))
            bad = [v for v in got if v not in vocabulary]
            if bad:
                raise SpecError(f"{where}: {knob} {bad[0]!r} is not one of {', '.join(vocabulary)}")
            values[knob] = tuple(r for r in vocabulary if r in got)
        elif knob == "sequence_parallel":
            switch = {"on": True, "off": False, "true": True, "false": False, "1": True, "0": False}
            got_sp = [switch.get(v.strip().lower()) for v in rest.split(",")]
            if None in got_sp:
                raise SpecError(f"{where}: sp takes on and/or off")
            values[knob] = tuple(sorted(set(got_sp)))
        elif knob == "zero":
            values[knob] = _int_list(rest, where, minimum=0, maximum=3)
        else:
            values[knob] = _int_list(rest, where)
    for name, cap in maxima.items():
        if cap is not None and cap < 1:
            raise SpecError(f"--{name.replace('_', '-')} {cap} must be at least 1")
    options: dict[str, Any] = {**values, **maxima}
    return SearchSpace(**options)


def job_for_methods(mapping: dict[str, Any], space: SearchSpace, where: str) -> dict[str, Any]:
    """The job mapping of a search over fine-tuning methods (`--allow finetune=...`): a method the job
    gives must be one the search allows (else a SpecError: the two contradict each other); without one the
    job takes an allowed method, a LoRA one where allowed (qlora for `base_bits: 4`), so that the LoRA
    options (rank, targets, base bits) apply to the LoRA plans. The search is a fine-tune either way."""
    allowed = space.finetune
    if allowed is None:
        return mapping
    given = mapping.get("finetune")
    ft: dict[str, Any] = {"method": given} if isinstance(given, str) else dict(given or {})
    method = ft.get("method")
    if method is not None:
        if method in FINETUNES and method not in allowed:
            raise SpecError(f"{where}.finetune.method: {method} is not among the methods the search allows "
                            f"(--allow finetune={','.join(allowed)}); give one of them, or leave the method out")
        return mapping
    frozen = [m for m in allowed if m != "full"]
    chosen = ("qlora" if "qlora" in frozen and ft.get("base_bits") == 4 else frozen[0]) if frozen else "full"
    return {**mapping, "finetune": {**ft, "method": chosen}}


def with_search_framework(base: Scenario, mapping: dict[str, Any], space: SearchSpace, where: str,
                          default_batch_devices: int | None = None, shape: dict | None = None) -> Scenario:
    """The job `base` of a search that allows QLoRA plans (`--allow finetune=...,qlora`) under a framework it
    took by default and that has no QLoRA: the job under a QLoRA's default framework instead (shown as
    derived), so that every method searched runs under the one framework; else `base`."""
    if ("qlora" not in (space.finetune or ()) or "framework" not in base.derived
            or FRAMEWORKS[base.framework].qlora):
        return base
    name = default_framework(base.hardware, "qlora")
    if not FRAMEWORKS[name].qlora:
        return base
    job = job_scenario({**job_for_methods(mapping, space, where), "framework": name}, where,
                       default_batch_devices=default_batch_devices, shape=shape)
    return replace(job, derived=job.derived + ("framework",))


def check_space(base: Scenario, space: SearchSpace) -> None:
    """The values `--allow` names must suit the job and the hardware: tp dividing the heads and cp the
    sequence (else no plan can take them), and the checks a scenario gets for the fine-tuning methods and
    offload modes (no offload on unified memory, QLoRA at a 16/32-bit precision, ...)."""
    m = base.model
    heads = m.heads if m.hybrid is None else math.gcd(m.heads, m.hybrid.mamba.heads, m.hybrid.mamba.groups)
    for knob, allowed, size, what in (("tp", space.tp, heads, f"the {heads} heads of {m.name}"),
                                      ("cp", space.cp, base.seq_len, f"seq_len={base.seq_len}")):
        bad = [v for v in allowed or () if size % v]
        if bad:
            raise SpecError(f"--allow {knob}={','.join(map(str, bad))}: does not divide {what}; allowed: "
                            f"{', '.join(map(str, _divisors(size)))}")
    _check_expert_space(base, space)
    _check_framework_space(base, space)
    for offload in space.offload or ():
        check_offload(offload, base.hardware, "--allow offload")
    ft = base.finetune
    for method in space.finetune or ():
        check_framework_finetune(base.framework, method, f"--allow finetune={method}")
        if method == "qlora":
            check_quantised_base(4, base.hardware, base.framework, f"--allow finetune={method}")
        given = {"method": method} if method == "full" else \
            {"method": method, "rank": ft.rank, "targets": ft.targets,
             "base_bits": 4 if method == "qlora" else lora_base_bits(ft)}
        check_finetune(given, base.model, base.precision, "--allow finetune")


def _check_expert_space(base: Scenario, space: SearchSpace) -> None:
    """`--allow ep=` / `etp=` values no plan can take (docs/model.md §15.8): on a dense model anything but 1;
    an ep not dividing the experts; an etp not dividing the expert width f_e or any tp searched."""
    m = base.model
    for knob in MOE_ONLY:
        allowed = getattr(space, knob) or ()
        if m.moe is None and any(v != 1 for v in allowed):
            raise SpecError(f"--allow {knob}={','.join(map(str, allowed))}: {knob} needs a mixture-of-experts model, "
                            f"and {m.name} is dense; allowed: 1")
    if m.moe is None:
        return
    bad = [v for v in space.ep or () if m.moe.experts % v]
    if bad:
        raise SpecError(f"--allow ep={','.join(map(str, bad))}: does not divide the {m.moe.experts} experts of "
                        f"{m.name}; allowed: {', '.join(map(str, _divisors(m.moe.experts)))}")
    width, tps = m.moe.expert_ffn_hidden, tp_sizes(base, space)
    fits = [k for k in _divisors(width) if any(t % k == 0 for t in tps)]
    bad = [v for v in space.etp or () if v not in fits]
    if bad:
        raise SpecError(f"--allow etp={','.join(map(str, bad))}: expert tensor parallelism must divide the expert "
                        f"width expert_ffn_hidden={width} and tp (tp searched: {', '.join(map(str, tps))}); "
                        f"allowed: {', '.join(map(str, fits))}")


def _check_framework_space(base: Scenario, space: SearchSpace) -> None:
    """`--allow zero=` / `pp=` values the job's framework does not run (trainest/frameworks.py: `zero_stages`,
    `pipeline`, `pp_zero_stages`): a stage it lacks, a pipeline it lacks, or only pipelines with only stages
    its pipeline refuses."""
    name, fw = base.framework, FRAMEWORKS[base.framework]
    if not any(r in fw.recompute_modes for r in space.recompute):
        raise SpecError(f"--allow recompute={','.join(space.recompute)}: not a recompute mode of {name}; allowed "
                        f"under it: {', '.join(fw.recompute_modes)}")
    if space.zero != ZERO_STAGES:                      # listed by --allow
        bad = [z for z in space.zero if z not in fw.zero_stages]
        if bad:
            raise SpecError(f"--allow zero={','.join(map(str, bad))}: {name} has no ZeRO-"
                            f"{'/'.join(map(str, bad))} (trainest/frameworks.py); allowed under it: "
                            f"{', '.join(map(str, fw.zero_stages))}")
    pipelines = [p for p in space.pp or () if p > 1]
    if space.pp is None or len(pipelines) < len(space.pp):
        return                                         # p = 1 can be searched
    if not fw.pipeline:
        raise SpecError(f"--allow pp={','.join(map(str, pipelines))}: {name} has no pipeline parallelism; "
                        f"allowed under it: 1")
    with_pp = fw.zero_stages_with(2)
    if not any(z in with_pp for z in space.zero):
        raise SpecError(f"--allow zero={','.join(map(str, space.zero))} with pp={','.join(map(str, pipelines))}: "
                        f"{name} does not run these ZeRO stages with pipeline parallelism (DeepSpeed's PipelineEngine: "
                        f"ZeRO-2 and ZeRO-3 are incompatible with it); allowed with a pipeline: "
                        f"{', '.join(map(str, with_pp))}")


def tp_sizes(base: Scenario, space: SearchSpace) -> list[int]:
    """The tensor-parallel sizes searched: divisors of the heads (and of a hybrid model's Mamba-2 heads and
    groups), those allowed, within `--max-tp` or, unless tp values are listed, the scale-up domain."""
    m = base.model
    # explicitly allowed tp values are taken as given; otherwise tp stays inside the scale-up domain
    cap_tp = space.max_tp if space.max_tp is not None else (None if space.tp is not None else max_tp_default(base))
    # a hybrid model's Mamba-2 blocks split their heads and groups over t too, and take no CP (scenario.py)
    heads = m.heads if m.hybrid is None else math.gcd(m.heads, m.hybrid.mamba.heads, m.hybrid.mamba.groups)
    return _choose(_divisors(heads), space.tp, cap_tp)


def _divisors(n: int) -> list[int]:
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return sorted(set(small + [n // k for k in small]))


def _choose(divisors: list[int], allowed: tuple[int, ...] | None, cap: int | None) -> list[int]:
    return [d for d in divisors if (allowed is None or d in allowed) and (cap is None or d <= cap)]


def max_tp_default(base: Scenario) -> int:
    """Tensor parallelism stays inside the scale-up domain unless the user says otherwise: its
    per-layer all-reduces are exposed, and across the network they dominate (Narayanan 2021 §3.3)."""
    return tiers_of(base.hardware, base.devices_per_node).domain


ROW_KNOBS = ("tp", "pp", "cp", "dp", "vpp", "micro_batch", "balanced", "ep", "etp")   # a layout row's knobs
COMBO_KNOBS = ("zero", "recompute", "sp", "finetune", "offload")                         # a combination's


def _column(knob: str) -> Any:
    """A Grid attribute: `knob` of every plan (float64, gathered from its table on each access)."""
    return property(lambda g: g.column(knob), doc=f"{knob} of every plan (float64, gathered on each access)")


@dataclass(frozen=True)
class Grid:
    """Every complete plan, as a layout row (ROW_KNOBS) crossed with a combination (COMBO_KNOBS): both
    tables, each plan's row and combination, and the structural rejections met while enumerating (see
    the module docstring for how they are counted). A knob's values (float64, one per plan) are
    gathered from the tables when asked for (`column`, or the attribute: `g.tp`, `g.balanced` — 1.0:
    the balanced pipeline split, L does not divide by p·v), so the plans are not stored knob by knob."""

    rows: np.ndarray                   # (len(ROW_KNOBS), layout rows)
    combos: np.ndarray                 # (len(COMBO_KNOBS), combinations)
    row: np.ndarray                    # each plan's layout row
    combo: np.ndarray                  # each plan's combination
    structural_rejects: dict[str, int]
    values: dict[str, list]            # the values each knob was allowed to take

    tp = _column("tp")
    pp = _column("pp")
    cp = _column("cp")
    dp = _column("dp")
    vpp = _column("vpp")
    micro_batch = _column("micro_batch")
    balanced = _column("balanced")
    ep = _column("ep")
    etp = _column("etp")
    zero = _column("zero")
    recompute = _column("recompute")
    sp = _column("sp")
    finetune = _column("finetune")
    offload = _column("offload")

    @property
    def size(self) -> int:
        return int(self.row.size)

    @property
    def devices(self) -> float:
        """N = t·p·c·d, the same for every plan of the grid (inf for an empty grid)."""
        return float(self.tp[0] * self.pp[0] * self.cp[0] * self.dp[0]) if self.size else math.inf

    def table(self, knob: str) -> np.ndarray:
        """The values `knob` takes in its table (per layout row, or per combination)."""
        return self.rows[ROW_KNOBS.index(knob)] if knob in ROW_KNOBS else self.combos[COMBO_KNOBS.index(knob)]

    def column(self, knob: str, sel: Any = slice(None)) -> np.ndarray:
        """The values of `knob` (ROW_KNOBS, COMBO_KNOBS) of the plans `sel` (float64)."""
        return self.table(knob)[(self.row if knob in ROW_KNOBS else self.combo)[sel]]

    def layout(self, sel: np.ndarray, *, pipeline_split: str, tp_overlap: float, dp_collectives: str,
               dp_overlap: float = 1.0, moe_overlap: str = "none", pipeline_schedule: str = "1f1b") -> Layout:
        """The Layout (arrays) of the plans `sel`."""
        row, combo = self.row[sel], self.combo[sel]

        def of(knob: str) -> np.ndarray:
            return self.table(knob)[row if knob in ROW_KNOBS else combo]

        def knob(name: str) -> Any:
            """One float when every plan has the same value (the model then skips what it multiplies by
            0), else the array."""
            values = self.table(name)
            if values.size and row.size and np.all(values == values[0]):
                return float(values[0])            # the same in every row of the table: no gather
            picked = of(name)
            return float(picked[0]) if picked.size and np.all(picked == picked[0]) else picked

        return Layout(tp=of("tp"), pp=of("pp"), dp=of("dp"), cp=of("cp"), vpp=of("vpp"),
                      micro_batch=of("micro_batch"), zero=of("zero"), sp=of("sp"),
                      recompute=of("recompute"), tp_overlap=tp_overlap, pipeline_split=pipeline_split,
                      dp_collectives=dp_collectives, dp_overlap=dp_overlap, finetune=knob("finetune"),
                      offload=knob("offload"), ep=knob("ep"), etp=knob("etp"), moe_overlap=moe_overlap,
                      pipeline_schedule=pipeline_schedule)


def pipeline_sizes(base: Scenario, devices: int, space: SearchSpace) -> list[int]:
    """Candidate pipeline sizes: divisors of L (even split) and the sizes that only Megatron's
    balanced split (embedding and loss counted as layers: p·v divides L + 2) makes possible. A MoE
    model also tries every divisor of N up to L with the balanced split (uneven stages): their layer
    counts rarely divide (DeepSeek-V3: 61, Qwen3-235B: 94) and their recipes lay the stages out by hand
    (Megatron-Core --pipeline-model-parallel-layout)."""
    m = base.model
    even_pps = _divisors(m.layers)
    balanced_pps = [p for p in _divisors(m.layers + 2) if p not in even_pps and p <= m.layers]
    if m.moe is not None:
        balanced_pps = sorted(set(balanced_pps) | {p for p in _divisors(devices) if p <= m.layers} - set(even_pps))
    pps = sorted(even_pps + balanced_pps)
    if base.parallel.pipeline_schedule == "dualpipe":       # DualPipe: no pipeline, or an even one
        pps = [p for p in pps if p == 1 or p % 2 == 0]
    return _choose(pps, space.pp, space.max_pp)


def expert_layouts(base: Scenario, stage_ranks: int, tp: int, space: SearchSpace) -> list[tuple[int, int]]:
    """(ep, etp) pairs for a MoE model on `stage_ranks` = t·c·d ranks per pipeline stage: ep divides
    the experts, etp divides t and the expert width, ep·etp divides t·c·d (Megatron-Core: ep·etp·edp =
    tp·cp·dp). A dense model: (1, 1)."""
    moe = base.model.moe
    if moe is None:
        return [(1, 1)] if (space.ep is None or 1 in space.ep) and (space.etp is None or 1 in space.etp) else []
    eps = _choose(_divisors(moe.experts), space.ep, None)
    etps = [k for k in _choose(_divisors(tp), space.etp, None) if moe.expert_ffn_hidden % k == 0]
    return [(e, k) for e in eps for k in etps if stage_ranks % (e * k) == 0]


def plan_indices(lay: np.ndarray, combo: np.ndarray, *, sp_off: bool,
                 pp_zero: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every layout row crossed with every (ZeRO, recompute, SP, finetune, offload) combination, row
    by row: each plan's row and combination, and the table of combinations (one array per
    COMBO_KNOBS entry). `sp_off`: SP off is allowed, so a t = 1 plan is kept once (at t = 1 SP on is
    the same plan); else t = 1 plans have no SP to turn on and take a copy of the combinations with SP
    off (the table's second half). `pp_zero`: whether each combination's ZeRO stage runs with pipeline
    parallelism under the job's framework (`Framework.pp_zero_stages`); a row with p > 1 takes only those."""
    n_lay, n_combo = lay.shape[0], combo.shape[0]
    tp1 = lay[:, 0] == 1.0
    pick = np.broadcast_to(np.arange(n_combo), (n_lay, n_combo))
    same_zero = _one_replica(lay)[:, None] & _zero_above_the_least(combo)[None, :]
    if pp_zero is not None and not pp_zero.all():      # the framework's pipeline refuses these stages
        same_zero = same_zero | ((lay[:, 1] > 1.0)[:, None] & ~pp_zero[None, :])
    if sp_off:             # sequence parallelism splits along the TP group: at t = 1 "on" = "off"
        keep = ~(tp1[:, None] & (combo[None, :, 2] == 1.0)) & ~same_zero
        return np.repeat(np.arange(n_lay), keep.sum(axis=1)), pick[keep], np.ascontiguousarray(combo.T)
    off = combo.copy()
    off[:, 2] = 0.0
    pick = pick + np.where(tp1, n_combo, 0)[:, None]
    keep = ~same_zero
    return (np.repeat(np.arange(n_lay), keep.sum(axis=1)), pick[keep],
            np.ascontiguousarray(np.concatenate([combo, off]).T))


def _one_replica(lay: np.ndarray) -> np.ndarray:
    """Layout rows with nothing for ZeRO to shard over: d·c = 1 and, for experts, ep·etp = t·c·d (an
    expert data-parallel group of one); every ZeRO stage is then the same plan."""
    t, c, d, ep, etp = lay[:, 0], lay[:, 2], lay[:, 3], lay[:, 7], lay[:, 8]
    return (c * d == 1.0) & (t * c * d == ep * etp)


def _zero_above_the_least(combo: np.ndarray) -> np.ndarray:
    """Combinations that on a row of one replica repeat another plan: without offload, a ZeRO stage above
    the least searched one; with offload, any stage but the least searched from 1 up (ZeRO-Offload runs
    on a ZeRO stage, DeepSpeed's 1-3; with nothing to shard every stage is the same step and memory, so
    plans z0..z3 with the same offload filled the top of a one-device plan)."""
    if not combo.size:
        return np.zeros(0, dtype=bool)
    stage, plain = combo[:, 0], combo[:, 4] == float(OFFLOAD_CODES["none"])
    least = stage.min()
    staged = stage[~plain & (stage >= 1.0)]
    least_offload = staged.min() if staged.size else (stage[~plain].min() if (~plain).any() else least)
    return np.where(plain, stage > least, stage != least_offload)


def enumerate_plans(base: Scenario, devices: int, space: SearchSpace) -> Grid:
    """Every plan of `devices` devices for the job `base` within `space` (no heuristic pruning)."""
    m = base.model
    B = base.global_batch
    fw = FRAMEWORKS[base.framework]
    interleaved = fw.interleaved
    dualpipe = base.parallel.pipeline_schedule == "dualpipe"
    tps = tp_sizes(base, space)
    pps = pipeline_sizes(base, devices, space)
    cps = _choose(_divisors(base.seq_len), space.cp, space.max_cp) if m.hybrid is None else [1]
    if not fw.pipeline:                                      # a framework without a pipeline: p = 1 only
        pps = [p for p in pps if p == 1]
    zeros = [z for z in space.zero if z in fw.zero_stages]   # the stages the framework has (frameworks.py)
    recs = [float(RECOMPUTE_CODES[r]) for r in space.recompute         # the framework's modes (frameworks.py)
            if r in fw.recompute_modes and not (m.hybrid is not None and r == "op")]
    sps = [1.0 if s else 0.0 for s in space.sequence_parallel]
    finetunes = list(space.finetune or (base.finetune.method,))
    offloads = list(space.offload or (base.offload,))
    extra = [(float(FINETUNE_CODES[f]), float(OFFLOAD_CODES[o])) for f in finetunes for o in offloads]
    rejects = {r: 0 for r in REJECT_REASONS}
    blocks: list[np.ndarray] = []
    for t in tps:
        for p in pps:
            for c in cps:
                if devices % (t * p * c):
                    rejects["devices_indivisible"] += 1
                    continue
                d = devices // (t * p * c)
                if B % d:
                    rejects["batch_indivisible"] += 1
                    continue
                balanced = m.layers % p != 0
                units = (m.layers + 2) // p if balanced else m.layers // p
                # virtual stages only where the framework has the interleaved schedule (and not with DualPipe)
                vs = _choose(_divisors(units) if interleaved and not dualpipe else [1], space.vpp, space.max_vpp) \
                    if p > 1 else ([1] if space.vpp is None or 1 in space.vpp else [])
                bs = _choose(_divisors(B // d), space.micro_batch, space.max_micro_batch)
                experts = expert_layouts(base, t * c * d, t, space)
                if not vs or not bs or not experts:
                    continue
                pairs = [(v, b) for v in vs for b in bs]
                # the interleaved schedule needs m = B/(d·b) to be a multiple of p (schedule.py), DualPipe an
                # even m of at least p (scenario.py: _check_dualpipe)
                ok = [(v, b) for v, b in pairs if (v == 1 or (B // (d * b)) % p == 0)
                      and not (dualpipe and p > 1 and (B // (d * b) < p or (B // (d * b)) % 2))]
                rejects["interleaving_indivisible"] += len(pairs) - len(ok)
                if not ok:
                    continue
                block = np.empty((len(ok) * len(experts), 9))
                block[:, :4] = (t, p, c, d)
                block[:, 4:6] = np.repeat(np.array(ok, dtype=float), len(experts), axis=0)
                block[:, 6] = 1.0 if balanced else 0.0
                block[:, 7:9] = np.tile(np.array(experts, dtype=float), (len(ok), 1))
                blocks.append(block)
    lay = np.concatenate(blocks) if blocks else np.empty((0, 9))
    combo = np.array([(z, r, s, f, o) for z in zeros for r in recs for s in sps for f, o in extra],
                     dtype=float).reshape(-1, 5)
    pp_zero = np.isin(combo[:, 0], np.array(fw.zero_stages_with(2), dtype=float))
    row, pick, combos = plan_indices(lay, combo, sp_off=0.0 in sps, pp_zero=pp_zero)
    values: dict[str, list[Any]] = {"tp": tps, "pp": pps, "cp": cps, "zero": zeros, "recompute": list(space.recompute),
              "sequence_parallel": list(space.sequence_parallel)}
    if space.finetune is not None:
        values["finetune"] = finetunes
    if space.offload is not None:
        values["offload"] = offloads
    if m.moe is not None:
        values["ep"] = [int(e) for e in np.unique(lay[:, 7])]
        values["etp"] = [int(k) for k in np.unique(lay[:, 8])]
    return Grid(rows=np.ascontiguousarray(lay.T), combos=combos, row=row, combo=pick, structural_rejects=rejects,
                values=values)


# ------------------------------------------------------------------------------------ evaluation

@dataclass(frozen=True)
class GridEval:
    """Per-plan results (arrays aligned with the Grid): NaN step time where a plan does not fit."""

    time_s: np.ndarray
    memory_bytes: np.ndarray
    fits: np.ndarray
    fits_memory: np.ndarray            # device memory (and host memory, with offload) holds the plan


def evaluate_grid(base: Scenario, g: Grid, progress: Progress | None = None) -> GridEval:
    """Memory of every plan, then the step time of those that fit, each in cache-sized chunks of one
    vectorized call to `memory_per_device` / `step_terms` (the model's own functions), the step's layer
    terms and data-parallel collectives computed once per distinct combination of the knobs they read
    (`_shared_terms`); plans with the even and the balanced pipeline split go in separate calls (the
    split is not an array argument)."""
    n = g.size
    mem = np.empty(n)
    host_ok = np.ones(n, dtype=bool)
    time_s = np.full(n, np.nan)
    job = job_of(base)._replace(devices=g.devices)     # base is the job on one device: the grid's N
    capacity = base.hardware.training_memory_bytes - base.memory_headroom_bytes   # unified: less the OS reserve
    host_capacity = base.hardware.host.memory_bytes_per_device
    tp_overlap = 1.0 if base.parallel.tp_overlap else 0.0
    balanced = g.balanced
    groups = [(split, np.flatnonzero(balanced == flag)) for split, flag in (("even", 0.0), ("balanced", 1.0))]

    def layout(idx: np.ndarray, split: str) -> Layout:
        return g.layout(idx, pipeline_split=split, tp_overlap=tp_overlap, dp_collectives=base.parallel.dp_collectives,
                        dp_overlap=1.0 if base.parallel.dp_overlap else 0.0, moe_overlap=base.parallel.moe_overlap,
                        pipeline_schedule=base.parallel.pipeline_schedule)

    for split, rows in groups:
        for start in range(0, rows.size, CHUNK_PLANS):
            idx = rows[start:start + CHUNK_PLANS]
            breakdown = memory_per_device(job, layout(idx, split))
            mem[idx] = breakdown.total_bytes
            host_ok[idx] = np.asarray(breakdown.host_bytes) <= (host_capacity or 0.0)   # offload: the host's part
    fits_memory = (mem <= capacity) & host_ok
    work = n + int(fits_memory.sum())        # progress counts memory and step evaluations alike
    if progress is not None:
        progress(n, work)
    # terms that depend on a few knobs only, once per distinct combination of those among the plans
    # that fit: the layer terms (LAYER_KNOBS) over both splits, the data-parallel collectives (DP_KNOBS)
    # per split; then each plan's step from its combinations' terms
    fit_all = np.flatnonzero(fits_memory)
    layers, layer_of = _shared_terms(g, fit_all, LAYER_KNOBS, lambda c: layer_terms(job, layout(c, "even")).bare())
    layer_group = np.zeros(n, dtype=np.int64)
    layer_group[fit_all] = layer_of
    done = n
    for split, rows in groups:
        fit = rows[fits_memory[rows]]
        dps, dp_of = _shared_terms(g, fit, DP_KNOBS, partial(_dp_of, job, layout, split))
        for start in range(0, fit.size, CHUNK_PLANS):
            idx = fit[start:start + CHUNK_PLANS]
            time_s[idx] = step_terms(job, layout(idx, split), _take(layers, layer_group[idx]),
                                     _take(dps, dp_of[start:start + CHUNK_PLANS])).time_s
            done += idx.size
            if progress is not None:
                progress(done, work)
    fits = fits_memory & np.isfinite(time_s)
    return GridEval(time_s=time_s, memory_bytes=mem, fits=fits, fits_memory=fits_memory)


def _codes(column: np.ndarray) -> tuple[int, np.ndarray]:
    """(how many distinct values `column` has, each entry's rank among them)."""
    values = np.unique(column)
    if values.size == 1:
        return 1, np.zeros(column.size, dtype=np.int64)
    if values[0] >= 0 and values[-1] < 2**20 and np.all(values == np.floor(values)):
        rank = np.zeros(int(values[-1]) + 1, dtype=np.int64)      # whole-number knobs: a look-up table
        rank[values.astype(np.int64)] = np.arange(values.size)
        return values.size, rank[column.astype(np.int64)]
    return values.size, np.searchsorted(values, column)


def _table_key(columns: list[np.ndarray], size: int) -> np.ndarray:
    """A number per entry of a table of `size` entries, 0, 1, ..., the same where every one of the
    aligned `columns` (some of the table's knobs; none: all 0) is the same."""
    key = np.zeros(size, dtype=np.int64)
    for column in columns:
        count, code = _codes(column)
        key = key * count + code
        if count > 1:
            key = np.unique(key, return_inverse=True)[1].astype(np.int64)     # renumbered: never overflows
    return key


def _groups(g: Grid, plans: np.ndarray, knobs: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(one plan of `plans` per distinct combination of the values of `knobs`; the number of each
    plan's combination, an index into the first), from the layout rows' and the combinations' own
    numbers for those knobs."""
    row_key = _table_key([g.table(k) for k in knobs if k in ROW_KNOBS], g.rows.shape[1])
    combo_key = _table_key([g.table(k) for k in knobs if k in COMBO_KNOBS], g.combos.shape[1])
    width = int(combo_key.max()) + 1 if combo_key.size else 1
    key = row_key[g.row[plans]] * width + combo_key[g.combo[plans]]
    size = (int(row_key.max()) + 1 if row_key.size else 1) * width
    if size <= 4 * plans.size + 4096:              # a table of every possible key: no sort
        seen = np.zeros(size, dtype=bool)
        seen[key] = True
        distinct = np.flatnonzero(seen)
        renumber = np.zeros(size, dtype=np.int64)
        renumber[distinct] = np.arange(distinct.size)
        number = renumber[key]
    else:
        distinct, number = np.unique(key, return_inverse=True)
    one = np.zeros(distinct.size, dtype=np.int64)
    one[number] = np.arange(plans.size)           # a plan of each combination (any: they share the terms)
    return plans[one], number


def _shared_terms(g: Grid, plans: np.ndarray, knobs: tuple[str, ...],
                  terms: Callable[[np.ndarray], Any]) -> tuple[Any, np.ndarray]:
    """(terms that depend on the layout only through `knobs`, of the plans `plans`: `terms` of chunks
    of plans, once per distinct combination of the knobs, joined; each plan's combination, an index
    into their arrays). (None, no combinations) without plans."""
    if plans.size == 0:
        return None, np.zeros(0, dtype=np.int64)
    reps, number = _groups(g, plans, knobs)
    chunks = [reps[i:i + CHUNK_PLANS] for i in range(0, reps.size, CHUNK_PLANS)]
    return _joined([terms(c) for c in chunks], [c.size for c in chunks]), number


def _dp_of(job: Job, layout: Callable[[np.ndarray, str], Layout], split: str, plans: np.ndarray) -> DpTraffic:
    """The data-parallel collectives of the plans `plans` with the pipeline split `split`."""
    return step_dp_traffic(job, layout(plans, split))


def _take(x: Any, idx: np.ndarray) -> Any:
    """`x` at `idx`: each array of a record (recursively) indexed; numbers, text, lists and None as
    they are."""
    if hasattr(x, "_fields"):
        return type(x)(*(_take(v, idx) for v in x))
    return x if x is None or isinstance(x, (int, float, str, list, tuple)) else x[idx]


def _joined(parts: list[Any], sizes: list[int]) -> Any:
    """Records of consecutive groups of plans (`sizes` plans each) as one: their arrays concatenated
    (a float becomes an array where the parts differ), a float the same in every part kept, lists
    (named ops) left out."""
    first = parts[0]
    if hasattr(first, "_fields"):
        return type(first)(*(_joined([p[i] for p in parts], sizes) for i in range(len(first))))
    if first is None or isinstance(first, (str, list, tuple)):
        return [] if isinstance(first, list) else () if isinstance(first, tuple) else first
    if all(isinstance(p, (int, float)) and p == first for p in parts):
        return first
    return np.concatenate([np.broadcast_to(np.asarray(p, dtype=float), (k,))
                           for p, k in zip(parts, sizes, strict=True)])


# ------------------------------------------------------------------------------------ the job

def default_devices(mapping: dict, where: str = "options") -> int:
    """The device count a search takes when none is given: the estimate's, one node's devices of the job's
    hardware, at most DEFAULT_DEVICES (one DGX Spark is one device, an H100 node eight)."""
    from trainest.scenario import DEFAULT_DEVICES
    job = {k: v for k, v in mapping.items() if k not in ("global_batch", "global_batch_tokens")}
    return max(min(DEFAULT_DEVICES, job_scenario({**job, "global_batch": 1}, where).devices_per_node), 1)


def job_scenario(mapping: dict, where: str = "options", default_batch_devices: int | None = None,
                 shape: dict | None = None) -> Scenario:
    """Validate the job (a scenario mapping without a layout) once, as a one-device scenario; plans
    replace its device count and layout (`plan_scenario`). Without a global batch: with
    `default_batch_devices` the estimate's default (DEFAULT_TOKENS_PER_STEP in whole sequences) rounded up
    to a multiple of that device count, so that every data-parallel size dividing it can run
    micro-batch 1, marked derived; else an error."""
    check_scenario_keys(mapping, where)
    if mapping.get("global_batch") is None and mapping.get("global_batch_tokens") is None:
        if default_batch_devices is None:
            raise SpecError(f"{where}: the plan search needs the global batch (--global-batch in sequences, or "
                            f"--global-batch-tokens)")
        seq_len = job_scenario({**mapping, "global_batch": 1}, where, shape=shape).seq_len
        base = job_scenario({**mapping, "global_batch": default_global_batch(seq_len, default_batch_devices, 1)},
                            where, shape=shape)
        return replace(base, derived=base.derived + ("global_batch",))
    job = {k: v for k, v in mapping.items() if k in JOB_KEYS}
    # of the layout, only framework capabilities that hold for every plan carry over (tp_overlap,
    # dp_collectives)
    parallel = {k: v for k, v in (mapping.get("parallel") or {}).items() if k in JOB_PARALLEL_KEYS}
    if mapping.get("finetune") is not None:
        job["finetune"] = mapping["finetune"]
    # the recompute of every plan is the search's; modules say what its selective plans re-run
    recompute = "selective" if job.get("recompute_modules") is not None else "none"
    return scenario_from_mapping({**job, "devices": 1, "parallel": parallel, "micro_batch": 1, "recompute": recompute},
                                 where, shape=shape)


def plan_scenario(base: Scenario, devices: int, *, tp: int, pp: int, cp: int, vpp: int, micro_batch: int, zero: int,
                  sequence_parallel: bool, recompute: str, pipeline_split: str = "even", finetune: str | None = None,
                  offload: str | None = None, ep: int = 1, etp: int = 1) -> Scenario:
    """The scenario of one plan: the job with this device count and layout (dp = N/(t·p·c)); the
    fine-tuning method and offload are the job's unless the plan changes them."""
    dp = devices // (tp * pp * cp)
    derived = tuple(x for x in base.derived
                    if not x.startswith("parallel.") and x not in ("micro_batch", "recompute", "devices"))
    ft = base.finetune
    if finetune is not None and finetune != ft.method:
        derived = _finetune_derived(derived, base.finetune, finetune)
        ft = (FineTune(stated=ft.stated) if finetune == "full"
              else replace(ft, method=finetune, base_bits=4 if finetune == "qlora" else lora_base_bits(ft)))
    modules = base.recompute_modules if recompute == "selective" else DEFAULT_RECOMPUTE_MODULES
    # a default token count follows the plan's method (a LoRA plan of a full job trains a fine-tuning set)
    tokens = default_tokens(base.model, ft) if "tokens" in base.derived else base.tokens
    return replace(base, devices=devices, micro_batch=micro_batch, recompute=recompute, derived=derived,
                   recompute_modules=modules, tokens=tokens,
                   finetune=ft, offload=base.offload if offload is None else offload,
                   parallel=Parallel(tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp, zero=zero,
                                     sequence_parallel=sequence_parallel, tp_overlap=base.parallel.tp_overlap,
                                     pipeline_split=pipeline_split, dp_collectives=base.parallel.dp_collectives,
                                     dp_overlap=base.parallel.dp_overlap, ep=ep, etp=etp,
                                     moe_overlap=base.parallel.moe_overlap,
                                     pipeline_schedule=base.parallel.pipeline_schedule))


def _finetune_derived(derived: tuple[str, ...], job: FineTune, method: str) -> tuple[str, ...]:
    """`derived` for a plan whose method is not the job's: a full plan has no adapters; a LoRA/QLoRA plan
    keeps the job's adapters (all defaults where the job trained every weight) and takes its method's base."""
    kept = tuple(x for x in derived if not x.startswith("finetune."))
    if method == "full":
        return kept
    adapters = tuple(f"finetune.{k}" for k in ("rank", "alpha", "targets")
                     if not job.frozen or f"finetune.{k}" in derived)
    return kept + adapters + ("finetune.base_bits",)


def plan_knobs(s: Scenario) -> dict:
    """The knob values of a plan's scenario (keys: KNOBS)."""
    p = s.parallel
    return {"tp": p.tp, "pp": p.pp, "cp": p.cp, "vpp": p.vpp, "ep": p.ep, "etp": p.etp, "micro_batch": s.micro_batch,
            "zero": p.zero,
            "recompute": s.recompute, "sequence_parallel": p.sequence_parallel, "finetune": s.finetune.method,
            "offload": s.offload}


def objective_scale(base: Scenario, devices: int, objective: str) -> float:
    """Objective per second of step time: 1 (time), N·price/3600·steps (cost [USD]),
    N·P·PUE/3.6e6·steps (energy [kWh]); raises when the price or power is unknown."""
    steps = training.steps_for_tokens(base.tokens, base.tokens_per_step)
    if objective == "time":
        return 1.0
    if objective == "cost":
        if base.price_usd_per_hour is None:
            raise SpecError(f"--objective cost needs a price: {base.hardware.name} has none in the catalog; "
                            f"give --price-per-hour")
        return training.device_hours(steps, devices) * base.price_usd_per_hour
    if objective == "energy":
        energy = training.energy_kwh(steps, devices, base.hardware.power_w, base.pue)
        if energy is None:
            raise SpecError(f"--objective energy needs the device power: {base.hardware.name} has none in the catalog")
        return energy
    raise SpecError(f"objective {objective!r} is not one of {', '.join(OBJECTIVES)}")


# ------------------------------------------------------------------------------------ the search

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
    if s.adam_moments == "fp32" and not s.offload.startswith("optimizer"):   # (BF16 moments: no CPU Adam)
        trials.append(("--adam-moments bf16", lambda: replace(s, adam_moments="bf16")))
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


def search(base: Scenario, devices: int, space: SearchSpace = SearchSpace(), *, objective: str = "time",
           top: int = 5, progress: Progress | None = None) -> SearchResult:
    """Evaluate every plan of `devices` devices and return the best `top` and the per-knob runner-ups.

    Raises SpecError when no layout exists or none fits in device memory."""
    if devices < 1:
        raise SpecError(f"devices={devices} must be at least 1")
    if top < 1:
        raise SpecError(f"--top {top} must be at least 1")
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


# ------------------------------------------------------------------------------------ device counts

def parse_devices(text: str) -> tuple[int, int]:
    """`1024` -> (1024, 1024); `256..8192` -> (256, 8192). Counts may use K (1K = 1000)."""
    lo_text, sep, hi_text = str(text).strip().partition("..")
    if sep and ":" in hi_text:      # sweep's a..b:s; the hint below once offered it here too
        raise SpecError(f"--devices {text!r}: a range takes no step here; the counts tried in it are "
                        f"--device-counts pow2 (the default) or node (multiples of the node size)")
    bounds = []
    for part in ((lo_text, hi_text) if sep else (lo_text,)):
        value = parse_count(part.strip(), f"--devices {text!r}:" if sep else "--devices",
                            "64 or 8..1024 (--device-counts picks the counts in a range)")
        if value != int(value) or value > 10**7:
            raise SpecError(f"--devices {text!r}: {part.strip()!r} must be a whole number of devices up to 10,000,000")
        bounds.append(int(value))
    lo, hi = bounds[0], bounds[-1]
    if lo > hi:
        raise SpecError(f"--devices {text!r}: the range is empty ({lo} > {hi})")
    return lo, hi


def device_counts(lo: int, hi: int, mode: str, devices_per_node: int) -> list[int]:
    """Candidate device counts in [lo, hi]: powers of two ("pow2") or multiples of the node size ("node")."""
    if lo == hi:
        return [lo]
    if mode == "pow2":
        counts = [2**k for k in range(0, hi.bit_length() + 1) if lo <= 2**k <= hi]
        what = "power of two"
    elif mode == "node":
        first = -(-lo // devices_per_node) * devices_per_node
        counts = list(range(first, hi + 1, devices_per_node)) if first <= hi else []
        what = f"multiple of the node size {devices_per_node}"
    else:
        raise SpecError(f"--device-counts {mode!r} is not one of {', '.join(DEVICE_COUNT_MODES)}")
    if not counts:
        raise SpecError(f"--devices {lo}..{hi}: no {what} in that range")
    if len(counts) > MAX_DEVICE_COUNTS:
        raise SpecError(f"--devices {lo}..{hi}: {len(counts)} candidate counts (at most {MAX_DEVICE_COUNTS}); "
                        f"narrow the range or use --device-counts pow2")
    return counts


@dataclass(frozen=True)
class DeviceTrial:
    devices: int
    meets: bool
    time_s: float | None           # whole-run time of the best plan (None: no plan fits)
    cost_usd: float | None
    note: str                      # why it does not meet (or "")
    energy_kwh: float | None = None


@dataclass(frozen=True)
class DeviceSearch:
    deadline_s: float | None
    budget_usd: float | None
    trials: tuple[DeviceTrial, ...]
    result: SearchResult           # the plan search at the chosen count (gate not met: the closest count)
    rule: str = ""                 # how the count was chosen, in words (device_rule)
    gate_failed: str = ""          # no count meets the deadline/budget: why, and the closest found ("": met)

    @property
    def devices(self) -> int:
        return self.result.devices


# How `plan --devices LO..HI` chooses a count (said in the output): with a deadline only, the fewest
# devices that meet it (the cheapest way to be on time); with a budget, the best by --objective among
# the counts that meet every constraint (time: the fastest within the budget); with neither, the fewest
# devices that fit (every count is still searched: the table shows the fastest plan per count).
DEADLINE_RULE = "the fewest devices that meet the deadline"
FIT_RULE = "the fewest devices that fit"
BUDGET_RULES = {"time": "the fastest count within the budget", "cost": "the cheapest count within the budget",
                "energy": "the count using the least energy within the budget"}


OBJECTIVE_RULES = {"cost": "the cheapest count", "energy": "the count using the least energy"}


def device_rule(deadline_s: float | None, budget_usd: float | None, objective: str) -> str:
    """The rule that picks a count of a --devices range, in words: by the budget; else, for a cost or
    energy objective, the best count by it (that meets the deadline); else the fewest that meet the
    deadline, or fit (the fastest count is the largest one)."""
    if budget_usd is not None:
        return BUDGET_RULES[objective] + (" and the deadline" if deadline_s is not None else "")
    if objective in OBJECTIVE_RULES:
        return OBJECTIVE_RULES[objective] + (" that meets the deadline" if deadline_s is not None else " that fits")
    return DEADLINE_RULE if deadline_s is not None else FIT_RULE


def _trial(base: Scenario, n: int, space: SearchSpace, deadline_s: float | None, budget_usd: float | None,
           objective: str, top: int) -> tuple[DeviceTrial, SearchResult | None]:
    """The best plan at `n` devices and whether it meets the constraints."""
    try:
        res = search(base, n, space, objective=objective, top=top)
    except SpecError as exc:
        return DeviceTrial(devices=n, meets=False, time_s=None, cost_usd=None, note=str(exc)), None
    tr = res.plans[0].training
    late = deadline_s is not None and tr.time_s > deadline_s
    dear = budget_usd is not None and (tr.cost_usd or 0.0) > budget_usd
    note = "; ".join(x for x in (f"takes {tr.time_days:.2f} days" if late else "",
                                 f"costs ${tr.cost_usd:,.0f}" if dear else "") if x)
    return DeviceTrial(devices=n, meets=not (late or dear), time_s=tr.time_s, cost_usd=tr.cost_usd, note=note,
                       energy_kwh=tr.energy_kwh), res


def _pick(trials: list[DeviceTrial], budget_usd: float | None, objective: str) -> DeviceTrial | None:
    meeting = [t for t in trials if t.meets]
    if not meeting:
        return None
    if budget_usd is None and objective not in OBJECTIVE_RULES:
        return meeting[0]                    # counts are tried smallest first
    key = {"time": lambda t: t.time_s, "cost": lambda t: t.cost_usd, "energy": lambda t: t.energy_kwh}[objective]
    return min(meeting, key=lambda t: (math.inf if key(t) is None else key(t), t.devices))


def smallest_devices(base: Scenario, counts: list[int], space: SearchSpace = SearchSpace(), *,
                     deadline_s: float | None = None, budget_usd: float | None = None, objective: str = "time",
                     top: int = 5, progress: Progress | None = None) -> DeviceSearch:
    """Choose a device count of `counts` by `device_rule` (each count an exhaustive plan search):
    with a deadline only, the smallest that meets it (counts after it are not tried); with a budget, the
    best by `objective` among those that meet every constraint; with neither, the smallest that fits."""
    if budget_usd is not None and base.price_usd_per_hour is None:
        raise SpecError(f"--budget needs a price: {base.hardware.name} has none in the catalog; give --price-per-hour")
    trials: list[DeviceTrial] = []
    results: dict[int, SearchResult] = {}
    counts = sorted(counts)
    for i, n in enumerate(counts):
        trial, res = _trial(base, n, space, deadline_s, budget_usd, objective, top)
        trials.append(trial)
        if res is not None:
            results[n] = res
        if progress is not None:
            progress(i + 1, len(counts))
        if trial.meets and budget_usd is None and deadline_s is not None and objective not in OBJECTIVE_RULES:
            break                             # the fewest that meet the deadline: the rule needs no larger count
    rule = device_rule(deadline_s, budget_usd, objective)
    chosen = _pick(trials, budget_usd, objective)
    if chosen is not None:
        return DeviceSearch(deadline_s=deadline_s, budget_usd=budget_usd, trials=tuple(trials),
                            result=results[chosen.devices], rule=rule)
    closest = _closest(trials, budget_usd)
    why = _none_meets(base, counts, trials, deadline_s, budget_usd)
    if closest is None or (deadline_s is None and budget_usd is None):
        raise SpecError(why)                  # nothing fits at any count: no plan to show
    # a gate not met (deadline, budget): the closest count's plans, with why (the CLI exits 3, EXIT_GATE)
    return DeviceSearch(deadline_s=deadline_s, budget_usd=budget_usd, trials=tuple(trials),
                        result=results[closest.devices], rule=rule, gate_failed=why)


def _closest(trials: list[DeviceTrial], budget_usd: float | None) -> DeviceTrial | None:
    """The count nearest a gate none meets: the cheapest when a budget was given, else the fastest."""
    ok = [t for t in trials if t.time_s is not None]
    if not ok:
        return None
    if budget_usd is not None:
        return min(ok, key=lambda t: (t.cost_usd if t.cost_usd is not None else math.inf, t.devices))
    return min(ok, key=lambda t: t.time_s if t.time_s is not None else math.inf)


def _none_meets(base: Scenario, counts: list[int], trials: list[DeviceTrial], deadline_s: float | None,
                budget_usd: float | None) -> str:
    """Why no count qualifies: the cheapest count when a budget was missed, else the fastest."""
    want = " and ".join(x for x in (f"within {fmt_seconds(deadline_s)}" if deadline_s is not None else "",
                                    f"for at most ${budget_usd:,.0f}" if budget_usd is not None else "") if x)
    ok = [t for t in trials if t.time_s is not None]
    if not ok:
        reasons = sorted({t.note.split(";")[0] for t in trials if t.note})
        return (f"no layout fits at any device count in {counts[0]}..{counts[-1]} ({len(counts)} tried)"
                + (f": {reasons[0]}" if len(reasons) == 1 else ""))
    if budget_usd is not None:
        best = min(ok, key=lambda t: (t.cost_usd if t.cost_usd is not None else math.inf, t.devices))
        what = "cheapest"
    else:
        best = min(ok, key=lambda t: t.time_s if t.time_s is not None else math.inf)
        what = "fastest"
    plural = "device" if best.devices == 1 else "devices"
    return (f"no device count in {counts[0]}..{counts[-1]} ({len(counts)} tried) trains {fmt_si(base.tokens)} tokens "
            f"{want}; the {what}, {best.devices} {plural}, takes {fmt_seconds(best.time_s)}"
            + (f" and costs ${best.cost_usd:,.0f}" if best.cost_usd is not None else ""))
