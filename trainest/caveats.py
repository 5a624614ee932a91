"""What an estimate rests on that no measured run checked, and inputs outside any plausible range: the
warnings of an estimate, computed by the library with it and attached to it (`assess`); the commands render
them (estimate, plan, compare and sweep say the job's alike: `job_warnings`). Standard library only at import."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainest.record import replace

if TYPE_CHECKING:
    from trainest.estimate import Estimate
    from trainest.scenario import Scenario


def assess(scenario: Scenario) -> Estimate:
    """The estimate of `scenario` with its warnings attached (`Estimate.warnings`: `estimate_warnings`) and,
    where it does not fit, what would (`Estimate.fit_advice`: advice.fit_advice)."""
    from trainest.estimate import estimate
    result = estimate(scenario)
    advice = None
    if not result.memory.fits:
        from trainest.advice import fit_advice
        advice = fit_advice(scenario, result)
    return result._replace(warnings=tuple(estimate_warnings(scenario, result, advice)), fit_advice=advice)


def estimate_warnings(scenario: Scenario, result: Estimate, advice: Any = None) -> list[str]:
    """The warnings of one estimate: implausible inputs or results, TP overlap the framework lacks, how it
    would fit (`advice`, an advice.FitAdvice, where it does not) or a pipeline layout that would be faster, the
    price, the job's (`job_warnings`), an FP8/FP4 estimate slower than bf16 (`low_precision_slower_warning`),
    and a LoRA/QLoRA slower than its full fine-tune (adapter_cost)."""
    from trainest.estimate import low_precision_slower_warning, plausibility_warnings, tp_overlap_warning
    warnings: list[str] = plausibility_warnings(result)
    if slower := low_precision_slower_warning(result):
        warnings.append(slower)
    overlap = tp_overlap_warning(scenario)
    if overlap:
        warnings.append(overlap)
    if advice is not None:
        warnings.append(advice.text)
    elif result.memory.fits and scenario.parallel.pp > 1:
        from trainest.advice import layout_hint
        hint = layout_hint(scenario, result)
        if hint:
            warnings.append(hint)
    warnings.extend(price_warnings(scenario))
    warnings.extend(no_effect_warnings(scenario))
    if loss := loss_no_effect_warning(scenario, result):
        warnings.append(loss)
    warnings.extend(job_warnings(scenario))
    from trainest.adapter_cost import slower_than_full_warning
    if slower := slower_than_full_warning(result):
        warnings.append(slower)
    return warnings


def no_effect_warnings(scenario: Scenario) -> list[str]:
    """The knobs given a value that this scenario leaves without effect, each with what would give it one:
    recompute_layers without full recompute, offload_layers without activation offload, double quantisation of
    a base that is not a QLoRA's NF4, TP overlap or sequence parallelism without tensor parallelism, and the
    layout's switches and attention kernel of `_placement_no_effect`."""
    out = []
    if scenario.knob("recompute_layers") > 0 and scenario.recompute != "full":
        out.append(f"recompute_layers {scenario.knob('recompute_layers')}: it sets how many layers full recompute "
                   f"re-runs, and recompute is {scenario.recompute}: no effect (give recompute full)")
    if scenario.knob("offload_layers") > 0 and scenario.offload != "activations":
        out.append(f"offload_layers {scenario.knob('offload_layers')}: it sets how many layers' activations go to "
                   f"the host, and offload is {scenario.offload}: no effect (give offload activations)")
    if not scenario.knob("double_quant") and scenario.finetune.method != "qlora":
        out.append(f"double_quant off: it sets how a QLoRA's 4-bit base stores its block scales, and the method is "
                   f"{scenario.finetune.method}: no effect (give finetune qlora)")
    par = scenario.parallel
    if par.tp == 1 and (par.tp_overlap or par.sequence_parallel):
        knob = "tp_overlap" if par.tp_overlap else "sequence_parallel"
        what = ("pipelines the tensor-parallel collectives with their GEMMs" if par.tp_overlap else
                "shards the norms' and residuals' activations over the tensor-parallel ranks")
        out.append(f"{knob} on: it {what}, and tp is 1: no effect (give tp > 1)")
    out.extend(_placement_no_effect(scenario))
    return out


