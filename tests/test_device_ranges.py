"""Device ranges with a step (`256..8192:256`) and the summary of a long range's counts (issue 36)."""

from __future__ import annotations

import pytest
from helpers import call_entry

from trainest.errors import SpecError
from trainest.report.plan import SUMMARY_AFTER, device_spans, more_devices_note
from trainest.search import DeviceTrial, device_counts, device_step, parse_devices


def test_a_range_with_a_step_tries_every_step_th_count():
    text = "256..8192:256"
    lo, hi = parse_devices(text)
    counts = device_counts(lo, hi, "pow2", 8, device_step(text))
    assert counts[:3] == [256, 512, 768] and counts[-1] == 8192 and len(counts) == 32


def test_a_range_without_a_step_keeps_its_mode():
    assert device_step("256..8192") is None
    assert device_counts(256, 1024, "pow2", 8, None) == [256, 512, 1024]


@pytest.mark.parametrize("text", ["8..64:0", "8..64:x", "8..64:-8", "8..64:"])
def test_a_bad_step_is_refused(text):
    with pytest.raises(SpecError, match="step"):
        parse_devices(text)


def _trial(n: int, days: float | None) -> DeviceTrial:
    return DeviceTrial(devices=n, meets=days is not None, time_s=None if days is None else days * 86400,
                       cost_usd=None, note="" if days is not None else "does not fit")


def test_more_devices_stop_helping_is_said_where_a_larger_count_is_slower():
    trials = (_trial(2048, 20.0), _trial(4096, 10.0), _trial(5120, 11.0))
    note = more_devices_note(trials)
    assert "4,096" in note and "5,120" in note
    assert more_devices_note((_trial(2048, 20.0), _trial(4096, 10.0))) == ""     # the largest is the fastest


def test_spans_cover_every_count_once_in_powers_of_two():
    trials = tuple(_trial(n, None if n < 64 else 1000 / n) for n in range(8, 1025, 8))
    spans = device_spans(trials)
    assert [t.devices for span in spans for t in span] == [t.devices for t in trials]
    for span in spans:
        assert {t.devices.bit_length() for t in span} == {span[0].devices.bit_length()}
    assert len(spans) < SUMMARY_AFTER < len(trials)


def test_plan_over_a_stepped_range_summarises_its_counts(capsys):
    code, out, err = call_entry(["plan", "--model", "llama3.2-3b", "--devices", "8..512:8", "-q"], capsys)
    assert code == 0, err
    table = out.split("Chosen:")[0]
    assert "per span of counts" in table
    assert len(table.splitlines()) < 20                     # 64 counts in a few rows
