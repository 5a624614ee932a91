"""The error band of an estimate: how far measured step times of runs like this one fell from trainest's
predictions.

A run's residual is r = measured step time / predicted step time. For a group of runs, the band is a
split-conformal interval of r (Vovk et al. 2005; Lei et al. 2018): with the group's n residuals sorted,
r_(1) ≤ … ≤ r_(n), and coverage 1 − α,

    low  = r_(k_lo),  k_lo = ⌊(n + 1) · α/2⌋
    high = r_(k_hi),  k_hi = ⌈(n + 1) · (1 − α/2)⌉          (needs n ≥ 2/α − 1: 9 runs for 80 %)

and a new run exchangeable with the group falls in [low, high] with probability (k_hi − k_lo)/(n + 1) ≥
1 − α: the band's `coverage`. Few runs give a wider band (the extreme order statistics) and a
coverage above 80 %, so a thin group says so in its own numbers. An estimate's band is
[t · low, t · high], and the run's days and cost scale with it.

Which runs: the residuals are computed by `tools/fit_bands.py` (run by `tools/fit_defaults.py` after a
refit) and shipped as data in `specs/bands.json`, never written by hand. Two pools:

- `left-out`: every validated run predicted with its hardware's efficiencies fitted WITHOUT the run's
  source (`tools/cross_validate.py`, docs/cross-validation.json), where other sources' runs calibrate
  that hardware: the error of a calibrated estimate for a cluster, framework or recipe trainest has not
  seen, which a user's run is;
- `prior`: every public run predicted with the prior its device would ship with had it no runs of its
  own (the median of the other fitted devices of its group, else the importer's generic prior): the
  error of an estimate on hardware trainest has not calibrated (`efficiency.fitted: false`, a probed
  or hand-written file). It is the wider of the two, measured, not a guessed widening factor.

Groups (the regime): the hardware, the scale (one node, up to 256 devices, more) and the architecture
(dense or MoE). The runs of one source share their error (their framework, recipe and cluster), so a
band built from runs of other sources holds for fewer of a new source's runs than the run-level interval
claims: every band is widened (in log space about its centre) by the factor that makes bands built
without a source cover 80 % of that source's runs, pooled over the sources, for calibrated and
uncalibrated hardware apart (`unseen_source_widening`, measured by tools/fit_bands.py: leave-one-source-out).
A framework no validated run used widens the band by the factor that makes bands built without a
framework's runs cover 80 % of that framework's runs (`framework_widening`, measured by
tools/fit_bands.py: leave-one-framework-out). An adapter fine-tuning scenario (LoRA, QLoRA) widens the band
by the factor that makes bands built without a fine-tuning source cover 80 % of that source's fine-tuning
runs, pooled over the sources that have them (`finetune_widening`, measured by tools/fit_bands.py:
leave-one-source-out over the fine-tuning sources). The groups are mostly pre-training runs, and a
fine-tuning source's error is not theirs: its frozen base, adapter kernels and recipe (often tuned past
what the scenario states) put its runs off-centre and wider. A scenario that leaves a setting of
UNSTATED_SETTINGS (the micro-batch) to its default widens the band, each end by the factor that leaves at most
10 % of a left-out source's runs whose records leave it unstated beyond it (`unstated_widening`, measured by
tools/fit_bands.py: leave-one-source-out over the sources with such runs; the default micro-batch is a floor, so
such runs are faster than predicted more often than slower, and the low end widens more).
An estimate on fewer devices than any validated run (specs/bands.json `small_scale_widening.below_devices`: one
device today) moves each end out by its own multiplier (`below_validated_scale`, `stretched_ends`), the ones
that hold COVERAGE of the measured runs on so few devices (trainest's own steps on a lent device, set
trainest-ground-truth: in sample, as the only such source; tools/fit_bands.py: `small_scale_widening`).
A band comes from the most specific group with at least MIN_GROUP_RUNS runs, in the order of LEVELS:
hardware and scale, hardware, hardware family (same architecture generation) and scale, family,
scale, every run; a broader group is named in the band's note. An uncalibrated hardware whose family
has no run at all reaches the broad levels, whose prior bands hold other families' runs only; those
bands are widened (in log space about their centre) by the factor that makes them cover 80 % of a
left-out family's runs (`widened`, measured by tools/fit_bands.py: leave-one-family-out). An architecture no
validated run has gets the broadest prior band, its low and high ends widened apart (`widened_ends`), each by
the factor that leaves at most 10 % of a left-out architecture's runs beyond it (`architecture_widening`).

Standard library only, one small JSON file read once: this module is on the start-up path of every
`trainest estimate`.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable
from typing import Any

from trainest.record import NamedTuple, replace

BANDS_FILE = "bands.json"
BANDS_FORMAT = 1
COVERAGE = 0.80                 # the band's nominal coverage (10th to 90th percentile of the residuals)
MIN_GROUP_RUNS = 20             # a group needs this many runs; fewer: the next, broader level
SCALE_BUCKETS = (("node", "one node"), ("multi-node", "2 nodes to 256 devices"), ("large", "over 256 devices"))
LARGE_DEVICES = 256
CALIBRATED = "left-out"        # the pool of a calibrated hardware's estimates
POOLS = {CALIBRATED: "runs of sources left out of the fit, calibrated hardware",
         "prior": "runs with uncalibrated (prior) efficiencies"}
UNSEEN = "prior-unseen"         # the prior pool's broad groups, widened for a hardware family without runs
BROAD_LEVELS = ("scale", "all")
ANY = "*"
# Settings that move the step time whose value a scenario may leave to a default (micro-batch 1, the framework's
# recompute mode): an estimate that took the default estimates a run its user may not run, and a validated run
# whose record did not state them (its importer assumed them: runs key `assumed`) was predicted the same way.
UNSTATED_SETTINGS = ("micro_batch",)
# (level name, which of hardware / family / scale the group key keeps); architecture is always kept
LEVELS = (("hardware+scale", (True, False, True)), ("hardware", (True, False, False)),
          ("family+scale", (False, True, True)), ("family", (False, True, False)),
          ("scale", (False, False, True)), ("all", (False, False, False)))


class Residual(NamedTuple):
    """One validated run's residual and its regime."""

    run_id: str
    hardware: str
    family: str                 # hardware family ("" when the hardware belongs to none)
    scale: str                  # a key of SCALE_BUCKETS
    arch: str                   # dense | moe | hybrid
    ratio: float                # measured / predicted step time
    framework: str = ""         # the framework the run's scenario states
    finetune: str = "full"      # the scenario's fine-tuning method: full (incl. pre-training) | lora | qlora
    unstated: tuple[str, ...] = ()   # of UNSTATED_SETTINGS, those the run's scenario did not state (`unstated_of`)
    span: tuple[float, float] = (1.0, 1.0)   # (fastest, slowest) step over the unstated settings' values / step


