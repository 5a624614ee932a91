"""Memory per device: weights, gradients, optimizer state, activations and overhead.

Sources: Rajbhandari et al. 2020 (ZeRO: what each stage shards; 2 B weights + 12 B Adam state per
parameter; trainest keeps Megatron's 4-byte FP32 gradient buffer, so 2+4+12 = 18 B unsharded);
Korthikanti et al. 2022 §4 (activations per layer, sequence parallelism,
selective and full recomputation, the 1F1B/interleaved in-flight factor). All functions accept
floats or numpy arrays for the layout arguments.
"""

from __future__ import annotations

import math

from trainest import xp
from trainest.frameworks import FRAMEWORKS
from trainest.layout import Job, Layout, Num
from trainest.precision import (
    ADAM_MOMENT_BYTES,
    FP16_GRAD_BYTES,
    MAIN_GRAD_BYTES,
    MASTER_WEIGHT_BYTES,
    grad_bytes_per_param,
    optimizer_bytes_per_param,
    weight_bytes_per_param,
)
from trainest.record import NamedTuple
from trainest.step.activations import (
    DROPOUT_MASK_BYTES,
    FP8_SAVED_INPUT_BYTES,
    activation_bytes_per_layer,
    attention_activation_bytes,
    dispatch_buffer_bytes,
)
from trainest.step.finetune import (
    adapter_params_local,
    base_bytes_per_param,
    dequant_workspace_bytes,
    expert_adapter_params_local,
    frozen_expert_layer_bytes,
    frozen_layer_bytes,
    frozen_weight_bytes,
    quantised_input_bytes_per_layer,
    stable_embedding_bytes,
)
from trainest.step.offload import (
    IN_FLIGHT_LAYERS,
    host_bytes,
    host_optimizer_bytes_per_param,
    offload_grad_bytes,
    offload_state,
)
from trainest.step.schedule import dualpipe_copies, stage_dense_params, stage_expert_params, stage_layers, stage_params
from trainest.units import MiB

__all__ = ["ADAM_MOMENT_BYTES", "DROPOUT_MASK_BYTES", "FP8_SAVED_INPUT_BYTES", "FP16_GRAD_BYTES", "MAIN_GRAD_BYTES",
           "MASTER_WEIGHT_BYTES", "MemoryBreakdown",
           "activation_bytes", "activation_bytes_per_layer", "grad_bytes_per_param", "in_flight_micro_batches",
           "loss_bytes_per_logit",
           "memory_per_device", "optimizer_bytes_per_param", "activation_parts", "runtime_bytes", "communicators",
           "sharded_state_bytes", "stage_layers", "stage_params", "weight_bytes_per_param"]

LOGITS_BYTES = 4.0               # one FP32 logit (the loss's held bytes per logit: loss_bytes_per_logit)
# What the runtime adds to the tensors (docs/model.md §7.5). The CUDA context with PyTorch's kernels loaded:
# 1,343 MB in nvidia-smi (MiB) for `torch.ones((1, 1)).to("cuda")` (Hugging Face transformers docs, "Model
# training anatomy"); taken for ROCm too (no figure read).
RUNTIME_CONTEXT_BYTES = 1343.0 * MiB
# NCCL's buffers per communicator: NCCL_BUFFSIZE (default 4 MiB, NCCL environment-variable docs) for each
# channel, one to send and one to receive; NCCL_ASSUMED_CHANNELS channels is an assumption (NCCL picks 2-32).
NCCL_BUFFSIZE_BYTES = 4.0 * MiB
NCCL_ASSUMED_CHANNELS = 16
NCCL_COMMUNICATOR_BYTES = 2.0 * NCCL_ASSUMED_CHANNELS * NCCL_BUFFSIZE_BYTES     # 128 MiB
FRAGMENTATION_FRACTION = 0.05    # caching-allocator reserve and fragmentation, a fraction of the tensors


# torchtune's CEWithChunkedOutputLoss splits the logits into num_output_chunks = 8 chunks, each upcast to FP32 on its
# own; litgpt's chunked_cross_entropy does the same per lm_head chunk (docs/model.md §7.4)
LOSS_CHUNKS = 8.0
LOSS_FP32_WORKING_BYTES = 8.0     # one chunk's FP32 upcast and its log-softmax (or gradient): 4 + 4 per logit
LOGITS_16BIT_BYTES = 2.0          # one 16-bit logit (or its 16-bit gradient)


