"""Offload to host memory (trainest/step/offload.py, docs/model.md §14) and the memory left to training
on unified-memory devices."""

from __future__ import annotations

import pytest

from trainest.catalog import load_hardware
from trainest.errors import SpecError
from trainest.estimate import estimate, estimate_ops
from trainest.scenario import scenario_from_mapping
from trainest.step.offload import (
    CPU_ADAM_PARAMS_PER_S_PER_CORE,
    HOST_LINK_EFFICIENCY,
    HOST_MEMORY_EFFICIENCY,
    HOST_OPTIMIZER_BYTES_PER_PARAM,
    cpu_adam_s,
    host_rates,
)
from trainest.step.optimizer import OPTIMIZER_BYTES_PER_PARAM

ONE = {"model": "llama3-8b", "devices": 1, "seq_len": 2048, "global_batch": 8}


def est(**m):
    return estimate(scenario_from_mapping({**ONE, **m}, "test"))


def test_llama3_8b_does_not_fit_one_gpu_and_fits_with_optimizer_offload():
    for hw in ("h100-sxm", "gh200"):
        assert not est(hardware=hw).memory.fits
        offloaded = est(hardware=hw, offload="optimizer").memory
        assert offloaded.fits and offloaded.optimizer_bytes == 0
        assert offloaded.host_bytes == pytest.approx(8.03e9 * HOST_OPTIMIZER_BYTES_PER_PARAM, rel=1e-2)


def test_nvlink_c2c_offload_is_faster_than_pcie():
    """The same offload over GH200's NVLink-C2C (450 GB/s per direction, 72 Grace cores) against a
    DGX H100 GPU's PCIe Gen5 x16 and its share of the host (14 cores, 77 GB/s of DDR5)."""
    for mode in ("optimizer", "optimizer+weights"):
        gh, h100 = est(hardware="gh200", offload=mode).step, est(hardware="h100-sxm", offload=mode).step
        assert gh.offload_s < h100.offload_s / 3
        assert gh.time_s < h100.time_s


def test_host_rates_are_the_per_device_share_of_the_host():
    h100 = host_rates(load_hardware("h100-sxm"))     # DGX H100: 8 GPUs share 112 cores and 614 GB/s
    assert h100.link_bytes_per_s == pytest.approx(64e9 * HOST_LINK_EFFICIENCY)
    assert h100.memory_bytes_per_s == pytest.approx(614.4e9 / 8 * HOST_MEMORY_EFFICIENCY)
    assert h100.adam_params_per_s == pytest.approx(14 * CPU_ADAM_PARAMS_PER_S_PER_CORE)
    gb200 = host_rates(load_hardware("gb200"))       # 2 GPUs share one Grace and its NVLink-C2C
    assert gb200.link_bytes_per_s == pytest.approx(450e9 / 2 * HOST_LINK_EFFICIENCY)


def test_cpu_adam_is_bound_by_the_slower_of_host_memory_and_cores():
    rates = host_rates(load_hardware("gh200"))
    p = 1e9
    assert cpu_adam_s(p, rates) == pytest.approx(max(p * OPTIMIZER_BYTES_PER_PARAM / rates.memory_bytes_per_s,
                                                     p / rates.adam_params_per_s))


def test_offload_none_changes_nothing():
    a, b = est(hardware="gh200"), est(hardware="gh200", offload="none")
    assert a.step.time_s == b.step.time_s and a.step.offload_s == 0 and a.memory.host_bytes == 0


def test_weight_offload_leaves_two_layers_on_the_device_and_fetches_every_pass():
    opt, both = est(hardware="gh200", offload="optimizer"), est(hardware="gh200", offload="optimizer+weights")
    assert both.memory.weights_bytes < opt.memory.weights_bytes / 10
    assert both.memory.host_bytes > opt.memory.host_bytes
    ops = {o.name: o for o in estimate_ops(scenario_from_mapping({**ONE, "hardware": "gh200",
                                                                   "offload": "optimizer+weights"}))[0]}
    assert ops["offload.weights_fetch"].time_s > 0 and "offload.weights_up" not in ops


def test_activation_offload_moves_activations_to_the_host():
    base, off = est(hardware="gh200"), est(hardware="gh200", offload="activations")
    assert off.memory.activations_bytes < base.memory.activations_bytes
    assert off.memory.host_bytes > 0 and off.step.time_s >= base.step.time_s


def test_what_does_not_fit_in_host_memory_does_not_fit():
    """Llama 3 70B's Adam state (70.6 B × 16 B ≈ 1.1 TB) is more than GH200's 480 GB of LPDDR5X."""
    e = estimate(scenario_from_mapping({"model": "llama3-70b", "hardware": "gh200", "devices": 1, "seq_len": 2048,
                                        "recompute": "full", "offload": "optimizer+weights"}))
    assert e.memory.device_fits and not e.memory.host_fits and not e.memory.fits


