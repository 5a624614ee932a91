"""The probe's results as a hardware file: peaks per precision, memory, host, provenance of every number
(measured, from the catalog entry, or assumed), the YAML written with its header, and the summary lines."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainest import __version__
from trainest.catalog import CATALOG_NAMES, Hardware, catalog_match, hardware_from_mapping  # noqa: F401 (re-exported)
from trainest.choices import PRECISIONS
from trainest.errors import SpecError, show
from trainest.units import BITS_PER_BYTE, GB, GIGA, MICROSECOND, TERA, MiB

if TYPE_CHECKING:   # imported lazily at run time (only the multi-threaded copy needs it)
    pass
from trainest.probe_host import now_iso, round_sig
from trainest.probe_timing import COPY_CONVENTION, FAST_16BIT_MIN_RATIO, PEER_CONVENTION, CpuProbe, GpuProbe, Sweep

# ------------------------------------------------------------------------- the hardware mapping

def _tflops(rate_per_s: float) -> float:
    return round_sig(rate_per_s / TERA)


def _gflops(rate_per_s: float | None) -> float | None:
    return None if rate_per_s is None else round_sig(rate_per_s / GIGA)


def _gb(value: float | None) -> float | None:
    return None if value is None else round_sig(value / GB)


def _sweep_record(s: Sweep, unit: str) -> dict[str, Any]:
    """A sweep for the provenance block: best rate, its size, every size's rate, how."""
    scale = {"gflop_per_s": GIGA, "tflop_per_s": TERA, "gb_per_s": GB}[unit]
    best = s.best
    return {
        f"best_{unit}": None if best is None else round_sig(best.rate_per_s / scale),
        "best_size": None if best is None else best.size,
        f"sweep_{unit}": {p.size: round_sig(p.rate_per_s / scale) for p in s.points},
        "emulated": s.emulated,
        "how": s.note,
    }


def cpu_peaks(cpu: CpuProbe) -> tuple[dict[str, float], list[str]]:
    """peak_tflops from the CPU's measured GEMM rates, and notes on what was left out and why.

    fp32 is numpy's BLAS rate. A 16-bit rate is given only when a BLAS computed it and it is at least
    FAST_16BIT_MIN_RATIO of the fp32 rate: numpy's float16 GEMM is an emulated loop far slower than fp32,
    which no trainer would run in (never a peak, even when a busy machine measured fp32 low), and numpy
    has no bfloat16 at all. fp64 is recorded but trainest has no fp64 peak.
    """
    fp32 = cpu.gemm_sweep("fp32")
    fp32_best = None if fp32 is None else fp32.best
    if fp32_best is None:
        raise SpecError("the CPU probe measured no fp32 GEMM rate; trainest needs at least one peak")
    fp32_rate = fp32_best.rate_per_s
    peaks = {"fp32": _tflops(fp32_rate)}
    notes = [f"peak_tflops.fp32 = the best sustained numpy float32 GEMM rate measured here "
             f"({_gflops(fp32_rate)} GFLOP/s at n={fp32_best.size}; BLAS: {cpu.blas})."]
    fp16 = cpu.gemm_sweep("fp16")
    if fp16 is not None and fp16.best_rate_per_s is not None:
        rate = fp16.best_rate_per_s
        if not fp16.emulated and rate >= FAST_16BIT_MIN_RATIO * fp32_rate:
            peaks["fp16"] = _tflops(rate)
            notes.append(f"peak_tflops.fp16 = the measured numpy float16 GEMM rate ({_gflops(rate)} GFLOP/s), "
                         f"at least the fp32 rate.")
        else:
            how = "emulated (no BLAS)" if fp16.emulated else "slow"
            notes.append(f"fp16 left out: numpy's float16 GEMM is {how}, "
                         f"{_gflops(rate)} GFLOP/s = {rate / fp32_rate:.2g}x the fp32 rate; a CPU run "
                         f"computes in fp32, so estimate with --precision fp32.")
    notes.append("bf16 left out: numpy has no bfloat16 dtype, so no bf16 rate was measured; an estimate on this "
                 "file without --precision takes the precision it has (fp16 where kept, else fp32).")
    fp64 = cpu.gemm_sweep("fp64")
    if fp64 is not None and fp64.best_rate_per_s is not None:
        notes.append(f"fp64 measured ({_gflops(fp64.best_rate_per_s)} GFLOP/s) but not a trainest precision; "
                     f"recorded under extra.probe only.")
    return peaks, notes


