"""The fit/holdout split and the prior efficiencies of the shipped fit, shared by tools/fit_defaults.py
(which fits), tools/fit_bands.py (which measures the error bands on the holdout runs and on the priors)
and tools/cross_validate.py. Nothing here is imported by trainest.
"""

from __future__ import annotations

import zlib
from pathlib import Path

from trainest import catalog
from trainest.calibrate import PRIOR_WEIGHT, efficiency_block, replace_efficiency_block
from trainest.units import MICROSECOND, MILLISECOND

FIT_PERCENT = 60          # share of each hardware's runs used for fitting (by crc32 of the id)
# the devices a no-run prior is the median of
from trainest.priors import MIN_FIT_RUNS, NETWORK_VARIANTS, median_members  # noqa: E402,F401


MIN_FEW_RUNS = 3          # fewer fit runs than this: not fitted at all (fits_few_runs)


def fits_few_runs(n_runs: int, has_die_fit: bool) -> bool:
    """Whether a device with `n_runs` fit runs, fewer than MIN_FIT_RUNS, is fitted on them (pulled harder,
    few_run_weight) from the prior of a device without runs: only where it has at least MIN_FEW_RUNS and no die
    fitted on MIN_FIT_RUNS runs to inherit. Measured (prior6's note, issue 31): each device fitted on its own
    runs refitted on only its first k fit runs and judged on all its others, run-weighted MAPE, start -> fitted:
    from the median prior (A100 80GB, B200, H100, TPU v5e/v5p) k = 2: 8.17 -> 8.62 %, k = 3: 8.31 -> 8.17 %,
    k = 4: 8.24 -> 6.82 %, k = 5: 8.24 -> 6.97 %; from a die's fit (A100 40GB, GB200, GB300, the 500 W H100) k = 2:
    8.41 -> 10.69 %, 3: 8.10 -> 10.22 %, 4: 8.21 -> 8.34 %, 5: 8.07 -> 8.21 %. A few runs, mostly of one source,
    carry that source's habits: they improve a median of other dies, not the same die's fit."""
    return MIN_FEW_RUNS <= n_runs < MIN_FIT_RUNS and not has_die_fit


def few_run_weight(n_runs: int) -> float:
    """The prior pull λ of a device fitted on 0 < n_runs < MIN_FIT_RUNS runs: PRIOR_WEIGHT · MIN_FIT_RUNS /
    n_runs. The fit minimises the MEAN of the runs' losses plus λ·Σ(x − 1)², so a pull λ weighs against n runs
    as n·λ would against their sum: scaled so, the start weighs as much in all as it does for a device with
    MIN_FIT_RUNS runs (PRIOR_WEIGHT at n = MIN_FIT_RUNS: no step), instead of the device's few runs being
    discarded for a prior (B200 with the 3 fit runs Megatron-Bridge leaves when NeMo's long-sequence table is
    left out: that table's 8 B200 runs 13.6 → 5.1 % MAPE)."""
    if not 0 < n_runs < MIN_FIT_RUNS:
        raise ValueError(f"few_run_weight: {n_runs} runs is not between 1 and {MIN_FIT_RUNS - 1}")
    return PRIOR_WEIGHT * MIN_FIT_RUNS / n_runs


def own_block(hw: catalog.Hardware, fit_runs: int) -> tuple[str, dict]:
    """(kind, efficiency block) of `hw` fitted on `fit_runs` of its own runs: a member of the median a device
    without runs takes (`unseen_prior_hardware`'s `own_blocks`)."""
    return hw.kind, efficiency_block(hw, method="fitted on its own runs", fit_runs=fit_runs, fit_mape_pct=None)


def in_fit_set(run_id: str) -> bool:
    """The deterministic split: crc32(id) mod 100 < FIT_PERCENT."""
    return zlib.crc32(run_id.encode("utf-8")) % 100 < FIT_PERCENT


def prior_hardware(hw: catalog.Hardware) -> catalog.Hardware:
    """`hw` with the importer's prior efficiency for its kind (not fitted)."""
    import import_hardware as ih

    prior = ih.EFFICIENCY_PRIOR_ACCELERATOR if hw.kind in ih.ACCELERATOR_PRIOR_KINDS else ih.EFFICIENCY_PRIOR_OTHER
    return catalog.with_efficiency(hw, **{k: float(v) for k, v in prior.items()},
                                   low_precision_gemm=catalog.DEFAULT_LOW_PRECISION_GEMM,
                                   flash2_attention=hw.compute.flash2_relative,
                                   layer_overhead_s=catalog.DEFAULT_LAYER_OVERHEAD_US * MICROSECOND,
                                   host_per_kernel_s=catalog.DEFAULT_HOST_US_PER_KERNEL * MICROSECOND,
                                   host_per_micro_batch_s=catalog.DEFAULT_HOST_MS_PER_MICRO_BATCH * MILLISECOND,
                                   overlap_contention=catalog.default_overlap_contention(hw.kind),
                                   fitted=False, method=ih.EFFICIENCY_METHOD)


def unseen_prior_hardware(hw: catalog.Hardware, own_blocks: dict, gemm_ceiling: bool = True) -> catalog.Hardware:
    """`hw` with the prior it would ship with had it no runs of its own: the median of the OTHER devices of
    its group fitted on their own runs (import_hardware.derived_prior), else the importer's generic prior.
    `own_blocks`: name -> (kind, efficiency block) of the devices fitted on their own runs; `gemm_ceiling`
    False: the plain median GEMM efficiency, not scaled by the devices' measured best GEMM rates."""
    import import_hardware as ih
    import yaml

    ceiling = hw.matmul_ceiling if gemm_ceiling else None
    block = ih.derived_prior(hw.kind, {n: v for n, v in median_members(own_blocks).items() if n != hw.name}, ceiling,
                             ih.matmul_ceilings(Path(hw.path).parent))
    if block is None:
        return prior_hardware(hw)
    data = yaml.safe_load(replace_efficiency_block(Path(hw.path).read_text(encoding="utf-8"), block, hw.path))
    return catalog.hardware_from_mapping(data, hw.path)
