"""Hardware facts as data (trainest.catalog: intra-node path, scale-out kind, host side, kernel facts, unified
memory, execution model): every bundled entry carries them, in SI, with unknowns said out loud; bad values are
one SpecError naming the file, the key and what is allowed; a user's file without them still loads."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import yaml
from helpers import call_entry

from trainest import catalog
from trainest.catalog import hardware_from_mapping, hardware_names, load_hardware
from trainest.errors import SpecError

REPO = Path(__file__).resolve().parent.parent
H100 = yaml.safe_load((REPO / "specs" / "hardware" / "h100-sxm.yaml").read_text(encoding="utf-8"))
BUNDLED = hardware_names()
UNSUPPORTED = {"cerebras-wse-3": "wafer-scale", "graphcore-bow": "ipu", "groq-lpu": "dataflow-lpu"}
UNIFIED = ("dgx-spark", "apple-m2-ultra", "apple-m3-max", "apple-m4-max")

# Hardware.unknown_fields entry -> the key that holds it in a hardware YAML file
YAML_KEY = {
    "memory_kind": "memory.kind", "memory_os_reserve_bytes": "memory.os_reserve_gb",
    "intra_node.kind": "system.intra_node.kind", "intra_node.bytes_per_s": "system.intra_node.gb_per_s",
    "intra_node.latency_s": "system.intra_node.latency_us", "intra_node.peer_to_peer": "system.intra_node.peer_to_peer",
    "intra_node.pcie_gen": "system.intra_node.pcie_gen", "intra_node.pcie_lanes": "system.intra_node.pcie_lanes",
    "scale_out_kind": "system.scale_out_kind", "scale_out_bytes_per_s": "system.scale_out_gbit_per_s",
    "host.link.kind": "host.link.kind", "host.link.bytes_per_s": "host.link.gb_per_s",
    "host.link.pcie_gen": "host.link.pcie_gen", "host.link.pcie_lanes": "host.link.pcie_lanes",
    "host.cpu_cores": "host.cpu_cores", "host.memory_bytes": "host.memory_gb",
    "host.memory_bytes_per_s": "host.memory_gb_per_s", "compute.units": "compute.units",
    "compute.gemm_tile_m": "compute.gemm_tile", "compute.gemm_tile_n": "compute.gemm_tile",
    "compute.on_chip_cache_bytes": "compute.on_chip_cache_mib",
}


def _yaml(name: str) -> dict:
    return yaml.safe_load((REPO / "specs" / "hardware" / f"{name}.yaml").read_text(encoding="utf-8"))


def _at(doc: dict, dotted: str):
    """(present, value) of a dotted key in a mapping."""
    for part in dotted.split("."):
        if not isinstance(doc, dict) or part not in doc:
            return False, None
        doc = doc[part]
    return True, doc


def _mutated(path: tuple, value) -> dict:
    doc = copy.deepcopy(H100)
    target = doc
    for key in path[:-1]:
        target = target.setdefault(key, {})
    if value is _DELETE:
        target.pop(path[-1], None)
    else:
        target[path[-1]] = value
    return doc


_DELETE = object()


# ----------------------------------------------------------------------------- every bundled entry

@pytest.mark.parametrize("name", BUNDLED)
def test_intra_node_path_is_a_number_or_explicitly_unknown(name):
    """No placeholder: a PCIe path's rate is its generation x lanes, a fabric's is the scale-up fabric's, a
    single-device node has no path, and anything else is null in the file with a note saying why."""
    hw = load_hardware(name)
    link = hw.intra_node
    assert link.kind in catalog.INTRA_NODE_KINDS, f"{name}: no intra-node path"
    if link.kind == "none":
        assert hw.devices_per_node == 1 and link.bytes_per_s is None
        assert "intra_node.bytes_per_s" not in hw.unknown_fields
        return
    rate = hw.intra_node_bytes_per_s
    assert rate not in (25e9, 1e9), f"{name}: a placeholder rate (the old PCIe fallback or no-network rate)"
    if rate is None:
        assert "intra_node.bytes_per_s" in hw.unknown_fields
        return
    assert hw.intra_node_latency_s is not None and hw.intra_node_latency_s > 0
    if link.kind == "pcie":
        assert rate == catalog.pcie_bytes_per_s(link.pcie_gen, link.pcie_lanes)
        assert link.peer_to_peer is not None
    else:
        assert rate == hw.scale_up_bytes_per_s and hw.scale_up_domain >= hw.devices_per_node
        assert hw.intra_node_latency_s == hw.scale_up_latency_s


@pytest.mark.parametrize("name", BUNDLED)
def test_every_unknown_fact_is_null_in_the_file_with_a_note(name):
    hw, doc = load_hardware(name), _yaml(name)
    notes = " ".join(doc.get("notes") or [])
    for field in hw.unknown_fields:
        key = YAML_KEY[field]
        present, value = _at(doc, key)
        assert present and value is None, f"{name}: {key} must be given as null (unknown), not left out"
        assert f"Unknown (null): {key}:" in notes, f"{name}: no note says why {key} is unknown"


@pytest.mark.parametrize("name", BUNDLED)
def test_every_entry_carries_the_new_facts(name):
    hw = load_hardware(name)
    assert hw.memory_kind in catalog.MEMORY_KINDS
    assert hw.scale_out_kind in catalog.SCALE_OUT_KINDS and hw.scale_out_name
    assert (hw.scale_out_kind == "none") <= (hw.scale_out_bytes_per_s is None)
    assert hw.host.link.kind in catalog.HOST_LINK_KINDS
    assert hw.compute.unit_name
    assert hw.execution_model in catalog.EXECUTION_MODELS
    assert not any(f.startswith(("intra_node.kind", "scale_out_kind", "host.link.kind")) for f in hw.unknown_fields)


def test_no_number_moved():
    """The new keys add facts; the figures the estimate reads keep their values."""
    spark, h100, rtx = load_hardware("dgx-spark"), load_hardware("h100-sxm"), load_hardware("rtx-4090")
    assert spark.memory_bytes == 128e9 and h100.memory_bytes == 80e9
    assert rtx.scale_up_bytes_per_s is None and rtx.scale_out_bytes_per_s is None and rtx.devices_per_node == 1
    assert spark.scale_out_bytes_per_s == 200e9 / 8


# ------------------------------------------------------------------------------------ paths in SI

def test_pcie_cards_have_their_pcie_path():
    rtx4090, rtx5090, l40s = load_hardware("rtx-4090"), load_hardware("rtx-5090"), load_hardware("l40s")
    assert (rtx4090.intra_node.pcie_gen, rtx4090.intra_node.pcie_lanes, rtx4090.intra_node_bytes_per_s) == (4, 16, 32e9)
    assert rtx4090.intra_node.via_host and rtx5090.intra_node.via_host     # GeForce: no peer-to-peer
    assert rtx5090.intra_node_bytes_per_s == 64e9
    assert l40s.intra_node.peer_to_peer is True and l40s.intra_node_kind == "pcie"
    for name in ("h100-pcie", "a100-80gb-pcie"):       # NVLink bridge for the pair, PCIe across the node
        hw = load_hardware(name)
        assert hw.intra_node_kind == "pcie" and hw.scale_up_domain == 2 and hw.scale_up_bytes_per_s == 300e9
    assert load_hardware("h100-pcie").intra_node_bytes_per_s == 64e9
    assert load_hardware("a100-80gb-pcie").intra_node_bytes_per_s == 32e9


def test_host_links_load_in_si():
    gh200, gb200, h100, v100 = (load_hardware(n) for n in ("gh200", "gb200", "h100-sxm", "v100-sxm2-32gb"))
    assert gh200.host.link.kind == "nvlink-c2c" and gh200.host.link.bytes_per_s == 450e9
    assert gb200.host.link.kind == "nvlink-c2c" and gb200.host.link.shared_by == 2
    assert gb200.host.link.bytes_per_s_per_device == 225e9          # one Grace's C2C, two GPUs
    assert (h100.host.link.kind, h100.host.link.pcie_gen, h100.host.link.bytes_per_s) == ("pcie", 5, 64e9)
    assert v100.host.link.bytes_per_s == 16e9                          # PCIe Gen3 x16
    assert load_hardware("mi250x").host.link.bytes_per_s == 72e9       # 2 GCDs x 36 GB/s Infinity Fabric


def test_host_memory_per_device_of_a_reference_node():
    h100, gh200 = load_hardware("h100-sxm"), load_hardware("gh200")
    assert h100.host.devices == 8 and h100.host.memory_bytes == 2000e9
    assert h100.host.memory_bytes_per_device == 250e9
    assert h100.host.memory_bytes_per_s_per_device == pytest.approx(614.4e9 / 8)   # 2 sockets x 8 x DDR5-4800
    assert h100.host.cpu_cores_per_device == 14
    assert gh200.host.memory_bytes_per_device == 480e9 and gh200.host.memory_bytes_per_s_per_device == 500e9
    assert gh200.host.cpu_cores_per_device == 72
    # a PCIe card whose file gives no host: the typical dual-socket server of its PCIe generation, said so
    l40s = load_hardware("l40s").host
    assert l40s.link.pcie_gen == 4 and l40s.derived
    assert l40s.memory_bytes_per_device == 1000e9 / 8 and l40s.cpu_cores_per_device == 128 / 8
    assert l40s.memory_bytes_per_s_per_device == pytest.approx(409.6e9 / 8)      # 2 sockets x 8 x DDR4-3200
    assert not h100.host.derived                       # a host the file gives is kept as given


def test_kernel_facts():
    h100, a100, mi300x, v5p = (load_hardware(n) for n in ("h100-sxm", "a100-80gb-sxm", "mi300x", "tpu-v5p"))
    assert (h100.compute_units, h100.gemm_tile_m, h100.gemm_tile_n) == (132, 128, 256)
    assert (a100.compute_units, a100.gemm_tile_m, a100.gemm_tile_n) == (108, 128, 128)
    assert a100.compute.on_chip_cache_bytes == 40 * 2**20              # 40 MB L2 = 40 MiB
    assert (mi300x.compute_units, mi300x.compute.unit_name) == (304, "CU")
    assert (v5p.compute.unit_name, v5p.gemm_tile_m) == ("TensorCore", 128)


# --------------------------------------------------------------------------------- unified memory

@pytest.mark.parametrize("name", UNIFIED)
def test_unified_devices_keep_an_os_reserve(name):
    hw = load_hardware(name)
    assert hw.memory_unified and hw.host.link.kind in ("unified", "nvlink-c2c")
    assert hw.memory_os_reserve_bytes > 0
    assert 0 < hw.training_memory_bytes < hw.memory_bytes
    assert hw.training_memory_bytes == hw.memory_bytes - hw.memory_os_reserve_bytes
    assert hw.host.memory_bytes is None                       # the host's memory is this memory


def test_discrete_devices_keep_all_their_memory():
    unified = [n for n in BUNDLED if load_hardware(n).memory_unified]
    assert sorted(unified) == sorted(UNIFIED)
    for name in set(BUNDLED) - set(UNIFIED):
        hw = load_hardware(name)
        assert hw.training_memory_bytes == hw.device_memory_bytes and hw.memory_os_reserve_bytes == 0


# ------------------------------------------------------------------- capacity as a program sees it (issue 34)

def test_capacity_is_what_a_program_sees_not_the_vendors_decimal_gigabytes():
    """H100/H800 80GB expose 81,559 MiB, A100 80GB 81,920 MiB, RTX 4090 24 GiB (issue 34): "80 GB" read as
    80e9 B (74.5 GiB) made runs that ran not fit."""
    from trainest.units import MiB
    for name, mib in (("h100-sxm", 81559), ("h800-sxm", 81559), ("h100-pcie", 81559), ("a100-80gb-sxm", 81920),
                      ("a100-80gb-pcie", 81920), ("rtx-4090", 24 * 1024)):
        hw = load_hardware(name)
        assert hw.training_memory_bytes == mib * MiB and hw.usable_memory_source, name


def test_every_discrete_dram_device_states_its_usable_memory_and_where_it_comes_from():
    """Every discrete device with DRAM gives a usable size within 0.9-1.1 of its capacity read as GiB (HBM and
    GDDR densities are binary), with a source; measured figures sit below or at the GiB reading."""
    for name in set(BUNDLED) - set(UNIFIED):
        hw = load_hardware(name)
        assert hw.usable_memory_bytes is not None and hw.usable_memory_source, name
        if hw.memory_kind != "SRAM":
            gib_reading = hw.memory_bytes / 1e9 * 2**30
            assert 0.9 * gib_reading <= hw.usable_memory_bytes <= gib_reading * (1 + 1e-9), name


def test_a_usable_size_far_above_the_capacity_is_refused():
    from trainest.errors import SpecError
    from trainest.hardware import hardware_from_mapping
    import yaml
    data = yaml.safe_load(open(load_hardware("h100-sxm").path))
    data["memory"]["usable_mib"] = 815590
    with pytest.raises(SpecError, match="usable_mib: 815590 MiB is more than the capacity"):
        hardware_from_mapping(data, "h100")
    data["memory"].pop("usable_mib")
    with pytest.raises(SpecError, match="usable_source: given without usable_mib"):
        hardware_from_mapping(data, "h100")


def test_apple_reserve_follows_the_metal_working_set_cap():
    hw = load_hardware("apple-m2-ultra")
    assert hw.training_memory_bytes == pytest.approx(0.75 * hw.memory_bytes)


# ---------------------------------------------------------------------------- execution model

def test_unsupported_entries_carry_a_reason():
    for name in BUNDLED:
        hw = load_hardware(name)
        if name in UNSUPPORTED:
            assert hw.execution_model == UNSUPPORTED[name]
            assert hw.unsupported_reason and "trainest models" in hw.unsupported_reason
            assert "\n" not in hw.unsupported_reason                   # one line
        else:
            assert hw.execution_model == "gpu-like" and hw.unsupported_reason is None


def test_a_wafer_scale_user_file_without_a_reason_gets_the_default():
    hw = hardware_from_mapping({**copy.deepcopy(H100), "execution_model": "wafer-scale"}, "mine.yaml")
    assert hw.unsupported_reason == catalog.UNSUPPORTED_REASONS["wafer-scale"]


# ------------------------------------------------------------------------------- user files, errors

def test_a_user_file_without_the_new_keys_still_loads():
    doc = copy.deepcopy(H100)
    for key in ("execution_model", "compute", "host"):
        doc.pop(key)
    for key in ("kind", "unified", "usable_mib", "usable_source"):
        doc["memory"].pop(key)
    for key in ("intra_node", "scale_out_kind", "scale_out_name"):
        doc["system"].pop(key)
    hw = hardware_from_mapping(doc, "mine.yaml")
    assert hw.execution_model == "gpu-like" and hw.unsupported_reason is None
    assert hw.intra_node_kind is None and hw.intra_node_bytes_per_s is None
    assert hw.training_memory_bytes == hw.memory_bytes == 80e9
    expected = {"intra_node.kind", "scale_out_kind", "host.link.kind", "memory_kind", "compute.units"}
    assert expected <= set(hw.unknown_fields)


def test_memory_kind_is_matched_case_insensitively():
    assert hardware_from_mapping(_mutated(("memory", "kind"), "hbm3e"), "x.yaml").memory_kind == "HBM3e"


BAD = [
    ("intra-kind", ("system", "intra_node", "kind"), "nvlink5", ("system.intra_node.kind", "allowed: nvswitch")),
    ("intra-kind-missing", ("system", "intra_node"), {"gb_per_s": 10},
     ("system.intra_node", "missing required key 'kind'")),
    ("intra-unknown-key", ("system", "intra_node", "bandwidth"), 1,
     ("system.intra_node", "unknown key 'bandwidth'")),
    ("pcie-gen", ("system", "intra_node"), {"kind": "pcie", "pcie_gen": 7},
     ("pcie_gen", "allowed: 1, 2, 3, 4, 5, 6")),
    ("pcie-lanes", ("system", "intra_node"), {"kind": "pcie", "pcie_lanes": 12},
     ("pcie_lanes", "allowed: 1, 2, 4, 8, 16")),
    ("pcie-over-rate", ("system", "intra_node"), {"kind": "pcie", "pcie_gen": 4, "pcie_lanes": 16, "gb_per_s": 64},
     ("system.intra_node.gb_per_s", "PCIe Gen4 x16", "32 GB/s")),
    ("pcie-gen-on-nvswitch", ("system", "intra_node", "pcie_gen"), 5, ("system.intra_node.pcie_gen", "kind 'pcie'")),
    ("none-with-rate", ("system", "intra_node"), {"kind": "none", "gb_per_s": 10}, ("one device per node", "gb_per_s")),
    ("p2p-string", ("system", "intra_node", "peer_to_peer"), "yes", ("peer_to_peer", "true or false")),
    ("intra-rate-negative", ("system", "intra_node", "gb_per_s"), -450, ("system.intra_node.gb_per_s", "-450")),
    ("scale-out-kind", ("system", "scale_out_kind"), "infiniband", ("system.scale_out_kind", "allowed: rdma")),
    ("scale-out-none-with-rate", ("system", "scale_out_kind"), "none", ("scale_out_kind", "contradicts")),
    ("memory-kind", ("memory", "kind"), "HBM4", ("memory.kind", "allowed: HBM, HBM2")),
    ("unified-string", ("memory", "unified"), "yes", ("memory.unified", "true or false")),
    ("reserve-discrete", ("memory", "os_reserve_gb"), 8, ("memory.os_reserve_gb", "only unified memory")),
    ("host-link-kind", ("host", "link", "kind"), "usb", ("host.link.kind", "allowed: pcie")),
    ("host-unified-link", ("host", "link"), {"kind": "unified"}, ("host.link.kind", "memory.unified: true")),
    ("host-shared-zero", ("host", "link", "shared_by"), 0, ("host.link.shared_by", "at least 1")),
    ("host-devices-missing", ("host", "devices"), _DELETE, ("host.devices", "required with cpu_cores")),
    ("host-memory-kind", ("host", "memory_kind"), "DDR6", ("host.memory_kind", "allowed:")),
    ("gemm-tile-short", ("compute", "gemm_tile"), [128], ("compute.gemm_tile", "[m, n]")),
    ("gemm-tile-fraction", ("compute", "gemm_tile"), [128, 1.5], ("compute.gemm_tile[1]", "1.5")),
    ("units-zero", ("compute", "units"), 0, ("compute.units", "at least 1")),
    ("compute-unknown-key", ("compute", "sms"), 132, ("compute", "unknown key 'sms'")),
    ("execution-model", ("execution_model",), "quantum", ("execution_model", "allowed: gpu-like, wafer-scale")),
    ("reason-on-gpu", ("unsupported_reason",), "no", ("unsupported_reason", "execution_model is 'gpu-like'")),
]


@pytest.mark.parametrize("path, value, words", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_values_give_one_spec_error(path, value, words):
    with pytest.raises(SpecError) as err:
        hardware_from_mapping(_mutated(path, value), "hw.yaml")
    message = str(err.value)
    assert "\n" not in message and message.startswith("hw.yaml")
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"


def test_unified_memory_rules():
    spark = _yaml("dgx-spark")
    spark["memory"]["os_reserve_gb"] = 128
    with pytest.raises(SpecError, match=r"os_reserve_gb: 128 must be less than memory.capacity_gb \(128\)"):
        hardware_from_mapping(spark, "spark.yaml")
    spark = _yaml("dgx-spark")
    spark["host"]["memory_gb"] = 128
    with pytest.raises(SpecError, match=r"spark.yaml.host: memory.unified is true .* takes no memory_gb"):
        hardware_from_mapping(spark, "spark.yaml")


def test_a_bad_fact_in_a_hardware_file_is_one_error_line(tmp_path, capsys):
    path = tmp_path / "hw.yaml"
    path.write_text(yaml.safe_dump(_mutated(("system", "intra_node", "kind"), "nvlink5")), encoding="utf-8")
    code, out, err = call_entry(["estimate", "--hardware", str(path), "--json"], capsys)
    assert code == 1 and out == ""
    assert err.startswith("Error:") and "hw.yaml.system.intra_node.kind" in err and len(err.strip().splitlines()) == 1


# -------------------------------------------------------------------------- importer in step

def test_importer_tables_match_the_loader():
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import import_hardware as ih
    finally:
        sys.path.pop(0)
    assert ih.MEMORY_KINDS == catalog.MEMORY_KINDS
    assert ih.DERIVED_PRIOR_PREFIX == catalog.MEDIAN_PRIOR_PREFIX
    assert ih.PCIE_GB_PER_S_PER_LANE == catalog.PCIE_GB_PER_S_PER_LANE
    assert set(ih.SCALE_UP_FABRIC_KINDS) == set(catalog.PEER_TO_PEER_FABRICS)
    assert ih.memory_kind_of("HBM3e (144GB) or HBM3 (96GB, first version)") == "HBM3e"
    assert ih.memory_kind_of("LPDDR5X (unified CPU+GPU)") == "LPDDR5X"
    assert ih.memory_kind_of("on-chip SRAM (In-Processor-Memory)") == "SRAM"


# ------------------------------------------------------------------ priors of uncalibrated devices (issue 11, case 3)

def _own_fits(kinds):
    """The devices fitted on their own runs that a device without runs takes the median of: a network variant
    (the same die in another cluster, tools/fit_priors.py NETWORK_VARIANTS) does not count twice, nor does a
    device fitted on fewer than MIN_FIT_RUNS runs (trainest/priors.py own_fit)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
    from fit_priors import NETWORK_VARIANTS

    from trainest.priors import own_fit
    return [load_hardware(n) for n in BUNDLED if load_hardware(n).kind in kinds and load_hardware(n).efficiency.basis
            == "fitted" and n not in NETWORK_VARIANTS
            and own_fit(yaml.safe_load(Path(load_hardware(n).path).read_text(encoding="utf-8"))["efficiency"])]


