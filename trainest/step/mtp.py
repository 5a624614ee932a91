"""Multi-token prediction on the last pipeline stage (docs/model.md §15.10): DeepSeek-V3's MTP module
(arXiv:2412.19437 §2.2) and Megatron-Core's mtp_num_layers. Each of the `depth` modules, one after the
other and per micro-batch, norms the last hidden state and the embedding of the token one further
ahead, projects their concatenation (T × h × 2h), runs its blocks (one MoE transformer layer, `*E`;
Nemotron 3's attention and MoE block), and the shared output head and loss again. Its parts are the
model's own: the blocks are the model's layer passes of those kinds, the head is `logits_ops`.
"""

from __future__ import annotations

from collections.abc import Sequence

from trainest.layout import Job, Layout, Num
from trainest.record import NamedTuple
from trainest.step.collectives import Tiers
from trainest.step.hybrid import BlockPass, block_passes, mix_blocks
from trainest.step.layer import BACKWARD_TRAFFIC_RATIO, LayerPass, layer_pass
from trainest.step.moe import moe_layer
from trainest.step.rates import BACKWARD, LocalShape, Rates, module_job, rates_of
from trainest.step.roofline import Op, bound_sums, op_of, streaming_time
from trainest.step.traffic import tp_layer_s

MTP_NORMS = 3.0      # the hidden state's and the embedding's norms before the projection, the final norm after


class MtpPass(NamedTuple):
    """One MTP module on the last stage, one micro-batch: its blocks as one pass with their TP and EP
    traffic [s] (all, exposed), how many of the model's mean layers' host launches they take, and its
    own work beyond them (the projection with its gradients and the norms: compute- and memory-bound
    seconds); `depth` modules run. (A record of arrays, so that the plan search shares it by layer knobs.)"""

    depth: int
    lp: LayerPass
    tp_total_s: Num
    tp_exposed_s: Num
    ep_total_s: Num
    ep_exposed_s: Num
    host_layers: float
    extra_c: Num
    extra_m: Num
    extra_ops: tuple[Op, ...] = ()     # that own work as ops: the projection and its gradients, the norms


def mtp_pass(job: Job, layout: Layout, r: Rates, x: LocalShape, tiers: Tiers,
             parts: dict[str, BlockPass] | None = None) -> MtpPass | None:
    """The model's MTP module as block units (None without MTP): a transformer's `*E` is one MoE layer
    (step/moe.py) and `*-` one dense layer; a hybrid model's blocks are its block passes of those kinds
    (step/hybrid.py). `parts`: the mean layer's own passes by kind (compose.MeanLayer.parts), when
    computed: the same passes, not computed again. Its projection T × h × 2h forward, data and weight
    gradients; its MTP_NORMS norms read and write h-wide 16-bit tensors, twice that backward. Kept in another
    precision by `module_precision` (mtp), the module is that precision's job throughout (docs/model.md §2.2)."""
    m = job.model
    mtp = m.mtp
    if mtp is None:
        return None
    at = module_job(job, "mtp")
    if at is not job:
        return mtp_pass(at, layout, rates_of(at, layout), x, tiers)
    parts = parts or {}
    units: list[tuple[str, float, BlockPass]] = []
    if m.hybrid is not None:
        kinds = parts or {name: bp for name, _, bp in block_passes(job, layout, r, x, tiers)}
        names = {"M": "mamba", "*": "attention", "E": "moe", "-": "mlp"}
        for kind in mtp.pattern:        # kinds of the model's own pattern (models.py: _mtp_from)
            units.append((f"mtp.{names[kind]}", 1.0, kinds[names[kind]]))
    elif mtp.pattern == "*E":
        bp = parts.get("moe")
        if bp is None:
            ml = moe_layer(job, layout, r, x, tiers)
            bp = BlockPass(ml.lp, ml.tp_total_s, ml.tp_exposed_s, ml.ep_total_s, ml.ep_exposed_s)
        units.append(("mtp", 1.0, bp))
    else:
        bp = parts.get("dense")
        if bp is None:
            lp = layer_pass(job, layout, r, x)
            total, exposed = tp_layer_s(job, layout, x, tiers, lp.linear_s)
            bp = BlockPass(lp, total, exposed)
        units.append(("mtp", 1.0, bp))
    lp, tp_total, tp_exposed, ep_total, ep_exposed = mix_blocks(units)
    h = m.hidden
    proj = r.gemm_op("mtp.proj", x.tokens, h, 2.0 * h)
    norms = MTP_NORMS * 2.0 * job.element_bytes * x.tokens * h / layout.sp_div * (1.0 + BACKWARD_TRAFFIC_RATIO)
    norm_op = op_of("mtp.norms", "forward", 0.0 * norms, norms, streaming_time(norms, r.memory_bytes_per_s))
    c, mm = bound_sums([proj, proj, proj, norm_op])
    forward_share = 1.0 / (1.0 + BACKWARD_TRAFFIC_RATIO)
    extra = (proj, proj._replace(name="mtp.proj.dgrad", phase=BACKWARD),
             proj._replace(name="mtp.proj.wgrad", phase=BACKWARD), norm_op.scaled(forward_share),
             norm_op.scaled(1.0 - forward_share, phase=BACKWARD))
    return MtpPass(depth=mtp.depth, lp=lp, tp_total_s=tp_total, tp_exposed_s=tp_exposed, ep_total_s=ep_total,
                   ep_exposed_s=ep_exposed, host_layers=float(len(units)), extra_c=c, extra_m=mm, extra_ops=extra)


def mtp_ops(mtp: MtpPass, logits: Sequence[Op]) -> list[Op]:
    """The `depth` MTP modules' ops of one micro-batch on the last stage, named `mtp.…`: their blocks' ops
    (recomputed ones in the backward), the projection with its gradients and the norms, and the output head
    and loss again (`logits`, the stage's logits ops), each × depth: what a trace's kernels of the modules are
    compared with (trace/compare.py) and what the timeline draws (timeline.py). Their compute- and memory-bound
    sums are compose.mtp_terms' per micro-batch."""
    d = float(mtp.depth)
    ops = mtp.lp.ops
    blocks: list[Op] = [] if ops is None else list(ops.forward) + list(ops.backward)
    if ops is not None:
        for group in ops.recomputed:
            blocks += [o.scaled(group.mask, phase=BACKWARD) for o in group.ops]
    head = [o._replace(name=f"mtp.{o.name}") for o in logits]
    return [o.scaled(d) for o in blocks + list(mtp.extra_ops) + head]
