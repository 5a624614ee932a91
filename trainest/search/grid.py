"""The plan grid: every layout row (t, p, c, d, v, b, split, ep, etp) crossed with every combination (ZeRO,
recompute, SP, fine-tuning, offload), enumerated with the layout rules of trainest/rules.py, the rejections
tallied by each rule's reason."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainest import rules
from trainest.choices import (
    FINETUNE_CODES,
    OFFLOAD_CODES,
    RECOMPUTE_CODES,
)
from trainest.frameworks import FRAMEWORKS
from trainest.layout import Layout
from trainest.rules import Facts, Rule, divisors, facts_of
from trainest.scenario import (
    Scenario,
    unfused_cp,
)
from trainest.search.space import SearchSpace, choose, tp_sizes
from trainest.step.remat import REMAT_MODES

RECOMPUTE_NAMES = {code: name for name, code in RECOMPUTE_CODES.items()}

FINETUNE_NAMES = {code: name for name, code in FINETUNE_CODES.items()}
OFFLOAD_NAMES = {code: name for name, code in OFFLOAD_CODES.items()}


REJECT_REASONS = ("out_of_memory", "devices_indivisible", "batch_indivisible", "interleaving_indivisible",
                  "non_finite")


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
    (Megatron-Core --pipeline-model-parallel-layout). DualPipe keeps its rule (rules.DUALPIPE_PP)."""
    m = base.model
    even_pps = divisors(m.layers)
    balanced_pps = [p for p in divisors(m.layers + 2) if p not in even_pps and p <= m.layers]
    if m.moe is not None:
        balanced_pps = sorted(set(balanced_pps) | {p for p in divisors(devices) if p <= m.layers} - set(even_pps))
    pps = rules.admissible(sorted(even_pps + balanced_pps), "pp", (rules.DUALPIPE_PP,), job_facts(base, devices))
    return choose(pps, space.pp, space.max_pp)