def gpu_peaks(gpu: GpuProbe) -> tuple[dict[str, float], list[str]]:
    """peak_tflops from the GPU's measured GEMM rates (best of each sweep), and notes on the ones not measured."""
    peaks, notes = {}, []
    for s in gpu.gemm:
        best = s.best
        if best is not None and s.label in PRECISIONS:
            peaks[s.label] = _tflops(best.rate_per_s)
            notes.append(f"peak_tflops.{s.label} = measured {_tflops(best.rate_per_s)} TFLOP/s at n={best.size} "
                         f"({s.note}).")
        else:
            notes.append(f"{s.label}: {s.note or 'not measured'}; left out.")
    notes.append("fp4 is never measured by the probe; left out.")
    if not peaks:
        raise SpecError("the GPU probe measured no GEMM rate; trainest needs at least one peak")
    return peaks, notes


def _provenance(cpu: CpuProbe | None, gpu: GpuProbe | None, base: Hardware | None, measured: list[str],
                read: list[str], from_base: list[str], assumed: list[str]) -> dict[str, Any]:
    """The `extra.probe` block: when, with what, what was measured, taken from the catalog, assumed."""
    probed = gpu if gpu is not None else cpu
    if probed is None:   # hardware_mapping, the only caller, has already refused this
        raise RuntimeError("_provenance needs a CPU or a GPU probe")
    record: dict[str, Any] = {
        "date": probed.date,
        "tool": f"trainest probe (trainest {__version__}, trainest/probe.py)",
        "trainest_version": __version__,
        "python": platform.python_version(),
        "measured": measured,
        "read_from_system": read,
        "from_catalog": {"entry": base.name if base else None, "file": base.path if base else None,
                         "fields": from_base},
        "assumed": assumed,
    }
    if cpu is not None:
        record["host"] = {
            "cpu_model": cpu.cpu_model, "logical_cores": cpu.logical_cores, "usable_cores": cpu.usable_cores,
            "memory_gb": _gb(cpu.memory_bytes),
            "l3_mb": None if cpu.l3_bytes is None else round_sig(cpu.l3_bytes / MiB),
            "platform": cpu.platform, "numpy_version": cpu.numpy_version, "blas": cpu.blas,
            "blas_threads": cpu.blas_threads,
            "load_average_1min_at_start": None if cpu.load_average is None else round(cpu.load_average, 2),
        }
        record["cpu"] = {
            "budget_s": cpu.budget_s, "elapsed_s": round(cpu.elapsed_s, 2),
            "gemm": {s.label: _sweep_record(s, "gflop_per_s") for s in cpu.gemm},
            "copy": {s.label: _sweep_record(s, "gb_per_s") for s in cpu.copy},
            "copy_convention": COPY_CONVENTION,
        }
    if gpu is not None:
        record["gpu"] = {
            "device_name": gpu.device_name, "device_count": gpu.device_count, "capability": gpu.capability,
            "memory_gb": _gb(gpu.memory_bytes), "torch_version": gpu.torch_version, "runtime": gpu.runtime,
            "budget_s": gpu.budget_s, "elapsed_s": round(gpu.elapsed_s, 2),
            "gemm": {s.label: _sweep_record(s, "tflop_per_s") for s in gpu.gemm},
            "copy": _sweep_record(gpu.copy, "gb_per_s"), "copy_convention": COPY_CONVENTION,
            "launch_floor_us": round_sig(gpu.launch_floor_s / MICROSECOND),
            "peer": None if gpu.peer is None else _sweep_record(gpu.peer, "gb_per_s"),
            "peer_access": gpu.peer_access, "peer_convention": PEER_CONVENTION,
        }
    return record


