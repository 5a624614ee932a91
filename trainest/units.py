"""Named unit constants and parsers for human-friendly numbers (`7B`, `1.5T`, `80GiB`, `30d`).

Inside trainest every quantity is SI (seconds, bytes, FLOPs, bytes/s); the constants here are the
only place where human units are converted.
"""

from __future__ import annotations

import math
import re

from trainest.errors import SpecError, show

KILO = 1e3
MEGA = 1e6
GIGA = 1e9
TERA = 1e12
PETA = 1e15

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40

BITS_PER_BYTE = 8
MICROSECOND = 1e-6
NANOSECOND = 1e-9
MILLISECOND = 1e-3
SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0
JOULES_PER_KWH = 3.6e6
GRAMS_PER_KG = 1000.0

_COUNT_SUFFIX = {"": 1.0, "K": KILO, "M": MEGA, "B": GIGA, "G": GIGA, "T": TERA, "P": PETA}
_BYTES_SUFFIX = {
    "": 1.0, "B": 1.0,
    "KB": KB, "MB": MB, "GB": GB, "TB": TB,
    "KIB": KiB, "MIB": MiB, "GIB": GiB, "TIB": TiB,
}
_DURATION_SUFFIX = {"S": 1.0, "M": 60.0, "MIN": 60.0, "H": 3600.0, "D": SECONDS_PER_DAY,
                    "W": 7 * SECONDS_PER_DAY}
_NUMBER = r"([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"


def _finite_positive(number: float, text: object, what: str) -> float:
    if not math.isfinite(number) or number <= 0:
        raise SpecError(f"{what} {show(text)} must be a finite number greater than 0")
    return number


def _from_number(value: int | float, what: str) -> float:
    """A YAML/CLI number as a float; an int too large for a float is rejected, not an OverflowError."""
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    return _finite_positive(number, value, what)


def parse_count(text: str | int | float, what: str = "count", examples: str = "300B, 1.5T or 2e12") -> float:
    """Parse a count such as `300B`, `1.5T`, `7e9` or `2000000` into a float; `examples` are named in the
    error (tokens by default).

    Suffixes are decimal: K=1e3, M=1e6, B (or G)=1e9, T=1e12, P=1e15.
    """
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise SpecError(f"{what} {show(text)} is not a number; use e.g. {examples}")
    if isinstance(text, (int, float)):
        return _from_number(text, what)
    match = re.fullmatch(_NUMBER + r"\s*([A-Za-z]?)", text.strip())
    if not match or match.group(2).upper() not in _COUNT_SUFFIX:
        raise SpecError(f"{what} {show(text)} is not a number; use e.g. {examples}")
    return _finite_positive(float(match.group(1)) * _COUNT_SUFFIX[match.group(2).upper()], text, what)


_POWER_OF_TWO_SUFFIX = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def parse_length(text: str | int | float, what: str = "length") -> int:
    """A whole count of tokens written as context lengths and batch sizes are quoted: `8192`, `8k`
    (= 8192), `32K`, `4M` (= 4·2^20 = 4,194,304). K, M, G are binary here, unlike `parse_count`'s
    decimal K, M, B, T (training tokens: `1.5T`)."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise SpecError(f"{what} {show(text)} is not a whole number; use e.g. 8192, 8k or 4M")
    if isinstance(text, float):
        if not text.is_integer():
            raise SpecError(f"{what} {show(text)} must be a whole number")
        text = int(text)
    if isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]?)\s*", text)
    if not match or match.group(2).upper() not in _POWER_OF_TWO_SUFFIX:
        raise SpecError(f"{what} {show(text)} is not a whole number; use e.g. 8192, 8k (= 8192) or 4M (= 4·2^20)")
    # a decimal mantissa is exact (0.5M = 2^19): Fraction, not float, so 1.5k is 1536 and 0.3k is refused
    from fractions import Fraction  # (here, not at the top: it imports decimal, start-up time)
    value = Fraction(match.group(1)) * _POWER_OF_TWO_SUFFIX[match.group(2).upper()]
    if value.denominator != 1:
        raise SpecError(f"{what} {show(text)} is {float(value):g}, not a whole number; use e.g. 8192, 8k (= 8192), "
                        f"0.5M (= 2^19) or 4M (= 4·2^20)")
    return int(value)


def parse_bytes(text: str | int | float, what: str = "size") -> float:
    """Parse a size such as `80GiB`, `80GB` or `8.5e10` into bytes (GB = 1e9, GiB = 2**30)."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise SpecError(f"{what} {show(text)} is not a size; use e.g. 80GB or 80GiB")
    if isinstance(text, (int, float)):
        return _from_number(text, what)
    match = re.fullmatch(_NUMBER + r"\s*([A-Za-z]*)", text.strip())
    if not match or match.group(2).upper() not in _BYTES_SUFFIX:
        raise SpecError(f"{what} {show(text)} is not a size; use e.g. 80GB or 80GiB")
    return _finite_positive(float(match.group(1)) * _BYTES_SUFFIX[match.group(2).upper()], text, what)


