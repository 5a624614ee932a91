"""Kernels and the host (docs/model.md §2.8): how many kernels one layer launches per pass, the
device's floor per kernel, and the host's time to dispatch them. A step whose kernels are shorter
than the host's time to launch them is host-bound: the device waits.

Kernel counts are operator counts of the frameworks' layer code (not fitted):
- fused (Megatron-Core/Transformer Engine, torch.compile, XLA): per layer forward 2 norms, 4 GEMMs,
  2 fused bias-dropout-add (residual) kernels and 1 fused activation (bias-GeLU or SwiGLU)
  (megatron/core/transformer/transformer_layer.py, mlp.py; apex/TE fused LayerNorm);
- eager PyTorch: each norm ~7 kernels (cast, square, mean, rsqrt, scale, weight, cast back), the
  residual adds and dropouts separately, GeLU 1 kernel and SwiGLU 2 (silu, product);
- attention: a fused (flash) forward is 1 kernel and its backward 3 (FlashAttention-2: the
  preprocessing dot(dO, O), the main kernel, the dQ conversion; Dao 2023); standard attention
  launches the score GEMM, the fused scale-mask-softmax, the dropout (when the model has dropout),
  the context GEMM and a transpose of the output, and in the backward two GEMMs per GEMM, the
  softmax and dropout backward and the transpose;
- backward: every GEMM becomes two (data and weight gradient), every element-wise kernel about two
  (its backward and, for norms, the parameter-gradient reduction).
- a mixture-of-experts layer (Megatron-Core alltoall dispatcher, grouped GEMM, Transformer Engine fused
  permutation): the router GEMM, one grouped GEMM each for the experts' up and down projections, the
  shared experts' two GEMMs, and MOE_ROUTING_KERNELS routing kernels (score activation, top-k,
  permute, sort by local expert, unsort, unpermute); MLA: its 4 projections (5 with query compression)
  instead of QKV and the output projection.
Each tensor-parallel collective, and each expert-parallel all-to-all, is one more launch for the host
(torch.distributed + NCCL enqueue).
"""

from __future__ import annotations

from trainest import xp
from trainest.frameworks import FRAMEWORKS
from trainest.layout import Job, Layout, Num
from trainest.step.roofline import Op, OpTime

FUSED_ELEMENTWISE_KERNELS = 5.0     # 2 norms, 2 bias-dropout-add, 1 fused activation, per layer forward
EAGER_NORM_KERNELS = 7.0            # an unfused FP32 norm: cast, square, mean, rsqrt, scale, weight, cast back
EAGER_ACTIVATION_KERNELS = {"gelu": 1.0, "swiglu": 2.0}
FLASH_KERNELS = (1.0, 3.0)          # fused attention: forward, backward (FlashAttention-2)
# standard attention: scores, softmax, context, transpose; backward 2+2 GEMMs, softmax, transpose
STANDARD_ATTENTION_KERNELS = (4.0, 7.0)
GEMM_BACKWARD_KERNELS = 2.0         # data gradient and weight gradient
ELEMENTWISE_BACKWARD_RATIO = 2.0    # element-wise backward kernels per forward kernel
MOE_ROUTING_KERNELS = 6.0           # a MoE layer's routing kernels, forward (module docstring)
ALL_TO_ALLS_PER_MOE_LAYER = 4.0     # dispatch and combine forward, their gradients backward


def gemm_kernels(job: Job) -> float:
    """Weight-GEMM kernels of the mean layer's forward: QKV and the output projection (MLA: 4 or 5
    projections), the MLP's up (with gate) and down; a MoE layer has the router, two grouped expert
    GEMMs and the shared experts' two instead of the MLP's (weighted by the layer kinds' shares)."""
    m = job.model
    attention = 2.0 if m.mla is None else (5.0 if m.mla.q_lora_rank is not None else 4.0)
    if m.moe is None:
        return attention + 2.0
    moe_mlp = 3.0 + (2.0 if m.moe.shared_experts else 0.0)
    return attention + (2.0 * m.dense_layers_count + moe_mlp * m.moe_layers) / m.layers


def moe_layer_share(job: Job) -> float:
    """L_m/L: the share of the layers that are MoE layers (0 for a dense model)."""
    return 0.0 if job.model.moe is None else job.model.moe_layers / job.model.layers


