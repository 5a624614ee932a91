"""Structural checks of every data file in specs/hardware and specs/models against specs/README.md.

Uses only PyYAML (no trainest imports), so it catches a bad data file even when the loader is broken.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import reference_dir

REPO = Path(__file__).resolve().parent.parent
HARDWARE_DIR = REPO / "specs" / "hardware"
MODELS_DIR = REPO / "specs" / "models"
CATALOG = reference_dir() / "hardware.yaml"      # the shared reference catalog, vendored in tests/reference/
IMPORTER = REPO / "tools" / "import_hardware.py"

# --- schema (specs/README.md) ------------------------------------------------------------------------------------
HW_REQUIRED = (
    "name", "display_name", "vendor", "kind", "launch_year", "peak_tflops", "memory", "power_w",
    "price_usd_per_hour", "system", "efficiency", "source", "execution_model", "compute", "host",
)
HW_OPTIONAL = ("price_source", "notes", "derived_fields", "unsupported_reason", "price_unknown", "purchase")
HW_KINDS = ("gpu", "tpu", "asic", "wafer", "apple", "cpu-gpu")
PEAK_KEYS = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")
MEMORY_KEYS = ("capacity_gb", "bandwidth_gb_per_s")
MEMORY_FACT_KEYS = ("kind", "unified")     # bundled files carry them; os_reserve_gb exactly when unified
SYSTEM_KEYS = (
    "devices_per_node", "scale_up_name", "scale_up_gb_per_s", "scale_up_domain", "scale_up_latency_us",
    "scale_out_gbit_per_s", "scale_out_latency_us", "scale_out_kind", "scale_out_name", "intra_node",
)
EFFICIENCY_FRACTIONS = ("gemm", "attention", "memory", "scale_up", "scale_out")
EFFICIENCY_KEYS = EFFICIENCY_FRACTIONS + ("gemm_half_dim", "fitted", "method")
# written by `trainest calibrate` / tools/fit_defaults.py (see trainest/catalog.py EFFICIENCY_OPTIONAL)
EFFICIENCY_OPTIONAL = ("low_precision_gemm", "flash2_attention", "layer_overhead_us", "overlap_contention", "fit_runs",
                       "host_us_per_kernel", "host_ms_per_micro_batch", "kernel_floor_us",
                       "fit_mape_pct", "grouped_gemm", "all_to_all", "moe_fit_runs", "moe_fit_mape_pct",
                       "moe_fitted")

MODEL_REQUIRED = (
    "name", "display_name", "source", "layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "mlp",
    "seq_len", "tied_embeddings", "dropout",
)
MODEL_OPTIONAL = ("aliases", "notes", "head_dim", "moe", "mla", "positional", "hybrid", "mtp", "attention_window")
WINDOW_KEYS = ("size", "kind", "global_every")
MODEL_MLPS = ("gelu", "swiglu")
MODEL_INTS = ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "seq_len")
MOE_REQUIRED = ("experts", "top_k", "expert_ffn_hidden")
MOE_OPTIONAL = ("shared_experts", "shared_expert_ffn_hidden", "dense_layers", "layer_frequency", "capacity_factor",
                "imbalance", "router_groups", "router_group_top_k", "latent_size", "expert_bias", "glu_clamp")
MLA_REQUIRED = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
MLA_OPTIONAL = ("q_lora_rank",)


def _files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.yaml")) if folder.is_dir() else []


HARDWARE_FILES = _files(HARDWARE_DIR)
MODEL_FILES = _files(MODELS_DIR)


def _load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{path.name}: top level must be a mapping"
    return data


def _check_keys(data: dict, where: str, required: tuple, optional: tuple = ()) -> None:
    assert isinstance(data, dict), f"{where}: expected a mapping, got {type(data).__name__}"
    unknown = set(data) - set(required) - set(optional)
    assert not unknown, f"{where}: unknown keys {sorted(unknown)}"
    missing = [k for k in required if k not in data]
    assert not missing, f"{where}: missing keys {missing}"


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _positive(x, where: str, *, nullable: bool = False) -> None:
    if x is None and nullable:
        return
    assert _is_number(x), f"{where}: {x!r} is not a number"
    assert x > 0, f"{where}: {x!r} must be > 0"


def _positive_int(x, where: str) -> None:
    assert isinstance(x, int) and not isinstance(x, bool), f"{where}: {x!r} is not a whole number"
    assert x > 0, f"{where}: {x!r} must be > 0"


def _text(x, where: str, *, nullable: bool = False) -> None:
    if x is None and nullable:
        return
    assert isinstance(x, str) and x.strip(), f"{where}: must be non-empty text, got {x!r}"


def test_spec_folders_are_not_empty():
    assert HARDWARE_FILES, f"no hardware files in {HARDWARE_DIR}"
    assert MODEL_FILES, f"no model files in {MODELS_DIR}"


# --- hardware ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", HARDWARE_FILES, ids=lambda p: p.stem)
def test_hardware_file(path: Path):
    d = _load(path)
    w = path.name
    _check_keys(d, w, HW_REQUIRED, HW_OPTIONAL)
    assert d["name"] == path.stem, f"{w}: name {d['name']!r} != file name {path.stem!r}"
    _text(d["display_name"], f"{w}: display_name")
    _text(d["vendor"], f"{w}: vendor")
    assert d["kind"] in HW_KINDS, f"{w}: kind {d['kind']!r} not in {HW_KINDS}"
    _positive_int(d["launch_year"], f"{w}: launch_year")
    assert 1990 <= d["launch_year"] <= 2100, f"{w}: launch_year {d['launch_year']} looks wrong"

    peak = d["peak_tflops"]
    _check_keys(peak, f"{w}: peak_tflops", (), PEAK_KEYS)
    for k, v in peak.items():
        _positive(v, f"{w}: peak_tflops.{k}", nullable=True)
    assert any(peak.get(k) is not None for k in ("bf16", "fp16", "fp32")), f"{w}: needs a bf16, fp16 or fp32 peak"

    mem = d["memory"]
    _check_keys(mem, f"{w}: memory", MEMORY_KEYS + MEMORY_FACT_KEYS, ("os_reserve_gb", "usable_mib", "usable_source"))
    for k in MEMORY_KEYS:
        _positive(mem[k], f"{w}: memory.{k}")
    assert isinstance(mem["unified"], bool), f"{w}: memory.unified must be true or false"
    assert ("os_reserve_gb" in mem) == mem["unified"], f"{w}: memory.os_reserve_gb goes with (only) unified memory"

    _positive(d["power_w"], f"{w}: power_w", nullable=True)
    _positive(d["price_usd_per_hour"], f"{w}: price_usd_per_hour", nullable=True)
    if d["price_usd_per_hour"] is not None:
        _text(d.get("price_source"), f"{w}: price_source (required when a price is given)")
        assert "purchase" not in d and "price_unknown" not in d, f"{w}: an hourly price, a purchase or no price"
    else:
        _text(d.get("price_source"), f"{w}: price_source", nullable=True)
        if "purchase" in d:
            _positive(d["purchase"]["usd"], f"{w}: purchase.usd")
            _text(d["purchase"]["source"], f"{w}: purchase.source")
        else:             # no price: the file says why (the reference has none, it is not sold...)
            _text(d.get("price_unknown"), f"{w}: price_unknown (required when there is no price)")

    sysd = d["system"]
    _check_keys(sysd, f"{w}: system", SYSTEM_KEYS)
    _positive_int(sysd["devices_per_node"], f"{w}: system.devices_per_node")
    _positive_int(sysd["scale_up_domain"], f"{w}: system.scale_up_domain")
    _text(sysd["scale_up_name"], f"{w}: system.scale_up_name", nullable=True)
    for k in ("scale_up_gb_per_s", "scale_up_latency_us", "scale_out_gbit_per_s", "scale_out_latency_us"):
        _positive(sysd[k], f"{w}: system.{k}", nullable=True)
    if sysd["scale_up_gb_per_s"] is None:
        assert sysd["scale_up_domain"] == 1, f"{w}: no scale-up bandwidth, so scale_up_domain must be 1"
    else:
        assert sysd["scale_up_latency_us"] is not None, f"{w}: scale-up bandwidth without a latency"
    if sysd["scale_out_gbit_per_s"] is not None:
        assert sysd["scale_out_latency_us"] is not None, f"{w}: scale-out bandwidth without a latency"

    eff = d["efficiency"]
    _check_keys(eff, f"{w}: efficiency", EFFICIENCY_KEYS, EFFICIENCY_OPTIONAL)
    for k in EFFICIENCY_FRACTIONS:
        _positive(eff[k], f"{w}: efficiency.{k}")
        assert eff[k] <= 1, f"{w}: efficiency.{k} = {eff[k]} must be a fraction in (0, 1]"
    _positive(eff["gemm_half_dim"], f"{w}: efficiency.gemm_half_dim")
    assert isinstance(eff["fitted"], bool), f"{w}: efficiency.fitted must be true or false"
    _text(eff["method"], f"{w}: efficiency.method")

    src = d["source"]
    assert isinstance(src, list) and src, f"{w}: source must be a non-empty list of citations"
    for i, s in enumerate(src):
        _text(s, f"{w}: source[{i}]")
    for key in ("notes", "derived_fields"):
        if key in d:
            assert isinstance(d[key], list), f"{w}: {key} must be a list of strings"
            for i, s in enumerate(d[key]):
                _text(s, f"{w}: {key}[{i}]")


# --- models ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda p: p.stem)
def test_model_file(path: Path):
    d = _load(path)
    w = path.name
    _check_keys(d, w, MODEL_REQUIRED, MODEL_OPTIONAL)
    assert d["name"] == path.stem, f"{w}: name {d['name']!r} != file name {path.stem!r}"
    _text(d["display_name"], f"{w}: display_name")
    _text(d["source"], f"{w}: source")
    for k in MODEL_INTS:
        _positive_int(d[k], f"{w}: {k}")
    if "head_dim" in d:
        _positive_int(d["head_dim"], f"{w}: head_dim")
    else:
        assert d["hidden"] % d["heads"] == 0, f"{w}: hidden {d['hidden']} is not divisible by heads {d['heads']}"
    assert d["heads"] % d["kv_heads"] == 0, f"{w}: heads {d['heads']} is not divisible by kv_heads {d['kv_heads']}"
    assert d["mlp"] in MODEL_MLPS, f"{w}: mlp {d['mlp']!r} not in {MODEL_MLPS}"
    assert isinstance(d["tied_embeddings"], bool), f"{w}: tied_embeddings must be true or false"
    assert isinstance(d["dropout"], bool), f"{w}: dropout must be true or false"
    if "aliases" in d:
        assert isinstance(d["aliases"], list) and d["aliases"], f"{w}: aliases must be a non-empty list"
        for i, a in enumerate(d["aliases"]):
            _text(a, f"{w}: aliases[{i}]")
    if "notes" in d:
        _text(d["notes"], f"{w}: notes")
    if "moe" in d:
        _check_moe(d["moe"], d, w)
    if "mla" in d:
        _check_mla(d["mla"], d, w)
    if "attention_window" in d:
        window = d["attention_window"]
        _check_keys(window, f"{w}: attention_window", ("size",), WINDOW_KEYS[1:])
        _positive_int(window["size"], f"{w}: attention_window.size")
        assert window.get("kind", "sliding") in ("sliding", "chunked"), f"{w}: attention_window.kind"
        every = window.get("global_every", 0)
        assert every == 0 or 2 <= every <= d["layers"], f"{w}: attention_window.global_every {every!r}"


def _check_moe(moe: dict, d: dict, w: str) -> None:
    _check_keys(moe, f"{w}: moe", MOE_REQUIRED, MOE_OPTIONAL)
    for k in ("experts", "top_k", "expert_ffn_hidden", "layer_frequency", "shared_expert_ffn_hidden"):
        if k in moe:
            _positive_int(moe[k], f"{w}: moe.{k}")
    assert moe["top_k"] <= moe["experts"], f"{w}: moe.top_k {moe['top_k']} exceeds experts {moe['experts']}"
    for k in ("shared_experts", "dense_layers"):
        if k in moe:
            assert isinstance(moe[k], int) and moe[k] >= 0, f"{w}: moe.{k} {moe[k]!r} must be a whole number >= 0"
    assert moe.get("dense_layers", 0) < d["layers"], f"{w}: moe.dense_layers leaves no MoE layer"
    if "shared_expert_ffn_hidden" in moe:
        assert moe.get("shared_experts", 0) > 0, f"{w}: moe.shared_expert_ffn_hidden without shared_experts"
    if "imbalance" in moe:
        assert _is_number(moe["imbalance"]) and moe["imbalance"] >= 1, f"{w}: moe.imbalance must be >= 1"
    _positive(moe.get("capacity_factor"), f"{w}: moe.capacity_factor", nullable=True)
    _text(d.get("notes"), f"{w}: notes (a MoE preset says what trainest does not express)")


def _check_mla(mla: dict, d: dict, w: str) -> None:
    _check_keys(mla, f"{w}: mla", MLA_REQUIRED, MLA_OPTIONAL)
    for k in MLA_REQUIRED:
        _positive_int(mla[k], f"{w}: mla.{k}")
    for k in ("kv_lora_rank", "q_lora_rank"):
        if mla.get(k) is not None:
            _positive_int(mla[k], f"{w}: mla.{k}")
            assert mla[k] < d["hidden"], f"{w}: mla.{k} {mla[k]} is not below hidden {d['hidden']}"
    assert d["kv_heads"] == d["heads"], f"{w}: an MLA model has as many KV heads as heads"
    assert "head_dim" not in d, f"{w}: an MLA model's head_dim is derived (qk_nope_head_dim + qk_rope_head_dim)"


def test_model_names_and_aliases_are_unique():
    owner: dict[str, str] = {}
    for path in MODEL_FILES:
        d = _load(path)
        for label in [d.get("name")] + list(d.get("aliases") or []):
            key = str(label).lower()
            assert key not in owner, f"{path.name}: {label!r} is already used by {owner[key]}"
            owner[key] = path.name


# --- importer output is in sync with the shared catalog -----------------------------------------------------------
def test_hardware_files_match_the_catalog():
    proc = subprocess.run(
        [sys.executable, str(IMPORTER), str(CATALOG), "--out", str(HARDWARE_DIR), "--check"],
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, "specs/hardware is out of date; run python tools/import_hardware.py\n" + proc.stdout
