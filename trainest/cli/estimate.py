"""`trainest estimate`: options -> Scenario -> estimate() -> tables or JSON, and the CI gates.

`run_estimate` is the command's body; both the typer command (cli/application.py) and the typer-free fast
path (cli/main.py) call it with option values keyed by knob name. It imports nothing heavy at
module level: it is on the start-up path of every `trainest estimate`.
"""

from __future__ import annotations

import sys
from typing import Any

from trainest.cli import EXIT_BAD_INPUT, EXIT_GATE, EXIT_OK, error_line
from trainest.knobs import CLI

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


def _estimate(values: dict[str, Any]) -> tuple[Any, Any]:
    """(the Estimate with its warnings, the CI gates) of the option values; raises SpecError on bad input."""
    from trainest.caveats import assess
    from trainest.gates import gates_of
    from trainest.scenario import scenario_from_mapping
    config = values.get("config")
    mapping, shape = scenario_mapping_from_options(config, values)
    where = f"scenario {config!r}" if config is not None else CLI
    scenario = scenario_from_mapping(mapping, where, shape=shape, schedules_need_a_pipeline=True)
    gates = gates_of(values.get("max_days"), values.get("max_cost"), bool(values.get("require_fit")))
    return assess(scenario), gates


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
    """Run `trainest estimate` for parsed option values (keys: the knob names): the scenario estimated with its
    warnings (trainest.caveats), printed as JSON or tables, the warnings on stderr, the CI gates checked; return
    the exit code (0, 1 bad input, 3 a CI gate broken)."""
    from trainest.errors import SpecError
    try:
        result, gates = _estimate(values)
        if values.get("timeline"):
            write_timeline(result.scenario, values["timeline"])
    except SpecError as exc:
        error_line(str(exc))
        return EXIT_BAD_INPUT
    from trainest import report
    from trainest.gates import broken_gates, gate_results
    from trainest.report.estimate import estimate_dict, print_estimate
    ops = None
    if values.get("ops"):
        from trainest.estimate import estimate_ops
        ops = estimate_ops(result.scenario)
    advice, warnings = result.fit_advice, list(result.warnings)
    if values.get("json_out"):
        doc = estimate_dict(result, warnings, ops)
        if advice is not None:
            from trainest.cli.nofit import fit_advice_dict
            doc["fit_advice"] = report.clean(fit_advice_dict(values, advice))
        if checked := gate_results(gates, result):
            doc["gates"] = report.clean(checked)
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
    broken = broken_gates(gates, result)
    for b in broken:
        print(f"Gate failed: {b}", file=sys.stderr)
    return EXIT_GATE if broken else EXIT_OK
