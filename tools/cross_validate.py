"""Leave one source out: how well trainest predicts runs from a source it was never fitted on.

    python tools/cross_validate.py          # writes docs/cross-validation.md and docs/cross-validation.json
    python tools/cross_validate.py --check  # recompute and compare with the shipped JSON: exit 1 when stale

The random fit/holdout split of tools/fit_defaults.py keeps runs of every source on both sides, so a
source's habits (framework, recipe, measurement) are partly learned by the fit. A new user's cluster
is a new source. Here, for each source S and each hardware H that S ran on, H's efficiencies are
fitted (the same method, prior and sibling start as fit_defaults: `trainest.calibrate.fit_efficiency`)
on the FIT runs of H from every OTHER source, then S's runs on H are predicted. Where the other sources
leave fewer than MIN_FIT_RUNS fit runs on H but at least 3, and H has no die fitted on MIN_FIT_RUNS runs
without S, H is fitted on them pulled harder to the prior of a device without runs, as the shipped fit does
(`fit_defaults.few_run_outcome`); otherwise H takes its same-die sibling's fit without S, else the prior a
device without runs ships with (`fit_priors.unseen_prior_hardware`: the median of the devices of its kind
fitted on MIN_FIT_RUNS runs, each of them fitted without S, so that nothing S's runs set reaches S's
predictions). A mixture-of-experts run left out takes the catalog's MoE priors (every MoE run comes from
one source, so no MoE efficiency can be fitted without it, nor Megatron-Core's host scale, which only those
runs measure: that source's runs take its prior 1). This is the headline accuracy
(docs/validation.md leads with it); the per-run residuals in docs/cross-validation.json are what the
error band is calibrated on (tools/fit_bands.py), with each run's step predicted with the prior of a device
without runs built without its source (`prior_step_s`: the band's prior pool). Its `left_out_error_pct` and
`shipped_error_pct` are errors of each run's own metric, as the MAPE is (a throughput's is > 0 when the step is
predicted too fast, a step time's when too slow); the tables' signed mean is of the step time
(`left_out_step_s` / `measured_step_s` − 1, negative: predicted too fast), one sign for every metric.

Fits are cached on disk (build/cross_validate/fits.json) under a digest of the model's code, the start
efficiencies and the fitted scenarios: an unchanged fit is not redone.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import statistics
import sys
import time
from trainest.record import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from fit_bands import FAMILY_OF  # noqa: E402
from fit_defaults import (  # noqa: E402
    KERNEL_SET,
    KERNEL_UNPULLED,
    MIN_FIT_RUNS,
    SIBLINGS,
    few_run_weight,
    fits_few_runs,
    in_fit_set,
    prior_hardware,
    sibling_start,
)
from moe_report import HOST_SCALE_BOUNDS, MEGATRON_CORE_FRAMEWORKS, set_megatron_core_host_scale  # noqa: E402

from trainest import band as B  # noqa: E402
from trainest import catalog  # noqa: E402
from trainest.calibrate import PRIOR_WEIGHT, fit_efficiency  # noqa: E402
from trainest.frameworks import FRAMEWORKS  # noqa: E402
from trainest.validate import PUBLIC_SET, Case, RunResult, compare, load_runs  # noqa: E402

DOC = ROOT / "docs" / "cross-validation.md"
DATA = ROOT / "docs" / "cross-validation.json"
CACHE = ROOT / "build" / "cross_validate" / "fits.json"
COMMAND = "python tools/cross_validate.py"
FINETUNE_SET = "finetune"       # LoRA/QLoRA runs (tools/import_runs.py): no fit uses them; predicted, reported apart
NOT_IN_FIT = ("band.py", "estimate.py", "search.py", "sweep.py", "advice.py", "compare.py", "probe.py",
              "priors.py")      # priors.py: the prior of a device WITHOUT runs; no fit starts from it
COPIED_KEYS = ("gemm", "gemm_half_dim", "attention", "memory", "scale_up", "scale_out", "low_precision_gemm",
               "flash2_attention", "layer_overhead_s", "host_per_kernel_s")


@functools.cache
def code_digest() -> str:
    """A digest of what a fit depends on besides its runs and start: the model's code (not the command line,
    the reports or the band) and the framework table."""
    h = hashlib.sha256()
    pkg = ROOT / "trainest"
    files = [p for p in sorted(pkg.rglob("*.py")) if p.parent.name not in ("cli", "report")
             and p.relative_to(pkg).as_posix() not in NOT_IN_FIT] + [ROOT / "specs" / "frameworks.json"]
    for path in files:
        if path.is_file():
            h.update(path.relative_to(ROOT).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()


class FitCache:
    """Fitted efficiency values by the digest of (code, start hardware, fitted scenarios and measurements)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.entries: dict[str, dict[str, float]] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.entries = {}
        self.used: set[str] = set()
        self.misses = 0

    def fit(self, cases: list[Case], start: catalog.Hardware, unpulled: tuple[str, ...],
            prior_weight: float = PRIOR_WEIGHT) -> catalog.Hardware:
        h = hashlib.sha256(code_digest().encode())
        h.update(repr(start).encode())
        h.update(repr(unpulled).encode())
        if prior_weight != PRIOR_WEIGHT:
            h.update(repr(prior_weight).encode())
        for c in sorted(cases, key=lambda c: c.id):
            h.update(repr((c.id, replace(c.scenario, hardware=start), c.measurement)).encode())
        key = h.hexdigest()
        if key not in self.entries:
            self.misses += 1
            result = fit_efficiency(cases, start, prior_weight=prior_weight, unpulled=unpulled)
            self.entries[key] = {p.name: p.value for p in result.parameters}
            self.used.add(key)
            self.save()             # after every fit: an interrupted run keeps what it fitted
        self.used.add(key)
        return catalog.with_efficiency(start, **self.entries[key])

    def save(self, prune: bool = False) -> None:
        """Write the cache; `prune`: keep only the fits this run used."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        kept = {k: v for k, v in self.entries.items() if k in self.used or not prune}
        self.path.write_text(json.dumps(kept, indent=0, sort_keys=True), encoding="utf-8")


class LeftOut:
    """Every hardware's efficiencies fitted without one source at a time (module docstring)."""

    def __init__(self, by_hw: dict[str, list[Case]], kernel_fit: dict[str, list[Case]], cache: FitCache) -> None:
        self.by_hw, self.kernel_fit, self.cache = by_hw, kernel_fit, cache
        self.memo: dict[tuple[str, str], tuple[catalog.Hardware, str, bool]] = {}
        self.prior_memo: dict[tuple[str, str], catalog.Hardware] = {}

    def hardware(self, hw_name: str) -> catalog.Hardware:
        return self.by_hw[hw_name][0].scenario.hardware if hw_name in self.by_hw else catalog.load_hardware(hw_name)

    def without(self, hw_name: str, source: str) -> tuple[catalog.Hardware, str, bool]:
        """(`hw_name` fitted without `source`, how in words, whether fitted on runs of other sources)."""
        key = (hw_name, source)
        if key not in self.memo:
            self.memo[key] = self._without(hw_name, source)
        return self.memo[key]

    def _fit_runs(self, hw_name: str, source: str) -> list[Case]:
        return [c for c in self.by_hw.get(hw_name, []) if c.source != source and in_fit_set(c.id)]

    def _parent(self, hw_name: str, source: str) -> str | None:
        """The die whose fit without `source` `hw_name` starts from or inherits: the first along its SIBLINGS
        chain with MIN_FIT_RUNS fit runs of other sources (fit_defaults.fit_parent, on the runs left)."""
        seen, sib = {hw_name}, SIBLINGS.get(hw_name)
        while sib is not None and sib not in seen:
            if len(self._fit_runs(sib, source)) >= MIN_FIT_RUNS:
                return sib
            seen.add(sib)
            sib = SIBLINGS.get(sib)
        return None

    def _without(self, hw_name: str, source: str) -> tuple[catalog.Hardware, str, bool]:
        hw = self.hardware(hw_name)
        fit = self._fit_runs(hw_name, source)
        parent = self._parent(hw_name, source)
        parent_hw = self.without(parent, source)[0] if parent else None
        if len(fit) >= MIN_FIT_RUNS:
            # as the shipped fit: the small-kernel steps' fit split joins their hardware's fit (never a public
            # source; their host times are the framework's, fit_defaults.framework_host_outcome, and the
            # hardware keeps its prior host times), and the fit starts from the same die's fit where a
            # sibling has one (fit_defaults.sibling_start)
            extra = self.kernel_fit.get(hw_name, [])
            prior = prior_hardware(hw)
            start = sibling_start(prior, parent_hw) if parent_hw else prior
            unpulled = KERNEL_UNPULLED if extra else ()
            fitted_hw = self.cache.fit(fit + extra, start, unpulled)
            if extra:
                fitted_hw = catalog.with_efficiency(fitted_hw, host_per_kernel_s=prior.efficiency.host_per_kernel_s,
                                                    host_per_micro_batch_s=prior.efficiency.host_per_micro_batch_s)
            return (fitted_hw, f"fitted on {len(fit)} runs of other sources"
                    + (f" + {len(extra)} vTrain fit rows" if extra else ""), True)
        if fits_few_runs(len(fit), parent is not None):   # as the shipped fit (fit_defaults.few_run_outcome)
            fitted_hw = self.cache.fit(fit, self.no_run_prior(hw, source), (), prior_weight=few_run_weight(len(fit)))
            return (fitted_hw, f"fitted on {len(fit)} runs of other sources (< {MIN_FIT_RUNS}: pulled "
                               f"×{MIN_FIT_RUNS / len(fit):.3g} harder to the prior of a device without runs)", True)
        if parent_hw:
            e = parent_hw.efficiency
            return (catalog.with_efficiency(hw, **{k: getattr(e, k) for k in COPIED_KEYS}),
                    f"{parent}'s fit ({self.without(parent, source)[1]})", True)
        return (self.no_run_prior(hw, source),
                f"prior of a device without runs ({len(fit)} fit runs of other sources < {MIN_FIT_RUNS})", False)

    def no_run_prior(self, hw: catalog.Hardware, source: str) -> catalog.Hardware:
        key = (hw.name, source)
        if key not in self.prior_memo:
            self.prior_memo[key] = self._no_run_prior(hw, source)
        return self.prior_memo[key]

    def _no_run_prior(self, hw: catalog.Hardware, source: str) -> catalog.Hardware:
        """The prior `hw` would ship with had it no runs (`fit_priors.unseen_prior_hardware`), from the devices
        fitted on MIN_FIT_RUNS runs of sources other than `source`, each fitted without `source`: no efficiency
        the left-out source's runs set (on this device or another) enters its prediction, as none of a user's
        runs enters the prior of a device of theirs trainest has no runs of."""
        import fit_priors
        own = {name: fit_priors.own_block(self.without(name, source)[0], len(runs)) for name in self.by_hw
               if name != hw.name and len(runs := self._fit_runs(name, source)) >= MIN_FIT_RUNS}
        return fit_priors.unseen_prior_hardware(hw, own)


