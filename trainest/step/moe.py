"""A mixture-of-experts layer on one device (docs/model.md §15): the router, the routed experts as
grouped GEMMs, the shared experts, the permutation of the tokens, and the token dispatch and combine
all-to-alls over the expert-parallel group. One function per formula.

Layout (Megatron-Core MoE, "expert parallelism" docs): the attention block runs on the t·c·d ranks of
a pipeline stage as in a dense layer; the MoE block regroups the same ranks as t_e (expert tensor
parallel, innermost) × e (expert parallel) × d_e (expert data parallel), e·t_e·d_e = t·c·d. Each rank
holds E/e routed experts, each split t_e ways. The block works on the T_in = T/t tokens of the rank's
sequence-parallel shard: their K copies are sent to the ranks of their experts (dispatch), each rank
runs its experts on what it receives, and the results go back (combine), weighted by the router's
probabilities. With forced balance (imbalance I = 1, Megatron-Bridge's benchmarks) every local expert
gets n_e = e·t_e·T_in·K/E tokens; the busiest rank gets I times that, and the step waits for it.

Sources: Lepikhin et al. 2020 (GShard: top-k gating, expert capacity, all-to-all dispatch); Fedus et
al. 2021 (Switch Transformer: capacity factor, token dropping); Rajbhandari et al. 2022
(DeepSpeed-MoE: expert + data parallelism, all-to-all cost); DeepSeek-AI 2024 (DeepSeek-V3 report
§3.2: dispatch/combine overlap, DualPipe, shared experts); Megatron-Core MoE documentation
(alltoall token dispatcher, grouped GEMM, ETP/EP/EDP groups).
"""

from __future__ import annotations

import math

from trainest import xp
from trainest.frameworks import FRAMEWORKS
from trainest.layout import Job, Layout, Num
from trainest.model_blocks import MoE
from trainest.precision import MAIN_GRAD_BYTES
from trainest.record import NamedTuple
from trainest.step import mla
from trainest.step.collectives import Tiers, all_gather_s, all_to_all_s, group_ranks_per_domain, in_node
from trainest.step.kernels import EAGER_ACTIVATION_KERNELS, MOE_ROUTING_KERNELS, host_per_kernel_s
from trainest.step.layer import (
    BACKWARD_TRAFFIC_RATIO,
    LOW_PRECISION_CAST_PASSES,
    LayerPass,
    MlpPart,
    activation_op,
    f_wide_passes,
    gradient_ops,
    h_wide_bytes,
    layer_ops,
    layer_pass,
    mlp_gemms,
)
from trainest.step.overlap import overlapped_exposed_s
from trainest.step.rates import BACKWARD, FORWARD, LocalShape, Rates, grouped_gemm, module_rates
from trainest.step.roofline import Op, OpTime, gemm_compute_efficiency, gemm_flops, op_of, streaming_time
from trainest.step.traffic import tp_layer_s