def _cpu_parts(cpu: CpuProbe) -> dict[str, Any]:
    peaks, notes = cpu_peaks(cpu)
    bandwidth = cpu.copy_bytes_per_s
    if bandwidth is None:
        raise SpecError("the CPU probe measured no copy bandwidth")
    if cpu.memory_bytes is None:
        raise SpecError("host memory size unknown (no /proc/meminfo, no sysconf page count)")
    measured_copies = [(s, best) for s in cpu.copy if (best := s.best) is not None]
    best_copy, _ = max(measured_copies, key=lambda pair: pair[1].rate_per_s)
    notes.append(f"memory.bandwidth_gb_per_s = the best sustained np.copyto bandwidth measured here "
                 f"({best_copy.label}, {COPY_CONVENTION}); memory.capacity_gb = total host memory.")
    method = (f"trainest probe {cpu.date}: not fitted. peak_tflops and memory.bandwidth_gb_per_s ARE achievable rates "
              f"measured on this machine (best sustained numpy GEMM over a size sweep; np.copyto read+write), so "
              f"gemm = memory = 1.0. gemm_half_dim = 0: no size dependence assumed (the measured sweep is in "
              f"extra.probe.cpu.gemm). attention = 1.0: not measured, charged at the fp32 GEMM rate times trainest's "
              f"own sequence-length and head-dim factors. scale_up/scale_out = 1.0: unused, no fabric. "
              f"layer_overhead_us and overlap_contention: the catalog defaults.")
    return {
        "kind": "cpu",
        "display_name": f"{cpu.cpu_model} ({cpu.usable_cores} cores, probed)",
        "peak_tflops": peaks,
        "memory": {"capacity_gb": _gb(cpu.memory_bytes), "bandwidth_gb_per_s": _gb(bandwidth)},
        "system": {"devices_per_node": 1, "scale_up_gb_per_s": None, "scale_out_gbit_per_s": None},
        "efficiency": {"gemm": 1.0, "gemm_half_dim": 0, "attention": 1.0, "memory": 1.0, "scale_up": 1.0,
                       "scale_out": 1.0, "fitted": False, "method": method},
        "notes": notes,
        "measured": ["peak_tflops." + p for p in peaks] + ["memory.bandwidth_gb_per_s"],
        "read": ["memory.capacity_gb (host MemTotal)"],
        "from_base": [],
        "assumed": ["system.devices_per_node = 1 (one CPU host)", "no scale-up or scale-out fabric",
                    "efficiency block as stated in efficiency.method"],
    }


