"""trainest.units: named constants and the human-number parsers (`7B`, `1.5T`, `80GiB`, `30d`)."""

from __future__ import annotations

import math

import pytest

from trainest import units
from trainest.errors import SpecError
from trainest.units import parse_bytes, parse_count, parse_duration_s, parse_length


# ------------------------------------------------------------------------------------------ constants

def test_decimal_and_binary_prefixes_differ_by_the_expected_ratio():
    assert units.GB == 1e9
    assert units.GiB == 1024 * units.MiB == 1024**2 * units.KiB == 2**30
    assert units.GiB / units.GB == pytest.approx(1.073741824)
    assert units.TiB == 1024 * units.GiB


def test_time_and_energy_constants():
    assert units.SECONDS_PER_DAY == 24 * units.SECONDS_PER_HOUR
    assert units.JOULES_PER_KWH == 1000 * units.SECONDS_PER_HOUR   # 1 kWh = 1000 W × 3600 s


# ------------------------------------------------------------------------------------------- counts

@pytest.mark.parametrize("text, expected", [
    ("7B", 7e9), ("7b", 7e9), ("1.5T", 1.5e12), ("300B", 300e9), ("300G", 300e9), ("10K", 1e4),
    ("2M", 2e6), ("1P", 1e15), ("2e12", 2e12), ("2000000", 2e6), (" 7 B ", 7e9), (".5T", 0.5e12),
    (7, 7.0), (1.5e12, 1.5e12),
])
def test_parse_count_decimal_suffixes(text, expected):
    assert parse_count(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("text", ["7X", "abc", "", "B", "7BB", "1.5 trillion", "-1B", "0", "0T", True,
                                  float("inf"), float("nan"), -3])
def test_parse_count_rejects_non_numbers_and_non_positive(text):
    with pytest.raises(SpecError):
        parse_count(text, "tokens")


def test_parse_count_error_names_the_value_and_what_it_is():
    with pytest.raises(SpecError, match=r"tokens '7X'.*300B"):
        parse_count("7X", "tokens")


# -------------------------------------------------------------------------------------------- bytes

@pytest.mark.parametrize("text, expected", [
    ("80GiB", 80 * 2**30), ("80gib", 80 * 2**30), ("80GB", 80e9), ("80 GB", 80e9), ("1TiB", 2**40),
    ("512MiB", 512 * 2**20), ("1.5TB", 1.5e12), ("4KiB", 4096), ("8.5e10", 8.5e10), ("100B", 100.0),
    ("100", 100.0), (1024, 1024.0),
])
def test_parse_bytes_decimal_and_binary(text, expected):
    assert parse_bytes(text) == pytest.approx(expected, rel=1e-15)


def test_gib_and_gb_are_not_confused():
    """The classic unit drift: 80 GiB is 7.4% more than 80 GB."""
    assert parse_bytes("80GiB") / parse_bytes("80GB") == pytest.approx(2**30 / 1e9)


@pytest.mark.parametrize("text", ["80 parsecs", "80XB", "-5GB", "0GB", "GB", True, math.inf])
def test_parse_bytes_errors(text):
    with pytest.raises(SpecError, match="size"):
        parse_bytes(text)


# ---------------------------------------------------------------------------------------- durations

@pytest.mark.parametrize("text, expected", [
    ("30d", 30 * 86400.0), ("12h", 12 * 3600.0), ("2w", 14 * 86400.0), ("90m", 5400.0), ("90min", 5400.0),
    ("10s", 10.0), ("3600", 3600.0), (3600, 3600.0), ("1.5D", 1.5 * 86400.0),
])
def test_parse_duration_s(text, expected):
    assert parse_duration_s(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("text", ["3 fortnights", "-1d", "0", "0h", "d", False])
def test_parse_duration_errors(text):
    with pytest.raises(SpecError, match="duration"):
        parse_duration_s(text)


def test_spec_error_is_a_value_error():
    """One error type, catchable as ValueError by library users."""
    with pytest.raises(ValueError):
        parse_count("nope")


@pytest.mark.parametrize("text, expected", [("8192", 8192), ("8k", 8192), ("32K", 32768), ("4M", 4 * 2**20),
                                            ("0.5M", 2**19), (".5M", 2**19), ("1.5k", 1536), (8192, 8192)])
def test_parse_length_binary_suffixes_and_exact_decimal_mantissas(text, expected):
    # the estimate prints its default batch as "0.5M tokens": the same text must be accepted back
    assert parse_length(text) == expected


@pytest.mark.parametrize("text", ["0.3k", "1.k5", "-1", "8x", "", "1e3"])
def test_parse_length_refuses_what_is_not_a_whole_count(text):
    with pytest.raises(SpecError, match="not a whole number"):
        parse_length(text, "--global-batch-tokens")


def test_fmt_amount_keeps_small_whole_run_amounts_readable():
    """A fine-tune on one machine: 0.48 kg CO2, 0.75 kWh, 4.4 device-hours, not `0`, `1`, `4`."""
    from trainest.units import fmt_amount, fmt_co2
    assert [fmt_amount(x) for x in (0, 0.0004, 0.48, 4.37, 99.4, 1234.5)] == \
        ["0", "<0.001", "0.48", "4.4", "99", "1,234"]
    assert fmt_co2(0.48) == "0.48 kg CO2" and fmt_co2(2500) == "2.5 t CO2"
