"""The bundled catalog (`specs/`): hardware and model presets, loaded into frozen dataclasses.

A name is looked up in the catalog; a value that ends in `.yaml`/`.yml` or names an existing
file is read as a path. Human units in the YAML (TFLOP/s, GB, GB/s, Gb/s, us) are converted to
SI here, once.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from trainest import fields as F
from trainest.choices import Mlp, Precision
from trainest.errors import SpecError, did_you_mean
from trainest.units import BITS_PER_BYTE, GB, MICROSECOND, TERA

PRECISIONS = Precision.values()
MLP_KINDS = Mlp.values()


@functools.cache
def specs_dir() -> Path:
    """The bundled specs folder: inside the installed package, or the source tree's `specs/`."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "specs", here.parent / "specs"):
        if (candidate / "hardware").is_dir():
            return candidate
    raise SpecError(f"bundled specs not found next to {here} (broken installation?)")


# ----------------------------------------------------------------------------------------- hardware

@dataclass(frozen=True)
class Efficiency:
    """Achievable fractions of peak: per-hardware data, fitted by `trainest calibrate` (docs/model.md)."""

    gemm: float                 # large-GEMM fraction of dense peak
    gemm_half_dim: float        # GEMM dimension at which a dimension's factor is 1/2 [elements]
    attention: float            # fused attention fraction of the 16-bit peak
    memory: float               # fraction of HBM bandwidth reached by streaming kernels
    scale_up: float             # fraction of scale-up bandwidth reached by collectives
    scale_out: float            # fraction of scale-out bandwidth reached by collectives
    low_precision_gemm: float   # FP8/FP4 GEMM efficiency relative to `gemm` (casts, scaling)
    flash2_attention: float     # FlashAttention-2 relative to `attention` (the best fused kernel)
    layer_overhead_s: float     # fixed time per layer pass (kernel launches, sync) [s]
    overlap_contention: float   # share of an overlapped collective's time added to the work hiding it
    fitted: bool
    method: str


EFFICIENCY_KEYS = ("gemm", "gemm_half_dim", "attention", "memory", "scale_up", "scale_out")
EFFICIENCY_OPTIONAL = ("low_precision_gemm", "flash2_attention", "layer_overhead_us", "overlap_contention", "fitted",
                       "method", "fit_runs", "fit_mape_pct")
DEFAULT_LOW_PRECISION_GEMM = 0.85   # FP8 GEMMs reach a lower fraction of their (2x) peak than BF16
DEFAULT_FLASH2_ATTENTION = 1.0     # FlashAttention-2 relative to `attention`: the same unless fitted
DEFAULT_LAYER_OVERHEAD_US = 30.0    # launch and sync overhead per transformer layer per pass
# Collective/compute contention by hardware kind: while a collective runs behind computation, the
# computation slows by this share of the collective's time. GPUs run NCCL/RCCL collectives as kernels
# on their SMs/CUs (one thread block per channel, and they stream through HBM): ~10–25 % of an A100's
# 108 or an H100's 132 SMs at the usual 16–32 channels; 0.15 is the same share trainest already
# leaves exposed of pipelined TP traffic. TPUs (ICI DMA), Gaudi (on-chip RoCE engines) and Trainium
# (collective engines) move collective data off the compute cores: 0. docs/model.md §4.7.
DEFAULT_OVERLAP_CONTENTION = {"gpu": 0.15, "cpu-gpu": 0.15}
DEFAULT_SCALE_UP_LATENCY_US = 3.0   # used when a hardware file gives no latency (NVLink-class)
DEFAULT_SCALE_OUT_LATENCY_US = 8.0  # InfiniBand/RoCE-class


