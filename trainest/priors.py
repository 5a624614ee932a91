"""The efficiency prior of a device without measured runs, in one place: tools/import_hardware.py and
tools/fit_defaults.py write it into the catalog's entries without runs (`derived_prior`), and a hardware file
the user wrote without an efficiency block (or without some of its fractions) takes the same prior at load time
(`no_run_prior`, from the catalog's devices fitted on their own runs: the values the catalog's own devices
without runs carry). Standard library only at import (tools/import_hardware.py needs nothing else).
"""

from __future__ import annotations

from typing import Any

# --- Efficiency priors (NOT fitted) ------------------------------------------------------------------------------
EFFICIENCY_METHOD = (
    "prior: typical achievable fractions (NCCL busbw 0.7-0.9 of link rate; large bf16 GEMMs 0.7-0.85 of dense peak); "
    "not yet calibrated"
)
# Datacenter accelerators with matrix units: GPUs, TPUs, ASICs (and GPU+CPU superchips, whose GPU is a datacenter GPU).
EFFICIENCY_PRIOR_ACCELERATOR = {
    "gemm": 0.75,
    "gemm_half_dim": 128,
    "attention": 0.50,
    "memory": 0.80,
    "scale_up": 0.75,
    "scale_out": 0.70,
}
# Apple SoCs, wafer-scale engines and anything else.
EFFICIENCY_PRIOR_OTHER = {
    "gemm": 0.5,
    "gemm_half_dim": 64,
    "attention": 0.3,
    "memory": 0.7,
    "scale_up": 0.7,
    "scale_out": 0.7,
}
ACCELERATOR_PRIOR_KINDS = ("gpu", "tpu", "asic", "cpu-gpu")

# --- Priors derived from the fitted devices (issue 11, case 3) ------------------------------------------------------
# The generic prior above is only the starting point of a fit (tools/fit_defaults.py). A device with no measured runs
# of its own (and no sibling die to inherit from) ships, instead, the per-parameter MEDIAN of the devices that were
# fitted on their own runs, grouped by kind: GPUs (gpu, cpu-gpu) from the fitted GPUs, TPUs from the fitted TPUs,
# other accelerators with matrix units (Gaudi, Trainium: no fitted device of their kind) from every fitted accelerator.
# Hand-set priors above every fit made uncalibrated hardware look faster than calibrated hardware. Such a block is
# still `fitted: false` (not validated on this device's runs); its `method` starts with DERIVED_PRIOR_PREFIX and names
# the devices. Apple SoCs and wafer-scale engines have no comparable fitted device and keep EFFICIENCY_PRIOR_OTHER.
DERIVED_PRIOR_PREFIX = "prior: median of"
DERIVED_PRIOR_GROUPS = {
    "gpu": ("gpu", "cpu-gpu"),
    "cpu-gpu": ("gpu", "cpu-gpu"),
    "tpu": ("tpu",),
    "asic": ("gpu", "cpu-gpu", "tpu"),
}
DERIVED_PRIOR_KEYS = ("gemm", "attention", "memory", "scale_up", "scale_out", "low_precision_gemm",
                      "layer_overhead_us")
INHERITED_MARK = ": inherited from "       # the method of a block tools/fit_defaults.py copied from a sibling die
# A device with fewer fit runs than this is not a member of the median above: it takes a sibling's fit or this
# prior, or, with a few runs and no die fit, is fitted on them pulled harder to this prior (tools/fit_priors.py
# fits_few_runs, few_run_weight); such a block says fit_runs < MIN_FIT_RUNS (tools/fit_defaults.py).
MIN_FIT_RUNS = 8


def significant(x: float, digits: int = 4) -> float | int:
    y = float(f"{x:.{digits}g}")
    return int(y) if y.is_integer() else y


def own_fit(block: object) -> bool:
    """True for an efficiency block fitted on at least MIN_FIT_RUNS of the device's own runs (not inherited from
    a sibling, nor fitted on a few runs from a start it keeps most of)."""
    return (isinstance(block, dict) and block.get("fitted") is True and INHERITED_MARK not in str(block.get("method"))
            and int(block.get("fit_runs") or MIN_FIT_RUNS) >= MIN_FIT_RUNS)


def derived_prior(kind: str, fitted: dict[str, tuple[str, dict]], ceiling: float | None = None,
                  ceilings: dict[str, float] | None = None) -> dict | None:
    """The efficiency block of a device of `kind` without runs: the median of each parameter over the
    devices in `fitted` (name -> (kind, block), fitted on their own runs) of the kinds DERIVED_PRIOR_GROUPS
    names, or None when there is none (then the generic prior stays). Where the device's measured best GEMM
    rate over its peak is known (`ceiling`, `matmul_ceiling`) and so is that of some fitted devices
    (`ceilings`: name -> ceiling), its GEMM efficiency is its ceiling times the median over those devices of
    their fitted GEMM efficiency over their ceiling (what training reaches of the best measured GEMM rate
    carries over; a median of efficiencies would give a device whose GEMMs reach half their peak the
    efficiency of one whose reach 80 %), at most the ceiling."""
    import statistics

    kinds = DERIVED_PRIOR_GROUPS.get(kind)
    if not kinds:
        return None
    group = sorted(name for name, (k, block) in fitted.items() if k in kinds and own_fit(block))
    if not group:
        return None
    generic = EFFICIENCY_PRIOR_ACCELERATOR
    block: dict = {"gemm_half_dim": generic["gemm_half_dim"]}
    for key in DERIVED_PRIOR_KEYS:
        block[key] = significant(statistics.median(float(fitted[n][1][key]) for n in group if key in fitted[n][1]))
    order = ("gemm", "gemm_half_dim", "attention", "memory", "scale_up", "scale_out", "low_precision_gemm",
             "layer_overhead_us")
    block = {k: block[k] for k in order}
    ceilings = ceilings or {}
    scaled = sorted(n for n in group if n in ceilings)
    how = ""
    if ceiling is not None and scaled:
        reach = statistics.median(float(fitted[n][1]["gemm"]) / ceilings[n] for n in scaled)
        block["gemm"] = significant(min(ceiling * reach, ceiling, GEMM_PRIOR_MAX))
        how = (f"; gemm: this device's measured best GEMM rate over its peak ({ceiling:.3g}) times the median "
               f"over {', '.join(scaled)} of their fitted gemm over theirs ({reach:.3g})")
    block["fitted"] = False
    block["method"] = (f"{DERIVED_PRIOR_PREFIX} the {len(group)} {'/'.join(kinds)} devices fitted on their own runs "
                       f"({', '.join(group)}){how}, by tools/fit_defaults.py; not validated on measured runs of this "
                       f"device")
    return block