def elementwise_kernels(job: Job) -> float:
    """Element-wise kernels of one dense layer's forward: fused 5; eager 2·7 (norms) + 2 residual adds +
    2 dropouts (when the model has dropout) + the activation's 1 (GeLU) or 2 (SwiGLU). A MoE layer
    adds MOE_ROUTING_KERNELS (layer.py: MlpPart.extra_kernels; pass_kernels: the mean layer's)."""
    if job.kernels != "eager":
        return FUSED_ELEMENTWISE_KERNELS
    dropouts = 2.0 if job.model.dropout else 0.0
    return 2.0 * EAGER_NORM_KERNELS + 2.0 + dropouts + EAGER_ACTIVATION_KERNELS[job.model.mlp]


def attention_kernels(job: Job) -> tuple[float, float]:
    """(forward, backward) kernels of the attention core: fused 1 and 3; standard 4 and 7, plus the
    dropout's one each way when the model has dropout."""
    if job.attention in ("flash", "flash2"):
        return FLASH_KERNELS
    dropout = 1.0 if job.model.dropout else 0.0
    return STANDARD_ATTENTION_KERNELS[0] + dropout, STANDARD_ATTENTION_KERNELS[1] + dropout


def pass_kernels(job: Job, layout: Layout) -> tuple[float, float, Num]:
    """(forward, backward, recomputed) kernels one layer launches for one micro-batch; the
    recomputation runs again the forward (full), the attention core (selective) or 3 GEMMs and the
    element-wise kernels (op)."""
    attn_fwd, attn_bwd = attention_kernels(job)
    elementwise = elementwise_kernels(job) + moe_layer_share(job) * MOE_ROUTING_KERNELS
    gemms = gemm_kernels(job)
    forward = gemms + attn_fwd + elementwise
    backward = gemms * GEMM_BACKWARD_KERNELS + attn_bwd + ELEMENTWISE_BACKWARD_RATIO * elementwise
    recompute = layout.full * forward + layout.selective * attn_fwd + layout.op * (3.0 + elementwise)
    return forward, backward, recompute


def layer_kernels(job: Job, layout: Layout) -> Num:
    """Kernels one layer launches for one micro-batch, all passes (pass_kernels summed)."""
    forward, backward, recompute = pass_kernels(job, layout)
    return forward + backward + recompute


def tp_collectives_per_layer(layout: Layout) -> Num:
    """Tensor-parallel collective launches per layer per micro-batch: 2 forward, 2 backward, 2 more
    under full recompute (1 under op); none without tensor parallelism."""
    return (4.0 + 2.0 * layout.full + layout.op) * xp.mask(layout.tp > 1)


def ep_collectives_per_layer(job: Job, layout: Layout) -> Num:
    """Expert-parallel all-to-all launches of the mean layer per micro-batch: 4 per MoE layer (2 more
    under full recompute), × L_m/L; none with ep = 1."""
    return moe_layer_share(job) * (ALL_TO_ALLS_PER_MOE_LAYER + 2.0 * layout.full) * xp.mask(layout.ep > 1)


def host_per_kernel_s(job: Job) -> Num:
    """The host's time to dispatch one kernel [s]: the hardware system's fitted (or prior) time per
    kernel launched from Python, times the framework's dispatch factor (0 for a compiled step)."""
    return job.hardware.efficiency.host_per_kernel_s * FRAMEWORKS[job.framework].host_factor


def host_pass_s(job: Job, layout: Layout) -> tuple[Num, Num]:
    """Host time of one layer's forward and of its backward (with what it recomputes), one
    micro-batch, each with its tensor-parallel collectives and expert-parallel all-to-alls [s]."""
    forward, backward, recompute = pass_kernels(job, layout)
    tp = xp.mask(layout.tp > 1)
    ep = moe_layer_share(job) * xp.mask(layout.ep > 1)
    tau = host_per_kernel_s(job)
    return ((forward + 2.0 * tp + 2.0 * ep) * tau,
            (backward + recompute + (2.0 + 2.0 * layout.full + layout.op) * tp + (2.0 + 2.0 * layout.full) * ep) * tau)


def host_layer_s(job: Job, layout: Layout) -> Num:
    """Host time of one layer for one micro-batch: (kernels + collectives) × the host time per kernel [s]."""
    return (layer_kernels(job, layout) + tp_collectives_per_layer(layout) + ep_collectives_per_layer(job, layout)) \
        * host_per_kernel_s(job)


def floor_excess_s(time_s: Num, kernels: float, floor_s: Num) -> Num:
    """How much longer an operation of `kernels` kernels takes than its roofline time `time_s`
    because no kernel runs shorter than the device's floor: max(0, kernels·floor − t_op) [s]."""
    return xp.maximum(kernels * floor_s - time_s, 0.0)


def ops_time_s(ops: list[OpTime] | list[Op]) -> Num:
    """Σ of the operations' roofline times [s]."""
    total: Num = 0.0
    for o in ops:
        total = total + o.time_s
    return total