ROUTER_BYTES_PER_SCORE = 16.0     # FP32 router scores: softmax/sigmoid read + write, top-k read, routing map write
# permute (fused, Transformer Engine moe_permute: read each token once, write its K copies grouped by expert)
# and unpermute (read the K weighted copies, write one token) move e·h·T_in·(1 + K) bytes each
SORT_PASSES = 4.0                 # after dispatch, sort the received chunks by local expert; before combine, unsort
PERMUTATION_BACKWARD_RATIO = 1.0  # the permutation's backward moves its forward's bytes once (inverse permutation)
A2A_PER_LAYER_PASS = 2.0          # dispatch + combine in a forward (their gradients in the backward: as many)
# The grouped expert MLP launches its GEMMs expert by expert (Transformer Engine GroupedLinear: one
# cuBLAS GEMM per group, issued from the host in a loop; Megatron-Core TEGroupedMLP):
EXPERT_GEMM_LAUNCHES = 2.0        # per local expert and forward: fc1 (up and gate), fc2 (down)
# FP8/FP4 adds, per local expert and GEMM, the quantisation of its input (forward: the two GEMMs'
# inputs; backward: the two output gradients; Transformer Engine's split_quantize, one kernel per expert
# under MXFP8 and block scaling), and per layer Megatron-Core's padding of every local expert's rows to the
# FP8 GEMM's alignment: two Fp8Padding calls (hidden states, routing probabilities) and one Fp8Unpadding, each
# ONE multi-tensor kernel over all the local experts (megatron-core 0.14/0.16 TEGroupedMLP.forward, Transformer
# Engine 2.8/2.14 fused_multi_row_padding), as many backward. Until stop 48 the padding was counted 2 per
# local expert and pass, a stand-in for per-layer host work the routing count lacked (MOE_ROUTING_KERNELS was
# 6; docs/model.md §15.2).
EXPERT_CAST_LAUNCHES = 2.0        # per local expert and pass (forward; as many backward)
MOE_PAD_LAUNCHES = 3.0            # per MoE layer and pass with FP8/FP4 (forward; as many backward)
# A Python loop over the local experts (frameworks.py: expert_loop "python"; transformers'
# MixtralSparseMoeBlock: torch.where over the routing mask, gather the rows, the MLP's GEMMs and
# activation, the routing-weight product, index_add into the output) launches per expert and forward
# these besides the MLP's own k_f GEMMs and activation kernels; backward about twice the forward's.
PYTHON_LOOP_EXTRA_LAUNCHES = 5.0
# Biased experts and a clamped GLU outside the fused kernels (docs/model.md §15.13; GPT-OSS: `MoE.expert_bias`,
# `MoE.glu_clamp`), Megatron-Core TEGroupedMLP without the fused grouped MLP. The down projection's bias is returned
# by the grouped GEMM (skip_bias_add) and added per local expert in PyTorch (TEGroupedMLP._apply_bias: split the
# output by expert, t + b·p with the token's routing probability p, cat): forward b·p written (1), the add (read 2,
# write 1), the cat (read 1, write 1); backward the split's cat (2), grad·p and its row sum (3), grad·b and its sum
# over h (3). Passes of the e-byte h-wide output rows (the up projection's bias is inside the fused activation).
EXPERT_BIAS_PASSES = (6.0, 8.0)   # (forward, backward) over the routed rows' I·T_in·K·h elements
EXPERT_BIAS_LAUNCHES = (2.0, 4.0)  # per local expert: forward mul, add; backward mul, sum, mul, sum
# The clamp runs before the fused GLU kernel (Megatron-Core fusions/fused_bias_geglu.py:
# weighted_bias_quick_geglu_impl: chunk, clamp each half, cat): forward each half read and written (4 f-wide passes
# of the 2·f_e-wide rows' halves) and the cat (4); backward each clamp's mask product (read the gradient and the
# input, write: 6) and the halves' gradients joined into one (4). Passes of e-byte f_e-wide values per routed row.
GLU_CLAMP_PASSES = (8.0, 10.0)    # (forward, backward)
# The token dispatcher (docs/model.md §15.11; `Job.moe_dispatcher`): what it sends, the SMs it keeps, whether
# the host waits on it. NCCL's all-to-all (Megatron-Core's `alltoall` dispatcher) sends every token copy to
# its expert's rank; DeepEP's internode kernels and HybridEP send a token once per remote domain that holds
# one of its experts and forward it inside (DeepSeek-AI 2024 §3.2.2; remote_domain_share).
DEDUPLICATING_DISPATCHERS = ("deepep", "hybridep")
# SMs the dispatch and combine kernels keep while they run beside computation (DeepEP README: Buffer.num_sms,
# 20 by default; the Megatron-Bridge recipes: moe_deepep_num_sms 20, moe_hybridep_num_sms 16 or 32, the larger
# taken). NCCL's all-to-all runs on its channels, whose cost beside computation is the contention share κ (§4.7).
DISPATCHER_SMS = {"alltoall": 0.0, "deepep": 20.0, "hybridep": 32.0}
# Every dispatcher's layer reads the per-expert token counts on the host before it launches the experts (a
# device-to-host copy and a stream synchronisation each MoE layer forward) unless the layer is captured in a
# full-iteration CUDA graph: Transformer Engine's GroupedLinear takes its m_splits as a host list (Megatron-Core
# TEGroupedMLP: tokens_per_expert.tolist()), whichever dispatcher delivered the rows; besides, Megatron-Core's
# alltoall dispatcher needs the counts for the all-to-all's split sizes, DeepEP's normal kernels make the host
# wait for notify_dispatch's receive counts (DeepEP README: only its low-latency kernels are CUDA-graph
# capturable), and HybridEP without a per-rank capacity (the recipes' moe_expert_rank_capacity_factor, set only
# where the 26.06+ recipes capture the whole iteration) sizes its output from the received count.


def moe_of(job: Job) -> MoE:
    """The model's MoE block (these functions are called for MoE models only)."""
    if job.model.moe is None:
        raise ValueError(f"{job.model.name} has no mixture-of-experts layers")
    return job.model.moe


def expert_load_factor(moe: MoE) -> float:
    """Tokens of the busiest rank's experts over the mean: the imbalance I, capped by the capacity
    factor c_f when tokens beyond capacity are dropped (Fedus et al. 2021): min(I, c_f)."""
    if moe.capacity_factor is None:
        return moe.imbalance
    return min(moe.imbalance, moe.capacity_factor)


def moe_tokens_per_rank(layout: Layout, x: LocalShape) -> Num:
    """T_in = T/t: the tokens the MoE block of one rank routes (its sequence-parallel shard of the
    micro-batch; Megatron-Core requires sequence parallelism with TP and EP)."""
    return x.tokens / layout.tp


def tokens_per_local_expert(job: Job, layout: Layout, x: LocalShape) -> Num:
    """n_e = e·t_e·T_in·K/E: mean tokens each local expert computes on one rank (the e·t_e ranks of
    an expert-parallel group send their T_in·K copies to E experts; the t_e ranks of an expert each
    take all of its tokens) [tokens]."""
    moe = moe_of(job)
    return layout.ep * layout.etp * moe_tokens_per_rank(layout, x) * moe.top_k / moe.experts


def expert_gemms(job: Job, layout: Layout, r: Rates, x: LocalShape) -> list[Op]:
    """The routed experts of one rank, forward: E/e local experts, each with I·n_e tokens on the
    busiest rank, up (and gate) (I·n_e × (k_f − 1)·f_e/t_e × h) and down (I·n_e × h × f_e/t_e)."""
    m, moe = job.model, moe_of(job)
    tokens = expert_load_factor(moe) * tokens_per_local_expert(job, layout, x)
    width = moe.expert_ffn_hidden / layout.etp
    groups, eff = moe.experts / layout.ep, job.hardware.efficiency.grouped_gemm
    return [grouped_gemm(r, "experts_up", groups, tokens, (m.mlp_matrices - 1.0) * width, m.expert_hidden, eff),
            grouped_gemm(r, "experts_down", groups, tokens, m.expert_hidden, width, eff)]


