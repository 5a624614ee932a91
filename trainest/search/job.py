"""The job of a search (a scenario without a layout, validated once) and the scenario of one plan of it; the
objective's scale (time, cost, energy)."""

from __future__ import annotations

from typing import Any

from trainest import training
from trainest.choices import (
    OBJECTIVES,
)
from trainest.errors import SpecError, head
from trainest.frameworks import FRAMEWORKS
from trainest.knobs import CLI, JOB_CHOICES, JOB_KEYS, JOB_PARALLEL_KEYS
from trainest.record import replace
from trainest.scenario import (
    FineTune,
    Scenario,
    check_scenario_keys,
    default_framework,
    default_global_batch,
    lora_base_bits,
    scenario_from_mapping,
    scenario_mapping,
)
from trainest.scenario.host import HOST_KEYS
from trainest.search.space import SearchSpace, job_for_methods
from trainest.step.remat import REMAT_MODES


def with_search_framework(base: Scenario, mapping: dict[str, Any], space: SearchSpace, where: str,
                          default_batch_devices: int | None = None, shape: dict | None = None) -> Scenario:
    """The job `base` of a search that allows QLoRA plans (`--allow finetune=...,qlora`) under a framework it
    took by default and that has no QLoRA: the job under a QLoRA's default framework instead (shown as
    derived), so that every method searched runs under the one framework; else `base`."""
    if ("qlora" not in (space.finetune or ()) or "framework" not in base.derived
            or FRAMEWORKS[base.framework].qlora):
        return base
    name = default_framework(base.hardware, "qlora")
    if not FRAMEWORKS[name].qlora:
        return base
    job = job_scenario({**job_for_methods(mapping, space, where), "framework": name}, where,
                       default_batch_devices=default_batch_devices, shape=shape)
    return replace(job, derived=job.derived + ("framework",))



def default_devices(mapping: dict, where: str = CLI) -> int:
    """The device count a search takes when none is given: the estimate's, one node's devices of the job's
    hardware, at most DEFAULT_DEVICES (one DGX Spark is one device, an H100 node eight)."""
    from trainest.scenario import DEFAULT_DEVICES
    job = {k: v for k, v in mapping.items() if k not in ("global_batch", "global_batch_tokens")}
    return max(min(DEFAULT_DEVICES, job_scenario({**job, "global_batch": 1}, where).devices_per_node), 1)


def job_scenario(mapping: dict, where: str = CLI, default_batch_devices: int | None = None,
                 shape: dict | None = None) -> Scenario:
    """Validate the job (a scenario mapping without a layout) once, as a one-device scenario; plans
    replace its device count and layout (`plan_scenario`). Without a global batch: with
    `default_batch_devices` the estimate's default (DEFAULT_TOKENS_PER_STEP in whole sequences) rounded up
    to a multiple of that device count, so that every data-parallel size dividing it can run
    micro-batch 1, marked derived; else an error."""
    check_scenario_keys(mapping, where)
    if mapping.get("global_batch") is None and mapping.get("global_batch_tokens") is None:
        if default_batch_devices is None:
            raise SpecError(f"{head(where)}the plan search needs the global batch (--global-batch in sequences, or "
                            f"--global-batch-tokens)")
        seq_len = job_scenario({**mapping, "global_batch": 1}, where, shape=shape).seq_len
        base = job_scenario({**mapping, "global_batch": default_global_batch(seq_len, default_batch_devices, 1)},
                            where, shape=shape)
        return replace(base, derived=base.derived + ("global_batch",))
    job = {k: v for k, v in mapping.items() if k in JOB_KEYS}
    # of the layout, only framework capabilities that hold for every plan carry over (tp_overlap,
    # dp_collectives)
    parallel = {k: v for k, v in (mapping.get("parallel") or {}).items() if k in JOB_PARALLEL_KEYS}
    if mapping.get("finetune") is not None:
        job["finetune"] = mapping["finetune"]
    # the recompute of every plan is the search's; modules say what its selective plans re-run, recompute_layers
    # how many layers per stage its full plans re-run
    recompute = "selective" if job.get("recompute_modules") is not None else \
        "full" if job.get("recompute_layers") else "none"
    if job.get("remat_policy", "auto") != "auto":      # MaxText's policy sets the mode (docs/model.md §7.11)
        recompute = REMAT_MODES.get(job["remat_policy"], (recompute,))[0]
    return scenario_from_mapping({**job, "devices": 1, "parallel": parallel, "micro_batch": 1, "recompute": recompute},
                                 where, shape=shape)


def job_variant(base: Scenario, choice: dict[str, Any]) -> Scenario:
    """The job `base` with the job knobs of `choice` (JOB_CHOICES: knob -> value) set, built and checked by
    `scenario_from_mapping` as any scenario is (a dispatcher a dense model cannot run is refused in one line);
    `derived` keeps what the job derived, less those knobs (the search's choice)."""
    mapping = {k: v for k, v in scenario_mapping(base).items() if k != "derived" and v is not None}
    parallel = dict(mapping.pop("parallel", None) or {})
    for knob, value in choice.items():
        if knob in JOB_PARALLEL_KEYS:
            parallel[knob] = value
        else:
            mapping[knob] = value
    s = scenario_from_mapping({**mapping, "model": base.model, "hardware": base.hardware, "parallel": parallel}, CLI)
    return replace(s, derived=tuple(x for x in base.derived if x.removeprefix("parallel.") not in choice))