def test_a_host_memory_overflow_is_reported_as_one(capsys):
    """When only the offloaded part is too big, the headline and the warning name the host memory (needed
    against what the host has), not the device's numbers, which fit (table and JSON)."""
    import json

    from helpers import call_entry
    args = ["estimate", "--model", "llama3-70b", "--hardware", "gh200", "--devices", "1", "--seq-len", "4096",
            "--global-batch", "16", "--recompute", "full", "--offload", "optimizer+weights"]
    code, out, err = call_entry(args, capsys)
    assert code == 0
    text, warned = " ".join(out.replace("│", " ").split()), " ".join(err.split())
    assert "(the device part fits; DOES NOT FIT in host memory: the offloaded state needs 1182.7 GiB per device, " \
           "the host has 447.0 GiB)" in text
    # the first line leads with the host memory (it named the device's 17.4 GiB of 141 GiB, which fit)
    assert out.splitlines()[0].startswith("DOES NOT FIT in host memory: the offloaded state needs 1182.7 GiB per "
                                          "device, the host has 447.0 GiB (the device part, 17.4 GiB of 141.0 GiB, fits)")
    assert "needs 18.1 GiB per device, gh200 has" not in warned
    code, out, err = call_entry([*args, "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["memory"]["fits"] is False and doc["memory"]["device_fits"] is True
    assert doc["memory"]["host_fits"] is False
    assert any(w.startswith("does not fit in host memory: the offloaded state needs 1182.7 GiB")
               for w in doc["warnings"])


def test_offload_time_is_a_term_of_the_step():
    e = est(hardware="h100-sxm", offload="optimizer")
    st = e.step
    assert st.time_s == pytest.approx(st.compute_s + st.memory_s + st.communication_s + st.bubble_s + st.overhead_s
                                      + st.offload_s)
    assert st.offload_s > 0 and st.no_overlap_time_s >= st.time_s


@pytest.mark.parametrize(("hardware", "message"), [
    ("dgx-spark", "does not apply to dgx-spark: its memory is unified"),
    ("apple-m4-max", "does not apply to apple-m4-max: its memory is unified"),
    ("tpu-v5p", "needs the host link (CPU to device) of tpu-v5p"),
])
def test_bad_offload_is_one_clear_error(hardware, message):
    import re
    with pytest.raises(SpecError, match=re.escape(message)):
        scenario_from_mapping({**ONE, "hardware": hardware, "offload": "optimizer"}, "test")


def test_a_pcie_card_offloads_to_the_typical_server_of_its_generation():
    """h100-pcie's file gives no host (server-dependent): the default is a dual-socket PCIe Gen5 server, stated as
    derived; the offload estimate runs on it and moves with a host given instead."""
    e = est(hardware="h100-pcie", offload="optimizer")
    host = e.scenario.hardware.host
    assert host.derived and "Gen5" in host.system and host.link.pcie_gen == 5
    assert e.step.offload_s >= 0 and e.memory.host_capacity_bytes == pytest.approx(2000e9 / 8)


def test_unified_memory_fits_against_the_memory_left_to_training():
    """DGX Spark: 128 GB of LPDDR5X, 8 GB kept by the OS (tools/hardware_facts.yaml) → 120 GB."""
    spark = load_hardware("dgx-spark")
    e = estimate(scenario_from_mapping({"model": "llama3.2-3b", "hardware": "dgx-spark", "devices": 1}))
    assert e.memory.capacity_bytes == spark.training_memory_bytes == 120e9


def test_plan_searches_offload_when_asked(capsys):
    import json

    from helpers import call_entry
    code, out, err = call_entry(["plan", "--model", "llama3-8b", "--hardware", "gh200", "--devices", "1",
                                 "--global-batch", "8", "--seq-len", "4096", "--allow", "offload=none,optimizer",
                                 "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["search"]["space"]["offload"] == ["none", "optimizer"]
    assert {p["offload"] for p in doc["plans"]} <= {"none", "optimizer"}
    code, _, err = call_entry(["plan", "--model", "llama3-8b", "--hardware", "dgx-spark", "--devices", "1",
                               "--global-batch", "8", "--allow", "offload=optimizer"], capsys)
    assert code == 1 and "unified" in err and err.count("\n") == 1


def test_zero3_optimizer_offload_keeps_the_16_bit_shard_on_the_device():
    """FSDP-style ZeRO-3 counts no 16-bit shard (the FP32 master shard, with the optimizer state, is what it
    keeps); offloading the optimizer sends that master to the host, so the device must hold the 16-bit
    shard the host's Adam updates and sends back. It was left out: a 13B full fine-tune on 4 RTX 4090s
    with ZeRO-3 and optimizer offload 'fitted' at 18.2 GiB where it needs 24.6."""
    from trainest.estimate import estimate
    from trainest.scenario import scenario_from_mapping
    base = {"model": "llama3-8b", "hardware": "h100-sxm", "devices": 8, "seq_len": 4096, "global_batch": 16,
            "parallel": {"zero": 3}, "framework": "deepspeed"}
    plain = estimate(scenario_from_mapping(base, "t")).memory
    offloaded = estimate(scenario_from_mapping({**base, "offload": "optimizer"}, "t")).memory
    shard = 8.03e9 * 2.0 / 8
    assert offloaded.weights_bytes == pytest.approx(plain.weights_bytes + shard, rel=0.01)
    assert offloaded.optimizer_bytes == 0.0


def test_plan_on_one_device_lists_an_offload_plan_once_not_once_per_zero_stage(capsys):
    """With nothing to shard every ZeRO stage is the same offload plan (same step, same memory): the top of
    `plan --devices 1 --offload optimizer` was z0, z1, z2, z3 of one plan. It is listed once, at ZeRO-1 (the
    least stage ZeRO-Offload runs on), and the other plans differ in something."""
    import json

    from helpers import call_entry
    code, out, err = call_entry(["plan", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "1",
                                 "--offload", "optimizer", "--json"], capsys)
    assert code == 0, err
    plans = json.loads(out)["plans"]
    assert {p["parallel"]["zero"] for p in plans} == {1}
    keys = [(p["micro_batch"], p["recompute"]) for p in plans]
    assert len(keys) == len(set(keys))
    code, out, err = call_entry(["plan", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8",
                                 "--global-batch", "64", "--offload", "optimizer", "--json"], capsys)
    assert code == 0, err                          # on 8 replicas the stages differ and are all searched
    assert len({p["parallel"]["zero"] for p in json.loads(out)["plans"]}) > 1
