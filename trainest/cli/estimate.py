"""`trainest estimate`: options -> Scenario -> estimate() -> tables or JSON, and the CI gates.

`run_estimate` is the command's body; both the typer command (cli/application.py) and the typer-free fast
path (cli/main.py) call it with option values keyed by knob name. It imports nothing heavy at
module level: it is on the start-up path of every `trainest estimate`.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from trainest.cli import EXIT_BAD_INPUT, EXIT_GATE, EXIT_OK, error_line

HELP = "Estimate one training scenario: step time and its breakdown, throughput, memory, whole run."


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`base` updated with the non-None values of `overrides`, recursing into nested mappings."""
    out = dict(base)
    for key, value in overrides.items():
        if value is None:
            continue
        if isinstance(value, dict):
            current = out.get(key)
            merged = merge(current if isinstance(current, dict) else {}, value)
            if merged:
                out[key] = merged
        else:
            out[key] = value
    return out


def scenario_mapping_from_options(config: str | None, values: dict[str, Any]) -> tuple[dict, dict]:
    """(scenario mapping, shape overrides) from a config file and CLI option values (CLI wins); what
    neither gives takes the one default scenario's value (trainest.scenario)."""
    from trainest.knobs import mapping_from_values
    from trainest.scenario import load_scenario_file
    base = load_scenario_file(config) if config is not None else {}
    given, shape = mapping_from_values(values)
    mapping = merge(base, given)
    if shape and isinstance(mapping.get("model"), dict):
        from trainest.catalog import MOE_OVERRIDES
        # the dense shape keys go into the mapping; the MoE ones (--experts ...) stay for with_shape, which
        # knows where they live (the moe: block, or a new one for a dense model)
        moe = {k: v for k, v in shape.items() if k in MOE_OVERRIDES}
        mapping["model"] = merge(mapping["model"], {k: v for k, v in shape.items() if k not in MOE_OVERRIDES})
        shape = moe
    return mapping, shape


def gate_limits(values: dict[str, Any]) -> tuple[float | None, float | None]:
    """(--max-days in days, --max-cost in USD) as given: a bare number of days or a duration as --deadline
    takes it (30d, 12h, 2w); a count as --tokens takes it (250k, 1.5M); None where not given."""
    from trainest.errors import SpecError
    from trainest.units import SECONDS_PER_DAY, parse_count, parse_duration_s
    days, cost = values.get("max_days"), values.get("max_cost")
    if days is not None:
        text = str(days).strip()
        try:
            days = float(text)              # a bare number: days
        except ValueError:
            days = None
            with contextlib.suppress(SpecError):
                days = parse_duration_s(text, "--max-days") / SECONDS_PER_DAY
        if days is None or not 0 < days < float("inf"):
            raise SpecError(f"--max-days {text!r} must be a duration greater than 0: days (30), or 30d, 12h, 2w")
    if cost is not None:
        try:
            cost = parse_count(str(cost).strip(), "--max-cost")
        except SpecError:
            raise SpecError(f"--max-cost {str(cost)!r} must be an amount of USD greater than 0, e.g. 250000, 250k "
                            f"or 1.5M") from None
    return days, cost


def gate(flag: str, limit: float | None, value: float | None, passed: bool, message: str) -> dict[str, Any]:
    """One CI gate as the JSON documents name it: its flag, limit, the value checked, whether it passed, why not."""
    return {"gate": flag, "limit": limit, "value": value, "passed": passed, "message": "" if passed else message}


def gate_results(values: dict[str, Any], result: Any) -> list[dict[str, Any]]:
    """Every CI gate given (--max-days [days], --max-cost [USD], --require-fit [bytes per device]), checked."""
    max_days, max_cost = gate_limits(values)
    tr, me = result.training, result.memory
    out = []
    if max_days is not None:
        out.append(gate("--max-days", max_days, tr.time_days, tr.time_days <= max_days,
                        f"training takes {tr.time_days:.2f} days > --max-days {max_days:g}"))
    if max_cost is not None:
        out.append(gate("--max-cost", max_cost, tr.cost_usd, tr.cost_usd is not None and tr.cost_usd <= max_cost,
                        "--max-cost given but no price is known; give --price-per-hour" if tr.cost_usd is None else
                        f"training costs ${tr.cost_usd:,.0f} > --max-cost ${max_cost:,.0f}"))
    if values.get("require_fit"):
        out.append(gate("--require-fit", me.capacity_bytes, me.per_device_bytes, bool(me.fits),
                        f"needs {me.per_device_bytes / 2**30:.1f} GiB per device > "
                        f"{me.capacity_bytes / 2**30:.1f} GiB (--require-fit)"))
    return out