class Band(NamedTuple):
    """The interval of measured/predicted step time for runs like the estimated one."""

    low_ratio: float            # measured / predicted at the band's low end
    high_ratio: float
    coverage: float             # expected share of such runs inside the band
    runs: int                   # residuals in the group
    level: str                  # a name of LEVELS
    group: str                  # the group in words
    pool: str                   # a key of POOLS
    calibrated: bool            # the hardware's efficiencies are fitted on measured runs
    note: str                   # where the band comes from, and why it is wider, in one line
    unknowns: tuple[str, ...] = ()   # what the scenario has that no validated run has (the band is wide for it)


def scale_bucket(devices: int, devices_per_node: int) -> str:
    """"node" (N ≤ devices per node), "multi-node" (N ≤ 256) or "large"."""
    if devices <= devices_per_node:
        return "node"
    return "multi-node" if devices <= LARGE_DEVICES else "large"


def conformal_interval(ratios: Iterable[float], coverage: float = COVERAGE) -> tuple[float, float, float] | None:
    """(low, high, expected coverage) of the split-conformal interval of `ratios` (module docstring),
    or None when there are too few for `coverage` (n < 2/α − 1)."""
    xs = sorted(ratios)
    n, alpha = len(xs), 1.0 - coverage
    k_lo = math.floor((n + 1) * alpha / 2 + 1e-9)
    k_hi = math.ceil((n + 1) * (1 - alpha / 2) - 1e-9)
    if k_lo < 1 or k_hi > n:
        return None
    return xs[k_lo - 1], xs[k_hi - 1], (k_hi - k_lo) / (n + 1)


def group_key(hardware: str, family: str, scale: str, arch: str, keep: tuple[bool, bool, bool]) -> str:
    """"hardware|family|scale|arch" with the parts a level does not keep as ANY."""
    hw, fam, sc = keep
    return "|".join((hardware if hw else ANY, (family or "?") if fam else ANY, scale if sc else ANY, arch))