def _balanced_is_even(scenario: Scenario) -> bool:
    """Whether Megatron's balanced split puts as many layers on the heaviest and the last stage as the even one
    (step.schedule.stage_layers: with pp 2, L + 2 units split in two halves of L/2 layers each)."""
    from trainest.step.schedule import stage_layers
    p = scenario.parallel
    return bool(stage_layers(scenario.model, float(p.pp), float(p.vpp), "balanced")
                == stage_layers(scenario.model, float(p.pp), float(p.vpp), "even"))


def loss_no_effect_warning(scenario: Scenario, result: Estimate) -> str | None:
    """A loss other than the standard one shrinks the logits' memory on the last pipeline stage only (docs/model.md
    §7.4); where the memory shown (the busiest stage's) is the same with the standard loss, say that it has no
    effect here. None otherwise."""
    loss = scenario.knob("loss")
    if loss == "standard" or scenario.parallel.pp == 1:
        return None
    from trainest.memory import memory_per_device
    from trainest.scenario import job_of, layout_of
    standard = memory_per_device(replace(job_of(scenario), loss="standard"), layout_of(scenario)).total_bytes
    if float(standard) != result.memory.per_device_bytes:
        return None
    return (f"loss {loss}: it shrinks the logits' memory on the last pipeline stage, and the memory shown is another "
            f"stage's peak: no effect here")


def _placement_no_effect(scenario: Scenario) -> list[str]:
    """no_effect_warnings' part for the layout's switches and the attention kernel: no data-parallel overlap with
    dp 1 (no data-parallel traffic) or under ZeRO-3 (whose per-layer collectives hide inside the passes,
    docs/model.md §4.5, not in the gradient buckets it turns off), flat data-parallel collectives where every rank
    shares one node or scale-up domain (no collective leaves it), a ZeRO stage given with nothing to shard over
    (dp 1, cp 1), a pipeline split without a pipeline or that comes out as the even one, FlashAttention-2 where the
    hardware counts it as fast as its best fused kernel
    (efficiency.flash2_attention 1: Ampere, where FlashAttention-2 is that kernel)."""
    par, hw, out = scenario.parallel, scenario.hardware, []
    if not par.dp_overlap and par.dp == 1:
        out.append("dp_overlap off: it stops the gradient reduction hiding behind the backward, and dp is 1 (no "
                   "data-parallel traffic): no effect")
    elif not par.dp_overlap and par.zero == 3:
        out.append("dp_overlap off: it stops the gradient buckets' reduction hiding behind the backward (zero 0-2), "
                   "and zero is 3, whose gathers and reduce-scatters run layer by layer inside the passes: no effect "
                   "(docs/model.md §4.5)")
    if par.dp_collectives == "flat" and scenario.devices <= max(scenario.devices_per_node, hw.scale_up_domain or 0):
        out.append(f"dp_collectives flat: it sets how the data-parallel collectives leave a node (one NIC per rank), "
                   f"and the job's {scenario.devices} devices share one node or scale-up domain: no effect")
    if "parallel.zero" not in scenario.derived and par.zero > 0 and par.dp * par.cp == 1:
        out.append(f"zero {par.zero}: it shards the optimizer state (and more) over the data-parallel ranks, and there "
                   f"is one (dp 1, cp 1): no effect")
    if par.pipeline_split != "even" and par.pp == 1:
        out.append(f"pipeline_split {par.pipeline_split}: it sets how the layers split over the pipeline stages, and "
                   f"pp is 1: no effect")
    elif par.pipeline_split == "balanced" and _balanced_is_even(scenario):
        out.append(f"pipeline_split balanced: it counts the embedding and the loss as layers, and with pp {par.pp} "
                   f"the stages come out as the even split's: no effect")
    if scenario.attention == "flash2" and hw.efficiency.flash2_attention >= 1.0:
        out.append(f"attention flash2: FlashAttention-2 is {hw.name}'s best fused kernel (efficiency.flash2_attention "
                   f"1), so the estimate is the same as with attention flash")
    return out


