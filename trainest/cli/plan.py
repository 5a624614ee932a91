"""`trainest plan`: the fastest parallel layout that fits, found by evaluating every one.

Parses options, calls trainest.search, hands the result to trainest.report.plan. numpy and rich are
imported inside the function.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from trainest.choices import DeviceCounts, Objective
from trainest.cli.common import fail
from trainest.cli.options import option_annotation
from trainest.knobs import JOB_KEYS, given_args

# options shared with `trainest estimate`: declared once, in trainest.knobs
ModelOpt = option_annotation("model")
HardwareOpt = option_annotation("hardware")
PrecisionOpt = option_annotation("precision")
SeqLenOpt = option_annotation("seq_len")
DevicesPerNodeOpt = option_annotation("devices_per_node")
AttentionOpt = option_annotation("attention")
KernelsOpt = option_annotation("kernels")
TokensOpt = option_annotation("tokens")
PricePerHourOpt = option_annotation("price_per_hour")
PueOpt = option_annotation("pue")
JsonOpt = option_annotation("json_out")
TpOverlapOpt = option_annotation(
    "tp_overlap", help="Every plan pipelines its TP collectives with the GEMMs (Megatron --tp-comm-overlap).")
DpCollectivesOpt = option_annotation(
    "dp_collectives", help="How every plan's data-parallel/ZeRO rings use the NICs: hierarchical (every NIC of a "
                           "node) or flat (one NIC per device, e.g. DeepSpeed ZeRO-3 of 2021).")
ConfigOpt = option_annotation(
    "config", help="Scenario YAML for the job (its parallel layout, micro-batch and recompute are ignored); "
                   "options override it.")


def plan(
    model: ModelOpt = None,
    hardware: HardwareOpt = None,
    devices: Annotated[Optional[str], typer.Option(
        "--devices", "--gpus", "-n",
        help="Device count N, or a range such as 256..8192 with --deadline/--budget.",
        show_default="8")] = None,
    global_batch: Annotated[Optional[int], typer.Option(
        "--global-batch", "-B", help="Global batch B, in sequences (required).")] = None,
    precision: PrecisionOpt = None,
    seq_len: SeqLenOpt = None,
    devices_per_node: DevicesPerNodeOpt = None,
    attention: AttentionOpt = None,
    kernels: KernelsOpt = None,
    tokens: TokensOpt = None,
    price_per_hour: PricePerHourOpt = None,
    pue: PueOpt = None,
    config: ConfigOpt = None,
    tp_overlap: TpOverlapOpt = None,
    dp_collectives: DpCollectivesOpt = None,
    top: Annotated[int, typer.Option(
        "--top", "-k", help="How many plans to show.")] = 5,
    objective: Annotated[Objective, typer.Option(
        "--objective", help="Rank by step time, cost or energy of the whole run.")] = Objective.TIME,
    max_tp: Annotated[Optional[int], typer.Option(
        "--max-tp", help="Largest tensor-parallel size.", show_default="scale-up domain")] = None,
    max_pp: Annotated[Optional[int], typer.Option(
        "--max-pp", help="Largest pipeline-parallel size.", show_default="no limit")] = None,
    max_cp: Annotated[Optional[int], typer.Option(
        "--max-cp", help="Largest context-parallel size.", show_default="no limit")] = None,
    max_vpp: Annotated[Optional[int], typer.Option(
        "--max-vpp", help="Most virtual stages per pipeline rank.", show_default="no limit")] = None,
    max_micro_batch: Annotated[Optional[int], typer.Option(
        "--max-micro-batch", help="Largest micro-batch, in sequences.", show_default="no limit")] = None,
    allow: Annotated[Optional[list[str]], typer.Option(
        "--allow",
        help="Restrict a knob, e.g. zero=0,1,3 recompute=selective,full sp=on tp=4,8 pp=1,2 cp=1 vpp=1 "
             "mb=1,2 (repeatable).")] = None,
    deadline: Annotated[Optional[str], typer.Option(
        "--deadline",
        help="Find the fewest devices (over the --devices range) that train the tokens within this time, "
             "e.g. 30d.")] = None,
    budget: Annotated[Optional[str], typer.Option(
        "--budget",
        help="Find the fewest devices (over the --devices range) that train the tokens for at most this many "
             "USD, e.g. 2e6.")] = None,
    device_counts: Annotated[DeviceCounts, typer.Option(
        "--device-counts",
        help="Counts tried in a --devices range: powers of two, or multiples of the node size.")] = DeviceCounts.POW2,
    json_out: JsonOpt = False,
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Search every parallel layout (tp, pp, cp, dp, virtual stages, micro-batch, ZeRO, recompute,
    sequence parallelism) and show the fastest that fit, with the runner-up for each knob."""
    from trainest.errors import SpecError
    options = {"model": model, "hardware": hardware, "global_batch": global_batch, "precision": precision,
               "seq_len": seq_len, "devices_per_node": devices_per_node, "attention": attention, "kernels": kernels,
               "tokens": tokens, "price_per_hour": price_per_hour, "pue": pue}
    try:
        from trainest import search as S
        from trainest.scenario import load_scenario_file
        from trainest.units import parse_count, parse_duration_s
        base_map: dict[str, Any] = load_scenario_file(config) if config else {}
        given = {k: (v.value if hasattr(v, "value") else v) for k, v in options.items() if v is not None}
        mapping = {**base_map, **given}
        if tp_overlap is not None:
            mapping["parallel"] = {**(mapping.get("parallel") or {}), "tp_overlap": tp_overlap}
        if dp_collectives is not None:
            mapping["parallel"] = {**(mapping.get("parallel") or {}), "dp_collectives": dp_collectives.value}
        if devices is None:
            devices = str(base_map.get("devices") or 8)
        base = S.job_scenario(mapping, f"scenario {config!r}" if config else "options")
        space = S.space_from_options(allow, max_tp=max_tp, max_pp=max_pp, max_cp=max_cp, max_vpp=max_vpp,
                                     max_micro_batch=max_micro_batch)
        lo, hi = S.parse_devices(devices)
        deadline_s = parse_duration_s(deadline, "--deadline") if deadline is not None else None
        budget_usd = parse_count(budget, "--budget") if budget is not None else None
        from trainest.report import LazyProgress
        progress = LazyProgress("searching plans" if lo == hi else "trying device counts",
                                enabled=not quiet and not json_out)
        try:
            if deadline_s is None and budget_usd is None:
                if lo != hi:
                    raise SpecError(f"--devices {devices}: a range needs --deadline or --budget")
                result = S.search(base, lo, space, objective=objective.value, top=top, progress=progress)
                dsearch = None
            else:
                counts = S.device_counts(lo, hi, device_counts.value, base.devices_per_node)
                dsearch = S.smallest_devices(base, counts, space, deadline_s=deadline_s, budget_usd=budget_usd,
                                             objective=objective.value, top=top, progress=progress)
                result = dsearch.result
        finally:
            progress.close()
    except SpecError as exc:
        fail(str(exc))
    from trainest.report.plan import print_plan, search_dict
    if json_out:
        from trainest.report import dumps
        print(dumps(search_dict(result, dsearch)))
        return
    job_args = given_args({"config": config}, ("config",)) + given_args(options, JOB_KEYS)
    print_plan(result, dsearch, " ".join(job_args))


def _job_args(model, hardware, precision, seq_len, devices_per_node, attention, kernels, tokens, price, pue,
              config) -> str:
    """The job's own options, to rebuild the winner with `trainest estimate`."""
    parts = []
    for flag, value in (("--config", config), ("--model", model), ("--hardware", hardware), ("--precision", precision),
                        ("--seq-len", seq_len), ("--devices-per-node", devices_per_node), ("--attention", attention),
                        ("--kernels", kernels), ("--tokens", tokens), ("--price-per-hour", price), ("--pue", pue)):
        if value is not None:
            parts += [flag, str(value.value if isinstance(value, Enum) else value)]
    return " ".join(parts)
