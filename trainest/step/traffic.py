"""The traffic of each kind of parallelism, one function per formula (docs/model.md §4.1–4.5):
tensor parallelism, the context-parallel ring, pipeline point-to-point, ZeRO-3/FSDP gathers, and the
data-parallel gradient reduction (ZeRO 0–2, hybrid sharding). Each returns seconds on the tiers.
Sources: Narayanan et al. 2021 (TP, PP scatter/gather), Korthikanti et al. 2022 (SP), Liu et al.
2023 (ring attention), Rajbhandari et al. 2020 (ZeRO), Zhao et al. 2023 (FSDP, HSDP).
"""

from __future__ import annotations

from trainest import xp
from trainest.frameworks import FRAMEWORKS
from trainest.layout import Job, Layout, Num
from trainest.record import NamedTuple
from trainest.step.collectives import (
    Tiers,
    all_gather_s,
    all_reduce_s,
    in_domain,
    owner_broadcasts_s,
    reduce_scatter_s,
    send_recv_s,
)
from trainest.step.finetune import (
    adapter_params_per_layer,
    expert_adapter_params_per_layer,
    frozen_expert_layer_bytes,
    frozen_layer_bytes,
)
from trainest.step.layer import LayerPass
from trainest.step.rates import LocalShape

TP_OVERLAP_RESIDUAL = 0.15         # share of overlapped TP traffic still exposed (first/last chunk, SM contention)


def tp_layer_s(job: Job, layout: Layout, x: LocalShape, tiers: Tiers, linear_s: Num,
               all_reduces: Num | None = None) -> tuple[Num, Num]:
    """(all, exposed) TP seconds of one layer pass: 2 all-reduces (or RS+AG with SP) of T·h forward,
    2 backward, 2 more when the forward is recomputed (op: 1, the all-gathers feeding the recomputed
    matmuls); `all_reduces` another count (a MoE layer's, step/moe.py). With tp_overlap (Megatron
    --tp-comm-overlap) only what exceeds the GEMM time shows, at least TP_OVERLAP_RESIDUAL of it, where
    the TP group lies in one scale-up domain (`tp_overlap_applies`); elsewhere all of it."""
    one = all_reduce_s(job.element_bytes * x.tokens * job.model.hidden, layout.tp, 1.0, tiers)
    total = one * (4.0 + 2.0 * layout.full + layout.op if all_reduces is None else all_reduces)
    hidden = xp.maximum(total - linear_s, TP_OVERLAP_RESIDUAL * total)
    return total, xp.where(tp_overlap_applies(layout, tiers), hidden, total)


def tp_overlap_applies(layout: Layout, tiers: Tiers) -> Num:
    """1 where the TP collectives are pipelined with the GEMMs: tp_overlap on and every TP group inside
    one scale-up domain (`in_domain`). Transformer Engine's userbuffers, behind Megatron's
    --tp-comm-overlap, exchange the chunks over NVLink peer memory (CUDA IPC) within the domain; a
    group that reaches another node over the network is not overlapped (its traffic is exposed)."""
    return xp.mask(layout.tp_overlap > 0) * in_domain(layout.tp, 1.0, tiers)


class CpRing(NamedTuple):
    """Ring attention of one layer pass [s]: the forward ring, what shows, what hides it."""

    forward_s: Num              # (c−1) K,V chunk steps of one forward
    exposed_s: Num              # what the attention cannot hide (forward passes and the backward)
    hiding_fwd_s: Num           # attention time spent hiding it, forward passes
    hiding_bwd_s: Num           # the same in the backward
    total_s: Num                # every ring step, nothing hidden


def cp_ring(job: Job, layout: Layout, x: LocalShape, tiers: Tiers, lp: LayerPass, contention: Num = 0.0) -> CpRing:
    """K,V chunks of 2·e·T·(g·d_h/t) bytes go around the c ranks (stride t): (c−1) steps forward,
    twice that backward, overlapped with the attention computation; the forward runs again under
    full and selective recompute. What hides costs the contention share κ of it, as every hidden
    collective does (§4.7: overlapped_exposed_s's rule, with no bucket left over)."""
    chunk = 2.0 * job.element_bytes * x.tokens * x.kv_local
    fwd = (layout.cp - 1.0) * send_recv_s(chunk, layout.cp, layout.tp, tiers) * xp.mask(layout.cp > 1)
    passes = 1.0 + layout.full + layout.selective
    fwd_exposed = xp.maximum(fwd - lp.attn_fwd_s, contention * xp.minimum(fwd, lp.attn_fwd_s))
    bwd_exposed = xp.maximum(2.0 * fwd - lp.attn_bwd_s, contention * xp.minimum(2.0 * fwd, lp.attn_bwd_s))
    return CpRing(forward_s=fwd,
                  exposed_s=fwd_exposed * passes + bwd_exposed,
                  hiding_fwd_s=xp.minimum(fwd, lp.attn_fwd_s) * passes,
                  hiding_bwd_s=xp.minimum(2.0 * fwd, lp.attn_bwd_s), total_s=fwd * passes + 2.0 * fwd)


