"""Issue 34: MaxText's remat policies (--remat-policy, docs/model.md §7.11): what each keeps on the device, what it
re-runs and what it moves to host memory."""

from __future__ import annotations

import pytest

from trainest.errors import SpecError
from trainest.estimate import estimate
from trainest.scenario import job_of, layout_of, scenario_from_mapping
from trainest.step.remat import qkv_bytes, remat_offload_bytes

BASE = {"model": "llama2-7b", "hardware": "h100-sxm", "devices": 8, "seq_len": 4096, "precision": "bf16",
        "framework": "maxtext", "parallel": {"tp": 1, "pp": 1, "zero": 3}, "micro_batch": 2, "global_batch": 16}
POLICIES = ("full", "minimal", "minimal_flash", "minimal_offloaded", "qkv_proj_offloaded")


def scenario(**changes):
    return scenario_from_mapping({**BASE, **changes}, "test")


def est(**changes):
    return estimate(scenario(**changes))


@pytest.fixture(scope="module")
def runs():
    return {p: est(remat_policy=p) for p in POLICIES} | {"none": est(recompute="none")}


def test_memory_orders_full_minimal_flash_none(runs):
    """Saving more keeps more: full (the layer input) < minimal (and the projections' outputs) < minimal_flash (and
    the attention output) < no recompute (everything)."""
    act = {p: e.memory.activations_bytes for p, e in runs.items()}
    assert act["full"] < act["minimal"] < act["minimal_flash"] < act["none"]


def test_time_orders_the_other_way(runs):
    """Re-running more takes longer: full > minimal (attention core and norms) > minimal_flash (norms) > none."""
    t = {p: e.step.time_s for p, e in runs.items()}
    assert t["full"] > t["minimal"] > t["minimal_flash"] > t["none"]


def test_offloaded_policies_keep_their_tensors_off_the_device(runs):
    """minimal_offloaded re-runs what minimal re-runs but keeps only the layer input on the device;
    qkv_proj_offloaded re-runs all but the Q, K, V projections: below full in time, no more memory than full."""
    assert runs["minimal_offloaded"].step.time_s == pytest.approx(runs["minimal"].step.time_s)
    assert runs["minimal_offloaded"].memory.activations_bytes < runs["minimal"].memory.activations_bytes
    assert runs["qkv_proj_offloaded"].memory.activations_bytes <= runs["full"].memory.activations_bytes
    assert runs["minimal"].step.time_s < runs["qkv_proj_offloaded"].step.time_s < runs["full"].step.time_s


def test_offload_moves_the_saved_bytes_to_the_host():
    s = scenario(remat_policy="qkv_proj_offloaded")
    job, layout = job_of(s), layout_of(s)
    # Llama 2 7B (MHA: q, k, v each h wide), 2 × 4096 tokens, 2 B each
    assert remat_offload_bytes(job, layout) == pytest.approx(qkv_bytes(job, layout)) == 2 * 8192 * 3 * 4096
    minimal = scenario(remat_policy="minimal_offloaded")
    assert remat_offload_bytes(job_of(minimal), layout_of(minimal)) > qkv_bytes(job, layout)
    kept = scenario(remat_policy="minimal")
    assert remat_offload_bytes(job_of(kept), layout_of(kept)) == 0.0


def test_the_policy_sets_recompute_as_derived():
    assert scenario(remat_policy="minimal").recompute == "selective"
    assert scenario(remat_policy="qkv_proj_offloaded").recompute == "full"
    assert "recompute" in scenario(remat_policy="minimal").derived
    assert scenario().recompute == "selective" and dict(scenario().knobs)["remat_policy"] == "auto"


@pytest.mark.parametrize("changes, words", [
    ({"framework": "megatron-core", "remat_policy": "minimal"}, "framework maxtext"),
    ({"remat_policy": "minimal", "recompute": "full"}, "differs from remat_policy"),
    ({"remat_policy": "minimal_flash", "recompute_modules": ["core_attn"]}, "decides what is re-run"),
    ({"remat_policy": "save_everything"}, "allowed"),
    ({"remat_policy": "minimal", "model": "mixtral-8x7b"}, "dense transformer layers only"),
])
def test_bad_policies_are_refused_in_one_line(changes, words):
    with pytest.raises(SpecError) as err:
        scenario(**changes)
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("policy, mode", [("minimal_flash", "selective"), ("qkv_proj_offloaded", "full")])
def test_the_plan_search_keeps_the_policy_and_prices_it_as_estimate_does(policy, mode):
    """`plan --remat-policy P`: every plan recomputes as P does, with the memory and step of its own estimate."""
    import numpy as np

    from trainest.choices import RECOMPUTE_CODES
    from trainest.search import enumerate_plans, evaluate_grid, job_scenario
    from trainest.search.rank import EVERY_PLAN, _estimate_at
    base = job_scenario({"model": "llama2-7b", "hardware": "h100-sxm", "seq_len": 4096, "global_batch": 16,
                         "framework": "maxtext", "remat_policy": policy}, "plan")
    g = enumerate_plans(base, 8, EVERY_PLAN)
    ev = evaluate_grid(base, g)
    assert set(g.column("recompute", np.arange(len(ev.time_s)))) == {float(RECOMPUTE_CODES[mode])}
    fits = np.flatnonzero(ev.fits)
    for i in fits[:: max(1, len(fits) // 4)]:
        e = _estimate_at(base, 8, g, int(i))
        assert e.scenario.recompute == mode
        assert ev.time_s[i] == pytest.approx(e.step.time_s, rel=1e-6)
        assert ev.memory_bytes[i] == pytest.approx(e.memory.per_device_bytes, rel=1e-6)


def test_maxtext_shards_activations_over_the_tensor_axis_by_default():
    """MaxText's logical axis rules shard the activations' embed dimension over the tensor mesh axis
    (docs/model.md §4.1): with tp > 1 and nothing said, sequence parallelism is derived on (and shown as derived),
    the element-wise work and the saved activations are 1/t per device; tp 1 and a run that says otherwise keep
    it off; other frameworks keep Megatron's off-by-default."""
    sharded = scenario(parallel={"tp": 4, "pp": 1, "zero": 3})
    assert sharded.parallel.sequence_parallel
    assert "parallel.sequence_parallel" in sharded.derived
    replicated = scenario(parallel={"tp": 4, "pp": 1, "zero": 3, "sequence_parallel": False})
    assert not replicated.parallel.sequence_parallel
    assert not scenario().parallel.sequence_parallel
    megatron = scenario(framework="megatron-core", parallel={"tp": 4, "pp": 1, "zero": 1})
    assert not megatron.parallel.sequence_parallel
    a, b = estimate(sharded), estimate(replicated)
    assert a.step.memory_s < b.step.memory_s
    assert a.memory.activations_bytes < b.memory.activations_bytes
