"""Kernel rates that bench/gpu_ground_truth.py does not measure (issue 31/33 anchors), on one GPU:

    python bench/gpu_kernels_extra.py --out DIR        # a GPU machine, about 1 minute

- attention: causal scaled_dot_product_attention, forward and forward+backward, BF16, per backend (FlashAttention
  as PyTorch ships it, cuDNN), head widths 64/128/192 and sequence 1024..8192, as achieved TFLOP/s over the
  causal FLOPs (2·s²·a·d per product, halved for the mask: the convention of docs/model.md §2.4);
- fp8: torch._scaled_mm e4m3 with tensor-wise and row-wise scales against BF16 at the same shapes.
Writes DIR/kernels_extra.json. Only PyTorch is needed."""

from __future__ import annotations

import argparse
import json
import os
import time


def timed(fn, reps: int = 20) -> float:
    import torch
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps / 1e3


def attention_rows() -> list[dict]:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    rows = []
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        for d in (64, 128, 192):
            for s in (1024, 4096, 8192):
                heads = max(1, 16384 // (d * (s // 1024)))
                q, k, v = (torch.randn(1, heads, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                           for _ in range(3))
                flops = 2 * 2 * s * s * heads * d / 2      # two products, causal half
                try:
                    with sdpa_kernel(backend):
                        fwd = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
                        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                        g = torch.randn_like(out)

                        def both():
                            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                            o.backward(g)
                        total = timed(both, 10)
                    rows.append({"backend": backend.name, "d": d, "s": s, "heads": heads, "fwd_s": fwd,
                                 "fwd_tflops": flops / fwd / 1e12, "bwd_s": total - fwd,
                                 "bwd_tflops": 2.5 * flops / (total - fwd) / 1e12})
                except Exception as exc:                     # a backend that does not take the shape
                    rows.append({"backend": backend.name, "d": d, "s": s, "error": str(exc)[:200]})
                print(json.dumps(rows[-1]), flush=True)
    return rows


def fp8_rows() -> list[dict]:
    import torch
    rows = []
    for m, n, k in ((8192, 8192, 8192), (16384, 8192, 28672), (16384, 28672, 8192), (4096, 4096, 4096)):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        flops = 2 * m * n * k
        row = {"m": m, "n": n, "k": k, "bf16_tflops": flops / timed(lambda: a @ b.t()) / 1e12}
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda")
        try:
            row["fp8_tensorwise_tflops"] = flops / timed(lambda: torch._scaled_mm(
                a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)) / 1e12
        except Exception as exc:
            row["fp8_tensorwise_error"] = str(exc)[:200]
        try:
            sa = torch.ones(m, 1, device="cuda")
            sb = torch.ones(1, n, device="cuda")
            row["fp8_rowwise_tflops"] = flops / timed(lambda: torch._scaled_mm(
                a8, b8.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)) / 1e12
        except Exception as exc:
            row["fp8_rowwise_error"] = str(exc)[:200]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    import torch
    t0 = time.time()
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "fp8": fp8_rows(), "attention": attention_rows()}
    doc["seconds"] = time.time() - t0
    with open(os.path.join(args.out, "kernels_extra.json"), "w") as fh:
        json.dump(doc, fh, indent=1)


if __name__ == "__main__":
    main()