def loss_bytes_per_logit(job: Job) -> float:
    """Bytes per logit the cross-entropy holds at its peak [B], by `job.loss`: standard, the framework's
    (`Framework.loss_bytes_per_logit`: 6 for Megatron's in-place FP32 softmax, 12 for torchtitan's unfused FP32
    cross-entropy, 2·LOGITS_BYTES for a framework not examined); chunked, the 16-bit logits and one of
    LOSS_CHUNKS chunks' FP32 working set: 2 + 8/8 = 3, or with fused kernels (torch.compile compiles each chunk's
    upcast and cross-entropy into one kernel, FP32 only in registers: `chunked_compiled_bytes_per_logit`) the
    16-bit logits and one chunk's 16-bit gradient beside them: 2 + 2/8; compiled (torch.compile fuses the upcast, the
    log-softmax and the loss, FP32 only in registers and one log-sum-exp per row), the 16-bit logits and their
    16-bit gradient: 2 + 2 = 4; fused (the output projection and the loss fused: Liger's
    FusedLinearCrossEntropy, Cut Cross-Entropy), no full-size logits: one chunk of ceil(B·s / ceil(V/h)) rows
    with its FP32 logits and 16-bit gradient, 6 / ceil(V/h) per logit of the full size."""
    if job.loss == "chunked":
        if job.kernels == "fused":
            return chunked_compiled_bytes_per_logit()
        return LOGITS_16BIT_BYTES + LOSS_FP32_WORKING_BYTES / LOSS_CHUNKS
    if job.loss == "compiled":
        return 2.0 * LOGITS_16BIT_BYTES
    if job.loss == "fused":
        return (LOGITS_BYTES + LOGITS_16BIT_BYTES) / math.ceil(job.model.vocab / job.model.hidden)
    return FRAMEWORKS[job.framework].loss_bytes_per_logit


def held_bytes_per_logit(job: Job, layout: Layout) -> Num:
    """Bytes per logit the loss holds at its peak on this layout [B]: `loss_bytes_per_logit`, but under tensor
    parallelism for a framework whose standard loss then runs another, vocabulary-parallel implementation
    (`Framework.loss_parallel_bytes_per_logit`: torchtitan's loss_parallel, 16; docs/model.md §7.4)."""
    standard = loss_bytes_per_logit(job)
    parallel = FRAMEWORKS[job.framework].loss_parallel_bytes_per_logit
    if job.loss != "standard" or parallel is None:
        return standard
    return xp.where(layout.tp > 1, parallel, standard)


def chunked_compiled_bytes_per_logit() -> float:
    """Bytes per logit a chunked cross-entropy whose per-chunk upcast and loss are compiled holds at its peak [B]:
    2 + 2/LOSS_CHUNKS. torchtune's `compile_loss` compiles CEWithChunkedOutputLoss.compute_cross_entropy alone
    (`F.cross_entropy(logits.float(), ...)`), so each chunk's FP32 upcast lives only in registers and the chunk saves
    its 16-bit logits (and one FP32 log-sum-exp per row, negligible) for the backward. Autograd runs every chunk's
    loss backward before the output projection's (the loss nodes are the later ones), each freeing its chunk's
    16-bit logits as it writes their 16-bit gradient: at any moment the full 16-bit size is held once, as logits or
    gradient, plus one chunk holding both (torchtune 0.3.1 modules/loss/ce_chunked_output_loss.py,
    training/_compile.py)."""
    return LOGITS_16BIT_BYTES + LOGITS_16BIT_BYTES / LOSS_CHUNKS


def in_flight_micro_batches(pp: Num, vpp: Num, micro_batches: Num) -> Num:
    """Micro-batches whose activations the first stage holds under 1F1B (in whole-device layers): min(m, p), or
    interleaved (v > 1) p·(1 + (p−1)/(p·v)) (Korthikanti et al. 2022 §4.2.3), that is v·p + p − 1 chunk forwards
    (the first device's warm-up, (v−1)·p + 2·(p−1), and the steady state's one more), but never more than the
    m·v forwards there are: both schedules cap the warm-up at all of them (megatron-core 0.14.0
    megatron/core/pipeline_parallel/schedules.py: get_pp_rank_microbatches, `are_all_microbatches_in_warmup`; torch
    2.5.1 `ScheduleInterleaved1F1B`: min(warmup_ops, n_microbatches·n_local_stages)), so at most m."""
    interleave = xp.where(vpp > 1, 1.0 + (pp - 1.0) / (pp * vpp), 1.0)
    return xp.minimum(micro_batches, pp * interleave)