def expert_backward_gemms(job: Job, layout: Layout, r: Rates, x: LocalShape, trained: Num = 1.0) -> list[Op]:
    """The routed experts' backward, GEMM by GEMM: for up and down, the input gradient (dgrad: read
    the output gradient and the weights, write the input gradient) and the weight gradient (wgrad:
    read the inputs and the output gradient, accumulate into the FP32 main gradient: read and write
    MAIN_GRAD_BYTES each, Megatron's fused gradient accumulation). Each has the forward's FLOPs. The
    weights of E/e experts are large next to their I·n_e rows, so wgrad can be memory-bound where the
    forward is not (the dense GEMMs keep backward = 2 × forward). wgrad × `trained` (0 for a frozen base)."""
    m, moe = job.model, moe_of(job)
    tokens = expert_load_factor(moe) * tokens_per_local_expert(job, layout, x)
    width = moe.expert_ffn_hidden / layout.etp
    groups, eff = moe.experts / layout.ep, job.hardware.efficiency.grouped_gemm
    out: list[Op] = []
    for name, n, k in (("experts_up", (m.mlp_matrices - 1.0) * width, m.expert_hidden),
                       ("experts_down", m.expert_hidden, width)):
        # dgrad: (T×n)·(n×k) -> T×k; wgrad: (k×T)·(T×n) -> k×n accumulated into FP32
        dgrad_bytes = (tokens * n + n * k) * r.gemm_input_bytes + tokens * k * job.element_bytes
        wgrad_bytes = (tokens * k + tokens * n) * r.gemm_input_bytes + 2.0 * MAIN_GRAD_BYTES * k * n
        for kind, (mm, nn, kk), moved in (("dgrad", (tokens, k, n), dgrad_bytes),
                                          ("wgrad", (k, n, tokens), wgrad_bytes)):
            g = gemm_with_bytes(r, mm, nn, kk, groups, moved)
            op = op_of(f"{name}.{kind}", BACKWARD, groups * gemm_flops(mm, nn, kk), groups * moved,
                       OpTime(groups * g.compute_s / eff, groups * g.memory_s))
            out.append(op.scaled(trained) if kind == "wgrad" else op)
    return out


def gemm_with_bytes(r: Rates, m: Num, n: Num, k: Num, batch: Num, bytes_moved: Num) -> OpTime:
    """An (m×k)·(k×n) GEMM (one of `batch` in one kernel) at the device's GEMM rates that moves
    `bytes_moved` [B]."""
    eff = gemm_compute_efficiency(m, n, k, peak_fraction=r.gemm_peak_fraction, half_dim=r.gemm_half_dim,
                                  wave=r.wave(m, n, k, batch), padded=r.padded(m, n), grouped=True)
    return OpTime(compute_s=gemm_flops(m, n, k) / (r.peak_flops_per_s * eff),
                  memory_s=bytes_moved / r.memory_bytes_per_s)


def latent_gemms(job: Job, layout: Layout, r: Rates, x: LocalShape) -> list[Op]:
    """LatentMoE's projections of the rank's T_in tokens, down to the latent before the dispatch (T_in ×
    l × h) and back up after the combine (T_in × h × l); none without a latent (NVIDIA Nemotron 3 Super:
    the all-to-alls and the experts then move and read l-wide rows), at the `module_precision` of latent_proj."""
    latent = moe_of(job).latent_size
    if latent is None:
        return []
    t_in, h, rl = moe_tokens_per_rank(layout, x), job.model.hidden, module_rates(job, r, "latent_proj")
    return [rl.gemm_op("latent_down", t_in, latent, h), rl.gemm_op("latent_up", t_in, h, latent)]


def router_gemm(job: Job, layout: Layout, r: Rates, x: LocalShape) -> Op:
    """The router (gate) of one rank: T_in × E × h [one GEMM; its scores then stream, router_bytes], at 16 bit
    under an FP8/FP4 recipe too (`router_rates`)."""
    return router_rates(job, r).gemm_op("router", moe_tokens_per_rank(layout, x), moe_of(job).experts,
                                        job.model.hidden)


def router_rates(job: Job, r: Rates) -> Rates:
    """The rates of the router's GEMMs: 16 bit whatever the recipe. Megatron-Core's router is a plain parameter in
    the model's dtype multiplied outside Transformer Engine's FP8 modules (megatron-core 0.16
    `RouterGatingLinearFunction`: a GEMM of the BF16 input and weight without quantisers, its output in the
    router dtype), so an FP8/FP4 job runs it at the 16-bit peak and η_gemm with 2-byte inputs (its backward,
    with moe_router_dtype fp32, takes FP32 inputs at the TF32 rate: not an input, counted at 16 bit); `r` itself
    for a 16- or 32-bit job."""
    if not job.low_precision:
        return r
    hw = job.hardware
    return r._replace(peak_flops_per_s=hw.peak("bf16") if "bf16" in hw.peak_flops_per_s else hw.peak_16bit_flops_per_s,
                      gemm_peak_fraction=hw.efficiency.gemm, gemm_input_bytes=2.0)


def shared_expert_gemms(job: Job, layout: Layout, r: Rates, x: LocalShape) -> list[Op]:
    """The S shared experts, fused into one dense MLP of width S·f_s split over t (Megatron-Core's
    SharedExpertMLP) on the layer's T tokens; none without shared experts."""
    m, moe = job.model, moe_of(job)
    if not moe.shared_experts:
        return []
    return mlp_gemms(r, "shared", x.tokens, m.hidden, moe.shared_experts * moe.shared_width / layout.tp,
                     m.mlp_matrices)


