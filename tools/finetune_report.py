#!/usr/bin/env python3
"""The fine-tuning section of docs/validation.md: trainest on the LoRA/QLoRA runs of specs/runs (set
`finetune`), next to the full fine-tunes (SFT) the same sources measured, and the fine-tuning runs
trainest cannot express yet, with the reasons.

    python tools/finetune_report.py            # print the section (markdown)
    python tools/finetune_report.py --write    # replace the section in docs/validation.md

tools/fit_defaults.py writes the same section when it regenerates docs/validation.md
(`markdown_report`). No efficiency is fitted to these runs: they test the fine-tuning physics out
of sample (docs/model.md §13).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trainest.validate import compare, load_runs, step_error_pct  # noqa: E402

SET = "finetune"
DOC = ROOT / "docs" / "validation.md"
HEADING = "## Fine-tuning runs (set finetune)"
NEXT_HEADING = "## Per run"


def _measure(value: float, unit: str) -> str:
    """A measured or predicted metric with its unit: seconds to 3 significant digits, a rate whole."""
    return f"{value:.3g} {unit}" if unit in ("s", "h", "fraction") else f"{value:,.0f} {unit}"


def _layout(s) -> str:
    p = s.parallel
    return f"{s.devices}× t{p.tp} p{p.pp} d{p.dp}" + (f" v{p.vpp}" if p.vpp > 1 else "") + f", b{s.micro_batch} " \
        f"B{s.global_batch}, s {s.seq_len}, {s.precision}"


def markdown_report(hardware_by_name: dict | None = None) -> str:
    """The section's body: the compared runs, their summary, the SFT twins, the ones not expressible
    (on `hardware_by_name` where given: tools/fit_defaults.py passes the efficiencies it just fitted)."""
    loaded = load_runs(run_set=SET)
    rows = ["| run | hardware | method | layout | measured | predicted | error % (of the metric) |",
            "|---|---|---|---|---:|---:|---:|"]
    errors, steps = [], []
    for case in loaded.cases:
        r = _compare(case, hardware_by_name)
        ft = case.scenario.finetune
        errors.append(r.error_pct)
        steps.append(step_error_pct(r))
        rows.append(f"| {case.id} | {r.hardware} | {ft.method} r{ft.rank} {ft.targets} | {_layout(case.scenario)} "
                    f"| {_measure(r.measured, r.unit)} | {_measure(r.predicted, r.unit)} | {r.error_pct:+.1f} |")
    summary = (f"{len(errors)} runs: MAPE {statistics.fmean(abs(e) for e in errors):.1f} %, mean step error "
               f"{statistics.fmean(steps):+.1f} % (negative: the step predicted too fast)"
               if errors else "no runs")
    twins = ["| full fine-tune (SFT) run, same sources | hardware | error % |", "|---|---|---:|"]
    for case in load_runs(run_set="public").cases:
        if "SFT" in case.id:
            twins.append(f"| {case.id} | {case.scenario.hardware.name} | "
                         f"{_compare(case, hardware_by_name).error_pct:+.1f} |")
    skipped = ["| run | why not expressible |", "|---|---|"] + [f"| {n.id} | {n.reason} |"
                                                                 for n in loaded.not_expressible]
    return "\n".join([*rows, "", summary + ".", "", *twins, "", *pairs_markdown(loaded.cases, hardware_by_name), "",
                      *skipped])


def _compare(case, hardware_by_name: dict | None):
    """The run compared on `hardware_by_name`'s entry for its hardware (the just-fitted efficiencies of
    tools/fit_defaults.py), else on the hardware its scenario loaded."""
    hw = (hardware_by_name or {}).get(case.scenario.hardware.name)
    return compare(case) if hw is None else compare(case, hw)


def pairs_markdown(lora_cases, hardware_by_name: dict | None = None) -> list[str]:
    """A LoRA run and the full fine-tune of the same model by the same source on the same hardware and
    precision: the LoRA's step per token per device over the full fine-tune's, measured and predicted."""
    sft = {c.id: c for c in load_runs(run_set="public").cases if "SFT" in c.id}
    out = ["| LoRA run | full fine-tune run | layouts (LoRA / full) | LoRA/full per token per device: measured | "
           "predicted |", "|---|---|---|---:|---:|"]
    for case in lora_cases:
        twin = next((c for c in sft.values() if c.id.split("-SFT-")[0] == case.id.split("-LoRA-")[0]
                     and c.id.split("-SFT-")[1].split("-")[0:-2] == case.id.split("-LoRA-")[1].split("-")[0:-2]),
                    None)
        if twin is None:
            continue
        lo, fu = _compare(case, hardware_by_name), _compare(twin, hardware_by_name)
        n_lo, n_fu = case.scenario.devices, twin.scenario.devices
        measured = (fu.measured / n_fu) / (lo.measured / n_lo)
        predicted = (fu.predicted / n_fu) / (lo.predicted / n_lo)
        out.append(f"| {case.id} | {twin.id} | {_layout(case.scenario).split(',')[0]} / "
                   f"{_layout(twin.scenario).split(',')[0]} | {measured:.3f} | {predicted:.3f} |")
    return out


INTRO = f"""{HEADING}

The LoRA/QLoRA records (`set: finetune` on each record, so that the public accuracy gates and the fit
of the shipped efficiencies keep out of them: nothing is fitted to them) are predicted with the
shipped efficiencies and the fine-tuning model of docs/model.md §13. Each record's notes say how its
method, rank and targets were taken from the source's recipe (`tools/import_runs.py: LORA_BY_SOURCE`).
`trainest validate --set finetune` prints the same; `python tools/finetune_report.py` this section.

"""

OUTRO = """
Reading it. The NeMo 24.07 runs fine-tune on SQuAD v1.1 packed into 4096-token sequences: each example
attends only to itself, so their attention is about L/s = 200/4096 of a full causal mask
(`packed_length`, docs/model.md §2.4; 200 tokens is an estimate of one SQuAD example, not a
measurement). With that input their LoRA rows moved from −22.7 / −23.6 / −11.9 % (7B, 13B, 70B) to
−3.3 / −6.7 / +1.2 %; their full fine-tunes from −5.8 / −26.3 / −5.0 % to +12.9 / −13.8 / +5.0 %. The
7B pair, the only one in the same layout, still disagrees on the ratio (LoRA/full per token and device
0.79 predicted, 0.68 measured): the 7B full fine-tune is now predicted too fast, so what its step has
beyond its LoRA twin (the weight gradients, their data-parallel reduction, the optimizer) is cheaper
in trainest than measured; a serial FP32 main_grad accumulation in every weight-gradient GEMM (8 B per
weight and micro-batch) would be such a cost, but charged to every Megatron run it made the H100 fit
and holdout worse, so it is not in the model. The Megatron-Bridge records do not say whether their
data were packed; they are left unpacked, and their LoRA rows stay −6 … −17 % (the H100 one −17 %,
its ratio 0.78 predicted against 0.62 measured).
"""


def section(hardware_by_name: dict | None = None) -> str:
    return INTRO + markdown_report(hardware_by_name) + "\n" + OUTRO


def write() -> None:
    text = DOC.read_text(encoding="utf-8")
    new = section()
    if HEADING in text:
        start = text.index(HEADING)
        end = text.index(NEXT_HEADING, start)
        text = text[:start] + new + "\n" + text[end:]
    else:
        end = text.index(NEXT_HEADING)
        text = text[:end] + new + "\n" + text[end:]
    DOC.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    if "--write" in sys.argv[1:]:
        write()
        print(f"wrote the fine-tuning section of {DOC}")
    else:
        print(section())
