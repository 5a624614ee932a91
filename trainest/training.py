"""Whole-run totals from one step: steps, wall time, device-hours, energy and cost."""

from __future__ import annotations

import math

from trainest.units import GRAMS_PER_KG, JOULES_PER_KWH, SECONDS_PER_HOUR


def steps_for_tokens(tokens: float, tokens_per_step: float) -> int:
    """ceil(tokens / (B·s)) optimizer steps."""
    return int(math.ceil(tokens / tokens_per_step))


def device_hours(time_s: float, devices: int) -> float:
    """N · T / 3600 [device·h]."""
    return devices * time_s / SECONDS_PER_HOUR


def energy_kwh(time_s: float, devices: int, power_w: float | None, pue: float) -> float | None:
    """E = N · P_device · T · PUE / 3.6e6 [kWh]; the device's rated (max) power is an upper bound
    for its draw, PUE adds cooling and power delivery. None when the power is unknown."""
    if power_w is None:
        return None
    return devices * power_w * time_s * pue / JOULES_PER_KWH


def cost_usd(device_hours_: float, price_usd_per_hour: float | None) -> float | None:
    """device-hours × price per device-hour [USD]; None when no price is known."""
    if price_usd_per_hour is None:
        return None
    return device_hours_ * price_usd_per_hour


def co2_kg(energy_kwh_: float | None, grid_gco2_per_kwh: float) -> float | None:
    """CO2 = E · I / 1000 [kg] for E [kWh] at the grid's carbon intensity I [gCO2/kWh] (the facility's
    energy, PUE included); None when the energy is unknown."""
    if energy_kwh_ is None:
        return None
    return energy_kwh_ * grid_gco2_per_kwh / GRAMS_PER_KG