def routed_copies(job: Job, layout: Layout, x: LocalShape) -> Num:
    """I·T_in·K: token copies of the busiest rank per expert width slice (its experts' rows, ÷t_e
    for the gathered rows of expert tensor parallelism) [tokens]."""
    moe = moe_of(job)
    return expert_load_factor(moe) * moe_tokens_per_rank(layout, x) * moe.top_k


def permutation_bytes(job: Job, layout: Layout, x: LocalShape) -> Num:
    """Forward bytes of moving the token copies of one rank outside the all-to-all kernels [B], by dispatcher
    (§15.11), with C = t_e·I·T_in·K the rows its experts compute:

    - alltoall: permute (read each of its T_in tokens once, write its K copies in expert order; the fused
      kernel), sort the C received rows by local expert and unsort them before the combine (SORT_PASSES),
      unpermute (read the K weighted copies of each token, write one): e·h·(2·T_in·(1 + K) + 4·C);
    - deepep: the sender's rows go out as they are (DeepEP's dispatch reads each token once per rank it goes
      to); the receiver permutes its R = ρ·C received rows (`rank_share`) into the C expert rows and unpermutes
      them back before the combine (Megatron-Core _DeepepManager: permute / unpermute): e·h·2·(R + C);
    - hybridep: none: the permutation runs inside the dispatch and combine kernels ("permute + dispatch a2a +
      permute" in one kernel, Megatron-Core fused_a2a.HybridEPDispatch: dispatch_with_permute,
      combine_with_unpermute), whose time the links set."""
    moe = moe_of(job)
    rows = job.element_bytes * job.model.expert_hidden
    copies = layout.etp * routed_copies(job, layout, x)
    if job.moe_dispatcher == "hybridep":
        return 0.0 * copies
    if job.moe_dispatcher == "deepep":
        return rows * 2.0 * (rank_share(job, layout) + 1.0) * copies
    t_in = moe_tokens_per_rank(layout, x)
    return rows * (2.0 * t_in * (1.0 + moe.top_k) + SORT_PASSES * copies)


def rank_share(job: Job, layout: Layout) -> Num:
    """ρ = e·(1 − P_miss)/K ≤ 1: the rows a dispatch sends per token copy. NCCL's all-to-all (`alltoall`) sends
    each of a token's K copies to its expert's rank: ρ = 1. DeepEP and HybridEP send a token once to each rank
    that holds one of its experts (DeepEP's dispatch layout: is_token_in_rank, num_tokens_per_rank; HybridEP's
    routing map over ranks × local experts), and the rank expands it to its experts: the token reaches
    e·(1 − P_miss) of the e ranks, P_miss the chance that a rank's E/e experts hold none of its K
    (`domain_miss_probability` with the ranks as domains; group-limited routing counted). Qwen3 30B-A3B
    (E = 128, K = 8) over e = 8: ρ = 0.67; GPT-OSS (128, K = 4) over 64: 0.98; ρ = 1 for K = 1."""
    moe = moe_of(job)
    if job.moe_dispatcher not in DEDUPLICATING_DISPATCHERS:
        return 1.0
    ranks = xp.maximum(layout.ep, 1.0)
    return ranks * (1.0 - domain_miss_probability(moe, ranks)) / moe.top_k


def router_bytes(job: Job, layout: Layout, x: LocalShape) -> Num:
    """Forward bytes of the router's scores: ROUTER_BYTES_PER_SCORE·T_in·E [B] (FP32 softmax or
    sigmoid, top-k, routing map)."""
    return ROUTER_BYTES_PER_SCORE * moe_tokens_per_rank(layout, x) * moe_of(job).experts


def routed_hidden_unfused(job: Job) -> float:
    """1 where the routed experts' activation and the cast of their second GEMM's input are kernels of their own
    (passes over the I·T_in·K·f_e hidden rows), 0 with the fused grouped MLP (`Job.fused_grouped_mlp`: in the
    grouped GEMMs' epilogues, forward and backward; §15.12)."""
    return 0.0 if job.fused_grouped_mlp else 1.0


def expert_extra_bytes(job: Job, layout: Layout, x: LocalShape) -> tuple[Num, Num]:
    """(forward, backward) bytes of one MoE layer's biased experts and clamped GLU outside the fused kernels [B]:
    EXPERT_BIAS_PASSES·e·C·h with C = t_e·I·T_in·K the routed rows (`MoE.expert_bias`) and GLU_CLAMP_PASSES·e·C·f_e/t_e
    (`MoE.glu_clamp`); none with the fused grouped MLP (Transformer Engine's fused grouped-MLP operation takes the
    grouped biases and the clamped GLU in its kernels) (§15.13)."""
    moe = moe_of(job)
    rows = layout.etp * routed_copies(job, layout, x) * routed_hidden_unfused(job) * job.element_bytes
    bias = (1.0 if moe.expert_bias else 0.0) * rows * job.model.expert_hidden
    clamp = (0.0 if moe.glu_clamp is None else 1.0) * rows * moe.expert_ffn_hidden / layout.etp
    return (EXPERT_BIAS_PASSES[0] * bias + GLU_CLAMP_PASSES[0] * clamp,
            EXPERT_BIAS_PASSES[1] * bias + GLU_CLAMP_PASSES[1] * clamp)