def _gpu_parts(gpu: GpuProbe, base: Hardware | None) -> dict[str, Any]:
    peaks, notes = gpu_peaks(gpu)
    bandwidth = gpu.copy.best_rate_per_s
    if bandwidth is None:
        raise SpecError("the GPU probe measured no copy bandwidth")
    measured = ["peak_tflops." + p for p in peaks] + ["memory.bandwidth_gb_per_s"]
    from_base, assumed = [], [f"system.devices_per_node = {gpu.device_count} (the GPUs PyTorch sees)"]
    measured_16 = next(peaks[p] * TERA for p in ("bf16", "fp16", "tf32", "fp32") if p in peaks)
    system: dict[str, Any] = {"devices_per_node": gpu.device_count, "scale_up_gb_per_s": None,
                              "scale_out_gbit_per_s": None}
    eff: dict[str, Any] = {"gemm": 1.0, "gemm_half_dim": 0, "attention": 1.0, "memory": 1.0, "scale_up": 1.0,
                           "scale_out": 1.0}
    peer_rate = gpu.peer.best_rate_per_s if gpu.peer is not None else None
    if base is not None:
        e = base.efficiency
        # fused attention reaches an absolute rate (base fraction × base 16-bit peak); keep that rate
        # against the measured 16-bit peak
        eff.update(gemm_half_dim=e.gemm_half_dim, scale_up=e.scale_up, scale_out=e.scale_out,
                   attention=round_sig(min(1.0, e.attention * base.peak_16bit_flops_per_s / measured_16)),
                   flash2_attention=e.flash2_attention, layer_overhead_us=round_sig(e.layer_overhead_s / MICROSECOND),
                   overlap_contention=e.overlap_contention)
        from_base += ["efficiency.gemm_half_dim", "efficiency.attention (rescaled to the measured 16-bit peak)",
                      "efficiency.scale_up", "efficiency.scale_out", "efficiency.flash2_attention",
                      "efficiency.layer_overhead_us", "efficiency.overlap_contention", "power_w",
                      "price_usd_per_hour", "system.scale_out_gbit_per_s", "system.scale_out_latency_us"]
        if base.scale_out_bytes_per_s:
            system["scale_out_gbit_per_s"] = round_sig(base.scale_out_bytes_per_s * BITS_PER_BYTE / GB)
            system["scale_out_latency_us"] = round_sig(base.scale_out_latency_s / MICROSECOND)
        if gpu.device_count >= 2 and base.scale_up_bytes_per_s:
            system.update(scale_up_gb_per_s=_gb(base.scale_up_bytes_per_s),
                          scale_up_domain=min(base.scale_up_domain, gpu.device_count),
                          scale_up_latency_us=round_sig(base.scale_up_latency_s / MICROSECOND))
            from_base += ["system.scale_up_gb_per_s (the measured peer copy is in extra.probe.gpu.peer)",
                          "system.scale_up_latency_us"]
    if "fp8" in peaks:
        eff["low_precision_gemm"] = 1.0   # the FP8 peak is itself a measured rate
    if system["scale_up_gb_per_s"] is None and gpu.device_count >= 2 and peer_rate:
        system.update(scale_up_gb_per_s=_gb(peer_rate), scale_up_domain=gpu.device_count)
        measured.append("system.scale_up_gb_per_s (peer copy 0 -> 1, one direction)")
        assumed.append("scale-up latency: the catalog default")
    method = (f"trainest probe {gpu.date}: not fitted. peak_tflops and memory.bandwidth_gb_per_s ARE achievable rates "
              f"measured on this GPU (best sustained GEMM over a size sweep; Tensor.copy_ read+write), so gemm = "
              f"memory = 1.0" + ("; FP8 measured, so low_precision_gemm = 1.0" if "fp8" in peaks else "") + ". "
              + (f"The rest from catalog entry {base.name}'s efficiency block (attention rescaled so its absolute "
                 f"rate is unchanged)." if base is not None else
                 "No catalog entry: gemm_half_dim = 0 (no size dependence), attention = 1.0 of the measured 16-bit "
                 "rate (not measured; optimistic), scale_up/scale_out = 1.0, layer_overhead_us and "
                 "overlap_contention: the catalog defaults."))
    eff.update(fitted=False, method=method)
    notes.append(f"memory.bandwidth_gb_per_s = the best device-to-device copy measured here ({COPY_CONVENTION}); "
                 f"memory.capacity_gb = the device's total memory; kernel launch floor "
                 f"{round_sig(gpu.launch_floor_s / MICROSECOND)} us (recorded, not used by the model).")
    parts = {
        "kind": base.kind if base is not None else "gpu",
        "display_name": f"{gpu.device_name} (probed)",
        "peak_tflops": peaks,
        "memory": {"capacity_gb": _gb(gpu.memory_bytes), "usable_mib": round(gpu.memory_bytes / MiB),
                   "usable_source": "probed: torch.cuda.get_device_properties total_memory",
                   "bandwidth_gb_per_s": _gb(bandwidth)},
        "system": system, "efficiency": eff, "notes": notes, "measured": measured,
        "read": ["memory.capacity_gb, memory.usable_mib (torch.cuda.get_device_properties)"],
        "from_base": from_base, "assumed": assumed,
    }
    return parts