def build_groups(residuals: Iterable[Residual], coverage: float = COVERAGE) -> dict[str, list[float]]:
    """group key -> [low, high, expected coverage, runs] of every group (at every level) with enough
    runs for a band (MIN_GROUP_RUNS)."""
    members: dict[str, list[float]] = {}
    for r in residuals:
        for _, keep in LEVELS:
            if keep[1] and not r.family:
                continue
            members.setdefault(group_key(r.hardware, r.family, r.scale, r.arch, keep), []).append(r.ratio)
    out: dict[str, list[float]] = {}
    for key, ratios in sorted(members.items()):
        interval = conformal_interval(ratios, coverage) if len(ratios) >= MIN_GROUP_RUNS else None
        if interval is not None:
            low, high = holding_the_estimate(interval[0], interval[1])
            out[key] = [round(low, 4), round(high, 4), round(interval[2], 4), len(ratios)]
    return out


def holding_the_estimate(low: float, high: float) -> tuple[float, float]:
    """(low, high) stretched to hold the ratio 1, the estimate itself. A group whose left-out runs all
    erred one way (e.g. every run of one source predicted too fast when that source was left out) would
    otherwise print a band that excludes its own estimate. The shipped fit includes that source, so its
    one-sided left-out error says how far a new source may fall, not which way: the band stretches to
    the estimate rather than moving it. Stretching only adds coverage, so the claimed coverage stays a
    lower bound."""
    return min(low, 1.0), max(high, 1.0)


def widened(entry: list[float], factor: float) -> list[float]:
    """A group's [low, high, coverage, runs] with low and high moved away from the centre c = √(low·high)
    by `factor` in log space: c·(low/c)^factor, c·(high/c)^factor (the coverage is set by the caller)."""
    low, high, cov, runs = entry
    c = math.sqrt(low * high)
    return [round(c * (low / c) ** factor, 4), round(c * (high / c) ** factor, 4), cov, runs]


def widened_ends(entry: list[float], low_factor: float, high_factor: float) -> list[float]:
    """`widened` with each end moved by its own factor: c·(low/c)^low_factor, c·(high/c)^high_factor. The two
    tails of an error are sized apart when the runs that size them err more one way than the other (an
    architecture no validated run has is predicted too fast more often than too slow)."""
    low = widened(entry, low_factor)[0]
    return [low, *widened(entry, high_factor)[1:]]


def stretched_ends(entry: list[float], low_move: float, high_move: float) -> list[float]:
    """[low·low_move, high·high_move]: each end of a band moved by a ratio (low_move ≤ 1, high_move ≥ 1), a fixed
    log-margin added to each side whatever the band's width. `widened` scales the width instead, right for an error
    that grows with the group's own spread; a margin is right for an error that adds to it (a one-device step's
    host and launch time, which the group's runs did not have)."""
    return [entry[0] * low_move, entry[1] * high_move]


def _ends(factor: float | tuple[float, float]) -> tuple[float, float]:
    """(low-end, high-end) factors of one factor or of a pair."""
    return (factor[0], factor[1]) if isinstance(factor, tuple) else (factor, factor)


def _ends_words(ends: tuple[float, float]) -> str:
    """"×f", or "×lo below, ×hi above" when the ends widen apart."""
    return f"×{ends[0]:g}" if ends[0] == ends[1] else f"×{ends[0]:g} below, ×{ends[1]:g} above"


def _group_words(level: str, hardware: str, family: str, scale: str, arch: str) -> str:
    keep = dict(LEVELS)[level]
    parts = [hardware if keep[0] else "", family if keep[1] else "",
             dict(SCALE_BUCKETS)[scale] if keep[2] else "", arch]
    if level == "all":
        parts[0] = "all hardware"
    return ", ".join(p for p in parts if p)