def parse_duration_s(text: str | int | float, what: str = "duration") -> float:
    """Parse a duration such as `30d`, `12h`, `2w` or `3600` (seconds) into seconds."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise SpecError(f"{what} {show(text)} is not a duration; use e.g. 30d, 12h or 3600")
    if isinstance(text, (int, float)):
        return _from_number(text, what)
    match = re.fullmatch(_NUMBER + r"\s*([A-Za-z]*)", text.strip())
    suffix = match.group(2).upper() if match else None
    if not match or (suffix and suffix not in _DURATION_SUFFIX):
        raise SpecError(f"{what} {show(text)} is not a duration; use e.g. 30d, 12h, 2w or 3600 (seconds)")
    factor = _DURATION_SUFFIX[suffix] if suffix else 1.0
    return _finite_positive(float(match.group(1)) * factor, text, what)


# ------------------------------------------------------------------ formatting for people (decimal SI, GiB)

def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "n/a"
    if s >= 2 * 86400:
        return f"{s / 86400:.1f} days"
    if s >= 2 * 3600:
        return f"{s / 3600:.1f} h"
    if s >= 120:
        return f"{s / 60:.1f} min"
    if s >= 1:
        return f"{s:.3f} s"
    return f"{s * 1e3:.2f} ms"


def fmt_si(x: float | None, unit: str = "") -> str:
    """Decimal prefixes (FLOP/s, tokens/s, bandwidth)."""
    if x is None:
        return "n/a"
    for factor, prefix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= factor:
            return f"{x / factor:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}".strip()


def fmt_gib(b: float) -> str:
    """Memory capacity in GiB (binary), labelled."""
    return f"{b / GiB:.1f} GiB"


def plural(n: int | float, word: str, words: str | None = None) -> str:
    """`1 device`, `8 devices` (n with thousands separators)."""
    return f"{n:,} {word if n == 1 else (words or word + 's')}"


def fmt_money(x: float | None) -> str:
    """USD: whole dollars from $100 up, cents below (a small fine-tune's $1.98 is not `$2`)."""
    if x is None:
        return "n/a (no price: use --price-per-hour)"
    return f"${x:,.0f}" if abs(x) >= 100 else f"${x:,.2f}"


def fmt_amount(x: float) -> str:
    """A whole-run amount (kWh, kg, device-hours, MWh): thousands separators from 100 up, else two
    significant digits, so that a small fine-tune's 0.48 kg is not `0` (below 0.001: `<0.001`)."""
    if x >= 100:
        return f"{x:,.0f}"
    if x == 0:
        return "0"
    return "<0.001" if x < 0.001 else f"{x:.2g}"


def fmt_co2(kg: float | None) -> str:
    """CO2 mass: tonnes (t) from one tonne up, else kg (fmt_amount: 0.48 kg, not 0)."""
    if kg is None:
        return "n/a"
    return f"{kg / 1000:,.1f} t CO2" if kg >= 1000 else f"{fmt_amount(kg)} kg CO2"
