"""`trainest plan`: the fastest parallel layout that fits, found by evaluating every one.

`run_plan` is the command's body (its options: trainest.knobs.PLAN_OPTIONS); it builds the job and
the search space, calls trainest.search and hands the result to trainest.report.plan. numpy and
rich are imported inside the functions.
"""

from __future__ import annotations

import sys
from typing import Any

from trainest.cli import EXIT_BAD_INPUT, EXIT_GATE, EXIT_OK, error_line
from trainest.knobs import CLI, KNOBS, LAYOUT_ARGS, given_args

HELP = ("Search every parallel layout (tp, pp, cp, dp, virtual stages, micro-batch, ZeRO, recompute, "
        "sequence parallelism) and show the fastest that fit, with the runner-up for each knob.")
MAXIMA = ("max_tp", "max_pp", "max_cp", "max_vpp", "max_micro_batch")


def _plain(value: Any) -> Any:
    return value.value if hasattr(value, "value") else value


def one_hardware(given: Any) -> str | None:
    """The single hardware of `plan --hardware` (a list: the option may be repeated), or a SpecError
    pointing to `trainest compare` when several are given (repeated, or a comma list)."""
    from trainest.errors import SpecError
    if given is None:
        return None
    texts = [given] if isinstance(given, str) else [str(text) for text in given]
    names = [n.strip() for text in texts for n in text.split(",") if n.strip()]
    if not names:
        raise SpecError(f"--hardware {', '.join(map(repr, texts))} names no hardware; give a catalog name "
                        f"(trainest list hardware) or a hardware YAML file")
    if len(names) > 1:
        raise SpecError(f"plan searches one hardware, and --hardware names {len(names)} ({', '.join(names)}); "
                        f"compare them with: trainest compare --hardware {','.join(names)} ...")
    return names[0]


def job_option_args(values: dict[str, Any], leave_out: tuple[str, ...] = ()) -> list[str]:
    """The job options as given (the config file and the knobs a plan keeps for every plan), as the
    `trainest estimate` arguments that reproduce a plan with its layout's; the global batch is among the
    layout's arguments, in sequences, however it was given. `leave_out`: knobs the caller sets itself."""
    skip = LAYOUT_ARGS + ("global_batch_tokens",) + leave_out
    return given_args(values, ("config",)) + given_args(values, tuple(
        k.name for k in KNOBS if k.job and k.name not in skip))


