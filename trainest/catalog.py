"""The bundled catalog (`specs/`): finding hardware and model entries by name or path, and the JSON read
cache of the bundled files. What an entry is and how it is validated live beside it: `trainest/hardware.py`
(devices and systems) and `trainest/models.py` (transformer shapes, MoE, MLA); their names are re-exported
here, where callers find them.

A name is looked up in the catalog; a value that ends in `.yaml`/`.yml` or names an existing
file is read as a path. Human units in the YAML (TFLOP/s, GB, MiB, GB/s, Gb/s, us) are converted to
SI once, by `hardware_from_mapping` and `model_from_mapping`.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from trainest import fields as F
from trainest.errors import SpecError, did_you_mean
from trainest.hardware import (  # noqa: F401  (re-exported: the catalog's names, where callers find them)
    CALIBRATE_METHOD_PREFIX,
    COMPUTE_KEYS,
    DEFAULT_ALL_TO_ALL,
    DEFAULT_FLASH2_ATTENTION,
    DEFAULT_GROUPED_GEMM,
    DEFAULT_HOST_MS_PER_MICRO_BATCH,
    DEFAULT_HOST_US_PER_KERNEL,
    DEFAULT_KERNEL_FLOOR_US,
    DEFAULT_LAYER_OVERHEAD_US,
    DEFAULT_LOW_PRECISION_GEMM,
    DEFAULT_OVERLAP_CONTENTION,
    DEFAULT_SCALE_OUT_LATENCY_US,
    DEFAULT_SCALE_UP_LATENCY_US,
    EFFICIENCY_KEYS,
    EFFICIENCY_OPTIONAL,
    EXECUTION_MODELS,
    HOST_KEYS,
    HOST_LINK_KEYS,
    HOST_LINK_KINDS,
    HW_OPTIONAL,
    HW_REQUIRED,
    INTRA_NODE_KEYS,
    INTRA_NODE_KINDS,
    MAX_GEMM_TILE,
    MEDIAN_PRIOR_PREFIX,
    MEMORY_KINDS,
    MEMORY_OPTIONAL,
    MEMORY_REQUIRED,
    MODELLED_EXECUTION_MODELS,
    PCIE_GB_PER_S_PER_LANE,
    PCIE_GENERATIONS,
    PCIE_LANES,
    PEER_TO_PEER_FABRICS,
    SCALE_OUT_KINDS,
    SYSTEM_KEYS,
    UNSUPPORTED_REASONS,
    Compute,
    Efficiency,
    Hardware,
    Host,
    HostLink,
    IntraNodeLink,
    default_overlap_contention,
    hardware_from_mapping,
    pcie_bytes_per_s,
    with_efficiency,
)
from trainest.models import (  # noqa: F401  (re-exported: the catalog's names, where callers find them)
    MLA,
    MLA_OPTIONAL,
    MLA_REQUIRED,
    MODEL_OPTIONAL,
    MODEL_REQUIRED,
    MOE_OPTIONAL,
    MOE_OVERRIDES,
    MOE_REQUIRED,
    Model,
    MoE,
    model_from_mapping,
    model_mapping,
    unmodelled_features,
    with_shape,
)


@functools.cache
def specs_dir() -> Path:
    """The bundled specs folder: inside the installed package, or the source tree's `specs/`."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "specs", here.parent / "specs"):
        if (candidate / "hardware").is_dir():
            return candidate
    raise SpecError(f"bundled specs not found next to {here} (broken installation?)")



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
CATALOG_CACHE_FORMAT = 2       # 2: entries keep the text's length and CRC-32, not the text
CATALOG_KINDS = ("hardware", "models")


CATALOG_CACHE_HEADER = f'{{"format": {CATALOG_CACHE_FORMAT}, "files": {{'   # the first line (catalog_cache_text)


@functools.cache
def _catalog_cache() -> dict[str, str]:
    """"kind/file.yaml" -> the JSON text of its entry ({"chars": ..., "crc32": ..., "data": ...}), unparsed: the
    cache file has one line per entry (`catalog_cache_text`), and an estimate parses only the two entries it
    reads, not the whole 280 KB (start-up time, issue 36). Empty when the cache is missing, unreadable or of
    another format; an entry that does not parse is read as YAML (`_cache_entry`)."""
    try:
        lines = (specs_dir() / CATALOG_CACHE_NAME).read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError):
        return {}
    if lines[0] != CATALOG_CACHE_HEADER:
        return {}
    entries: dict[str, str] = {}
    for line in lines[1:]:
        key, sep, entry = line.partition(": ")
        if sep and len(key) > 1 and key[0] == key[-1] == '"':
            entries[key[1:-1]] = entry.removesuffix(",")
    return entries