@pytest.mark.parametrize("name", [n for n in BUNDLED if load_hardware(n).kind in ("gpu", "cpu-gpu", "tpu", "asic")
                                  and not load_hardware(n).efficiency.fitted])
def test_an_uncalibrated_device_gets_the_median_of_the_fitted_devices_of_its_kind(name):
    """Gaudi 3, MI300X, Trainium had hand-set priors (GEMM 0.75, memory 0.80) above what the fits find
    (H100: 0.64, 0.60), so uncalibrated hardware looked faster than calibrated hardware. Their priors are
    now the per-parameter median of the devices fitted on their own runs (GPUs from GPUs, TPUs from TPUs,
    other accelerators from all), and say so."""
    import statistics
    hw = load_hardware(name)
    kinds = {"gpu": ("gpu", "cpu-gpu"), "cpu-gpu": ("gpu", "cpu-gpu"), "tpu": ("tpu",),
             "asic": ("gpu", "cpu-gpu", "tpu")}[hw.kind]
    group = _own_fits(kinds)
    assert group and hw.efficiency.basis == "median prior"
    for field in ("attention", "memory", "scale_up", "scale_out"):
        median = statistics.median(getattr(g.efficiency, field) for g in group)
        assert getattr(hw.efficiency, field) == pytest.approx(median, rel=1e-3), field
    # the GEMM efficiency: where the device's best measured GEMM rate is known, what the fitted devices
    # reach of theirs, times its own (MI300X's GEMMs reach 51 % of its peak, H100's 80 %)
    scaled = [g for g in group if g.matmul_ceiling is not None]
    if hw.matmul_ceiling is not None and scaled:
        reach = statistics.median(g.efficiency.gemm / g.matmul_ceiling for g in scaled)
        expected = min(hw.matmul_ceiling * reach, hw.matmul_ceiling, 0.92)
    else:
        expected = statistics.median(g.efficiency.gemm for g in group)
    assert hw.efficiency.gemm == pytest.approx(expected, rel=1e-3)
    assert all(g.name in hw.efficiency.method for g in group)