class MemoryBreakdown(NamedTuple):
    """Bytes per device (the heaviest pipeline stage). Tensors: weights, gradients, optimizer, activations
    (of which logits_bytes are the loss's logits); the runtime (overhead_bytes) = allocator + context + NCCL.
    allocated = the tensors (torch.cuda.max_memory_allocated), reserved = + allocator
    (max_memory_reserved), total = + context + NCCL (nvidia-smi; what "fits" compares)."""

    weights_bytes: Num
    gradients_bytes: Num
    optimizer_bytes: Num
    activations_bytes: Num
    overhead_bytes: Num
    total_bytes: Num
    host_bytes: Num = 0.0       # offloaded state in host memory (docs/model.md §14)
    logits_bytes: Num = 0.0     # the part of activations_bytes the loss holds at its peak
    allocator_bytes: Num = 0.0  # caching-allocator reserve and fragmentation
    context_bytes: Num = 0.0    # CUDA/ROCm context with the framework's kernels
    nccl_bytes: Num = 0.0       # NCCL's communicator buffers
    peak_phase: Num = 0.0       # where the peak falls: an index into PEAK_PHASES (phase_peak)

    @property
    def allocated_bytes(self) -> Num:
        """What the tensors hold [B]: compare with torch.cuda.max_memory_allocated (or peak active)."""
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.activations_bytes

    @property
    def reserved_bytes(self) -> Num:
        """The tensors and the caching allocator's reserve [B]: compare with torch.cuda.max_memory_reserved."""
        return self.allocated_bytes + self.allocator_bytes


def communicators(layout: Layout) -> Num:
    """Communicators a device holds NCCL buffers for: one per parallel dimension of more than one rank
    (tensor, pipeline, the data×context ZeRO group, the expert group)."""
    return (xp.mask(layout.tp > 1) + xp.mask(layout.pp > 1) + xp.mask(layout.dp * layout.cp > 1)
            + xp.mask(layout.expert_group > 1))


# hardware kinds (catalog `kind`) whose programs run without the CUDA/ROCm runtime: a TPU program is compiled
# by XLA, which assigns every buffer of the step ahead of time (no caching allocator), runs its collectives
# over ICI itself (no NCCL communicators) and loads no CUDA context (docs/model.md §7.5)
XLA_PLANNED_KINDS = ("tpu",)


def runtime_bytes(layout: Layout, allocated: Num, kind: str = "gpu") -> tuple[Num, Num, Num]:
    """(allocator, context, NCCL) [B]: FRAGMENTATION_FRACTION of the tensors, RUNTIME_CONTEXT_BYTES, and
    NCCL_COMMUNICATOR_BYTES per communicator on a device of hardware `kind`; none of the three on the kinds
    in XLA_PLANNED_KINDS (docs/model.md §7.5)."""
    if kind in XLA_PLANNED_KINDS:
        return (0.0 * allocated, 0.0 * allocated, 0.0 * allocated)
    return (FRAGMENTATION_FRACTION * allocated, RUNTIME_CONTEXT_BYTES + 0.0 * allocated,
            NCCL_COMMUNICATOR_BYTES * communicators(layout) + 0.0 * allocated)


def sharded_state_bytes(job: Job, layout: Layout) -> tuple[Num, Num, Num]:
    """(weights, gradients, optimizer state) of the heaviest stage per device [B], sharded per ZeRO
    stage over d_shard·c ranks (the context-parallel ranks hold the same weights: Megatron's DP×CP
    group). ZeRO-3 with FP32 gradients (PyTorch FSDP, JAX/MaxText) keeps the FP32 master as the
    sharded parameters, cast to 16 bit only when gathered, so no 16-bit shard; with FP16 gradients
    (DeepSpeed FP16 ZeRO-3) a 16-bit shard is kept: 16 B per parameter either way (Rajbhandari et
    al. 2020 §5: 2 + 2 + K with K = 12; FSDP: 4 + 4 + 8). ZeRO-3 also holds the gathered weights of
    the layer being computed and of the prefetched next one (none over a single shard rank)."""
    model = job.model
    copies = dualpipe_copies(layout)     # DualPipe: two stages' parameters per device (schedule.py)
    params_local = copies * stage_dense_params(model, layout.pp, layout.vpp, layout.split) / layout.tp
    layer_params = model.params_per_layer - model.expert_params_per_layer if model.moe is not None \
        else model.params_per_layer
    state = zero_state_bytes(job, layout, params_local, layer_params / layout.tp, layout.shard * layout.cp)
    if model.moe is None:
        return state if xp.off(layout.finetune) else finetune_state_bytes(job, layout, params_local, state)
    experts_local = (copies * stage_expert_params(model, layout.pp, layout.vpp, layout.split)
                     / layout.expert_group)
    expert = zero_state_bytes(job, layout, experts_local, model.expert_params_per_layer / layout.expert_group,
                              layout.expert_shard)
    if not xp.off(layout.finetune):      # a frozen base: each kind at its stored bytes, with its adapters' state
        state = finetune_state_bytes(job, layout, params_local, state)
        expert = expert_finetune_state_bytes(job, layout, experts_local, expert)
    return state[0] + expert[0], state[1] + expert[1], state[2] + expert[2]