def price_warnings(scenario: Any) -> list[str]:
    """No price (and why the catalog has none), or a catalog price over a year old or undated."""
    hw = scenario.hardware
    if scenario.price_usd_per_hour is None:
        return [f"no price for {hw.name} ({hw.price_unknown or 'none in its file'}): cost not computed; give "
                f"--price-per-hour USD per device-hour"]
    if "price_per_hour" in scenario.derived and hw.price_stale:
        return [f"the catalog price of {hw.name} (${hw.price_usd_per_hour:.2f}/device-hour) may be out of date: "
                f"{hw.price_stale}; give --price-per-hour for a current one"]
    return []


def job_warnings(scenario: Any, hardware: bool = True) -> list[str]:
    """What every estimate of this job rests on that no measured run checked, whatever its layout: a
    framework no bundled run uses, and the `prior_warnings` (estimate, plan and compare say them alike;
    `hardware` False leaves out the one about the scenario's own hardware, for compare)."""
    from trainest.frameworks import FRAMEWORKS, NOT_SEEN_NOTE
    out = []
    if hardware and (note := low_precision_warning(scenario)):
        out.append(note)
    if not FRAMEWORKS[scenario.framework].seen:
        out.append(f"framework {scenario.framework}: {NOT_SEEN_NOTE}")
    return out + prior_warnings(scenario, hardware)


LOW_PRECISION_WARNING = ("precision {precision} on {hardware}: its {precision} peak ({peak:g} TFLOP/s) is no higher "
                         "than its bf16 peak ({bf16:g}), so {precision} buys no GEMM speed there: its casts and the "
                         "low-precision GEMM factor (efficiency.low_precision_gemm) make the step slower than bf16's")


def low_precision_warning(scenario: Any) -> str | None:
    """A warning when the scenario's low precision (fp8, fp4) has no higher dense peak than bf16 on its
    hardware (Gaudi 3, TPU v6e in the catalog): the estimate then comes out slower than bf16's (the casts and
    `efficiency.low_precision_gemm`, docs/model.md §2.1), which reads like a mistake unless it is said."""
    hw, precision = scenario.hardware, scenario.precision
    if precision not in ("fp8", "fp4") or "bf16" not in hw.peak_flops_per_s:
        return None
    peak, bf16 = hw.peak(precision), hw.peak("bf16")
    if peak > bf16:
        return None
    from trainest.units import TERA
    return LOW_PRECISION_WARNING.format(precision=precision, hardware=hw.name, peak=peak / TERA, bf16=bf16 / TERA)


# Numbers an estimate rests on that no measured run has checked (docs/model.md §13, §14).
# what `trainest validate --set finetune` measures on the LoRA runs (runs, lowest and highest error %, MAPE %):
# the warning and docs/model.md §13 state it; tests/test_finetune.py recomputes it (running the 8 estimates on
# every LoRA estimate would cost more than the estimate itself)
FINETUNE_ERROR_STATS = (83, -31, 21, 9.2)
FINETUNE_WARNING = ("{{method}}: on the {} published LoRA runs trainest can express its step times are {} to {:+d} % "
                    "off the measured ({:.1f} % MAPE, + is too slow; docs/validation.md, 'Fine-tuning runs'); no "
                    "fine-tuning run is fitted").format(*FINETUNE_ERROR_STATS)
FINETUNE_TOKENS_WARNING = ("{method} without --tokens: the days, energy and cost are for {tokens} tokens, the default "
                           "size of a fine-tuning set; give --tokens (your set's tokens times its epochs)")
MOE_FINETUNE_WARNING = ("{method} of a mixture-of-experts model: every routed expert gets its own adapters (PEFT's "
                        "gate_proj/up_proj/down_proj per expert; docs/model.md §13.5), run as grouped GEMMs or expert "
                        "by expert as {framework} launches its experts; no measured MoE fine-tuning run checks it")
MOE_ATTENTION_FINETUNE_WARNING = ("{method} of a mixture-of-experts model, attention adapters only (--lora-targets "
                                  "attention: the routed experts frozen, unadapted; docs/model.md §13.5); no measured "
                                  "MoE fine-tuning run checks it")
