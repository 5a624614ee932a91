"""The metric algebra of `trainest validate`: a run's measured metric and the step time it means, both ways, and
the FLOPs of one step under the source's own convention (FLOPS_FORMULAS). Every metric is a monotonic function of
the step time t, so one pair of functions converts both ways (`metric_from_step_time_s`, `step_time_s_from_metric`).
Split out of trainest/validate.py (which re-exports every name); `case` is a validate.Case.
"""

from __future__ import annotations

import inspect
from typing import Any

from trainest.conventions import ACTIVE_PARAM_FORMULAS, FLOPS_FORMULAS
from trainest.errors import SpecError
from trainest.units import TERA

SECONDS_PER_HOUR = 3600.0


def source_flops_per_step(case: Any) -> float:
    """F: FLOPs of one step under the source's own convention (FLOPS_FORMULAS[flops_formula]) [FLOP]."""
    m, s = case.scenario.model, case.scenario
    formula = case.measurement.flops_formula
    if formula is None:
        raise SpecError(f"run {case.id!r}: its metric needs a flops_formula")
    if m.moe is not None or m.mla is not None or m.hybrid is not None:
        return active_flops_per_step(case, formula)
    fn = FLOPS_FORMULAS[formula]
    kwargs: dict[str, Any] = dict(layers=m.layers, hidden=m.hidden, ffn_hidden=m.ffn_hidden, heads=m.heads,
                                  kv_heads=m.kv_heads, vocab=m.vocab, mlp=m.mlp, seq_len=s.seq_len,
                                  global_batch=s.global_batch)
    accepted = inspect.signature(fn).parameters
    if "head_dim" in accepted:
        kwargs["head_dim"] = m.head_dim
    if "tied_embeddings" in accepted:
        kwargs["tied_embeddings"] = m.tied_embeddings
    return float(fn(**kwargs))


def active_flops_per_step(case: Any, formula: str) -> float:
    """F of a mixture-of-experts, latent-attention or hybrid model under `formula`, one of
    ACTIVE_PARAM_FORMULAS: 6 FLOPs per active matmul parameter per token N_a (the active parameters less
    the input embedding: the routed experts a token goes to, the shared ones, MLA's projections, Mamba
    blocks), plus for palm/torchtitan the attention scores 6·L_a·a·(d_qk + d_v)·s per token (L_a layers
    with attention). The other formulas are a dense transformer's closed forms and would count each MoE
    layer as one dense MLP of ffn_hidden: a SpecError naming the ones that apply."""
    m, s = case.scenario.model, case.scenario
    kind = "a hybrid Mamba model" if m.hybrid is not None else "a mixture of experts" if m.moe is not None \
        else "a latent-attention (MLA) model"
    if formula not in ACTIVE_PARAM_FORMULAS:
        raise SpecError(f"run {case.id!r}: flops_formula {formula} counts a dense transformer's FLOPs and "
                        f"{m.name} is {kind} (its MoE layers would count as one dense MLP); allowed for it: "
                        f"{', '.join(ACTIVE_PARAM_FORMULAS)} (6 FLOPs per active parameter per token; palm and "
                        f"torchtitan add the attention scores), or give step_time_s or tokens_per_s")
    active_matmul = m.active_params - m.embedding_params + m.vocab * m.hidden     # the logit layer multiplies
    per_token = 6.0 * active_matmul
    if formula != "6n":
        per_token += 6.0 * m.attention_layers * m.heads * (m.qk_head_dim + m.v_head_dim) * s.seq_len
    return per_token * s.tokens_per_step


def metric_from_step_time_s(case: Any, step_s: float) -> float:
    """The case's metric for a step time t [s], with N devices, B·s tokens per step, C the dense peak:

    step_time_s = t;  tokens_per_s = B·s / t;  tokens_per_s_per_device = B·s / (t·N);
    tflops_per_device = F / (t·N) / 10¹²;  mfu = F / (t·N·C);  device_hours = tokens / (B·s) · t · N / 3600.
    """
    s, meas = case.scenario, case.measurement
    if meas.metric == "step_time_s":
        return step_s
    if meas.metric == "tokens_per_s":
        return s.tokens_per_step / step_s
    if meas.metric == "tokens_per_s_per_device":
        return s.tokens_per_step / (step_s * s.devices)
    if meas.metric == "tflops_per_device":
        return source_flops_per_step(case) / (step_s * s.devices) / TERA
    if meas.metric == "mfu":
        peak = s.hardware.peak("bf16" if meas.mfu_peak == "bf16" else s.precision)
        return source_flops_per_step(case) / (step_s * s.devices * peak)
    if meas.tokens is None:
        raise SpecError(f"run {case.id!r}: device_hours needs the tokens trained")
    return meas.tokens / s.tokens_per_step * step_s * s.devices / SECONDS_PER_HOUR


def step_time_s_from_metric(case: Any, value: float | None = None) -> float:
    """The inverse of `metric_from_step_time_s`: the step time [s] that gives `value` (default: the
    measured value). Every metric is t or a constant over t, so the inverse is closed-form."""
    value = case.measurement.value if value is None else value
    at_one_second = metric_from_step_time_s(case, 1.0)
    if case.measurement.metric in ("step_time_s", "device_hours"):
        return value / at_one_second           # metric = k·t
    return at_one_second / value               # metric = k/t