def routed_activation_op(job: Job, layout: Layout, r: Rates, x: LocalShape) -> Op:
    """The routed experts' activation, forward, as the `moe_act` recompute module re-runs it: its f-wide passes
    (`activation_op`) and the clamp before it (GLU_CLAMP_PASSES, when the GLU is clamped and not fused) [op]."""
    moe = moe_of(job)
    act = activation_op(job, r, "experts.activation", routed_copies(job, layout, x) * moe.expert_ffn_hidden)
    if moe.glu_clamp is None:
        return act
    clamp = (GLU_CLAMP_PASSES[0] * job.element_bytes * routed_hidden_unfused(job) * routed_copies(job, layout, x)
             * moe.expert_ffn_hidden)
    moved = act.bytes + clamp
    return op_of(act.name, FORWARD, 0.0 * moved, moved, streaming_time(moved, r.memory_bytes_per_s))


def moe_elementwise_bytes(job: Job, layout: Layout, x: LocalShape) -> Num:
    """Forward element-wise bytes of one MoE layer [B]: the h-wide kernels of a dense layer, the
    activation's f-wide passes over the routed (I·T_in·K·f_e; none with the fused grouped MLP) and shared
    (T·S·f_s/t) expert rows, the permutation and the router's scores, the FP8/FP4 casts of every GEMM input
    (the routed second GEMM's not with the fused grouped MLP), MLA's extra traffic."""
    m, moe = job.model, moe_of(job)
    copies = routed_copies(job, layout, x)
    routed_hidden = routed_hidden_unfused(job) * copies * moe.expert_ffn_hidden
    shared = x.tokens * moe.shared_experts * moe.shared_width / layout.tp
    total = (h_wide_bytes(job, layout, x)
             + f_wide_passes(job) * job.element_bytes * (routed_hidden + shared)
             + permutation_bytes(job, layout, x) + router_bytes(job, layout, x) + expert_extra_bytes(job, layout, x)[0])
    if job.low_precision:
        has_shared = 1.0 if moe.shared_experts else 0.0
        total = total + LOW_PRECISION_CAST_PASSES * (
            (2.0 + has_shared) * x.tokens * m.hidden / layout.sp_div + shared
            + layout.etp * copies * m.expert_hidden + routed_hidden)
    if m.mla is not None:
        total = total + mla.elementwise_bytes(job, layout, x)
    return total


def moe_mlp(job: Job, layout: Layout, r: Rates, x: LocalShape) -> MlpPart:
    """One MoE layer's block after attention: the router, the shared experts and the grouped expert
    GEMMs (their backward GEMM by GEMM, expert_backward_gemms), the layer's element-wise traffic, what
    op recompute re-runs of it (the experts' down projection, the shared experts' down), what the
    recompute modules moe, moe_act and shared_experts re-run, and its routing kernels."""
    experts, shared = expert_gemms(job, layout, r, x), shared_expert_gemms(job, layout, r, x)
    moved = moe_elementwise_bytes(job, layout, x)
    elementwise = op_of("elementwise", FORWARD, 0.0 * moved, moved, streaming_time(moved, r.memory_bytes_per_s))
    back = moe_elementwise_backward_bytes(job, layout, x, moved)
    elementwise_bwd = op_of("elementwise", BACKWARD, 0.0 * back, back, streaming_time(back, r.memory_bytes_per_s))
    dense = [router_gemm(job, layout, r, x)] + latent_gemms(job, layout, r, x) + shared
    moe = moe_of(job)
    routing = permutation_bytes(job, layout, x) + router_bytes(job, layout, x)
    block = op_of("moe.routing", FORWARD, 0.0 * routing, routing, streaming_time(routing, r.memory_bytes_per_s))
    acts = [routed_activation_op(job, layout, r, x)]
    if shared:
        acts.append(activation_op(job, r, "shared.activation", x.tokens * moe.shared_experts * moe.shared_width
                                  / layout.tp))
    # what each recompute module re-runs (layer.py: selective_ops): the whole block, the routed experts'
    # activation, the shared experts
    modules = (("moe", dense + experts + [block] + acts), ("moe_act", acts[:1]), ("shared_experts", shared + acts[1:]))
    trained: Num = 1.0 if xp.off(layout.finetune) else 1.0 - layout.frozen     # a frozen base: no weight gradients
    return MlpPart(gemms=dense + experts,
                   gradients=gradient_ops(dense, trained) + expert_backward_gemms(job, layout, r, x, trained),
                   elementwise=elementwise, op_recompute=[experts[-1]] + shared[-1:],
                   extra_kernels=MOE_ROUTING_KERNELS, elementwise_backward=elementwise_bwd, modules=modules,
                   kind="moe", expert_rows=expert_load_factor(moe) * tokens_per_local_expert(job, layout, x))


def moe_elementwise_backward_bytes(job: Job, layout: Layout, x: LocalShape, forward_bytes: Num) -> Num:
    """Backward element-wise bytes of one MoE layer [B]: BACKWARD_TRAFFIC_RATIO × the forward's, but
    the permutation once (`PERMUTATION_BACKWARD_RATIO`): the gradient of a permutation is the inverse
    permutation, which moves the same rows (Transformer Engine's moe_permute backward is an unpermute
    of the gradient, moe_unpermute's a permute; Megatron-Core's sort_chunks_by_idxs backward a sort by
    the inverse index), where a norm's or an activation's backward reads about twice what its forward
    does (§2.5)."""
    perm = permutation_bytes(job, layout, x)
    extra_forward, extra_backward = expert_extra_bytes(job, layout, x)     # counted pass by pass (§15.13)
    return (BACKWARD_TRAFFIC_RATIO * (forward_bytes - perm - extra_forward) + PERMUTATION_BACKWARD_RATIO * perm
            + extra_backward)