def moe_prior(hw: catalog.Hardware) -> catalog.Hardware:
    """`hw` with the catalog's MoE efficiency priors (no MoE run left to fit them on)."""
    return catalog.with_efficiency(hw, grouped_gemm=catalog.DEFAULT_GROUPED_GEMM, all_to_all=catalog.DEFAULT_ALL_TO_ALL)


def residual_record(c: Case, left: RunResult, shipped: RunResult, how: str, fitted: bool,
                    prior: RunResult) -> dict:
    """One run's row of docs/cross-validation.json; `prior`: the run predicted with the prior its device would
    take had it no runs, without the run's source (`LeftOut.no_run_prior`: tools/fit_bands.py's prior pool)."""
    s = c.scenario
    return {"id": c.id, "source": c.source, "set": c.run_set, "hardware": s.hardware.name,
            "family": FAMILY_OF.get(s.hardware.name, ""), "framework": s.framework, "arch": B.arch_of(s.model),
            "scale": B.scale_bucket(s.devices, s.devices_per_node), "devices": s.devices,
            "finetune": s.finetune.method, "offload": s.offload,
            "measured_step_s": round(left.measured_step_s, 6), "left_out_step_s": round(left.predicted_step_s, 6),
            "shipped_step_s": round(shipped.predicted_step_s, 6), "left_out_error_pct": round(left.error_pct, 3),
            "shipped_error_pct": round(shipped.error_pct, 3), "hardware_fitted_without_source": fitted, "how": how,
            "prior_step_s": round(prior.predicted_step_s, 6)}


