"""`trainest plan`: its JSON document, its tables, and the command line that reproduces a plan."""

from __future__ import annotations

import math

from trainest import SCHEMA_VERSION
from trainest.estimate import Estimate
from trainest.knobs import estimate_args as knob_estimate_args
from trainest.report import clean, console, fmt_money, fmt_seconds, fmt_si, print_command, print_table
from trainest.report.estimate import band_pct, band_source, estimate_dict, hardware_dict, notes
from trainest.scenario import (
    DEFAULT_DEVICES,
    DEFAULT_TOKENS_PER_STEP,
    Scenario,
    chosen_by_qlora,
    framework_args,
    scenario_mapping,
)
from trainest.search import DeviceSearch, DeviceTrial, SearchResult, plan_knobs
from trainest.units import GiB


def _framework_note(b: Scenario) -> str:
    """', framework F (default for QLoRA ...)' where a QLoRA chose the framework (a search with QLoRA plans runs
    every method under it); '' else."""
    if chosen_by_qlora(b.framework, b.hardware, "framework" in b.derived):
        return f", framework {b.framework} (default for QLoRA: bitsandbytes' 4-bit layers run under Hugging Face PEFT)"
    return ""


def estimate_args(e: Estimate) -> list[str]:
    """The `trainest estimate` options that select this plan's device count and layout
    (trainest.knobs.estimate_args of its inputs)."""
    return knob_estimate_args(scenario_mapping(e.scenario)) + framework_args(e.scenario)


def plan_dict(e: Estimate) -> dict:
    """One plan as JSON: its layout, and step/memory/throughput/training exactly as
    `trainest estimate --json` reports them (built by the same report function)."""
    full = estimate_dict(e)
    inputs = full["inputs"]
    return {"devices": inputs["devices"], "parallel": inputs["parallel"], "micro_batch": inputs["micro_batch"],
            "micro_batches": inputs["micro_batches"], "recompute": inputs["recompute"],
            "finetune": inputs["finetune"]["method"], "offload": inputs["offload"], "step": full["step"],
            "memory": full["memory"], "throughput": full["throughput"], "training": full["training"],
            "band": full["band"], "estimate_args": estimate_args(e)}


def _adapter_tokens_note(r: SearchResult) -> str:
    """' (LoRA/QLoRA plans: 100 M, ...)' when the search allowed adapters and the tokens are the default:
    those plans train a fine-tuning set's default, not the job's pre-training budget (search.plan_scenario)."""
    b = r.base
    adapters = {e.scenario.tokens for e in r.plans if e.scenario.finetune.frozen}
    if "tokens" not in b.derived or not adapters or adapters == {b.tokens}:
        return ""
    return f" (LoRA/QLoRA plans: {fmt_si(min(adapters))}, a fine-tuning set's default; give --tokens)"


def batch_default_note(base: Scenario) -> str:
    """' (default: ...)' after a search's global batch when the user gave none (search.job_scenario), else ''.
    Rounded up to a multiple of the largest device count of a range (`--devices 256..8192`), the default can be
    many times 0.5M tokens: then the note says how many tokens it is and how to choose another."""
    if "global_batch" not in base.derived:
        return ""
    tokens = base.global_batch * base.seq_len
    if tokens <= 2 * DEFAULT_TOKENS_PER_STEP:
        return " (default: 0.5M tokens, a multiple of the device count)"
    return (f" (default: 0.5M tokens, a multiple of the device count, rounded up to {fmt_si(tokens)} tokens per step "
            f"by the largest count: give --global-batch or --global-batch-tokens)")