def lookup(groups: dict[str, dict[str, list[float]]], *, hardware: str, family: str, scale: str, arch: str,
           calibrated: bool, framework_factor: float | None = None, framework: str = "",
           source_factor: float = 1.0, arch_factor: float | tuple[float, float] = 1.0, finetune_factor: float = 1.0,
           finetune: str = "full", unstated_factor: float | tuple[float, float] = 1.0,
           unstated: tuple[str, ...] = (), span: tuple[float, float] = (1.0, 1.0),
           span_words: str = "") -> Band:
    """The band of the most specific group with enough runs (LEVELS), from the pool the hardware's
    calibration selects; without any, the broadest prior band of any architecture. `source_factor`: every
    estimate is for a source (cluster, recipe) no validated run came from, and the runs of one source
    share their error, so the band widens by this factor (measured leave-one-source-out). `framework_factor`:
    the scenario's framework has no validated run, so the band widens by this factor too (`widened`).
    `arch_factor`: no validated run has the scenario's architecture, so the fallback band widens by this
    factor (measured with each architecture left out: tools/fit_bands.py, `architecture_widening`), or by a
    (low-end, high-end) pair, each end by its own (`widened_ends`).
    `finetune_factor`: the scenario fine-tunes with adapters (`finetune`: lora, qlora), so the band widens by
    this factor (measured with each fine-tuning source left out: `finetune_widening`). `unstated_factor`: the
    scenario left `unstated` (of UNSTATED_SETTINGS) to their defaults, so the band widens by this factor (measured
    with each source of runs whose records left them unstated left out: `unstated_widening`). `span`: (fastest,
    slowest) predicted step over the values the unstated settings could take, relative to the estimate's step
    (`estimate.unstated_span`): the band's ends stretch by it (`spanned`), `span_words` saying which values."""
    kw: dict[str, Any] = dict(hardware=hardware, family=family, scale=scale, arch=arch, calibrated=calibrated,
                              framework_factor=framework_factor, framework=framework, source_factor=source_factor,
                              finetune_factor=finetune_factor, finetune=finetune, unstated_factor=unstated_factor,
                              unstated=unstated)
    band = _from_pool(groups, CALIBRATED if calibrated else "prior", **kw)
    if band is None and calibrated:
        # no run of this architecture on calibrated hardware had its source left out (MoE and hybrid runs are
        # mostly on hardware only their own source calibrates): the error of such runs with prior efficiencies
        band = _from_pool(groups, "prior", **kw,
                          extra=(f"no {arch} run on calibrated hardware with its source left out: the error of "
                                 f"{arch} runs predicted with prior efficiencies",))
    band = band if band is not None else _fallback(groups, hardware, arch, calibrated, arch_factor)
    return spanned(band, span, span_words)


def spanned(band: Band, span: tuple[float, float], words: str = "") -> Band:
    """`band` with its low end times span[0] (≤ 1) and its high end times span[1] (≥ 1): the step a run would
    take at another value of a setting the scenario left unstated (a run measured at that value errs by the
    band's ratio from the step predicted at that value, which is span × the estimate's step). A span that
    moves neither end by 0.5 % or more (it would read ×1.00–×1.00) leaves the band as it is."""
    lo, hi = min(span[0], 1.0), max(span[1], 1.0)
    if (round(lo, 2), round(hi, 2)) == (1.0, 1.0) or math.isnan(band.low_ratio):
        return band
    return replace(band, low_ratio=round(band.low_ratio * lo, 4), high_ratio=round(band.high_ratio * hi, 4),
                   note=f"{band.note}; spans {words or 'the unstated settings'}: ×{lo:.2f}–×{hi:.2f} of the step",
                   unknowns=(*band.unknowns, f"{words or 'an unstated setting'} would move the step ×{lo:.2f}–"
                                             f"×{hi:.2f}"))