def hardware_mapping(cpu: CpuProbe | None, gpu: GpuProbe | None, *, base: Hardware | None = None,
                     name: str | None = None) -> dict[str, Any]:
    """A hardware mapping (specs/README.md schema) of the probed machine, accepted by
    `catalog.hardware_from_mapping`.

    With a GPU probe it describes the GPU (the CPU probe, if given, is recorded as the host); else
    the CPU (`kind: cpu`, one device per node, no fabric). `base`, a catalog entry, supplies what a
    probe cannot measure: power, price, scale-out and (with two or more GPUs) scale-up, and the
    efficiency fields that are not rates. Provenance goes under `extra.probe`; `extra.probed: true`
    marks the file (the loader rejects unknown top-level keys and does not read `extra`).
    """
    if gpu is not None:
        parts = _gpu_parts(gpu, base)
        date, what = gpu.date, "GPU 0: " + gpu.device_name
    elif cpu is not None:
        parts = _cpu_parts(cpu)
        date, what = cpu.date, "CPU: " + cpu.cpu_model
    else:
        raise SpecError("nothing was probed: give a CPU or a GPU probe")
    from_base = list(parts["from_base"])
    power = base.power_w if base is not None else None
    price = base.price_usd_per_hour if base is not None else None
    if base is not None and gpu is None:
        from_base += ["power_w", "price_usd_per_hour"]
    mapping: dict[str, Any] = {
        "name": name or ("probed-" + (base.name if base is not None else ("gpu" if gpu is not None else "cpu"))),
        "display_name": parts["display_name"],
        "kind": parts["kind"],
        "peak_tflops": parts["peak_tflops"],
        "memory": parts["memory"],
        "power_w": power,
        "price_usd_per_hour": price,
    }
    if base is not None and price is not None:
        mapping["price_source"] = f"catalog entry {base.name} (its price_source there)"
    mapping.update({
        "system": parts["system"],
        "efficiency": parts["efficiency"],
        "source": [f"measured by trainest probe (trainest {__version__}) on {date}, {what}"]
                  + ([f"power, price and the non-rate fields listed in extra.probe.from_catalog: catalog entry "
                      f"{base.name} ({base.source})"] if base is not None else []),
        "notes": parts["notes"],
        "derived_fields": [f"measured: {', '.join(parts['measured'])}"]
                          + ([f"read from the system: {', '.join(parts['read'])}"] if parts["read"] else [])
                          + ([f"from catalog entry {base.name}: {', '.join(from_base)}"]
                             if base is not None and from_base else [])
                          + [f"assumed: {a}" for a in parts["assumed"]],
        "extra": {"probed": True,
                  "probe": _provenance(cpu, gpu, base, parts["measured"], parts["read"], from_base, parts["assumed"])},
    })
    hardware_from_mapping(mapping, "probed hardware")   # the guarantee: `--hardware FILE` will accept it
    return mapping


# --------------------------------------------------------------------------------------- writing

def check_output_path(path: str | os.PathLike[str]) -> Path:
    """The output file, or a SpecError: it must end in .yaml/.yml (so `--hardware` reads it as a file,
    never as a catalog name), must not be a directory, and its folder must exist and be writable."""
    p = Path(path)
    shown = show(str(p), 200)
    if p.suffix.lower() not in (".yaml", ".yml"):
        raise SpecError(f"probe output {shown} must end in .yaml or .yml (so --hardware reads it as a file)")
    try:
        if p.is_dir():
            example = show(str(p / "probed.yaml"))
            raise SpecError(f"probe output {shown} is a directory; give a file name such as {example}")
        parent = p.parent if str(p.parent) else Path(".")
        if not parent.exists():
            raise SpecError(f"cannot write probe output {shown}: folder {show(str(parent))} does not exist")
        if not parent.is_dir():
            raise SpecError(f"cannot write probe output {shown}: {show(str(parent))} is not a folder")
        if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
            raise SpecError(f"cannot write probe output {shown}: permission denied")
    except OSError as exc:   # a name too long, a broken mount
        raise SpecError(f"cannot write probe output {shown}: {exc.strerror or exc}") from None
    return p


