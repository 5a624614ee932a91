"""Issue 34: activation offload of only some layers (`offload_layers`; docs/model.md §14.3): Megatron-Core's
--cpu-offloading-num-layers. Physics against the default (every layer), the boundary, the warning, the importer."""

from __future__ import annotations

import pytest

from trainest.errors import SpecError
from trainest.estimate import estimate
from trainest.scenario import job_of, layout_of, scenario_from_mapping
from trainest.step.activations import activation_bytes_per_layer

BASE = {"model": "llama3-8b", "hardware": "h100-sxm", "devices": 8, "seq_len": 8192, "micro_batch": 1,
        "global_batch": 8, "recompute": "none", "framework": "megatron-core", "offload": "activations",
        "parallel": {"tp": 1, "pp": 1, "zero": 3}}
LAYERS = 32


def run(**changes):
    s = scenario_from_mapping({**BASE, **changes}, "test")
    return s, estimate(s)


def per_layer() -> float:
    s = scenario_from_mapping(BASE, "test")
    return float(activation_bytes_per_layer(job_of(s), layout_of(s))[0])


@pytest.mark.parametrize("n", [8, 16, 30])
def test_the_layers_not_offloaded_keep_their_activations_on_the_device(n):
    """N of 32 layers offloaded: the device keeps the other 32 − N layers' activations more than with every layer
    offloaded, and the host holds N layers' instead of 32."""
    _, every = run()
    _, some = run(offload_layers=n)
    a = per_layer()
    assert some.memory.activations_bytes - every.memory.activations_bytes == pytest.approx((LAYERS - n) * a, rel=1e-9)
    assert some.memory.host_bytes == pytest.approx(every.memory.host_bytes * n / LAYERS, rel=1e-9)


def test_fewer_layers_offloaded_copy_less_over_the_host_link():
    _, every = run()
    _, some = run(offload_layers=4)
    assert some.step.time_s <= every.step.time_s


def test_all_layers_given_is_the_default():
    _, every = run()
    _, all_given = run(offload_layers=LAYERS)
    assert all_given.memory.per_device_bytes == every.memory.per_device_bytes
    assert all_given.step.time_s == every.step.time_s


def test_more_layers_than_the_model_is_refused_in_one_line():
    with pytest.raises(SpecError, match=r"offload_layers: 33 is more than the model's 32 layers; allowed: 0"):
        run(offload_layers=33)


@pytest.mark.parametrize("bad", [-1, 2.5, "four"])
def test_a_bad_value_is_refused(bad):
    with pytest.raises(SpecError, match="offload_layers"):
        run(offload_layers=bad)


def test_without_activation_offload_it_has_no_effect_and_estimate_warns():
    from trainest.caveats import estimate_warnings

    s, e = run(offload="none", offload_layers=8)
    _, none = run(offload="none")
    assert e.memory.per_device_bytes == none.memory.per_device_bytes
    assert any("offload_layers 8" in w for w in estimate_warnings(s, e))


def test_importer_reads_megatrons_cpu_offloading_of_some_layers():
    from tools.recipe_settings import offloaded_layers_of

    def rec(**offload):
        return {"settings": {"offload": {k: {"value": v, "src": "set"} for k, v in offload.items()}}}

    assert offloaded_layers_of(rec(cpu_offloading=True, cpu_offloading_num_layers=40,
                                   cpu_offloading_activations=True, cpu_offloading_weights=False)) == 40
    assert offloaded_layers_of(rec(cpu_offloading=True, cpu_offloading_num_layers=40,
                                   cpu_offloading_weights=True)) is None
    assert offloaded_layers_of(rec(cpu_offloading=False, cpu_offloading_num_layers=40)) is None
