"""The one table that sorts GPU kernels into classes (docs/model.md §17.2), tested on real kernel names
(tests/test_trace.py: DeepSeek-V3's published H800 trace, cuBLAS, CUTLASS, FlashAttention, NCCL, PyTorch's
ATen kernels, Apex/Transformer Engine norms) and on trainest's own op names (its timelines read back).

Each row: a class, what the model calls it (the breakdown class its time is compared with), and a regular
expression searched in the kernel's name, case-insensitive. Rows are tried in order; the first match wins,
so the specific rows (grouped GEMMs before GEMMs, casts before element-wise, collectives by kind before
a generic copy) come first. A kernel no row matches is `unclassified` and reported with its share.
"""

from __future__ import annotations

import re
from functools import lru_cache

from trainest.record import NamedTuple


class Rule(NamedTuple):
    kernel_class: str           # what the kernel is
    model_class: str            # the class of trainest's prediction it is compared with (MODEL_CLASSES)
    pattern: str


# the classes of the comparison: what the model predicts per step (docs/model.md §17.2)
MODEL_CLASSES = ("gemm", "grouped_gemm", "attention", "memory_bound", "optimizer", "collective", "all_to_all",
                 "send_recv", "host_copy")
UNCLASSIFIED = "unclassified"

RULES: tuple[Rule, ...] = (
    # DeepEP's notify kernels (notify_dispatch before a dispatch, cached_notify before a cached dispatch or a
    # combine) exchange the per-rank token counts (a few KB) and hold every rank of the group at a barrier until
    # all have arrived: what they last is the ranks' skew, the device waiting on its peers, not bytes moved. They
    # are counted with the step's idle time (the model's bubble and overhead), not with the all-to-alls
    # (DeepEP's csrc/kernels/internode.cu; the DeepSeek trace: 16 of them, 33 ms of its 113 ms of DeepEP kernels)
    Rule("ep_notify", "idle", r"dpsk::ep::\w+::(cached_)?notify|::ep::(intra|inter)node::(cached_)?notify"),
    # collectives, by kind: NCCL (ncclKernel_/ncclDevKernel_ + op), DeepEP's dispatch/combine (MoE all-to-all),
    # RCCL; before anything else, as their names hold words like "reduce" and "copy"
    Rule("all_to_all", "all_to_all", r"\bdeep_?ep\b|dpsk::ep::|::ep::(intra|inter)node::|ep::cuda::get_dispatch_layout"
                                     r"|alltoall|all_to_all|ep\.(mtp_)?all_to_all"),
    Rule("all_reduce", "collective", r"nccl\w*allreduce|nccl\w*all_reduce|\ball_?reduce\b|tp\.(collectives|all_reduce"
                                     r"|embedding_loss)|dp\.(grad_reduce|replica_all_reduce)|pp\.tied_embedding"),
    Rule("reduce_scatter", "collective", r"nccl\w*reducescatter|reduce_?scatter|zero3\.(reduce|gather_reduce)"),
    Rule("all_gather", "collective", r"nccl\w*allgather|all_?gather|zero3\.gather|dp\.weight_gather"),
    Rule("broadcast", "collective", r"nccl\w*broadcast|nccl\w*reduce\b|nccldevkernel_reduce"),
    Rule("send_recv", "send_recv", r"nccl\w*sendrecv|nccl\w*_send|nccl\w*_recv|pp\.send_recv|cp\.kv_ring"),
    # host-link copies (offload) and device memory copies
    Rule("host_copy", "host_copy", r"memcpy (htod|dtoh)|memcpy (host|pinned)|\bhtod\b|\bdtoh\b|offload\."),
    Rule("device_copy", "memory_bound", r"memcpy|memset|_copy_tensor_kernel|copy_kernel|direct_copy"),
    # the optimizer: fused/multi-tensor Adam, trainest's optimizer.adam
    Rule("optimizer", "optimizer", r"adam|multi_tensor_apply|optimizer\.|lamb_|sgd_"),
    # Mamba-2's state-space scan: mamba_ssm's SSD Triton kernels (ops/triton/ssd_*.py: _chunk_cumsum, _chunk_state,
    # _state_passing, _bmm_chunk, _chunk_scan and their backward kernels), trainest's `scan`; compared with the
    # model's scan, which runs at the fused-attention rate (docs/model.md §16), hence the attention class
    Rule("scan", "attention", r"_chunk_scan|_chunk_state|_state_passing|_bmm_chunk|_chunk_cumsum|selective_scan"
                              r"|^scan$"),
    # attention: FlashAttention 2/3, cuDNN and xFormers fused attention, trainest's `attention` (a windowed
    # layer's `window`)
    Rule("attention", "attention", r"flash|fmha|attn|sdpa|cudnn.*(mha|attention)|^(dense\.)?attention$|^window$"
                                   r"|^(dense\.)?mamba"),
    # MoE expert GEMMs: grouped GEMMs (DeepGEMM, CUTLASS grouped, Megatron's GroupedMLP), trainest's experts_*
    # (DeepGEMM's namespace is `grouped_gemm::` for its dense kernels too: the kernel's own name decides)
    Rule("grouped_gemm", "grouped_gemm", r"[mk]_grouped|grouped_?gemm(?!::)|gemm_?grouped|moe_gemm|^experts[_.]"),
    # dense GEMMs: cuBLAS(Lt) sm80/sm90/xmma/nvjet kernels, CUTLASS device kernels, Triton matmuls, trainest's
    # linear layers (qkv, proj, MLP, MLA projections, shared experts, router, logits, LoRA adapters)
    Rule("gemm", "gemm", r"gemm|xmma|nvjet|cutlass|cublas|matmul|\bsm\d\d_|s\d+gemm"
                         r"|^(dense\.)?(qkv|proj|mlp_up|mlp_down|mla\.|shared_|router|logits|lora(?!_merge)|adapter"
                         r"|mamba_in|mamba_out|in_proj|out_proj|latent_|scores|context)|\.lora_[ab]$"),
    # FP8/FP4 casts and the transposes that go with them; after the GEMMs (a GEMM's name may say fp8),
    # before element-wise (their names hold "transpose")
    Rule("cast", "memory_bound", r"cast|quantize|to_fp8|to_fp4|amax|scale_inv|batched_transpose|utils::transpose"),
    # norms
    Rule("norm", "memory_bound", r"norm"),
    # Mamba-2's short causal convolution (the causal-conv1d package's kernels, trainest's `conv`)
    Rule("conv", "memory_bound", r"causal_conv1d|^conv$"),
    # everything element-wise or a reduction: ATen's elementwise/reduce kernels, activations, rotary, softmax,
    # top-k, gather/scatter, fills, the loss, dequantisation, trainest's elementwise and cross_entropy
    Rule("elementwise", "memory_bound", r"elementwise|reduce_kernel|vectorized|unrolled|rotary|rope|swiglu|gelu|silu"
                                        r"|softmax|topk|gather|scatter|fill|cross_entropy|dequant|dropout|add|mul|div"
                                        r"|arange|index|sum|mean|sigmoid|neg|expand|mapping|count|unique|aux|reduce|"
                                        r"distribution|^elementwise$|^cp_merge$|^lora_merge$"),
)

