"""One training job on several hardware entries, each at its best plan (`trainest compare`).

A job is the plan search's (trainest.search: model, global batch, sequence, precision, tokens...);
the hardware is the one thing that changes. For each entry the best plan is found one of three ways:

- a device count N: the plan search at N;
- `deadline_s` over a device range: the fewest devices whose best plan trains the tokens in time
  (`search.smallest_devices`, also with `budget_usd` when both are given);
- `budget_usd` alone over a device range: the fastest plan whose run costs at most the budget (every
  count of the range searched; the one with the shortest run that stays within budget).

Entries are ranked by the objective of the whole run (time, cost or energy); an entry without the
objective's input (no price, no power) ranks after those with it. Hardware that cannot run the job is
kept, with the reason: an execution model trainest does not model (`Hardware.unsupported_reason`), a
precision it lacks, a job that fits at no count, no price under a budget. Nothing is dropped silently.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainest import search as S
from trainest.catalog import hardware_names, is_bundled_hardware, load_hardware
from trainest.errors import SpecError
from trainest.estimate import Estimate
from trainest.knobs import CLI
from trainest.record import replace
from trainest.scenario import DEFAULT_HARDWARE, DEFAULT_PRECISION

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Entry:
    """One hardware entry: its best plan, or why it has none."""

    hardware: str
    display_name: str
    calibrated: bool
    estimate: Estimate | None          # the best plan's estimate (None: the job cannot run here)
    reason: str                        # why it cannot run ("" when it can)
    result: S.SearchResult | None = None
    devices_search: S.DeviceSearch | None = None
    tried: tuple[tuple[int, float | None, float | None], ...] = ()   # budget mode: (N, run time, cost)
    file: str | None = None            # the user's hardware file as given (a profile, a probe); None: catalog
    efficiency_basis: str = ""         # Efficiency.basis: fitted, inherited, profile, median prior, prior

    @property
    def can_run(self) -> bool:
        return self.estimate is not None

    @property
    def reference(self) -> str:
        """What `--hardware` takes to reproduce this entry: the file as given, else the catalog name."""
        return self.file or self.hardware

    @property
    def label(self) -> str:
        """The entry in a table: the catalog name, or a user file's name and what it is (two profiles of
        one device, or a profile beside its catalog entry, must not look the same)."""
        if self.file is None:
            return self.hardware
        what = "calibrated profile" if self.efficiency_basis == "profile" else "file"
        return f"{Path(self.file).name} ({what} of {self.hardware})"


@dataclass(frozen=True)
class Comparison:
    entries: tuple[Entry, ...]         # ranked by the objective; entries that cannot run last
    job: Any                           # the job (a Scenario) as validated on the default hardware
    objective: str
    devices: str                       # the --devices text (a count or a range)
    deadline_s: float | None
    budget_usd: float | None
    devices_default: bool = False      # no --devices given: the default count (shown as such)


def objective_value(e: Estimate, objective: str) -> float | None:
    """The whole run's time [s], cost [USD] or energy [kWh] (None when its input is unknown)."""
    tr = e.training
    return {"time": tr.time_s, "cost": tr.cost_usd, "energy": tr.energy_kwh}[objective]


def hardware_list(names: Iterable[str] | None, all_hardware: bool) -> list[str]:
    """The entries to compare: `names` (each may be a comma list; catalog names or YAML paths), or the
    whole catalog; duplicates removed, order kept."""
    if all_hardware:
        if names:
            raise SpecError("give --hardware or --all-hardware, not both")
        return hardware_names()
    out: list[str] = []
    for text in names or []:
        out += [n.strip() for n in str(text).split(",") if n.strip()]
    out = list(dict.fromkeys(out))
    if len(out) < 2:
        raise SpecError("compare needs at least two hardware entries: --hardware h100-sxm,b200 (or repeat "
                        "--hardware), or --all-hardware")
    for name in out:                # a name that is no hardware is the user's typo, not an entry that cannot run
        try:
            load_hardware(name)
        except SpecError as exc:
            raise SpecError(f"--hardware: {exc}") from None
    return out


def parse_prices(text: str | None, names: list[str]) -> dict[str, float]:
    """USD per device-hour by hardware name from `--price-per-hour`: one number for every entry (2.5), or
    name=price pairs, comma-separated (h100-sxm=2.5,tpu-v5p=4.2; entries not named keep their catalog price);
    {} when not given."""
    if text is None:
        return {}
    from trainest import fields as F
    out: dict[str, float] = {}
    for part in (p.strip() for p in str(text).split(",")):
        name, sep, value = part.rpartition("=")
        name = name.strip()
        if not part or (sep and not name):
            raise SpecError(f"--price-per-hour {text!r}: expected USD per device-hour (2.5) or name=price pairs "
                            f"(h100-sxm=2.5,tpu-v5p=4.2)")
        if sep and name not in names:
            raise SpecError(f"--price-per-hour: {name!r} is not among the hardware compared ({', '.join(names)})")
        try:
            price = F.number(float(value), "--price-per-hour", allow_zero=True, maximum=1e6)
        except ValueError:
            raise SpecError(f"--price-per-hour {value!r}: not a number of USD per device-hour") from None
        if not sep:
            if len(str(text).split(",")) > 1:
                raise SpecError(f"--price-per-hour {text!r}: one number for every entry, or name=price pairs, "
                                f"not both")
            return dict.fromkeys(names, price)
        out[name] = price
    return out


