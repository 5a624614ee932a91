"""Fit the SHIPPED efficiency defaults on part of the public runs, report on the rest, write the docs.

    python tools/fit_defaults.py            # refit specs/hardware/*.yaml efficiency blocks, the error bands
                                            # (specs/bands.json, tools/fit_bands.py), rewrite docs/validation.md
    python tools/fit_defaults.py --check    # fit and report only: write nothing

Only the public runs are fitted and scored (runs files without a `set:`, or `set: public`); other sets
(the vTrain single-node rows, `set: vtrain-single-node`) are predicted with the fitted efficiencies and
reported apart in their own section of docs/validation.md (tools/vtrain_report.py).

Split: every expressible public run goes to the FIT set when crc32(id) mod 100 < FIT_PERCENT (60),
else to the HOLDOUT set. crc32 of the id is stable across machines, Python versions and file order,
and a run keeps its side when other runs are added. Per hardware:

  * at least MIN_FIT_RUNS fit runs: start from the importer's PRIOR (tools/import_hardware.py, by
    hardware kind, plus the catalog defaults for low_precision_gemm and layer_overhead_us), or, for a
    device whose SIBLINGS chain reaches a die fitted on its own runs (gb200, gb300 -> b200; a100-40gb ->
    a100-80gb; h100-96gb-500w -> h100-sxm), from that fit (`sibling_start`: a hierarchical prior, so what
    the device's own runs do not determine stays at the same die's value), and fit with
    `trainest.calibrate.fit_efficiency` (the `trainest calibrate` method) on the fit runs only; write
    ONLY the `efficiency:` block of specs/hardware/<name>.yaml (fitted: true), every other line unchanged;
  * fewer but at least MIN_FEW_RUNS (3), and no die fitted on MIN_FIT_RUNS to inherit: fitted on them as above,
    from the prior of a device without runs, with the pull to it scaled by MIN_FIT_RUNS / n (`few_run_outcome`,
    `fit_priors.fits_few_runs`, `few_run_weight`); such a block says fit_runs < MIN_FIT_RUNS: no sibling
    inherits it, and it is not a member of the median below (`priors.own_fit`);
  * otherwise: a sibling die's fit (SIBLINGS), else the median of the devices fitted on their own runs, by kind
    (`import_hardware.derived_prior`; `fitted: false`, not validated on the device's own runs);
  * hardware without any run: the same (sibling, else the derived prior).

Starting from the prior every time makes the result independent of what the files held before, so
re-running without changes reproduces the same files. Then the catalog JSON cache is rebuilt and
docs/validation.md regenerated: method, split, fit and holdout errors per hardware and overall, the
tables by source and hardware, error by feature, the worst runs, every run, not-expressible counts.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from trainest.record import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from trainest import catalog  # noqa: E402
from trainest.calibrate import (PRIOR_WEIGHT, efficiency_block, fit_efficiency,  # noqa: E402
                                replace_efficiency_block)
from trainest.report.validate import STEP_ERROR_TITLE, markdown, reasons_markdown, runs_markdown  # noqa: E402
from trainest.units import GB, MICROSECOND, MILLISECOND  # noqa: E402
from trainest.validate import (PUBLIC_SET, RunResult, build_report, compare, load_runs, mape_pct,  # noqa: E402
                               overlap_bounds, step_error_pct)
import finetune_report  # noqa: E402
import moe_report  # noqa: E402
import vtrain_report  # noqa: E402
from fit_priors import (FIT_PERCENT, MIN_FIT_RUNS, few_run_weight, fits_few_runs, in_fit_set,  # noqa: E402,F401
                        median_members, prior_hardware, unseen_prior_hardware)

# MIN_FIT_RUNS (trainest/priors.py): fewer fit runs than this: a sibling's fit, else the prior of a device without
# runs, or, with MIN_FEW_RUNS of them and no die fit, fitted on them pulled harder to that prior (few_run_outcome)
# Accelerators built on the same compute die as a fitted one, in the same kind of system: too few runs
# of their own to fit, they inherit the sibling's fitted efficiencies (fractions of their OWN peaks and
# bandwidths), which transfers what the runs taught about the die and its software.
SIBLINGS = {
    "h200-sxm": "h100-sxm",        # GH100 with HBM3e
    "h800-sxm": "h100-sxm",        # GH100 with a narrower NVLink
    "h100-pcie": "h100-sxm",       # GH100, PCIe card
    "gh200": "h100-sxm",           # GH100 + Grace
    "a100-80gb-pcie": "a100-80gb-sxm",  # GA100, PCIe card
    "b300": "b200",                # Blackwell (Ultra), HGX 8-GPU
    # These have runs of their own (fitted on them); the relation is the fallback when a hardware's
    # runs are too few, e.g. when tools/cross_validate.py leaves their only source out.
    "a100-40gb-sxm": "a100-80gb-sxm",   # GA100 with HBM2
    "h100-96gb-500w": "h100-sxm",       # GH100 with HBM2e, power-capped
    "a100-80gb-sxm-roce400": "a100-80gb-sxm",   # the same node with a quarter of the network (InternEvo)
    "h100-sxm-a3": "h100-sxm",          # the same die and node with a quarter of the network (Google Cloud A3)
    "gb200": "b200",                    # Blackwell GPU in the NVL72 system
    "gb300": "b300",                    # Blackwell Ultra GPU in the NVL72 system
}
WORST_RUNS = 15
KERNEL_SET = "vtrain-single-node"   # measured small-kernel steps whose fit split joins their hardware's fit
KERNEL_UNPULLED = ("host_per_kernel_s", "host_per_micro_batch_s")   # set by those steps alone, not pulled to a prior
KERNEL_FRAMEWORK = "megatron-deepspeed"   # what those steps ran: their host time per kernel is its, not the system's
DOC = ROOT / "docs" / "validation.md"
COMMAND = "python tools/fit_defaults.py"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}"


def feature_groups(results: list[RunResult]) -> dict[str, dict[str, list[RunResult]]]:
    """Runs grouped by the features the model treats differently (for the 'where it errs' tables)."""
    def size(r: RunResult) -> str:
        return "< 3B" if r.params_b < 3 else "3–20B" if r.params_b < 20 else "20–100B" if r.params_b < 100 else "≥ 100B"

    def layout(r: RunResult) -> str:
        kinds = [k for k, on in (("TP", r.tp > 1), ("PP", r.pp > 1), ("CP", r.cp > 1),
                                 ("FSDP/ZeRO-3", r.zero == 3), ("ZeRO-1/2", r.zero in (1, 2))) if on]
        return "+".join(kinds) if kinds else "DP only"

    keys = {
        "recompute": lambda r: r.recompute,
        "precision": lambda r: r.precision,
        "model size": size,
        "parallel layout": layout,
        "metric": lambda r: r.metric + (f" ({r.flops_formula})" if r.flops_formula else ""),
        "predicted bottleneck": lambda r: r.bottleneck,
        "fits in memory (model)": lambda r: "yes" if r.fits else "no",
    }
    out: dict[str, dict[str, list[RunResult]]] = {}
    for title, fn in keys.items():
        groups: dict[str, list[RunResult]] = {}
        for r in results:
            groups.setdefault(fn(r), []).append(r)
        out[title] = dict(sorted(groups.items()))
    return out


def features_markdown(results: list[RunResult]) -> str:
    parts = []
    for title, groups in feature_groups(results).items():
        lines = [f"| {title} | runs | MAPE % | median APE % | {STEP_ERROR_TITLE} |", "|---|---:|---:|---:|---:|"]
        for k, rs in groups.items():
            ape = [abs(r.error_pct) for r in rs]
            lines.append(f"| {k} | {len(rs)} | {statistics.fmean(ape):.1f} | {statistics.median(ape):.1f} | "
                         f"{statistics.fmean(step_error_pct(r) for r in rs):+.1f} |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def worst_markdown(results: list[RunResult], n: int) -> str:
    worst = sorted(results, key=lambda r: -abs(r.error_pct))[:n]
    return runs_markdown(worst, extra=lambda r: f"{r.params_b:.1f}B, s={r.seq_len}, N={r.devices}, b={r.micro_batch}, "
                                               f"B={r.global_batch}, {r.bottleneck}, source {r.source}",
                         extra_title="features (params, seq, devices, micro/global batch, bottleneck, source)")


def inherited(hw: catalog.Hardware, sibling: catalog.Hardware) -> tuple[catalog.Hardware, dict]:
    """`hw` with `sibling`'s fitted efficiency fractions, and the YAML block that says so."""
    e = sibling.efficiency
    method = (f"{COMMAND}: inherited from {sibling.name} (same compute die; fitted there on "
              f"{sibling.efficiency.method.split(' on ')[-1] if ' on ' in sibling.efficiency.method else 'its runs'})")
    new_hw = replace(hw, efficiency=replace(e, method=method))
    return new_hw, efficiency_block(new_hw, method=method, fit_runs=None, fit_mape_pct=None, fitted=True)