def expert_pass_launches(job: Job, layout: Layout) -> tuple[Num, Num]:
    """(forward, backward with what it recomputes) host launches one MoE layer's grouped expert MLP
    issues expert by expert, per micro-batch, as its framework launches them (`Framework.expert_loop`:
    none beyond the grouped GEMMs for `grouped`; for `python` each expert's k_f GEMMs, activation and
    PYTHON_LOOP_EXTRA_LAUNCHES routing operators in place of the two GEMMs). Per local expert: forward
    EXPERT_GEMM_LAUNCHES GEMMs (+
    EXPERT_CAST_LAUNCHES with FP8/FP4: each GEMM input's quantisation); backward twice the GEMMs (dgrad,
    wgrad; a frozen base's experts no wgrad) and as many casts; full recompute (and the `moe` recompute
    module) runs the forward's again, op recompute the down projection. Per layer, not per expert, FP8/FP4
    adds MOE_PAD_LAUNCHES each pass (the rows' padding to the FP8 alignment, one multi-tensor kernel each)."""
    moe = moe_of(job)
    loop = FRAMEWORKS[job.framework].expert_loop
    if loop == "grouped":                # one kernel per grouped GEMM: counted with the layer's GEMMs
        return 0.0, 0.0
    low = 1.0 if job.low_precision else 0.0
    per_pass_casts = low * EXPERT_CAST_LAUNCHES
    gemms = weight_gemms = EXPERT_GEMM_LAUNCHES
    if loop == "python":                 # the expert's MLP operator by operator, in the Python loop
        act = EAGER_ACTIVATION_KERNELS[job.model.mlp]
        gemms, weight_gemms = job.model.mlp_matrices + act + PYTHON_LOOP_EXTRA_LAUNCHES, float(job.model.mlp_matrices)
    frozen = 0.0 if xp.off(layout.finetune) else layout.frozen      # a frozen expert launches no weight gradient
    # the down projection's bias added expert by expert outside the GEMM (EXPERT_BIAS_LAUNCHES, §15.13)
    bias = 1.0 if moe.expert_bias and loop == "gemm" and not job.fused_grouped_mlp else 0.0
    forward = gemms + per_pass_casts + bias * EXPERT_BIAS_LAUNCHES[0]
    backward = (2.0 * gemms - frozen * weight_gemms + per_pass_casts + job.moe_rerun(layout) * forward
                + layout.op * 0.5 * gemms + bias * EXPERT_BIAS_LAUNCHES[1])
    local_experts = moe.experts / layout.ep
    pads = low * MOE_PAD_LAUNCHES if loop == "gemm" else 0.0     # one multi-tensor padding kernel each
    return (local_experts * forward + pads,
            local_experts * backward + pads * (1.0 + job.moe_rerun(layout)))


def expert_launches(job: Job, layout: Layout) -> Num:
    """Host launches of one MoE layer's grouped expert MLP, expert by expert, per micro-batch, all
    passes: E/e × (EXPERT_GEMM_LAUNCHES·(3 − φ_f + [full] + [op]/2) + [FP8/FP4]·EXPERT_CAST_LAUNCHES·(2 + [full]))
    + [FP8/FP4]·MOE_PAD_LAUNCHES·(2 + [full]) (Transformer Engine GroupedLinear: one GEMM per local expert,
    launched from the host; `expert_pass_launches`). Every launch costs the host τ_host like any
    kernel (docs/model.md §2.9): with E/e = 16 and few rows per expert (micro-batch 1) the layer
    becomes host-bound."""
    forward, backward = expert_pass_launches(job, layout)
    return forward + backward


def expert_host_pass_s(job: Job, layout: Layout) -> tuple[Num, Num]:
    """(forward, backward) host time of the mean layer's per-expert launches, one micro-batch [s]:
    L_m/L · expert_pass_launches · τ_host ((0, 0) for a dense model). Added to the layer's host
    passes (§2.9, §15.2)."""
    if job.model.moe is None:
        return 0.0, 0.0
    if job.cuda_graphs == "full":        # captured with the layer (static expert shapes), §2.10
        return 0.0, 0.0
    forward, backward = expert_pass_launches(job, layout)
    scale = job.model.moe_layers / job.model.layers * host_per_kernel_s(job)
    return forward * scale, backward * scale


def expert_host_layer_s(job: Job, layout: Layout) -> Num:
    """Host time of the mean layer's per-expert launches, one micro-batch, both passes [s]
    (`expert_host_pass_s` summed; 0 for a dense model)."""
    forward, backward = expert_host_pass_s(job, layout)
    return forward + backward


def dispatch_bytes(job: Job, layout: Layout, x: LocalShape) -> Num:
    """e·I·T_in·K·h: the bytes one all-to-all moves for the busiest rank (16-bit token rows) [B]."""
    return job.element_bytes * routed_copies(job, layout, x) * job.model.expert_hidden