def gathered_layer_params(job: Job, layout: Layout, layer_params: Num) -> Num:
    """Parameters ZeRO-3 holds gathered at once, per device: the layer being computed and the prefetched
    next one (2·`layer_params`), or under a framework that gathers submodule by submodule up to a live
    budget (`Framework.zero3_live_params`, DeepSpeed) the smaller of that and the budget, but at least
    one MLP matrix (h·f/t: a matrix is gathered whole to be multiplied)."""
    live = FRAMEWORKS[job.framework].zero3_live_params
    if not live:
        return 2.0 * layer_params
    largest = job.model.hidden * job.model.ffn_hidden / layout.tp
    return xp.minimum(2.0 * layer_params, xp.maximum(live, largest))


def master_only_shard(job: Job, layout: Layout, shard: Num) -> Num:
    """1 where ZeRO-3 keeps no 16-bit copy of a device's shard: FSDP-style mixed precision holds the FP32
    master shard (counted with the optimizer state) and casts it to 16 bit when it gathers a layer
    (BF16/FP8/FP4 runs); else 0. This holds over a single shard rank too (d = 1: the "shard" is the
    whole stage, still kept in FP32 and cast layer by layer), so ZeRO-3 counts 16 B per parameter at
    every d and trading data for tensor parallelism on the same devices never adds a 16-bit copy
    (issue 32 item 6). Pure 16-bit training (master_weights none) has no FP32 master: its sharded parameters
    are the 16-bit weights themselves, so it keeps the 16-bit shard (0). `shard` is kept for the callers'
    symmetry; the rule does not depend on it."""
    del shard
    zero3 = xp.mask(layout.zero >= 3)
    master = job.precision in ("bf16", "fp8", "fp4") and job.master_weights != "none"
    return zero3 * (1.0 if master else 0.0)


def gathers_layers(job: Job, layout: Layout, shard: Num) -> Num:
    """1 where ZeRO-3 materialises 16-bit layers one at a time: the shard is split over more than one
    rank (all-gathered), or it is an FP32 master cast to 16 bit per layer (`master_only_shard`); 0 where
    a single rank keeps its whole 16-bit stage (nothing to gather)."""
    zero3 = xp.mask(layout.zero >= 3)
    return zero3 * xp.maximum(xp.mask(shard > 1), master_only_shard(job, layout, shard))


def zero_state_bytes(job: Job, layout: Layout, params: Num, layer_params: Num, shard: Num) -> tuple[Num, Num, Num]:
    """(weights, gradients, optimizer state) [B] of `params` parameters per device whose ZeRO state is
    sharded over `shard` ranks, with `layer_params` of one layer gathered twice under ZeRO-3
    (sharded_state_bytes; MoE: once for the non-expert and once for the expert parameters). A
    framework that keeps a pipeline stage gathered under ZeRO-3 (`Framework.pp_unsharded_zero3`,
    torchtitan) holds, with p > 1, all `params` as 16-bit weights and full-size gradients instead."""
    precision, zero = job.precision, layout.zero
    sharded3 = xp.mask((zero >= 3) * (shard > 1))
    w_bytes = job.weight_bytes
    no_16bit_shard = master_only_shard(job, layout, shard)
    weights = params * w_bytes / xp.where(zero >= 3, shard, 1.0) * (1.0 - no_16bit_shard)
    # never more gathered than the stage holds: a one-layer stage has no next layer to prefetch
    gathered = xp.minimum(gathered_layer_params(job, layout, layer_params), params)
    weights = weights + gathers_layers(job, layout, shard) * gathered * w_bytes
    g_bytes = grad_bytes_per_param(precision, job.grad_dtype, job.master_weights)
    grads = params * g_bytes / xp.where(zero >= 2, shard, 1.0)
    if job.optimizer_in_backward:
        grads = xp.minimum(grads, in_backward_grad_params(job, layout, layer_params) * g_bytes
                           / xp.where(zero >= 2, shard, 1.0))
    state_bytes = optimizer_bytes_per_param(precision, job.adam_moments, job.optimizer, job.master_weights)
    optim = params * state_bytes / xp.where(zero >= 1, shard, 1.0)
    if FRAMEWORKS[job.framework].pp_unsharded_zero3:
        gathered = sharded3 * xp.mask(layout.pp > 1)
        weights = weights + gathered * (params * w_bytes - weights)
        grads = grads + gathered * (params * g_bytes - grads)
    return weights, grads, optim


def in_backward_grad_params(job: Job, layout: Layout, layer_params: Num) -> Num:
    """Gradients alive at once with the optimizer fused into the backward [parameters]: each parameter is updated
    and its gradient freed as soon as it is computed (torchtune optimizer_in_bwd: a post-accumulate-grad hook per
    parameter; Lv et al. 2023, LOMO), so at most one layer's (`layer_params`, its backward computes them
    together) or the output projection's V·h/t, whichever is larger."""
    return xp.maximum(layer_params, job.model.vocab * job.model.hidden / layout.tp)