def fit_parent(name: str, by_hw: dict, fit_cases_of: dict) -> str | None:
    """The device whose fit `name`'s fit starts from: the first along its SIBLINGS chain (gb300 -> b300 ->
    b200) with enough fit runs of its own, else None (the generic prior)."""
    seen, sib = {name}, SIBLINGS.get(name)
    while sib is not None and sib not in seen:
        if sib in by_hw and len(fit_cases_of.get(sib, [])) >= MIN_FIT_RUNS:
            return sib
        seen.add(sib)
        sib = SIBLINGS.get(sib)
    return None


START_KEYS = ("gemm", "gemm_half_dim", "attention", "memory", "scale_up", "scale_out", "low_precision_gemm",
              "flash2_attention")


def sibling_start(prior: catalog.Hardware, parent: catalog.Hardware) -> catalog.Hardware:
    """`prior` with the fitted fractions of the same die (`parent`, fitted on its own runs) as the fit's
    start and pull: what this device's runs do not determine stays at the die's value, not the generic
    prior's (the host time per kernel stays the system's prior)."""
    return catalog.with_efficiency(prior, **{k: getattr(parent.efficiency, k) for k in START_KEYS})


def fitted_outcome(fit_cases: list, prior: catalog.Hardware, unpulled: tuple[str, ...] = (),
                   prior_weight: float = PRIOR_WEIGHT, start_words: str = "") -> tuple:
    """(fitted hardware, its YAML block, status, fitted values in words) of one hardware's fit runs;
    `unpulled`: parameters its runs alone set, `prior_weight` the pull λ to `prior` (calibrate.fit_efficiency)."""
    result = fit_efficiency(fit_cases, prior, prior_weight=prior_weight, unpulled=unpulled)
    method = (f"{COMMAND}: the `trainest calibrate` fit on {result.runs} fit runs of the bundled specs/runs "
              f"(crc32(id) mod 100 < {FIT_PERCENT}){start_words}; holdout runs in docs/validation.md")
    block = efficiency_block(result.hardware, method=method, fit_runs=result.runs, fit_mape_pct=result.mape_after_pct)
    new_hw = replace(result.hardware, efficiency=replace(result.hardware.efficiency, fitted=True, method=method))
    params = ", ".join(
        f"{p.name.replace('layer_overhead_s', 'layer_overhead_us')}="
        f"{p.value / MICROSECOND if p.name == 'layer_overhead_s' else p.value:.3g}"
        + ("" if p.constrained else " (no run sensitive: prior kept)") for p in result.parameters)
    return new_hw, block, "fitted", params


def write_megatron_core_host_scale(moe: moe_report.MoeFit, path: Path | None = None) -> None:
    """Add the Megatron-Core host scale the MoE stage fitted (moe_report.fitted_host_scale) to `path`
    (specs/frameworks.json), for each of moe_report.MEGATRON_CORE_FRAMEWORKS."""
    import json

    from trainest import frameworks
    path = path or catalog.specs_dir() / frameworks.FITTED_FILE
    doc = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"frameworks": {}}
    for name in moe_report.MEGATRON_CORE_FRAMEWORKS:
        doc["frameworks"][name] = {"host_scale": round(moe.host_scale, 4),
                                   "fitted_on": "the MoE runs' fit split (tools/moe_report.py: fitted_host_scale)"}
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def few_run_outcome(hw: catalog.Hardware, fit_cases: list, own_blocks: dict, prior_hw: dict) -> tuple:
    """The outcome (fitted_outcome's) of a device with n fit runs, MIN_FEW_RUNS <= n < MIN_FIT_RUNS, and no die
    fitted on MIN_FIT_RUNS runs (fit_priors.fits_few_runs): fitted on them from the prior of a device without runs
    (derived_outcome) with the pull λ · MIN_FIT_RUNS / n (fit_priors.few_run_weight). Its block says fit_runs = n,
    so it is not a member of the median a device without runs takes (priors.own_fit), and no sibling inherits it.
    tools/cross_validate.py applies the same rule to the runs a left-out source leaves (LeftOut)."""
    n = len(fit_cases)
    start = derived_outcome(hw, own_blocks, prior_hardware(hw))[0]
    words = "the prior of a device without runs"
    prior_hw[hw.name] = start
    new_hw, block, _, params = fitted_outcome(fit_cases, start, prior_weight=few_run_weight(n),
                                              start_words=f", pulled ×{MIN_FIT_RUNS / n:.3g} harder to {words} "
                                                          f"(fewer than {MIN_FIT_RUNS} fit runs)")
    status = f"fitted on {n} fit runs < {MIN_FIT_RUNS}, pulled ×{MIN_FIT_RUNS / n:.3g} harder to {words}"
    return new_hw, block, status, params


def framework_host_outcome(outcome: tuple, prior: catalog.Hardware, check: bool) -> tuple:
    """The host times fitted on the vTrain rows (per kernel, per micro-batch) are Megatron-DeepSpeed's on
    that system, not the system's: their ratios to the hardware's priors become the framework's
    `host_scale` and `micro_batch_host_scale` (written to specs/frameworks.json; in force for the rest of
    this process) and the hardware keeps its priors."""
    import json

    from trainest import frameworks
    new_hw, block, status, params = outcome
    fitted_s, prior_s = new_hw.efficiency.host_per_kernel_s, prior.efficiency.host_per_kernel_s
    fitted_mb_s, prior_mb_s = new_hw.efficiency.host_per_micro_batch_s, prior.efficiency.host_per_micro_batch_s
    scale, mb_scale = fitted_s / prior_s, fitted_mb_s / prior_mb_s
    frameworks.set_host_scale(KERNEL_FRAMEWORK, scale, mb_scale)
    new_hw = catalog.with_efficiency(new_hw, host_per_kernel_s=prior_s, host_per_micro_batch_s=prior_mb_s)
    block = {**block, "host_us_per_kernel": round(prior_s / MICROSECOND, 2),
             "host_ms_per_micro_batch": round(prior_mb_s / MILLISECOND, 3)}
    params = params.replace(f"host_per_kernel_s={fitted_s:.3g}", f"host_per_kernel_s={prior_s:.3g} (prior; "
                            f"{KERNEL_FRAMEWORK} ×{scale:.3g} fitted: specs/frameworks.json)")
    params = params.replace(f"host_per_micro_batch_s={fitted_mb_s:.3g}",
                            f"host_per_micro_batch_s={prior_mb_s:.3g} (prior; {KERNEL_FRAMEWORK} ×{mb_scale:.3g} "
                            f"fitted: specs/frameworks.json)")
    if not check:
        path = catalog.specs_dir() / frameworks.FITTED_FILE
        doc = {"method": f"{COMMAND}: the host times per kernel and per micro-batch fitted on the {KERNEL_SET} fit "
                         f"split ({new_hw.name}), over that hardware's priors; docs/model.md §2.9",
               "frameworks": {KERNEL_FRAMEWORK: {"host_scale": round(scale, 4), "hardware": new_hw.name,
                                                 "host_us_per_kernel": round(fitted_s / MICROSECOND, 2),
                                                 "prior_host_us_per_kernel": round(prior_s / MICROSECOND, 2),
                                                 "micro_batch_host_scale": round(mb_scale, 4),
                                                 "host_ms_per_micro_batch": round(fitted_mb_s / MILLISECOND, 3),
                                                 "prior_host_ms_per_micro_batch": round(prior_mb_s / MILLISECOND,
                                                                                        3)}}}
        path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return new_hw, block, status, params


