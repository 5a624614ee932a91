"""The step model, one module per part of docs/model.md:

    flops.py        §1    model and hardware FLOPs
    roofline.py     §2.1  operations on the roofline, GEMM efficiency
    rates.py        §2.2  the device's rates for a job and layout (GEMM, HBM, fused attention and its
                          window, §2.4.1) and a layer's widths on it
    layer.py        §2.3  one layer's GEMMs, attention, element-wise traffic, recompute, logits
    ops.py          §2.8  the roofline of every operation (`trainest estimate --ops`)
    kernels.py      §2.9  kernels per pass, kernel floors and host dispatch
    collectives.py  §3    network tiers and ring/tree collectives
    traffic.py      §4    the traffic of each parallelism (TP, CP, PP, ZeRO-3, DP/ZeRO-1/2, HSDP)
    overlap.py      §4.6  overlap windows, exposure, contention, the no-overlap bound
    schedule.py     §5    layers per stage, the slowest stage, the pipeline bubble, DualPipe
    optimizer.py    §6    the optimizer step
    activations.py  §7.3  the activations one layer keeps for its backward
    remat.py        §7.11 MaxText's remat policies: what each keeps, re-runs and offloads to host memory
    finetune.py     §13   LoRA and QLoRA: adapters, the frozen (4-bit) base, dequantisation
    offload.py      §14   offload to host memory: host-link traffic, the CPU's Adam step
    moe.py          §15   a mixture-of-experts layer: router, grouped expert GEMMs, dispatch/combine all-to-alls
    mla.py          §15.5 multi-head latent attention: its projections, bytes and element-wise traffic
    mtp.py          §15.10 multi-token prediction on the last pipeline stage
    hybrid.py       §16   hybrid models' blocks: Mamba-2, attention, MLP and MoE blocks
    compose.py      §5.3  the step: `step_terms(job, layout) -> StepTerms` (the mean layer of §15.4)
"""

from trainest.step.compose import StepTerms, step_terms

__all__ = ["StepTerms", "step_terms"]
