"""Count what one Llama-style decoder layer saves for its backward, eager and under torch.compile, per token: the
measurement behind docs/model/07-memory.md §7.3 (eager extras, K and V expanded) and the claim that the fused count
is what a compiled layer keeps.

Not part of trainest (it needs PyTorch, which trainest does not depend on, and torchtune's source):

    pip download torchtune==0.3.1 --no-deps && unzip torchtune-0.3.1-py3-none-any.whl -d /tmp/tt
    python tools/saved_tensors.py --torchtune /tmp/tt [--tokens 40] [--shape 3072,8192,24,8]

It builds torchtune 0.3.1's own TransformerSelfAttentionLayer (RMSNorm, MultiHeadAttention with RoPE, SwiGLU
FeedForward, BF16) from its module files, runs one forward on CPU and counts, per token of the layer's input:
  eager    the tensors autograd saves (torch.autograd.graph.saved_tensors_hooks), one per storage;
  compiled the tensors the forward graph hands its backward after AOTAutograd's min-cut partitioner as inductor
           runs it (torch._functorch.partitioners.min_cut_rematerialization_partition, compiler="inductor", with
           inductor's decompositions), one per base tensor (views of one output share its storage).
Tensors without a token dimension (the weights, the RoPE cache) are left out. The layer input x is listed where
the layer itself saves it (compiled: a graph input; eager: the norm keeps its FP32 copy instead).
On torch 2.13 (CPU), Llama 3.2 3B shapes: eager 45.3·h (x_fp32 4h, normalised 2h, output 2h per norm; Q, K, V
expanded, the output 2h each; 8f), compiled 32·h = 16h + 6f (x, both norm outputs, Q, K, V expanded, the output,
the out projection's output, w1 and w3 outputs and their product) — trainest's fused count with K and V at the
query width.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import sys
import types

VIEW_OPS = ("view", "_unsafe_view", "permute", "alias", "transpose", "t", "reshape", "unsqueeze", "squeeze",
            "slice", "select", "expand", "as_strided")


def load_torchtune(root: str):
    """torchtune's module files without its package __init__ (which imports torchao and the datasets)."""
    for name in ("torchtune", "torchtune.modules", "torchtune.utils"):
        mod = types.ModuleType(name)
        mod.__path__ = [f"{root}/{name.replace('.', '/')}"]
        sys.modules[name] = mod
    attention = importlib.import_module("torchtune.modules.attention")
    sys.modules["torchtune.modules"].MultiHeadAttention = attention.MultiHeadAttention
    return (attention, importlib.import_module("torchtune.modules.rms_norm"),
            importlib.import_module("torchtune.modules.position_embeddings"),
            importlib.import_module("torchtune.modules.feed_forward"),
            importlib.import_module("torchtune.modules.transformer"))


def build_layer(root: str, h: int, f: int, heads: int, kv_heads: int):
    import torch
    from torch import nn

    attention, rms, pe, ff, tr = load_torchtune(root)
    d = h // heads
    rope = pe.RotaryPositionalEmbeddings(dim=d, max_seq_len=4096, base=500000)
    attn = attention.MultiHeadAttention(
        embed_dim=h, num_heads=heads, num_kv_heads=kv_heads, head_dim=d, q_proj=nn.Linear(h, heads * d, bias=False),
        k_proj=nn.Linear(h, kv_heads * d, bias=False), v_proj=nn.Linear(h, kv_heads * d, bias=False),
        output_proj=nn.Linear(h, h, bias=False), pos_embeddings=rope, max_seq_len=4096, attn_dropout=0.0)
    mlp = ff.FeedForward(gate_proj=nn.Linear(h, f, bias=False), down_proj=nn.Linear(f, h, bias=False),
                         up_proj=nn.Linear(h, f, bias=False))
    return tr.TransformerSelfAttentionLayer(attn=attn, mlp=mlp, sa_norm=rms.RMSNorm(h, eps=1e-5),
                                            mlp_norm=rms.RMSNorm(h, eps=1e-5)).to(torch.bfloat16)


def eager_saved(layer, x, tokens: int) -> list[tuple[tuple, str, int]]:
    import torch

    skip = {t.untyped_storage().data_ptr() for t in (*layer.parameters(), *layer.buffers(), x)}
    seen: dict[int, tuple[tuple, str, int]] = collections.OrderedDict()

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in skip and tokens in t.shape:
            seen.setdefault(ptr, (tuple(t.shape), str(t.dtype), t.untyped_storage().nbytes()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        layer(x)
    return list(seen.values())


def compiled_saved(layer, x, tokens: int) -> list[tuple[tuple, str, int]]:
    import torch
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch._inductor.decomposition import select_decomp_table

    graphs = {}

    def partition(joint, inputs, **kw):
        fw, bw = min_cut_rematerialization_partition(joint, inputs, compiler="inductor", **kw)
        graphs["fw"], graphs["bw"] = fw, bw
        return fw, bw

    def backend(gm, example_inputs):
        return aot_module_simplified(gm, example_inputs, fw_compiler=lambda g, _: g, bw_compiler=lambda g, _: g,
                                     partition_fn=partition, decompositions=select_decomp_table())

    torch.compile(layer, backend=backend, fullgraph=True)(x)
    fw_nodes = {n.name: n for n in graphs["fw"].graph.nodes}

    def base(node):
        while node.op == "call_function" and getattr(node.target, "__name__", "").split(".")[0] in VIEW_OPS:
            node = node.args[0]
        return node.name

    saved: dict[str, tuple[tuple, str, int]] = collections.OrderedDict()
    for n in graphs["bw"].graph.nodes:
        v = n.meta.get("val")
        if n.op != "placeholder" or n.name.startswith("tangents") or not isinstance(v, torch.Tensor):
            continue
        if tokens not in v.shape:
            continue
        key = base(fw_nodes[n.name]) if n.name in fw_nodes else n.name
        saved.setdefault(key, (tuple(v.shape), str(v.dtype), v.numel() * v.element_size()))
    return list(saved.values())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--torchtune", required=True, help="torchtune 0.3.1's unpacked wheel (the folder holding torchtune/)")
    p.add_argument("--tokens", type=int, default=40, help="tokens of the input (a number no other dimension has)")
    p.add_argument("--shape", default="3072,8192,24,8", help="h,f,heads,kv_heads (default Llama 3.2 3B)")
    args = p.parse_args(argv)
    import torch

    h, f, heads, kv = (int(v) for v in args.shape.split(","))
    torch.manual_seed(0)
    for mode, count in (("eager", eager_saved), ("compiled", compiled_saved)):
        layer = build_layer(args.torchtune, h, f, heads, kv)
        x = torch.randn(1, args.tokens, h, dtype=torch.bfloat16, requires_grad=True)
        rows = count(layer, x, args.tokens)
        for shape, dtype, nbytes in rows:
            print(f"  {mode:8s} {str(shape):24s} {dtype:15s} {nbytes / args.tokens / h:6.3f}·h B per token")
        total = sum(r[2] for r in rows) / args.tokens
        print(f"{mode}: {total:.0f} B per token = {total / h:.2f}·h (h = {h}, f = {f} = {f / h:.3f}·h)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
