"""The CI gates of an estimate (`--max-days`, `--max-cost`, `--require-fit`): limits read and checked once, and
the ones a result breaks (the command then exits 3). Standard library only at import."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from trainest.errors import SpecError
from trainest.record import NamedTuple

if TYPE_CHECKING:
    from trainest.estimate import Estimate


class Gates(NamedTuple):
    """The limits an estimate must keep (None: no such gate)."""

    max_days: float | None = None      # the whole run's training time [days]
    max_cost: float | None = None      # its cost [USD]
    require_fit: bool = False          # the layout must fit in device memory


def gates_of(max_days: Any = None, max_cost: Any = None, require_fit: bool = False) -> Gates:
    """The gates as given: --max-days a bare number of days or a duration as --deadline takes it (30d, 12h, 2w),
    --max-cost a count as --tokens takes it (250k, 1.5M); a SpecError for anything else."""
    from trainest.units import SECONDS_PER_DAY, parse_count, parse_duration_s
    days, cost = max_days, max_cost
    if days is not None:
        text = str(days).strip()
        try:
            days = float(text)              # a bare number: days
        except ValueError:
            days = None
            with contextlib.suppress(SpecError):
                days = parse_duration_s(text, "--max-days") / SECONDS_PER_DAY
        if days is None or not 0 < days < float("inf"):
            raise SpecError(f"--max-days {text!r} must be a duration greater than 0: days (30), or 30d, 12h, 2w")
    if cost is not None:
        try:
            cost = parse_count(str(cost).strip(), "--max-cost")
        except SpecError:
            raise SpecError(f"--max-cost {str(cost)!r} must be an amount of USD greater than 0, e.g. 250000, 250k "
                            f"or 1.5M") from None
    return Gates(max_days=days, max_cost=cost, require_fit=bool(require_fit))


def gate(flag: str, limit: float | None, value: float | None, passed: bool, message: str) -> dict[str, Any]:
    """One CI gate as the JSON documents name it: its flag, limit, the value checked, whether it passed, why not."""
    return {"gate": flag, "limit": limit, "value": value, "passed": passed, "message": "" if passed else message}


def gate_results(gates: Gates, result: Estimate) -> list[dict[str, Any]]:
    """Every CI gate given (--max-days [days], --max-cost [USD], --require-fit [bytes per device]), checked."""
    tr, me = result.training, result.memory
    out = []
    if gates.max_days is not None:
        out.append(gate("--max-days", gates.max_days, tr.time_days, tr.time_days <= gates.max_days,
                        f"training takes {tr.time_days:.2f} days > --max-days {gates.max_days:g}"))
    if gates.max_cost is not None:
        out.append(gate("--max-cost", gates.max_cost, tr.cost_usd,
                        tr.cost_usd is not None and tr.cost_usd <= gates.max_cost,
                        "--max-cost given but no price is known; give --price-per-hour" if tr.cost_usd is None else
                        f"training costs ${tr.cost_usd:,.0f} > --max-cost ${gates.max_cost:,.0f}"))
    if gates.require_fit:
        out.append(gate("--require-fit", me.capacity_bytes, me.per_device_bytes, bool(me.fits),
                        f"needs {me.per_device_bytes / 2**30:.1f} GiB per device > "
                        f"{me.capacity_bytes / 2**30:.1f} GiB (--require-fit)"))
    return out


def broken_gates(gates: Gates, result: Estimate) -> list[str]:
    """The gates `result` breaks, each in words."""
    return [g["message"] for g in gate_results(gates, result) if not g["passed"]]