@dataclass(frozen=True)
class Hardware:
    """One accelerator and the system it sits in. All SI: FLOP/s, bytes, bytes/s, s, W."""

    name: str
    display_name: str
    kind: str
    peak_flops_per_s: dict[str, float]     # dense peak by GEMM precision; absent = unsupported
    memory_bytes: float
    memory_bytes_per_s: float
    power_w: float | None
    price_usd_per_hour: float | None
    devices_per_node: int
    scale_up_bytes_per_s: float | None     # per device, per direction
    scale_up_domain: int
    scale_up_latency_s: float
    scale_out_bytes_per_s: float | None    # per device, per direction
    scale_out_latency_s: float
    efficiency: Efficiency
    source: str
    path: str

    def peak(self, precision: str) -> float:
        """Dense peak FLOP/s for `precision`, or a SpecError listing what the device has."""
        if precision not in self.peak_flops_per_s:
            have = ", ".join(p for p in PRECISIONS if p in self.peak_flops_per_s)
            raise SpecError(f"hardware {self.name!r} has no {precision} peak; it supports: {have}")
        return self.peak_flops_per_s[precision]

    @property
    def peak_16bit_flops_per_s(self) -> float:
        """The 16-bit matrix peak used for attention and for MFU of mixed precision."""
        for p in ("bf16", "fp16", "tf32", "fp32"):
            if p in self.peak_flops_per_s:
                return self.peak_flops_per_s[p]
        raise SpecError(f"hardware {self.name!r} has no 16- or 32-bit peak")


HW_REQUIRED = ("name", "peak_tflops", "memory", "system", "efficiency", "source")
HW_OPTIONAL = ("display_name", "vendor", "kind", "launch_year", "power_w", "price_usd_per_hour", "price_source",
               "notes", "derived_fields", "on_chip_cache_mb", "extra")
SYSTEM_KEYS = ("devices_per_node", "scale_up_name", "scale_up_gb_per_s", "scale_up_domain", "scale_up_latency_us",
               "scale_out_gbit_per_s", "scale_out_latency_us")


def _given(data: dict, key: str, default: object) -> object:
    """data[key], or `default` when the key is absent or null (a given 0 stays 0 and is then validated)."""
    value = data.get(key)
    return default if value is None else value


def default_overlap_contention(kind: str) -> float:
    """The overlap contention of a hardware kind when its file gives none (DEFAULT_OVERLAP_CONTENTION)."""
    return DEFAULT_OVERLAP_CONTENTION.get(kind, 0.0)


def _efficiency_from(data: dict, where: str, kind: str) -> Efficiency:
    F.check_keys(data, where, EFFICIENCY_KEYS, EFFICIENCY_OPTIONAL)
    return Efficiency(
        gemm=F.fraction(data["gemm"], f"{where}.gemm"),
        gemm_half_dim=F.number(data["gemm_half_dim"], f"{where}.gemm_half_dim", allow_zero=True),
        attention=F.fraction(data["attention"], f"{where}.attention"),
        memory=F.fraction(data["memory"], f"{where}.memory"),
        scale_up=F.fraction(data["scale_up"], f"{where}.scale_up"),
        scale_out=F.fraction(data["scale_out"], f"{where}.scale_out"),
        low_precision_gemm=F.fraction(data.get("low_precision_gemm", DEFAULT_LOW_PRECISION_GEMM),
                                      f"{where}.low_precision_gemm"),
        flash2_attention=F.fraction(data.get("flash2_attention", DEFAULT_FLASH2_ATTENTION),
                                    f"{where}.flash2_attention"),
        layer_overhead_s=F.number(data.get("layer_overhead_us", DEFAULT_LAYER_OVERHEAD_US),
                                  f"{where}.layer_overhead_us", allow_zero=True) * MICROSECOND,
        overlap_contention=F.number(_given(data, "overlap_contention", default_overlap_contention(kind)),
                                    f"{where}.overlap_contention", allow_zero=True, maximum=1.0),
        fitted=F.boolean(data.get("fitted", False), f"{where}.fitted"),
        method=F.text(data.get("method", ""), f"{where}.method") or "",
    )


