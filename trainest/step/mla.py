"""Multi-head latent attention on one device (docs/model.md §15.5): its projections' GEMMs, the bytes
the attention kernel moves on the compressed heads, and its extra element-wise traffic.

MLA (DeepSeek-AI 2024, "DeepSeek-V2", arXiv:2405.04434 §2.1; DeepSeek-V3, arXiv:2412.19437 §2.1)
projects the queries through a latent of rank r_q (or directly), and the keys and values through one
latent of rank r_kv plus d_r shared RoPE key dims; every head then has a key of d_qk = d_n + d_r dims
and a value of d_v dims. In Megatron-Core (`MLASelfAttention`) the two down-projections are
replicated on every tensor-parallel rank (computed on all T tokens of the layer, not ÷t); the
up-projections split the heads over t like QKV, the output projection like the dense one.
In training nothing is cached: the latents are activations (trainest/memory.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainest.layout import Job, Layout, Num
from trainest.step.rates import module_rates
from trainest.step.roofline import Op

if TYPE_CHECKING:
    from trainest.model_blocks import MLA
    from trainest.step.rates import LocalShape, Rates

NORM_PASSES = 2.0             # a latent RMSNorm reads and writes its r-wide tensor once (fused), forward
ROPE_COPY_PASSES = 2.0        # RoPE on the shared key dims and the concatenation [k_nope, k_rope], [q_nope, q_rope]:
                              # one read and one write of the a·d_qk/t-wide query and key tensors


def latent_attention(job: Job) -> MLA:
    """The model's MLA block (these functions are called for MLA models only)."""
    if job.model.mla is None:
        raise ValueError(f"{job.model.name} has no multi-head latent attention")
    return job.model.mla


def projection_gemms(job: Job, layout: Layout, r: Rates, x: LocalShape) -> list[Op]:
    """MLA's weight GEMMs on one device, forward (M = T tokens of the micro-batch):
    query down T×r_q×h and up T×(a/t·d_qk)×r_q (or one T×(a/t·d_qk)×h when r_q is None), KV down
    T×(r_kv + d_r)×h, KV up T×(a/t·(d_n + d_v))×r_kv, output T×h×(a/t·d_v) (at the `module_precision` of
    linear_proj). The down-projections are replicated over the t ranks (not ÷t): time, not model FLOPs."""
    m, tp = job.model, layout.tp
    a = latent_attention(job)
    heads = m.heads / tp
    q = ([r.gemm_op("mla.q_down", x.tokens, a.q_lora_rank, m.hidden),
          r.gemm_op("mla.q_up", x.tokens, heads * a.qk_head_dim, a.q_lora_rank)]
         if a.q_lora_rank is not None else [r.gemm_op("mla.q", x.tokens, heads * a.qk_head_dim, m.hidden)])
    return q + [r.gemm_op("mla.kv_down", x.tokens, a.kv_lora_rank + a.qk_rope_head_dim, m.hidden),
                r.gemm_op("mla.kv_up", x.tokens, heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank),
                module_rates(job, r, "linear_proj").gemm_op("proj", x.tokens, m.hidden, heads * a.v_head_dim)]


def attention_bytes(job: Job, layout: Layout, x: LocalShape) -> Num:
    """Bytes the fused attention kernel moves on the compressed heads, forward [B]: read Q and K
    (a/t·d_qk each) and V (a/t·d_v), write O (a/t·d_v): e·T·a/t·(2·d_qk + 2·d_v)."""
    m = job.model
    return job.element_bytes * x.tokens * m.heads / layout.tp * (2.0 * m.qk_head_dim + 2.0 * m.v_head_dim)


def latent_width(job: Job) -> float:
    """r_q + r_kv: the latent widths normalised in every layer (r_q = 0 without query compression)."""
    a = latent_attention(job)
    return float((a.q_lora_rank or 0) + a.kv_lora_rank)


def rope_bytes(job: Job, layout: Layout, x: LocalShape) -> Num:
    """RoPE and the concatenation of the no-RoPE and RoPE parts of the queries and keys, forward [B]:
    ROPE_COPY_PASSES·2·e·T·a/t·d_qk (part of `elementwise_bytes`; what mla_up_proj recompute re-runs
    with the up-projections)."""
    return job.element_bytes * x.tokens * ROPE_COPY_PASSES * 2.0 * job.model.heads / layout.tp * job.model.qk_head_dim


def elementwise_bytes(job: Job, layout: Layout, x: LocalShape) -> Num:
    """MLA's extra element-wise traffic of one layer, forward [B]: the latent RMSNorms
    (NORM_PASSES·e·T·(r_q + r_kv), replicated over t like the down-projections) and RoPE with the
    concatenation of the no-RoPE and RoPE parts of the queries and keys
    (ROPE_COPY_PASSES·2·e·T·a/t·d_qk)."""
    m = job.model
    return job.element_bytes * x.tokens * (NORM_PASSES * latent_width(job)
                                          + ROPE_COPY_PASSES * 2.0 * m.heads / layout.tp * m.qk_head_dim)