def finetune_state_bytes(job: Job, layout: Layout, params_local: Num,
                         full: tuple[Num, Num, Num]) -> tuple[Num, Num, Num]:
    """(weights, gradients, optimizer state) where the base is frozen (LoRA/QLoRA) [B], but the routed
    experts' (`expert_finetune_state_bytes`): the frozen base at its stored bytes (16-bit, 8-bit, or
    NF4 with double quantisation; sharded by ZeRO-3, which also holds two gathered layers), the
    16-bit copy of the widest dequantised matrix, and the adapters' 16-bit weights, gradients and
    Adam state, sharded like a full model's; `full` where not frozen."""
    frozen = (frozen_weight_bytes(job, layout, params_local), frozen_layer_bytes(job, layout))
    state = frozen_state_bytes(job, layout, frozen, adapter_params_local(job, layout), layout.shard * layout.cp)
    embedding = stable_embedding_bytes(job, layout)        # litgpt's StableEmbedding swap: the old one, a gradient
    weights = state[0] + dequant_workspace_bytes(job, layout) + embedding
    mask = layout.frozen > 0
    return (xp.where(mask, weights, full[0]), xp.where(mask, state[1] + embedding, full[1]),
            xp.where(mask, state[2], full[2]))


def expert_finetune_state_bytes(job: Job, layout: Layout, experts_local: Num,
                                full: tuple[Num, Num, Num]) -> tuple[Num, Num, Num]:
    """The routed experts' (weights, gradients, optimizer state) where the base is frozen [B]: the
    stage's `experts_local` at the base's stored bytes and their adapters' state, sharded over the
    expert shard group (the expert data-parallel ranks); `full` where not frozen."""
    frozen = (experts_local * base_bytes_per_param(job, layout), frozen_expert_layer_bytes(job, layout))
    state = frozen_state_bytes(job, layout, frozen, expert_adapter_params_local(job, layout), layout.expert_shard)
    mask = layout.frozen > 0
    return xp.where(mask, state[0], full[0]), xp.where(mask, state[1], full[1]), xp.where(mask, state[2], full[2])


def frozen_state_bytes(job: Job, layout: Layout, frozen: tuple[Num, Num], adapters: Num,
                       shard: Num) -> tuple[Num, Num, Num]:
    """(weights, gradients, optimizer state) of frozen weights (`frozen`: the stage's stored bytes and
    one layer's) and `adapters` trained parameters whose ZeRO state is sharded over `shard` ranks [B]:
    ZeRO-3 shards the stored bytes and holds two gathered layers; the adapters' 16-bit weights,
    gradients and Adam state shard per ZeRO stage."""
    zero = layout.zero
    sharded3 = xp.mask((zero >= 3) * (shard > 1))
    stored, layer = frozen
    weights = (stored / xp.where(zero >= 3, shard, 1.0) + sharded3 * 2.0 * layer
               + adapters * weight_bytes_per_param(job.precision) / xp.where(zero >= 3, shard, 1.0))
    grads = adapters * grad_bytes_per_param(job.precision, job.grad_dtype, job.master_weights) \
        / xp.where(zero >= 2, shard, 1.0)
    state_bytes = optimizer_bytes_per_param(job.precision, job.adam_moments, job.optimizer, job.master_weights)
    optim = adapters * state_bytes / xp.where(zero >= 1, shard, 1.0)
    return weights, grads, optim


def activation_bytes(job: Job, layout: Layout) -> Num:
    """Activations of the heaviest stage per device [B], the loss's logits included (`activation_parts`)."""
    return activation_parts(job, layout)[0]


def activation_parts(job: Job, layout: Layout) -> tuple[Num, Num]:
    """(activations, of them the loss's logits) of the heaviest stage per device [B]: the first stage's
    layers times the in-flight micro-batches, the last stage's layers with the FP32 logits and their
    gradient, and one layer re-materialised during its backward under full or op recompute (docs/model.md
    §7.4); the last stage's multi-token-prediction modules as mean layers with their logits (§15.10).
    The logits count where the stage that holds them is the heaviest."""
    model = job.model
    per_layer, per_layer_stored = activation_bytes_per_layer(job, layout)
    layers_per_stage, last_layers = stage_layers(model, layout.pp, layout.vpp, layout.split)
    working = layout.rematerialises_layer * xp.maximum(per_layer_stored - per_layer, 0.0)
    if model.moe is not None:
        working = working + dispatch_buffer_bytes(job, layout)
    in_flight = in_flight_micro_batches(layout.pp, layout.vpp, layout.micro_batches(job))
    if layout.dualpipe:                  # p + 1 micro-batches' activations (DeepSeek-AI 2024, Table 2)
        in_flight = in_flight + xp.mask(layout.pp > 1)
    first_buffers, last_buffers = stage_buffer_bytes(job, layout, in_flight)
    first_kept = per_layer * layers_per_stage * in_flight + first_buffers
    first_stage = first_kept + working
    attention = first_kept + cp_exchange_bytes(job, layout)   # a layer's attention backward (no logits)
    logits = held_bytes_per_logit(job, layout) * layout.micro_batch * job.seq_len / layout.cp * model.vocab / layout.tp
    # multi-token prediction on the last stage: its modules as mean layers, its logits (one micro-batch)
    mtp_depth = 0.0 if model.mtp is None else float(model.mtp.depth)
    logits = logits * (1.0 + mtp_depth) + per_layer * model.mtp_layers
    last_stage = per_layer * last_layers + working + logits + last_buffers
    with_logits = xp.where(layout.pp > 1, last_stage, first_stage + logits)
    step_end = last_buffers + merged_output_bytes(job, layout)      # the last stage once every backward is done
    without_logits = xp.where(layout.pp > 1, xp.maximum(xp.maximum(first_stage, attention), step_end), attention)
    total = xp.maximum(with_logits, without_logits)
    held = xp.where(with_logits >= without_logits, logits, 0.0 * logits)
    return total, held


