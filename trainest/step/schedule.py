"""The pipeline (docs/model.md §5): layers per stage under the even and the balanced split, the
heaviest stage, and the fill-and-drain bubble of the 1F1B / interleaved schedule for any number of
micro-batches. Sources: Narayanan et al. 2021 §2.2 (1F1B, interleaving), Megatron-LM's
account-for-embedding-and-loss split and `forward_backward_pipelining_with_interleaving`."""

from __future__ import annotations

from trainest import xp
from trainest.layout import Layout, Num
from trainest.models import Model
from trainest.record import NamedTuple


def stage_layers(model: Model, pp: Num, vpp: Num = 1.0, split: str | tuple[int, ...] = "even") -> tuple[Num, Num]:
    """(layers on the heaviest stage but the last, layers on the last stage).

    A pipeline layout (`split` the decoder layers of each rank, trainest/pipeline_layout.py): its
    heaviest rank before the last, and its last rank (with p = 1, all of them).

    even: L/p each (L must divide by p·v). balanced (Megatron's account-for-embedding-and-loss
    split): the embedding and the loss count as one layer each, and multi-token prediction's modules as
    their layers (`Model.mtp_layers`, on the last stage: DeepSeek-V3's and Megatron-Bridge's pipeline
    layouts give it fewer layers), a stage holds u = ceil((L + 2 + L_mtp)/(p·v))·v units, the first
    stage one layer less than u and the last 1 + L_mtp less; the middle stages u layers, so with p = 2,
    where there is none, the heaviest is the first (u − 1).
    """
    if isinstance(split, tuple):
        return float(max(split[:-1] or split)), float(split[-1])
    if split == "even":
        return model.layers / pp, model.layers / pp
    mtp = model.mtp_layers
    units = xp.ceil((model.layers + 2.0 + mtp) / (pp * vpp)) * vpp
    heavy = xp.where(pp > 2, units, xp.where(pp > 1, units - 1.0, float(model.layers)))
    return heavy, xp.where(pp > 1, xp.maximum(units - 1.0 - mtp, 0.0), float(model.layers))


def stage_params(model: Model, pp: Num, vpp: Num = 1.0, split: str | tuple[int, ...] = "even",
                 per_layer: float | None = None, mtp_params: float | None = None) -> Num:
    """Parameters on the heaviest pipeline stage: its layers plus one embedding-sized matrix
    (first stage: input embedding; last stage: output layer and the multi-token-prediction modules),
    or all of them when p = 1. With the balanced split the first stage trades one layer for the
    embedding. `per_layer`, `mtp_params`: the parameters counted per layer and of the MTP modules
    (default: all of them, Model.params_per_layer, Model.mtp_params)."""
    per_layer = model.params_per_layer if per_layer is None else per_layer
    embed_one = model.vocab * model.hidden
    heavy, last = stage_layers(model, pp, vpp, split)
    mtp = mtp_params if mtp_params is not None else model.mtp_params      # on the last stage
    if isinstance(split, tuple):        # a pipeline layout: its first, middle and last ranks
        if len(split) == 1:
            return split[0] * per_layer + model.embedding_params + mtp
        middle = max(split[1:-1], default=0)
        return max(split[0] * per_layer + embed_one, middle * per_layer, split[-1] * per_layer + embed_one + mtp)
    if split == "even":
        return heavy * per_layer + xp.where(pp > 1, embed_one, model.embedding_params) + mtp
    with_embed = last * per_layer + xp.where(pp > 1, embed_one, model.embedding_params) + mtp
    first = xp.where(pp > 2, heavy - 1.0, heavy) * per_layer + embed_one     # one layer fewer, the input embedding
    return xp.maximum(xp.maximum(heavy * per_layer, with_embed), xp.where(pp > 1, first, 0.0))


def stage_dense_params(model: Model, pp: Num, vpp: Num = 1.0, split: str | tuple[int, ...] = "even") -> Num:
    """Parameters of the heaviest stage that tensor parallelism splits and every data-parallel rank
    holds: everything but the routed experts (attention, norms, dense and shared MLPs, routers,
    embeddings); = stage_params for a dense model."""
    if model.moe is None:
        return stage_params(model, pp, vpp, split)
    return stage_params(model, pp, vpp, split, model.params_per_layer - model.expert_params_per_layer,
                        model.mtp_params - model.mtp_expert_params)