def _fastest_within_budget(base: Any, counts: list[int], space: S.SearchSpace,
                           budget_usd: float) -> tuple[S.SearchResult | None, tuple, str]:
    """(the search at the count whose best plan is fastest within budget, every count tried, why none)."""
    best: S.SearchResult | None = None
    tried: list[tuple[int, float | None, float | None]] = []
    for n in counts:
        try:
            res = S.search(base, n, space, top=1)
        except SpecError:
            tried.append((n, None, None))
            continue
        tr = res.plans[0].training
        tried.append((n, tr.time_s, tr.cost_usd))
        if tr.cost_usd is not None and tr.cost_usd <= budget_usd and \
                (best is None or tr.time_s < best.plans[0].training.time_s):
            best = res
    why = ""
    if best is None:
        costs: list[float] = [c for _, _, c in tried if c is not None]
        why = (f"no plan fits at any of {counts[0]}..{counts[-1]} devices" if not costs else
               f"every count costs more than ${budget_usd:,.0f} (the cheapest ${min(costs):,.0f})")
    return best, tuple(tried), why


def best_plan(mapping: dict, name: str, devices: str, space: S.SearchSpace, *, deadline_s: float | None,
              budget_usd: float | None, device_counts: str = "pow2", shape: dict | None = None,
              price_usd_per_hour: float | None = None) -> Entry:
    """The entry of hardware `name` for the job `mapping` (a scenario mapping without hardware), at
    `price_usd_per_hour` (None: the catalog's)."""
    if price_usd_per_hour is not None:
        mapping = {**mapping, "price_per_hour": price_usd_per_hour}
    try:
        hw = load_hardware(name)
    except SpecError as exc:
        return Entry(name, name, False, None, str(exc))
    entry = Entry(hw.name, hw.display_name, bool(hw.efficiency.fitted), None, "",
                  file=None if is_bundled_hardware(hw) else name, efficiency_basis=hw.efficiency.basis)
    if hw.unsupported_reason:
        return replace(entry, reason=f"not modelled: {hw.unsupported_reason}")
    try:
        lo, hi = S.parse_devices(devices)
        base = S.job_scenario({**mapping, "hardware": name}, f"hardware {hw.name}", default_batch_devices=hi,
                              shape=shape)
        if deadline_s is None and budget_usd is None:
            if lo != hi:
                raise SpecError(f"--devices {devices}: a range needs --deadline or --budget")
            res = S.search(base, lo, space, top=1)
            return replace(entry, estimate=res.plans[0], result=res)
        counts = S.device_counts(lo, hi, device_counts, base.devices_per_node, S.device_step(devices))
        if budget_usd is not None and base.price_usd_per_hour is None:
            return replace(entry, reason=f"no price for {hw.name} ({hw.price_unknown}): a --budget cannot be judged; "
                                         f"give --price-per-hour {hw.name}=USD")
        if deadline_s is None and budget_usd is not None:
            found, tried, why = _fastest_within_budget(base, counts, space, budget_usd)
            if found is None:
                return replace(entry, reason=why, tried=tried)
            return replace(entry, estimate=found.plans[0], result=found, tried=tried)
        ds = S.smallest_devices(base, counts, space, deadline_s=deadline_s, budget_usd=budget_usd, top=1)
        if ds.gate_failed:
            return replace(entry, reason=ds.gate_failed, devices_search=ds)
        return replace(entry, estimate=ds.result.plans[0], result=ds.result, devices_search=ds)
    except SpecError as exc:
        return replace(entry, reason=str(exc))


def rank(entries: Iterable[Entry], objective: str) -> tuple[Entry, ...]:
    """Entries that can run by the objective (those lacking its input after them), then the rest."""
    def key(e: Entry) -> tuple[int, float, str]:
        if e.estimate is None:
            return (2, math.inf, e.label)
        value = objective_value(e.estimate, objective)
        return (0, value, e.label) if value is not None else (1, e.estimate.training.time_s, e.label)
    return tuple(sorted(entries, key=key))


ANY_PLAN = S.SearchSpace()


def compare(mapping: dict, names: list[str], devices: str, space: S.SearchSpace = ANY_PLAN, *,
            objective: str = "time", deadline_s: float | None = None, budget_usd: float | None = None,
            device_counts: str = "pow2", progress: Progress | None = None,
            shape: dict | None = None, prices: dict[str, float] | None = None) -> Comparison:
    """Every hardware of `names` at its best plan for the job `mapping`, ranked by `objective`, each at its
    price of `prices` (USD per device-hour by name; the catalog's where not given)."""
    if objective not in ("time", "cost", "energy"):
        raise SpecError(f"--objective {objective!r} is not one of time, cost, energy")
    # errors of the job itself (model, batch, tokens, --devices) are the user's, not every hardware's: checked
    # once, on the default hardware at its native precision
    lo, hi = S.parse_devices(devices)
    if lo != hi and deadline_s is None and budget_usd is None:
        raise SpecError(f"--devices {devices}: a range needs --deadline or --budget")
    job = S.job_scenario({**mapping, "hardware": DEFAULT_HARDWARE, "precision": DEFAULT_PRECISION}, CLI,
                         default_batch_devices=hi, shape=shape)
    job = replace(job, precision=mapping.get("precision") or DEFAULT_PRECISION)
    entries = []
    for i, name in enumerate(names):
        entries.append(best_plan(mapping, name, devices, space, deadline_s=deadline_s, budget_usd=budget_usd,
                                 device_counts=device_counts, shape=shape,
                                 price_usd_per_hour=(prices or {}).get(name)))
        if progress is not None:
            progress(i + 1, len(names))
    return Comparison(rank(entries, objective), job, objective, devices, deadline_s, budget_usd)
