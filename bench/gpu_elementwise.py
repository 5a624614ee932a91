"""The element-wise kernels of one Llama-style layer on one GPU, timed (issue 31: "element-wise bytes per kernel as
launched", docs/model.md §2.5):

    python bench/gpu_elementwise.py --out DIR        # a GPU machine, under a minute

For T tokens of hidden h and MLP width f (bf16): RMSNorm, the residual add, SwiGLU's silu(gate)·up and the rotary
embedding of q and k, each forward and forward+backward, eager (PyTorch operators, as Hugging Face modules run
them) and under torch.compile (fused, as torchtitan compiles them). Each row gives the time, the bytes the kernels
must move at least (their inputs and outputs once), the effective bandwidth of that minimum, and the time per
token per hidden element, so that trainest's per-element byte counts (H_WIDE_PASSES, F_WIDE_PASSES, ROPE_PASSES)
can be set against the kernels' time at the measured copy bandwidth. Writes DIR/elementwise.json; PyTorch only."""

from __future__ import annotations

import argparse
import json
import os
import time

from gpu_kernels_extra import timed     # bench/: CUDA-event timing of a callable (run as python bench/...)


def ops(torch, T: int, h: int, f: int, heads: int, kv: int, d: int):
    """name -> (forward function of fresh inputs, minimal forward bytes)."""
    bf = torch.bfloat16
    x = torch.randn(T, h, device="cuda", dtype=bf, requires_grad=True)
    y = torch.randn(T, h, device="cuda", dtype=bf, requires_grad=True)
    w = torch.ones(h, device="cuda", dtype=bf, requires_grad=True)
    gate = torch.randn(T, f, device="cuda", dtype=bf, requires_grad=True)
    up = torch.randn(T, f, device="cuda", dtype=bf, requires_grad=True)
    q = torch.randn(T, heads, d, device="cuda", dtype=bf, requires_grad=True)
    k = torch.randn(T, kv, d, device="cuda", dtype=bf, requires_grad=True)
    cos = torch.randn(T, 1, d, device="cuda", dtype=bf)
    sin = torch.randn(T, 1, d, device="cuda", dtype=bf)

    def rmsnorm():                      # Hugging Face LlamaRMSNorm
        v = x.float()
        v = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6)
        return w * v.to(bf)

    def residual():
        return x + y

    def swiglu():
        return torch.nn.functional.silu(gate) * up

    def rotate(t):
        t1, t2 = t[..., : d // 2], t[..., d // 2:]
        return torch.cat((-t2, t1), dim=-1)

    def rope():                         # Hugging Face apply_rotary_pos_emb
        return torch.cat(((q * cos + rotate(q) * sin).flatten(1), (k * cos + rotate(k) * sin).flatten(1)), 1)

    e = 2
    return {"rmsnorm": (rmsnorm, e * T * h * 2), "residual_add": (residual, e * T * h * 3),
            "swiglu": (swiglu, e * T * f * 3), "rope_qk": (rope, e * T * (heads + kv) * d * 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    import torch
    t0 = time.time()
    rows = []
    for T, h, f, heads, kv, d in ((8192, 4096, 14336, 32, 8, 128), (16384, 8192, 28672, 64, 8, 128)):
        table = ops(torch, T, h, f, heads, kv, d)
        for mode in ("eager", "compile"):
            for name, (fn, min_bytes) in table.items():
                run = torch.compile(fn) if mode == "compile" else fn
                try:
                    fwd = timed(lambda: run(), 30)
                    out = run()
                    g = torch.randn_like(out)

                    def both():
                        run().backward(g)
                    total = timed(both, 10)
                    row = {"T": T, "h": h, "f": f, "op": name, "mode": mode, "fwd_s": fwd, "bwd_s": total - fwd,
                           "min_fwd_bytes": min_bytes, "fwd_gb_per_s_of_min": min_bytes / fwd / 1e9,
                           "fwd_ns_per_token_hidden": fwd / (T * h) * 1e9}
                except Exception as exc:
                    row = {"T": T, "op": name, "mode": mode, "error": str(exc)[:200]}
                rows.append(row)
                print(json.dumps(row), flush=True)
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": rows, "seconds": time.time() - t0}
    with open(os.path.join(args.out, "elementwise.json"), "w") as fh:
        json.dump(doc, fh, indent=1)


if __name__ == "__main__":
    main()
