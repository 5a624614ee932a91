"""What a device-hour costs: a cloud's on-demand price as the catalog read it, or a workstation's purchase
price spread over its amortisation period; and how old the figure is (docs/model.md §12, 'Cost').

A workstation (DGX Spark, a Mac) is bought, not rented: its cost per hour is the purchase price over the hours
of its amortisation period, the machine busy every hour of it (a machine used half the time costs twice as much
per used hour: give --price-per-hour). A price read more than `STALE_AFTER_DAYS` before today, or without a
date, is flagged where it is used. Standard library only.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from trainest.record import NamedTuple

if TYPE_CHECKING:              # datetime is imported where a date is read (start-up time)
    import datetime as _dt

HOURS_PER_YEAR = 8766.0            # 365.25 days × 24 h
DEFAULT_AMORTISATION_YEARS = 3.0   # a workstation's usual depreciation period (an assumption, stated where used)
STALE_AFTER_DAYS = 365             # a price older than this is flagged
NO_PRICE_REASON = ("no dated, citable on-demand price was found for the shared reference "
                   "(its hardware.md, 'Prices')")

# patterns as text: compiled on first use through re's cache, not at import (start-up time, issue 36)
_ISO_DATE = r"\b((?:19|20)\d\d)-(\d\d)(?:-(\d\d))?\b"


class Purchase(NamedTuple):
    """A device that is bought: its price, when and where it was read, and the years it is written off over."""

    usd: float
    source: str
    amortisation_years: float = DEFAULT_AMORTISATION_YEARS


def amortised_usd_per_hour(purchase_usd: float, amortisation_years: float) -> float:
    """Purchase price spread over every hour of the amortisation period [USD/h]:
    `price / (years · 8766 h)`; a machine busy every hour of it."""
    return purchase_usd / (amortisation_years * HOURS_PER_YEAR)


def first_date(text: str) -> _dt.date | None:
    """The first ISO date in `text` (YYYY-MM-DD, or YYYY-MM read as the month's first day); None if none."""
    match = re.search(_ISO_DATE, text or "")
    if match is None:
        return None
    import datetime as _dt
    year, month, day = int(match.group(1)), int(match.group(2)), int(match.group(3) or 1)
    try:
        return _dt.date(year, month, day)
    except ValueError:
        return None


def price_age_days(source: str, today: _dt.date | None = None) -> int | None:
    """Days between the date in a price's source and `today` (default: the clock's); None without a date."""
    import datetime as _dt
    read = first_date(source)
    if read is None:
        return None
    return ((today or _dt.date.today()) - read).days


def staleness(source: str, today: _dt.date | None = None) -> str:
    """'' for a price read within STALE_AFTER_DAYS, else why it is flagged (undated, or its age)."""
    age = price_age_days(source, today)
    if age is None:
        return "its date was not recorded"
    if age > STALE_AFTER_DAYS:
        return f"read {first_date(source)}, {age / 365.25:.1f} years ago"
    return ""