def expert_layouts(base: Scenario, stage_ranks: int, tp: int, space: SearchSpace) -> list[tuple[int, int]]:
    """(ep, etp) pairs for a MoE model on `stage_ranks` = t·c·d ranks per pipeline stage: ep among the
    divisors of the experts, etp among those of t, the pairs that keep rules.EXPERTS (etp divides the expert
    width, ep·etp divides t·c·d: Megatron-Core's ep·etp·edp = tp·cp·dp). A dense model: (1, 1)."""
    moe = base.model.moe
    if moe is None:
        return [(1, 1)] if (space.ep is None or 1 in space.ep) and (space.etp is None or 1 in space.etp) else []
    eps = choose(divisors(moe.experts), space.ep, None)
    etps = choose(divisors(tp), space.etp, None)
    if not eps or not etps:
        return []
    ep, etp = (a.ravel() for a in np.meshgrid(eps, etps, indexing="ij"))
    f = job_facts(base, stage_ranks)._replace(tp=tp, dp=stage_ranks // tp, ep=ep, etp=etp)
    ok = np.broadcast_to(rules.holds(rules.EXPERTS, f), ep.shape)
    return [(int(e), int(k)) for e, k in zip(ep[ok], etp[ok], strict=True)]


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


def job_facts(base: Scenario, devices: int) -> Facts:
    """The rules' Facts of the job `base` on `devices` devices (no layout yet)."""
    return facts_of(base.model, seq_len=base.seq_len, global_batch=base.global_batch, devices=devices,
                    dualpipe=base.parallel.pipeline_schedule == "dualpipe",
                    unfused_cp=unfused_cp(base.attention, base.framework), framework=base.framework)


def keep(rule_list: tuple[Rule, ...], f: Facts, size: int, rejects: dict[str, int]) -> np.ndarray:
    """Where `size` candidates keep every one of `rule_list`; each rejected candidate counted once, under the
    reason of the first rule it breaks."""
    ok = np.ones(size, dtype=bool)
    for rule in rule_list:
        broken = ok & ~np.broadcast_to(rule.holds(f), (size,))
        rejects[rule.reason] += int(broken.sum())
        ok &= ~broken
    return ok


def searched_sizes(base: Scenario, devices: int, space: SearchSpace) -> tuple[list[int], list[int], list[int]]:
    """The tensor, pipeline and context parallel sizes searched: tp_sizes, pipeline_sizes (p = 1 only under a
    framework without a pipeline), and the cp that keep rules.CP_RULES (those allowed; a hybrid model's 1)."""
    f = job_facts(base, devices)
    cps = rules.admissible(divisors(base.seq_len), "cp", rules.CP_RULES, f)
    if not f.hybrid:
        cps = choose(cps, space.cp, space.max_cp)
    pps = pipeline_sizes(base, devices, space)
    if not FRAMEWORKS[base.framework].pipeline:              # a framework without a pipeline: p = 1 only
        pps = [p for p in pps if p == 1]
    return tp_sizes(base, space), pps, cps


def model_parallel_sizes(base: Scenario, devices: int, sizes: tuple[list[int], list[int], list[int]],
                         rejects: dict[str, int]) -> np.ndarray:
    """(t, p, c, d) of every model-parallel layout of `sizes` (nested choices t → p → c) that keeps
    rules.DEVICES and rules.BATCH (d = N/(t·p·c) divides B), the others tallied; one row each."""
    f = job_facts(base, devices)
    tps, pps, cps = sizes
    tpc = np.array([(t, p, c) for t in tps for p in pps for c in cps], dtype=np.int64)
    tpc = tpc.reshape(-1, 3)
    tpc = tpc[keep((rules.DEVICES,), f._replace(tp=tpc[:, 0], pp=tpc[:, 1], cp=tpc[:, 2]), len(tpc), rejects)]
    dp = devices // tpc.prod(axis=1)
    ok = keep((rules.BATCH,), f._replace(dp=dp, micro_batch=1), len(tpc), rejects)
    return np.column_stack([tpc, dp])[ok]


def layout_rows(base: Scenario, devices: int, tpcd: tuple[int, int, int, int], space: SearchSpace,
                rejects: dict[str, int]) -> np.ndarray | None:
    """The layout rows (ROW_KNOBS) of one (t, p, c, d): its virtual stages, micro-batches and expert layouts,
    the (v, b) pairs that break the schedules' rules (rules.INTERLEAVING, DUALPIPE_MICRO_BATCHES) tallied."""
    t, p, c, d = tpcd
    m, fw, B = base.model, FRAMEWORKS[base.framework], base.global_batch
    f = job_facts(base, devices)._replace(tp=t, pp=p, cp=c, dp=d)
    balanced = m.layers % p != 0
    units = (m.layers + 2) // p if balanced else m.layers // p
    # virtual stages only where the framework has the interleaved schedule (and not with DualPipe)
    vs = choose(rules.admissible(divisors(units) if fw.interleaved else [1], "vpp",
                                 (rules.VPP_NEEDS_PP, rules.DUALPIPE_VPP), f), space.vpp, space.max_vpp)
    bs = choose(divisors(B // d), space.micro_batch, space.max_micro_batch)
    experts = expert_layouts(base, t * c * d, t, space)
    if not vs or not bs or not experts:
        return None
    v, b = (a.ravel() for a in np.meshgrid(vs, bs, indexing="ij"))
    ok = keep((rules.INTERLEAVING, rules.DUALPIPE_MICRO_BATCHES), f._replace(vpp=v, micro_batch=b), v.size, rejects)
    if not ok.any():
        return None
    pairs = np.column_stack([v[ok], b[ok]]).astype(float)
    block = np.empty((len(pairs) * len(experts), 9))
    block[:, :4] = (t, p, c, d)
    block[:, 4:6] = np.repeat(pairs, len(experts), axis=0)
    block[:, 6] = 1.0 if balanced else 0.0
    block[:, 7:9] = np.tile(np.array(experts, dtype=float), (len(pairs), 1))
    return block


def combinations(base: Scenario, space: SearchSpace) -> np.ndarray:
    """Every (ZeRO, recompute, SP, finetune, offload) combination the framework runs (trainest/frameworks.py),
    one row each (COMBO_KNOBS)."""
    m, fw = base.model, FRAMEWORKS[base.framework]
    zeros = [z for z in space.zero if z in fw.zero_stages]   # the stages the framework has
    recs = [float(RECOMPUTE_CODES[r]) for r in space.recompute         # the framework's modes
            if r in fw.recompute_modes and not (m.hybrid is not None and r == "op")
            and (base.knob("remat_policy") == "auto" or r == REMAT_MODES[base.knob("remat_policy")][0])]
    sps = [1.0 if s else 0.0 for s in space.sequence_parallel]
    extra = [(float(FINETUNE_CODES[f]), float(OFFLOAD_CODES[o]))
             for f in space.finetune or (base.finetune.method,) for o in space.offload or (base.offload,)]
    return np.array([(z, r, s, f, o) for z in zeros for r in recs for s in sps for f, o in extra],
                    dtype=float).reshape(-1, 5)


def enumerate_plans(base: Scenario, devices: int, space: SearchSpace) -> Grid:
    """Every plan of `devices` devices for the job `base` within `space` (no heuristic pruning): the layout rows
    crossed with the combinations, the candidates the layout rules reject tallied by reason."""
    m, fw = base.model, FRAMEWORKS[base.framework]
    rejects = {r: 0 for r in REJECT_REASONS}
    sizes = searched_sizes(base, devices, space)
    blocks = [layout_rows(base, devices, (int(t), int(p), int(c), int(d)), space, rejects)
              for t, p, c, d in model_parallel_sizes(base, devices, sizes, rejects)]
    lay = np.concatenate([b for b in blocks if b is not None] or [np.empty((0, 9))])
    combo = combinations(base, space)
    pp_zero = np.isin(combo[:, 0], np.array(fw.zero_stages_with(2), dtype=float))
    sps = [1.0 if s else 0.0 for s in space.sequence_parallel]
    row, pick, combos = plan_indices(lay, combo, sp_off=0.0 in sps, pp_zero=pp_zero)
    values: dict[str, list[Any]] = {
        "tp": sizes[0], "pp": sizes[1], "cp": sizes[2], "zero": [z for z in space.zero if z in fw.zero_stages],
        "recompute": list(space.recompute), "sequence_parallel": list(space.sequence_parallel)}
    if space.finetune is not None:
        values["finetune"] = list(space.finetune)
    if space.offload is not None:
        values["offload"] = list(space.offload)
    if m.moe is not None:
        values["ep"] = [int(e) for e in np.unique(lay[:, 7])]
        values["etp"] = [int(k) for k in np.unique(lay[:, 8])]
    return Grid(rows=np.ascontiguousarray(lay.T), combos=combos, row=row, combo=pick, structural_rejects=rejects,
                values=values)