def _gates(values: dict[str, Any], result: Any) -> list[str]:
    """The CI gates the result breaks (--max-days, --max-cost, --require-fit), in words."""
    return [g["message"] for g in gate_results(values, result) if not g["passed"]]


def _estimate(values: dict[str, Any]) -> tuple[Any, list[str], Any]:
    """(Estimate, warnings, advice.FitAdvice where it does not fit else None) of the option values; raises
    SpecError on bad input."""
    from trainest.estimate import estimate
    from trainest.scenario import scenario_from_mapping
    config = values.get("config")
    mapping, shape = scenario_mapping_from_options(config, values)
    where = f"scenario {config!r}" if config is not None else "options"
    scenario = scenario_from_mapping(mapping, where, shape=shape)
    from trainest.scenario import require_a_pipeline_for_dualpipe
    require_a_pipeline_for_dualpipe(scenario, where)
    gate_limits(values)          # bad gate values are bad input before anything is estimated
    result = estimate(scenario)
    from trainest.estimate import plausibility_warnings, tp_overlap_warning
    warnings: list[str] = plausibility_warnings(result)
    overlap = tp_overlap_warning(scenario)
    if overlap:
        warnings.append(overlap)
    advice = None
    if not result.memory.fits:
        from trainest.advice import fit_advice
        advice = fit_advice(scenario, result)
        warnings.append(advice.text)
    elif scenario.parallel.pp > 1:
        from trainest.advice import layout_hint
        hint = layout_hint(scenario, result)
        if hint:
            warnings.append(hint)
    warnings.extend(price_warnings(scenario))
    warnings.extend(job_warnings(scenario))
    return result, warnings, advice


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
FINETUNE_ERROR_STATS = (8, -17, 1, 10.9)
FINETUNE_WARNING = ("{{method}}: on the {} published LoRA runs trainest can express its tokens/s are {} to {:+d} % "
                    "off the measured ({:.1f} % MAPE, mostly too slow; docs/validation.md, 'Fine-tuning runs'); no "
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
HYBRID_ERROR_RANGE_PCT = (21, 7, 26)          # Nemotron 3 Nano and 3.5 Lightning
LATENT_MOE_ERROR_RANGE_PCT = (32, -2, 101)     # Nemotron 3 Super and Ultra (LatentMoE)
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


def write_timeline(scenario: Any, path: str) -> None:
    """Write the predicted step of `scenario` as a Chrome trace to `path` (trainest.timeline); raises
    SpecError when the file cannot be written."""
    import json

    from trainest.errors import SpecError
    from trainest.report.timeline import chrome_trace
    from trainest.timeline import step_timeline
    doc = chrome_trace(step_timeline(scenario), scenario.model.name)
    try:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, allow_nan=False)
    except OSError as exc:
        raise SpecError(f"--timeline {path!r} cannot be written: {exc.strerror}") from None


def run_estimate(values: dict[str, Any]) -> int:
    """Run `trainest estimate` for parsed option values (keys: the knob names); print the result
    (JSON or tables) and warnings; return the exit code (0, 1 bad input, 3 a CI gate broken)."""
    from trainest.errors import SpecError
    try:
        result, warnings, advice = _estimate(values)
    except SpecError as exc:
        error_line(str(exc))
        return EXIT_BAD_INPUT
    from trainest import report
    from trainest.report.estimate import estimate_dict, print_estimate
    if values.get("timeline"):
        try:
            write_timeline(result.scenario, values["timeline"])
        except SpecError as exc:
            error_line(str(exc))
            return EXIT_BAD_INPUT
    ops = None
    if values.get("ops"):
        from trainest.estimate import estimate_ops
        ops = estimate_ops(result.scenario)
    if values.get("json_out"):
        doc = estimate_dict(result, warnings, ops)
        if advice is not None:
            from trainest.cli.nofit import fit_advice_dict
            doc["fit_advice"] = report.clean(fit_advice_dict(values, advice))
        if gates := gate_results(values, result):
            doc["gates"] = report.clean(gates)
        print(report.dumps(doc))
    else:
        if advice is not None:           # the first lines: what fits, as commands that paste (also under -q)
            from trainest.cli.nofit import print_no_fit
            print_no_fit(values, advice)
            warnings = [w for w in warnings if w != advice.text]
        print_estimate(result, ops)
    if not values.get("quiet"):
        for w in warnings:
            report.warn(w)
    broken = _gates(values, result)
    for b in broken:
        print(f"Gate failed: {b}", file=sys.stderr)
    return EXIT_GATE if broken else EXIT_OK
