"""Ground truth of our own: measure a GPU and train small GPTs on it, write the step times as runs.

    python bench/gpu_ground_truth.py                        # on a GPU machine (about 3-5 minutes on an H200)
    python bench/gpu_ground_truth.py --quick --device cpu   # the same code on tiny shapes (tests, no GPU)

What it measures, each with full provenance (date, device name, PyTorch and CUDA versions, settings):

1. the dense GEMM rate: bf16 (and FP8 through `torch._scaled_mm` where the GPU has it) on square
   matrices, as achieved TFLOP/s and as a fraction of the catalog's dense peak;
2. the device-to-device copy bandwidth (read + write bytes per second);
3. training steps of several small GPT configurations (sizes, micro-batches, sequence lengths, with and
   without full activation recomputation): a decoder-only transformer written here with PyTorch
   (pre-LayerNorm, causal `scaled_dot_product_attention`, GeLU MLP of 4h, tied embeddings), bf16
   autocast with FP32 master weights, fused AdamW; `--steps` steps each, the first `--warmup` discarded,
   the mean of the rest reported.

The model runs eager (no torch.compile), so its records say `kernels: eager` (docs/model.md §2.5; its
native LayerNorm kernel moves fewer bytes than the RMSNorm that constant counts, so expect the eager
estimate to lean slow by a little on these GeLU/LayerNorm models).
The runs are written in the runs schema of specs/README.md (`trainest validate --runs FILE` compares
them; `trainest calibrate --runs FILE` fits the GPU's efficiencies to them). Only PyTorch is needed
(not a dependency of trainest: this script runs where a GPU and PyTorch are).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VOCAB = 50304                      # GPT-2's 50257 padded to a multiple of 64 (nanoGPT's choice)

# device name fragment -> trainest catalog name
CATALOG_NAMES = (("H200", "h200-sxm"), ("H100", "h100-sxm"), ("H800", "h800-sxm"), ("A100-SXM4-80GB", "a100-80gb-sxm"),
                 ("A100-SXM4-40GB", "a100-40gb-sxm"), ("B200", "b200"), ("GB200", "gb200"), ("L40S", "l40s"),
                 ("L4", "l4"), ("MI300X", "mi300x"))


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


FULL_CONFIGS = (
    GptConfig("gpt-124m-s1024-b16", 12, 768, 12, 1024, 16, "none"),
    GptConfig("gpt-350m-s2048-b8", 24, 1024, 16, 2048, 8, "none"),
    GptConfig("gpt-350m-s2048-b8-full", 24, 1024, 16, 2048, 8, "full"),
    GptConfig("gpt-760m-s2048-b8", 24, 1536, 16, 2048, 8, "none"),
    GptConfig("gpt-1.3b-s2048-b4", 24, 2048, 16, 2048, 4, "none"),
    GptConfig("gpt-1.3b-s2048-b8-full", 24, 2048, 16, 2048, 8, "full"),
    GptConfig("gpt-1.3b-s8192-b1", 24, 2048, 16, 8192, 1, "none"),
    GptConfig("gpt-2.7b-s2048-b4-full", 32, 2560, 32, 2048, 4, "full"),
)
QUICK_CONFIGS = (
    GptConfig("tiny-s64-b2", 2, 64, 4, 64, 2, "none"),
    GptConfig("tiny-s128-b1-full", 2, 64, 4, 128, 1, "full"),
)


def catalog_name(device_name: str) -> str | None:
    for fragment, name in CATALOG_NAMES:
        if fragment.lower() in device_name.lower():
            return name
    return None


def _sync(torch, device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(torch, device, fn, repeats: int) -> float:
    """Mean seconds of `fn()` over `repeats` calls, after one warm-up call."""
    fn()
    _sync(torch, device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    _sync(torch, device)
    return (time.perf_counter() - t0) / repeats


def gemm_tflops(torch, device, n: int, dtype, repeats: int) -> float:
    """Achieved TFLOP/s of an n×n by n×n matrix product (2n³ FLOPs)."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    return 2.0 * n ** 3 / _timed(torch, device, lambda: a @ b, repeats) / 1e12


def fp8_gemm_tflops(torch, device, n: int, repeats: int) -> float | None:
    """Achieved TFLOP/s of an FP8 (e4m3) product through torch._scaled_mm, or None where unsupported."""
    if device.type != "cuda" or not hasattr(torch, "_scaled_mm") or torch.cuda.get_device_capability(device) < (8, 9):
        return None
    try:
        a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=device)
        return 2.0 * n ** 3 / _timed(torch, device, lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one,
                                                                               out_dtype=torch.bfloat16),
                                     repeats) / 1e12
    except (RuntimeError, TypeError):
        return None