def run_all() -> tuple[list[dict], list[RunResult], list[RunResult], dict[str, list[str]], dict]:
    """(per-run records, left-out results, shipped results, per source the efficiencies used, cache stats)."""
    kernel_fit: dict[str, list[Case]] = {}
    for c in load_runs(run_set=KERNEL_SET).cases:
        if in_fit_set(c.id):
            kernel_fit.setdefault(c.scenario.hardware.name, []).append(c)
    cases = load_runs(run_set=PUBLIC_SET).cases     # the public runs fit; the fine-tuning runs are only predicted
    finetune = load_runs(run_set=FINETUNE_SET).cases
    by_hw: dict[str, list[Case]] = {}
    for c in cases:
        if c.scenario.model.moe is None and c.scenario.model.hybrid is None:     # the dense runs fit the efficiencies
            by_hw.setdefault(c.scenario.hardware.name, []).append(c)
    cache = FitCache(CACHE)
    left = LeftOut(by_hw, kernel_fit, cache)
    records, loso, shipped = [], [], []
    how_of: dict[str, list[str]] = {}
    # Megatron-Core's host scale is fitted on the MoE runs (moe_report.fitted_host_scale): a run of a source
    # those come from is predicted, left out, at its prior
    host_sources = {c.source for c in cases if c.scenario.model.moe is not None and c.scenario.model.hybrid is None}
    shipped_scale = FRAMEWORKS[MEGATRON_CORE_FRAMEWORKS[0]].host_scale
    for c in sorted(cases + finetune, key=lambda c: (c.source, c.scenario.hardware.name, c.id)):
        hw, how, fitted = left.without(c.scenario.hardware.name, c.source)
        prior_hw = left.no_run_prior(c.scenario.hardware, c.source)
        if c.scenario.model.moe is not None:
            hw, prior_hw = moe_prior(hw), moe_prior(prior_hw)
        set_megatron_core_host_scale(HOST_SCALE_BOUNDS[0] if c.source in host_sources else shipped_scale)
        r_left, r_prior = compare(c, hw), compare(c, prior_hw)
        set_megatron_core_host_scale(shipped_scale)
        r_ship = compare(c)
        loso.append(r_left)
        shipped.append(r_ship)
        records.append(residual_record(c, r_left, r_ship, how, fitted, r_prior))
        text = f"{c.scenario.hardware.name}: {how}"
        if text not in how_of.setdefault(c.source, []):
            how_of[c.source].append(text)
    cache.save(prune=True)
    return records, loso, shipped, how_of, {"fits": len(cache.used), "refitted": cache.misses}