def job_mapping(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the job's scenario mapping, the model's shape overrides): the config file, overridden by the job
    options given (the knobs a plan keeps for every plan, in their groups: parallel.tp_overlap,
    finetune.rank, ...; the shape overrides as `estimate` applies them)."""
    from trainest.cli.estimate import scenario_mapping_from_options
    from trainest.knobs import KNOBS
    return scenario_mapping_from_options(values.get("config"), {k.name: values.get(k.name) for k in KNOBS if k.job})


def search_plans(values: dict[str, Any]) -> tuple[Any, Any, str | None]:
    """(SearchResult, DeviceSearch or None, a note on recompute modules or None) for the option values;
    raises SpecError on bad input."""
    from trainest import search as S
    from trainest.advice import modules_plan_note, winner_layout_note
    from trainest.errors import SpecError
    from trainest.record import replace
    from trainest.report import LazyProgress
    from trainest.units import parse_count, parse_duration_s
    config = values.get("config")
    mapping, shape = job_mapping(values)
    where = f"scenario {config!r}" if config is not None else CLI
    given = values["devices"] if values.get("devices") is not None else mapping.get("devices")
    devices = str(given if given is not None else S.default_devices(mapping, where))
    lo, hi = S.parse_devices(devices)
    space = S.space_from_options(values.get("allow"), **{k: values.get(k) for k in MAXIMA})
    for knob, _ in space.job_choices:           # searched value by value: not also fixed by the job
        given = mapping.get(knob, (mapping.get("parallel") or {}).get(knob))
        if given is not None:
            raise SpecError(f"--allow {knob}: the job already gives {knob} {given}; give it once (drop "
                            f"--{knob.replace('_', '-')}, or --allow {knob}=...)")
    base = S.job_scenario(S.job_for_methods(mapping, space, where), where, default_batch_devices=hi, shape=shape)
    base = S.with_search_framework(base, mapping, space, where, default_batch_devices=hi, shape=shape)
    if given is None:               # shown as derived (report.plan: the header)
        base = replace(base, derived=base.derived + ("devices",))
    deadline, budget = values.get("deadline"), values.get("budget")
    deadline_s = parse_duration_s(deadline, "--deadline") if deadline is not None else None
    budget_usd = parse_count(budget, "--budget", "2e6, 250k or 1.5M (USD)") if budget is not None else None
    objective = _plain(values.get("objective") or "time")
    given_top = values.get("top")
    top = 5 if given_top is None else int(given_top)      # --top 0 is refused by the search, not replaced
    progress = LazyProgress("searching plans" if lo == hi else "trying device counts",
                            enabled=not values.get("quiet") and not values.get("json_out"))
    try:
        if lo == hi and deadline_s is None and budget_usd is None:
            result = S.search(base, lo, space, objective=objective, top=top, progress=progress)
            notes = [n for n in (modules_plan_note(result, space), winner_layout_note(result)) if n]
            return result, None, "; ".join(notes) or None
        counts = S.device_counts(lo, hi, _plain(values.get("device_counts") or "pow2"), base.devices_per_node,
                                 S.device_step(devices))
        dsearch = S.smallest_devices(base, counts, space, deadline_s=deadline_s, budget_usd=budget_usd,
                                     objective=objective, top=top, progress=progress)
        return dsearch.result, dsearch, None
    finally:
        progress.close()


DUALPIPE_NO_PIPELINE = ("pipeline_schedule dualpipe: the best plan has no pipeline (pp 1), so DualPipe does not "
                        "apply to it; its step is the same without the schedule")


def run_plan(values: dict[str, Any]) -> int:
    """Run `trainest plan` for parsed option values; print JSON or tables; return the exit code."""
    from trainest.errors import SpecError
    try:
        values = {**values, "hardware": one_hardware(values.get("hardware"))}
        result, dsearch, note = search_plans(values)
    except SpecError as exc:
        error_line(str(exc))
        return EXIT_BAD_INPUT
    from trainest import report
    from trainest.caveats import job_warnings
    from trainest.report.plan import print_plan, search_dict
    warnings = job_warnings(result.base)
    if result.base.parallel.pipeline_schedule == "dualpipe" and result.plans and \
            result.plans[0].scenario.parallel.pp == 1:         # the schedule does not apply to the winner
        from trainest.caveats import DUALPIPE_WARNING
        warnings = [DUALPIPE_NO_PIPELINE if w == DUALPIPE_WARNING else w for w in warnings]
    if values.get("json_out"):
        # the note rides with the warnings: what a script should read beside the plans
        warnings = warnings + ([f"note: {note}"] if note else [])
        doc = {**search_dict(result, dsearch), "warnings": warnings}
        if gates := plan_gates(dsearch):
            doc["gates"] = report.clean(gates)
        print(report.dumps(doc))
        return gate_exit(dsearch)
    print_plan(result, dsearch, job_option_args(values))
    if not values.get("quiet"):
        for w in warnings:
            report.warn(w)
        if note:
            print(f"Note: {note}", file=sys.stderr)
    return gate_exit(dsearch)


def plan_gates(dsearch: Any) -> list[dict[str, Any]]:
    """--deadline [s] and --budget [USD] as JSON gates, checked on the count shown (the chosen one, or the closest
    when none meets them); [] when neither was given."""
    from trainest.gates import gate
    if dsearch is None:
        return []
    shown = next(t for t in dsearch.trials if t.devices == dsearch.devices)
    out = []
    if dsearch.deadline_s is not None:
        out.append(gate("--deadline", dsearch.deadline_s, shown.time_s,
                        shown.time_s is not None and shown.time_s <= dsearch.deadline_s, dsearch.gate_failed))
    if dsearch.budget_usd is not None:
        out.append(gate("--budget", dsearch.budget_usd, shown.cost_usd,
                        shown.cost_usd is not None and shown.cost_usd <= dsearch.budget_usd, dsearch.gate_failed))
    return out


def gate_exit(dsearch: Any) -> int:
    """EXIT_GATE with the `Gate failed:` line on stderr when no device count meets --deadline/--budget (the
    document, with the closest count, is on stdout as for a met gate: estimate's --max-days contract)."""
    if dsearch is not None and dsearch.gate_failed:
        print(f"Gate failed: {dsearch.gate_failed}", file=sys.stderr)
        return EXIT_GATE
    return EXIT_OK
