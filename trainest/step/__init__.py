"""The step model, one module per part of docs/model.md:

    flops.py        §1    model and hardware FLOPs
    roofline.py     §2.1  operations on the roofline, GEMM efficiency
    layer.py        §2.3  one layer's GEMMs, attention, element-wise traffic, recompute, logits
    collectives.py  §3    network tiers and ring/tree collectives
    traffic.py      §4    the traffic of each parallelism (TP, CP, PP, ZeRO-3, DP/ZeRO-1/2, HSDP)
    overlap.py      §4.6  overlap windows, exposure, contention, the no-overlap bound
    schedule.py     §5    layers per stage, the slowest stage, the pipeline bubble
    optimizer.py    §6    the optimizer step
    moe.py          §13   a mixture-of-experts layer: router, grouped expert GEMMs, dispatch/combine all-to-alls
    mla.py          §13.5 multi-head latent attention: its projections, bytes and element-wise traffic
    compose.py      §5.3  the step: `step_terms(job, layout) -> StepTerms` (the mean layer of §13.4)
"""

from trainest.step.compose import StepTerms, step_terms

__all__ = ["StepTerms", "step_terms"]