def _from_pool(groups: dict[str, dict[str, list[float]]], pool: str, *, hardware: str, family: str, scale: str,
               arch: str, calibrated: bool, framework_factor: float | None, framework: str, source_factor: float,
               finetune_factor: float = 1.0, finetune: str = "full",
               unstated_factor: float | tuple[float, float] = 1.0, unstated: tuple[str, ...] = (),
               extra: tuple[str, ...] = ()) -> Band | None:
    """`lookup` in one pool: the band of the most specific group of LEVELS with enough runs, or None."""
    for i, (level, keep) in enumerate(LEVELS):
        if keep[1] and not family:
            continue
        unseen = not calibrated and level in BROAD_LEVELS and UNSEEN in groups
        entry = groups.get(UNSEEN if unseen else pool, {}).get(group_key(hardware, family, scale, arch, keep))
        if entry is None:
            continue
        low, high, cov, runs = entry
        words = _group_words(level, hardware, family, scale, arch)
        why = [*extra] + ([] if i == 0 else [f"fewer than {MIN_GROUP_RUNS} validated runs of {hardware} at this "
                                               f"scale: from {words}"])
        unknowns = []
        if not calibrated:
            why.append(f"{hardware} is not calibrated: the error of uncalibrated (prior) efficiencies")
            unknowns.append(f"{hardware}'s efficiencies are not fitted on measured runs")
        if unseen:
            why.append(f"no run of its family: widened to cover {cov:.0%} of a left-out family's runs")
            unknowns.append("no run of its hardware family")
        if source_factor > 1.0:
            low, high = widened([low, high, cov, runs], source_factor)[:2]
        if framework_factor is not None and framework_factor > 1.0:
            low, high = widened([low, high, cov, runs], framework_factor)[:2]
            why.append(f"no validated run of the framework {framework or '?'}: widened ×{framework_factor:g} to "
                       f"cover {COVERAGE:.0%} of a left-out framework's runs")
            unknowns.append(f"no validated run of the framework {framework or '?'}")
        if finetune_factor > 1.0 and finetune != "full":
            low, high = widened([low, high, cov, runs], finetune_factor)[:2]
            why.append(f"{finetune} fine-tuning: widened ×{finetune_factor:g} to cover {COVERAGE:.0%} of a left-out "
                       "fine-tuning source's runs")
            unknowns.append(f"{finetune} fine-tuning, whose sources' errors the mostly pre-training runs do not show")
        ends = _ends(unstated_factor)
        if max(ends) > 1.0 and unstated:
            low, high = widened_ends([low, high, cov, runs], *ends)[:2]
            named = " and ".join(k.replace("_", "-") for k in unstated)
            why.append(f"{named} not given: widened {_ends_words(ends)} to cover {COVERAGE:.0%} of the runs of a "
                       f"left-out source that did not state it")
            unknowns.append(f"{named} not given, so the step is estimated at its default")
        return Band(low, high, cov, int(runs), level, words, pool, calibrated,
                    "; ".join([f"{int(runs)} {POOLS[pool]} ({words})", *why]), tuple(unknowns))
    return None


def _fallback(groups: dict[str, dict[str, list[float]]], hardware: str, arch: str, calibrated: bool,
              factor: float | tuple[float, float] = 1.0) -> Band:
    """No measured run of this architecture: the broadest prior band of any, widened by `factor` (what a
    left-out architecture's runs need; a (low-end, high-end) pair: each end by its own, `widened_ends`; 1: not
    measured, and the band is then a lower bound on the error)."""
    low_factor, high_factor = _ends(factor)
    candidates = [(k, v) for k, v in groups.get("prior", {}).items() if k.startswith(f"{ANY}|{ANY}|{ANY}|")]
    if not candidates:
        return Band(math.nan, math.nan, 0.0, 0, "none", "no runs", "prior", calibrated,
                    "no error band: specs/bands.json holds no runs (run python tools/fit_bands.py)")
    key, (low, high, cov, runs) = max(candidates, key=lambda kv: kv[1][1] - kv[1][0])
    other = key.rsplit("|", 1)[1]
    words = (f"no measured {arch} run validates this estimate: the band of uncalibrated {other} estimates "
             f"({int(runs)} runs)")
    if max(low_factor, high_factor) > 1.0:
        low, high = holding_the_estimate(*widened_ends([low, high, cov, runs], low_factor, high_factor)[:2])
        words += (f", widened {_ends_words((low_factor, high_factor))} to cover {COVERAGE:.0%} of the runs of an "
                  "architecture no validated run had (each architecture left out in turn)")
    else:
        words += ", likely too narrow"
    return Band(low, high, cov, int(runs), "none", f"all hardware, {other}", "prior", calibrated, words,
                (f"no measured {arch} run",))


