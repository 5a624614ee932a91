"""The parallel layout's validity rules, each written once: a predicate over the layout's sizes that works
on plain numbers (one scenario) and on numpy arrays (every candidate of the plan search at once), its name,
the key it is about (the YAML path of the knob the message names) and its message.

A scenario (`scenario_from_mapping`) raises the first broken rule's message (`check`); the plan search keeps
the candidates for which the rules hold (`holds`) and tallies what it rejects by each rule's `reason` (the
search summary's rejection names). The rules read a `Facts` record: the job's sizes (heads, layers, experts,
sequence, global batch, devices) and the layout's knobs, each a number or an array.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeAlias

from trainest.errors import SpecError, at, head, name_of
from trainest.record import NamedTuple

if TYPE_CHECKING:
    import numpy as np

    from trainest.catalog import Model

    Num: TypeAlias = int | float | np.ndarray     # a size: one number, or one per candidate
    Mask: TypeAlias = bool | np.ndarray          # whether a rule holds: for the number, or per candidate
else:
    # at run time only a name the annotations use (they are strings: `from __future__ import annotations`);
    # typing.Union with a string would compile a ForwardRef at import, start-up time (issue 36)
    Num = "int | float | np.ndarray"
    Mask = "bool | np.ndarray"


class Facts(NamedTuple):
    """What the layout rules read. The job's sizes are numbers; a layout knob is a number or an array."""

    name: str = ""                # the model's name (messages)
    heads: int = 1                # attention heads a
    layers: int = 1               # decoder layers L
    experts: int = 0              # routed experts n_e (0: a dense model)
    expert_width: int = 1         # each routed expert's MLP width f_e
    hybrid: bool = False          # hybrid Mamba-2 blocks
    mamba_heads: int = 0          # their heads (0: none)
    mamba_groups: int = 0         # their B/C groups (0: none)
    seq_len: int = 1              # s [tokens]
    global_batch: Num = 1         # B [sequences]
    devices: Num = 1              # N
    tp: Num = 1
    pp: Num = 1
    cp: Num = 1
    dp: Num = 1
    vpp: Num = 1
    micro_batch: Num = 1          # b [sequences]
    ep: Num = 1
    etp: Num = 1
    zero: Num = 0
    dp_shard: Num = 1             # the ZeRO shard group (dp when not hybrid sharding)
    uneven: Mask = False          # the layers are not split evenly (the balanced split or a pipeline layout)
    dualpipe: bool = False        # DeepSeek-V3's DualPipe schedule
    # the job's attention is the materialised softmax (standard) under a framework whose context parallelism
    # needs fused attention kernels (frameworks.Framework.cp_fused_attention); `framework` names it
    unfused_cp: bool = False
    framework: str = ""

    @property
    def micro_batches(self) -> Num:
        """m = B/(d·b): micro-batches per step per pipeline."""
        return self.global_batch // (self.dp * self.micro_batch)

    @property
    def stage_ranks(self) -> Num:
        """t·c·d: the ranks of one pipeline stage."""
        return self.tp * self.cp * self.dp


def facts_of(model: Model, **sizes: Any) -> Facts:
    """The Facts of `model` with the layout's and job's `sizes` (Facts fields)."""
    moe, mamba = model.moe, (model.mamba if model.hybrid is not None else None)
    return Facts(name=model.name, heads=model.heads, layers=model.layers,
                 experts=moe.experts if moe is not None else 0,
                 expert_width=moe.expert_ffn_hidden if moe is not None else 1,
                 hybrid=model.hybrid is not None, mamba_heads=mamba.heads if mamba is not None else 0,
                 mamba_groups=mamba.groups if mamba is not None else 0, **sizes)


class Rule(NamedTuple):
    """One validity rule of the layout."""

    name: str                                  # the rule
    key: str                                   # what it is about: the knob's YAML path (the message names it)
    holds: Callable[[Facts], Mask]             # True where the layout keeps the rule (numbers or arrays)
    message: Callable[[Facts, str], str]       # why it is broken, for one layout (`where`: the scenario's name)
    reason: str = ""                           # the plan search's rejection tally it counts under ("": none)


