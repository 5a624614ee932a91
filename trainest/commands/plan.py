"""`trainest plan`: the fastest parallel layout that fits, found by evaluating every one.

Parses options, calls trainest.search, renders. numpy and rich are imported inside the function.
"""

from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated, Any, Optional

import typer

from trainest.commands._options import option_annotation

# options shared with `trainest estimate`: declared once, in trainest.options.ESTIMATE_OPTIONS
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


class Objective(str, Enum):
    time = "time"
    cost = "cost"
    energy = "energy"


class DeviceCounts(str, Enum):
    pow2 = "pow2"
    node = "node"




def _fail(message: str) -> None:
    print(f"Error: {message}", file=sys.stderr)
    raise typer.Exit(1)


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
        "--objective", help="Rank by step time, cost or energy of the whole run.")] = Objective.time,
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
        help="Counts tried in a --devices range: powers of two, or multiples of the node size.")] = DeviceCounts.pow2,
    json_out: JsonOpt = False,
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Search every parallel layout (tp, pp, cp, dp, virtual stages, micro-batch, ZeRO, recompute,
    sequence parallelism) and show the fastest that fit, with the runner-up for each knob."""
    from trainest.errors import SpecError
    try:
        from trainest import search as S
        from trainest.scenario import load_scenario_file
        from trainest.units import parse_count, parse_duration_s
        base_map: dict[str, Any] = load_scenario_file(config) if config else {}
        options = {"model": model, "hardware": hardware, "global_batch": global_batch, "precision": precision,
                   "seq_len": seq_len, "devices_per_node": devices_per_node, "attention": attention, "kernels": kernels,
                   "tokens": tokens, "price_per_hour": price_per_hour, "pue": pue}
        given = {k: (v.value if isinstance(v, Enum) else v) for k, v in options.items() if v is not None}
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
        _fail(str(exc))
        return
    if json_out:
        from trainest.report import dumps
        print(dumps(S.search_dict(result, dsearch)))
        return
    job_args = _job_args(model, hardware, precision, seq_len, devices_per_node, attention, kernels, tokens,
                         price_per_hour, pue, config)
    _print(result, dsearch, job_args)


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


def _layout(e) -> str:
    """tp, pp, cp, dp, virtual stages, micro-batch, ZeRO stage, sequence parallelism, compactly."""
    s, p = e.scenario, e.scenario.parallel
    return (f"t{p.tp} p{p.pp}" + ("(bal)" if p.pipeline_split == "balanced" else "") + f" c{p.cp} d{p.dp}"
            + (f" v{p.vpp}" if p.pp > 1 else "") + f" b{s.micro_batch} z{p.zero}"
            + (" sp" if p.sequence_parallel else ""))


def _print(r, ds, job_args: str) -> None:
    from rich import box
    from rich.table import Table

    from trainest import search as S
    from trainest.report import _console, fmt_money, fmt_seconds, fmt_si
    from trainest.units import GiB
    con = _console()
    b = r.base
    st = r.stats
    if ds is not None:
        t = Table(title="Device counts tried (smallest first)", title_justify="left", box=box.SIMPLE_HEAD)
        for col in ("devices", "best time to train", "cost", "meets"):
            t.add_column(col, justify="right" if col != "meets" else "left")
        for tr in ds.trials:
            t.add_row(f"{tr.devices:,}", "no plan fits" if tr.time_s is None else f"{tr.time_s / 86400:.1f} days",
                      "n/a" if tr.cost_usd is None else fmt_money(tr.cost_usd),
                      "yes" if tr.meets else f"no{': ' + tr.note if tr.note and tr.time_s is not None else ''}")
        con.print(t)
    con.print(f"[bold]{b.model.name}[/bold] ({b.model.params / 1e9:.1f} B params) on {r.devices:,} x "
              f"{b.hardware.name}, "
              f"global batch {b.global_batch} x {b.seq_len} tokens, {b.precision}, {fmt_si(b.tokens)} tokens to train")
    rej = ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in st.rejected.items() if v)
    con.print(f"Searched {st.evaluated:,} plans in {st.seconds:.2f} s ({fmt_si(st.plans_per_s)} plans/s): "
              f"{st.feasible:,} feasible; rejected: {rej or 'none'}. Ranked by {r.objective}.")

    t = Table(title=f"Top {len(r.plans)} plans (step breakdown in seconds)", title_justify="left", box=box.SIMPLE_HEAD,
              pad_edge=False, collapse_padding=True)
    t.caption = ("plan: t tensor, p pipeline ((bal): balanced split, embedding and loss count as layers), c context, d data parallel, v virtual stages, b micro-batch, z ZeRO, "
                 "sp sequence parallel; step = compute + mem(ory-bound) + comm + bubble + overhead \\[s]; "
                 "GiB per device; days and cost to train the tokens")
    t.caption_justify = "left"
    for col in ("#", "plan", "recomp", "step", "compute", "mem", "comm", "bubble", "MFU", "GiB", "days", "cost"):
        t.add_column(col, justify="left" if col in ("plan", "recomp") else "right", no_wrap=True)
    for i, e in enumerate(r.plans, 1):
        t.add_row(*_row(str(i), e, fmt_si), style="bold" if i == 1 else "")
    con.print(t)

    w = r.plans[0]
    wk = S.plan_knobs(w.scenario)
    t = Table(title="Runner-up that differs in each knob (what the winner's choice is worth)", title_justify="left",
              box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for col in ("knob", "winner", "runner-up", "its plan", "recomp", "step", "slower by", "GiB/dev"):
        t.add_column(col, justify="right" if col in ("step", "slower by", "GiB/dev") else "left",
                     no_wrap=col == "its plan")
    for knob, ru in r.runner_up_by_knob.items():
        if ru is None:
            t.add_row(knob, _show(wk[knob]), "-", "no other value fits or is allowed", "", "", "", "")
            continue
        e = ru.estimate
        rk = S.plan_knobs(e.scenario)
        t.add_row(knob, _show(wk[knob]), _show(rk[knob]), _layout(e), e.scenario.recompute, fmt_seconds(e.step.time_s),
                  f"{ru.score_ratio - 1:+.1%}", f"{e.memory.per_device_bytes / GiB:.1f}")
    con.print(t)
    con.print("Reproduce the winner: [dim]trainest estimate " + (job_args + " " if job_args else "")
              + " ".join(S.estimate_args(w)) + "[/dim]")


def _show(v) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    return str(v)


def _row(rank: str, e, fmt_si) -> list[str]:
    from trainest.units import GiB
    st = e.step
    return [rank, _layout(e), e.scenario.recompute, *(f"{x:.4g}" for x in (st.time_s, st.compute_s, st.memory_s,
                                                                            st.communication_s, st.bubble_s)),
            f"{e.throughput.mfu:.1%}", f"{e.memory.per_device_bytes / GiB:.1f}", f"{e.training.time_days:.1f}",
            "n/a" if e.training.cost_usd is None else "$" + fmt_si(e.training.cost_usd).replace(" ", "")]