def _cache_entry(key: str) -> dict | None:
    """The parsed cache entry of one spec file ("kind/file.yaml"), a fresh mapping each call; None when the cache
    has none or it does not parse."""
    text = _catalog_cache().get(key)
    if text is None:
        return None
    import json
    try:
        entry = json.loads(text)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None


def _crc32(text: str) -> int:
    """CRC-32 of a spec file's text: the cache entry is used only for exactly the text it was made from."""
    import zlib
    return zlib.crc32(text.encode("utf-8"))


def _read_spec(path: Path, what: str) -> dict:
    """The mapping in a spec file: from the JSON cache when `path` is a bundled file whose text is
    exactly the text the cache entry was made from, else via `fields.load_yaml_mapping`."""
    if path.parent.parent == specs_dir():
        entry = _cache_entry(f"{path.parent.name}/{path.name}")
        if entry is not None and isinstance(entry.get("data"), dict):
            try:
                current = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                current = None
            if current is not None and [len(current), _crc32(current)] == [entry.get("chars"), entry.get("crc32")]:
                return entry["data"]         # (parsed for this call: the caller may change it)
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
                files[f"{kind}/{path.name}"] = {"chars": len(text), "crc32": _crc32(text), "data": data}
    return {"format": CATALOG_CACHE_FORMAT, "files": files}