def search_dict(r: SearchResult, devices_search: DeviceSearch | None = None) -> dict:
    """The `trainest plan --json` document."""
    job = scenario_mapping(r.base)
    for key in ("devices", "parallel", "micro_batch", "micro_batches", "recompute", "derived"):
        job.pop(key, None)
    derived = [k for k in ("devices", "global_batch") if k in r.base.derived]    # defaults, not the user's
    if derived:
        job["derived"] = derived
    st = r.stats
    doc = {
        "schema_version": SCHEMA_VERSION,
        "hardware": hardware_dict(r.plans[0].scenario),
        "job": {**job, "devices": r.devices},
        "search": {"evaluated": st.evaluated, "feasible": st.feasible, "seconds": st.seconds,
                   "plans_per_s": st.plans_per_s, "rejected": dict(st.rejected), "objective": r.objective,
                   "space": r.space},
        "plans": [{**plan_dict(e), "objective_value": v} for e, v in zip(r.plans, r.scores, strict=True)],
        "runner_up_by_knob": {
            k: None if ru is None else {"value": plan_knobs(ru.estimate.scenario)[k], "objective_ratio": ru.score_ratio,
                                        **plan_dict(ru.estimate)}
            for k, ru in r.runner_up_by_knob.items()},
    }
    if devices_search is not None:
        ds = devices_search
        doc["devices_search"] = {
            "deadline_s": ds.deadline_s, "budget_usd": ds.budget_usd, "chosen": ds.devices, "rule": ds.rule,
            "gate_met": not ds.gate_failed, "gate_failed": ds.gate_failed or None,
            "tried": [{"devices": t.devices, "meets": t.meets, "time_s": t.time_s, "cost_usd": t.cost_usd,
                       "energy_kwh": t.energy_kwh, "note": t.note} for t in ds.trials]}
    return clean(doc)


# how a plan's label shows the job's choices a search varied (search_job_choices)
CHOICE_LABELS = {"moe_dispatcher": "{}", "cuda_graphs": "graphs:{}", "moe_overlap": "a2a-overlap:{}",
                 "fused_grouped_mlp": "fused-mlp:{}", "fp8_params": "fp8-params:{}", "fp8_attention": "fp8-attn:{}"}


def _layout(e, choices: tuple[str, ...] = ()) -> str:
    """tp, pp, cp, dp, virtual stages, micro-batch, ZeRO stage, sequence parallelism, compactly; with `choices`
    the values of those job knobs (a search over them: `--allow moe_dispatcher=...`)."""
    shown = plan_knobs(e.scenario)
    return _layout_of(e) + "".join(f" {CHOICE_LABELS[k].format(_show(shown[k]))}" for k in choices)


def _layout_of(e) -> str:
    """The layout part of `_layout`."""
    s, p = e.scenario, e.scenario.parallel
    return (f"t{p.tp} p{p.pp}" + ("(bal)" if p.pipeline_split == "balanced" else "") + f" c{p.cp} d{p.dp}"
            + (f" v{p.vpp}" if p.pp > 1 else "")
            + (f" e{p.ep}" + (f" et{p.etp}" if p.etp > 1 else "") if s.model.moe is not None else "")
            + f" b{s.micro_batch} z{p.zero}"
            + (" sp" if p.sequence_parallel else "") + (f" {s.finetune.method}" if s.finetune.frozen else "")
            + (f" off:{s.offload}" if s.offload != "none" else ""))


