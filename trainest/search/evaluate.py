"""The grid evaluated: memory of every plan, then the step time of those that fit, in cache-sized chunks of one
vectorized call to the model's own functions, the terms that depend on a few knobs computed once per distinct
combination of those knobs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from trainest.layout import Job, Layout, recompute_share
from trainest.memory import memory_per_device
from trainest.scenario import (
    Scenario,
    job_of,
)
from trainest.search.grid import COMBO_KNOBS, ROW_KNOBS, Grid
from trainest.step import step_terms
from trainest.step.compose import DP_KNOBS, LAYER_KNOBS, layer_terms, step_dp_traffic
from trainest.step.traffic import DpTraffic

CHUNK_PLANS = 16384        # plans per vectorized call: 16k-element arrays stay in cache (~3x faster than one call)

Progress = Callable[[int, int], None]   # (done, total) in plans (or device counts)



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
        lay = g.layout(idx, pipeline_split=split, tp_overlap=tp_overlap, dp_collectives=base.parallel.dp_collectives,
                       dp_overlap=1.0 if base.parallel.dp_overlap else 0.0, moe_overlap=base.parallel.moe_overlap,
                       pipeline_schedule=base.parallel.pipeline_schedule)
        return lay._replace(recompute_share=recompute_share(job.model.layers, lay.pp, lay.vpp, job.recompute_layers))
    # partial recompute re-runs a share of each stage's layers, which depends on the stages: the layer terms too
    layer_knobs = LAYER_KNOBS + (("pp", "vpp") if job.recompute_layers > 0 else ())

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
    layers, layer_of = _shared_terms(g, fit_all, layer_knobs, lambda c: layer_terms(job, layout(c, "even")).bare())
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
