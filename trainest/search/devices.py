"""Device counts (`--devices LO..HI`): candidate counts, each searched, and the one chosen by the rule the
output states (`device_rule`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainest.choices import (
    DEVICE_COUNTS,
)
from trainest.errors import SpecError
from trainest.scenario import (
    Scenario,
)
from trainest.search.evaluate import Progress
from trainest.search.rank import SearchResult, search
from trainest.search.space import EVERY_PLAN, SearchSpace
from trainest.units import fmt_seconds, fmt_si, parse_count

DEVICE_COUNT_MODES = DEVICE_COUNTS

MAX_DEVICE_COUNTS = 4096   # a device range may hold at most this many candidate counts



def parse_devices(text: str) -> tuple[int, int]:
    """`1024` -> (1024, 1024); `256..8192` and `256..8192:256` -> (256, 8192). Counts may use K (1K = 1000);
    the step of a range is `device_step`'s."""
    lo_text, sep, hi_text = str(text).strip().partition("..")
    if sep and ":" in hi_text:
        hi_text = hi_text.partition(":")[0]
        device_step(text)           # checked here too: every caller validates the whole text
    bounds = []
    for part in ((lo_text, hi_text) if sep else (lo_text,)):
        value = parse_count(part.strip(), f"--devices {text!r}:" if sep else "--devices",
                            "64, 8..1024 (--device-counts picks the counts) or 8..1024:8 (every 8th)")
        if value != int(value) or value > 10**7:
            raise SpecError(f"--devices {text!r}: {part.strip()!r} must be a whole number of devices up to 10,000,000")
        bounds.append(int(value))
    lo, hi = bounds[0], bounds[-1]
    if lo > hi:
        raise SpecError(f"--devices {text!r}: the range is empty ({lo} > {hi})")
    return lo, hi


def device_step(text: str) -> int | None:
    """The step of a range `LO..HI:STEP` (every STEP-th count from LO), None without one."""
    _, sep, hi_text = str(text).strip().partition("..")
    if not sep or ":" not in hi_text:
        return None
    step_text = hi_text.partition(":")[2].strip()
    if not step_text.isdigit() or int(step_text) < 1:
        raise SpecError(f"--devices {text!r}: the step {step_text!r} must be a whole number of devices of at least 1, "
                        f"e.g. 256..8192:256")
    return int(step_text)


def device_counts(lo: int, hi: int, mode: str, devices_per_node: int, step: int | None = None) -> list[int]:
    """Candidate device counts in [lo, hi]: every `step`-th from lo when a step is given, else powers of two
    ("pow2") or multiples of the node size ("node")."""
    if lo == hi:
        return [lo]
    if step is not None:
        counts = list(range(lo, hi + 1, step))
        what = f"count from {lo} by {step}"
    elif mode == "pow2":
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
                        f"narrow the range, give a larger step (LO..HI:STEP) or use --device-counts pow2")
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


def smallest_devices(base: Scenario, counts: list[int], space: SearchSpace = EVERY_PLAN, *,
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
