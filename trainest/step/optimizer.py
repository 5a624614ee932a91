"""The optimizer step (docs/model.md §6): memory-bound Adam over the local parameters, launched as
multi-tensor kernels (apex/DeepSpeed FusedAdam, the gradient-norm and unscale kernels of mixed-precision
clipping), each at least the device's kernel floor."""

from __future__ import annotations

from trainest import xp
from trainest.layout import Job, Layout, Num
from trainest.precision import (
    MAIN_GRAD_BYTES,
    MASTER_WEIGHT_BYTES,
    MOMENT_BYTES,
    grad_bytes_per_param,
    optimizer_state_bytes,
)

OPTIMIZER_BYTES_PER_PARAM = 34.0   # Adam: r/w FP32 master, m, v (24) + read grad (4) + norm (4) + write weights (2)
# apex/DeepSpeed multi_tensor_apply (csrc/multi_tensor_apply.cuh): a launch covers at most 320 blocks of one
# 65,536-element chunk each (chunk_size 2048·32), so a step launches ceil(P / (320·65536)) kernels per pass;
# the passes of a mixed-precision step with clipping: the gradient norm (multi_tensor_l2norm, whose result is
# also the fp16 loss-scaler's overflow check), the unscale-and-clip (multi_tensor_scale) and Adam itself.
MULTI_TENSOR_CHUNK = 65536.0
MULTI_TENSOR_MAX_BLOCKS = 320.0
OPTIMIZER_PASSES = 3.0


def optimizer_kernels(opt_params: Num) -> Num:
    """Kernels of one optimizer step over `opt_params` parameters: OPTIMIZER_PASSES multi-tensor passes
    of ceil(P / (320·65536)) launches each (at least one)."""
    return OPTIMIZER_PASSES * xp.maximum(xp.ceil(opt_params / (MULTI_TENSOR_CHUNK * MULTI_TENSOR_MAX_BLOCKS)), 1.0)


def adam_bytes_per_param(moments: str = "fp32", optimizer: str = "adamw", master_weights: str = "fp32",
                         grad_bytes: float = MAIN_GRAD_BYTES, auto_grad_bytes: float = MAIN_GRAD_BYTES) -> float:
    """Bytes the optimizer step moves per parameter: OPTIMIZER_BYTES_PER_PARAM for AdamW with FP32 moments,
    less what its state saves, read and written once each: 2·(8 − `optimizer_state_bytes`) [B]. BF16 moments
    26, 8-bit AdamW 22, Adafactor 18, SGD with momentum 26. Without a master (`master_weights` none) the FP32
    master's read and write (8) become a read of the 16-bit weights (2; their write is counted already);
    gradients of `grad_bytes` instead of the precision's own (`auto_grad_bytes`, what the 34 B assume) change the
    gradient's two reads (the norm and the update) by 2·(auto − g)."""
    fp32_moments = 2.0 * MOMENT_BYTES["fp32"]
    master = 0.0 if master_weights == "fp32" else 2.0 * MASTER_WEIGHT_BYTES - 2.0
    return (OPTIMIZER_BYTES_PER_PARAM - 2.0 * (fp32_moments - optimizer_state_bytes(optimizer, moments)) - master
            - 2.0 * (auto_grad_bytes - grad_bytes))


def optimizer_s(layout: Layout, params_local: Num, memory_bytes_per_s: Num, kernel_floor_s: Num = 0.0,
                expert_local: Num = 0.0, bytes_per_param: float = OPTIMIZER_BYTES_PER_PARAM) -> Num:
    """Adam over the parameters this device updates (ZeRO ≥ 1: a 1/(d_shard·c) shard, and of the
    routed experts `expert_local` a 1/expert-shard share), `bytes_per_param` each (34 with FP32 moments,
    `adam_bytes_per_param`) at the achievable memory bandwidth, and at least its kernels' floors
    (`optimizer_kernels`) [s]."""
    opt_params = params_local / xp.where(layout.zero >= 1, layout.shard * layout.cp, 1.0)
    opt_params = opt_params + expert_local / xp.where(layout.zero >= 1, layout.expert_shard, 1.0)
    return xp.maximum(opt_params * bytes_per_param / memory_bytes_per_s,
                      optimizer_kernels(opt_params) * kernel_floor_s)


def job_adam_bytes(job: Job) -> float:
    """`adam_bytes_per_param` of a job: its moments, optimizer, master weights and gradient bytes against the
    gradients its precision keeps by default (what the 34 B assume)."""
    return adam_bytes_per_param(job.adam_moments, job.optimizer, job.master_weights, job.grad_bytes,
                                grad_bytes_per_param(job.precision, "auto", "fp32"))