def derived_moe_priors(blocks: dict, final_hw: dict, moe, moe_fitted: set[str], has_moe: set[str], *,
                       write: bool) -> None:
    """Every hardware not in `has_moe` (MoE efficiencies of its own or of a sibling) gets a derived MoE
    prior: the shared grouped_gemm (a property of the software's grouped-GEMM path, fitted on every MoE
    run) and the median of the `moe_fitted` devices' all_to_all, marked `moe_fitted: false` (its estimates
    say so)."""
    if not moe_fitted:
        return
    a2a = statistics.median(final_hw[n].efficiency.all_to_all for n in moe_fitted)
    for name in catalog.hardware_names():
        block = blocks.get(name)
        if name in has_moe or not block or block.get("gemm") is None:
            continue
        block = {**block, "grouped_gemm": round(moe.grouped_gemm, 4), "all_to_all": round(a2a, 4),
                 "moe_fitted": False}
        blocks[name] = block
        if name in final_hw:
            final_hw[name] = catalog.with_efficiency(final_hw[name], grouped_gemm=moe.grouped_gemm, all_to_all=a2a,
                                                     moe_fitted=False)
        if write:
            write_block(Path(catalog.load_hardware(name).path), block)


def derived_outcome(hw: catalog.Hardware, own_blocks: dict, prior: catalog.Hardware) -> tuple:
    """(hardware, YAML block, how) for a device without enough runs and no fitted sibling: the median of
    the devices fitted on their own runs, by kind (import_hardware.derived_prior), else the generic prior."""
    import import_hardware as ih
    import yaml

    block = ih.derived_prior(hw.kind, median_members(own_blocks), hw.matmul_ceiling,
                             ih.matmul_ceilings(Path(hw.path).parent))
    if block is None:     # the importer's generic prior stays as the importer wrote it (None: file unchanged)
        return prior, None, "generic prior kept (no fitted device of its kind)"
    data = yaml.safe_load(replace_efficiency_block(Path(hw.path).read_text(encoding="utf-8"), block, hw.path))
    group = block["method"].split("(", 1)[1].split(")", 1)[0]
    return catalog.hardware_from_mapping(data, hw.path), block, f"prior: median of fitted {group}"


def write_block(path: Path, block: dict | None) -> None:
    """Replace the efficiency block of the hardware file `path` (every other line kept); None: leave it."""
    if block is None or not path.is_file():
        return
    old_text = path.read_text(encoding="utf-8")
    new_text = replace_efficiency_block(old_text, block, str(path))
    if new_text != old_text:
        path.write_text(new_text, encoding="utf-8")


def memory_markdown(results: list[RunResult]) -> str:
    """Predicted memory per device against the peak memory the source published (where it did)."""
    rows = [r for r in results if r.measured_memory_bytes]
    if not rows:
        return "No bundled run publishes its peak memory."
    gib = 2.0 ** 30
    errors = [(r.predicted_memory_bytes - r.measured_memory_bytes) / r.measured_memory_bytes * 100.0 for r in rows]
    kinds = sorted({r.measured_memory_kind or "unspecified" for r in rows})
    per_kind = "; ".join(
        f"{k}: {len(es)} runs, MAPE {statistics.fmean(abs(e) for e in es):.1f} %"
        for k in kinds for es in [[e for r, e in zip(rows, errors) if (r.measured_memory_kind or "unspecified") == k]])
    lines = [f"{len(rows)} runs publish their peak device memory (torchtitan's tables: the PyTorch allocator's peak, "
             f"which includes its cache and is capped by the device). Each is compared with the predicted total of "
             f"its memory kind (docs/model.md §7.5: allocated/active with the tensors, reserved and unspecified with "
             f"the tensors and the allocator's reserve, device with the CUDA context and NCCL added). By kind: "
             f"{per_kind}. Mean absolute error "
             f"{statistics.fmean(abs(e) for e in errors):.1f} %, signed mean {statistics.fmean(errors):+.1f} %. "
             "torchtitan's selective AC rows are imported as `recompute: op` (its per-op policy; docs/model.md "
             "§7.3). The count includes what torchtitan's loss holds (12 B per logit: its unfused FP32 "
             "cross-entropy; 16 at t > 1, DTensor's vocabulary-parallel one), the all-gathered inputs its "
             "column-parallel linears save under sequence parallelism and, with pipeline parallelism, the stage "
             "FSDP keeps gathered with its unsharded FP32 gradients, torch.distributed.pipelining's receive "
             "buffers and kept outputs per micro-batch (the last stage's logits, merged at the step's end) and "
             "context parallelism's all-gathered K and V (docs/model.md §7.2, §7.3, §7.4). It still under-estimates "
             "the allocator peak most with pipeline parallelism (405B at 1F1B, measured above the same run "
             "interleaved, which the count does not reproduce; at context parallelism 8), and the allocator's "
             "reserve beyond its 5 % is not counted. Treat `fits` near the capacity as uncertain.",
             "", "| run | memory kind | recompute | zero | measured GiB | predicted GiB | error % |",
             "|---|---|---|---:|---:|---:|---:|"]
    for r, e in zip(rows, errors):
        lines.append(f"| {r.id} | {r.measured_memory_kind or 'unspecified'} | {r.recompute} | {r.zero} | "
                     f"{r.measured_memory_bytes / gib:.1f} | {r.predicted_memory_bytes / gib:.1f} | {e:+.1f} |")
    return "\n".join(lines) + "\n\n" + memory_only_markdown() + "\n\n" + nofit_markdown()


def memory_only_markdown() -> str:
    """The memory-only runs (specs/runs/memory-given.yaml, set memory: litgpt, torchtune, the Hugging Face guide),
    per memory kind and one by one (trainest/report/validate.py: memory_kind_markdown), with the public runs' peaks."""
    from trainest.report.validate import memory_kind_markdown
    from trainest.validate import validate_runs
    from trainest.validate_memory import oom_verdicts
    public = validate_runs(run_set=PUBLIC_SET).memory
    memory = validate_runs(run_set="memory")
    oom = oom_verdicts(catalog.specs_dir() / "runs" / "memory-given.yaml")
    called = sum(1 for _, fits in oom if not fits)
    return ("Every measured peak memory, per memory kind (the public runs' above and the memory-only runs of "
            "specs/runs/memory-given.yaml, `set: memory`: measured peaks with their configurations and no step "
            f"time; {len(memory.not_expressible)} of its records not expressible, `trainest validate --set memory "
            f"--json` lists why; of those, the {len(oom)} that ran out of memory are boundary points, and trainest "
            f"calls {called} of them \"does not fit\" as stated: "
            + ", ".join(f"{run_id} {'does not fit' if not fits else 'FITS (a memory-model error)'}"
                        for run_id, fits in oom)
            + "):\n\n" + memory_kind_markdown(public + memory.memory))


def nofit_markdown() -> str:
    """One paragraph: the bundled runs that ran and are called "does not fit", and what each names as the setting
    that would make it fit (docs/model.md §7.8: `deciding`, `conflicting`)."""
    from trainest.validate import validate_runs
    runs = validate_runs().runs
    nofit = [r for r in runs if not r.fits]
    deciding = sum(1 for r in nofit if r.deciding)
    otherwise = sum(1 for r in nofit if r.fits_otherwise)
    both = sum(1 for r in nofit if r.deciding and r.fits_otherwise)
    neither = [r.id for r in nofit if not (r.deciding or r.fits_otherwise)]
    return (f"\"Does not fit\" for runs that ran (every bundled set, docs/model.md §7.8): {len(nofit)} of the "
            f"{len(runs)} runs compared are called \"does not fit\". {deciding} name a setting their record leaves "
            f"out whose lightest value makes them fit (`deciding`); {otherwise} state settings that their own "
            f"configuration gives otherwise (a Megatron-Bridge row against its release's recipe), with which they fit "
            f"(`conflicting`, `fits_otherwise`); {both} both; {len(neither)} neither"
            + (f" ({', '.join(neither)}: a memory-model error)." if neither else ".")
            + " `trainest validate` names them on each such run.")