def merged_output_bytes(job: Job, layout: Layout) -> Num:
    """What the last pipeline device holds at the step's end beyond `stage_buffer_bytes` [B], under a framework whose
    stages keep their outputs (`Framework.stage_buffers_per_micro_batch`), with p > 1; else 0: the schedule merges
    the m kept micro-batches' logits into one tensor (`PipelineScheduleSingle.step` → `_merge_outputs`, a
    concatenation) while they are still kept, so 2·m micro-batches' logits, of which the buffers count m − 1:
    (m + 1)·e·T·V/t. No layer's activations and no loss working set are left by then. Measured (torch 2.11,
    one stage, H200): m = 8 micro-batches of 4,096 × 32,000 bf16 logits peak at 16.25 of them, 8 kept and 8
    merged (docs/model/07-memory.md §7.4)."""
    if not FRAMEWORKS[job.framework].stage_buffers_per_micro_batch:
        return 0.0 * layout.tp
    logits = job.element_bytes * layout.tokens(job) * job.model.vocab / layout.tp
    return xp.mask(layout.pp > 1) * logits * (layout.micro_batches(job) + 1.0)


def cp_exchange_bytes(job: Job, layout: Layout) -> Num:
    """What one layer's attention backward holds beyond the kept activations under a framework whose context
    parallelism all-gathers K and V (`Framework.cp_gathers_kv`: torch's context_parallel, rotate method
    all-gather), with c > 1 [B]; else 0. With W = a·d_h/t (K and V expanded to the query heads) and T = b·s/c:
    the whole sequence's K and V, 2·e·c·W·T (`_AllGatherRotater`), FP32 dQ, dK, dV accumulators (12·W·T), the
    kernel's 16-bit dQ, dK, dV (3·e·W·T), and the FP32 dK/dV sent and the one received (16·W·T)
    (`_templated_ring_attention_backward`, torch 2.6); where the layer is recomputed, also its re-materialised
    attention (`attention_activation_bytes`) and the QKV projection's saved input (its norm output, gathered
    under SP by a framework that saves gathered inputs), which its backward still needs (docs/model/07-memory.md
    §7.4). The moment comes after the loss's backward: no logits beside it (`activation_parts`)."""
    if not FRAMEWORKS[job.framework].cp_gathers_kv:
        return 0.0 * layout.tp
    e, tokens = job.element_bytes, layout.tokens(job)
    width = job.model.heads * job.model.head_dim / layout.tp
    exchange = width * tokens * (2.0 * e * layout.cp + 12.0 + 3.0 * e + 16.0)
    gathered = 1.0 if FRAMEWORKS[job.framework].saves_gathered_inputs else layout.sp_div
    recomputed = attention_activation_bytes(job, layout)[0] + e * tokens * job.model.hidden / gathered
    return xp.mask(layout.cp > 1) * (exchange + layout.rematerialises_layer * recomputed)