def all_to_all_tiers(job: Job, tiers: Tiers) -> Tiers:
    """The tiers as the all-to-all kernels see them: the links' rates times `efficiency.all_to_all`
    (instead of the ring collectives' η_up, η_out; docs/model.md §15.3)."""
    hw, eff = job.hardware, job.hardware.efficiency
    up = tiers.up_bytes_per_s / eff.scale_up * eff.all_to_all
    out = (hw.scale_out_bytes_per_s * eff.all_to_all if hw.scale_out_bytes_per_s else tiers.out_bytes_per_s)
    return tiers._replace(up_bytes_per_s=up, out_bytes_per_s=out)


def ep_all_to_all_s(job: Job, layout: Layout, x: LocalShape, tiers: Tiers) -> Num:
    """One dispatch (or combine) [s]: the all-to-all over the e ranks of the expert-parallel group
    (stride t_e) at the all-to-all rates, plus with t_e > 1 the all-gather (reduce-scatter at the
    combine) of the received rows over the expert tensor-parallel group (stride 1).

    Inside one node (or NVL72 domain) it is `all_to_all_s` of ρ·S (`rank_share`: DeepEP and HybridEP send a
    token once per rank that holds one of its experts, NCCL every copy). A group that spans N domains sends
    each token through the network once per remote domain that holds one of its experts, and that
    domain's receiving rank forwards it to its experts' ranks over the scale-up links (DeepEP's internode
    dispatch and combine, HybridEP; DeepSeek-AI 2024 §3.2.2): the NIC carries
    r·(n − k)/n·S (`remote_domain_share`) instead of every copy's (n − k)/n·S, and the scale-up links
    the rows bound off the rank, (n − 1)/n·ρ·S (none with one rank per domain, k = 1: nothing to forward);
    both at once, plus one network hop's latency."""
    size = dispatch_bytes(job, layout, x)
    t = all_to_all_tiers(job, tiers)
    n, stride = layout.ep, layout.etp
    k = group_ranks_per_domain(n, stride, t)
    per_rank = rank_share(job, layout) * size          # the rows a deduplicating dispatcher sends, once per rank
    within = all_to_all_s(per_rank, n, stride, t)
    nic = remote_domain_share(job, layout, t) * (n - k) / n * size / t.out_bytes_per_s
    # with one rank of the group per domain (k = 1) nothing is forwarded inside it: no scale-up link is used
    # (one DGX Spark per node has none, and its NaN rate must not reach the sum)
    inner_bw = xp.where(k > 1, xp.where(k * stride <= t.domain, t.up_bytes_per_s, t.node_bytes_per_s), math.inf)
    across = xp.maximum((n - 1.0) / n * per_rank / inner_bw, nic) + t.out_latency_s
    return (xp.where(in_node(n, stride, t), within, across)
            + all_gather_s(layout.etp * size, layout.etp, 1.0, tiers))


def remote_domain_share(job: Job, layout: Layout, tiers: Tiers) -> Num:
    """r = N·(1 − P_miss)/K ≤ 1: a dispatch's network bytes when each token crosses once per remote
    domain that holds one of its experts, over those when every copy crosses. The group's e ranks
    span N = e/k domains (k ranks each, E/N experts each); P_miss is the chance that a given domain
    holds none of the token's K experts (`domain_miss_probability`, with group-limited routing where
    the model has it), so the token reaches (N − 1)·(1 − P_miss) remote domains instead of sending
    K·(N − 1)/N copies. r = 1 for K = 1 or N = 1 and falls as K grows (Qwen3, K = 8, over 4 domains:
    r = 0.45; DeepSeek-V3 over 8 domains: 0.66 unrestricted, 0.45 with its 4 of 8 groups). Only a
    deduplicating dispatcher (DeepEP, HybridEP) does so; NCCL's all-to-all (`alltoall`) has r = 1."""
    moe = moe_of(job)
    if job.moe_dispatcher not in DEDUPLICATING_DISPATCHERS:     # NCCL's all-to-all sends every copy, §15.11
        return 1.0
    k = group_ranks_per_domain(layout.ep, layout.etp, tiers)
    domains = xp.maximum(layout.ep / k, 1.0)
    return xp.where(domains > 1.0, domains * (1.0 - domain_miss_probability(moe, domains)) / moe.top_k, 1.0)


def _miss_probability(pool: float, held: Num, top_k: int) -> Num:
    """P that K distinct experts drawn uniformly from `pool` miss the `held` ones:
    Π_{i<K} (pool − held − i)/(pool − i)."""
    miss: Num = 1.0
    for i in range(top_k):
        miss = miss * xp.maximum(pool - held - i, 0.0) / (pool - i)
    return miss


def _comb(x: Num, j: int) -> Num:
    """C(x, j) = Π_{i<j} (x − i)/(i + 1) for whole x ≥ 0 (0 when j > x), element-wise."""
    out: Num = 1.0
    for i in range(j):
        out = out * xp.maximum(x - i, 0.0) / (i + 1)
    return out


def domain_miss_probability(moe: MoE, domains: Num) -> Num:
    """P that one of N domains (E/N consecutive experts each) holds none of a token's K experts, with
    forced balance (every choice equally likely). Without group limits the K experts are K distinct of
    the E. With group-limited routing (DeepSeek-V2/V3's n_group/topk_group: the experts in G consecutive
    groups, each token first picks g groups, then its K experts among their g·E/G; DeepSeek-AI 2024 §2.1.2
    "node-limited routing", Megatron-Core `moe_router_num_groups`/`moe_router_group_topk`) a domain that
    holds q = G/N whole groups has j of them picked (hypergeometric) and then misses with the pool's odds;
    where a group spans several domains (N > G) a domain's experts are picked with their group, g/G."""
    e, k, groups, picked = moe.experts, moe.top_k, moe.router_groups, moe.router_group_top_k
    if picked >= groups:
        return _miss_probability(float(e), e / domains, k)
    pool, q = picked * e / groups, groups / domains
    pmf = [_comb(q, j) * _comb(groups - q, picked - j) / _comb(float(groups), picked) for j in range(picked + 1)]
    total = sum(pmf)
    nested = sum(p / total * _miss_probability(pool, j * e / groups, k) for j, p in enumerate(pmf))
    split = 1.0 - picked / groups * (1.0 - _miss_probability(pool, e / domains, k))
    return xp.where(domains <= groups, nested, split)