def _row(label: str, recs: list[dict], extra: str = "") -> str:
    n = len(recs)
    ship = statistics.fmean(abs(r["shipped_error_pct"]) for r in recs)
    left = statistics.fmean(abs(r["left_out_error_pct"]) for r in recs)
    mean = statistics.fmean((r["left_out_step_s"] / r["measured_step_s"] - 1.0) * 100.0 for r in recs)
    return f"| {label} | {n} | {ship:.1f} | {left:.1f} | {mean:+.1f} |{extra}"


def table(records: list[dict], key: str, title: str, how_of: dict[str, list[str]] | None = None) -> str:
    """A markdown table of the left-out and shipped MAPE per value of `key`, and the whole."""
    head = (f"| {title} | runs | MAPE %, shipped fit | MAPE %, source left out | mean step error %, left out "
            f"(− too fast) |")
    sep = "|---|---:|---:|---:|---:|"
    if how_of is not None:
        head, sep = head + " efficiencies used when left out |", sep + "---|"
    lines = [head, sep]
    for value in sorted({r[key] or "—" for r in records}):
        recs = [r for r in records if (r[key] or "—") == value]
        lines.append(_row(value, recs, f" {'; '.join(how_of.get(value, []))} |" if how_of is not None else ""))
    lines.append(_row("**all**", records, " |" if how_of is not None else ""))
    return "\n".join(lines)