def hardware_from_mapping(data: dict, where: str) -> Hardware:
    """Validate one hardware mapping (schema in specs/README.md) and convert it to SI."""
    F.check_keys(data, where, HW_REQUIRED, HW_OPTIONAL)
    peaks_raw = F.check_keys(data["peak_tflops"], f"{where}.peak_tflops", (), PRECISIONS)
    peaks = {p: F.number(v, f"{where}.peak_tflops.{p}") * TERA for p, v in peaks_raw.items() if v is not None}
    if not peaks:
        raise SpecError(f"{where}.peak_tflops: at least one precision needs a peak")
    mem = F.check_keys(data["memory"], f"{where}.memory", ("capacity_gb", "bandwidth_gb_per_s"), ("type",))
    sys_ = F.check_keys(data["system"], f"{where}.system", ("devices_per_node",), SYSTEM_KEYS)
    up = F.number(sys_.get("scale_up_gb_per_s"), f"{where}.system.scale_up_gb_per_s", allow_none=True)
    out = F.number(sys_.get("scale_out_gbit_per_s"), f"{where}.system.scale_out_gbit_per_s", allow_none=True)
    devices_per_node = F.integer(sys_["devices_per_node"], f"{where}.system.devices_per_node")
    domain = F.integer(_given(sys_, "scale_up_domain", 1), f"{where}.system.scale_up_domain")
    kind = F.text(data.get("kind") or "gpu", f"{where}.kind")
    return Hardware(
        name=F.text(data["name"], f"{where}.name"),
        display_name=F.text(data.get("display_name") or data["name"], f"{where}.display_name"),
        kind=kind,
        peak_flops_per_s=peaks,
        memory_bytes=F.number(mem["capacity_gb"], f"{where}.memory.capacity_gb") * GB,
        memory_bytes_per_s=F.number(mem["bandwidth_gb_per_s"], f"{where}.memory.bandwidth_gb_per_s") * GB,
        power_w=F.number(data.get("power_w"), f"{where}.power_w", allow_none=True),
        price_usd_per_hour=F.number(data.get("price_usd_per_hour"), f"{where}.price_usd_per_hour", allow_none=True),
        devices_per_node=devices_per_node,
        scale_up_bytes_per_s=up * GB if up else None,
        scale_up_domain=domain if up else 1,
        scale_up_latency_s=F.number(_given(sys_, "scale_up_latency_us", DEFAULT_SCALE_UP_LATENCY_US),
                                    f"{where}.system.scale_up_latency_us",
                                    allow_zero=True) * MICROSECOND,
        scale_out_bytes_per_s=out * GB / BITS_PER_BYTE if out else None,
        scale_out_latency_s=F.number(_given(sys_, "scale_out_latency_us", DEFAULT_SCALE_OUT_LATENCY_US),
                                     f"{where}.system.scale_out_latency_us",
                                     allow_zero=True) * MICROSECOND,
        efficiency=_efficiency_from(data["efficiency"], f"{where}.efficiency", kind),
        source=F.text(data["source"], f"{where}.source"),
        path=where,
    )


# ------------------------------------------------------------------------------------------- models

@dataclass(frozen=True)
class Model:
    """A dense decoder-only transformer's shape."""

    name: str
    layers: int
    hidden: int
    ffn_hidden: int
    heads: int
    kv_heads: int
    vocab: int
    mlp: str                    # gelu (2 matrices) | swiglu (3 matrices)
    seq_len: int                # default sequence length
    tied_embeddings: bool
    source: str
    head_dim: int               # d_h; usually h/a (MaxText synthetic models use 128 regardless)
    dropout: bool = True        # trained with dropout (masks stored, extra traffic); modern LLMs: false

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.mlp == "swiglu" else 2

    @property
    def params_per_layer(self) -> float:
        """Weights of one layer: QKV h(h+2g·d_h), output h², MLP k·h·f, two norms 2h (biases ignored)."""
        h, f = self.hidden, self.ffn_hidden
        qkv = h * (self.heads + 2 * self.kv_heads) * self.head_dim
        return qkv + self.heads * self.head_dim * h + self.mlp_matrices * h * f + 2 * h

    @property
    def embedding_params(self) -> float:
        """Input embedding V·h, plus the output layer V·h when not tied, plus the final norm."""
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2) + self.hidden

    @property
    def params(self) -> float:
        return self.layers * self.params_per_layer + self.embedding_params


MODEL_REQUIRED = ("layers", "hidden", "ffn_hidden", "heads", "vocab")
MODEL_OPTIONAL = ("name", "display_name", "source", "kv_heads", "mlp", "seq_len", "tied_embeddings", "aliases", "notes",
                  "params_b", "head_dim", "params", "dropout")