def ep_layer_s(job: Job, layout: Layout, x: LocalShape, tiers: Tiers, window_s: Num) -> tuple[Num, Num]:
    """(all, exposed) expert-parallel seconds of one MoE layer pass: dispatch and combine forward,
    their gradients backward, the forward's again where the block is re-run (full recompute, the `moe`
    recompute module: Job.moe_rerun): (4 + 2·[re-run]) all-to-alls.
    Exposed in full unless the framework overlaps them (`moe_overlap: deepep`: hidden behind another
    micro-batch's computation, `window_s`, at the contention share max(κ, s/U): the hardware's κ, §4.7, or the
    share of the SMs the dispatcher keeps, `dispatcher_sm_share`; so does DualPipe with a pipeline, §5.4:
    `Layout.ep_hidden`)."""
    total = A2A_PER_LAYER_PASS * (2.0 + job.moe_rerun(layout)) * ep_all_to_all_s(job, layout, x, tiers)
    hidden = layout.ep_hidden
    if xp.off(hidden):
        return total, total
    contention = max(job.hardware.efficiency.overlap_contention, dispatcher_sm_share(job))
    exposed = overlapped_exposed_s(total, window_s, 0.0, contention)
    return total, xp.where(hidden > 0, exposed, total)


def dispatcher_sm_share(job: Job) -> float:
    """s/U: the share of the device's U compute units the dispatcher's kernels keep while they run beside
    computation (DISPATCHER_SMS; 0 where the units are unknown): a hidden all-to-all of t seconds slows the
    computation it hides behind by s/U·t, the contention share of its overlap where that exceeds the
    hardware's κ (§4.7, §15.11)."""
    units = job.hardware.compute_units
    return DISPATCHER_SMS[job.moe_dispatcher] / units if units else 0.0


def dispatch_sync_segment_s(job: Job, layout: Layout, r: Rates, x: LocalShape) -> tuple[Num, Num]:
    """(host, device) seconds of the mean layer's part after a host-synchronising dispatch, one
    micro-batch: the forward's per-expert launches and the routed experts' forward GEMMs (again where the
    block is re-run), × L_m/L. The host cannot run ahead across the synchronisation (every dispatcher's
    layer reads the token counts: module note above `moe_of`), so the layer's host wait is
    taken on each side of it (compose.layer_time_s, §15.11). (0, 0) for a dense model or full CUDA graphs
    (static shapes, capacity-padded: no host read)."""
    if job.model.moe is None or job.cuda_graphs == "full":
        return 0.0, 0.0
    host_fwd, _ = expert_host_pass_s(job, layout)
    runs = 1.0 + job.moe_rerun(layout)
    device = sum((op.time_s for op in expert_gemms(job, layout, r, x)), 0.0)
    share = job.model.moe_layers / job.model.layers
    # without per-expert launches after it (grouped kernels), the host has nothing to wait on there
    return runs * host_fwd, xp.where(host_fwd > 0.0, runs * share * device, 0.0)


def moe_tp_all_reduces(job: Job, layout: Layout) -> Num:
    """TP all-reduces (or RS + AG with SP) of T·h per MoE layer pass: the attention block's one
    forward and one backward, and the shared experts' one each (the routed experts exchange tokens
    by all-to-all instead), plus the forward's again under full recompute (the shared experts' with the
    `moe` recompute module) and one under op."""
    shared = 1.0 if moe_of(job).shared_experts else 0.0
    return (2.0 + 2.0 * shared) + (1.0 + shared) * layout.full + shared * layout.selective * job.recomputes("moe") \
        + layout.op


class MoeLayer(NamedTuple):
    """One MoE layer pass: its computation and its TP and EP traffic [s] (all, exposed)."""

    lp: LayerPass
    tp_total_s: Num
    tp_exposed_s: Num
    ep_total_s: Num
    ep_exposed_s: Num


def moe_layer(job: Job, layout: Layout, r: Rates, x: LocalShape, tiers: Tiers,
              attention: tuple[list[Op], list[Op], list[Op]] | None = None) -> MoeLayer:
    """A MoE layer on one device: the layer pass and its TP and expert-parallel traffic
    (`attention`: the attention block's GEMMs and its core's forward and backward ops, when computed)."""
    lp = layer_pass(job, layout, r, x, layer_ops(job, layout, r, x, moe_mlp(job, layout, r, x), attention))
    tp_total, tp_exposed = tp_layer_s(job, layout, x, tiers, lp.linear_s, moe_tp_all_reduces(job, layout))
    ep_total, ep_exposed = ep_layer_s(job, layout, x, tiers, lp.compute_s + lp.memory_s)
    return MoeLayer(lp=lp, tp_total_s=tp_total, tp_exposed_s=tp_exposed, ep_total_s=ep_total,
                    ep_exposed_s=xp.maximum(ep_exposed, 0.0))