def stage_expert_params(model: Model, pp: Num, vpp: Num = 1.0, split: str | tuple[int, ...] = "even") -> Num:
    """Routed-expert parameters of the heaviest stage (its layers × the mean expert parameters per
    layer; the last stage's with the MTP modules' experts), before expert parallelism divides them by
    e·t_e; 0 for a dense model."""
    heavy, last = stage_layers(model, pp, vpp, split)
    with_mtp = xp.where(pp > 1, last, float(model.layers)) * model.expert_params_per_layer + model.mtp_expert_params
    return xp.maximum(heavy * model.expert_params_per_layer, with_mtp)


def first_is_heavy(layout: Layout) -> Num:
    """1 where the first pipeline stage (with the embedding) holds as many layers as the heaviest: the
    even split; the balanced one with p ≤ 2 (no middle stage); a layout whose first rank is its heaviest."""
    split = layout.split
    if isinstance(split, tuple):
        return 1.0 if len(split) == 1 or split[0] >= max(split[:-1]) else 0.0
    return 1.0 if split == "even" else xp.mask(layout.pp <= 2)


class Stage(NamedTuple):
    """The stage that sets the pace: its layer count, and whether it is the last (with the logits)."""

    layers: Num                 # layers on the slowest stage
    heavy_layers: Num           # layers on the heaviest stage (a typical stage, for the bubble)
    last_is_max: Num            # 1.0 where the last stage (layers + logits) is the slowest


def slowest_stage(model: Model, layout: Layout, layer_s: Num, logits_s: Num) -> Stage:
    """The slowest stage of one micro-batch: the heaviest stage, or the last one when its layers plus
    the logits take longer (layer_s: one layer's time; logits_s: the logits and loss) [s]."""
    heavy, last = stage_layers(model, layout.pp, layout.vpp, layout.split)
    last_is_max = xp.mask(last * layer_s + logits_s >= heavy * layer_s)
    return Stage(layers=xp.where(last_is_max > 0, last, heavy), heavy_layers=heavy, last_is_max=last_is_max)


def bubble_slots(pp: Num, vpp: Num, micro_batches: Num) -> Num:
    """Fill and drain of the pipeline, in micro-batch times of a typical stage (t_mb):

        (p−1)/v + max(p − m, 0)·(1 − 1/v)

    With m ≥ p micro-batches (and, interleaved, m a multiple of p) the schedule keeps every stage
    busy except for the fill and drain: (p−1) chunk slots of t_mb/v each (Narayanan et al. 2021 §2.2).
    With m < p no schedule overlaps more than the m micro-batches there are: each one must pass the
    p·v chunks of the pipeline in order, so the forward (and the backward) of the last micro-batch
    ends (p·v + m − 1) chunk slots after the first one starts; the step is (p + (m−1)/v)·t_mb, of
    which m·t_mb is work. At v = 1 both cases give 1F1B's (m + p − 1) slots for every m, and at
    m = 1 every v gives p·t_mb: one micro-batch crosses the p stages one after the other."""
    short = xp.maximum(pp - micro_batches, 0.0)
    return (pp - 1.0) / vpp + short * (1.0 - 1.0 / vpp)


# DualPipe (DeepSeek-AI 2024, §3.2.1 and Table 2): bubble (p/2 − 1)·(F&B + B − 3W) against 1F1B's (p − 1)·(F + B),
# with F, B the forward and the whole backward of a chunk, W its weight gradient, F&B a forward and a backward
# run overlapped. In a stage's micro-batch time t = F + B with the backward twice the forward (F = t/3,
# B = 2t/3), W half the backward (one of its two GEMMs per weight GEMM: t/3) and F&B = F + B (the overlap hides
# communication, not computation): F&B + B − 3W = t + 2t/3 − t = 2t/3.
DUALPIPE_SLOT = 2.0 / 3.0


def dualpipe_copies(layout: Layout) -> Num:
    """Pipeline stages' parameters one device holds: 2 with DualPipe and a pipeline (each device runs a
    stage of each direction: DeepSeek-AI 2024, Table 2, parameters 2×), else 1."""
    return xp.where(layout.pp > 1, 2.0, 1.0) if layout.dualpipe else 1.0


def dualpipe_slots(pp: Num) -> Num:
    """DualPipe's fill and drain in micro-batch times: (p/2 − 1)·DUALPIPE_SLOT (0 without a pipeline)."""
    return xp.maximum(pp / 2.0 - 1.0, 0.0) * DUALPIPE_SLOT


def bubble_s(layout: Layout, micro_batches: Num, typical_micro_batch_s: Num) -> Num:
    """The pipeline bubble [s]: bubble_slots(p, v, m) (DualPipe: dualpipe_slots(p)) times a typical
    stage's micro-batch time."""
    slots = dualpipe_slots(layout.pp) if layout.dualpipe else bubble_slots(layout.pp, layout.vpp, micro_batches)
    return slots * typical_micro_batch_s