GEMM_PRIOR_MAX = 0.92      # = trainest/calibrate.py BOUNDS["gemm"][1]

# Hand-written variants that are another device in another cluster (the same die, memory and clocks; only the
# network differs): their fits repeat that device's compute fractions, so they do not count again in the median
# a device without runs takes (derived_prior).
NETWORK_VARIANTS = ("a100-80gb-sxm-roce400",)


def median_members(own_blocks: dict) -> dict:
    """The devices fitted on their own runs that the prior of a device without runs is the median of: all but
    NETWORK_VARIANTS."""
    return {n: v for n, v in own_blocks.items() if n not in NETWORK_VARIANTS}


def doc_matmul_ceiling(doc: dict) -> float | None:
    """A hardware document's measured best dense 16-bit GEMM rate over its 16-bit peak, at most 1 (mirrors
    Hardware.matmul_ceiling); None where no measurement was read."""
    measured = (doc.get("compute") or {}).get("measured_matmul_tflops")
    peaks = doc.get("peak_tflops") or {}
    peak = next((peaks[p] for p in ("bf16", "fp16", "tf32", "fp32") if peaks.get(p)), None)
    return None if measured is None or not peak else min(1.0, float(measured) / float(peak))


MOE_PRIOR_KEYS = ("grouped_gemm", "all_to_all", "moe_fitted")


def _catalog_documents() -> dict[str, dict]:
    """name -> mapping of every bundled hardware file (through the catalog's read cache)."""
    from trainest import catalog
    docs = {}
    for path in sorted((catalog.specs_dir() / "hardware").glob("*.yaml")):
        doc = catalog._read_spec(path, "hardware")
        if isinstance(doc, dict):
            docs[path.stem] = doc
    return docs


def no_run_prior(kind: str, ceiling: float | None) -> dict[str, Any]:
    """The efficiency block the catalog gives a device of `kind` without measured runs whose measured GEMM
    ceiling is `ceiling` (None: not measured): `derived_prior` over the catalog's devices fitted on their own
    runs (`median_members`), with the MoE prior the catalog's devices without runs carry (tools/fit_defaults.py
    derived_moe_priors); the generic prior of its kind where no comparable device is fitted."""
    docs = _catalog_documents()
    own = {n: (str(d.get("kind") or "gpu"), d["efficiency"]) for n, d in docs.items() if own_fit(d.get("efficiency"))}
    ceilings = {n: c for n, d in docs.items() if (c := doc_matmul_ceiling(d)) is not None}
    block = derived_prior(kind, median_members(own), ceiling, ceilings)
    if block is None:
        prior = EFFICIENCY_PRIOR_ACCELERATOR if kind in ACCELERATOR_PRIOR_KINDS else EFFICIENCY_PRIOR_OTHER
        return dict(prior, fitted=False, method=EFFICIENCY_METHOD)
    moe = {tuple(d["efficiency"].get(k) for k in MOE_PRIOR_KEYS) for d in docs.values()
           if str(d["efficiency"].get("method", "")).startswith(DERIVED_PRIOR_PREFIX)}
    if len(moe) == 1 and None not in (values := next(iter(moe))):
        block.update(zip(MOE_PRIOR_KEYS, values, strict=True))
    return block


def with_no_run_prior(block: dict[str, Any], where: str, kind: str, doc: dict) -> tuple[dict, tuple[str, ...]]:
    """(`block` with each key it leaves out taken from `no_run_prior` for the hardware document `doc`, the keys
    so taken). A given value is never replaced; the result is `fitted: false` (a prior, not validated on this
    device), with the prior's `method` unless the block gives one. A block that says `fitted: true` and leaves
    out a required fraction is refused."""
    from trainest.errors import SpecError
    from trainest.hardware import EFFICIENCY_KEYS
    if block.get("fitted") is True:
        missing = [k for k in EFFICIENCY_KEYS if block.get(k) is None]
        raise SpecError(f"{where}.fitted: true, but {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not "
                        f"given (a fitted block gives every fraction; leave fitted out to take the prior for them)")
    prior = no_run_prior(kind, doc_matmul_ceiling(doc))
    if block.get("grouped_gemm") is not None or block.get("all_to_all") is not None:
        prior.pop("moe_fitted", None)        # given MoE fractions: moe_fitted as the file says (hardware.py)
    derived = tuple(k for k in prior if k not in ("fitted", "method", "moe_fitted") and block.get(k) is None)
    return {**prior, **{k: v for k, v in block.items() if v is not None}, "fitted": False}, derived