def stage_buffer_bytes(job: Job, layout: Layout, in_flight: Num) -> tuple[Num, Num]:
    """(first, last) pipeline device's per-micro-batch stage buffers beyond the layers' kept activations [B], under
    a framework whose stages keep them (`Framework.stage_buffers_per_micro_batch`: torch.distributed.pipelining),
    with p > 1; else 0. A stage boundary is one micro-batch's block output, e·T·h/(t under SP). Each of a device's v
    local stages keeps, for each of the m micro-batches, its output (`output_chunks`, freed at the next step) and,
    but on the last stage, a receive buffer for that output's gradient; but on the first stage, a receive buffer
    for its input, which is the first layer's kept input while the micro-batch is in flight (`in_flight`
    micro-batches of the device's v stages: `in_flight`·v stage forwards). The first device: 2·v·m boundaries and
    the (v−1)·m input buffers not in flight. The last device: its last stage's m outputs are the logits (e bytes each),
    of which the loss's working set already counts the current one (m − 1 more); its other v − 1 stages' outputs
    and gradient buffers, 2·(v−1)·m boundaries; v·m input buffers, one in flight (docs/model/07-memory.md §7.4)."""
    if not FRAMEWORKS[job.framework].stage_buffers_per_micro_batch:
        return 0.0 * layout.tp, 0.0 * layout.tp
    pipelined = xp.mask(layout.pp > 1)
    m, v = layout.micro_batches(job), layout.vpp
    boundary = job.element_bytes * layout.tokens(job) * job.model.hidden / layout.sp_div
    idle_inputs = xp.maximum((v - 1.0) * m - xp.maximum(in_flight * v - m, 0.0), 0.0)
    first = pipelined * boundary * (2.0 * v * m + idle_inputs)
    logits = job.element_bytes * layout.tokens(job) * job.model.vocab / layout.tp
    last = pipelined * (logits * (m - 1.0) + boundary * (2.0 * (v - 1.0) * m + v * m - 1.0))
    return first, last


def last_graph_bytes(job: Job, layout: Layout) -> Num:
    """What the previous micro-batch's graph still holds while the next forward runs, under a framework whose
    loop keeps it bound (`Framework.holds_last_graph`, litgpt) [B]: its 16-bit logits (LOGITS_16BIT_BYTES per
    logit) and, over a quantised base, its quantised linears' inputs (`quantised_input_bytes_per_layer`) of the
    layers not recomputed (a recomputed layer's graph is local to its backward); 0 under other frameworks."""
    if not FRAMEWORKS[job.framework].holds_last_graph:
        return 0.0 * layout.tp
    layers, _ = stage_layers(job.model, layout.pp, layout.vpp, layout.split)
    inputs = quantised_input_bytes_per_layer(job, layout) * layers * (1.0 - layout.full)
    logits = LOGITS_16BIT_BYTES * layout.tokens(job) * job.model.vocab / layout.tp
    return inputs + logits


def backward_end_activation_bytes(job: Job, layout: Layout) -> Num:
    """Activations still held when the backward reaches the first layer [B]: that layer's kept activations for one
    micro-batch and, where it is recomputed, what its re-materialisation holds beyond them (and a MoE layer's
    dispatch buffers): every later layer's were freed as its gradients were written."""
    per_layer, per_layer_stored = activation_bytes_per_layer(job, layout)
    working = layout.rematerialises_layer * xp.maximum(per_layer_stored - per_layer, 0.0)
    if job.model.moe is not None:
        working = working + dispatch_buffer_bytes(job, layout)
    return per_layer + working


def backward_start_bytes(job: Job, layout: Layout, activations: Num, logits: Num) -> tuple[Num, Num, Num]:
    """(gradients, activations, of them the logits' gradient) held once the loss's backward is done, every layer's
    activations still kept [B]: the loss's working set (`logits`) replaced by the logits' 16-bit gradient, and the
    output projection's whole (not yet reduce-scattered) weight gradient, V·h·e_g/t, where it trains."""
    model = job.model
    grad_bytes = grad_bytes_per_param(job.precision, job.grad_dtype, job.master_weights)
    out_grad = (1.0 - xp.mask(layout.frozen > 0)) * model.vocab * model.hidden * grad_bytes / layout.tp
    logits_grad = LOGITS_16BIT_BYTES * layout.tokens(job) * model.vocab / layout.tp
    return out_grad, activations - logits + logits_grad, logits_grad


# where the step's peak falls (MemoryBreakdown.peak_phase, an index): gradients and activations held together
# (accumulation, a pipeline, persistent gradient buffers), or one of the three moments of a single pass (§7.12)
PEAK_PHASES = ("together", "forward_end", "backward_start", "backward_end")


class PhasePeak(NamedTuple):
    """What a step holds at its peak where gradients and activations do not peak together [B] (`phase_peak`)."""

    gradients_bytes: Num
    activations_bytes: Num
    logits_bytes: Num
    phase: Num                  # index into PEAK_PHASES


