"""The host options (issue 36): a PCIe card's host is a typical server of its PCIe generation, stated as derived;
--host-cores, --host-memory-gb, --host-pcie-gen and --host-pcie-lanes (scenario keys host_cores, ...) replace its
figures, checked at the boundary, echoed when given (trainest/scenario/host.py)."""

from __future__ import annotations

import json

import pytest
from helpers import call_entry
from test_bad_input import assert_clean_failure

from trainest.errors import SpecError
from trainest.estimate import estimate
from trainest.hardware import GB, TYPICAL_HOSTS, pcie_bytes_per_s
from trainest.scenario import scenario_from_mapping, scenario_mapping
from trainest.step.offload import CPU_ADAM_PARAMS_PER_S_PER_CORE

ONE = {"model": "llama3-8b", "devices": 1, "seq_len": 2048, "global_batch": 8, "hardware": "h100-pcie",
       "offload": "optimizer"}


def scen(**m):
    return scenario_from_mapping({**ONE, **m}, "test")


def test_a_pcie_cards_host_is_the_typical_server_of_its_generation_and_says_so():
    host = scen().hardware.host
    typical = TYPICAL_HOSTS[5]
    assert (host.cpu_cores, host.memory_bytes, host.devices) == (typical.cpu_cores, typical.memory_gb * GB,
                                                                 typical.devices)
    assert "derived" in host.derived and typical.system in host.derived
    assert not scen(hardware="h100-sxm").hardware.host.derived      # DGX H100: the file's own host


def test_given_figures_replace_the_typical_ones_and_the_rest_stay_derived():
    host = scen(host_cores=48, host_memory_gb=512).hardware.host
    assert host.cpu_cores == 48 and host.memory_bytes == 512 * GB
    assert host.memory_bytes_per_s == TYPICAL_HOSTS[5].memory_gb_per_s * GB      # not given: still the typical one
    assert "cpu_cores" not in host.derived and "memory_gb_per_s" in host.derived


def test_a_pcie_generation_sets_the_link_rate_and_the_typical_server():
    base, gen4 = scen().hardware.host, scen(host_pcie_gen=4).hardware.host
    assert gen4.link.bytes_per_s == pcie_bytes_per_s(4, 16) == base.link.bytes_per_s / 2
    assert gen4.memory_bytes == TYPICAL_HOSTS[4].memory_gb * GB and gen4.cpu_cores == TYPICAL_HOSTS[4].cpu_cores
    x8 = scen(host_pcie_lanes=8).hardware.host
    assert x8.link.bytes_per_s == pcie_bytes_per_s(5, 8) and x8.memory_bytes == base.memory_bytes
    # the file's own host keeps its figures: only the link changes
    dgx = scen(hardware="h100-sxm", host_pcie_gen=4).hardware.host
    assert dgx.cpu_cores == 112 and dgx.link.bytes_per_s == pcie_bytes_per_s(4, 16) and not dgx.derived


def test_the_offload_physics_follows_the_host_given():
    base = estimate(scen())
    slow_link = estimate(scen(host_pcie_gen=3))
    assert slow_link.step.offload_s > base.step.offload_s
    few_cores = estimate(scen(host_cores=8, host_pcie_gen=5))
    many_cores = estimate(scen(host_cores=512))
    assert few_cores.step.offload_s > base.step.offload_s >= many_cores.step.offload_s
    # 8 cores shared by 8 cards: one core's Adam over the device's 8.03e9 parameters bounds the step
    assert few_cores.step.time_s >= 8.03e9 / CPU_ADAM_PARAMS_PER_S_PER_CORE * 0.99
    small = estimate(scen(host_memory_gb=256))      # 32 GB per card, under the ~96 GB offloaded
    assert base.memory.host_fits and not small.memory.host_fits
    assert small.memory.host_capacity_bytes == pytest.approx(256 * GB / 8)