def bands_markdown() -> str:
    """The error-band section (tools/fit_bands.py), from the shipped specs/bands.json."""
    import json

    import fit_bands
    path = catalog.specs_dir() / "bands.json"
    return fit_bands.markdown(json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {})


def left_out_headline() -> str:
    """The headline tables (tools/cross_validate.py: one source left out, per hardware, framework, family)."""
    import json

    import cross_validate
    path = cross_validate.DATA
    if not path.is_file():
        return f"Not generated yet: run `{cross_validate.COMMAND}`."
    return cross_validate.headline_markdown(json.loads(path.read_text(encoding="utf-8"))["runs"])


def band_headline() -> str:
    """One line: the band's one-source-left-out coverage (specs/bands.json, tools/fit_bands.py)."""
    import json
    path = catalog.specs_dir() / "bands.json"
    doc = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    o = doc.get("checks", {}).get("one_source_left_out", {}).get("all")
    if not o:
        return "The error band's coverage: run `python tools/fit_bands.py`."
    return (f"**The 80 % error band, one source left out, holds for {o['coverage']:.1%} of {o['runs']} runs** "
            f"(claimed {o['claimed']:.1%}); per hardware, framework, family and source in \"The error band of every "
            f"estimate\" below.")


def plan_summary() -> str:
    """The summary of docs/plan-vs-published.md (written by `python bench/plan_vs_published.py`)."""
    path = ROOT / "docs" / "plan-vs-published.md"
    if not path.is_file():
        return "Not generated yet: run `python bench/plan_vs_published.py`."
    text = path.read_text(encoding="utf-8")
    summary = text.split("## Summary", 1)[-1].split("\n|", 1)[0].strip() if "## Summary" in text else ""
    summary = summary.split("\nLayout notation", 1)[0].strip()
    return ("For the expert-tuned public layouts (Narayanan 2021, Korthikanti 2022, NeMo 24.07, Megatron-Bridge), "
            "`trainest plan` searched the same job; both layouts are predicted by the same model. The full table, "
            "with every job's published and chosen layout, is in [plan-vs-published.md](plan-vs-published.md) "
            "(regenerate with `python bench/plan_vs_published.py`).\n\n" + summary)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="fit and report, but write no file")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()

    loaded = load_runs(run_set=PUBLIC_SET)
    # the dense runs fit the hardware efficiencies; the mixture-of-experts runs, afterwards and on their own, only
    # the MoE efficiencies (grouped_gemm, all_to_all), so that no dense number moves with them
    by_hw: dict[str, list] = {}
    for c in loaded.cases:
        if c.scenario.model.moe is None:
            by_hw.setdefault(c.scenario.hardware.name, []).append(c)
    blocks: dict[str, dict] = {}
    # the measured small-kernel steps (vTrain's single-node rows, one A100 node) constrain what the public
    # runs cannot: the host time per kernel and the small-GEMM shape factor. Their fit split joins the fit of
    # their hardware; their holdout split is reported apart (docs/validation.md, vTrain section).
    kernel_fit: dict[str, list] = {}
    from trainest import frameworks
    frameworks.set_host_scale(KERNEL_FRAMEWORK, 1.0, 1.0)    # fitted below, on the system's host times
    moe_report.set_megatron_core_host_scale(1.0)              # fitted on the MoE runs (moe_report.fit_moe)
    for c in load_runs(run_set=KERNEL_SET).cases:
        if in_fit_set(c.id):
            kernel_fit.setdefault(c.scenario.hardware.name, []).append(c)

    final_hw: dict[str, catalog.Hardware] = {}
    prior_hw: dict[str, catalog.Hardware] = {}
    rows = []              # per hardware: name, n fit, n holdout, status, prior fit, fitted fit, prior hold, fitted hold
    fitted_results: list[RunResult] = []
    prior_results: list[RunResult] = []
    split: dict[str, bool] = {}
    # 1. hardware with enough fit runs of its own: fitted. 2. fewer but MIN_FEW_RUNS and no die fit: fitted, pulled
    # harder to the median of the devices fitted in 1. 3. the others: a sibling's fit, else that median
    # (derived_prior). 4. hardware without any run: the same as 3.
    own_blocks: dict[str, tuple[str, dict]] = {}
    outcome: dict[str, tuple] = {}         # name -> (new hardware, block, status, params)
    few_run: set[str] = set()             # fitted on fewer than MIN_FIT_RUNS runs: no sibling inherits them
    fit_cases_of = {name: [c for c in by_hw[name] if in_fit_set(c.id)] + kernel_fit.get(name, []) for name in by_hw}
    for name in sorted(by_hw, key=lambda n: (fit_parent(n, by_hw, fit_cases_of) is not None, n)):
        hw = by_hw[name][0].scenario.hardware
        prior_hw[name] = prior_hardware(hw)
        parent = fit_parent(name, by_hw, fit_cases_of)
        if parent is not None and parent in final_hw:       # start from the same die's fit (hierarchical prior)
            prior_hw[name] = sibling_start(prior_hw[name], final_hw[parent])
        for c in by_hw[name]:
            split[c.id] = in_fit_set(c.id)
        if len(fit_cases_of[name]) >= MIN_FIT_RUNS:
            # the vTrain rows alone set the host times per kernel and per micro-batch: their priors are plain
            # PyTorch's and a guess, not their framework's
            outcome[name] = fitted_outcome(fit_cases_of[name], prior_hw[name], KERNEL_UNPULLED if kernel_fit.get(name)
                                           else ())
            if kernel_fit.get(name):
                outcome[name] = framework_host_outcome(outcome[name], prior_hw[name], args.check)
            final_hw[name] = outcome[name][0]
            own_blocks[name] = (hw.kind, outcome[name][1])
    for name in sorted(by_hw):
        if name in outcome:
            continue
        hw, n_fit = by_hw[name][0].scenario.hardware, len(fit_cases_of[name])
        if fits_few_runs(n_fit, fit_parent(name, by_hw, fit_cases_of) is not None):
            # too few to fit freely, too many to discard, no die fit to inherit: fitted, pulled harder to the prior
            outcome[name] = few_run_outcome(hw, fit_cases_of[name], own_blocks, prior_hw)
            few_run.add(name)
        elif SIBLINGS.get(name) in final_hw and final_hw[SIBLINGS[name]].efficiency.fitted \
                and SIBLINGS[name] not in few_run:
            new_hw, block = inherited(hw, final_hw[SIBLINGS[name]])
            outcome[name] = (new_hw, block, f"inherited from {SIBLINGS[name]} (only {n_fit} fit runs < "
                                            f"{MIN_FIT_RUNS})", "–")
        else:
            new_hw, block, how = derived_outcome(hw, own_blocks, prior_hw[name])
            outcome[name] = (new_hw, block, f"{how} (only {n_fit} fit runs < {MIN_FIT_RUNS})", "–")
        final_hw[name] = outcome[name][0]
    for name in sorted(by_hw):
        cases, fit_cases = by_hw[name], fit_cases_of[name]
        new_hw, block, status, params = outcome[name]
        prior = prior_hw[name]
        blocks[name] = block
        if not args.check:
            write_block(Path(cases[0].scenario.hardware.path), block)
        res_prior = [compare(c, prior) for c in cases]
        res_fit = [compare(c, new_hw) for c in cases]
        prior_results += res_prior
        fitted_results += res_fit
        fit_ids = {c.id for c in fit_cases}
        n_fit = sum(c.id in fit_ids for c in cases)        # public runs only; the vTrain fit rows are in `status`
        if len(fit_cases) > n_fit:
            status += f" (+ {len(fit_cases) - n_fit} vTrain fit rows)"
        rows.append((name, n_fit, len(cases) - n_fit, status, params,
                     mape_pct(r for r in res_prior if r.id in fit_ids), mape_pct(r for r in res_fit if r.id in fit_ids),
                     mape_pct(r for r in res_prior if r.id not in fit_ids),
                     mape_pct(r for r in res_fit if r.id not in fit_ids)))
        print(f"{name:16s} fit {n_fit:3d} holdout {len(cases) - n_fit:3d}  {status}", file=sys.stderr)

    # siblings without any expressible run inherit too; every other device without runs gets the derived prior
    for name in catalog.hardware_names():
        if name in by_hw:
            continue
        hw = catalog.load_hardware(name)
        sibling = SIBLINGS.get(name)
        if sibling in final_hw and final_hw[sibling].efficiency.fitted and sibling not in few_run:
            final_hw[name], block = inherited(hw, final_hw[sibling])
            status = f"inherited from {sibling} (no expressible run)"
        else:
            final_hw[name], block, how = derived_outcome(hw, own_blocks, prior_hardware(hw))
            status = f"{how} (no expressible run)"
        blocks[name] = block
        if not args.check:
            write_block(Path(hw.path), block)
        rows.append((name, 0, 0, status, "–", None, None, None, None))
        print(f"{name:16s} no runs            {status}", file=sys.stderr)

    # the MoE efficiencies are fitted on the transformer MoE runs; the hybrid Mamba-2 runs are predicted only
    moe = moe_report.fit_moe([c for c in loaded.cases if c.scenario.model.moe is not None
                              and c.scenario.model.hybrid is None], final_hw, blocks,
                             write=not args.check, in_fit_set=in_fit_set, min_fit_runs=MIN_FIT_RUNS)
    # the dense runs of Megatron-Core's frameworks predicted again at the host scale the MoE stage fitted (what
    # ships; they are device-bound, so their fit at the prior scale stands)
    dense_cases = {c.id: c for cases in by_hw.values() for c in cases}
    fitted_results = [compare(dense_cases[r.id], final_hw[r.hardware])
                      if r.framework in moe_report.MEGATRON_CORE_FRAMEWORKS and r.id in dense_cases else r
                      for r in fitted_results]
    fitted_results += moe.fitted_results
    split.update(moe.split)
    # a sibling without MoE runs of its own takes its sibling's MoE efficiencies (as it took the dense ones)
    moe_fitted = {row[0] for row in moe.rows if row[3] == "fitted"}
    has_moe = set(moe_fitted)             # the devices with MoE efficiencies of their own or a sibling's
    for name, sibling in SIBLINGS.items():
        block = blocks.get(name)
        if name in moe_fitted or sibling not in moe_fitted or not block or block.get("gemm") is None:
            continue
        eff = final_hw[sibling].efficiency
        block = {**block, "grouped_gemm": round(eff.grouped_gemm, 4), "all_to_all": round(eff.all_to_all, 4)}
        blocks[name] = block
        has_moe.add(name)
        if name in final_hw:
            final_hw[name] = catalog.with_efficiency(final_hw[name], grouped_gemm=eff.grouped_gemm,
                                                     all_to_all=eff.all_to_all)
        if not args.check:
            write_block(Path(catalog.load_hardware(name).path), block)
    derived_moe_priors(blocks, final_hw, moe, moe_fitted, has_moe, write=not args.check)
    if not args.check:
        write_megatron_core_host_scale(moe)

    if not args.check:
        target = catalog.specs_dir() / catalog.CATALOG_CACHE_NAME
        text = catalog.catalog_cache_text(catalog.build_catalog_cache())
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")

    if not args.check:   # the error bands come from these efficiencies' residuals (a fresh process: no stale cache)
        import subprocess
        subprocess.run([sys.executable, str(ROOT / "tools" / "cross_validate.py")], check=True)
        subprocess.run([sys.executable, str(ROOT / "tools" / "fit_bands.py")], check=True)
    hybrid_cases = [c for c in loaded.cases if c.scenario.model.hybrid is not None]
    hybrid_results = moe_report.predict_hybrid(hybrid_cases, final_hw)
    fitted_results += hybrid_results
    split.update({c.id: in_fit_set(c.id) for c in hybrid_cases})
    report = build_report(fitted_results, loaded.not_expressible, loaded.duplicates)
    dense_results = [r for r in fitted_results if r.architecture == "dense"]
    fit_all = [r for r in dense_results if split[r.id]]
    hold_all = [r for r in dense_results if not split[r.id]]
    prior_fit = [r for r in prior_results if split[r.id]]
    prior_hold = [r for r in prior_results if not split[r.id]]
    overall = (len(fit_all), len(hold_all), mape_pct(prior_fit), mape_pct(fit_all), mape_pct(prior_hold),
               mape_pct(hold_all))
    flat_ids = {c.id for c in loaded.cases if c.scenario.parallel.dp_collectives == "flat"}
    doc = render_doc(report, rows, overall, fitted_results, targets_markdown(dense_results, split, flat_ids),
                     vtrain_markdown(final_hw), prior_rule_markdown(by_hw, own_blocks, final_hw),
                     moe_report.markdown(moe) + "\n\n" + moe_report.hybrid_markdown(hybrid_results, split, hybrid_cases),
                     finetune_report.section(final_hw))
    doc = doc.replace("\n## The measured step against the overlap bounds",
                      "\n## The error band of every estimate\n\n" + bands_markdown()
                      + "\n\n## The measured step against the overlap bounds", 1)
    if not args.check:
        DOC.parent.mkdir(parents=True, exist_ok=True)
        DOC.write_text(doc, encoding="utf-8")
    print(moe.summary_line, file=sys.stderr)
    print(f"hybrid: {len(hybrid_results)} runs predicted, MAPE {_pct(mape_pct(hybrid_results))} %", file=sys.stderr)
    print(f"overall (dense): fit {overall[0]} runs MAPE {_pct(overall[2])} -> {_pct(overall[3])} %; holdout {overall[1]} runs "
          f"MAPE {_pct(overall[4])} -> {_pct(overall[5])} %; all {report.summary.runs} runs "
          f"{_pct(report.summary.mape_pct)} %; {time.perf_counter() - t0:.1f} s"
          + ("" if args.check else f"; wrote {DOC.relative_to(ROOT)}"), file=sys.stderr)
    return 0


