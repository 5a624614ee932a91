"""What the probe reads about the host rather than times: CPU model, cores, memory, L3 cache, the BLAS
library numpy calls."""

from __future__ import annotations

import datetime
import math
import os
import platform
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainest.catalog import CATALOG_NAMES, Hardware, catalog_match, hardware_from_mapping  # noqa: F401 (re-exported)
from trainest.units import GiB, KiB, MiB

if TYPE_CHECKING:   # imported lazily at run time (only the multi-threaded copy needs it)
    pass


def round_sig(x: float, digits: int = 4) -> float:
    """`x` rounded to `digits` significant digits (never to 0 for x != 0)."""
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - int(math.floor(math.log10(abs(x)))))


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat()


# ----------------------------------------------------------------------------------- host facts

def _read_text(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def cpu_model_name() -> str:
    """The CPU's marketing name (/proc/cpuinfo, sysctl on macOS, else platform), never empty."""
    text = _read_text("/proc/cpuinfo")
    if text:
        for key in ("model name", "hardware", "processor", "cpu model", "cpu"):
            for line in text.splitlines():
                name, _, value = line.partition(":")
                value = value.strip()
                # "processor : 0" on x86 is an index, not a name
                if name.strip().lower() == key and value and not value.isdigit():
                    return value
    if sys.platform == "darwin":
        import subprocess
        try:
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                 timeout=2, check=False).stdout.strip()
            if out:
                return out
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _meminfo_bytes(key: str) -> float | None:
    """A /proc/meminfo field ("MemTotal") in bytes (the file's "kB" are KiB), or None."""
    text = _read_text("/proc/meminfo")
    for line in (text or "").splitlines():
        name, _, value = line.partition(":")
        parts = value.split()
        if name.strip() == key and parts and parts[0].isdigit():
            return float(parts[0]) * (KiB if parts[1:2] == ["kB"] else 1.0)
    return None


def host_memory_bytes() -> float | None:
    """Total host memory [bytes]: /proc/meminfo on Linux, else the POSIX page count, else None."""
    total = _meminfo_bytes("MemTotal")
    if total is not None:
        return total
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def available_memory_bytes() -> float | None:
    """Memory the probe may use [bytes]: MemAvailable, else the total, else None."""
    return _meminfo_bytes("MemAvailable") or host_memory_bytes()


def _parse_cache_size(text: str) -> float | None:
    """sysfs cache size ("307200K", "32M") in bytes (binary multiples)."""
    text = text.strip().upper()
    factor = {"K": KiB, "M": MiB, "G": GiB}.get(text[-1:], 1.0)
    digits = text[:-1] if text[-1:] in "KMG" else text
    return float(digits) * factor if digits.isdigit() else None


def l3_cache_bytes() -> float | None:
    """The largest cache level of CPU 0 (sysfs), in bytes, or None when it cannot be read."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    sizes = []
    try:
        entries = sorted(base.glob("index*"))
    except OSError:
        return None
    for entry in entries:
        level, size = _read_text(str(entry / "level")), _read_text(str(entry / "size"))
        if level and size and level.strip().isdigit() and int(level) >= 2:
            parsed = _parse_cache_size(size)
            if parsed:
                sizes.append((int(level), parsed))
    return max(sizes)[1] if sizes else None


def core_counts() -> tuple[int | None, int | None]:
    """(logical cores, cores this process may run on)."""
    logical = os.cpu_count()
    usable: int | None
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = logical
    return logical, usable


def blas_info(np: Any) -> tuple[str, int | None]:
    """(BLAS description, thread count or None) for numpy, via threadpoolctl when installed, else
    numpy's build configuration. Informational only: any failure gives "unknown", never an error."""
    try:
        from threadpoolctl import threadpool_info
        for info in threadpool_info():
            if info.get("user_api") == "blas":
                parts = [str(info.get("internal_api") or "blas"), str(info.get("version") or "")]
                extra = ", ".join(f"{k} {info[k]}" for k in ("architecture", "threading_layer") if info.get(k))
                text = " ".join(p for p in parts if p) + (f" ({extra})" if extra else "")
                threads = info.get("num_threads")
                return text, threads if isinstance(threads, int) else None
    except Exception:   # noqa: BLE001 - an optional, informational library: any failure means "not known"
        pass
    threads = None
    for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(var, "")
        if value.isdigit():
            threads = int(value)
            break
    try:
        config = np.show_config(mode="dicts")
        blas = config["Build Dependencies"]["blas"]
        text = " ".join(str(blas.get(k)) for k in ("name", "version") if blas.get(k))
        return (text or "unknown") + " (numpy build configuration)", threads
    except Exception:   # noqa: BLE001 - older numpy (no mode=), or a differently shaped configuration
        pass
    try:
        info = getattr(np.__config__, "blas_opt_info", None) or getattr(np.__config__, "blas_ilp64_opt_info", None)
        if isinstance(info, dict) and info.get("libraries"):
            return ", ".join(map(str, info["libraries"])) + " (numpy build configuration)", threads
    except Exception:   # noqa: BLE001
        pass
    return "unknown", threads