@functools.cache
def load_bands() -> dict[str, Any]:
    """The shipped band document (specs/bands.json); empty when missing or of another format."""
    from trainest.catalog import specs_dir
    try:
        doc = json.loads((specs_dir() / BANDS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) and doc.get("format") == BANDS_FORMAT else {}


def arch_of(model: Any) -> str:
    """The band's architecture of a model: hybrid (Mamba-2 blocks), moe, or dense."""
    return "hybrid" if model.hybrid is not None else "moe" if model.moe is not None else "dense"


def unstated_of(derived: Iterable[str], assumed: Iterable[str] = ()) -> tuple[str, ...]:
    """The UNSTATED_SETTINGS among a scenario's defaulted keys (`derived`) and those its importer assumed."""
    given = set(derived) | set(assumed)
    return tuple(k for k in UNSTATED_SETTINGS if k in given)


def _pair(value: Any) -> float | tuple[float, float]:
    """A widening of specs/bands.json (`unseen_architecture_widening`, `unstated_widening`): one factor, or
    [low-end, high-end]."""
    if isinstance(value, list) and len(value) == 2:
        return float(value[0]), float(value[1])
    return float(value)


def band_for(hardware: Any, devices: int, devices_per_node: int, arch: str, framework: str = "",
             finetune: str = "full", unstated: tuple[str, ...] = (), span: tuple[float, float] = (1.0, 1.0),
             span_words: str = "", doc: dict[str, Any] | None = None) -> Band:
    """The shipped band of an estimate on `hardware` (a catalog.Hardware) at this scale and architecture
    (`arch_of`), under `framework` (widened when no validated run used it; "" : not judged), fine-tuning
    with `finetune` (full, lora, qlora: widened for adapter fine-tuning), with `unstated` (of UNSTATED_SETTINGS:
    left to their defaults, widened for them; `span`, `span_words`: what their other values would do, `lookup`),
    on fewer devices than any validated run (widened for it: `below_validated_scale`). `doc`: the band document
    (default: the shipped specs/bands.json; tools/fit_bands.py passes the one it is building)."""
    doc = load_bands() if doc is None else doc
    seen = doc.get("frameworks_validated")
    factor = doc.get("unseen_framework_widening") if framework and seen is not None and framework not in seen else None
    band = lookup(doc.get("groups", {}), hardware=hardware.name, family=doc.get("families", {}).get(hardware.name, ""),
                  scale=scale_bucket(devices, devices_per_node), arch=arch,
                  calibrated=bool(hardware.efficiency.fitted), framework_factor=factor, framework=framework,
                  source_factor=float(doc.get("unseen_source_widening", {}).get(
                      CALIBRATED if hardware.efficiency.fitted else "prior", 1.0)),
                  arch_factor=_pair(doc.get("unseen_architecture_widening", 1.0)),
                  finetune_factor=float(doc.get("finetune_widening", 1.0)) if finetune != "full" else 1.0,
                  finetune=finetune, unstated_factor=_pair(doc.get("unstated_widening", 1.0)), unstated=unstated,
                  span=span, span_words=span_words)
    return below_validated_scale(band, devices, doc.get("small_scale_widening"))


def below_validated_scale(band: Band, devices: int, widening: dict[str, Any] | None) -> Band:
    """`band` widened for an estimate on fewer devices than any validated run (`widening`, specs/bands.json
    `small_scale_widening`: `below_devices`, the smallest device count of a validated run; `factor`, the
    (low-end, high-end) multipliers that hold COVERAGE of the measured runs on fewer devices, `stretched_ends`;
    `runs`, how many sized them; written by tools/fit_bands.py). The validated runs are all multi-device, and a
    one-device step (no collective to hide behind, the host and the launches on the path of a small model, a
    single-device script rather than a tuned framework) errs more than their bands say: trainest's own
    single-device steps say how much. Unchanged at or above `below_devices`, or without a measured factor."""
    if not widening or devices >= int(widening.get("below_devices", 0)) or math.isnan(band.low_ratio):
        return band
    low_move, high_move = _ends(_pair(widening.get("factor", 1.0)))
    if low_move >= 1.0 and high_move <= 1.0:
        return band
    low, high = holding_the_estimate(*stretched_ends([band.low_ratio, band.high_ratio], low_move, high_move))
    n, below = int(widening.get("runs", 0)), int(widening["below_devices"])
    why = (f"{devices} device{'s' if devices != 1 else ''}, fewer than any validated run ({below}): low end "
           f"×{low_move:g}, high end ×{high_move:g}, to hold {COVERAGE:.0%} of {n} measured runs on fewer than "
           f"{below} devices")
    return replace(band, low_ratio=round(low, 4), high_ratio=round(high, 4), note=f"{band.note}; {why}",
                   unknowns=(*band.unknowns, f"no validated run on fewer than {below} devices"))


def plain_words(band: Band) -> str:
    """One plain sentence when the band is wide because little is known about the scenario ("" otherwise)."""
    if not band.unknowns:
        return ""
    return "The band is wide because little is known here: " + "; ".join(band.unknowns) + "."