PAPER_SOURCES = ("korthikanti2022", "narayanan2021")   # issue 3's "Korthikanti and Narayanan A100 tables"

# The vTrain CSV does not give the A100's memory size; the importer maps it to a100-80gb-sxm. The
# section also predicts the rows on the other SXM4 entry, to show what that assumption is worth.
VTRAIN_HARDWARE_ALTERNATIVE = ("a100-80gb-sxm", "a100-40gb-sxm")


def vtrain_markdown(final_hw: dict[str, catalog.Hardware]) -> str:
    """The vTrain section's tables (tools/vtrain_report.py) with the fitted efficiencies, and the same
    rows predicted on the other A100 entry."""
    cases, results = vtrain_report.predict(vtrain_report.DEFAULT_SET, hardware_by_name=final_hw)
    if not cases:
        return "No run of the set is bundled."
    used, other = VTRAIN_HARDWARE_ALTERNATIVE
    alt_hw = final_hw.get(other) or catalog.load_hardware(other)
    _, alt = vtrain_report.predict(vtrain_report.DEFAULT_SET, hardware=alt_hw)
    picks, alt_picks = vtrain_report.plan_picks(cases, results), vtrain_report.plan_picks(cases, alt)
    by_mb = ", ".join(f"mb {g.value} {g.mean_error_pct:+.0f} %" for g in vtrain_report.by_key(alt, "micro_batch"))
    ratio = statistics.fmean(a.predicted_step_s / r.predicted_step_s for r, a in zip(results, alt))
    sensitivity = (f"**The memory size is an assumption.** The CSV does not give it; the importer maps the rows to "
                   f"`{used}` (as it does every A100 record that does not say 40GB). Predicted on `{other}` "
                   f"(HBM2 at {alt_hw.memory_bytes_per_s / GB:.0f} GB/s and that entry's own fitted "
                   f"efficiencies) the steps come out {100 * (ratio - 1):.0f} % slower on average: MAPE "
                   f"{statistics.fmean(abs(vtrain_report.error_pct(r)) for r in alt):.1f} % ({by_mb}); the plan "
                   f"pick is right in {sum(p.right for p in alt_picks)} of {len(alt_picks)} jobs at a mean cost of "
                   f"{statistics.fmean(p.cost_pct for p in alt_picks):.1f} %. Neither entry removes the trend with "
                   f"micro-batch and tp.")
    return vtrain_report.markdown_report(cases, results).replace(
        "\n\nPlan pick: ", "\n\n" + sensitivity + "\n\nPlan pick: ", 1) if picks else sensitivity