def pp_p2p_s(job: Job, layout: Layout, x: LocalShape, tiers: Tiers) -> Num:
    """Each of the v chunks sends its activations forward and its gradients backward: 2·v
    transfers of e·T·h/t bytes (scatter/gather, Narayanan 2021 §4.1) to the neighbour stage,
    stride t·c·d [s per micro-batch]."""
    size = job.element_bytes * x.tokens * job.model.hidden / layout.tp
    stride = layout.tp * layout.cp * layout.dp
    return 2.0 * layout.vpp * send_recv_s(size, layout.pp, stride, tiers) * xp.mask(layout.pp > 1)


class Zero3Traffic(NamedTuple):
    """ZeRO-3/FSDP collectives of one micro-batch on a stage [s], before overlap (zero3_s)."""

    layer_s: Num            # one layer's: its forward and backward all-gathers and its reduce-scatter
    total_s: Num            # the stage's layers' and embeddings' (0 without ZeRO-3)
    forward_s: Num = 0.0    # the part of total_s in the forward: one all-gather per layer and embedding
    layer_gather_s: Num = 0.0   # one layer's all-gather (the first forward layer waits for it)


def zero3_s(job: Job, layout: Layout, tiers: Tiers, stage_layers: Num, params_local: Num) -> Zero3Traffic:
    """ZeRO-3/FSDP traffic per micro-batch [s] (one layer, the whole stage, its forward part): every layer's weights
    all-gathered forward and backward and its gradients reduce-scattered over the d_shard·c ranks
    with the same tensor rank (stride t), plus the embedding's; a MoE model's routed experts likewise
    over their own shard group (expert_zero3_parts_s); 0 without ZeRO-3. `params_local`: the stage's
    non-expert parameters per device."""
    w, g = job.weight_bytes, job.grad_bytes
    group = layout.shard * layout.cp
    m = job.model
    layer_params = (m.params_per_layer if m.moe is None else m.params_per_layer - m.expert_params_per_layer) / layout.tp
    embed = params_local - stage_layers * layer_params
    gather, reduce, embed_gather, embed_reduce = layer_params * w, layer_params * g, embed * w, embed * g
    if not xp.off(layout.finetune):
        # a frozen base gathers its stored weights (NF4: ~0.5 B) and reduces only the adapters' gradients
        frozen = layout.frozen
        gather = xp.where(frozen > 0, frozen_layer_bytes(job, layout), gather)
        reduce = xp.where(frozen > 0, adapter_params_per_layer(job, layout) * g, reduce)
        embed_gather = xp.where(frozen > 0, embed * 2.0, embed_gather)
        embed_reduce = embed_reduce * (1.0 - frozen)
    layer_gather = all_gather_s(gather, group, layout.tp, tiers)
    layer = 2.0 * layer_gather + reduce_scatter_s(reduce, group, layout.tp, tiers)
    if m.moe is not None:
        expert_gather, expert_reduce = expert_zero3_parts_s(job, layout, tiers)
        layer_gather = layer_gather + expert_gather
        layer = layer + 2.0 * expert_gather + expert_reduce
    embed_gather_s = all_gather_s(embed_gather, group, layout.tp, tiers)
    total = layout.z3 * (stage_layers * layer + 2.0 * embed_gather_s
                         + reduce_scatter_s(embed_reduce, group, layout.tp, tiers))
    forward = layout.z3 * (stage_layers * layer_gather + embed_gather_s)
    return Zero3Traffic(layer_s=layer, total_s=total, forward_s=forward, layer_gather_s=layer_gather)


def expert_zero3_parts_s(job: Job, layout: Layout, tiers: Tiers) -> tuple[Num, Num]:
    """(one all-gather, the reduce-scatter) of one layer's routed experts per micro-batch [s]: the mean
    expert parameters per layer ÷ e·t_e, all-gathered twice and reduce-scattered once over the expert shard group (the
    expert data-parallel ranks, stride e·t_e); a frozen base gathers its stored bytes (NF4: ~0.5 B per
    parameter) and reduces its adapters' gradients only."""
    w, g = job.weight_bytes, job.grad_bytes
    params = job.model.expert_params_per_layer / layout.expert_group
    group, stride = layout.expert_shard, layout.expert_group
    gather, reduce = params * w, params * g
    if not xp.off(layout.finetune):      # a frozen base: its stored bytes gathered, the adapters' gradients reduced
        frozen = layout.frozen > 0
        gather = xp.where(frozen, frozen_expert_layer_bytes(job, layout), gather)
        reduce = xp.where(frozen, expert_adapter_params_per_layer(job, layout) * g, reduce)
    return all_gather_s(gather, group, stride, tiers), reduce_scatter_s(reduce, group, stride, tiers)


class DpTraffic(NamedTuple):
    """Data-parallel collectives of one step [s], before overlap; each `*_bucket_s` is one of its n_b
    calls (`dp_collective_calls`): the last bucket of the backward, the first of the forward."""

    reduce_s: Num               # ZeRO-0 gradient all-reduce, or ZeRO-1/2 reduce-scatter (0 under ZeRO-3)
    gather_s: Num               # ZeRO-1/2 all-gather of the updated weights
    replica_s: Num              # HSDP: the replicas' all-reduce of the gradient shard
    zero2_rs_s: Num             # one micro-batch's reduce-scatter (ZeRO-2 reduces every micro-batch)
    reduce_bucket_s: Num = 0.0  # one call of reduce_s
    gather_bucket_s: Num = 0.0  # one call of gather_s
    zero2_bucket_s: Num = 0.0   # one call of zero2_rs_s