def catalog_cache_text(doc: dict) -> str:
    """The cache document as file text: deterministic, one line per spec file (`_catalog_cache` reads an entry
    from its line without parsing the others)."""
    import json
    lines = [json.dumps(name) + ": " + json.dumps(entry, ensure_ascii=False)
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


def file_stamp(path: str) -> tuple[int, int]:
    """(modification time [ns], size) of a file, (0, 0) where it cannot be read: part of the key of a file
    read once per process, so that a file edited since (a user's hardware or model file, in a notebook or a
    long-lived process) is read again rather than its old values used without a word."""
    try:
        st = os.stat(path)
    except OSError:
        return (0, 0)
    return (st.st_mtime_ns, st.st_size)


def _load_hardware_path(path: str) -> Hardware:
    return _load_hardware_file(path, file_stamp(path))


@functools.cache
def _load_hardware_file(path: str, stamp: tuple[int, int]) -> Hardware:
    return hardware_from_mapping(_read_spec(Path(path), "hardware"), path)


def is_catalog_name(kind: str, value: str) -> bool:
    """Whether `value` names a catalog entry of `kind` (`model`: a preset or its alias; `hardware`)."""
    key = value.strip().lower()
    if kind == "model":
        return key in _catalog_files("models") or key in _model_aliases() or key in NOT_EXPRESSIBLE_MODELS
    return key in _catalog_files("hardware")


@functools.cache
def _real_path(path: str) -> str:
    """`path` with its symbolic links resolved (`os.path.realpath`), memoised: an estimate asks for the same two
    paths several times (each resolution is a file-system call per component; start-up time)."""
    return os.path.realpath(path)


def is_bundled_hardware(hw: Hardware) -> bool:
    """True for a catalog entry (specs/hardware), False for a file the user gave (a profile, a probe)."""
    return os.path.dirname(_real_path(hw.path)) == _real_path(str(specs_dir() / "hardware"))


def hardware_reference(hw: Hardware) -> str:
    """What names this hardware again for `--hardware` / a scenario's `hardware:`: its catalog name, or the
    absolute path of the user's file (a calibrated profile, a probe) so that a reload uses that file."""
    return hw.name if is_bundled_hardware(hw) else str(Path(hw.path).resolve())


def load_hardware(value: str) -> Hardware:
    """A catalog name (`h100-sxm`) or a path to a hardware YAML file."""
    value = str(value).strip()
    files = _catalog_files("hardware")
    key = value.lower()
    if key in files:
        return _load_hardware_path(str(files[key]))
    if _looks_like_path(value):
        return _load_hardware_path(value)
    if "," in value and all(part.strip().lower() in files for part in value.split(",")):
        raise SpecError(f"hardware {F.show(value)} names several entries; an estimate or a plan takes one: compare "
                        f"them with `trainest compare --hardware {value}`")
    raise SpecError(f"unknown hardware {F.show(value)}{_hardware_hint(value, files)}; run `trainest list hardware` "
                    f"for the catalog, or give a path to a hardware YAML file")


# device name fragment -> catalog entry, most specific first ("GH200" before "H200"); the same
# table as bench/gpu_ground_truth.py's CATALOG_NAMES, extended; `trainest probe`
# names its file's base entry with it, and an unknown --hardware suggests the entry of a device name.
# Matched case-insensitively.
CATALOG_NAMES = (("GH200", "gh200"), ("GB200", "gb200"), ("GB300", "gb300"), ("H200", "h200-sxm"),
                 ("H100 PCIe", "h100-pcie"), ("H100", "h100-sxm"), ("H800", "h800-sxm"),
                 ("A100-SXM4-80GB", "a100-80gb-sxm"), ("A100 80GB PCIe", "a100-80gb-pcie"),
                 ("A100-PCIE-80GB", "a100-80gb-pcie"), ("A100-SXM4-40GB", "a100-40gb-sxm"), ("B200", "b200"),
                 ("B300", "b300"), ("L40S", "l40s"), ("L4", "l4"), ("RTX 4090", "rtx-4090"), ("RTX 5090", "rtx-5090"),
                 ("V100", "v100-sxm2-32gb"), ("MI355X", "mi355x"), ("MI325X", "mi325x"), ("MI300X", "mi300x"),
                 ("MI250X", "mi250x"))

def catalog_match(device_name: str) -> str | None:
    """The catalog entry for a device name as PyTorch reports it ("NVIDIA H100 80GB HBM3"), or None. A fragment
    counts as a whole model number: not inside a longer one ("L4" is not in "NVIDIA L40", "B200" not in "b2000")."""
    import re
    low = device_name.lower()
    for fragment, name in CATALOG_NAMES:
        if re.search(rf"(?<![a-z0-9]){re.escape(fragment.lower())}(?![0-9])", low):
            return name
    return None



def _hardware_hint(value: str, files: dict[str, Path]) -> str:
    """' (did you mean X?)': the catalog entry of a device name as nvidia-smi, rocm-smi or PyTorch print it
    ("NVIDIA H100 80GB HBM3", "A100-SXM4-40GB", "AMD Instinct MI300X", "TPU v5p"), else the closest names."""
    squeezed = value.lower().replace(" ", "").replace("-", "").replace("_", "")
    if any(n.startswith(value.strip().lower()) for n in files):
        return did_you_mean(value.lower(), files)      # the start of several names (`h100`): each of them
    match = next((n for n in files if n.replace("-", "") == squeezed), None) or catalog_match(value)
    if match is None and squeezed.startswith(("tpu", "googletpu")):
        match = next((n for n in files if n.startswith("tpu") and squeezed.endswith(n[3:].replace("-", ""))), None)
    if match is not None and match in files:
        return f" (did you mean {match!r}? the catalog's name for {value.strip()})"
    return did_you_mean(value.lower(), files)


def _load_model_path(path: str) -> Model:
    return _load_model_file(path, file_stamp(path))


@functools.cache
def _load_model_file(path: str, stamp: tuple[int, int]) -> Model:
    return model_from_mapping(_read_spec(Path(path), "model"), path)


def model_from_hf_config(data: dict, where: str) -> Model:
    """The Model of a parsed Hugging Face config.json (trainest/hf_config.py reads it into a mapping)."""
    from trainest import hf_config  # only here: a YAML or preset model never pays for it (start-up time)
    return hf_config.hf_model(data, where)


def _load_hf_config_path(path: str) -> Model:
    return _load_hf_config_file(path, file_stamp(path))


@functools.cache
def _load_hf_config_file(path: str, stamp: tuple[int, int]) -> Model:
    from trainest import hf_config  # only here: a YAML or preset model never pays for it (start-up time)
    return hf_config.hf_model(hf_config.read_hf_config(Path(path)), path)


# Models people ask for that trainest cannot express, and why (said instead of "unknown model").
NOT_EXPRESSIBLE_MODELS = {
    "deepseek-v4-flash": "its attention (compressed sparse attention with an indexer, one shared KV head, grouped "
                         "output low-rank projections) and hyper-connections are neither standard attention nor MLA",
}


def _hf_config_file(value: str) -> Path | None:
    """The config.json `value` names (a `.json` path, or a folder holding config.json), else None."""
    if value.lower().endswith(".json"):
        return Path(value)
    try:
        is_dir = Path(value).is_dir()
    except OSError:   # a name too long for the file system is not a folder
        return None
    if not is_dir:
        return None
    if not (Path(value) / "config.json").is_file():
        raise SpecError(f"model file {F.show(value, F.MAX_SHOWN_PATH_CHARS)} is a directory holding no config.json; "
                        f"give a model YAML file, or a Hugging Face config.json or its folder")
    return Path(value) / "config.json"


def _exists(value: str) -> bool:
    try:
        return Path(value).exists()
    except OSError:   # a name too long for the file system is no file
        return False


def is_hub_name(value: str) -> bool:
    """`org/name` (a Hugging Face Hub repository id such as meta-llama/Meta-Llama-3-8B) that is no file."""
    parts = value.split("/")
    return (len(parts) == 2 and all(parts) and not value.startswith((".", "~"))
            and not value.endswith((".yaml", ".yml", ".json")) and not _exists(value))


def _hub_name_error(value: str) -> str:
    """The error for a Hub repository id: the preset of the same name when there is one, else how to read its
    config.json (trainest reads configs offline, it does not download)."""
    name = value.split("/")[1].lower()
    names = set(_catalog_files("models")) | set(_model_aliases())
    squeezed = name.replace("meta-", "").replace("-hf", "").replace("-v0.1", "").replace("-", "").replace("_", "")
    preset = name if name in names else next((n for n in sorted(names) if n.replace("-", "") == squeezed), None)
    if preset is not None:
        canonical = _model_aliases()[preset].stem if preset in _model_aliases() else preset
        return (f"model {F.show(value)} is a Hugging Face Hub name, not a file (trainest reads no network): its "
                f"preset is {canonical!r} (model: {canonical}), or give the path of its downloaded config.json")
    return (f"model {F.show(value)} is a Hugging Face Hub name, not a file (trainest reads no network): download "
            f"its config.json (huggingface-cli download {value} config.json) and give that path, or a preset "
            f"(`trainest list models`)")


def _ambiguous_model_error(value: str, preset: Path | None) -> str | None:
    """The error for a bare name (no slash, no leading dot) that is both the catalog's preset `preset` and a file
    or folder in the current directory: which is which and how to give each, else None. Refused rather than one
    taken with a note: the two may be different models (a downloaded config of a fine-tune, an edited copy), and a
    note on stderr is lost under -q, --json in a script, or a plan's progress bar."""
    if preset is None or "/" in value or os.sep in value or value.startswith((".", "~")) or not _exists(value):
        return None
    kind = "folder" if Path(value).is_dir() else "file"
    return (f"model {F.show(value)} is both the preset {preset.stem!r} and the {kind} ./{value} in the current "
            f"directory; give ./{value} for the {kind}, or {preset} for the preset")


def load_preset_model(name: str) -> Model:
    """The catalog's model preset `name` (or alias), never a file or folder of that name in the current directory."""
    key = name.strip().lower()
    path = _catalog_files("models").get(key) or _model_aliases().get(key)
    if path is None:
        raise SpecError(f"unknown model preset {F.show(name)}; run `trainest list models` for the presets")
    return _load_model_path(str(path))


def load_model(value: str) -> Model:
    """A preset name (`llama3-8b`), a path to a model YAML file, or a Hugging Face `config.json` (or
    the folder holding it; read offline by trainest/hf_config.py). A bare name that is both a preset and a file
    or folder in the current directory is refused as ambiguous (`_ambiguous_model_error`)."""
    value = str(value).strip()
    files = _catalog_files("models")
    key = value.lower()
    ambiguous = _ambiguous_model_error(value, files.get(key) or (_model_aliases().get(key) if _exists(value) else None))
    if ambiguous is not None:
        raise SpecError(ambiguous)
    if key in files:
        return _load_model_path(str(files[key]))
    hf = _hf_config_file(value)
    if hf is not None:
        return _load_hf_config_path(str(hf))
    if _looks_like_path(value) and not is_hub_name(value):
        return _load_model_path(value)
    if is_hub_name(value):
        raise SpecError(_hub_name_error(value))
    if key in _model_aliases():
        return _load_model_path(str(_model_aliases()[key]))
    if key in NOT_EXPRESSIBLE_MODELS:
        raise SpecError(f"model {F.show(value)} is not expressible in trainest: {NOT_EXPRESSIBLE_MODELS[key]}")
    hint = did_you_mean(key, set(files) | set(_model_aliases()))
    if "/" in value and not value.startswith((".", "/")) and value.count("/") == 1:
        raise SpecError(_hub_name_error(value))
    raise SpecError(f"unknown model {F.show(value)}{hint}; run "
                    f"`trainest list models` for the presets, or give a path to a model YAML file or a Hugging Face "
                    f"config.json")


# with_shape's names for the `moe:` keys it overrides (the CLI's --experts, --top-k, --expert-ffn-hidden,
# --moe-imbalance)
