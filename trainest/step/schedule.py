"""The pipeline (docs/model.md §5): layers per stage under the even and the balanced split, the
heaviest stage, and the fill-and-drain bubble of the 1F1B / interleaved schedule.
Sources: Narayanan et al. 2021 §2.2 (1F1B, interleaving), Megatron-LM's
account-for-embedding-and-loss split."""

from __future__ import annotations

from typing import NamedTuple

from trainest import xp
from trainest.catalog import Model
from trainest.layout import Layout, Num


def stage_layers(model: Model, pp: Num, vpp: Num = 1.0, split: str = "even") -> tuple[Num, Num]:
    """(layers on the heaviest stage, layers on the last stage).

    even: L/p each (L must divide by p·v). balanced (Megatron's account-for-embedding-and-loss
    split): the embedding and the loss count as one layer each, a stage holds
    u = ceil((L+2)/(p·v))·v units, the first and last stages one layer less than u.
    """
    if split == "even":
        return model.layers / pp, model.layers / pp
    units = xp.ceil((model.layers + 2.0) / (pp * vpp)) * vpp
    heavy = xp.where(pp > 1, units, float(model.layers))
    return heavy, xp.where(pp > 1, units - 1.0, float(model.layers))


def stage_params(model: Model, pp: Num, vpp: Num = 1.0, split: str = "even", per_layer: float | None = None) -> Num:
    """Parameters on the heaviest pipeline stage: its layers plus one embedding-sized matrix
    (first stage: input embedding; last stage: output layer), or all embeddings when p = 1.
    With the balanced split the first stage trades one layer for the embedding. `per_layer`: the
    parameters counted per layer (default: all of them, Model.params_per_layer)."""
    per_layer = model.params_per_layer if per_layer is None else per_layer
    embed_one = model.vocab * model.hidden
    heavy, last = stage_layers(model, pp, vpp, split)
    if split == "even":
        return heavy * per_layer + xp.where(pp > 1, embed_one, model.embedding_params)
    with_embed = last * per_layer + xp.where(pp > 1, embed_one, model.embedding_params)
    return xp.maximum(heavy * per_layer, with_embed)


def stage_dense_params(model: Model, pp: Num, vpp: Num = 1.0, split: str = "even") -> Num:
    """Parameters of the heaviest stage that tensor parallelism splits and every data-parallel rank
    holds: everything but the routed experts (attention, norms, dense and shared MLPs, routers,
    embeddings); = stage_params for a dense model."""
    if model.moe is None:
        return stage_params(model, pp, vpp, split)
    return stage_params(model, pp, vpp, split, model.params_per_layer - model.expert_params_per_layer)


def stage_expert_params(model: Model, pp: Num, vpp: Num = 1.0, split: str = "even") -> Num:
    """Routed-expert parameters of the heaviest stage (its layers × the mean expert parameters per
    layer), before expert parallelism divides them by e·t_e; 0 for a dense model."""
    heavy, _ = stage_layers(model, pp, vpp, split)
    return heavy * model.expert_params_per_layer


class Stage(NamedTuple):
    """The stage that sets the pace: its layer count, and whether it is the last (with the logits)."""

    layers: Num                 # layers on the slowest stage
    heavy_layers: Num           # layers on the heaviest stage (a typical stage, for the bubble)
    last_is_max: Num            # 1.0 where the last stage (layers + logits) is the slowest


def slowest_stage(model: Model, layout: Layout, layer_s: Num, logits_s: Num) -> Stage:
    """The slowest stage of one micro-batch: the heaviest stage, or the last one when its layers plus
    the logits take longer (layer_s: one layer's time; logits_s: the logits and loss) [s]."""
    heavy, last = stage_layers(model, layout.pp, layout.vpp, layout.pipeline_split)
    last_is_max = xp.mask(last * layer_s + logits_s >= heavy * layer_s)
    return Stage(layers=xp.where(last_is_max > 0, last, heavy), heavy_layers=heavy, last_is_max=last_is_max)


def bubble_s(layout: Layout, typical_micro_batch_s: Num) -> Num:
    """Fill and drain of the pipeline: (p−1)/v times a typical stage's micro-batch [s]
    (Narayanan et al. 2021 §2.2)."""
    return (layout.pp - 1.0) / layout.vpp * typical_micro_batch_s