def model_from_mapping(data: dict, where: str, *, default_seq_len: int = 2048) -> Model:
    """Validate one model mapping (schema in specs/README.md)."""
    F.check_keys(data, where, MODEL_REQUIRED, MODEL_OPTIONAL)
    heads = F.integer(data["heads"], f"{where}.heads")
    kv_heads = F.integer(_given(data, "kv_heads", heads), f"{where}.kv_heads")
    hidden = F.integer(data["hidden"], f"{where}.hidden", maximum=10**7)
    if data.get("head_dim") is None and hidden % heads:
        raise SpecError(f"{where}: hidden={hidden} is not divisible by heads={heads} (give head_dim if intended)")
    if heads % kv_heads:
        raise SpecError(f"{where}: heads={heads} is not divisible by kv_heads={kv_heads}")
    return Model(
        name=F.text(data.get("name") or "custom", f"{where}.name"),
        layers=F.integer(data["layers"], f"{where}.layers", maximum=10**5),
        hidden=hidden,
        ffn_hidden=F.integer(data["ffn_hidden"], f"{where}.ffn_hidden", maximum=10**8),
        heads=heads,
        kv_heads=kv_heads,
        vocab=F.integer(data["vocab"], f"{where}.vocab", maximum=10**8),
        mlp=F.choice(data.get("mlp", "gelu"), f"{where}.mlp", MLP_KINDS),
        seq_len=F.integer(_given(data, "seq_len", default_seq_len), f"{where}.seq_len", maximum=10**8),
        tied_embeddings=F.boolean(data.get("tied_embeddings", False), f"{where}.tied_embeddings"),
        source=F.text(data.get("source") or "user-defined", f"{where}.source"),
        head_dim=F.integer(_given(data, "head_dim", hidden // heads), f"{where}.head_dim", maximum=10**6),
        # absent: counted (the conservative choice, and Korthikanti et al.'s formulas); the presets say
        dropout=F.boolean(_given(data, "dropout", True), f"{where}.dropout"),
    )


# ------------------------------------------------------------------------------------------ lookups

def _looks_like_path(value: str) -> bool:
    if value.endswith((".yaml", ".yml")) or "/" in value:
        return True
    try:
        return Path(value).is_file()
    except OSError:   # a name too long for the file system is not a file
        return False


# ------------------------------------------------------------------ bundled catalog: JSON read cache
# The YAML files in specs/ are the source of truth. specs/_catalog.json holds, for each bundled
# hardware and model file, its exact text and the mapping yaml.safe_load made of it, so that an
# estimate with bundled specs never imports or runs the YAML parser (start-up time). An entry is used
# only when the file's current text equals the recorded text: an edited or new file is read as YAML,
# so a stale cache can cost time but never change a result. Rebuild it with
# `python tools/build_catalog_cache.py`; tests/test_startup.py fails while it is out of date.

CATALOG_CACHE_NAME = "_catalog.json"
CATALOG_CACHE_FORMAT = 1
CATALOG_KINDS = ("hardware", "models")


@functools.cache
def _catalog_cache() -> dict[str, dict]:
    """"kind/file.yaml" -> {"text": ..., "data": ...}; empty when the cache is missing or unreadable."""
    import json
    try:
        doc = json.loads((specs_dir() / CATALOG_CACHE_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("format") != CATALOG_CACHE_FORMAT or not isinstance(doc.get("files"), dict):
        return {}
    return doc["files"]


def _read_spec(path: Path, what: str) -> dict:
    """The mapping in a spec file: from the JSON cache when `path` is a bundled file whose text is
    exactly the text the cache entry was made from, else via `fields.load_yaml_mapping`."""
    if path.parent.parent == specs_dir():
        entry = _catalog_cache().get(f"{path.parent.name}/{path.name}")
        if isinstance(entry, dict) and isinstance(entry.get("data"), dict):
            try:
                current = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                current = None
            if current == entry.get("text"):
                import copy
                return copy.deepcopy(entry["data"])
    return F.load_yaml_mapping(path, what)


def build_catalog_cache() -> dict:
    """The cache document for the current specs/ files (what `tools/build_catalog_cache.py` writes).
    A file that does not load, or whose mapping does not survive a JSON round trip unchanged (dates,
    non-string keys), is left out and so is always read as YAML."""
    import json
    files: dict[str, dict] = {}
    for kind in CATALOG_KINDS:
        for path in sorted((specs_dir() / kind).glob("*.yaml")):
            try:
                text = path.read_text(encoding="utf-8")
                data = F.load_yaml_mapping(path, kind)
                encoded = json.dumps(data, allow_nan=False)   # keeps key order
            except (SpecError, OSError, UnicodeDecodeError, TypeError, ValueError):
                continue
            if json.loads(encoded) == data:
                files[f"{kind}/{path.name}"] = {"text": text, "data": data}
    return {"format": CATALOG_CACHE_FORMAT, "files": files}


def catalog_cache_text(doc: dict) -> str:
    """The cache document as file text: deterministic, one line per spec file."""
    import json
    lines = [json.dumps(name) + ": " + json.dumps({"text": entry["text"], "data": entry["data"]}, ensure_ascii=False)
             for name, entry in sorted(doc["files"].items())]
    return ('{"format": ' + json.dumps(doc["format"]) + ', "files": {\n' + ",\n".join(lines) + "\n}}\n")


@functools.cache
def _catalog_files(kind: str) -> dict[str, Path]:
    """name (and alias) -> file for one catalog folder (`hardware` or `models`)."""
    folder = specs_dir() / kind
    try:
        names = sorted(os.listdir(folder))   # (cheaper than Path.glob + sorting Paths: start-up time)
    except OSError:
        return {}
    return {name[:-len(".yaml")]: folder / name for name in names if name.endswith(".yaml")}


@functools.cache
def _model_aliases() -> dict[str, Path]:
    """alias -> file, read from the presets' `aliases` lists (only when a name is not a file stem)."""
    aliases: dict[str, Path] = {}
    for path in _catalog_files("models").values():
        for alias in _read_spec(path, "model").get("aliases") or []:
            aliases.setdefault(str(alias).lower(), path)
    return aliases


def hardware_names() -> list[str]:
    return sorted(_catalog_files("hardware"))


def model_names() -> list[str]:
    return sorted(n for n in _catalog_files("models") if not n.startswith("_"))


@functools.cache
def _load_hardware_path(path: str) -> Hardware:
    return hardware_from_mapping(_read_spec(Path(path), "hardware"), path)


def load_hardware(value: str) -> Hardware:
    """A catalog name (`h100-sxm`) or a path to a hardware YAML file."""
    value = str(value).strip()
    files = _catalog_files("hardware")
    key = value.lower()
    if key in files:
        return _load_hardware_path(str(files[key]))
    if _looks_like_path(value):
        return _load_hardware_path(value)
    raise SpecError(f"unknown hardware {F.show(value)}{did_you_mean(key, files)}; run `trainest list hardware` "
                    f"for the catalog, or give a path to a hardware YAML file")


@functools.cache
def _load_model_path(path: str) -> Model:
    return model_from_mapping(_read_spec(Path(path), "model"), path)


def load_model(value: str) -> Model:
    """A preset name (`llama3-8b`) or a path to a model YAML file."""
    value = str(value).strip()
    files = _catalog_files("models")
    key = value.lower()
    if key in files:
        return _load_model_path(str(files[key]))
    if _looks_like_path(value):
        return _load_model_path(value)
    if key in _model_aliases():
        return _load_model_path(str(_model_aliases()[key]))
    hint = did_you_mean(key, set(files) | set(_model_aliases()))
    raise SpecError(f"unknown model {F.show(value)}{hint}; run `trainest list models` "
                    f"for the presets, or give a path to a model YAML file")


def with_shape(model: Model, **overrides: object) -> Model:
    """A copy of `model` with shape fields replaced (None means keep), re-validated."""
    changed = {k: v for k, v in overrides.items() if v is not None}
    if not changed:
        return model
    data = {f: getattr(model, f) for f in ("name", "layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab",
                                           "mlp", "seq_len", "tied_embeddings", "source", "head_dim", "dropout")}
    if ("hidden" in changed or "heads" in changed) and model.head_dim == model.hidden // model.heads:
        data["head_dim"] = None
    if "heads" in changed and "kv_heads" not in changed and model.kv_heads == model.heads:
        changed["kv_heads"] = changed["heads"]
    data.update(changed)
    data["name"] = f"{model.name} (modified: {', '.join(sorted(changed))})"
    return model_from_mapping(data, "model options")


def with_efficiency(hardware: Hardware, **values: Any) -> Hardware:
    """A copy of `hardware` with some efficiency fields replaced (floats, or arrays of trial values
    in calibration)."""
    return replace(hardware, efficiency=replace(hardware.efficiency, **values))
