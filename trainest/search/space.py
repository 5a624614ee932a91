"""The search space: the values each knob may take (`SearchSpace`, from `--allow` and `--max-*`), checked
against the job (values no plan can take are refused), and the tensor-parallel sizes searched."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from trainest import rules
from trainest.choices import (
    FINETUNES,
    OFFLOADS,
    RECOMPUTES,
)
from trainest.errors import SpecError, at, head
from trainest.frameworks import FRAMEWORKS
from trainest.knobs import ALLOW_NAMES, BY_NAME, JOB_CHOICES, SEARCHED
from trainest.rules import divisors, facts_of
from trainest.scenario import (
    Scenario,
    check_finetune,
    check_framework_finetune,
    check_offload,
    check_quantised_base,
    lora_base_bits,
)
from trainest.step.collectives import tiers_of

RECOMPUTE = RECOMPUTES

MOE_ONLY = ("ep", "etp")   # searched for mixture-of-experts models only


KNOBS = SEARCHED          # the knobs every plan sets (trainest.knobs), in the runner-up table's order


ZERO_STAGES = (0, 1, 2, 3)


# recompute modes searched by default: those of every framework (torchtitan's `op` only when allowed)
SEARCH_RECOMPUTE = ("none", "selective", "full")


ALLOW_KEYS = ALLOW_NAMES


WORD_KNOBS = {"recompute": RECOMPUTE, "finetune": FINETUNES, "offload": OFFLOADS}   # knobs --allow gives by word



@dataclass(frozen=True)
class SearchSpace:
    """Which values each knob may take. `None` = every valid value (a divisor of the relevant size);
    a tuple restricts to those values (`--allow`); `max_*` caps a knob (`--max-tp`...)."""

    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = None
    vpp: tuple[int, ...] | None = None
    micro_batch: tuple[int, ...] | None = None
    zero: tuple[int, ...] = ZERO_STAGES
    recompute: tuple[str, ...] = SEARCH_RECOMPUTE
    sequence_parallel: tuple[bool, ...] = (False, True)
    finetune: tuple[str, ...] | None = None   # None: the job's method only (searched only when allowed)
    offload: tuple[str, ...] | None = None    # None: the job's offload only
    ep: tuple[int, ...] | None = None         # MoE models only; None: every divisor of the experts that fits
    etp: tuple[int, ...] | None = None        # MoE models only; None: every divisor of tp that divides f_e
    max_tp: int | None = None          # None: the scale-up domain (no cap when `tp` lists values)
    max_pp: int | None = None
    max_cp: int | None = None
    max_vpp: int | None = None
    max_micro_batch: int | None = None
    # job knobs searched by value (JOB_CHOICES: the MoE dispatcher, CUDA graphs, the all-to-all overlap), each
    # (knob, values); () the job's value only
    job_choices: tuple[tuple[str, tuple[Any, ...]], ...] = ()


EVERY_PLAN = SearchSpace()     # no knob restricted


def _int_list(text: str, where: str, *, minimum: int = 1, maximum: int = 10**7) -> tuple[int, ...]:
    values = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or not minimum <= int(part) <= maximum:
            raise SpecError(f"{head(where)}{part!r} is not an integer in {minimum}..{maximum}")
        values.append(int(part))
    return tuple(sorted(set(values)))


def space_from_options(allow: list[str] | None = None, **maxima: int | None) -> SearchSpace:
    """Build a SearchSpace from `--allow KNOB=V1,V2` strings and `max_tp=...` style caps.

    KNOB is tp, pp, cp, vpp, micro_batch (mb), zero, recompute (none|selective|full|op), sp
    (sequence_parallel: on|off), finetune (full|lora|qlora), offload (none|optimizer|...), or one of the job's
    choices searched value by value (JOB_CHOICES: moe_dispatcher, cuda_graphs, moe_overlap; fused_grouped_mlp,
    fp8_params, fp8_attention: on|off)."""
    values: dict[str, Any] = {}
    choices: dict[str, tuple[Any, ...]] = {}     # JOB_CHOICES knob -> its values
    seen: dict[str, str] = {}          # knob -> the --allow item that gave it
    for item in allow or []:
        key, sep, rest = item.partition("=")
        key = key.strip().lower().replace("-", "_")
        where = f"--allow {item!r}"
        if not sep or key not in ALLOW_KEYS or not rest.strip():
            raise SpecError(f"{head(where)}use KNOB=V1,V2 with KNOB one of {', '.join(sorted(set(ALLOW_KEYS)))}")
        knob = ALLOW_KEYS[key]
        if knob in seen:
            raise SpecError(f"{head(where)}{knob} is already given ({seen[knob]!r}); give its values once, "
                            f"--allow {key}=V1,V2")
        seen[knob] = item
        if knob in JOB_CHOICES and BY_NAME[knob].kind == "switch":
            onoff = {"on": True, "off": False}
            got_switch = [onoff.get(v.strip().lower()) for v in rest.split(",")]
            if None in got_switch:
                raise SpecError(f"{head(where)}{knob} takes on and/or off")
            choices[knob] = tuple(sorted(set(got_switch)))
        elif knob in WORD_KNOBS or knob in JOB_CHOICES:
            vocabulary = WORD_KNOBS.get(knob) or BY_NAME[knob].choice_values
            got = tuple(dict.fromkeys(v.strip().lower() for v in rest.split(",")))
            bad = [v for v in got if v not in vocabulary]
            if bad:
                raise SpecError(f"{head(where)}{knob} {bad[0]!r} is not one of {', '.join(vocabulary)}")
            (choices if knob in JOB_CHOICES else values)[knob] = tuple(r for r in vocabulary if r in got)
        elif knob == "sequence_parallel":
            switch = {"on": True, "off": False, "true": True, "false": False, "1": True, "0": False}
            got_sp = [switch.get(v.strip().lower()) for v in rest.split(",")]
            if None in got_sp:
                raise SpecError(f"{head(where)}sp takes on and/or off")
            values[knob] = tuple(sorted(set(got_sp)))
        elif knob == "zero":
            values[knob] = _int_list(rest, where, minimum=0, maximum=3)
        else:
            values[knob] = _int_list(rest, where)
    for name, cap in maxima.items():
        if cap is not None and cap < 1:
            raise SpecError(f"--{name.replace('_', '-')} {cap} must be at least 1")
    options: dict[str, Any] = {**values, **maxima, "job_choices": tuple(choices.items())}
    return SearchSpace(**options)


def job_for_methods(mapping: dict[str, Any], space: SearchSpace, where: str) -> dict[str, Any]:
    """The job mapping of a search over fine-tuning methods (`--allow finetune=...`): a method the job
    gives must be one the search allows (else a SpecError: the two contradict each other); without one the
    job takes an allowed method, a LoRA one where allowed (qlora for `base_bits: 4`), so that the LoRA
    options (rank, targets, base bits) apply to the LoRA plans. The search is a fine-tune either way."""
    allowed = space.finetune
    if allowed is None:
        return mapping
    given = mapping.get("finetune")
    ft: dict[str, Any] = {"method": given} if isinstance(given, str) else dict(given or {})
    method = ft.get("method")
    if method is not None:
        if method in FINETUNES and method not in allowed:
            raise SpecError(f"{at(where, 'finetune.method')}: {method} is not among the methods the search allows "
                            f"(--allow finetune={','.join(allowed)}); give one of them, or leave the method out")
        return mapping
    frozen = [m for m in allowed if m != "full"]
    chosen = ("qlora" if "qlora" in frozen and ft.get("base_bits") == 4 else frozen[0]) if frozen else "full"
    return {**mapping, "finetune": {**ft, "method": chosen}}


def check_space(base: Scenario, space: SearchSpace) -> None:
    """The values `--allow` names must suit the job and the hardware: tp dividing the heads and cp the
    sequence (else no plan can take them), and the checks a scenario gets for the fine-tuning methods and
    offload modes (no offload on unified memory, QLoRA at a 16/32-bit precision, ...)."""
    m = base.model
    heads = m.heads if m.hybrid is None else math.gcd(m.heads, m.hybrid.mamba.heads, m.hybrid.mamba.groups)
    f = facts_of(m, seq_len=base.seq_len)
    for knob, allowed, size, what, knob_rules in (
            ("tp", space.tp, heads, f"the {heads} heads of {m.name}", rules.TP_RULES),
            ("cp", space.cp, base.seq_len, f"seq_len={base.seq_len}", (rules.CP_SEQ,))):
        bad = [v for v in allowed or () if v not in rules.admissible(allowed or (), knob, knob_rules, f)]
        if bad:
            raise SpecError(f"--allow {knob}={','.join(map(str, bad))}: does not divide {what}; allowed: "
                            f"{', '.join(map(str, divisors(size)))}")
    _check_expert_space(base, space)
    _check_framework_space(base, space)
    for offload in space.offload or ():
        check_offload(offload, base.hardware, "--allow offload")
    ft = base.finetune
    for method in space.finetune or ():
        check_framework_finetune(base.framework, method, f"--allow finetune={method}")
        if method == "qlora":
            check_quantised_base(4, base.hardware, base.framework, f"--allow finetune={method}")
        given = {"method": method} if method == "full" else \
            {"method": method, "rank": ft.rank, "targets": ft.targets,
             "base_bits": 4 if method == "qlora" else lora_base_bits(ft)}
        check_finetune(given, base.model, base.precision, "--allow finetune")


def _check_expert_space(base: Scenario, space: SearchSpace) -> None:
    """`--allow ep=` / `etp=` values no plan can take (docs/model.md §15.8): on a dense model anything but 1;
    an ep not dividing the experts; an etp not dividing the expert width f_e or any tp searched."""
    m = base.model
    for knob in MOE_ONLY:
        allowed = getattr(space, knob) or ()
        if m.moe is None and any(v != 1 for v in allowed):
            raise SpecError(f"--allow {knob}={','.join(map(str, allowed))}: {knob} needs a mixture-of-experts model, "
                            f"and {m.name} is dense; allowed: 1")
    if m.moe is None:
        return
    bad = [v for v in space.ep or () if m.moe.experts % v]
    if bad:
        raise SpecError(f"--allow ep={','.join(map(str, bad))}: does not divide the {m.moe.experts} experts of "
                        f"{m.name}; allowed: {', '.join(map(str, divisors(m.moe.experts)))}")
    width, tps = m.moe.expert_ffn_hidden, tp_sizes(base, space)
    fits = [k for k in divisors(width) if any(t % k == 0 for t in tps)]
    bad = [v for v in space.etp or () if v not in fits]
    if bad:
        raise SpecError(f"--allow etp={','.join(map(str, bad))}: expert tensor parallelism must divide the expert "
                        f"width expert_ffn_hidden={width} and tp (tp searched: {', '.join(map(str, tps))}); "
                        f"allowed: {', '.join(map(str, fits))}")


def _check_framework_space(base: Scenario, space: SearchSpace) -> None:
    """`--allow zero=` / `pp=` values the job's framework does not run (trainest/frameworks.py: `zero_stages`,
    `pipeline`, `pp_zero_stages`): a stage it lacks, a pipeline it lacks, or only pipelines with only stages
    its pipeline refuses."""
    name, fw = base.framework, FRAMEWORKS[base.framework]
    if not any(r in fw.recompute_modes for r in space.recompute):
        raise SpecError(f"--allow recompute={','.join(space.recompute)}: not a recompute mode of {name}; allowed "
                        f"under it: {', '.join(fw.recompute_modes)}")
    if space.zero != ZERO_STAGES:                      # listed by --allow
        bad = [z for z in space.zero if z not in fw.zero_stages]
        if bad:
            raise SpecError(f"--allow zero={','.join(map(str, bad))}: {name} has no ZeRO-"
                            f"{'/'.join(map(str, bad))} (trainest/frameworks.py); allowed under it: "
                            f"{', '.join(map(str, fw.zero_stages))}")
    pipelines = [p for p in space.pp or () if p > 1]
    if space.pp is None or len(pipelines) < len(space.pp):
        return                                         # p = 1 can be searched
    if not fw.pipeline:
        raise SpecError(f"--allow pp={','.join(map(str, pipelines))}: {name} has no pipeline parallelism; "
                        f"allowed under it: 1")
    with_pp = fw.zero_stages_with(2)
    if not any(z in with_pp for z in space.zero):
        raise SpecError(f"--allow zero={','.join(map(str, space.zero))} with pp={','.join(map(str, pipelines))}: "
                        f"{name} does not run these ZeRO stages with pipeline parallelism (DeepSpeed's PipelineEngine: "
                        f"ZeRO-2 and ZeRO-3 are incompatible with it); allowed with a pipeline: "
                        f"{', '.join(map(str, with_pp))}")


def tp_sizes(base: Scenario, space: SearchSpace) -> list[int]:
    """The tensor-parallel sizes searched: divisors of the heads (and of a hybrid model's Mamba-2 heads and
    groups), those allowed, within `--max-tp` or, unless tp values are listed, the scale-up domain."""
    m = base.model
    # explicitly allowed tp values are taken as given; otherwise tp stays inside the scale-up domain
    cap_tp = space.max_tp if space.max_tp is not None else (None if space.tp is not None else max_tp_default(base))
    # a hybrid model's Mamba-2 blocks split their heads and groups over t too (rules.TP_RULES)
    tps = rules.admissible(divisors(m.heads), "tp", rules.TP_RULES, facts_of(m))
    return choose(tps, space.tp, cap_tp)


def choose(divisors: list[int], allowed: tuple[int, ...] | None, cap: int | None) -> list[int]:
    return [d for d in divisors if (allowed is None or d in allowed) and (cap is None or d <= cap)]


def max_tp_default(base: Scenario) -> int:
    """Tensor parallelism stays inside the scale-up domain unless the user says otherwise: its
    per-layer all-reduces are exposed, and across the network they dominate (Narayanan 2021 §3.3)."""
    return tiers_of(base.hardware, base.devices_per_node).domain
