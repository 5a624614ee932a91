"""trainest.training: whole-run totals (steps, time, device-hours, energy with PUE, cost)."""

from __future__ import annotations

from trainest.record import replace

import pytest

from trainest import training
from trainest.estimate import estimate
from trainest.scenario import scenario_from_mapping


def test_steps_round_up_to_a_whole_step():
    assert training.steps_for_tokens(1000.0, 300.0) == 4
    assert training.steps_for_tokens(900.0, 300.0) == 3      # exact: no extra step
    assert training.steps_for_tokens(1.0, 300.0) == 1
    assert isinstance(training.steps_for_tokens(1e12, 4e6), int)


def test_device_hours():
    assert training.device_hours(3600.0, 8) == 8.0
    assert training.device_hours(86400.0, 1024) == 24 * 1024


def test_energy_is_devices_times_power_times_time_times_pue():
    # 8 devices × 700 W × 1 h = 5.6 kWh at the devices; ×1.2 at the wall
    assert training.energy_kwh(3600.0, 8, 700.0, 1.0) == pytest.approx(5.6)
    assert training.energy_kwh(3600.0, 8, 700.0, 1.2) == pytest.approx(5.6 * 1.2)


def test_energy_unknown_without_power():
    assert training.energy_kwh(3600.0, 8, None, 1.2) is None


def test_cost_is_device_hours_times_price_and_none_without_price():
    assert training.cost_usd(100.0, 2.5) == 250.0
    assert training.cost_usd(100.0, 0.0) == 0.0
    assert training.cost_usd(100.0, None) is None


def _scenario(**over):
    data = {"model": "gpt3-1.3b", "hardware": "a100-80gb-sxm", "devices": 16, "global_batch": 512,
            "micro_batch": 4, "tokens": "26B", "price_per_hour": 2.0, "pue": 1.1}
    data.update(over)
    return scenario_from_mapping(data)


def test_run_totals_follow_from_the_step():
    s = _scenario()
    e = estimate(s)
    tr = e.training
    assert tr.steps == -(-int(26e9) // (512 * s.seq_len))
    assert tr.time_s == pytest.approx(tr.steps * e.step.time_s)
    assert tr.time_days == pytest.approx(tr.time_s / 86400)
    assert tr.device_hours == pytest.approx(16 * tr.time_s / 3600)
    assert tr.cost_usd == pytest.approx(2.0 * tr.device_hours)
    assert tr.energy_kwh == pytest.approx(16 * s.hardware.power_w * tr.time_s * 1.1 / 3.6e6)


def test_no_price_means_no_cost_but_still_time_and_energy():
    s = replace(_scenario(), price_usd_per_hour=None)
    tr = estimate(s).training
    assert tr.cost_usd is None
    assert tr.time_s > 0 and tr.energy_kwh > 0


def test_more_tokens_never_shorten_the_run():
    short = estimate(_scenario(tokens="10B")).training
    long = estimate(_scenario(tokens="20B")).training
    assert long.steps >= 2 * short.steps - 1
    assert long.time_s > short.time_s and long.energy_kwh > short.energy_kwh


def test_co2_is_energy_times_grid_intensity():
    assert training.co2_kg(6.72, 480.0) == pytest.approx(3.2256)
    assert training.co2_kg(100.0, 0.0) == 0.0          # a carbon-free grid
    assert training.co2_kg(None, 480.0) is None        # no device power, no energy, no CO2


def test_run_co2_uses_the_world_average_unless_given():
    from trainest.scenario import DEFAULT_GRID_GCO2_PER_KWH
    default = estimate(_scenario()).training
    assert default.grid_gco2_per_kwh == DEFAULT_GRID_GCO2_PER_KWH
    assert default.co2_kg == pytest.approx(default.energy_kwh * DEFAULT_GRID_GCO2_PER_KWH / 1000)
    clean = estimate(_scenario(grid_gco2_per_kwh=20)).training
    assert clean.co2_kg == pytest.approx(default.co2_kg * 20 / DEFAULT_GRID_GCO2_PER_KWH)
    assert "grid_gco2_per_kwh" in _scenario().derived and "grid_gco2_per_kwh" not in \
        _scenario(grid_gco2_per_kwh=20).derived