def targets_markdown(results: list[RunResult], split: dict[str, bool], flat_ids: set[str]) -> str:
    """Issue 3's accuracy targets against the shipped efficiencies, with the fit/holdout side."""
    paper = [r for r in results if r.source in PAPER_SOURCES and r.hardware.startswith("a100")]
    deepspeed = [r for r in paper if r.id in flat_ids]
    rows = [("all expressible runs (distinct measurements)", results, "≤ 10 % over ≥ 400 runs",
             len(results) >= 400 and mape_pct(results) <= 10.0),
            ("… of which holdout", [r for r in results if not split[r.id]], "", None),
            ("Korthikanti 2022 + Narayanan 2021 A100 tables", paper, "≤ 5 %", mape_pct(paper) <= 5.0),
            ("… of which holdout", [r for r in paper if not split[r.id]], "", None),
            ("… Narayanan Table 2 DeepSpeed ZeRO-3 rows (`dp_collectives: flat`)", deepspeed, "", None),
            ("… the other rows", [r for r in paper if r.id not in flat_ids], "", None)]
    lines = ["| runs compared | runs | MAPE % | median APE % | target | met |", "|---|---:|---:|---:|---|---|"]
    for label, rs, target, met in rows:
        if rs:
            lines.append(f"| {label} | {len(rs)} | {mape_pct(rs):.1f} | "
                         f"{statistics.median(abs(r.error_pct) for r in rs):.1f} | {target} | "
                         f"{'' if met is None else 'yes' if met else '**no**'} |")
    return "\n".join(lines) + "\n\n" + same_configuration_markdown(paper)


def bounds_markdown(results: list[RunResult]) -> str:
    """Per source: how many measured steps fall below, inside and above the overlap policy's bounds."""
    by: dict[str, list[RunResult]] = {}
    for r in results:
        by.setdefault(r.source, []).append(r)
    lines = ["| source | runs | faster than the overlapped estimate | inside the bounds | slower than no overlap |",
             "|---|---:|---:|---:|---:|"]
    for name, rs in [*sorted(by.items()), ("all", results)]:
        c = overlap_bounds(rs)
        lines.append(f"| {name} | {len(rs)} | {c['faster']} | {c['inside']} | {c['slower']} |")
    return "\n".join(lines)


def same_configuration_markdown(results: list[RunResult]) -> str:
    """Runs of different sources with the same model, t, p, micro-batches per pipeline and recompute:
    how far apart the sources' own measurements are (the floor for any single model)."""
    groups: dict[tuple, list[RunResult]] = {}
    for r in results:
        m = r.global_batch // (r.dp * r.micro_batch)
        groups.setdefault((round(r.params_b), r.seq_len, r.tp, r.pp, r.micro_batch, m, r.recompute), []).append(r)
    lines = ["| model | t / p | micro-batches m | recompute | run | d | v | measured step s | predicted step s |",
             "|---|---|---:|---|---|---:|---:|---:|---:|"]
    for key, rs in sorted(groups.items()):
        if len({r.source for r in rs}) < 2:
            continue
        for r in sorted(rs, key=lambda r: r.id):
            lines.append(f"| {key[0]}B | {r.tp} / {r.pp} | {key[5]} | {r.recompute} | {r.id} | {r.dp} | {r.vpp} | "
                         f"{r.measured_step_s:.2f} | {r.predicted_step_s:.2f} |")
    return ("The same configuration measured by both papers (same model, t, p, micro-batch and micro-batches "
            "per pipeline; d and v as published):\n\n" + "\n".join(lines)) if len(lines) > 2 else ""


def prior_rule_markdown(by_hw: dict, own_blocks: dict, final_hw: dict) -> str:
    """Leave one device out: each device fitted on its own runs, predicted with the prior it would get
    without them (the median of the other fitted devices of its group) and with the generic prior."""
    import import_hardware as ih

    lines = ["| device | runs | generic prior MAPE % | median of the others, plain GEMM median MAPE % | "
             "median of the others MAPE % | own fit MAPE % |", "|---|---:|---:|---:|---:|---:|"]
    weighted = {"generic": 0.0, "plain": 0.0, "median": 0.0, "own": 0.0}
    total = 0
    for name in sorted(own_blocks):
        cases, hw = by_hw[name], final_hw[name]
        if ih.derived_prior(hw.kind, {n: v for n, v in own_blocks.items() if n != name}) is None:
            continue
        median_hw = unseen_prior_hardware(hw, own_blocks)
        plain_hw = unseen_prior_hardware(hw, own_blocks, gemm_ceiling=False)
        errs = {"generic": mape_pct(compare(c, prior_hardware(hw)) for c in cases),
                "plain": mape_pct(compare(c, plain_hw) for c in cases),
                "median": mape_pct(compare(c, median_hw) for c in cases),
                "own": mape_pct(compare(c, hw) for c in cases)}
        lines.append(f"| {name} | {len(cases)} | {_pct(errs['generic'])} | {_pct(errs['plain'])} | "
                     f"{_pct(errs['median'])} | {_pct(errs['own'])} |")
        total += len(cases)
        for k in weighted:
            weighted[k] += (errs[k] or 0.0) * len(cases)
    lines.append(f"| **all (run-weighted)** | {total} | {_pct(weighted['generic'] / total)} | "
                 f"{_pct(weighted['plain'] / total)} | {_pct(weighted['median'] / total)} | "
                 f"{_pct(weighted['own'] / total)} |")
    return "\n".join(lines)