def _kind(rec: dict) -> str:
    """dense | moe | hybrid for a public run; fine-tuning runs apart (`finetune-<arch>`)."""
    return rec["arch"] if rec["set"] == PUBLIC_SET else f"{rec['set']}-{rec['arch']}"


def summary(records: list[dict], digits: int | None = 2) -> dict:
    """The headline figures: left-out and shipped MAPE of the dense runs and of each architecture (`digits`
    None: unrounded, for text that rounds them once, as the tables do: 7.854 is 7.9 there, not 7.85 -> 7.8)."""
    out = {}
    for arch in sorted({_kind(r) for r in records}):
        recs = [r for r in records if _kind(r) == arch]
        left_out = statistics.fmean(abs(r["left_out_error_pct"]) for r in recs)
        shipped = statistics.fmean(abs(r["shipped_error_pct"]) for r in recs)
        out[arch] = {"runs": len(recs),
                     "left_out_mape_pct": left_out if digits is None else round(left_out, digits),
                     "shipped_mape_pct": shipped if digits is None else round(shipped, digits)}
    return out


def headline_markdown(records: list[dict]) -> str:
    """The headline section (docs/validation.md leads with it): dense MAPE one source left out, per hardware,
    framework and hardware family."""
    dense = [r for r in records if _kind(r) == "dense"]
    s = summary(records, digits=None)
    return "\n\n".join([
        f"**One source left out, dense runs: MAPE {s['dense']['left_out_mape_pct']:.1f} % over "
        f"{s['dense']['runs']} runs** (the error to expect on a cluster, framework or recipe trainest has not "
        f"seen; the shipped fit's error on the same runs: {s['dense']['shipped_mape_pct']:.1f} %). "
        + "; ".join(f"{arch}: {v['left_out_mape_pct']:.1f} % over {v['runs']} runs (shipped "
                    f"{v['shipped_mape_pct']:.1f} %)" for arch, v in s.items() if arch != "dense")
        + ". Per run: docs/cross-validation.json; method: [cross-validation.md](cross-validation.md).",
        "By hardware (dense):", table(dense, "hardware", "hardware"),
        "By framework (dense; the framework the scenario states):", table(dense, "framework", "framework"),
        "By hardware family (dense):", table(dense, "family", "family")])


def render(records: list[dict], how_of: dict[str, list[str]]) -> str:
    dense = [r for r in records if _kind(r) == "dense"]
    other = [r for r in records if _kind(r) != "dense"]
    return f"""# Cross-validation: one source left out

_Generated by `{COMMAND}` — do not edit by hand; re-run it after changing the model, the runs or
the fit._

{__doc__.split(chr(10), 2)[2].strip()}

## Headline

{headline_markdown(records)}

## By source (dense)

{table(dense, "source", "source", how_of)}

## Mixture-of-experts, hybrid and fine-tuning runs, left out

{table(other, "source", "source") if other else "None."}

Reading it: the "left out" column is the error to expect on runs from a framework, recipe or cluster
that trainest has not seen on that hardware; the gap to the "shipped" column is what the fit learns
from a source's own runs. Where a hardware has runs of only one source (the TPUs with MaxText, the
power-capped H100s with torchtitan, GB200/GB300 with Megatron-Bridge), leaving it out falls back to a
sibling's fit or the prior of a device without runs: that row measures the priors, not the model's structure.
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with docs/cross-validation.json; write nothing")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    records, _, _, how_of, stats = run_all()
    data = {"generated_by": COMMAND, "summary": summary(records), "runs": records}
    s = data["summary"]
    print(f"dense: {s['dense']['runs']} runs, shipped {s['dense']['shipped_mape_pct']:.2f} %, left out "
          f"{s['dense']['left_out_mape_pct']:.2f} %; {stats['fits']} fits ({stats['refitted']} not cached); "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    if args.check:
        current = json.loads(DATA.read_text(encoding="utf-8")) if DATA.exists() else {}
        if current.get("summary") != data["summary"] or len(current.get("runs", [])) != len(records):
            print(f"{DATA} is stale: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    DATA.write_text(json.dumps(data, indent=0) + "\n", encoding="utf-8")
    DOC.write_text(render(records, how_of), encoding="utf-8")
    print(f"wrote {DOC.relative_to(ROOT)}, {DATA.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