def divisors(n: int) -> list[int]:
    """The divisors of n, ascending."""
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return sorted(set(small + [n // k for k in small]))


def divisor_hint(n: Num) -> str:
    """"; try 1, 2, 4 ..." (up to 16 divisors of n, one layout's size), or nothing for a huge n."""
    divs = divisors(int(n)) if n <= 100_000 else []
    return "; try " + ", ".join(str(k) for k in divs[:16]) + (" ..." if len(divs) > 16 else "") if divs else ""


def _listed(values: Iterable[int]) -> str:
    return ", ".join(map(str, values))


# ---- the layout of the layers, heads and sequence

TP_HEADS = Rule(
    "tp_divides_heads", "parallel.tp", lambda f: f.heads % f.tp == 0,
    lambda f, w: f"{head(w)}tp={f.tp} does not divide heads={f.heads}{divisor_hint(f.heads)}")
VPP_NEEDS_PP = Rule(
    "vpp_needs_pp", "parallel.vpp", lambda f: (f.vpp <= 1) | (f.pp > 1),
    lambda f, w: f"{head(w)}vpp={f.vpp} needs pipeline parallelism (pp > 1)")
PP_LAYERS = Rule(
    "pp_divides_layers", "parallel.pp", lambda f: f.uneven | (f.layers % f.pp == 0),
    lambda f, w: f"{head(w)}pp={f.pp} does not divide layers={f.layers}{divisor_hint(f.layers)}; or use "
                 f"parallel.pipeline_split: balanced (uneven stages)")
VPP_STAGE_LAYERS = Rule(
    "vpp_divides_stage_layers", "parallel.vpp", lambda f: f.uneven | ((f.layers // f.pp) % f.vpp == 0),
    lambda f, w: f"{head(w)}vpp={f.vpp} does not divide layers per stage = {f.layers}/{f.pp} = {f.layers // f.pp}"
                 f"{divisor_hint(f.layers // f.pp)}")
PIPELINE_CHUNKS = Rule(
    "pipeline_chunks", "parallel.vpp", lambda f: f.pp * f.vpp <= f.layers + 2,
    lambda f, w: f"{head(w)}pp·vpp = {f.pp * f.vpp} pipeline chunks exceed layers={f.layers}")
CP_SEQ = Rule(
    "cp_divides_seq_len", "parallel.cp", lambda f: f.seq_len % f.cp == 0,
    lambda f, w: f"{head(w)}cp={f.cp} does not divide seq_len={f.seq_len}{divisor_hint(f.seq_len)}")
# a hybrid model's Mamba-2 blocks split their heads and their B/C groups over t; context parallelism over a
# Mamba-2 scan is not modelled (mamba_heads, mamba_groups are 0 for a model without them: 0 divides by any t)
TP_MAMBA_HEADS = Rule(
    "tp_divides_mamba_heads", "parallel.tp", lambda f: f.mamba_heads % f.tp == 0,
    lambda f, w: f"{head(w)}tp={f.tp} does not divide the Mamba-2 mamba_heads={f.mamba_heads}"
                 f"{divisor_hint(f.mamba_heads)}")
TP_MAMBA_GROUPS = Rule(
    "tp_divides_mamba_groups", "parallel.tp", lambda f: f.mamba_groups % f.tp == 0,
    lambda f, w: f"{head(w)}tp={f.tp} does not divide the Mamba-2 "
                 f"groups={f.mamba_groups}{divisor_hint(f.mamba_groups)}")
HYBRID_CP = Rule(
    "hybrid_takes_no_cp", "parallel.cp", lambda f: (not f.hybrid) | (f.cp == 1),
    lambda f, w: f"{head(w)}cp={f.cp}: context parallelism over {f.name}'s Mamba-2 blocks is not modelled; allowed: "
                 f"cp 1")

# context parallelism splits the sequence and passes K and V round a ring between fused-attention kernels, which
# merge the partial softmax results; a framework that runs only that (Framework.cp_fused_attention) has no
# context-parallel path for the materialised softmax of `attention: standard` (docs/model.md §4.2)
CP_FUSED_ATTENTION = Rule(
    "cp_needs_fused_attention", "parallel.cp", lambda f: (not f.unfused_cp) | (f.cp == 1),
    lambda f, w: f"{head(w)}cp={f.cp} with attention standard: {f.framework}'s context parallelism runs fused "
                 f"attention kernels only (they merge the ring's partial softmax results); use attention flash or "
                 f"flash2, or cp 1")

TP_RULES = (TP_HEADS, TP_MAMBA_HEADS, TP_MAMBA_GROUPS)      # what a tensor-parallel size must divide
CP_RULES = (CP_SEQ, HYBRID_CP, CP_FUSED_ATTENTION)
LAYOUT = (TP_HEADS, VPP_NEEDS_PP, PP_LAYERS, VPP_STAGE_LAYERS, PIPELINE_CHUNKS, CP_SEQ, TP_MAMBA_HEADS,
          TP_MAMBA_GROUPS, HYBRID_CP)

# ---- the devices and the batch

DEVICES = Rule(
    "devices_divisible", "devices", lambda f: f.devices % (f.tp * f.pp * f.cp) == 0,
    lambda f, w: f"{head(w)}devices={f.devices} is not divisible by tp·pp·cp = {f.tp}·{f.pp}·{f.cp} = "
                 f"{f.tp * f.pp * f.cp}; tp·pp·cp must divide {f.devices}{divisor_hint(f.devices)}",
    reason="devices_indivisible")
BATCH = Rule(
    "batch_divisible", "global_batch", lambda f: f.global_batch % (f.dp * f.micro_batch) == 0,
    lambda f, w: f"{head(w)}global_batch={f.global_batch} is not divisible by dp·micro_batch = {f.dp}·{f.micro_batch}"
                 f" = {f.dp * f.micro_batch}; use a multiple of {f.dp * f.micro_batch}",
    reason="batch_indivisible")
DP_SHARD = Rule(
    "dp_shard_divides_dp", "parallel.dp_shard", lambda f: f.dp % f.dp_shard == 0,
    lambda f, w: f"{head(w)}dp_shard={f.dp_shard} does not divide dp={f.dp}{divisor_hint(f.dp)}")
HSDP_ZERO = Rule(
    "hybrid_sharding_needs_zero", "parallel.dp_shard", lambda f: (f.dp_shard == f.dp) | (f.zero > 0),
    lambda f, w: f"{head(w)}dp_shard={f.dp_shard} (hybrid sharding) needs zero >= 1; with zero=0 nothing is sharded")
SHARDING = (DP_SHARD, HSDP_ZERO)

# ---- the schedules (docs/model.md §5.2, §5.4)

INTERLEAVING = Rule(
    # Megatron-LM's interleaved 1F1B (`forward_backward_pipelining_with_interleaving`): m a multiple of p
    "interleaving_divisible", "parallel.vpp", lambda f: (f.vpp <= 1) | (f.micro_batches % f.pp == 0),
    lambda f, w: f"{head(w)}the interleaved schedule (vpp={f.vpp}) needs the micro-batches per step, m = "
                 f"global_batch/(dp·micro_batch) = {f.global_batch}/({f.dp}·{f.micro_batch}) = {f.micro_batches}, "
                 f"to be a multiple of pp={f.pp} (Megatron-LM's interleaved 1F1B); use vpp=1, or a global_batch "
                 f"that is a multiple of dp·micro_batch·pp = {f.dp * f.micro_batch * f.pp}",
    reason="interleaving_indivisible")
# DualPipe (DeepSeek-V3 §3.2.1, deepseek-ai/DualPipe): an even number of pipeline stages, no virtual stages (each
# device holds two stages of its own), an even number of micro-batches, at least pp. Without a pipeline (pp 1)
# there is nothing to schedule.
DUALPIPE_PP = Rule(
    "dualpipe_even_pp", "parallel.pipeline_schedule", lambda f: (not f.dualpipe) | (f.pp == 1) | (f.pp % 2 == 0),
    lambda f, w: f"{at(w, 'parallel.pipeline_schedule')}: dualpipe needs an even pp (its two pipelines run from both "
                 f"ends); pp={f.pp}")
DUALPIPE_VPP = Rule(
    "dualpipe_no_vpp", "parallel.pipeline_schedule", lambda f: (not f.dualpipe) | (f.pp == 1) | (f.vpp <= 1),
    lambda f, w: f"{at(w, 'parallel.pipeline_schedule')}: dualpipe with vpp={f.vpp}: DualPipe has no virtual stages; "
                 f"use vpp=1")
DUALPIPE_MICRO_BATCHES = Rule(
    "dualpipe_micro_batches", "parallel.pipeline_schedule",
    lambda f: (not f.dualpipe) | (f.pp == 1) | ((f.micro_batches >= f.pp) & (f.micro_batches % 2 == 0)),
    lambda f, w: f"{at(w, 'parallel.pipeline_schedule')}: dualpipe needs an even number of micro-batches per step of "
                 f"at "
                 f"least pp={f.pp} (half are fed from each end); m = {f.micro_batches}",
    reason="interleaving_indivisible")
DUALPIPE = (DUALPIPE_PP, DUALPIPE_VPP, DUALPIPE_MICRO_BATCHES)
# an estimate of DualPipe without a pipeline has no schedule to apply (its step would silently be 1F1B's);
# `plan` and `sweep` keep pp 1 with it (a search weighs pipelines against none): scenario_from_mapping's
# `schedules_need_a_pipeline`
DUALPIPE_NEEDS_PP = Rule(
    "dualpipe_needs_a_pipeline", "parallel.pipeline_schedule", lambda f: (not f.dualpipe) | (f.pp > 1),
    lambda f, w: f"{at(w, 'parallel.pipeline_schedule')}: dualpipe needs a pipeline, and pp=1 has none to schedule "
                 f"(the "
                 f"step would be 1F1B's); give an even pp (2, 4, ...) or leave the schedule out")

# ---- the experts (docs/model.md §15, §15.8): ep divides the experts; etp divides the expert width f_e (each
# routed expert's MLP is split etp ways) and tp (the expert tensor-parallel group is the innermost part of the
# tensor-parallel group); ep·etp divides the ranks of a pipeline stage (Megatron-Core: ep·etp·edp = tp·cp·dp).
# A dense model takes ep = etp = 1.


def _etps(f: Facts) -> str:
    return _listed(divisors(math.gcd(int(f.tp), f.expert_width)))


def _expert_group_message(f: Facts, w: str) -> str:
    ep_name, etp_name = name_of(w, "parallel.ep"), name_of(w, "parallel.etp")
    eps = [e for e in divisors(f.experts) if f.stage_ranks % (e * f.etp) == 0]
    ks = [k for k in divisors(math.gcd(int(f.tp), f.expert_width)) if f.stage_ranks % (f.ep * k) == 0]
    with_ep = f"; with {ep_name} {f.ep}: {etp_name} {_listed(ks)}" if ks else ""
    return (f"{head(w)}{ep_name}, {etp_name}: ep·etp = {f.ep}·{f.etp} = {f.ep * f.etp} does not divide the "
            f"{f.stage_ranks} ranks of a pipeline stage (tp·cp·dp = {f.tp}·{f.cp}·{f.dp}), and their product must; "
            f"with {etp_name} {f.etp}: {ep_name} {_listed(eps)}{with_ep}")


DENSE_EP = Rule(
    "dense_takes_no_ep", "parallel.ep", lambda f: (f.experts > 0) | (f.ep == 1),
    lambda f, w: f"{at(w, 'parallel.ep')}: {f.ep} needs a mixture-of-experts model, and {f.name} is dense; allowed: 1")
DENSE_ETP = Rule(
    "dense_takes_no_etp", "parallel.etp", lambda f: (f.experts > 0) | (f.etp == 1),
    lambda f, w: f"{at(w, 'parallel.etp')}: {f.etp} needs a mixture-of-experts model, and {f.name} is dense; allowed: "
                 f"1")
EP_EXPERTS = Rule(
    "ep_divides_experts", "parallel.ep", lambda f: f.experts % f.ep == 0,
    lambda f, w: f"{at(w, 'parallel.ep')}: {f.ep} does not divide experts={f.experts}{divisor_hint(f.experts)}")
ETP_WIDTH = Rule(
    "etp_divides_expert_width", "parallel.etp", lambda f: f.expert_width % f.etp == 0,
    lambda f, w: f"{at(w, 'parallel.etp')}: {f.etp} does not divide expert_ffn_hidden={f.expert_width} (each routed "
                 f"expert's width is split etp ways); allowed with tp={f.tp}: {_etps(f)}")
ETP_TP = Rule(
    "etp_divides_tp", "parallel.etp", lambda f: f.tp % f.etp == 0,
    lambda f, w: f"{at(w, 'parallel.etp')}: {f.etp} does not divide tp={f.tp} (the expert tensor-parallel group lies "
                 f"inside the tensor-parallel group); allowed with tp={f.tp}: {_etps(f)}")
EXPERT_GROUP = Rule(
    "expert_group_divides_stage", "parallel.ep", lambda f: f.stage_ranks % (f.ep * f.etp) == 0,
    _expert_group_message)
EXPERTS = (DENSE_EP, DENSE_ETP, EP_EXPERTS, ETP_WIDTH, ETP_TP, EXPERT_GROUP)

RULES = (LAYOUT + (DEVICES, BATCH) + SHARDING + (INTERLEAVING,) + DUALPIPE + (DUALPIPE_NEEDS_PP,)  # every rule, once
         + EXPERTS + (CP_FUSED_ATTENTION,))


def holds(rules: Iterable[Rule], f: Facts) -> Mask:
    """Where every one of `rules` holds (a bool, or a bool array over the candidates)."""
    ok: Mask = True
    for rule in rules:
        ok = ok & rule.holds(f)
    return ok


def broken(rules: Iterable[Rule], f: Facts) -> Rule | None:
    """The first of `rules` that one layout (numbers) breaks, or None."""
    for rule in rules:
        if not rule.holds(f):
            return rule
    return None


def check(rules: Iterable[Rule], f: Facts, where: str) -> None:
    """Raise the first broken rule's message (SpecError, located at its key)."""
    rule = broken(rules, f)
    if rule is not None:
        raise SpecError(rule.message(f, where))


def admissible(candidates: Iterable[int], knob: str, rules: Iterable[Rule], f: Facts) -> list[int]:
    """The values of `knob` among `candidates` (ascending) for which every one of `rules` holds with `f`'s other
    sizes, evaluated on all of them at once."""
    import numpy as np
    values = np.asarray(list(candidates), dtype=np.int64)
    if values.size == 0:
        return []
    changed: dict[str, Any] = {knob: values}
    ok = np.broadcast_to(holds(rules, f._replace(**changed)), values.shape)
    return [int(v) for v in values[ok]]
