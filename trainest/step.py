"""One training step: the operations of every layer timed on the roofline, the collectives on
their tiers, the 1F1B pipeline schedule with its bubble, and the overlap rules made explicit.

`step_terms` is written once and runs on floats (one estimate) or numpy arrays (the plan search):
the layout arguments (tp, pp, dp, cp, vpp, micro_batch, zero, sp, recompute) may be arrays.
Formulas: docs/model.md; sources: Narayanan et al. 2021 (schedule, eq. 3), Korthikanti et al. 2022
(recompute, sequence parallelism), Rajbhandari et al. 2020 (ZeRO traffic), Dao 2023 (FlashAttention-2).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from trainest import xp
from trainest.catalog import Hardware, Model
from trainest.comm import Tiers, all_gather_s, all_reduce_s, reduce_scatter_s, send_recv_s, tiers_of
from trainest.compute import OpTime, dimension_factor, fused_time, gemm_time, streaming_time
from trainest.memory import grad_bytes_per_param, stage_layers, stage_params, weight_bytes_per_param

ACTIVATION_BYTES = 2.0             # 16-bit activations between kernels
GEMM_INPUT_BYTES = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5}
ATTENTION_HALF_SEQ = 512.0         # sequence length at which fused attention's length factor is 1/2
ATTENTION_HALF_HEAD_DIM = 32.0     # head dimension at which its head-width factor is 1/2
CAUSAL_FRACTION = 0.5              # causal flash attention computes about half of the s×s scores
FLASH_BACKWARD_FLOP_RATIO = 2.5    # FlashAttention-2 backward: 5 matmuls vs 2 in forward (Dao 2023)
FLASH_BACKWARD_EFFICIENCY = 0.85   # backward reaches ~0.85 of forward's FLOP/s (Dao 2023, Fig. 5-6)
H_WIDE_BYTES_PER_ELEMENT = 15 * ACTIVATION_BYTES   # norms, residual adds, dropout on h-wide tensors, fwd
F_WIDE_PASSES = {"gelu": 2.0, "swiglu": 3.0}       # reads+writes of f-wide tensors by the activation, fwd
# eager PyTorch (no torch.compile): one kernel per operator. Each of the 2 norms computes in FP32 through
# ~7 kernels (cast, square, mean, rsqrt-scale, cast back, weight) moving ~18 h-wide 16-bit tensors'
# worth instead of 2 (read, write); SwiGLU runs silu and the product separately (5 passes, not 3).
EAGER_EXTRA_H_WIDE_BYTES_PER_ELEMENT = 2 * (18 - 2) * ACTIVATION_BYTES
EAGER_EXTRA_F_WIDE_PASSES = {"gelu": 0.0, "swiglu": 2.0}
SOFTMAX_BYTES_PER_SCORE = 9.0      # standard attention: scale/mask/softmax/dropout over s×s, fwd
# without dropout: the two bias-dropout-adds write no 1-byte mask, and the s×s dropout (read 2, write 2
# and a 1-byte mask) does not run
NO_DROPOUT_H_WIDE_SAVING = 2.0 * 1.0
NO_DROPOUT_SOFTMAX_SAVING = 5.0
CROSS_ENTROPY_PASSES = 4.0         # FP32 logits: softmax read/write forward and backward
BACKWARD_TRAFFIC_RATIO = 2.0       # element-wise backward moves about twice the forward bytes
LOW_PRECISION_CAST_PASSES = 3.0    # FP8/FP4: read 16-bit input, write the low-precision copy (+ scale)
TP_OVERLAP_RESIDUAL = 0.15         # share of overlapped TP traffic still exposed (first/last chunk, SM contention)
OPTIMIZER_BYTES_PER_PARAM = 34.0   # Adam: r/w FP32 master, m, v (24) + read grad (4) + norm (4) + write weights (2)


@dataclass(frozen=True)
class StepTerms:
    """Per-step times [s] (floats or arrays). time_s = compute_s + memory_s + communication_s
    + bubble_s + overhead_s (conservation)."""

    time_s: object
    compute_s: object
    memory_s: object
    communication_s: object
    bubble_s: object
    overhead_s: object
    tp_comm_s: object
    cp_comm_s: object
    pp_comm_s: object
    dp_comm_s: object
    optimizer_s: object
    micro_batch_s: object        # one micro-batch, forward + backward, on the heaviest stage
    no_overlap_time_s: object    # the same step with every collective exposed in full (upper bound)
    model_flops: object          # per step, all devices (fwd + bwd, no recompute)
    hardware_flops: object       # per step, all devices, including recomputation


def _sum(times: list[OpTime]) -> tuple[object, object]:
    compute = 0.0
    memory = 0.0
    for t in times:
        compute = compute + t.compute_bound_s
        memory = memory + t.memory_bound_s
    return compute, memory


def _overlapped_exposed_s(comm_s, window_s, last_bucket_s, contention):
    """The time a collective overlapped with computation adds to the step: what exceeds its window, at
    least the last bucket (nothing left to hide it), and at least the slowdown it causes while hidden,
    `contention` × the hidden part (its kernels share the SMs and HBM with the computation)."""
    return xp.maximum(xp.maximum(comm_s - window_s, last_bucket_s), contention * xp.minimum(comm_s, window_s))


def layer_flops_forward(model: Model, tokens, seq_len, causal_fraction: float = 1.0):
    """Forward FLOPs of one layer for `tokens` tokens of length-`seq_len` sequences, whole layer:
    2·T·h·(a + 2g)·d_h + 4·T·s·a·d_h·causal + 2·T·a·d_h·h + 2·k·T·h·f (DESIGN.md; Narayanan 2021 §5.1;
    with a·d_h = h and g = a this is 24·T·h² + 4·T·s·h for GeLU, f = 4h)."""
    h, f = model.hidden, model.ffn_hidden
    q_width = model.heads * model.head_dim
    qkv = 2.0 * tokens * h * (q_width + 2.0 * model.kv_heads * model.head_dim)
    attn = 4.0 * tokens * seq_len * q_width * causal_fraction
    return qkv + attn + 2.0 * tokens * q_width * h + 2.0 * model.mlp_matrices * tokens * h * f


def model_flops_per_step(model: Model, seq_len, global_batch, causal: bool = True):
    """3 × forward FLOPs of all layers plus the logits GEMM, for B·s tokens (no recompute) [FLOP]."""
    tokens = global_batch * seq_len
    frac = CAUSAL_FRACTION if causal else 1.0
    fwd = model.layers * layer_flops_forward(model, tokens, seq_len, frac) + 2.0 * tokens * model.hidden * model.vocab
    return 3.0 * fwd


def step_terms(model: Model, hardware: Hardware, precision: str, attention: str, *, seq_len, global_batch,
               devices_per_node: int, tp, pp, dp, cp, vpp, micro_batch, zero, sp, recompute,
               tp_overlap=0.0, dp_shard=None, pipeline_split: str = "even",
               dp_collectives: str = "hierarchical", kernels: str = "fused") -> StepTerms:
    """Compose one training step (see module docstring and docs/model.md §Step)."""
    eff = hardware.efficiency
    tiers: Tiers = tiers_of(hardware, devices_per_node)
    # the data-parallel group's collectives (gradient reduction, ZeRO gathers): hierarchical rings
    # use every NIC of a node; flat rings one NIC per rank (docs/model.md §Collectives)
    dp_tiers = tiers if dp_collectives == "hierarchical" else replace(tiers, aggregate_nics=False)
    # ZeRO shards over dp_shard ranks (= dp, or a sub-group for hybrid sharding, HSDP); the
    # dp/dp_shard replicas then all-reduce the sharded gradients once per step.
    shard = dp if dp_shard is None else dp_shard
    replicas = dp / shard
    peak = hardware.peak(precision)
    gemm_peak_fraction = eff.gemm * (eff.low_precision_gemm if precision in ("fp8", "fp4") else 1.0)
    mem_bw = hardware.memory_bytes_per_s * eff.memory
    # attention runs in 16 bit (FP8/FP4 recipes keep it there), or at the run's own peak when that is lower
    # (an FP32/TF32 run): never faster than the run's precision allows, so MFU stays <= 1.
    # fused attention: the limit fraction η_attn, lowered for short (per-rank) sequences and narrow
    # heads, where fewer and smaller tiles keep the units less busy (FlashAttention-2 benchmarks,
    # Dao 2023 Fig. 4-6: causal forward at d_h = 128 reaches 0.32, 0.45, 0.54, 0.59, 0.61 of A100 peak
    # at s = 0.5k, 1k, 2k, 4k, 8k: s/(s + 512); d_h = 64 runs ~0.85x of d_h = 128: d_h/(d_h + 32))
    attn_flops_per_s = (min(hardware.peak_16bit_flops_per_s, peak) * eff.attention
                        * dimension_factor(seq_len / cp, ATTENTION_HALF_SEQ)
                        * dimension_factor(model.head_dim, ATTENTION_HALF_HEAD_DIM)
                        * (eff.flash2_attention if attention == "flash2" else 1.0))
    e = ACTIVATION_BYTES
    in_b = GEMM_INPUT_BYTES[precision]
    h, f, s = model.hidden, model.ffn_hidden, seq_len
    heads_local = model.heads / tp
    # KV heads per TP rank; with g < t Megatron replicates them, so each rank keeps at least one
    kv_local = xp.maximum(model.kv_heads, tp) * model.head_dim / tp
    tokens = micro_batch * s / cp                       # T: tokens of one micro-batch on this device
    m = global_batch / (dp * micro_batch)               # micro-batches per step
    full = xp.mask(recompute == 2)
    selective = xp.mask(recompute == 1)
    op = xp.mask(recompute == 3)          # torchtitan per-op selective checkpointing
    no_dropout = 0.0 if model.dropout else 1.0
    sp_div = xp.where(sp > 0, tp, 1.0)

    def gemm(mm, nn, kk) -> OpTime:
        return gemm_time(mm, nn, kk, peak_flops_per_s=peak, peak_fraction=gemm_peak_fraction,
                         half_dim=eff.gemm_half_dim, input_bytes=in_b, output_bytes=e, memory_bytes_per_s=mem_bw)

    # ---- forward of one layer, one micro-batch, on one device
    q_width = model.heads * model.head_dim              # a·d_h (= h for most models)
    linear = [gemm(tokens, q_width / tp + 2.0 * kv_local, h),                  # QKV
              gemm(tokens, h, q_width / tp),                                     # output projection
              gemm(tokens, (model.mlp_matrices - 1.0) * f / tp, h),              # MLP up (and gate)
              gemm(tokens, h, f / tp)]                                           # MLP down
    score_elements = micro_batch * heads_local * (s / cp) * s
    if attention in ("flash", "flash2"):
        attn_flops = 4.0 * score_elements * model.head_dim * CAUSAL_FRACTION
        attn_bytes = e * tokens * (2.0 * q_width / tp + 2.0 * kv_local)         # read Q, K, V, write O
        attn_fwd = fused_time(attn_flops, attn_bytes, attn_flops_per_s, mem_bw)
        attn_bwd = fused_time(FLASH_BACKWARD_FLOP_RATIO * attn_flops, 2.0 * attn_bytes,
                              attn_flops_per_s * FLASH_BACKWARD_EFFICIENCY, mem_bw)
        attn_fwd_parts = [attn_fwd]
        attn_bwd_parts = [attn_bwd]
    else:
        batch_heads = micro_batch * heads_local
        scores = gemm(s / cp, s, model.head_dim)
        context = gemm(s / cp, model.head_dim, s)
        scale = batch_heads
        attn_fwd_parts = [OpTime(scores.compute_s * scale, scores.memory_s * scale),
                          OpTime(context.compute_s * scale, context.memory_s * scale),
                          streaming_time((SOFTMAX_BYTES_PER_SCORE - no_dropout * NO_DROPOUT_SOFTMAX_SAVING)
                                         * score_elements, mem_bw)]
        attn_bwd_parts = [OpTime(2.0 * p.compute_s, 2.0 * p.memory_s) for p in attn_fwd_parts]
    eager = 1.0 if kernels == "eager" else 0.0
    h_wide_bytes = (H_WIDE_BYTES_PER_ELEMENT - no_dropout * NO_DROPOUT_H_WIDE_SAVING
                    + eager * EAGER_EXTRA_H_WIDE_BYTES_PER_ELEMENT)
    f_wide_passes = F_WIDE_PASSES[model.mlp] + eager * EAGER_EXTRA_F_WIDE_PASSES[model.mlp]
    elementwise_bytes = h_wide_bytes * tokens * h / sp_div + f_wide_passes * e * tokens * f / tp
    if precision in ("fp8", "fp4"):
        elementwise_bytes = elementwise_bytes + LOW_PRECISION_CAST_PASSES * tokens * (3.0 * h / sp_div + f / tp)
    elementwise = streaming_time(elementwise_bytes, mem_bw)

    fwd_ops = linear + attn_fwd_parts + [elementwise]
    bwd_ops = ([OpTime(2.0 * o.compute_s, 2.0 * o.memory_s) for o in linear] + attn_bwd_parts
               + [OpTime(elementwise.compute_s, BACKWARD_TRAFFIC_RATIO * elementwise.memory_s)])
    fwd_c, fwd_m = _sum(fwd_ops)
    bwd_c, bwd_m = _sum(bwd_ops)
    attn_c, attn_m = _sum(attn_fwd_parts)
    # recomputation: full re-runs the forward; selective re-runs the attention core; op (torchtitan's
    # policy: save every compute op's output except every second matmul) re-runs the 2nd, 4th and 6th
    # matmuls of the block (K, the output projection, and SwiGLU's up or GeLU's down projection) and
    # the element-wise ops, and keeps attention
    op_c, op_m = _sum([gemm(tokens, kv_local, h), linear[1],
                       gemm(tokens, f / tp, h) if model.mlp == "swiglu" else linear[3], elementwise])
    re_c = full * fwd_c + selective * attn_c + op * op_c
    re_m = full * fwd_m + selective * attn_m + op * op_m
    layer_c = fwd_c + bwd_c + re_c
    layer_m = fwd_m + bwd_m + re_m
    layer_overhead = eff.layer_overhead_s * (2.0 + full + op)

    # ---- tensor parallelism: 2 all-reduces (or RS+AG with SP) of T·h forward, 2 backward, 2 more
    # when the forward is recomputed (op: the 2 all-gathers feeding the recomputed matmuls, 1 all-reduce's
    # worth; the reduce-scatters' outputs are saved); exposed (no overlap).
    tp_one = all_reduce_s(e * tokens * h, tp, 1.0, tiers)
    tp_total = tp_one * (4.0 + 2.0 * full + op)
    # with tp_overlap (Megatron --tp-comm-overlap, userbuffers) the collectives are split into chunks
    # pipelined with the neighbouring GEMMs: only what exceeds the GEMM time, plus a residual, shows.
    linear_time = sum(o.time_s for o in linear) * (3.0 + full)
    tp_hidden = xp.maximum(tp_total - linear_time, TP_OVERLAP_RESIDUAL * tp_total)
    tp_layer = xp.where(tp_overlap > 0, tp_hidden, tp_total)
    # ---- context parallelism: K,V chunks around the ring, (c−1) steps forward, twice in backward,
    # overlapped with the attention computation.
    kv_chunk = 2.0 * e * tokens * kv_local
    cp_fwd = (cp - 1.0) * send_recv_s(kv_chunk, cp, tp, tiers) * xp.mask(cp > 1)
    attn_fwd_s = attn_c + attn_m
    attn_bwd_s = sum(_sum(attn_bwd_parts))
    cp_layer = (xp.maximum(cp_fwd - attn_fwd_s, 0.0) * (1.0 + full + selective)
                + xp.maximum(2.0 * cp_fwd - attn_bwd_s, 0.0))
    # attention time already spent hiding the CP ring: no other traffic can hide behind it
    cp_hiding_fwd = xp.minimum(cp_fwd, attn_fwd_s) * (1.0 + full + selective)
    cp_hiding_bwd = xp.minimum(2.0 * cp_fwd, attn_bwd_s)

    # ---- logits on the last stage: GEMM forward and backward + cross entropy
    logits = gemm(tokens, model.vocab / tp, h)
    ce = streaming_time(CROSS_ENTROPY_PASSES * 4.0 * tokens * model.vocab / tp, mem_bw)
    logits_c = 3.0 * logits.compute_bound_s
    logits_m = 3.0 * logits.memory_bound_s + ce.memory_s

    # ---- one micro-batch on a stage. With an even split every stage holds L/p layers and the last
    # also the logits; with the balanced split the embedding and the loss count as one layer each,
    # so the heaviest stage holds ceil((L+2)/(p·v))·v layers and the last one layer less + logits.
    heavy_layers, last_layers = stage_layers(model, pp, vpp, pipeline_split)
    per_layer_total = layer_c + layer_m + layer_overhead + tp_layer + cp_layer
    last_is_max = xp.mask(last_layers * per_layer_total + logits_c + logits_m >= heavy_layers * per_layer_total)
    layers_per_stage = xp.where(last_is_max > 0, last_layers, heavy_layers)
    stage_c = layers_per_stage * layer_c
    stage_m = layers_per_stage * layer_m
    stage_o = layers_per_stage * layer_overhead
    stage_tp = layers_per_stage * tp_layer
    stage_cp = layers_per_stage * cp_layer
    # pipeline: each of the v chunks sends activations forward and gradients backward
    pp_stride = tp * cp * dp
    p2p_bytes = e * tokens * h / tp                    # scatter/gather optimisation (Narayanan 2021 §4.1)
    stage_pp = 2.0 * vpp * send_recv_s(p2p_bytes, pp, pp_stride, tiers) * xp.mask(pp > 1)

    # ---- ZeRO-3 / FSDP: for every layer of every micro-batch, all-gather its weights forward and
    # backward and reduce-scatter its gradients (3 ring collectives per layer, so the ring latency
    # counts per layer); prefetched behind compute except one layer's worth.
    w_bytes = weight_bytes_per_param(precision)
    g_bytes = grad_bytes_per_param(precision)      # gradients reduced per parameter (FP32, or FP16)
    params_local = stage_params(model, pp, vpp, pipeline_split) / tp
    layer_params_local = model.params_per_layer / tp
    # weights are replicated over the c context-parallel ranks too: gradients are reduced, and ZeRO
    # state sharded, over the d·c ranks with the same tensor rank (Megatron's DP×CP group), stride t
    dp_stride = tp
    grad_group = dp * cp
    shard_group = shard * cp
    z3 = xp.mask(zero >= 3)
    z3_layer = (2.0 * all_gather_s(layer_params_local * w_bytes, shard_group, dp_stride, dp_tiers)
                + reduce_scatter_s(layer_params_local * g_bytes, shard_group, dp_stride, dp_tiers))
    embed_local = (params_local - layers_per_stage * layer_params_local)
    z3_comm = z3 * (layers_per_stage * z3_layer
                    + 2.0 * all_gather_s(embed_local * w_bytes, shard_group, dp_stride, dp_tiers)
                    + reduce_scatter_s(embed_local * g_bytes, shard_group, dp_stride, dp_tiers))
    # the window for the ZeRO-3 traffic: the stage's work, less the attention time that hides CP
    stage_work = stage_c + stage_m + stage_o - layers_per_stage * (cp_hiding_fwd + cp_hiding_bwd)
    kappa = eff.overlap_contention
    z3_exposed = _overlapped_exposed_s(z3_comm, stage_work, z3_layer, kappa) * z3

    mb_comm = stage_tp + stage_cp + stage_pp + z3_exposed
    mb_max_c = stage_c + last_is_max * logits_c
    mb_max_m = stage_m + last_is_max * logits_m
    mb_max = mb_max_c + mb_max_m + stage_o + mb_comm
    # fill and drain: (p−1)/v times a typical stage's micro-batch (layers only, no logits)
    mb_typical = heavy_layers * per_layer_total + stage_pp + z3_exposed

    bubble = (pp - 1.0) / vpp * mb_typical

    # ---- data parallelism (ZeRO 0–2): the gradient all-reduce (ZeRO-0), or the reduce-scatter of the
    # gradients (ZeRO-1/2, distributed optimizer), overlapped with the last micro-batch's backward
    # except the last bucket (one layer's worth); ZeRO-1/2's all-gather of the updated weights is
    # bucketed into the next step's forward (Megatron --overlap-param-gather, FSDP SHARD_GRAD_OP),
    # hidden behind the first micro-batch's forward except the first bucket.
    zero12 = xp.mask((zero >= 1) * (zero <= 2))
    z0 = xp.mask(zero == 0)
    grad_comm = (z0 * all_reduce_s(params_local * g_bytes, grad_group, dp_stride, dp_tiers)
                 + zero12 * reduce_scatter_s(params_local * g_bytes, shard_group, dp_stride, dp_tiers))
    gather_comm = zero12 * all_gather_s(params_local * w_bytes, shard_group, dp_stride, dp_tiers)
    # hybrid sharding: the replicas all-reduce their gradient shard (stride: one shard group)
    replica_comm = (1.0 - z0) * all_reduce_s(params_local / shard_group * g_bytes, replicas,
                                             dp_stride * shard_group, dp_tiers)
    # the windows: the last micro-batch's backward and the first one's forward, less what hides CP
    # and ZeRO-3's traffic (the backward all-gather and the reduce-scatter: 2 of its 3 collectives
    # per layer in the backward, the forward all-gather in the forward)
    backward_window = xp.maximum(layers_per_stage * (bwd_c + bwd_m - cp_hiding_bwd)
                                 - z3 * xp.minimum(z3_comm, stage_work) * (2.0 / 3.0), 0.0)
    forward_window = xp.maximum(layers_per_stage * (fwd_c + fwd_m - cp_hiding_fwd / (1.0 + full + selective))
                                - z3 * xp.minimum(z3_comm, stage_work) * (1.0 / 3.0), 0.0)
    # the HSDP replicas' all-reduce crosses the slow tier once per step after the shard group's
    # reduce-scatter: not hidden (docs/model.md §4.4: MaxText multi-slice runs slow down with the
    # number of slices as an exposed reduction predicts)
    reduce_total = grad_comm * (1.0 - z3)
    dp_exposed = (replica_comm
                  + _overlapped_exposed_s(reduce_total, backward_window, reduce_total / layers_per_stage, kappa)
                  + _overlapped_exposed_s(gather_comm, forward_window, gather_comm / layers_per_stage, kappa))
    # ZeRO-2 keeps only a gradient shard, so with gradient accumulation every micro-batch's gradients
    # are reduce-scattered during its backward (DeepSpeed ZeRO-2), not just the last one's
    z2_rs = reduce_scatter_s(params_local * g_bytes, shard_group, dp_stride, dp_tiers)
    z2_exposed = (xp.mask(zero == 2) * (m - 1.0)
                  * _overlapped_exposed_s(z2_rs, backward_window, z2_rs / layers_per_stage, kappa))
    dp_exposed = dp_exposed + z2_exposed

    # ---- optimizer: memory-bound Adam over the local (ZeRO-sharded) parameters
    opt_params = params_local / xp.where(zero >= 1, shard_group, 1.0)
    optimizer = opt_params * OPTIMIZER_BYTES_PER_PARAM / mem_bw

    compute_s = m * mb_max_c
    memory_s = m * mb_max_m + optimizer
    overhead_s = m * stage_o
    communication_s = m * mb_comm + dp_exposed
    time_s = compute_s + memory_s + overhead_s + communication_s + bubble

    # ---- the upper bound: nothing overlapped (every collective in full, no contention), the bubble
    # of the longer micro-batch with it (DESIGN: report both bounds of the overlap policy)
    cp_total = cp_fwd * (1.0 + full + selective) + 2.0 * cp_fwd
    serial_layer_comm = tp_total + cp_total
    serial_mb_comm = layers_per_stage * serial_layer_comm + stage_pp + z3_comm
    serial_typical = heavy_layers * (layer_c + layer_m + layer_overhead + serial_layer_comm) + stage_pp + z3_comm
    serial_dp = replica_comm + reduce_total + gather_comm + xp.mask(zero == 2) * (m - 1.0) * z2_rs
    no_overlap_time_s = (m * (mb_max_c + mb_max_m + stage_o + serial_mb_comm) + optimizer + serial_dp
                         + (pp - 1.0) / vpp * serial_typical)

    mflops = model_flops_per_step(model, s, global_batch)
    tokens_step = global_batch * s
    attn_fwd_per_token = 4.0 * s * model.heads * model.head_dim * CAUSAL_FRACTION
    op_params = h * model.kv_heads * model.head_dim + q_width * h + h * f     # the recomputed matmuls
    hw_extra = tokens_step * model.layers * (
        full * layer_flops_forward(model, 1.0, s, CAUSAL_FRACTION)
        + selective * attn_fwd_per_token + op * 2.0 * op_params)
    if attention == "standard":
        # materialised scores compute the masked half too: forward, backward and any recomputation
        hw_extra = hw_extra + tokens_step * model.layers * attn_fwd_per_token * (3.0 + full + selective)
    return StepTerms(time_s=time_s, compute_s=compute_s, memory_s=memory_s, communication_s=communication_s,
                     bubble_s=bubble, overhead_s=overhead_s, tp_comm_s=m * stage_tp, cp_comm_s=m * stage_cp,
                     pp_comm_s=m * stage_pp, dp_comm_s=dp_exposed + m * z3_exposed, optimizer_s=optimizer,
                     micro_batch_s=mb_max, no_overlap_time_s=no_overlap_time_s, model_flops=mflops, hardware_flops=mflops + hw_extra)
