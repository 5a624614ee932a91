"""When a LoRA or QLoRA is slower than the full fine-tune at the same layout, and why (docs/model.md §13.6).

A frozen base saves the weight-gradient GEMMs (a third of the GEMM FLOPs), the gradients and the
optimizer step of the base; the adapters add, per adapted matrix and layer pass, two thin GEMMs
forward and four backward (N or K = r: memory-bound, each reading the layer's input or output again),
the merge of their output, their kernel launches and, for a quantised base, one dequantisation per
pass. Where the step is launch-bound (small per-device work: the host's time per kernel is longer
than the kernels) or memory-bound (a device with little bandwidth per FLOP/s, eager merges), the
added launches or traffic can outweigh the saved FLOPs: the adapted step is slower than the full
fine-tune, which is physics, not an error, and the estimate says so (issue 32 item 4).
"""

from __future__ import annotations

from trainest.estimate import Estimate, estimate
from trainest.record import replace

SLOWER_REL = 1e-9       # floating-point slack: "slower" means beyond rounding


def full_fine_tune(e: Estimate) -> Estimate | None:
    """The full fine-tune of the same job at the same layout (None for a full fine-tune itself)."""
    s = e.scenario
    if not s.finetune.frozen:
        return None
    full = replace(s, finetune=replace(s.finetune, method="full", base_bits=16))
    return estimate(full)


def _reason(adapted: Estimate, full: Estimate) -> str:
    """What the adapted step spends more time on than the full fine-tune, the largest first."""
    a, f = adapted.step, full.step
    grown = {"overhead": a.overhead_s - f.overhead_s, "memory": a.memory_s - f.memory_s,
             "compute": a.compute_s - f.compute_s, "communication": a.communication_s - f.communication_s}
    term = max(grown, key=lambda k: grown[k])
    method = adapted.scenario.finetune.method
    words = {
        "overhead": "the adapters' kernel launches (two thin GEMMs forward and four backward per adapted matrix"
                    + (", and per local expert where the framework launches its experts one by one"
                       if adapted.scenario.model.moe is not None else "")
                    + ") keep the host longer than the kernels take: the step is launch-bound",
        "memory": "the adapters' thin GEMMs and the merge of their outputs"
                  + (" and the dequantisation of the 4-bit base every pass" if method == "qlora" else "")
                  + " move more memory than the weight-gradient GEMMs they save take: the step is memory-bound",
        "compute": "the adapters' and the re-run forward's FLOPs outweigh the weight gradients saved",
        "communication": "the adapters' collectives are exposed longer than the base's gradient reduction was",
    }
    return f"{words[term]} (+{grown[term]:.3g} s of {term} per step)"


def slower_than_full_warning(e: Estimate) -> str | None:
    """The warning when a LoRA/QLoRA estimate's step is slower than the full fine-tune's at the same
    layout, with the term that grew most; None otherwise (and for a full fine-tune)."""
    full = full_fine_tune(e)
    if full is None or e.step.time_s <= full.step.time_s * (1 + SLOWER_REL):
        return None
    method = e.scenario.finetune.method
    return (f"{method} at this layout: {e.step.time_s:.4g} s per step, slower than the full fine-tune's "
            f"{full.step.time_s:.4g} s: {_reason(e, full)}; here a {method} saves memory (no gradients or optimizer "
            f"state for the base), not time (docs/model.md §13.6)")