_COMPILED = tuple((r, re.compile(r.pattern, re.IGNORECASE)) for r in RULES)


# trainest's own op names in a block of a hybrid model (`mamba.scan`, `moe.experts_up`), of a MoE model's dense
# layers (`dense.qkv`) or of the MTP modules (`mtp.qkv`, `mtp.moe.experts_up`), and the attention block's parts
# (`attention.scores`, `attention.cp_merge`): the op's own name follows the block's
OWN_BLOCK = re.compile(r"(dense|attention|mamba|moe|mlp|mtp)\.([a-z0-9_]+(?:\.[a-z0-9_]+)*)")


@lru_cache(maxsize=65536)
def classify(name: str) -> Rule | None:
    """The first rule whose pattern the kernel name matches, None when none does (cached: a trace repeats its
    kernels' names thousands of times); one of trainest's own op names inside a block (OWN_BLOCK) as the op's
    own name."""
    own = OWN_BLOCK.fullmatch(name)
    if own is not None:
        inner = classify(own.group(2))
        if inner is not None:
            return inner
    for rule, rx in _COMPILED:
        if rx.search(name):
            return rule
    return None


def kernel_class(name: str) -> str:
    """The kernel class of `name` (RULES), or UNCLASSIFIED."""
    rule = classify(name)
    return rule.kernel_class if rule is not None else UNCLASSIFIED


def model_class(name: str) -> str:
    """The model class of `name` (MODEL_CLASSES; "idle" for a kernel that waits on the other ranks), or
    UNCLASSIFIED."""
    rule = classify(name)
    return rule.model_class if rule is not None else UNCLASSIFIED