class DpGroups(NamedTuple):
    """The data-parallel groups of one kind of parameter: gradients reduced over `grad` ranks, ZeRO
    state sharded over `shard`, `replicas` = grad/shard HSDP replicas; ranks `stride` apart."""

    grad: Num
    shard: Num
    replicas: Num
    stride: Num


def dense_dp_groups(layout: Layout) -> DpGroups:
    """The non-expert parameters: gradients over the d·c ranks with the same tensor rank (stride t),
    ZeRO over d_shard·c, d/d_shard replicas."""
    return DpGroups(grad=layout.dp * layout.cp, shard=layout.shard * layout.cp, replicas=layout.dp / layout.shard,
                    stride=layout.tp)


def expert_dp_groups(layout: Layout) -> DpGroups:
    """The routed experts: gradients over the d_e expert data-parallel ranks (stride e·t_e), ZeRO over
    the expert shard group (Layout.expert_shard)."""
    return DpGroups(grad=layout.edp, shard=layout.expert_shard, replicas=layout.edp / layout.expert_shard,
                    stride=layout.expert_group)


def dp_collective_calls(job: Job, layout: Layout, params_local: Num) -> Num:
    """n_b: the collectives each data-parallel reduction (and ZeRO-1/2's weight gather) of a step is split
    into, each paying its own latency (docs/model.md §4.4): ⌈P_local / B⌉ buckets of B = max(B_0, B_r·d·c)
    parameters (Megatron-Core, DeepSpeed: `Framework.dp_bucket_params`): the per-rank term keeps each
    ring chunk B/(d·c) of the gradients' d·c-rank reduction bandwidth-bound, so it counts the context-
    parallel ranks the gradients are reduced over; or one per layer of the stage (PyTorch FSDP's
    per-block units and the frameworks like it: dp_bucket_params 0); at least 1."""
    f = FRAMEWORKS[job.framework]
    if f.dp_bucket_params <= 0.0:
        return xp.maximum(job.model.layers / layout.pp, 1.0)
    bucket = xp.maximum(f.dp_bucket_params, f.dp_bucket_params_per_rank * layout.dp * layout.cp)
    return xp.maximum(xp.ceil(params_local / bucket), 1.0)


def dp_traffic(job: Job, layout: Layout, tiers: Tiers, params_local: Num, groups: DpGroups | None = None) -> DpTraffic:
    """Gradients are reduced over the d·c ranks with the same tensor rank (stride t); ZeRO state is
    sharded over d_shard·c; the d/d_shard replicas all-reduce their shard (stride d_shard·c·t). Each
    collective runs as n_b calls of 1/n_b of the bytes (`dp_collective_calls`): the same bandwidth term,
    n_b latencies; one call is the bucket that cannot hide (overlap.dp_exposed_parts). `groups`: another
    kind of parameter's groups (the experts', expert_dp_groups)."""
    w, g = job.weight_bytes, job.grad_bytes
    grad_group, shard_group, replicas, stride = groups or dense_dp_groups(layout)
    z0, zero12 = layout.z0, layout.zero12
    calls = dp_collective_calls(job, layout, params_local)
    per_call = params_local / calls
    scatter = calls * reduce_scatter_s(per_call * g, shard_group, stride, tiers)
    reduce = z0 * calls * all_reduce_s(per_call * g, grad_group, stride, tiers) + zero12 * scatter
    replica = (1.0 - z0) * calls * all_reduce_s(per_call / shard_group * g, replicas, stride * shard_group, tiers)
    reduce = reduce * (1.0 - layout.z3)
    gather = zero12 * calls * all_gather_s(per_call * w, shard_group, stride, tiers)
    if FRAMEWORKS[job.framework].zero_all_reduce:
        # ZeRO-1/2 as all-reduce + broadcasts (Framework.zero_all_reduce): every rank gets the whole reduced
        # gradient, keeps its shard's, and the updated shards are broadcast by their owners in turn
        reduce = xp.where(zero12 > 0, calls * all_reduce_s(per_call * g, grad_group, stride, tiers), reduce)
        replica = replica * (1.0 - zero12)
        gather = zero12 * owner_broadcasts_s(params_local * w, shard_group, stride, tiers)
    return DpTraffic(reduce_s=reduce, gather_s=gather, replica_s=replica, zero2_rs_s=scatter,
                     reduce_bucket_s=reduce / calls, gather_bucket_s=gather / calls, zero2_bucket_s=scatter / calls)


def add_dp_traffic(a: DpTraffic, b: DpTraffic) -> DpTraffic:
    """Two kinds of parameter's data-parallel collectives, run one after the other [s]."""
    return DpTraffic(*(u + v for u, v in zip(a, b, strict=True)))