def yaml_header(mapping: dict[str, Any]) -> str:
    """The comment block at the top of a probed file."""
    probe = mapping.get("extra", {}).get("probe", {})
    measured = ", ".join(probe.get("measured", [])) or "nothing"
    read = ", ".join(probe.get("read_from_system", []))
    base = (probe.get("from_catalog") or {}).get("entry")
    lines = [f"Probed by `trainest probe` (trainest {probe.get('trainest_version', __version__)}) on "
             f"{probe.get('date', now_iso())}: {mapping.get('display_name', '')}.",
             f"Measured on this machine: {measured}." + (f" Read from the system: {read}." if read else ""),
             (f"Taken from catalog entry {base}: see derived_fields." if base else "Nothing taken from the catalog."),
             "The efficiency block is not fitted (efficiency.method says why each value is what it is).",
             "Provenance: extra.probe. Re-run `trainest probe -o FILE` to refresh; edit by hand at will."]
    return "".join(f"# {line}\n" for line in lines)


def write_hardware_yaml(mapping: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Validate `mapping`, then write it as YAML with a header comment to `path` (a file is replaced,
    a directory never); SpecError when the path cannot be written."""
    import yaml

    p = check_output_path(path)
    hardware_from_mapping(mapping, str(p))
    text = yaml_header(mapping) + yaml.safe_dump(mapping, sort_keys=False, width=110, allow_unicode=True)
    try:
        p.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot write probe output {show(str(p), 200)}: {exc.strerror or exc}") from None
    return p


# ---------------------------------------------------------------------------------- the command

def summary_lines(cpu: CpuProbe | None, gpu: GpuProbe | None, mapping: dict[str, Any], path: Path,
             elapsed_s: float) -> list[str]:
    from trainest.report import fmt_gib, fmt_seconds, fmt_si

    lines = []
    if cpu is not None:
        rates = ", ".join(f"{s.label}{' (emulated)' if s.emulated else ''} {fmt_si(s.best_rate_per_s, 'FLOP/s')}"
                          for s in cpu.gemm if s.best is not None)
        lines.append(f"cpu: {cpu.cpu_model}, {cpu.usable_cores} cores, "
                     f"{fmt_gib(cpu.memory_bytes) if cpu.memory_bytes else 'memory unknown'}")
        lines.append(f"  GEMM {rates}; copy {fmt_si(cpu.copy_bytes_per_s, 'B/s')} (read+write)")
    if gpu is not None:
        rates = ", ".join(f"{s.label} {fmt_si(s.best_rate_per_s, 'FLOP/s')}" for s in gpu.gemm if s.best is not None)
        lines.append(f"gpu: {gpu.device_name} x{gpu.device_count}, {fmt_gib(gpu.memory_bytes)}")
        lines.append(f"  GEMM {rates}; copy {fmt_si(gpu.copy.best_rate_per_s, 'B/s')} (read+write); "
                     f"launch floor {gpu.launch_floor_s / MICROSECOND:.3g} us"
                     + (f"; peer {fmt_si(gpu.peer.best_rate_per_s, 'B/s')}" if gpu.peer and gpu.peer.best else ""))
    lines.append(f"wrote {path} (hardware {mapping['name']!r}, peaks: {', '.join(mapping['peak_tflops'])}) "
                 f"in {fmt_seconds(elapsed_s)}")
    if gpu is None:
        lines.append(f"use it: trainest estimate --hardware {path} --precision fp32 ...")
    return lines
