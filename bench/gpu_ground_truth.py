"""Ground truth of our own (issue 12): measure a GPU's kernel-level costs and train small GPTs on it.

    python bench/gpu_ground_truth.py --out DIR                        # a GPU machine: 5-7 min on an H200
    python bench/gpu_ground_truth.py --quick --device cpu --out DIR   # the same code on tiny shapes (no GPU)
    python bench/gpu_ground_truth.py --report DIR/measurements.json   # compare with trainest's model (no torch)
    python bench/gpu_ground_truth.py --rewrite-runs DIR/measurements.json   # DIR/runs.yaml again, current MODES

Parts, in this order, each inside the time budget (`--budget-s`, default 420 s from the start of the
script: a part gets a share of what is left, an item that would not fit in it is skipped, and the
output's `skipped` list and the console say so):

1. launch: the launch floor of an empty kernel (`add_` on a one-element tensor) —
   - eager, host-paced: N launches back to back, synchronised at the end (wall time / N: the larger of
     the host's and the device's time per kernel);
   - eager, queue kept full: the device is first held busy (`torch.cuda._sleep`) while the Python loop
     enqueues N kernels, so the host's loop time / N is the host time per launched kernel and the
     device's time from the end of the sleep to the last kernel (CUDA events) / N is the device floor
     per kernel (docs/model.md §2.9: `efficiency.kernel_floor_us`, `efficiency.host_us_per_kernel`);
   - the host time per call of a few one-kernel operators (in place, out of place, a tiny matmul, a
     layer norm, with and without autograd recording);
   - CUDA graphs: N kernels captured once, the graph replayed: device floor and host cost per kernel.
2. gemm: the GEMM rate over a sweep of shapes in bf16 and FP8 (`torch._scaled_mm`, e4m3, tensor-wise
   scales, where the GPU has it): squares 256..16384, the forward GEMMs of a 1024-wide and an 8192-wide
   GPT at tp 1, 2, 4, 8 over M = 512..16384 tokens, the backward GEMMs of the 1024-wide one, and a wave
   staircase (M = 256..8192 by 256 at N = K = 4096). Each shape's time per GEMM is measured by replaying a
   CUDA graph of back-to-back GEMMs (no host time between them; a plain loop for GEMMs over 1 ms), as
   achieved TFLOP/s and as a fraction of the catalog's dense peak, for checking the wave-quantization
   model (docs/model.md §2.2: `trainest/step/roofline.py: wave_efficiency`) with `--report`.
   Operands repeat call after call, so small GEMMs run from L2: the rate a training step's GEMM sees
   when its weights are hot.
3. copy: device-to-device copy bandwidth (read + write bytes per second).
4. training: small-GPT training steps (a decoder-only transformer written here: pre-LayerNorm, causal
   `scaled_dot_product_attention` on the FlashAttention backend, GeLU MLP of 4h, tied embeddings, no
   dropout; bf16 autocast with FP32 master weights, fused AdamW; `--steps` steps each, the first
   `--warmup` discarded, the mean of the rest reported) in three modes:
   - `eager`: plain PyTorch (records: `kernels: eager`);
   - `compile`: `torch.compile` of each transformer block, as torchtitan compiles (`kernels: fused`);
   - `compile-graphs`: the same with `mode="reduce-overhead"`, which replays CUDA graphs (`kernels: fused`).
   trainest's `framework` vocabulary has no entry for a bare PyTorch loop, so the records name the closest
   (MODES below; each record's notes say so): `torchtitan` (Python dispatch of every kernel, eager
   unless compiled), and for `compile-graphs` `cuda_graphs: full` (one graph launch per block and pass,
   docs/model.md §2.10), what the reduce-overhead mode replays. (Until 2026-12-04 the `compile-graphs`
   records named `maxtext`, whose dispatch class has no host time at all; it left the eager embedding,
   loss and optimizer launches and the graph launches out. `--rewrite-runs` rebuilds a run's runs.yaml
   from its measurements.json with the current MODES, no device needed.)

Output (`--out DIR`, rewritten after every part, so a run stopped early still leaves what it measured):
- `DIR/measurements.json`: provenance (date, device, driver, CUDA, PyTorch, clocks and power from
  nvidia-smi before and after the GEMMs), the budget and what was skipped, and every measurement;
- `DIR/runs.yaml`: the training steps as runs (specs/README.md schema) of their own set
  (`set: trainest-ground-truth`), reported apart from the public runs by `trainest validate`.
Only PyTorch (and PyYAML) is needed, not trainest (`--report` needs trainest and not PyTorch).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VOCAB = 50304                      # GPT-2's 50257 padded to a multiple of 64 (nanoGPT's choice)
RUN_SET = "trainest-ground-truth"
SCHEMA = "trainest-gpu-ground-truth/2"

# device name fragment -> trainest catalog name, most specific first ("GH200" before "H200")
CATALOG_NAMES = (("GH200", "gh200"), ("GB200", "gb200"), ("GB300", "gb300"), ("H200", "h200-sxm"),
                 ("H100 PCIe", "h100-pcie"), ("H100", "h100-sxm"), ("H800", "h800-sxm"),
                 ("A100-SXM4-80GB", "a100-80gb-sxm"), ("A100-SXM4-40GB", "a100-40gb-sxm"), ("B200", "b200"),
                 ("L40S", "l40s"), ("L4", "l4"), ("MI300X", "mi300x"))

# ------------------------------------------------------------------------------ budget and settings

DEFAULT_BUDGET_S = 420.0           # 7 minutes: leaves a minute of an 8-minute device run for start-up
PARTS = ("launch", "gemm", "copy", "eager", "compiled")
# a part's share of the time left when it starts: w_part / Σ w of it and the parts after it, so time a
# part does not use goes to the parts after it
PART_WEIGHTS = {"launch": 1.0, "gemm": 6.0, "copy": 0.5, "eager": 5.0, "compiled": 9.0}
PART_MIN_S = {"launch": 2.0, "gemm": 2.0, "copy": 1.0, "eager": 2.0, "compiled": 10.0}   # below this: skip it


@dataclass(frozen=True)
class Settings:
    """Sizes of the measurements: the full run on a GPU or the tiny --quick one."""

    launch_kernels: int            # kernels per launch timing (under CUDA's ~1024 pending launches)
    launch_repeats: int            # timings per launch measurement; the median counts
    graph_replays: int             # replays of the captured launch graph
    gemm_target_s: float           # timed work per GEMM measurement
    gemm_min_calls: int
    gemm_max_calls: int
    graph_max_nodes: int           # GEMMs captured per CUDA graph
    graph_below_s: float           # GEMMs shorter than this are timed by graph replay
    copy_bytes: tuple[int, ...]
    squares: tuple[int, ...]
    tokens: tuple[int, ...]
    widths: tuple[int, ...]        # model widths whose forward GEMMs are swept
    backward_widths: tuple[int, ...]
    tps: tuple[int, ...]
    wave_m: tuple[int, ...]        # the wave staircase: M values at N = K = wave_nk
    wave_nk: int


FULL = Settings(launch_kernels=500, launch_repeats=5, graph_replays=20, gemm_target_s=0.015, gemm_min_calls=3,
                gemm_max_calls=2000, graph_max_nodes=200, graph_below_s=1e-3, copy_bytes=(2 ** 28, 2 ** 30),
                squares=(256, 512, 1024, 2048, 4096, 8192, 16384), tokens=(512, 1024, 2048, 4096, 8192, 16384),
                widths=(1024, 8192), backward_widths=(1024,), tps=(1, 2, 4, 8),
                wave_m=tuple(range(256, 8193, 256)), wave_nk=4096)
QUICK = Settings(launch_kernels=200, launch_repeats=3, graph_replays=3, gemm_target_s=0.002, gemm_min_calls=2,
                 gemm_max_calls=200, graph_max_nodes=20, graph_below_s=1e-3, copy_bytes=(2 ** 22,),
                 squares=(32, 64), tokens=(32, 64), widths=(64,), backward_widths=(64,), tps=(1, 2),
                 wave_m=(16, 32, 48), wave_nk=32)

GEMM_OVERHEAD_S = {"cuda": 0.012, "cpu": 0.002}   # set-up of one measurement (operands, warm call, capture)
COMPILE_FIRST_S = 75.0             # a first torch.compile of a GPT block, fwd + bwd, before it was measured
STEP_FLOP_EFFICIENCY = 0.4         # share of the measured GEMM rate a training step reaches (its estimate)
HOST_S_PER_LAYER_GUESS = 60 * 25e-6   # ~60 kernels per layer per step at ~25 µs each (eager estimate)
MIN_MEASURED_STEPS = 2             # a step time needs at least this many measured steps


def part_cap_s(left_s: float, part: str, parts: tuple[str, ...] = PARTS,
               weights: dict[str, float] = PART_WEIGHTS) -> float:
    """Seconds `part` may use of the `left_s` still in the budget: its weight over the weights of it and
    of the parts after it (what earlier parts left unused goes to the later ones)."""
    rest = parts[parts.index(part):]
    return max(0.0, left_s) * weights[part] / sum(weights[p] for p in rest)


class Budget:
    """The run's time budget from its start, its parts' shares, and what was skipped (with why)."""

    def __init__(self, total_s: float, clock: Callable[[], float] = time.perf_counter, quiet: bool = False):
        self.total_s = total_s
        self.clock = clock
        self.start = clock()
        self.skipped: list[dict[str, Any]] = []
        self.parts: dict[str, dict[str, float]] = {}
        self.quiet = quiet
        self._part: str | None = None
        self._part_start = self.start
        self._part_end = self.start

    def elapsed_s(self) -> float:
        return self.clock() - self.start

    def left_s(self) -> float:
        """Seconds left in the whole budget."""
        return max(0.0, self.total_s - self.elapsed_s())

    def begin(self, part: str) -> bool:
        """Start `part` with its share of what is left; False (and a skip note) when that share is
        under the part's minimum."""
        self.end()
        cap = part_cap_s(self.left_s(), part)
        if cap < PART_MIN_S[part]:
            self.skip(part, None, f"{cap:.1f} s of the budget for it, under its minimum {PART_MIN_S[part]:.0f} s")
            return False
        self._part, self._part_start = part, self.clock()
        self._part_end = self._part_start + cap
        self.parts[part] = {"cap_s": round(cap, 2)}
        return True

    def end(self) -> None:
        if self._part is not None:
            self.parts[self._part]["used_s"] = round(self.clock() - self._part_start, 2)
            self._part = None

    def part_left_s(self) -> float:
        """Seconds left in the current part's share."""
        return max(0.0, self._part_end - self.clock())

    def fits(self, estimate_s: float) -> bool:
        """Whether an item estimated at `estimate_s` fits in what is left of the current part."""
        return estimate_s <= self.part_left_s()

    def over(self) -> bool:
        """Whether the whole budget is spent (an item running past it should stop)."""
        return self.left_s() <= 0.0

    def skip(self, part: str, item: str | None, reason: str) -> None:
        entry = {"part": part, "item": item, "reason": reason, "at_s": round(self.elapsed_s(), 1)}
        self.skipped.append(entry)
        if not self.quiet:
            print(f"skip: {part}{'' if item is None else ' ' + item}: {reason}", flush=True)

    def summary(self) -> dict[str, Any]:
        return {"budget_s": self.total_s, "elapsed_s": round(self.elapsed_s(), 1), "parts": self.parts,
                "skipped": self.skipped}


