"""Leave one source out: how well trainest predicts runs from a source it was never fitted on.

    python tools/cross_validate.py          # writes docs/cross-validation.md

The random fit/holdout split of tools/fit_defaults.py keeps runs of every source on both sides, so a
source's habits (framework, recipe, measurement) are partly learned by the fit. A new user's cluster
is a new source. Here, for each source S and each hardware H that S ran on, H's efficiencies are
fitted (the same method and prior as fit_defaults: `trainest.calibrate.fit_efficiency`) on the FIT
runs of H from every OTHER source, then S's runs on H are predicted. Where the other sources leave
fewer than MIN_FIT_RUNS fit runs on H, H takes the prior (or its same-die sibling's fit, as in
fit_defaults). The table compares that error with the shipped fit's error on the same runs.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from fit_defaults import KERNEL_SET, MIN_FIT_RUNS, SIBLINGS, in_fit_set, prior_hardware, sibling_start  # noqa: E402

from trainest import catalog  # noqa: E402
from trainest.calibrate import fit_efficiency  # noqa: E402
from trainest.validate import PUBLIC_SET, compare, load_runs, mape_pct  # noqa: E402

DOC = ROOT / "docs" / "cross-validation.md"
COMMAND = "python tools/cross_validate.py"


def fitted_without(cases_by_hw: dict, hw_name: str, source: str) -> tuple[catalog.Hardware, str]:
    """`hw_name` fitted on the fit runs of every source but `source` (or its fallback), and how."""
    hw = cases_by_hw[hw_name][0].scenario.hardware if hw_name in cases_by_hw else catalog.load_hardware(hw_name)
    fit = [c for c in cases_by_hw.get(hw_name, []) if c.source != source and in_fit_set(c.id)]
    if len(fit) >= MIN_FIT_RUNS:
        # as the shipped fit: the small-kernel steps' fit split joins their hardware's fit (never a public source),
        # and the fit starts from the same die's fit where a sibling has one (fit_defaults.sibling_start)
        extra = KERNEL_FIT.get(hw_name, [])
        start, parent = prior_hardware(hw), SIBLINGS.get(hw_name)
        if parent:
            parent_hw, parent_how = fitted_without(cases_by_hw, parent, source)
            if "fitted on" in parent_how:
                start = sibling_start(start, parent_hw)
        return (fit_efficiency(fit + extra, start).hardware,
                f"fitted on {len(fit)} runs of other sources" + (f" + {len(extra)} vTrain fit rows" if extra else ""))
    sibling = SIBLINGS.get(hw_name)
    if sibling:
        sib_hw, how = fitted_without(cases_by_hw, sibling, source)
        if how.startswith("fitted"):
            e = sib_hw.efficiency
            return catalog.with_efficiency(hw, **{k: getattr(e, k) for k in (
                "gemm", "gemm_half_dim", "attention", "memory", "scale_up", "scale_out", "low_precision_gemm",
                "flash2_attention", "layer_overhead_s", "host_per_kernel_s")}), f"{sibling}'s fit ({how})"
    return prior_hardware(hw), f"prior ({len(fit)} fit runs of other sources < {MIN_FIT_RUNS})"


KERNEL_FIT: dict[str, list] = {}


def main() -> int:
    t0 = time.perf_counter()
    for c in load_runs(run_set=KERNEL_SET).cases:
        if in_fit_set(c.id):
            KERNEL_FIT.setdefault(c.scenario.hardware.name, []).append(c)
    loaded = load_runs(run_set=PUBLIC_SET)     # the public runs only (docs/validation.md: other sets apart)
    # the dense runs: they fit the hardware efficiencies (fit_defaults.py); the MoE runs all come from one
    # source, so leaving it out leaves no MoE run to fit the MoE efficiencies on (their holdout is reported
    # in docs/validation.md)
    dense = [c for c in loaded.cases if c.scenario.model.moe is None]
    by_hw: dict[str, list] = {}
    for c in dense:
        by_hw.setdefault(c.scenario.hardware.name, []).append(c)
    sources = sorted({c.source for c in dense})
    rows, all_loso, all_shipped = [], [], []
    for source in sources:
        mine = [c for c in dense if c.source == source]
        loso, shipped, how = [], [], []
        for hw_name in sorted({c.scenario.hardware.name for c in mine}):
            hw, text = fitted_without(by_hw, hw_name, source)
            cases = [c for c in mine if c.scenario.hardware.name == hw_name]
            loso += [compare(c, hw) for c in cases]
            shipped += [compare(c) for c in cases]
            how.append(f"{hw_name}: {text}")
        all_loso += loso
        all_shipped += shipped
        rows.append((source, len(loso), mape_pct(shipped), mape_pct(loso),
                     statistics.fmean(r.error_pct for r in loso), "; ".join(how)))
        print(f"{source:20s} {len(loso):4d} runs  shipped {mape_pct(shipped):5.1f} %  left out {mape_pct(loso):5.1f} %",
              file=sys.stderr)
    lines = ["| source | runs | MAPE %, shipped fit | MAPE %, source left out | mean error %, left out | "
             "efficiencies used when left out |", "|---|---:|---:|---:|---:|---|"]
    for source, n, ms, ml, mean, how in rows:
        lines.append(f"| {source} | {n} | {ms:.1f} | {ml:.1f} | {mean:+.1f} | {how} |")
    lines.append(f"| **all** | {len(all_loso)} | {mape_pct(all_shipped):.1f} | {mape_pct(all_loso):.1f} | "
                 f"{statistics.fmean(r.error_pct for r in all_loso):+.1f} | |")
    DOC.write_text(f"""# Cross-validation: one source left out

_Generated by `{COMMAND}` — do not edit by hand; re-run it after changing the model, the runs or
the fit._

{__doc__.split(chr(10), 2)[2].strip()}

{chr(10).join(lines)}

Reading it: the "left out" column is the error to expect on runs from a framework, recipe or cluster
that trainest has not seen on that hardware; the gap to the "shipped" column is what the fit learns
from a source's own runs. Where a hardware has runs of only one source (the TPUs with MaxText, the
power-capped H100s with torchtitan, GB200/GB300 with Megatron-Bridge), leaving it out falls back to the
prior efficiencies or a sibling's fit: that row measures the priors, not the model's structure.
""", encoding="utf-8")
    print(f"all: {len(all_loso)} runs, shipped {mape_pct(all_shipped):.1f} %, left out {mape_pct(all_loso):.1f} %; "
          f"{time.perf_counter() - t0:.1f} s; wrote {DOC.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
