"""Prices: on-demand with a date, a workstation's amortised purchase, a stale one flagged, and compare's
--price-per-hour per hardware (issue 36)."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from helpers import call_entry

from trainest.catalog import hardware_names, load_hardware
from trainest.prices import HOURS_PER_YEAR, amortised_usd_per_hour, staleness


def test_amortised_price_is_the_purchase_over_every_hour_of_the_period():
    assert amortised_usd_per_hour(8766.0, 1.0) == pytest.approx(1.0)
    assert amortised_usd_per_hour(3999.0, 3.0) == pytest.approx(3999.0 / (3 * HOURS_PER_YEAR))
    # twice the period, half the hourly cost
    assert amortised_usd_per_hour(3999.0, 6.0) == pytest.approx(amortised_usd_per_hour(3999.0, 3.0) / 2)


def test_a_price_older_than_a_year_or_undated_is_flagged():
    today = dt.date(2026, 12, 3)
    assert staleness("Lambda on-demand, 2026-05-07, survey", today) == ""
    assert "years ago" in staleness("a list, 2025-06-01", today)
    assert "not recorded" in staleness("Modal, date not recorded", today)


@pytest.mark.parametrize("name", hardware_names())
def test_every_catalog_entry_has_a_price_or_says_why_not(name):
    hw = load_hardware(name)
    if hw.price_usd_per_hour is None:
        assert hw.price_unknown, f"{name}: no price and no reason"
        return
    assert hw.price_basis in ("on-demand", "amortised purchase")
    assert hw.price_text                                   # where it comes from
    if hw.purchase is None:
        assert hw.price_source


def test_the_dgx_spark_costs_its_amortised_purchase():
    hw = load_hardware("dgx-spark")
    assert hw.purchase is not None and hw.purchase.usd == 3999
    assert hw.price_usd_per_hour == pytest.approx(amortised_usd_per_hour(3999, hw.purchase.amortisation_years))


def test_estimate_says_why_there_is_no_price(capsys):
    code, out, err = call_entry(["estimate", "--hardware", "tpu-v5p", "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["training"]["cost_usd"] is None
    assert any("no price for tpu-v5p" in w and "give --price-per-hour" in w for w in doc["warnings"])


def _compare(capsys, *extra):
    code, out, err = call_entry(["compare", "--hardware", "h100-sxm,tpu-v5p", "--model", "llama3.2-3b", "--json",
                                 *extra], capsys)
    return code, (json.loads(out) if code == 0 else None), err


def test_compare_takes_a_price_per_hardware(capsys):
    code, doc, _ = _compare(capsys, "--price-per-hour", "h100-sxm=2.5,tpu-v5p=4.2")
    assert code == 0
    by = {e["hardware"]: e for e in doc["compare"]}
    for name, price in (("h100-sxm", 2.5), ("tpu-v5p", 4.2)):
        tr = by[name]["training"]
        assert tr["cost_usd"] == pytest.approx(tr["device_hours"] * price)
        # the reproduce line carries the price given
        args = by[name]["plan"]["estimate_args"]
        assert args[args.index("--price-per-hour") + 1] == f"{price:g}"


def test_compare_price_for_one_entry_keeps_the_others_catalog_price(capsys):
    code, doc, _ = _compare(capsys, "--price-per-hour", "tpu-v5p=4.2")
    by = {e["hardware"]: e for e in doc["compare"]}
    h100 = by["h100-sxm"]["training"]
    assert h100["cost_usd"] == pytest.approx(h100["device_hours"] * load_hardware("h100-sxm").price_usd_per_hour)
    assert "--price-per-hour" not in by["h100-sxm"]["plan"]["estimate_args"]


def test_compare_one_price_for_every_entry(capsys):
    code, doc, _ = _compare(capsys, "--price-per-hour", "3")
    for e in doc["compare"]:
        assert e["training"]["cost_usd"] == pytest.approx(e["training"]["device_hours"] * 3)


@pytest.mark.parametrize("text", ["b200=2", "h100-sxm=x", "2,tpu-v5p=1", "=3", "h100-sxm=-1"])
def test_compare_refuses_a_bad_price(capsys, text):
    code, doc, err = _compare(capsys, "--price-per-hour", text)
    assert code == 1 and err.startswith("Error: ") and err.count("\n") == 1


@pytest.mark.parametrize("entry", ["h100-sxm", "dgx-spark"])
def test_a_price_from_the_users_hardware_file_is_not_called_the_catalogs(tmp_path, entry):
    """The run table says whose price it used: the catalog's for a catalog entry, the hardware file's for a file the
    user gave (an on-demand price or a workstation's purchase alike)."""
    from trainest.catalog import specs_dir
    from trainest.report.estimate import price_label
    copy = tmp_path / f"{entry}.yaml"
    copy.write_text((specs_dir() / "hardware" / f"{entry}.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    bundled, own = price_label(load_hardware(entry)), price_label(load_hardware(str(copy)))
    assert bundled.startswith("catalog") and own.startswith("hardware file") and "catalog" not in own
