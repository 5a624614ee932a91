"""Advice on a result: what would make a layout that does not fit in memory fit."""

from __future__ import annotations

from dataclasses import replace

from trainest.errors import SpecError
from trainest.estimate import TIGHT_FIT_FRACTION, Estimate, estimate
from trainest.scenario import Scenario
from trainest.units import GiB


def fit_suggestions(s: Scenario, e: Estimate) -> str:
    """A one-line 'does not fit' warning naming single changes that would make it fit."""
    p = s.parallel
    tries: list[tuple[str, Scenario]] = []
    if s.recompute != "full":
        tries.append(("--recompute full", replace(s, recompute="full")))
    for z in range(p.zero + 1, 4):
        tries.append((f"--zero {z}", replace(s, parallel=replace(p, zero=z))))
    if p.tp > 1 and not p.sequence_parallel:
        tries.append(("--sequence-parallel", replace(s, parallel=replace(p, sequence_parallel=True))))
    if s.micro_batch > 1:
        tries.append(("--micro-batch 1", replace(s, micro_batch=1, global_batch=s.global_batch)))
    for knob in ("tp", "pp"):
        k = getattr(p, knob) * 2
        if p.dp % 2 == 0 and ((knob == "tp" and s.model.heads % k == 0) or (knob == "pp" and s.model.layers % k == 0)):
            new = replace(p, **{knob: k}, dp=p.dp // 2)
            if s.global_batch % (new.dp * s.micro_batch) == 0:
                tries.append((f"--{knob} {k}", replace(s, parallel=new)))
    fixes = []
    for label, alt in tries:
        try:
            if estimate(alt).memory.fits:
                fixes.append(label)
        except SpecError:   # an alternative that is itself invalid is simply not suggested
            continue
    need = e.memory.per_device_bytes / GiB
    have = e.memory.capacity_bytes / GiB
    hint = ("; would fit with: " + ", ".join(fixes)) if fixes else \
        "; no single change fits: combine sharding (--zero 3, --tp, --pp) with --recompute full, or use more devices"
    over = need / have - 1.0
    margin = (f" (over by {100 * over:.0f} %, within the memory model's error on published runs: it may fit; "
              f"docs/validation.md)") if over <= TIGHT_FIT_FRACTION else ""
    return f"does not fit: needs {need:.1f} GiB per device, {s.hardware.name} has {have:.1f} GiB{margin}{hint}"