# ------------------------------------------------------------------------------ pure arithmetic

def catalog_name(device_name: str) -> str | None:
    for fragment, name in CATALOG_NAMES:
        if fragment.lower() in device_name.lower():
            return name
    return None


def gemm_flops(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k


def tflops(m: int, n: int, k: int, seconds_per_gemm: float) -> float:
    """Achieved TFLOP/s of one (m×k)·(k×n) product taking `seconds_per_gemm`."""
    return gemm_flops(m, n, k) / seconds_per_gemm / 1e12


def per_call_us(total_s: float, calls: int) -> float:
    return total_s / calls * 1e6


def calls_for(one_call_s: float, target_s: float, lo: int, hi: int) -> int:
    """Calls to time so that the timed work lasts about `target_s` (one call took `one_call_s`)."""
    if one_call_s <= 0.0:
        return hi
    return max(lo, min(hi, math.ceil(target_s / one_call_s)))


def median(values: Iterable[float]) -> float | None:
    v = [x for x in values if x is not None]
    return statistics.median(v) if v else None


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else float(f"{x:.{digits}g}")


@dataclass(frozen=True)
class GemmShape:
    """One GEMM of the sweep: (m×k)·(k×n), and which GEMMs of which models have this shape."""

    m: int
    n: int
    k: int
    labels: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"


def model_gemms(hidden: int, tp: int, tokens: int, backward: bool = False) -> list[tuple[str, int, int, int]]:
    """(label, m, n, k) of the GEMMs of one dense GPT layer (MHA, MLP 4h) on a tensor-parallel shard of
    `tp`, for `tokens` tokens: forward qkv, proj, fc1, fc2 (Megatron's column/row split); with
    `backward`, each one's data gradient (m, k, n) and weight gradient (n, k, m) as well."""
    h = hidden
    fwd = (("qkv", tokens, 3 * h // tp, h), ("proj", tokens, h, h // tp),
           ("fc1", tokens, 4 * h // tp, h), ("fc2", tokens, h, 4 * h // tp))
    out = []
    for op, m, n, k in fwd:
        out.append((f"h{h}/tp{tp}/{op}.fwd/t{tokens}", m, n, k))
        if backward:
            out.append((f"h{h}/tp{tp}/{op}.dgrad/t{tokens}", m, k, n))
            out.append((f"h{h}/tp{tp}/{op}.wgrad/t{tokens}", n, k, m))
    return out


def gemm_shapes(s: Settings) -> list[GemmShape]:
    """The sweep, most wanted first (a budget cut then loses the least): squares, the model widths'
    forward GEMMs, the backward GEMMs of the small width, the wave staircase. A shape met twice is
    measured once, with every label."""
    order: list[tuple[str, int, int, int]] = [(f"square/{n}", n, n, n) for n in s.squares]
    for h in s.widths:
        for tp in s.tps:
            for t in s.tokens:
                order += model_gemms(h, tp, t)
    for h in s.backward_widths:
        for tp in s.tps:
            for t in s.tokens:
                order += [g for g in model_gemms(h, tp, t, backward=True) if ".fwd/" not in g[0]]
    order += [(f"wave/m{m}", m, s.wave_nk, s.wave_nk) for m in s.wave_m]
    labels: dict[tuple[int, int, int], list[str]] = {}
    for label, m, n, k in order:
        labels.setdefault((m, n, k), []).append(label)
    return [GemmShape(m, n, k, tuple(ls)) for (m, n, k), ls in labels.items()]


def gemm_estimate_s(shape: GemmShape, s: Settings, dtypes: int, rate_flops_per_s: float, device_type: str) -> float:
    """Seconds one shape's measurements take: per dtype the set-up, ~3 untimed calls and the timed
    work (at least the target, at least min_calls calls)."""
    one = gemm_flops(shape.m, shape.n, shape.k) / rate_flops_per_s
    return dtypes * (GEMM_OVERHEAD_S.get(device_type, 0.01) + 3 * one + max(s.gemm_target_s, s.gemm_min_calls * one))


def gemm_entry(shape: GemmShape, dtype: str, seconds_per_gemm: float, method: str, calls: int,
               peak_tflops: float | None) -> dict[str, Any]:
    """One measured shape: time per GEMM, achieved TFLOP/s and its fraction of the dense peak."""
    rate = tflops(shape.m, shape.n, shape.k, seconds_per_gemm)
    return {"m": shape.m, "n": shape.n, "k": shape.k, "dtype": dtype, "labels": list(shape.labels),
            "us": _round(seconds_per_gemm * 1e6), "tflops": _round(rate),
            "fraction_of_peak": None if not peak_tflops else _round(rate / peak_tflops),
            "method": method, "calls": calls}


def launch_summary(raw: dict[str, Any]) -> dict[str, Any]:
    """Per-kernel numbers [µs] from the raw launch timings (seconds for `kernels` launches each):
    `eager_wall_s` host-paced (synchronised at the end); `queued_host_s`/`queued_device_s` with the
    device held busy while the host enqueued (`sleep_s`: how long it was held; the queue stayed full
    when the host finished first); `graph_*` for replays of a captured graph of `graph_kernels` kernels;
    `ops_host_s` the host loop time of other one-kernel operators."""
    n = raw["kernels"]
    host, device, sleep = raw.get("queued_host_s") or [], raw.get("queued_device_s") or [], raw.get("sleep_s") or []
    out: dict[str, Any] = {
        "kernel": raw["kernel"], "kernels_per_timing": n,
        "eager_us_per_kernel": _round(per_call_us(raw["eager_wall_s"], n)),
        "host_us_per_kernel": _round(median(h / n * 1e6 for h in host)) if host else None,
        "device_floor_us": _round(median(d / n * 1e6 for d in device)) if device else None,
        "queue_stayed_full": bool(host) and all(h < s for h, s in zip(host, sleep, strict=True)),
        "host_us_per_op": {op: _round(median(t / n * 1e6 for t in ts)) for op, ts in raw.get("ops_host_s", {}).items()},
        "graph_device_floor_us": None, "graph_host_us_per_kernel": None,
    }
    if raw.get("graph_device_s"):
        kernels = raw["graph_kernels"] * raw["graph_replays"]
        out["graph_device_floor_us"] = _round(per_call_us(raw["graph_device_s"], kernels))
        out["graph_host_us_per_kernel"] = _round(per_call_us(raw["graph_host_s"], kernels))
        out["graph_replay_host_us"] = _round(per_call_us(raw["graph_host_s"], raw["graph_replays"]))
    return out


def suggested_kernel_parameters(launch: dict[str, Any] | None) -> dict[str, Any]:
    """What the launch measurements say about the hardware entry's kernel parameters (docs/model.md §2.9):
    `kernel_floor_us` = the eager device floor with the queue full (graph replay's floor is lower: CUDA
    graphs are outside trainest's model); `host_us_per_kernel` at least the host time of the autograd
    operators (the bare PyTorch dispatch; a training framework adds to it: fit it with `trainest calibrate`
    on the eager runs)."""
    if not launch:
        return {"note": "no launch measurement"}
    floor = launch.get("device_floor_us") if launch.get("queue_stayed_full") else None
    ops = launch.get("host_us_per_op") or {}
    autograd = [v for k, v in ops.items() if k.endswith("autograd") and v is not None]
    out = {"kernel_floor_us": None if floor is None else round(floor, 1),
           "host_us_per_kernel_floor": round(max(autograd), 1) if autograd else launch.get("host_us_per_kernel"),
           "graph_kernel_floor_us": launch.get("graph_device_floor_us")}
    if floor is None:
        out["note"] = "device floor not separable from the host here (no full queue: CPU, or no torch.cuda._sleep)"
    return out


def parse_nvidia_smi_csv(text: str, fields: tuple[str, ...]) -> list[dict[str, str]]:
    """Rows of `nvidia-smi --query-gpu=FIELDS --format=csv` keyed by the queried field names (its header
    line, which renames some fields, is skipped)."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return [dict(zip(fields, (v.strip() for v in ln.split(",")), strict=False)) for ln in lines[1:]]


SMI_FIELDS = ("name", "driver_version", "clocks.sm", "clocks.max.sm", "clocks.mem", "power.draw", "power.limit",
              "temperature.gpu")
SMI_MIN_FIELDS = ("clocks.sm", "clocks.max.sm", "power.draw", "power.limit")


def nvidia_smi() -> dict[str, str] | None:
    """The first GPU's clocks, power and driver from nvidia-smi, or None where it is absent."""
    for fields in (SMI_FIELDS, SMI_MIN_FIELDS):
        try:
            res = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv"],
                                 capture_output=True, text=True, timeout=15, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        if res.returncode == 0:
            rows = parse_nvidia_smi_csv(res.stdout, fields)
            return rows[0] if rows else None
    return None


def catalog_peak_tflops(hardware: str) -> dict[str, float]:
    """Dense peak TFLOP/s by precision from specs/hardware/HARDWARE.yaml ({} where not in the catalog)."""
    path = ROOT / "specs" / "hardware" / f"{hardware}.yaml"
    if not path.is_file():
        return {}
    import yaml
    peaks = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("peak_tflops") or {}
    return {k: float(v) for k, v in peaks.items() if isinstance(v, int | float)}


# ------------------------------------------------------------------------------ training configurations

@dataclass(frozen=True)
class GptConfig:
    """One training configuration: the model's shape and the batch."""

    name: str
    layers: int
    hidden: int
    heads: int
    seq_len: int
    micro_batch: int
    recompute: str                 # none | full

    @property
    def params(self) -> float:
        return self.layers * 12 * self.hidden ** 2 + VOCAB * self.hidden

    @property
    def tokens(self) -> int:
        return self.seq_len * self.micro_batch


EAGER_CONFIGS = (
    # small kernels: host-bound in eager PyTorch (the regime of issue 12)
    GptConfig("gpt-h512-l8-s512-b1", 8, 512, 8, 512, 1, "none"),
    GptConfig("gpt-h1024-l12-s1024-b1", 12, 1024, 16, 1024, 1, "none"),
    GptConfig("gpt-h1024-l12-s1024-b8", 12, 1024, 16, 1024, 8, "none"),
    GptConfig("gpt-h1024-l24-s1024-b1-full", 24, 1024, 16, 1024, 1, "full"),   # vTrain's width and recompute
    # larger ones, device-bound
    GptConfig("gpt-124m-s1024-b16", 12, 768, 12, 1024, 16, "none"),
    GptConfig("gpt-350m-s2048-b8", 24, 1024, 16, 2048, 8, "none"),
    GptConfig("gpt-350m-s2048-b8-full", 24, 1024, 16, 2048, 8, "full"),
    GptConfig("gpt-760m-s2048-b8", 24, 1536, 16, 2048, 8, "none"),
    GptConfig("gpt-1.3b-s2048-b4", 24, 2048, 16, 2048, 4, "none"),
    GptConfig("gpt-1.3b-s2048-b8-full", 24, 2048, 16, 2048, 8, "full"),
    GptConfig("gpt-1.3b-s8192-b1", 24, 2048, 16, 8192, 1, "none"),
    GptConfig("gpt-2.7b-s2048-b4-full", 32, 2560, 32, 2048, 4, "full"),
)
COMPILED_CONFIGS = ("gpt-h1024-l12-s1024-b1", "gpt-h512-l8-s512-b1", "gpt-124m-s1024-b16")   # no recompute
QUICK_CONFIGS = (
    GptConfig("tiny-s64-b2", 2, 64, 4, 64, 2, "none"),
    GptConfig("tiny-s128-b1-full", 2, 64, 4, 128, 1, "full"),
)
FULL_CONFIGS = EAGER_CONFIGS          # the name the tests and earlier notes use


@dataclass(frozen=True)
class Mode:
    name: str
    kernels: str                   # the runs schema's `kernels`
    framework: str                 # the closest of trainest's frameworks (trainest/frameworks.py)
    compile_mode: str | None       # torch.compile mode; None: eager
    note: str
    cuda_graphs: str = "none"      # the runs schema's `cuda_graphs` (none: the key is left out)


MODES = {m.name: m for m in (
    Mode("eager", "eager", "torchtitan", None,
         "Plain eager PyTorch loop; framework: torchtitan is the closest of trainest's frameworks (eager PyTorch, "
         "every kernel dispatched from Python), not what ran."),
    Mode("compile", "fused", "torchtitan", "default",
         "torch.compile (default mode) of each transformer block, as torchtitan compiles; embedding, loss and "
         "AdamW eager; framework: torchtitan is the closest of trainest's frameworks, not what ran."),
    Mode("compile-graphs", "fused", "torchtitan", "reduce-overhead",
         "torch.compile(mode='reduce-overhead') of each transformer block: its forward and backward replay CUDA "
         "graphs, one launch per block and pass (cuda_graphs: full); embedding, loss and AdamW eager; framework: "
         "torchtitan is the closest of trainest's frameworks, not what ran.", "full"),
)}


def config_by_name(name: str) -> GptConfig:
    return next(c for c in EAGER_CONFIGS + QUICK_CONFIGS if c.name == name)


def training_plan(quick: bool, compiled: bool) -> list[tuple[GptConfig, Mode]]:
    """(config, mode) pairs in run order: every config eager, then the compiled configs in both modes."""
    configs = QUICK_CONFIGS if quick else EAGER_CONFIGS
    plan = [(c, MODES["eager"]) for c in configs]
    if compiled:
        names = [c.name for c in QUICK_CONFIGS if c.recompute == "none"] if quick else list(COMPILED_CONFIGS)
        plan += [(config_by_name(n), MODES[m]) for n in names for m in ("compile", "compile-graphs")]
    return plan


def step_estimate_s(cfg: GptConfig, rate_flops_per_s: float) -> float:
    """A rough step time: 6·N·T FLOPs (8·N·T with full recompute) at STEP_FLOP_EFFICIENCY of the measured
    GEMM rate, or the eager host time of its kernels, whichever is longer."""
    flops = (8.0 if cfg.recompute == "full" else 6.0) * cfg.params * cfg.tokens
    return max(flops / (rate_flops_per_s * STEP_FLOP_EFFICIENCY), cfg.layers * HOST_S_PER_LAYER_GUESS)


def training_estimate_s(cfg: GptConfig, mode: Mode, steps: int, rate_flops_per_s: float,
                        compile_s: float | None) -> float:
    """Seconds one (config, mode) takes: building it, its steps, and its compilation (`compile_s`: the
    last compilation measured, else COMPILE_FIRST_S)."""
    build = 1.0 + cfg.params * 1e-9
    compiling = 0.0 if mode.compile_mode is None else (COMPILE_FIRST_S if compile_s is None else compile_s)
    return build + compiling + steps * step_estimate_s(cfg, rate_flops_per_s)


def steps_of(mode: Mode, steps: int, warmup: int, quick: bool) -> tuple[int, int]:
    """(steps, warmup) of one mode's training run: CUDA graph trees warm up over more steps (at least 5)."""
    warmup = max(warmup, 5) if mode.compile_mode == "reduce-overhead" and not quick else warmup
    return max(steps, warmup + MIN_MEASURED_STEPS), warmup


def rewrite_runs(measurements_path: Path) -> Path:
    """Rebuild runs.yaml beside `measurements_path` from its training entries, with the current MODES and
    run_record (what each record says ran: kernels, framework, cuda_graphs, notes); the measured step times
    are the file's. No device and no torch."""
    doc = json.loads(measurements_path.read_text(encoding="utf-8"))
    prov = doc["provenance"]
    res = Results(measurements_path.parent, prov, Budget(float(doc.get("budget", {}).get("budget_s", 0.0))))
    res.data = {k: v for k, v in doc.items() if k not in ("schema", "provenance", "budget")}
    micro = micro_summary(res.data)
    for r in doc.get("training", []):
        mode = MODES[r["mode"]]
        steps, warmup = steps_of(mode, int(prov["steps"]), int(prov["warmup"]), bool(prov.get("quick")))
        res.runs.append(run_record(config_by_name(r["config"]), mode, r, prov["hardware"], provenance_text(prov),
                                   micro, steps, warmup))
    res.write_runs()
    return measurements_path.parent / "runs.yaml"


def run_record(cfg: GptConfig, mode: Mode, result: dict[str, Any], hardware: str, provenance: str,
               micro: str, steps: int, warmup: int) -> dict[str, Any]:
    """One record of the runs schema (specs/README.md)."""
    extra = f" First step (compilation included) {result['first_step_s']:.1f} s." if mode.compile_mode else ""
    graphs = {} if mode.cuda_graphs == "none" else {"cuda_graphs": mode.cuda_graphs}
    return {
        "id": f"{RUN_SET}-{hardware}-{cfg.name}-{mode.name}",
        "source": provenance,
        "model": {"name": cfg.name, "layers": cfg.layers, "hidden": cfg.hidden, "ffn_hidden": 4 * cfg.hidden,
                  "heads": cfg.heads, "kv_heads": cfg.heads, "vocab": VOCAB, "mlp": "gelu", "tied_embeddings": True,
                  "dropout": False},
        "seq_len": cfg.seq_len, "hardware": hardware, "devices": 1, "devices_per_node": 1, "precision": "bf16",
        "parallel": {"tp": 1, "pp": 1, "dp": 1, "cp": 1, "vpp": 1, "zero": 0, "sequence_parallel": False},
        "micro_batch": cfg.micro_batch, "global_batch": cfg.micro_batch, "recompute": cfg.recompute,
        "attention": "flash2", "kernels": mode.kernels, "framework": mode.framework, **graphs,
        "measured": {"step_time_s": round(result["step_time_s"], 6)}, "expressible": True, "confidence": "high",
        "notes": (f"Mode {mode.name}: {mode.note} bf16 autocast, FP32 master weights, fused AdamW, causal SDPA "
                  f"(FlashAttention backend), tied embeddings, learned positions, GeLU, no dropout, one device, no "
                  f"gradient accumulation. Mean of {result['steps_measured']} steps after {warmup} discarded "
                  f"(of {steps}).{extra} {micro}"),
    }


# ------------------------------------------------------------------------------ measuring (torch)

def _sync(torch, device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_calls(torch, device, fn: Callable[[], Any], calls: int) -> float:
    """Seconds of `calls` back-to-back calls of `fn`, synchronised at the end only (CUDA events on a GPU)."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return time.perf_counter() - t0


def _capture(torch, fn: Callable[[], Any], nodes: int):
    """A CUDA graph of `nodes` calls of `fn` (warmed up on a side stream first, as capture needs)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(nodes):
            fn()
    return graph


def measure_calls(torch, device, fn: Callable[[], Any], s: Settings) -> tuple[float, int, str]:
    """(seconds per call, calls timed, method) of `fn`: replays of a CUDA graph of back-to-back calls when
    one call is short (no host time between kernels), else a plain loop synchronised at the end."""
    fn()
    _sync(torch, device)
    one = _time_calls(torch, device, fn, 1)
    calls = calls_for(one, s.gemm_target_s, s.gemm_min_calls, s.gemm_max_calls)
    if device.type == "cuda" and one < s.graph_below_s:
        try:
            nodes = min(calls, s.graph_max_nodes)
            graph = _capture(torch, fn, nodes)
            graph.replay()
            _sync(torch, device)
            replays = max(1, math.ceil(calls / nodes))
            total = _time_calls(torch, device, graph.replay, replays)
            del graph
            return total / (nodes * replays), nodes * replays, "cuda-graph"
        except RuntimeError:                 # capture refused: time the plain loop instead
            _sync(torch, device)
    return _time_calls(torch, device, fn, calls) / calls, calls, "loop"


def fp8_unsupported(torch, device) -> str | None:
    """Why FP8 GEMMs cannot be measured here, or None when `torch._scaled_mm` runs."""
    if device.type != "cuda":
        return "FP8 GEMMs need a CUDA device"
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return f"PyTorch {torch.__version__} has no torch._scaled_mm / float8_e4m3fn"
    if torch.cuda.get_device_capability(device) < (8, 9):
        return f"compute capability {torch.cuda.get_device_capability(device)} has no FP8 tensor cores"
    try:
        a = torch.zeros(32, 32, device=device).to(torch.float8_e4m3fn)
        one = torch.ones((), device=device, dtype=torch.float32)
        torch._scaled_mm(a, a.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        _sync(torch, device)
    except (RuntimeError, TypeError) as e:
        return f"torch._scaled_mm failed: {str(e).splitlines()[0][:200]}"
    return None


def gemm_fn(torch, device, shape: GemmShape, dtype: str) -> Callable[[], Any]:
    """A closure computing one GEMM of `shape` in `dtype` (bf16 | fp32 | fp8) on random operands."""
    m, n, k = shape.m, shape.n, shape.k
    if dtype == "fp8":
        a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=device).to(torch.float8_e4m3fn).t()       # column-major, as _scaled_mm needs
        one = torch.ones((), device=device, dtype=torch.float32)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    tdtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    a = torch.randn(m, k, device=device, dtype=tdtype)
    b = torch.randn(k, n, device=device, dtype=tdtype)
    return lambda: torch.mm(a, b)


def measure_gemms(torch, device, s: Settings, budget: Budget, hardware: str) -> dict[str, Any]:
    """The GEMM sweep, shape by shape while the part's budget lasts."""
    dense = "bf16" if device.type == "cuda" else "fp32"       # CPU bf16 GEMMs are emulated: measure fp32 there
    fp8_reason = fp8_unsupported(torch, device)
    dtypes = [dense] + ([] if fp8_reason else ["fp8"])
    peaks = catalog_peak_tflops(hardware)
    shapes = gemm_shapes(s)
    guess = 300e12 if device.type == "cuda" else 5e10         # the rate for the estimates until one is measured
    best = 0.0
    entries: list[dict[str, Any]] = []
    skipped: list[str] = []
    errors: list[str] = []
    for shape in shapes:
        if not budget.fits(gemm_estimate_s(shape, s, len(dtypes), best or guess, device.type)):
            skipped.append(shape.name)
            continue
        for dtype in dtypes:
            try:                                 # the operands live as long as the closure: this call
                seconds, calls, method = measure_calls(torch, device, gemm_fn(torch, device, shape, dtype), s)
            except Exception as e:  # noqa: BLE001 - out of memory, an unsupported shape: note it, go on
                errors.append(f"{shape.name} {dtype}: {_first_line(e)}")
                continue
            entries.append(gemm_entry(shape, dtype, seconds, method, calls, peaks.get(dtype)))
            if dtype == dense:
                best = max(best, gemm_flops(shape.m, shape.n, shape.k) / seconds)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if skipped:
        budget.skip("gemm", f"{len(skipped)} of {len(shapes)} shapes", "did not fit in the part's share of the budget "
                    f"(first skipped {skipped[0]})")
    return {"dtypes": dtypes, "fp8_unsupported": fp8_reason, "peak_tflops": {d: peaks.get(d) for d in dtypes},
            "timing": "per GEMM: CUDA-graph replay of back-to-back GEMMs under 1 ms, else a loop synchronised at "
                      "the end (CUDA events); operands repeat (L2-warm); random normal data; fp8: e4m3 operands, "
                      "tensor-wise scales of 1, bf16 output",
            "shapes_planned": len(shapes), "shapes_skipped": skipped, "errors": errors, "entries": entries,
            "best_dense_tflops": _round(best / 1e12) if best else None}


def measure_launch(torch, device, s: Settings) -> dict[str, Any]:
    """Raw launch timings (launch_summary turns them into per-kernel numbers)."""
    n = s.launch_kernels
    x, y = torch.zeros(1, device=device), torch.zeros(1, device=device)
    a16, x64 = torch.randn(16, 16, device=device), torch.randn(8, 64, device=device)
    w = torch.randn(1, device=device, requires_grad=True)
    xg, wg = torch.randn(16, 16, device=device), torch.randn(16, 16, device=device, requires_grad=True)
    F = torch.nn.functional
    kernel = lambda: x.add_(1.0)  # noqa: E731
    ops = {"add_": kernel, "add": lambda: x + y, "mm16": lambda: a16 @ a16,
           "layer_norm": lambda: F.layer_norm(x64, (64,)), "add_autograd": lambda: w + 1.0,
           "linear_autograd": lambda: F.linear(xg, wg)}

    def paced(fn: Callable[[], Any]) -> float:
        """Wall seconds of n calls, synchronised at the end (after a few warm-up calls)."""
        for _ in range(20):
            fn()
        _sync(torch, device)
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        _sync(torch, device)
        return time.perf_counter() - t0

    raw: dict[str, Any] = {"kernel": "x.add_(1.0) on a 1-element tensor", "kernels": n, "eager_wall_s": paced(kernel)}
    sleeper = getattr(torch.cuda, "_sleep", None) if device.type == "cuda" else None
    if sleeper is None:
        raw["note"] = ("CPU: operators run synchronously, so each op's host time is its whole time; no separate "
                       "device floor" if device.type != "cuda" else "no torch.cuda._sleep: no queued measurement")
        raw["ops_host_s"] = {name: [paced(fn) for _ in range(s.launch_repeats)] for name, fn in ops.items()}
        return raw
    e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    e0.record()
    sleeper(10_000_000)
    e1.record()
    e1.synchronize()
    cycles_per_s = 10_000_000 / (e0.elapsed_time(e1) / 1e3)   # torch.cuda._sleep's cycles per second
    raw["sleep_cycles_per_s"] = round(cycles_per_s)

    def queued(fn: Callable[[], Any], hold_s: float) -> tuple[float, float, float]:
        """(host loop s, device s, sleep s) of n calls enqueued while the device sleeps for hold_s."""
        e0.record()
        sleeper(int(cycles_per_s * hold_s))
        e1.record()
        h0 = time.perf_counter()
        for _ in range(n):
            fn()
        host = time.perf_counter() - h0
        e2.record()
        e2.synchronize()
        return host, e1.elapsed_time(e2) / 1e3, e0.elapsed_time(e1) / 1e3

    timings = [queued(kernel, 3.0 * raw["eager_wall_s"] + 2e-3) for _ in range(s.launch_repeats)]
    raw["queued_host_s"], raw["queued_device_s"], raw["sleep_s"] = (list(v) for v in zip(*timings, strict=True))
    raw["ops_host_s"] = {}
    for name, fn in ops.items():
        try:
            hold = 3.0 * paced(fn) + 2e-3
            raw["ops_host_s"][name] = [queued(fn, hold)[0] for _ in range(s.launch_repeats)]
        except Exception as e:  # noqa: BLE001 - one operator failing leaves the others
            raw.setdefault("errors", []).append(f"{name}: {_first_line(e)}")
    try:
        graph = _capture(torch, kernel, n)
        graph.replay()
        _sync(torch, device)
        e0.record()
        h0 = time.perf_counter()
        for _ in range(s.graph_replays):
            graph.replay()
        raw["graph_host_s"] = time.perf_counter() - h0
        e1.record()
        e1.synchronize()
        raw["graph_device_s"] = e0.elapsed_time(e1) / 1e3
        raw["graph_kernels"], raw["graph_replays"] = n, s.graph_replays
        del graph
    except Exception as e:  # noqa: BLE001 - no graph capture here: the eager numbers stand
        raw["graph_error"] = _first_line(e)
    return raw


def measure_copy(torch, device, s: Settings, budget: Budget) -> list[dict[str, Any]]:
    """Device-to-device copy: (read + write) bytes per second, per buffer size."""
    out = []
    for nbytes in s.copy_bytes:
        if not budget.fits(0.05 + 4 * 2 * nbytes / (1e12 if device.type == "cuda" else 5e9)):
            budget.skip("copy", f"{nbytes} B", "did not fit")
            continue
        src = torch.empty(nbytes // 4, device=device, dtype=torch.float32)
        dst = torch.empty_like(src)
        fn = lambda src=src, dst=dst: dst.copy_(src)  # noqa: E731
        fn()
        _sync(torch, device)
        one = _time_calls(torch, device, fn, 1)
        calls = calls_for(one, 10 * s.gemm_target_s, 3, 200)
        seconds = _time_calls(torch, device, fn, calls) / calls
        out.append({"bytes": nbytes, "gb_per_s": _round(2.0 * nbytes / seconds / 1e9), "calls": calls,
                    "us": _round(seconds * 1e6)})
        del src, dst, fn
    return out


def build_gpt(torch, cfg: GptConfig):
    """A GPT-2-style decoder (pre-LN, causal SDPA attention, GeLU MLP 4h, tied embeddings, no dropout)."""
    nn, F = torch.nn, torch.nn.functional
    from torch.utils.checkpoint import checkpoint

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = nn.LayerNorm(cfg.hidden)
            self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
            self.proj = nn.Linear(cfg.hidden, cfg.hidden)
            self.ln2 = nn.LayerNorm(cfg.hidden)
            self.fc1 = nn.Linear(cfg.hidden, 4 * cfg.hidden)
            self.fc2 = nn.Linear(4 * cfg.hidden, cfg.hidden)

        def attention(self, x):
            b, s, h = x.shape                                        # (batch, sequence, hidden)
            q, k, v = self.qkv(x).split(h, dim=2)
            q, k, v = (t.view(b, s, cfg.heads, h // cfg.heads).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, heads, s, d_h)
            return self.proj(y.transpose(1, 2).reshape(b, s, h))

        def layer(self, x):
            x = x + self.attention(self.ln1(x))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

        def forward(self, x):
            if cfg.recompute == "full" and self.training:
                return checkpoint(self.layer, x, use_reentrant=False)
            return self.layer(x)

    class Gpt(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(VOCAB, cfg.hidden)
            self.pos = nn.Embedding(cfg.seq_len, cfg.hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg.layers))
            self.ln = nn.LayerNorm(cfg.hidden)

        def forward(self, idx, targets):
            x = self.embed(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            logits = self.ln(x) @ self.embed.weight.t()               # tied output layer
            return F.cross_entropy(logits.float().view(-1, VOCAB), targets.view(-1))

    return Gpt()


def train_steps(torch, device, cfg: GptConfig, mode: Mode, steps: int, warmup: int, budget: Budget) -> dict[str, Any]:
    """Forward + backward + AdamW steps of `cfg` in `mode`: the mean step time [s] of the steps after
    `warmup`. Stops early (keeping at least MIN_MEASURED_STEPS) when the part's share runs out, and
    gives up when the whole budget does."""
    model = opt = loss = None
    times: list[float] = []
    first_s, final_loss = 0.0, math.nan
    graphs = mode.compile_mode == "reduce-overhead"
    mark_step = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)
    try:
        torch.manual_seed(0)
        with torch.device(device):                # initialise on the device (a CPU init of 2.7B takes long)
            model = build_gpt(torch, cfg)
        if mode.compile_mode is not None:
            dynamo = torch._dynamo.config              # room for one graph per block should they differ
            key = "recompile_limit" if hasattr(dynamo, "recompile_limit") else "cache_size_limit"
            setattr(dynamo, key, max(64, getattr(dynamo, key)))
            for block in model.blocks:
                block.compile(mode=None if mode.compile_mode == "default" else mode.compile_mode)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
        idx = torch.randint(0, VOCAB, (cfg.micro_batch, cfg.seq_len), device=device)
        targets = torch.randint(0, VOCAB, (cfg.micro_batch, cfg.seq_len), device=device)
        for step in range(steps):
            if len(times) >= MIN_MEASURED_STEPS and budget.part_left_s() <= 0.0:
                break
            if budget.over():
                raise TimeoutError(f"the budget ran out after {step} steps")
            _sync(torch, device)
            t0 = time.perf_counter()
            if graphs and mark_step is not None:
                mark_step()
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
                loss = model(idx, targets)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            _sync(torch, device)
            dt = time.perf_counter() - t0
            if step == 0:
                first_s = dt
            if step >= warmup:
                times.append(dt)
        final_loss = float(loss.item()) if loss is not None else math.nan
    finally:
        del model, opt, loss
        if mode.compile_mode is not None:
            torch._dynamo.reset()
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if len(times) < MIN_MEASURED_STEPS or not all(math.isfinite(t) for t in times) or not math.isfinite(final_loss):
        raise RuntimeError(f"{cfg.name} {mode.name}: {len(times)} measured steps, loss {final_loss}")
    return {"config": cfg.name, "mode": mode.name, "step_time_s": sum(times) / len(times),
            "steps_measured": len(times), "step_times_s": [round(t, 6) for t in times],
            "first_step_s": round(first_s, 3), "loss": round(final_loss, 4),
            "tokens_per_s": round(cfg.tokens * len(times) / sum(times), 1)}


# ------------------------------------------------------------------------------ provenance and output

def _git_commit() -> str | None:
    try:
        res = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() or None if res.returncode == 0 else None


def cpu_model() -> str | None:
    """The host CPU's model name (/proc/cpuinfo on Linux), which sets the host time per kernel."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def provenance_of(torch, device, args: argparse.Namespace, hardware: str, device_name: str) -> dict[str, Any]:
    p: dict[str, Any] = {
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "script": "bench/gpu_ground_truth.py", "git_commit": _git_commit(), "argv": sys.argv[1:],
        "device": device_name, "hardware": hardware, "device_type": device.type,
        "pytorch": torch.__version__, "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "python": platform.python_version(), "platform": platform.platform(), "cpu": cpu_model(),
        "cpu_count": os.cpu_count(), "quick": args.quick, "steps": args.steps, "warmup": args.warmup,
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        p.update({"capability": list(torch.cuda.get_device_capability(device)),
                  "multiprocessors": props.multi_processor_count,
                  "memory_gib": round(props.total_memory / 2 ** 30, 1),
                  "l2_cache_mib": round(getattr(props, "L2_cache_size", 0) / 2 ** 20, 1) or None,
                  "sdpa_backends": "flash (cuDNN and memory-efficient disabled; math as fallback)"})
        smi = nvidia_smi()
        p["nvidia_smi_start"] = smi
        p["driver"] = (smi or {}).get("driver_version")
    return p


def provenance_text(p: dict[str, Any]) -> str:
    versions = f"PyTorch {p['pytorch']}" + (f", CUDA {p['cuda']}" if p.get("cuda") else ", CPU") + \
        (f", driver {p['driver']}" if p.get("driver") else "")
    return f"trainest bench/gpu_ground_truth.py, measured {p['date_utc']} on {p['device']} ({versions})"


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


@dataclass
class Results:
    out: Path
    provenance: dict[str, Any]
    budget: Budget
    data: dict[str, Any] = field(default_factory=dict)
    runs: list[dict[str, Any]] = field(default_factory=list)

    def write(self) -> None:
        """measurements.json and runs.yaml as they stand (called after every part)."""
        doc = {"schema": SCHEMA, "provenance": self.provenance, "budget": self.budget.summary(), **self.data}
        _write(self.out / "measurements.json", json.dumps(doc, indent=1) + "\n")
        self.write_runs()

    def write_runs(self) -> None:
        """runs.yaml of the training steps so far."""
        import yaml
        text = provenance_text(self.provenance)
        header = (f"# Measured by bench/gpu_ground_truth.py ({text}).\n"
                  f"# Regenerate by running the script again on the device; do not edit by hand.\n"
                  f"# The micro-benchmarks of this run: its measurements.json (see bench/README.md).\n")
        _write(self.out / "runs.yaml", header + yaml.safe_dump({"source": text, "set": RUN_SET, "runs": self.runs},
                                                               sort_keys=False, width=110))


def micro_summary(data: dict[str, Any]) -> str:
    """One sentence of the micro-benchmarks for the runs' notes."""
    parts = []
    launch = data.get("launch") or {}
    if launch.get("device_floor_us") is not None:
        parts.append(f"empty-kernel device floor {launch['device_floor_us']} µs, host {launch['host_us_per_kernel']} "
                     f"µs per launch (eager)")
    gemm = data.get("gemm") or {}
    if gemm.get("best_dense_tflops"):
        parts.append(f"best {gemm['dtypes'][0]} GEMM {gemm['best_dense_tflops']} TFLOP/s")
    copy = data.get("copy") or []
    if copy:
        parts.append(f"copy {max(c['gb_per_s'] for c in copy)} GB/s (read+write)")
    return ("Micro-benchmarks of this run (measurements.json): " + "; ".join(parts) + ".") if parts else ""


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0][:300] if text else ''}"


def _print(obj: dict[str, Any]) -> None:
    print(json.dumps(obj), flush=True)


# ------------------------------------------------------------------------------ report (trainest, no torch)

def report(measurements: dict[str, Any], hardware_name: str | None = None) -> str:
    """Markdown: each measured GEMM's fraction of peak against trainest's model (gemm_efficiency ×
    wave_efficiency of the hardware entry), by shape group, and the kernel parameters the launch part
    suggests against the hardware entry's."""
    from trainest.catalog import load_hardware
    from trainest.step.roofline import gemm_efficiency, wave_efficiency

    hw = load_hardware(hardware_name or measurements["provenance"]["hardware"])
    e, c = hw.efficiency, hw.compute
    lines = [f"# {measurements['provenance']['device']} against trainest's `{hw.name}`", "",
             f"{provenance_text(measurements['provenance'])}.", ""]

    def wave(m: int, n: int, k: int) -> float:
        if not (c.units and c.gemm_tile_m and c.gemm_tile_n):
            return 1.0
        return float(wave_efficiency(m, n, k, units=float(c.units), tile_m=float(c.gemm_tile_m),
                                     tile_n=float(c.gemm_tile_n)))

    def shape_factor(m: int, n: int, k: int, dtype: str) -> float:
        eta = e.gemm * (e.low_precision_gemm if dtype in ("fp8", "fp4") else 1.0)
        return float(gemm_efficiency(m, n, k, eta, e.gemm_half_dim))

    groups: dict[str, list[float]] = {}
    rows = []
    for g in (measurements.get("gemm") or {}).get("entries", []):
        if g.get("fraction_of_peak") is None:
            continue
        w, f = wave(g["m"], g["n"], g["k"]), shape_factor(g["m"], g["n"], g["k"], g["dtype"])
        ratio = g["fraction_of_peak"] / (w * f)
        groups.setdefault(f"{g['dtype']} {g['labels'][0].split('/')[0]}", []).append(math.log(ratio))
        rows.append(f"| {g['m']}×{g['n']}×{g['k']} | {g['dtype']} | {', '.join(g['labels'][:3])}"
                    f"{' …' if len(g['labels']) > 3 else ''} | {g['tflops']} | {g['fraction_of_peak']:.3g} | "
                    f"{w * f:.3g} | {w:.3g} | {ratio:.3g} |")
    if rows:
        lines += ["## GEMMs: measured fraction of dense peak vs trainest's η·Π x/(x+x½)·wave (docs/model.md §2.2)",
                  "", f"`{hw.name}`: η = {e.gemm:g}, x½ = {e.gemm_half_dim:g}, {c.units} units, tile "
                  f"{c.gemm_tile_m}×{c.gemm_tile_n}.", "",
                  "| group | shapes | geometric-mean measured/model | spread (max/min) |", "|---|---|---|---|"]
        for group, logs in groups.items():
            lines.append(f"| {group} | {len(logs)} | {math.exp(statistics.fmean(logs)):.3g} | "
                         f"{math.exp(max(logs) - min(logs)):.3g} |")
        lines += ["", "| M×N×K | dtype | labels | TFLOP/s | measured | model | of which wave | measured/model |",
                  "|---|---|---|---|---|---|---|---|", *rows, ""]
    launch = measurements.get("launch")
    if launch:
        sug = suggested_kernel_parameters(launch)
        lines += ["## Kernels and the host (docs/model.md §2.9)", "",
                  "| quantity | measured | hardware entry |", "|---|---|---|",
                  f"| device floor per kernel, eager, queue full [µs] | {launch.get('device_floor_us')} | "
                  f"kernel_floor_us {e.kernel_floor_s * 1e6:g} |",
                  f"| host per launch, `add_` [µs] | {launch.get('host_us_per_kernel')} | "
                  f"host_us_per_kernel {e.host_per_kernel_s * 1e6:g} |",
                  *(f"| host per call, `{op}` [µs] | {v} | |"
                    for op, v in (launch.get("host_us_per_op") or {}).items()),
                  f"| device floor per kernel, CUDA graph [µs] | {launch.get('graph_device_floor_us')} | |",
                  f"| host per kernel, CUDA graph [µs] | {launch.get('graph_host_us_per_kernel')} | |",
                  "", f"Suggested: {json.dumps(sug)}", ""]
    skipped = (measurements.get("budget") or {}).get("skipped") or []
    if skipped:
        lines += ["## Skipped", "", *(f"- {s['part']} {s['item'] or ''}: {s['reason']}" for s in skipped), ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------ main

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT"),
                    help="output folder: measurements.json and runs.yaml (default: $OUT)")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    ap.add_argument("--quick", action="store_true", help="tiny shapes and sizes (tests without a GPU)")
    ap.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                    help=f"total seconds for every part (default {DEFAULT_BUDGET_S:.0f}); what does not fit is skipped")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--hardware", default=None, help="catalog name of the device (default: from its name)")
    ap.add_argument("--compile", choices=("auto", "on", "off"), default="auto",
                    help="torch.compile runs: auto = on a CUDA device only (inductor's CPU build is slow)")
    ap.add_argument("--skip", default="", help=f"comma-separated parts to leave out ({', '.join(PARTS)})")
    ap.add_argument("--rewrite-runs", metavar="MEASUREMENTS_JSON",
                    help="rebuild the runs.yaml beside it from its training steps with the current modes and exit "
                         "(no torch)")
    ap.add_argument("--report", metavar="MEASUREMENTS_JSON",
                    help="print the comparison of a run's measurements with trainest's model and exit (no torch)")
    args = ap.parse_args(argv)
    if args.rewrite_runs:
        print(f"wrote {rewrite_runs(Path(args.rewrite_runs))}", file=sys.stderr)
        return 0
    if args.report:
        doc = json.loads(Path(args.report).read_text(encoding="utf-8"))
        print(report(doc, args.hardware))
        return 0
    if not args.out:
        ap.error("--out DIR is required (or set $OUT)")
    if args.steps < args.warmup + MIN_MEASURED_STEPS:
        ap.error(f"--steps must exceed --warmup by at least {MIN_MEASURED_STEPS}")
    skip = {p.strip() for p in args.skip.split(",") if p.strip()}
    if skip - set(PARTS):
        ap.error(f"--skip: unknown part(s) {sorted(skip - set(PARTS))}; parts: {', '.join(PARTS)}")
    out = Path(args.out)
    if out.suffix in (".yaml", ".yml", ".json"):
        ap.error(f"--out {out}: expects a folder (measurements.json and runs.yaml go in it)")
    out.mkdir(parents=True, exist_ok=True)
    budget = Budget(args.budget_s)

    import torch

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device; use --device cpu --quick to exercise the script", file=sys.stderr)
        return 1
    s = QUICK if args.quick else FULL
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else (cpu_model() or "cpu")
    hardware = args.hardware or catalog_name(device_name) or "unknown-device"
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)          # FlashAttention (flash2 in the runs schema)
        torch.backends.cuda.enable_mem_efficient_sdp(False)
    prov = provenance_of(torch, device, args, hardware, device_name)
    res = Results(out, prov, budget)
    notes: list[str] = []
    res.data["notes"] = notes
    _print({"device": device_name, "hardware": hardware, "provenance": provenance_text(prov),
            "budget_s": args.budget_s})
    if device.type == "cuda":                                # bring the clocks up before timing anything
        a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 1.0:
            for _ in range(20):
                a @ a
            _sync(torch, device)
        del a
    res.write()

    def part(name: str) -> bool:
        if name in skip:
            budget.skip(name, None, "left out (--skip)")
            return False
        return budget.begin(name)

    def guarded(name: str, fn: Callable[[], None]) -> None:
        """Run one part; a failure is noted and the run goes on (one device run has to give what it can)."""
        try:
            fn()
        except Exception as err:  # noqa: BLE001 - any failure of one part: note it, keep the others
            budget.skip(name, None, f"failed: {_first_line(err)}")
            if device.type == "cuda":
                torch.cuda.empty_cache()
        res.write()

    def launch_part() -> None:
        raw = measure_launch(torch, device, s)
        res.data["launch_raw"] = raw
        res.data["launch"] = launch_summary(raw)
        res.data["suggested"] = suggested_kernel_parameters(res.data["launch"])
        _print({"launch": res.data["launch"]})

    def gemm_part() -> None:
        res.data["gemm"] = g = measure_gemms(torch, device, s, budget, hardware)
        if device.type == "cuda":
            prov["nvidia_smi_after_gemm"] = nvidia_smi()
        _print({"gemm": {"measured": len(g["entries"]), "planned_shapes": g["shapes_planned"],
                         "skipped_shapes": len(g["shapes_skipped"]), "best_dense_tflops": g["best_dense_tflops"],
                         "fp8": g["fp8_unsupported"] or "measured"}})

    def copy_part() -> None:
        res.data["copy"] = measure_copy(torch, device, s, budget)
        _print({"copy": res.data["copy"]})

    for name, fn in (("launch", launch_part), ("gemm", gemm_part), ("copy", copy_part)):
        if part(name):
            guarded(name, fn)

    compiled = args.compile == "on" or (args.compile == "auto" and device.type == "cuda")
    if not compiled:
        notes.append("torch.compile runs left out: " + ("--compile off" if args.compile == "off" else
                     "--compile auto runs them on CUDA only (inductor's C++ build on a CPU is slow); --compile on "
                     "forces them"))
    if compiled and device.type != "cuda":
        notes.append("compile-graphs on a CPU: reduce-overhead has no CUDA graphs there (it runs as compile)")
    rate = ((res.data.get("gemm") or {}).get("best_dense_tflops") or (300.0 if device.type == "cuda" else 0.05)) * 1e12
    micro = micro_summary(res.data)
    training: list[dict[str, Any]] = []
    res.data["training"] = training
    plan = training_plan(args.quick, compiled)
    compile_s: float | None = None
    for phase, in_phase in (("eager", lambda m: m.compile_mode is None), ("compiled", lambda m: m.compile_mode)):
        items = [(c, m) for c, m in plan if in_phase(m)]
        if not items:
            continue
        if not part(phase):
            for c, m in items:
                budget.skip(phase, f"{c.name} {m.name}", "its part was skipped")
            continue
        for cfg, mode in items:
            item = f"{cfg.name} {mode.name}"
            steps, warmup = steps_of(mode, args.steps, args.warmup, args.quick)
            est = training_estimate_s(cfg, mode, steps, rate, compile_s)
            if not budget.fits(est):
                budget.skip(phase, item, f"estimated {est:.0f} s, {budget.part_left_s():.0f} s left in its part")
                continue
            try:
                r = train_steps(torch, device, cfg, mode, steps, warmup, budget)
            except Exception as err:  # noqa: BLE001 - out of memory, a compile failure, the budget: note it, go on
                budget.skip(phase, item, f"failed: {_first_line(err)}")
                res.write()
                continue
            if mode.compile_mode is not None:
                compile_s = max(5.0, r["first_step_s"])
            training.append(r)
            res.runs.append(run_record(cfg, mode, r, hardware, provenance_text(prov), micro, steps, warmup))
            _print({k: r[k] for k in ("config", "mode", "step_time_s", "tokens_per_s", "first_step_s")})
            res.write()
    budget.end()
    if device.type == "cuda":
        prov["nvidia_smi_end"] = nvidia_smi()
    res.write()
    print(f"wrote {out / 'measurements.json'} and {out / 'runs.yaml'} ({len(res.runs)} runs, "
          f"{budget.elapsed_s():.0f} s of {args.budget_s:.0f} s, {len(budget.skipped)} skipped)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