@pytest.mark.parametrize("name", BUNDLED)
def test_no_gemm_efficiency_above_the_measured_best_gemm_rate(name):
    """A training step's GEMMs cannot run faster than the best GEMM a micro-benchmark finds on the device
    (ml-engineering's maximum achievable matmul FLOP/s): the fit is bounded by it (GB300's fit sat at
    0.92 of its peak, 2,300 TFLOP/s, above the 1,966 that Blackwell Ultra's measured fraction gives)."""
    hw = load_hardware(name)
    if hw.matmul_ceiling is not None:
        assert hw.efficiency.gemm <= hw.matmul_ceiling + 1e-9


def test_the_measured_gemm_ceiling_loads_in_si():
    h100 = load_hardware("h100-sxm")
    assert h100.compute.measured_matmul_flops_per_s == pytest.approx(794.5e12)
    assert h100.matmul_ceiling == pytest.approx(794.5 / 989.0, rel=1e-3)
    assert load_hardware("tpu-v5p").matmul_ceiling is None       # none read
    assert load_hardware("rtx-5090").matmul_ceiling == 1.0       # measured above the datasheet peak: capped at 1


def test_estimates_say_whether_the_hardware_is_calibrated(capsys):
    """hardware.calibrated in the JSON and a note under the tables for a device without measured runs."""
    import json
    for name, calibrated in (("gaudi3", False), ("h100-sxm", True)):
        code, out, _ = call_entry(["estimate", "--hardware", name, "--devices", "64", "--zero", "3", "--json"], capsys)
        assert code == 0
        doc = json.loads(out)["hardware"]
        assert doc["calibrated"] is calibrated and doc["name"] == name and doc["file"] is None
        assert doc["efficiency_basis"] == ("fitted" if calibrated else "median prior")
        code, out, _ = call_entry(["estimate", "--hardware", name, "--devices", "64", "--zero", "3"], capsys)
        assert ("not validated on measured runs" in out) is not calibrated
        assert ("not calibrated" in out) is not calibrated


