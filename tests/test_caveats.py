"""Warnings for knobs that a scenario leaves without effect (caveats.no_effect_warnings): each names the knob,
why it does nothing here, and what would give it an effect; the default scenario has none of them."""

from __future__ import annotations

from trainest.caveats import no_effect_warnings
from trainest.estimate import estimate
from trainest.scenario import scenario_from_mapping


def _warnings(**data):
    return no_effect_warnings(scenario_from_mapping({"model": "llama3-8b", "devices": 16, **data}, "t"))


def test_the_default_scenario_has_no_knob_without_effect():
    assert _warnings() == []


def test_double_quantisation_outside_a_qlora_says_it_does_nothing():
    (w,) = _warnings(double_quant=False)
    assert w.startswith("double_quant off:") and "the method is full: no effect (give finetune qlora)" in w
    assert _warnings(double_quant=False, finetune={"method": "qlora"}) == []


def test_no_data_parallel_overlap_under_zero_3_says_it_does_nothing_and_changes_nothing():
    """ZeRO-3's per-layer gathers and reduce-scatters hide inside the passes whatever dp_overlap says (§4.5): the
    step does not move, and the warning says so; under ZeRO-1 the switch exposes the reduction and has no warning."""
    base = {"model": "llama3-8b", "devices": 16, "parallel": {"tp": 2, "zero": 3}}
    on = estimate(scenario_from_mapping(base, "t")).step.time_s
    off_s = scenario_from_mapping({**base, "parallel": {**base["parallel"], "dp_overlap": False}}, "t")
    assert estimate(off_s).step.time_s == on
    (w,) = no_effect_warnings(off_s)
    assert w.startswith("dp_overlap off:") and "zero is 3" in w
    z1 = {"model": "llama3-8b", "devices": 16, "parallel": {"tp": 2, "zero": 1, "dp_overlap": False}}
    assert no_effect_warnings(scenario_from_mapping(z1, "t")) == []


def test_tensor_parallel_switches_without_tensor_parallelism_say_they_do_nothing():
    (w,) = _warnings(parallel={"tp": 1, "tp_overlap": True})
    assert w.startswith("tp_overlap on:") and "tp is 1: no effect (give tp > 1)" in w
    (w,) = _warnings(parallel={"tp": 1, "sequence_parallel": True})
    assert w.startswith("sequence_parallel on:")
    assert _warnings(parallel={"tp": 2, "tp_overlap": True, "sequence_parallel": True}) == []


def test_placement_switches_and_flash2_say_when_they_change_nothing():
    """Flat data-parallel collectives on one node, no data-parallel overlap with dp 1, and FlashAttention-2 where the
    hardware counts it as its best fused kernel (A100) each leave the estimate as it is, and say so."""
    def warned(mapping, prefix):
        return [w for w in no_effect_warnings(scenario_from_mapping(mapping, "t")) if w.startswith(prefix)]

    assert warned({"model": "llama3-8b", "devices": 8, "parallel": {"dp_collectives": "flat"}}, "dp_collectives flat")
    assert not warned({"model": "llama3-8b", "devices": 16, "parallel": {"dp_collectives": "flat"}}, "dp_collectives")
    assert warned({"model": "llama3-8b", "devices": 1, "parallel": {"dp_overlap": False}}, "dp_overlap off")
    assert warned({"model": "llama3-8b", "hardware": "a100-80gb-sxm", "devices": 8, "attention": "flash2"},
                  "attention flash2")
    assert not warned({"model": "llama3-8b", "hardware": "h100-sxm", "devices": 8, "attention": "flash2"},
                      "attention flash2")


def test_a_lighter_loss_that_does_not_move_the_peak_stage_says_so():
    """The chunked loss shrinks the last pipeline stage's logits only: where another stage holds the memory
    shown, the estimate is the same and a warning says so; without a pipeline the last stage is the only one."""
    from trainest.caveats import assess
    pp = {"model": "llama3-70b", "hardware": "h100-sxm", "devices": 64, "parallel": {"tp": 4, "pp": 4},
          "global_batch": 64, "recompute": "full", "loss": "chunked"}
    e = assess(scenario_from_mapping(pp, "t"))
    assert any(w.startswith("loss chunked:") for w in e.warnings)
    one = {"model": "llama3-8b", "hardware": "h100-sxm", "devices": 8, "loss": "chunked"}
    assert not any(w.startswith("loss") for w in assess(scenario_from_mapping(one, "t")).warnings)