def test_the_echo_holds_what_was_given_and_reloads_to_the_same_scenario(tmp_path, capsys):
    assert not any(k.startswith("host_") for k in scenario_mapping(scen()))
    given = scen(host_cores=48, host_pcie_gen=4)
    echo = scenario_mapping(given)
    assert {k: v for k, v in echo.items() if k.startswith("host_")} == {"host_cores": 48, "host_pcie_gen": 4}
    path = tmp_path / "echo.yaml"
    path.write_text(json.dumps(echo), encoding="utf-8")
    code, out, err = call_entry(["estimate", "--config", str(path), "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["inputs"]["host_cores"] == 48 and doc["inputs"]["host_pcie_gen"] == 4
    assert doc["step"]["time_s"] == pytest.approx(estimate(given).step.time_s, rel=1e-12)
    assert doc["hardware"]["host"]["cores"] == 48 and doc["hardware"]["host"]["pcie_gen"] == 4


def test_the_json_states_the_host_in_effect_and_what_is_derived(capsys):
    code, out, _ = call_entry(["estimate", "--hardware", "h100-pcie", "--devices", "1", "--offload", "optimizer",
                               "--host-memory-gb", "1024", "--json"], capsys)
    host = json.loads(out)["hardware"]["host"]
    assert code == 0 and host["memory_gb"] == 1024 and host["cores"] == TYPICAL_HOSTS[5].cpu_cores
    assert "host.cpu_cores" in host["derived"] and "host.memory_gb," not in host["derived"]
    code, out, _ = call_entry(["estimate", "--hardware", "h100-sxm", "--json"], capsys)
    assert json.loads(out)["hardware"]["host"]["derived"] is None


@pytest.mark.parametrize("args,words", [
    (["--host-cores", "0"], ("--host-cores: 0", "at least 1")),
    (["--host-memory-gb", "-5"], ("--host-memory-gb",)),
    (["--host-pcie-gen", "7"], ("--host-pcie-gen: 7", "allowed: 1, 2, 3, 4, 5, 6")),
    (["--host-pcie-lanes", "3"], ("--host-pcie-lanes: 3", "allowed: 1, 2, 4, 8, 16")),
    (["--hardware", "gh200", "--host-pcie-gen", "4"], ("--host-pcie-gen: 4", "gh200", "not PCIe")),
    (["--hardware", "apple-m4-max", "--host-memory-gb", "64"], ("--host-memory-gb", "unified")),
    (["--hardware", "tpu-v5p", "--host-pcie-gen", "4"], ("--host-pcie-gen: 4", "needs --host-pcie-lanes")),
])
def test_bad_host_options_are_one_clear_error(capsys, args, words):
    code, out, err = call_entry(["estimate", "--devices", "1", *(["--hardware", "h100-pcie"] if "--hardware" not in
                                                                  args else []), *args], capsys)
    assert_clean_failure(code, out, err, 1, words)


def test_a_scenario_file_names_the_key():
    with pytest.raises(SpecError, match=r"scenario 'f.yaml'\.host_pcie_lanes: 8 does not apply to gh200"):
        scenario_from_mapping({**ONE, "hardware": "gh200", "host_pcie_lanes": 8}, "scenario 'f.yaml'")


def test_a_device_with_no_known_generation_gets_a_typical_host_from_the_options():
    with pytest.raises(SpecError, match="host"):
        scen(hardware="tpu-v5p")          # TPU v5p's file gives no host figures: offload is refused
    host = scen(hardware="tpu-v5p", host_pcie_gen=4, host_pcie_lanes=16).hardware.host
    assert host.cpu_cores == TYPICAL_HOSTS[4].cpu_cores and "derived" in host.derived


def test_plan_and_compare_keep_the_host_for_every_plan(capsys):
    code, out, err = call_entry(["plan", "--hardware", "h100-pcie", "--devices", "1", "--global-batch", "8",
                                 "--seq-len", "2048", "--allow", "offload=optimizer", "--host-cores", "16",
                                 "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["job"]["host_cores"] == 16 and doc["hardware"]["host"]["cores"] == 16
    code, out, err = call_entry(["compare", "--hardware", "h100-pcie,l40s", "--devices", "1", "--global-batch", "8",
                                 "--seq-len", "2048", "--host-memory-gb", "4096", "--json"], capsys)
    assert code == 0 and json.loads(out)["job"]["host_memory_gb"] == 4096
