"""The scenario as a mapping again (the `inputs` echo of `--json`, loadable with --config), and the step
model's view of it: `job_of` (the job) and `layout_of` (the `Layout`, which derives edp and the shard group)."""

from __future__ import annotations

import math
from typing import Any

from trainest.catalog import (
    Hardware,
    hardware_reference,
    model_mapping,
)
from trainest.choices import (
    FINETUNE_CODES,
    OFFLOAD_CODES,
    RECOMPUTE_CODES,
)
from trainest.layout import Job, Layout, recompute_share
from trainest.scenario.records import FineTune, Scenario


def scenario_mapping(s: Scenario) -> dict[str, Any]:
    """The resolved scenario as a plain mapping (the `inputs` echo in JSON; loadable again)."""
    m = s.model
    model: dict[str, Any] = {"name": m.name, "layers": m.layers, "hidden": m.hidden, "ffn_hidden": m.ffn_hidden,
                             "heads": m.heads, "kv_heads": m.kv_heads, "head_dim": m.head_dim, "vocab": m.vocab,
                             "mlp": m.mlp, "seq_len": m.seq_len,
                             "tied_embeddings": m.tied_embeddings, "dropout": m.dropout, "positional": m.positional,
                             "params": m.params, "active_params": m.active_params}
    # the mixture-of-experts, latent-attention, hybrid, MTP and attention-window blocks as the model schema writes
    # them (loadable again)
    blocks = ("moe", "mla", "hybrid", "mtp", "attention_window")
    model.update({k: v for k, v in model_mapping(m).items() if k in blocks})
    return {
        "model": model,
        "seq_len": s.seq_len,
        "hardware": hardware_reference(s.hardware),   # a user's file by its path: a reload uses that profile
        "devices": s.devices,
        "devices_per_node": s.devices_per_node,
        **dict(s.host),        # the host figures given; those in effect are in the output's hardware.host
        "precision": s.precision,
        "parallel": {"tp": s.parallel.tp, "pp": s.parallel.pp, "dp": s.parallel.dp, "cp": s.parallel.cp,
                     "vpp": s.parallel.vpp, "zero": s.parallel.zero,
                     "sequence_parallel": s.parallel.sequence_parallel, "tp_overlap": s.parallel.tp_overlap,
                     "dp_shard": int(layout_of(s).shard), "pipeline_split": s.parallel.pipeline_split,
                     "dp_collectives": s.parallel.dp_collectives, "dp_overlap": s.parallel.dp_overlap,
                     "ep": s.parallel.ep, "etp": s.parallel.etp, "moe_overlap": s.parallel.moe_overlap,
                     "pipeline_schedule": s.parallel.pipeline_schedule,
                     "pipeline_layout": s.parallel.pipeline_layout},
        "micro_batch": s.micro_batch,
        "global_batch": s.global_batch,
        "micro_batches": s.micro_batches,
        "recompute": s.recompute,
        "recompute_modules": list(s.recompute_modules),
        "attention": s.attention,
        "packed_length": s.packed_length,
        "framework": s.framework,
        "kernels": s.kernels,
        **dict(s.knobs),
        "adam_moments": s.adam_moments,
        "optimizer": s.optimizer,
        "finetune": finetune_mapping(s.finetune),
        "offload": s.offload,
        "tokens": s.tokens,
        "price_per_hour": s.price_usd_per_hour,
        "pue": s.pue,
        "grid_gco2_per_kwh": s.grid_gco2_per_kwh,
        "memory_headroom": s.memory_headroom,
        "derived": list(s.derived),
    }


def finetune_mapping(ft: FineTune) -> dict[str, Any]:
    """The `finetune:` echo: the method, and for LoRA/QLoRA its adapters and base."""
    if not ft.frozen:
        return {"method": ft.method}
    return {"method": ft.method, "rank": ft.rank, "alpha": ft.scale, "targets": ft.targets, "base_bits": ft.base_bits}



def lora_base_bits(ft: FineTune) -> int:
    """The bits of the frozen base a LoRA plan of this job stores: the job's own 16 or 8 for a LoRA, 16
    otherwise (a QLoRA job's base is 4-bit only under QLoRA; the step model takes QLoRA's NF4 from the
    plan's method, `Layout.qlora`, so that a search over methods scores each with its own base)."""
    return ft.base_bits if ft.method == "lora" else 16


def job_of(s: Scenario, hardware: Hardware | None = None) -> Job:
    """The job of a scenario (on `hardware` instead of its own, e.g. with trial efficiencies)."""
    ft = s.finetune
    return Job(model=s.model, hardware=hardware or s.hardware, precision=s.precision, attention=s.attention,
               kernels=s.kernels, **dict(s.knobs),
               seq_len=float(s.seq_len), global_batch=float(s.global_batch), devices_per_node=s.devices_per_node,
               framework=s.framework, lora_rank=float(ft.rank), lora_targets=ft.targets,
               base_bits=float(lora_base_bits(ft)), packed_length=float(s.packed_length or 0),
               adam_moments=s.adam_moments, optimizer=s.optimizer,
               recompute_modules=s.recompute_modules,
               # one device has no group to place; and a search's job (devices 1) is given its N by the grid
               devices=float(s.devices) if s.devices > 1 else math.inf)


def layout_of(s: Scenario) -> Layout:
    """The layout of a scenario, as floats."""
    p = s.parallel
    return Layout(tp=float(p.tp), pp=float(p.pp), dp=float(p.dp), cp=float(p.cp), vpp=float(p.vpp),
                  micro_batch=float(s.micro_batch), zero=float(p.zero), sp=1.0 if p.sequence_parallel else 0.0,
                  recompute=float(RECOMPUTE_CODES[s.recompute]), tp_overlap=1.0 if p.tp_overlap else 0.0,
                  dp_shard=float(p.dp_shard) if p.dp_shard else None, pipeline_split=p.pipeline_split,
                  dp_collectives=p.dp_collectives,
                  dp_overlap=1.0 if p.dp_overlap else 0.0,
                  finetune=float(FINETUNE_CODES[s.finetune.method]), offload=float(OFFLOAD_CODES[s.offload]),
                  ep=float(p.ep), etp=float(p.etp), moe_overlap=p.moe_overlap, pipeline_schedule=p.pipeline_schedule,
                  rank_layers=p.rank_layers,
                  recompute_share=recompute_share(s.model.layers, p.pp, p.vpp, s.knob("recompute_layers")))
