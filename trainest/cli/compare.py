"""`trainest compare`: one job over several hardware entries, each at its best plan, side by side.

`run_compare` is the command's body (its options: trainest.knobs.COMPARE_OPTIONS); it builds the job
as `plan` does, calls trainest.compare and hands the result to trainest.report.compare.
"""

from __future__ import annotations

import sys
from typing import Any

from trainest.cli import EXIT_BAD_INPUT, EXIT_GATE, EXIT_OK, error_line

HELP = ("Compare hardware for one job: each entry at its best plan (at --devices N, or the fewest devices that "
        "meet --deadline, or the fastest within --budget), ranked by the objective, with the error band.")


def _plain(value: Any) -> Any:
    return value.value if hasattr(value, "value") else value


def run_compare(values: dict[str, Any]) -> int:
    """Run `trainest compare` for parsed option values; print JSON or tables; return the exit code."""
    from trainest import compare as C
    from trainest import search as S
    from trainest.cli.plan import job_mapping
    from trainest.errors import SpecError
    from trainest.report import LazyProgress
    from trainest.scenario import DEFAULT_DEVICES
    from trainest.units import parse_count, parse_duration_s
    progress = LazyProgress("comparing hardware", enabled=not values.get("quiet") and not values.get("json_out"))
    try:
        names = C.hardware_list(values.get("hardware"), bool(values.get("all_hardware")))
        job, shape = job_mapping({**values, "hardware": None, "price_per_hour": None})
        mapping = {k: v for k, v in job.items() if k != "hardware"}
        given = values["devices"] if values.get("devices") is not None else mapping.get("devices")
        devices = str(given if given is not None else DEFAULT_DEVICES)     # one count for every entry unless given
        deadline, budget = values.get("deadline"), values.get("budget")
        result = C.compare(
            mapping, names, devices, S.space_from_options(values.get("allow")),
            objective=_plain(values.get("objective") or "time"),
            deadline_s=parse_duration_s(deadline, "--deadline") if deadline is not None else None,
            budget_usd=parse_count(budget, "--budget", "2e6, 250k or 1.5M (USD)") if budget is not None else None,
            device_counts=_plain(values.get("device_counts") or "pow2"), progress=progress, shape=shape,
            prices=C.parse_prices(values.get("price_per_hour"), names))
    except SpecError as exc:
        error_line(str(exc))
        return EXIT_BAD_INPUT
    finally:
        progress.close()
    from trainest import report
    from trainest.record import replace
    from trainest.report.compare import compare_dict, print_compare
    result = replace(result, devices_default=given is None)
    warnings = compare_warnings(result)
    if values.get("json_out"):
        doc = {**compare_dict(result), "warnings": warnings}
        if gates := compare_gates(result):
            doc["gates"] = report.clean(gates)
        print(report.dumps(doc))
    else:
        from trainest.cli.plan import job_option_args
        print_compare(result, job_option_args(values, leave_out=("hardware", "price_per_hour")))
        if not values.get("quiet"):
            for w in warnings:
                report.warn(w)
    if (deadline is not None or budget is not None) and not any(en.can_run for en in result.entries):
        # a gate (--deadline, --budget) no entry meets: exit 3 as estimate's --max-days; the document is out
        for failed in (g for g in compare_gates(result) if not g["passed"]):     # the JSON's gates, same words
            print(f"Gate failed: {failed['message']}", file=sys.stderr)
        return EXIT_GATE
    return EXIT_OK


def compare_gates(c: Any) -> list[dict[str, Any]]:
    """--deadline [s] and --budget [USD] as JSON gates: passed when some entry meets them (the value: the best
    entry's run time or cost); [] when neither was given."""
    from trainest.gates import gate
    from trainest.units import fmt_money, fmt_seconds
    ran = [en.estimate for en in c.entries if en.can_run]
    met = bool(ran)
    out = []
    if c.deadline_s is not None:
        out.append(gate("--deadline", c.deadline_s, min((e.training.time_s for e in ran), default=None), met,
                        f"no hardware entry trains the tokens within {fmt_seconds(c.deadline_s)} (--deadline)"))
    if c.budget_usd is not None:
        costs = [e.training.cost_usd for e in ran if e.training.cost_usd is not None]
        out.append(gate("--budget", c.budget_usd, min(costs, default=None), met,
                        f"no hardware entry trains the tokens for at most {fmt_money(c.budget_usd)} (--budget)"))
    return out


def compare_warnings(c: Any) -> list[str]:
    """The job's warnings (`caveats.job_warnings`) and, for a MoE model, the entries whose MoE
    efficiencies are priors."""
    from trainest.caveats import job_warnings
    out = job_warnings(c.job, hardware=False)
    if c.job.model.moe is not None:
        priors = [e.hardware for e in c.entries if e.can_run and not e.estimate.scenario.hardware.efficiency.moe_fitted]
        if priors:
            out.append(f"mixture of experts on {', '.join(priors)}: their grouped-GEMM and all-to-all efficiencies "
                       f"are priors, not fitted on any MoE run of these devices")
    return out