OFFLOAD_WARNING = ("offload {offload}: the host-link and host-memory efficiencies and the CPU-Adam rate are priors "
                   "(docs/model.md §14), not fitted: no measured offload run is in specs/runs")


MOE_FRAMEWORK_WARNING = ("mixture of experts under {framework}: the MoE terms are validated only on Megatron-Bridge "
                         "(Megatron-Core) runs (docs/validation.md, 'Mixture-of-experts runs'); {framework}'s "
                         "expert kernels, token dispatcher and overlap are not")
DUALPIPE_WARNING = ("pipeline_schedule dualpipe: DeepSeek-V3's schedule from its report (bubble, 2× parameters, "
                    "p + 1 micro-batches' activations, the all-to-alls and sends hidden, docs/model.md §5.4); no "
                    "bundled measured run uses it")
HYBRID_WARNING = ("hybrid Mamba-2 blocks: the scan's rate is a prior (its hardware's fused-attention rate) and no "
                  "hybrid run is fitted; on the {runs} measured Megatron-Bridge runs of {models} trainest's "
                  "tokens/s are {low:+d} to {high:+d} % off the measured (positive: the step predicted too fast; "
                  "docs/validation.md, 'Hybrid Mamba-2 / attention / MoE runs')")
# the ranges the warning states (tests/test_hybrid.py checks them): (runs, low %, high %)
HYBRID_ERROR_RANGE_PCT = (21, -10, 18)        # Nemotron 3 Nano and 3.5 Lightning
LATENT_MOE_ERROR_RANGE_PCT = (32, -25, 42)      # Nemotron 3 Super and Ultra (LatentMoE)
MOE_PRIOR_WARNING = ("mixture of experts on {hardware}: its grouped-GEMM and all-to-all efficiencies are priors "
                     "(grouped_gemm {grouped:g}, all_to_all {a2a:g}), not fitted on any MoE run of this device")


def prior_warnings(scenario: Any, hardware: bool = True) -> list[str]:
    """Warnings for the parts of an estimate that rest on unvalidated or biased numbers (`hardware`
    False: not the one about the scenario's hardware's MoE efficiencies)."""
    out = []
    if scenario.finetune.fine_tune and "tokens" in scenario.derived:
        from trainest.units import fmt_si
        method = scenario.finetune.method
        out.append(FINETUNE_TOKENS_WARNING.format(method="full fine-tune" if method == "full" else method,
                                                  tokens=fmt_si(scenario.tokens)))
    if scenario.model.moe is not None:
        from trainest.frameworks import FRAMEWORKS
        if not FRAMEWORKS[scenario.framework].moe_seen:
            out.append(MOE_FRAMEWORK_WARNING.format(framework=scenario.framework))
        e = scenario.hardware.efficiency
        if hardware and not e.moe_fitted:
            out.append(MOE_PRIOR_WARNING.format(hardware=scenario.hardware.name, grouped=e.grouped_gemm,
                                                a2a=e.all_to_all))
    if scenario.parallel.pipeline_schedule == "dualpipe":
        out.append(DUALPIPE_WARNING)
    if scenario.model.hybrid is not None:
        latent = scenario.model.moe is not None and scenario.model.moe.latent_size is not None
        runs, low, high = LATENT_MOE_ERROR_RANGE_PCT if latent else HYBRID_ERROR_RANGE_PCT
        models = "Nemotron 3 Super and Ultra (LatentMoE)" if latent else "Nemotron 3 Nano and 3.5 Lightning"
        out.append(HYBRID_WARNING.format(runs=runs, models=models, low=low, high=high))
    if scenario.finetune.frozen:
        out.append(FINETUNE_WARNING.format(method=scenario.finetune.method))
        if scenario.model.moe is not None:
            text = MOE_ATTENTION_FINETUNE_WARNING if scenario.finetune.targets == "attention" else MOE_FINETUNE_WARNING
            out.append(text.format(method=scenario.finetune.method, framework=scenario.framework))
    if scenario.offload != "none":
        out.append(OFFLOAD_WARNING.format(offload=scenario.offload))
    return out