def print_plan(r: SearchResult, ds: DeviceSearch | None, job_args: list[str]) -> None:
    """The plan tables on stdout: device counts tried, the search, the top plans, the runner-ups and
    the command that reproduces the winner."""
    from rich import box
    from rich.table import Table

    con = console()
    b = r.base
    st = r.stats
    if ds is not None:
        print_device_trials(con, ds, r.objective)
    shown = f" (default: one node, at most {DEFAULT_DEVICES})" if "devices" in b.derived else ""
    active = "" if b.model.moe is None else f", {b.model.active_params / 1e9:.1f} B active"
    con.print(f"[bold]{b.model.name}[/bold] ({b.model.params / 1e9:.1f} B params{active}) on {r.devices:,} x "
              f"{b.hardware.name}{shown}, "
              f"global batch {b.global_batch} x {b.seq_len} tokens{batch_default_note(b)}, {b.precision}, "
              f"{fmt_si(b.tokens)} tokens to train{_adapter_tokens_note(r)}{_framework_note(b)}")
    rej = ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in st.rejected.items() if v)
    con.print(f"Searched {st.evaluated:,} plans in {st.seconds:.2f} s ({fmt_si(st.plans_per_s)} plans/s): "
              f"{st.feasible:,} feasible; rejected: {rej or 'none'}. Ranked by {r.objective}.")

    t = Table(title=f"Top {len(r.plans)} plans (step breakdown in seconds)", title_justify="left", box=box.SIMPLE_HEAD,
              pad_edge=False, collapse_padding=True)
    t.caption = ("plan: t tensor, p pipeline ((bal): balanced split, embedding and loss count as layers), "
                 "c context, d data parallel, v virtual stages, "
                 + ("e expert parallel, et expert tensor parallel, " if b.model.moe is not None else "")
                 + "b micro-batch, z ZeRO, "
                 "sp sequence parallel; step = compute + mem(ory-bound) + comm + bubble + overhead (+ the exposed "
                 "host-link time of an offload plan) \\[s]; "
                 "GiB per device; days and cost to train the tokens")
    t.caption_justify = "left"
    for col in ("#", "plan", "recomp", "step", "compute", "mem", "comm", "bubble", "MFU", "GiB", "days", "cost"):
        t.add_column(col, justify="left" if col in ("plan", "recomp") else "right", no_wrap=True)
    choices = tuple(k for k in CHOICE_LABELS if k in r.space)       # job choices the search varied
    for i, e in enumerate(r.plans, 1):
        t.add_row(*_row(str(i), e, fmt_si, choices), style="bold" if i == 1 else "")
    print_table(con, t)

    w = r.plans[0]
    wk = plan_knobs(w.scenario)
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
        rk = plan_knobs(e.scenario)
        t.add_row(knob, _show(wk[knob]), _show(rk[knob]), _layout(e, choices), e.scenario.recompute,
                  fmt_seconds(e.step.time_s),
                  f"{ru.score_ratio - 1:+.1%}", f"{e.memory.per_device_bytes / GiB:.1f}")
    print_table(con, t)
    con.print(f"Error band of the winner: {band_pct(w)} on the step, days and cost ({band_source(w)})",
              highlight=False)
    print_command(con, "Reproduce the winner", ["estimate", *job_args, *estimate_args(w)])
    for note in notes(w.scenario):
        con.print(f"Note: {note}")


SUMMARY_AFTER = 12    # a device range with more counts than this is shown per power-of-two span of counts


def print_device_trials(con, ds: DeviceSearch, objective: str) -> None:
    """The counts of a --devices range: each one (a short range), or the best per span of counts [2^k, 2^(k+1))
    (a long one, as --device-counts node or a step gives); then the count chosen, and where more devices stop
    helping (the fastest count is not the largest that has a plan)."""
    from rich import box
    from rich.table import Table

    best = {"time": "the fastest plan", "cost": "the cheapest plan", "energy": "the plan using the least energy"}
    summary = len(ds.trials) > SUMMARY_AFTER
    title = (f"Device counts tried ({len(ds.trials)}): {best.get(objective, 'the best plan')} per span of counts"
             if summary else f"Device counts tried: {best.get(objective, 'the best plan')} at each")
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("devices", "best time to train", "cost", "meets"):
        t.add_column(col, justify="right" if col != "meets" else "left", no_wrap=col != "meets")
    for cells, chosen in (_span_rows(ds) if summary else _trial_rows(ds)):
        t.add_row(*cells, style="bold" if chosen else "")
    print_table(con, t)
    con.print(f"None meets it; shown: the closest, {ds.devices:,} devices." if ds.gate_failed
              else f"Chosen: {ds.devices:,} devices, {ds.rule}.")
    if note := more_devices_note(ds.trials):
        con.print(note)