def test_flash2_prior_is_the_kernel_fact_of_the_device():
    """FlashAttention-2's rate relative to the best kernel: 1 on Ampere (FA2 is that kernel), 0.47 on Hopper and
    Blackwell (Shah et al. 2024), and an efficiency block without `flash2_attention` takes that fact, not 1."""
    a100, h100, b200 = (load_hardware(n) for n in ("a100-80gb-sxm", "h100-sxm", "b200"))
    assert a100.compute.flash2_relative == 1.0
    assert h100.compute.flash2_relative == b200.compute.flash2_relative == 0.47
    doc = _yaml("b200")
    doc["efficiency"].pop("flash2_attention", None)
    assert hardware_from_mapping(doc, "b200").efficiency.flash2_attention == 0.47
    doc["compute"].pop("flash2_relative")
    assert hardware_from_mapping(doc, "b200").efficiency.flash2_attention == 1.0
    doc["compute"]["flash2_relative"] = 1.5
    with pytest.raises(SpecError, match="compute.flash2_relative"):
        hardware_from_mapping(doc, "b200")


@pytest.mark.parametrize("name", ["rtx-4090", "rtx-5090"])
def test_geforce_fp16_peak_is_the_fp32_accumulate_rate(name):
    """GeForce cards run 16-bit tensor math with fp32 accumulate at half the fp16-accumulate rate, and training's fp16
    GEMMs accumulate in fp32: the fp16 peak trainest uses is the bf16 one, not the catalog's fp16-accumulate figure
    (an fp16 estimate on an RTX 4090 was twice as fast as the same one in bf16)."""
    hw = load_hardware(name)
    assert hw.peak("fp16") == hw.peak("bf16")