def render_doc(report, rows, overall, results: list[RunResult], targets: str, vtrain: str, priors: str,
               moe: str, finetune: str) -> str:
    split_lines = ["| hardware | fit runs | holdout runs | status | fitted values | fit MAPE % (prior → fitted) | "
                   "holdout MAPE % (prior → fitted) |", "|---|---:|---:|---|---|---:|---:|"]
    for name, nf, nh, status, params, pf, ff, ph, fh in rows:
        split_lines.append(f"| {name} | {nf} | {nh} | {status} | {params} | {_pct(pf)} → {_pct(ff)} | "
                           f"{_pct(ph)} → {_pct(fh)} |")
    nf, nh, pf, ff, ph, fh = overall
    split_lines.append(f"| **all** | {nf} | {nh} | | | {_pct(pf)} → {_pct(ff)} | {_pct(ph)} → {_pct(fh)} |")
    return f"""# Validation: trainest against published training runs

_Generated by `{COMMAND}` — do not edit by hand; re-run it after changing the model or the runs.
It runs `python tools/cross_validate.py` (whose fits are cached) and `python tools/fit_bands.py` after the
refit. `trainest validate --markdown` prints the same tables for the shipped defaults (without the
fit/holdout columns)._

## Headline: one source left out

A user's cluster, framework and recipe are a source trainest has not seen. The accuracy figure is
therefore the error on runs of a source left out of the fit: every hardware refitted without that
source's runs, then the source's runs predicted ([cross-validation.md](cross-validation.md),
`python tools/cross_validate.py`). The random holdout further below is the second figure: it keeps
every source on both sides of the split, so part of each source's habits is learned.

{left_out_headline()}

{band_headline()}

## What is compared

Every record of `specs/runs/*.yaml` (imported from the shared reference by `tools/import_runs.py`)
that trainest can express is predicted with `trainest.estimate.estimate()` and compared with what
the source measured, in the source's own metric and unit (`trainest/validate.py`):

- **step time** [s] when the source gives it; else **tokens/s** (all devices);
- else the source's **TFLOP/s per device** or **MFU**, reproduced with that source's own FLOP
  formula (`trainest/conventions.py`): predicted = F_source / (predicted step time · N) (MFU also
  divides by the dense peak of the run's precision), so a FLOP-counting convention never
  masquerades as a speed difference;
- else **device-hours** for the stated tokens.

Error = (predicted − measured) / measured of the run's metric; MAPE is the mean of |error|. The signed
mean is of the step-time error, predicted / measured step − 1 (negative: the step predicted too fast),
one sign whatever each run's metric: a throughput's error has the opposite sign of its step's, so a
mean of metric errors over runs of several metrics would mean nothing (`trainest/validate.py:
step_error_pct`; `validate --json` gives both, `mean_error_pct` and `mean_step_error_pct`). Records marked
`expressible: false` (hybrid Mamba layers, missing shapes...) and records whose scenario
does not validate are counted with their reason, never dropped silently. Mixture-of-experts runs
(with or without multi-head latent attention) are expressible since issue 13; their fit and errors
are reported in their own section below.

## How the shipped efficiencies were obtained

The achievable efficiencies in `specs/hardware/<name>.yaml` (`efficiency:` block: gemm, attention,
memory, scale_up, scale_out, low_precision_gemm, layer_overhead_us) are fitted by the method of
`trainest calibrate` (`trainest/calibrate.py`): a robust (Huber) least-squares fit of ln(predicted /
measured) step time — every metric is converted to an equivalent measured step time — plus a weak
pull (λ = {PRIOR_WEIGHT:g}) towards the start — the importer's prior, or for a device built on the same
die as one fitted on its own runs (GB200 and GB300 after B200, the A100 40GB after the 80GB, the
power-capped H100 after the H100 SXM) that die's fit, so that what its own runs do not determine
stays at the die's value (`fit_defaults.sibling_start`) — by a projected Levenberg–Marquardt inside
per-parameter physical bounds (listed under the table below). `low_precision_gemm` is fitted only when the
runs include FP8/FP4, `layer_overhead_us` only when they include a model under 3 B parameters; a
parameter no run is sensitive to stays at its prior. `overlap_contention` (docs/model.md §4.7) is not
fitted: it is set by hardware kind (0.15 on GPUs, 0 on TPUs) before the fit.

**Split.** Per hardware, a run is in the FIT set when `crc32(id) mod 100 < {FIT_PERCENT}` (about
{FIT_PERCENT} %), else in the HOLDOUT set: deterministic, independent of file order, and a run keeps its
side when runs are added. Hardware with fewer than {MIN_FIT_RUNS} fit runs but at least 3, and no die fitted on
{MIN_FIT_RUNS} runs, is fitted on them with the pull to the prior of a device without runs scaled by
{MIN_FIT_RUNS}/n (`fit_defaults.few_run_outcome`; docs/model/10-efficiencies.md §10.2); other hardware with
fewer keeps its sibling's fit or its prior. The holdout
errors are the honest accuracy figure for runs like the published ones; the fit errors show how much
the fit absorbed. A random split keeps every source on both sides, so for runs of a framework or
cluster trainest has never seen, the figure is the headline's above (one source left out at a time;
`python tools/cross_validate.py`), not this holdout's: this is the second figure.

## Fit and holdout errors (dense runs)

The hardware efficiencies are fitted on the dense runs only; the MoE runs fit only the two MoE
efficiencies, afterwards (their own section below), so adding them moves no dense number.

{chr(10).join(split_lines)}

The fit minimises a Huber loss of log step-time ratios plus a pull (λ = `calibrate.PRIOR_WEIGHT`)
towards the priors, inside physical bounds per parameter (`calibrate.BOUNDS`: gemm 0.45–0.92,
attention 0.2–0.95, memory 0.5–0.95, scale_up 0.4–0.95, scale_out 0.3–0.95, low_precision_gemm
0.6–1, flash2_attention 0.3–1). Where a fitted value sits on a bound (for example memory = 0.5 on
GB200 and the torchtitan H100s, gemm = 0.92 on GB300 and TPU v5p), the efficiency is compensating for
a missing or mis-sized term of the step model rather than measuring the hardware; see "Where the
model errs". The GEMM efficiency's upper bound is lower where the device's best dense 16-bit GEMM rate
was measured (`compute.measured_matmul_tflops`, ml-engineering's maximum achievable matmul FLOP/s:
H100 0.80 of its peak, B200 0.78, MI300X 0.51; GB200/GB300 from their B200/B300 dies' fractions): a
training step's GEMMs cannot beat the best GEMM a sweep of shapes finds (GB300's fit had sat at 0.92,
2,300 TFLOP/s, above the 1,966 Blackwell Ultra's fraction gives; bounded, its dense holdout MAPE went
5.9 → 8.1 % and the dense holdout 5.5 → 5.8 %: the fit had absorbed something else into an impossible
GEMM rate).

## Priors for devices without runs of their own

A device without fit runs and no sibling die ships the per-parameter median of
the devices fitted on their own runs, by kind (`tools/import_hardware.py: derived_prior`: GPUs from the
fitted GPUs, TPUs from the fitted TPUs, Gaudi and Trainium from every fitted accelerator; Apple SoCs
keep the generic prior), except its GEMM efficiency where its best GEMM rate was measured: its
measured fraction of peak times the median over the fitted devices of their fitted GEMM efficiency over
their own measured fraction (training reaches about 0.9 of the best measured GEMM rate on A100, B200
and GB200, 0.8 on H100; MI300X's GEMMs reach 0.51 of its peak where H100's reach 0.80, so the plain
median made it 1.6× an H100). Such a block says `fitted: false`, and every estimate on it says
`hardware.calibrated: false` (a footnote in the tables). How good is such a prior? Each device fitted
on its own runs, predicted once more as if it had none: with the generic prior of the importer and
with the median of the *other* fitted devices of its group (leave one device out), with and without
the GEMM efficiency scaled by the measured best GEMM rates. Expect an
uncalibrated device's step times to be off by about this much, not by the holdout error above.

{priors}

The generic prior's fixed fractions (GEMM 0.75, memory 0.80) sit above what most fits find, which made
uncalibrated hardware look faster than calibrated hardware; the medians are about as accurate and
come from the fits. TPU v4 (6 runs, 4 of them in the fit split) tested the rule directly while a device with
fewer than {MIN_FIT_RUNS} fit runs kept it: the median of the two fitted TPUs (12.4 % MAPE on its 6 runs) did
worse than the generic prior (8.9 % on its fit runs, 5.0 % on its 2 holdout runs); it is now fitted on its 4,
pulled ×2 harder to that median (measured on the constants before that change: its 2 holdout runs 15.7 →
4.4 %, all 6 runs 12.4 → 2.5 %; the fit and holdout table above has its current figures).

With MaxText left out (the headline's one source left out, `tools/cross_validate.py`) no TPU is fitted, so
the TPUs take the generic prior (GEMM 0.75 against their fits' 0.83–0.91), and that GEMM fraction is the whole
of their left-out error (issue 31, stop 52: per op, the GEMMs are 98 % of v5e's measured step at the prior and
81 % at its fit; attention, element-wise, ICI and host terms move by under a point; v5e +19.5 %, v5p +8.5 %, v4
+6.9 % too slow). Nothing in ../shared/reference measures a TPU's best GEMM rate, the fact the GPUs' prior rests
on. Measured and not taken: the median of every fitted accelerator as the TPU fallback (as Gaudi's and
Trainium's) makes it worse (MaxText left out 11.4 → 14.2 %); that fallback with an ASSUMED GEMM ceiling of 1.0
(a TPU's MXUs at a fixed clock, against the GPUs' power-managed boost) times the GPUs' median of fitted over
measured (0.876) gives MaxText 7.5 % and the dense headline 7.63 → 7.24 %, but the ceiling is an assumption
no cited measurement backs, it would change no shipped prediction (only the left-out computation and the band of
uncalibrated devices), and a best constant fitted to MaxText would be 0.85: a TPU GEMM measurement (a lent TPU,
or a cited benchmark) is what would settle it.

## Targets (issue 3, dense runs)

{targets}

The DeepSpeed rows are predicted with `parallel.dp_collectives: flat` (one NIC per GPU for the ZeRO
gathers and reduce-scatters; docs/model.md §3.2). That input was inferred from those same rows
(their step time does not fall when the GPU count doubles at a fixed batch), so their errors are not
an independent test of it; no efficiency was fitted for it. With the default hierarchical rings
they were predicted 1.4–4.4× too fast. At micro-batch 4 (384 and 640 GPUs) they are still predicted
~20 % too fast: the measured step is compute-bound at ~141 TFLOP/s per GPU, slower than trainest's
compute for the same GEMMs, and nothing in the published inputs accounts for it. These six rows are
also the only A100 runs whose step time depends strongly on the NIC bandwidth, so they set the A100's
fitted `scale_out` (fit without them: ≈ 0.71, near the 0.70 prior; with them ≈ 0.63).

Where both papers measured the same configuration (table above), their own step times differ by
7–10 % (GPT 530B: Narayanan 2021 54.1 s with d = 9, Korthikanti 2022 49.1 s with d = 1 and 50.4 s
with d = 8; the 1T model: 102.6 s with v = 2 against 94.4 s with v not stated), newer Megatron-LM
being faster. A single model that takes only the published inputs sits between them, ±4–5 % from
each, so ≤ 5 % over both tables leaves almost no room for the other rows' errors. trainest does not
key anything on the source or the software release.

{moe}

## Summary with the shipped (fitted) efficiencies

{markdown(report).split(chr(10) + "### Per run")[0].strip()}

## The measured step against the overlap bounds

Every estimate also gives the step with nothing overlapped (`step.no_overlap_time_s`: every
collective exposed in full, docs/model.md §4.8). The overlapped estimate is the central prediction
(the efficiencies are fitted with its overlap policy, so about half the runs are measured faster);
the no-overlap one is a pessimistic bound; a run measured slower than it is slow for reasons other
than overlap (compute or memory efficiency, or a term the model lacks).

{bounds_markdown(results)}

## Where the model errs (all compared runs, shipped efficiencies)

{features_markdown(results)}

### The {WORST_RUNS} worst runs

{worst_markdown(results, WORST_RUNS)}

## Memory per device vs published peak memory

{memory_markdown(results)}

## The plans trainest picks vs the published layouts

{plan_summary()}

## vTrain single-node rows (Megatron-DeepSpeed, 8×A100)

`specs/runs/vtrain-single.yaml` holds 720 measured iteration times of small GPT models (hidden 1024,
12–24 layers, seq 1024, fp16, full recompute, standard attention, tied embeddings, dropout 0.1)
trained with Megatron-DeepSpeed on one 8-GPU A100 NVLink node under every tp/pp/dp split of 2, 4 and
8 GPUs and micro-batch 1–8: the single-node ground truth the vTrain simulator released (Bang et al.,
MICRO 2024; `tools/import_runs.py` lists every import assumption in each run's notes). They are 72
jobs (same model, device count and global batch), each measured under 2–26 layouts. These are not
public vendor runs: the file says `set: vtrain-single-node`; the tables by source and hardware above, the
holdout of the public runs, `docs/cross-validation.md` and the gates of `tests/test_accuracy_gate.py` keep
the public set only. Their FIT split (crc32(id) mod 100 < 60) joins the fit of `a100-80gb-sxm`, because they
constrain what no public run does: the host time per kernel (56.8 µs: Megatron-DeepSpeed launching every
kernel from Python; kept as that framework's `host_scale`, 2.84 × plain PyTorch's 20 µs, in `specs/frameworks.json`),
its host time per micro-batch (2.03 ms, kept as its `micro_batch_host_scale`) and the small-GEMM shape factor; their
holdout split is predicted, not fitted. Gates (`tests/test_vtrain_report.py`): all rows and the holdout split ≤ 6 %
MAPE, every micro-batch and tp group's mean error within ±14 % (issue 12's target is ±5 %: tp 8 is at −13 %, see
below), the plan
pick's mean cost ≤ 4 % and right in ≥ 60 % of the jobs (target: 80 % at ≤ 2 %). `trainest validate --set
vtrain-single-node` prints every run's error; `python tools/vtrain_report.py` prints these tables.

The runs are imported with `framework: megatron-deepspeed` and `parallel.dp_overlap: false` (vTrain's configs
set no gradient bucketing: the data-parallel all-reduce runs after the backward). What took them from 46.5 %
to under 7 % (docs/model.md §2.2, §2.9): the host's time to launch each kernel (56 kernels per layer and
micro-batch here; the small steps are host-bound), the kernels' device floors, tile and wave quantization
of the small GEMMs over the A100's 108 SMs, and the exposed gradient reduction; then (to 5.5 %) the kernels
and all-reduces of the embedding and the loss every micro-batch, Megatron-DeepSpeed's unfused
cross-entropy (52 B per logit), Megatron's FP32 softmax fallback where b·a/t is not a multiple of 4 (tp 8 at
micro-batch 1: −26 % before), 64-wide GEMM tiles for the head dimension and the tied-embedding all-reduce
between pipeline stages; then (to 5.1 %, holdout split 5.1 → 4.3 %) the smooth maximum of each layer's
host and device time (p = 4, fitted on the fit split, docs/model.md §2.9) in place of the plain maximum;
then (to 4.6 %, holdout split 4.3 → 3.9 %, median 3.6 → 2.9 %) the host's Python per micro-batch, on the path
because Megatron-DeepSpeed's `get_batch` copies the batch's sizes to the host every micro-batch (2.03 ms
fitted; docs/model.md §2.9): it lets the host time per kernel drop from 59.5 to 56.8 µs and the A100's HBM
fraction rise from 0.78 to 0.83, and moves tp 8 from −12.1 to −13.3 %. What is left, read from the rows themselves (their step times are exactly linear
in the layers, so a·m·L + b·m + c·L + d separates per layer-and-micro-batch, per micro-batch, per layer and
per step costs for each layout): (1) at tp 8 a layer and micro-batch takes 4.0 ms at micro-batch 2 where
the host-bound tp 1–4 layers take 3.0–3.4 ms, and 4.6 ms at micro-batch 8 where the model's device time is
3.2 ms: tp 8 stays 13 % too fast (40 runs); no count, NCCL latency (2 MB all-reduces at 8 ranks cost
~50 µs) or shape term explains it, and no parameter is added for it; (2) the per-micro-batch cost outside
the layers at tp 1 is 6.8 ms at micro-batch 1 and 10.7 ms at 2, against 3.6 and 4.1 ms at tp 2 where each
rank has the same logits work (b·s·V/t), and 2.0 ms at tp 8: the model has 5.7 and 8.7 ms at tp 1, 4.3 and
5.8 ms at tp 2 and 3.6 ms at tp 8, one host cost per micro-batch for all (the measured cost falls with tp faster
than the logits work and the collectives do); (3) at tp 2 a layer at micro-batch
4 takes 3.2 ms, less than at micro-batch 1 or 2 (3.3, 3.6 ms): more work in less time, which no
monotone model reproduces. (2) and (3) are what the plan pick misses: in 27 of the 28 jobs it gets wrong
the measured best is tp 2 at micro-batch 4 or 8 and trainest picks tp 1 with twice the data parallelism at
half the micro-batch, 3–14 % slower.

{vtrain}

{finetune}
## Per run

{runs_markdown(report.runs)}

## Not expressible, by reason

{reasons_markdown(report.not_expressible)}

## Repeated transcriptions

{len(report.duplicates)} records repeat a measurement that another file already holds (`duplicate_of`);
each measurement is compared and counted once, so these are neither fitted nor scored:
{", ".join(report.duplicates) or "none"}.
"""


if __name__ == "__main__":
    sys.exit(main())