def copy_gb_per_s(torch, device, nbytes: int, repeats: int) -> float:
    """Device-to-device copy: (read + write) bytes per second [GB/s]."""
    src = torch.empty(nbytes // 4, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    return 2.0 * nbytes / _timed(torch, device, lambda: dst.copy_(src), repeats) / 1e9


def build_gpt(torch, cfg: GptConfig):
    """A GPT-2-style decoder (pre-LN, causal SDPA attention, GeLU MLP 4h, tied embeddings)."""
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


def train_step_s(torch, device, cfg: GptConfig, steps: int, warmup: int) -> float:
    """Mean step time [s] of forward + backward + AdamW over steps − warmup measured steps."""
    torch.manual_seed(0)
    model = build_gpt(torch, cfg).to(device)
    fused = device.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused)
    idx = torch.randint(0, VOCAB, (cfg.micro_batch, cfg.seq_len), device=device)
    targets = torch.randint(0, VOCAB, (cfg.micro_batch, cfg.seq_len), device=device)
    dtype = torch.bfloat16
    times = []
    for step in range(steps):
        _sync(torch, device)
        t0 = time.perf_counter()
        with torch.autocast(device_type=device.type, dtype=dtype):
            loss = model(idx, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        _sync(torch, device)
        if step >= warmup:
            times.append(time.perf_counter() - t0)
    if not all(math.isfinite(t) for t in times) or not math.isfinite(loss.item()):
        raise RuntimeError(f"{cfg.name}: non-finite loss or time")
    del model, opt
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return sum(times) / len(times)


def run_record(cfg: GptConfig, step_s: float, hardware: str, provenance: str, micro: str) -> dict:
    """One record of the runs schema (specs/README.md)."""
    return {
        "id": f"trainest-ground-truth-{hardware}-{cfg.name}",
        "source": provenance,
        "model": {"name": cfg.name, "layers": cfg.layers, "hidden": cfg.hidden, "ffn_hidden": 4 * cfg.hidden,
                  "heads": cfg.heads, "kv_heads": cfg.heads, "vocab": VOCAB, "mlp": "gelu", "tied_embeddings": True},
        "seq_len": cfg.seq_len, "hardware": hardware, "devices": 1, "devices_per_node": 1, "precision": "bf16",
        "parallel": {"tp": 1, "pp": 1, "dp": 1, "cp": 1, "vpp": 1, "zero": 0, "sequence_parallel": False},
        "micro_batch": cfg.micro_batch, "global_batch": cfg.micro_batch, "recompute": cfg.recompute,
        "attention": "flash2", "kernels": "eager", "measured": {"step_time_s": round(step_s, 6)}, "expressible": True,
        "confidence": "high",
        "notes": (f"PyTorch eager, bf16 autocast, FP32 master weights, fused AdamW, causal SDPA (FlashAttention-2 "
                  f"class backend), tied embeddings, learned positions, one device, no gradient accumulation. "
                  f"{micro}"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "specs" / "runs" / "trainest-ground-truth.yaml"))
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    ap.add_argument("--quick", action="store_true", help="tiny shapes and sizes (tests without a GPU)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--hardware", default=None, help="catalog name of the device (default: from its name)")
    args = ap.parse_args(argv)
    if args.steps <= args.warmup:
        ap.error("--steps must exceed --warmup")

    import torch
    import yaml

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device; use --device cpu --quick to exercise the script", file=sys.stderr)
        return 1
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or "cpu")
    hardware = args.hardware or catalog_name(device_name) or "unknown-device"
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    versions = f"PyTorch {torch.__version__}, CUDA {torch.version.cuda}" if device.type == "cuda" else \
        f"PyTorch {torch.__version__}, CPU"
    provenance = f"trainest bench/gpu_ground_truth.py, measured {when} on {device_name} ({versions})"

    n, nbytes, repeats = (256, 2 ** 24, 3) if args.quick else (8192, 2 ** 30, 20)
    micro = {"gemm_n": n,
             "bf16_gemm_tflops": round(gemm_tflops(torch, device, n, torch.bfloat16 if device.type == "cuda"
                                                   else torch.float32, repeats), 2),
             "fp8_gemm_tflops": fp8_gemm_tflops(torch, device, n, repeats),
             "copy_gb_per_s": round(copy_gb_per_s(torch, device, nbytes, repeats), 1)}
    if micro["fp8_gemm_tflops"] is not None:
        micro["fp8_gemm_tflops"] = round(micro["fp8_gemm_tflops"], 2)
    micro_text = (f"Micro-benchmarks on this device: {micro['bf16_gemm_tflops']} TFLOP/s bf16 GEMM at n={n}, "
                  f"FP8 GEMM {micro['fp8_gemm_tflops']} TFLOP/s, copy {micro['copy_gb_per_s']} GB/s (read+write). "
                  f"{args.steps} steps, first {args.warmup} discarded.")
    print(json.dumps({"device": device_name, "hardware": hardware, "provenance": provenance, **micro}), flush=True)

    runs = []
    for cfg in QUICK_CONFIGS if args.quick else FULL_CONFIGS:
        step_s = train_step_s(torch, device, cfg, args.steps, args.warmup)
        runs.append(run_record(cfg, step_s, hardware, provenance, micro_text))
        print(json.dumps({"config": cfg.name, "step_time_s": step_s,
                          "tokens_per_s": cfg.micro_batch * cfg.seq_len / step_s}), flush=True)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    header = (f"# Measured by bench/gpu_ground_truth.py ({provenance}).\n"
              f"# Regenerate by running the script again on the device; do not edit by hand.\n")
    out.write_text(header + yaml.safe_dump({"source": provenance, "runs": runs}, sort_keys=False, width=110),
                   encoding="utf-8")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], out.name).write_text(out.read_text(encoding="utf-8"), encoding="utf-8")
    print(f"wrote {out} ({len(runs)} runs)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