def plan_scenario(base: Scenario, devices: int, *, tp: int, pp: int, cp: int, vpp: int, micro_batch: int, zero: int,
                  sequence_parallel: bool, recompute: str, pipeline_split: str = "even", finetune: str | None = None,
                  offload: str | None = None, ep: int = 1, etp: int = 1) -> Scenario:
    """The scenario of one plan: the job with this device count and layout (dp = N/(t·p·c)), built and checked
    by `scenario_from_mapping` as any scenario is; the fine-tuning method and offload are the job's unless the
    plan changes them. `derived` keeps what the job derived, less the layout (the plan's choice)."""
    ft = base.finetune
    if finetune is not None and finetune != ft.method:
        ft = (FineTune(stated=ft.stated) if finetune == "full"
              else replace(ft, method=finetune, base_bits=4 if finetune == "qlora" else lora_base_bits(ft)))
    job = {k: v for k, v in scenario_mapping(base).items() if k not in _PLAN_OWN_KEYS and v is not None}
    parallel = {k: v for k, v in job.pop("parallel").items() if k in JOB_PARALLEL_KEYS}
    mapping = {**job, "model": base.model, "hardware": base.hardware, "devices": devices, "micro_batch": micro_batch,
               "recompute": recompute, "offload": base.offload if offload is None else offload,
               "parallel": {**parallel, "tp": tp, "pp": pp, "cp": cp, "vpp": vpp, "zero": zero, "ep": ep, "etp": etp,
                            "sequence_parallel": sequence_parallel, "pipeline_split": pipeline_split},
               **({"finetune": finetune_given(ft)} if ft.stated or ft.frozen else {}),
               **({"recompute_modules": list(base.recompute_modules)}
                  if recompute == "selective" and base.knob("remat_policy") == "auto" else {}),
               # a default token count follows the plan's method (a LoRA plan of a full job trains a fine-tuning set)
               **({} if "tokens" in base.derived else {"tokens": base.tokens})}
    s = scenario_from_mapping(mapping, CLI)
    derived = tuple(x for x in base.derived
                    if not x.startswith("parallel.") and x not in ("micro_batch", "recompute", "devices"))
    if ft.method != base.finetune.method:
        derived = _finetune_derived(derived, base.finetune, ft.method)
    return replace(s, derived=derived, finetune=replace(s.finetune, stated=ft.stated))


# what a plan sets itself (its layout, batch split and method) or derives again, not the job's echo
_PLAN_OWN_KEYS = ("devices", "micro_batch", "micro_batches", "recompute", "recompute_modules", "finetune", "offload",
                  "tokens", "derived", "model", "hardware", *HOST_KEYS)   # the host: in the job's hardware


def finetune_given(ft: FineTune) -> dict[str, Any]:
    """A plan's `finetune:` block as given: the method, and a LoRA/QLoRA's adapters and base."""
    if not ft.frozen:
        return {"method": ft.method}
    return {"method": ft.method, "rank": ft.rank, "alpha": ft.alpha, "targets": ft.targets,
            "base_bits": ft.base_bits}


def _finetune_derived(derived: tuple[str, ...], job: FineTune, method: str) -> tuple[str, ...]:
    """`derived` for a plan whose method is not the job's: a full plan has no adapters; a LoRA/QLoRA plan
    keeps the job's adapters (all defaults where the job trained every weight) and takes its method's base."""
    kept = tuple(x for x in derived if not x.startswith("finetune."))
    if method == "full":
        return kept
    adapters = tuple(f"finetune.{k}" for k in ("rank", "alpha", "targets")
                     if not job.frozen or f"finetune.{k}" in derived)
    return kept + adapters + ("finetune.base_bits",)


def plan_knobs(s: Scenario) -> dict:
    """The knob values of a plan's scenario (keys: KNOBS)."""
    p = s.parallel
    return {"tp": p.tp, "pp": p.pp, "cp": p.cp, "vpp": p.vpp, "ep": p.ep, "etp": p.etp, "micro_batch": s.micro_batch,
            "zero": p.zero,
            "recompute": s.recompute, "sequence_parallel": p.sequence_parallel, "finetune": s.finetune.method,
            "offload": s.offload, "moe_overlap": p.moe_overlap,
            **{k: s.knob(k) for k in JOB_CHOICES if k != "moe_overlap"}}


def objective_scale(base: Scenario, devices: int, objective: str) -> float:
    """Objective per second of step time: 1 (time), N·price/3600·steps (cost [USD]),
    N·P·PUE/3.6e6·steps (energy [kWh]); raises when the price or power is unknown."""
    steps = training.steps_for_tokens(base.tokens, base.tokens_per_step)
    if objective == "time":
        return 1.0
    if objective == "cost":
        if base.price_usd_per_hour is None:
            raise SpecError(f"--objective cost needs a price: {base.hardware.name} has none in the catalog; "
                            f"give --price-per-hour")
        return training.device_hours(steps, devices) * base.price_usd_per_hour
    if objective == "energy":
        energy = training.energy_kwh(steps, devices, base.hardware.power_w, base.pue)
        if energy is None:
            raise SpecError(f"--objective energy needs the device power: {base.hardware.name} has none in the catalog")
        return energy
    raise SpecError(f"objective {objective!r} is not one of {', '.join(OBJECTIVES)}")