def _trial_rows(ds: DeviceSearch) -> list[tuple[list[str], bool]]:
    rows = []
    for tr in ds.trials:
        chosen = tr.devices == ds.devices
        rows.append(([f"{tr.devices:,}", f"no plan: {_no_plan(tr.note)}" if tr.time_s is None
                      else f"{tr.time_s / 86400:.1f} days",
                      "n/a" if tr.cost_usd is None else fmt_money(tr.cost_usd),
                      ("yes" if tr.meets else f"no{': ' + tr.note if tr.note and tr.time_s is not None else ''}")
                      + (" <- chosen" if chosen else "")], chosen))
    return rows


def device_spans(trials: tuple[DeviceTrial, ...]) -> list[tuple[DeviceTrial, ...]]:
    """The trials grouped by span of counts [2^k, 2^(k+1)), in order."""
    spans: dict[int, list[DeviceTrial]] = {}
    for tr in trials:
        spans.setdefault(tr.devices.bit_length(), []).append(tr)
    return [tuple(v) for _, v in sorted(spans.items())]


def _span_rows(ds: DeviceSearch) -> list[tuple[list[str], bool]]:
    rows = []
    for span in device_spans(ds.trials):
        lo, hi = span[0].devices, span[-1].devices
        label = f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,} ({len(span)})"
        chosen = any(tr.devices == ds.devices for tr in span)
        ok = [tr for tr in span if tr.time_s is not None]
        if not ok:
            reasons = sorted({_no_plan(tr.note) for tr in span})
            rows.append(([label, f"no plan: {'; '.join(reasons)}", "n/a", "no"], chosen))
            continue
        fastest = min(ok, key=lambda tr: tr.time_s or math.inf)
        meets = sum(tr.meets for tr in span)
        rows.append(([label, f"{(fastest.time_s or 0) / 86400:.1f} days at {fastest.devices:,}",
                      "n/a" if fastest.cost_usd is None else fmt_money(fastest.cost_usd),
                      f"{meets} of {len(span)}" + (f" <- chosen: {ds.devices:,}" if chosen else "")], chosen))
    return rows


def more_devices_note(trials: tuple[DeviceTrial, ...]) -> str:
    """Where more devices stop helping: the fastest count, when a larger count with a plan is slower ('' else)."""
    ok = [tr for tr in trials if tr.time_s is not None]
    if len(ok) < 2:
        return ""
    fastest = min(ok, key=lambda tr: (tr.time_s or math.inf, tr.devices))
    larger = [tr for tr in ok if tr.devices > fastest.devices]
    if not larger:
        return ""
    worst = max(larger, key=lambda tr: tr.devices)
    return (f"More devices stop helping at {fastest.devices:,}: it trains in {(fastest.time_s or 0) / 86400:.1f} days; "
            f"{len(larger)} larger count{'s' if len(larger) > 1 else ''} up to {worst.devices:,} "
            f"({(worst.time_s or 0) / 86400:.1f} days) are no faster: use {fastest.devices:,} or fewer.")


def _no_plan(note: str) -> str:
    """Why a device count has no plan, in a few words (the full reason is in the JSON)."""
    if "no scale-out network" in note or "path is unknown" in note:
        return "needs a network the hardware data lacks"
    if "does not fit" in note:
        return "none fits in memory"
    return "no layout divides the devices and batch"


def _show(v) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    return str(v)


def _row(rank: str, e: Estimate, fmt_si, choices: tuple[str, ...] = ()) -> list[str]:
    st = e.step
    times = (st.time_s, st.compute_s, st.memory_s, st.communication_s, st.bubble_s)
    return [rank, _layout(e, choices), e.scenario.recompute, *(f"{x:.4g}" for x in times),
            f"{e.throughput.mfu:.1%}", f"{e.memory.per_device_bytes / GiB:.1f}", f"{e.training.time_days:.1f}",
            "n/a" if e.training.cost_usd is None else "$" + fmt_si(e.training.cost_usd).replace(" ", "")]