def phase_peak(job: Job, layout: Layout, grads: Num, activations: Num, logits: Num) -> PhasePeak:
    """Gradients, activations and logits held at the step's peak and which moment it is [B], where the framework
    frees the gradients every step (`Framework.frees_grads`) and the step runs one micro-batch on one pipeline
    stage: the gradients and the activations do not peak together. At the end of the forward (and the loss) every
    activation is held and no gradient; once the loss's backward is done, the output projection's gradient beside
    them (`backward_start_bytes`); at the end of the backward every gradient and only the first layer's activations
    (`backward_end_activation_bytes`); in between the backward frees a layer's activations (e·T·(16h + 6f) for a
    Llama layer) as it writes that layer's gradients (2·(2h² + 2h·g·d_h + 3hf) B in 16 bit), fewer bytes for any T
    over a few hundred tokens. The optimizer step after it holds the gradients alone. Else (the gradients of
    earlier micro-batches or pipeline stages alive through the forward, or kept in persistent buffers) both at once,
    as before (docs/model/07-memory.md §7.12)."""
    together = PhasePeak(grads, activations, logits, 0.0 * activations)
    if not FRAMEWORKS[job.framework].frees_grads:
        return together
    one_pass = xp.mask((layout.micro_batches(job) <= 1) * (layout.pp <= 1))
    start_grads, start_acts, start_logits = backward_start_bytes(job, layout, activations, logits)
    end_acts = xp.minimum(backward_end_activation_bytes(job, layout), activations)
    start = xp.mask(start_grads + start_acts > activations)
    forward = xp.where(start > 0, start_grads + start_acts, activations)
    end = one_pass * xp.mask(grads + end_acts > forward)
    at_start, at_forward = one_pass * (1.0 - end) * start, one_pass * (1.0 - end) * (1.0 - start)
    return PhasePeak(
        gradients_bytes=end * grads + at_start * start_grads + (1.0 - one_pass) * grads,
        activations_bytes=end * end_acts + at_start * start_acts + at_forward * activations
        + (1.0 - one_pass) * activations,
        logits_bytes=at_start * start_logits + at_forward * logits + (1.0 - one_pass) * logits,
        phase=one_pass * (end * 3.0 + at_start * 2.0 + at_forward * 1.0))


def offloaded_device_bytes(job: Job, layout: Layout, on_device: tuple[Num, Num, Num, Num]) -> tuple[Num, ...]:
    """(weights, gradients, optimizer, activations, host bytes) with offload [B]: optimizer offload
    leaves no optimizer state and IN_FLIGHT_LAYERS layers' 16-bit gradients (streamed out) on the
    device; weight offload IN_FLIGHT_LAYERS layers' weights; activation offload IN_FLIGHT_LAYERS
    layers' activations (and the recomputed layer and the logits, which stay)."""
    weights, grads, optim, activations = on_device
    state = offload_state(job, layout)
    opt, wts, acts = layout.offload_optimizer > 0, layout.offload_weights > 0, layout.offload_activations > 0
    streamed_grads = IN_FLIGHT_LAYERS * offload_grad_bytes(job) * state.trained_per_layer
    kept_layers = state.offloaded_layers * xp.minimum(layout.micro_batches(job), layout.pp) \
        * state.activation_bytes_per_layer
    streamed_acts = activations - kept_layers + IN_FLIGHT_LAYERS * state.activation_bytes_per_layer
    # the FP32 master shard goes to the host with the optimizer: the device then holds its 16-bit shard, which
    # the host's Adam updates and sends back every step (ZeRO-Offload; §14.1), where ZeRO-3 had counted none
    unsharded_16bit = master_only_shard(job, layout, layout.shard * layout.cp) * (1.0 - layout.frozen)
    weights = weights + xp.where(opt, unsharded_16bit * state.weight_bytes, 0.0)
    return (xp.where(wts, IN_FLIGHT_LAYERS * state.layer_weight_bytes, weights), xp.where(opt, streamed_grads, grads),
            xp.where(opt, 0.0 * optim, optim), xp.where(acts, xp.maximum(streamed_acts, 0.0), activations),
            host_bytes(layout, state, layout.micro_batches(job), host_optimizer_bytes_per_param(job)))


def memory_per_device(job: Job, layout: Layout) -> MemoryBreakdown:
    """Weights, gradients and optimizer state of the heaviest stage, sharded per ZeRO stage, plus
    activations of the in-flight micro-batches and the framework overhead [B]; with offload, what
    stays on the device and what the host holds."""
    weights, grads, optim = sharded_state_bytes(job, layout)
    activations, logits = activation_parts(job, layout)
    activations = activations + last_graph_bytes(job, layout)
    host: Num = 0.0
    if not xp.off(layout.offload):
        weights, grads, optim, activations, host = offloaded_device_bytes(job, layout,
                                                                          (weights, grads, optim, activations))
    peak = phase_peak(job, layout, grads, activations, logits)
    grads, activations, logits = peak.gradients_bytes, peak.activations_bytes, peak.logits_bytes
    subtotal = weights + grads + optim + activations
    allocator, context, nccl = runtime_bytes(layout, subtotal, job.hardware.kind)
    overhead = allocator + context + nccl
    return MemoryBreakdown(weights_bytes=weights, gradients_bytes=grads, optimizer_bytes=optim,
                           activations_bytes=activations, overhead_bytes=overhead, total_bytes=subtotal + overhead,
                           host_bytes=host, logits_bytes=xp.minimum(logits, activations), allocator_bytes=allocator,
                           context_bytes=context, nccl_bytes=nccl, peak_phase=peak.phase)
