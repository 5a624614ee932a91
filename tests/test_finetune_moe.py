"""LoRA/QLoRA of mixture-of-experts models (trainest/step/finetune.py, docs/model.md §13.5): every routed
expert has its own adapters (÷ e·t_e on a device), the router none; a frozen expert has no weight
gradient; the adapters' parameter, FLOP, memory and kernel counts follow the experts a token and a
device see."""

from __future__ import annotations

import pytest

from trainest.catalog import load_model
from trainest.estimate import estimate, estimate_ops
from trainest.scenario import job_of, layout_of, scenario_from_mapping
from trainest.step.finetune import (
    adapter_flops_per_token,
    expert_adapter_params_per_layer,
    layer_adapter_params,
    trainable_params,
)
from trainest.step.kernels import adapter_kernels

MIXTRAL = load_model("mixtral-8x7b")
NODE = {"hardware": "h100-sxm", "devices": 8, "seq_len": 4096, "global_batch": 32}


def scenario(**m):
    return scenario_from_mapping({"model": "mixtral-8x7b", **NODE, **m}, "test")


def job_layout(**m):
    s = scenario(**m)
    return job_of(s), layout_of(s)


def mixtral_adapters(r: int = 16) -> tuple[int, int]:
    """(attention, one expert) adapter parameters of one Mixtral layer, one adapter per projection
    (PEFT: q, k, v, o; w1, w3, w2 as gate, up, down)."""
    h, f, q, kv = MIXTRAL.hidden, MIXTRAL.moe.expert_ffn_hidden, MIXTRAL.heads * MIXTRAL.head_dim, \
        MIXTRAL.kv_heads * MIXTRAL.head_dim
    return r * ((h + q) + 2 * (h + kv) + (q + h)), r * 3 * (h + f)


def test_every_routed_expert_has_its_own_adapters_and_the_router_none():
    """Whole model, PEFT granularity: L·(attention + E·one expert's); no router adapter."""
    job, layout = job_layout(framework="hf-accelerate", finetune={"method": "lora", "rank": 16})
    attention, expert = mixtral_adapters()
    want = MIXTRAL.layers * (attention + MIXTRAL.moe.experts * expert)
    assert trainable_params(job, layout) == pytest.approx(want)
    assert estimate(scenario(framework="hf-accelerate", finetune="lora")).training.trainable_params == \
        pytest.approx(want)


def test_expert_parallelism_divides_the_expert_adapters_and_conserves_them():
    """e ranks hold E/e experts' adapters each: e × the local count is the whole layer's."""
    job, layout = job_layout(framework="hf-accelerate", finetune="lora", parallel={"ep": 1})
    whole = expert_adapter_params_per_layer(job, layout)
    for ep in (2, 4, 8):
        job, layout = job_layout(framework="hf-accelerate", finetune="lora", parallel={"ep": ep})
        assert ep * expert_adapter_params_per_layer(job, layout) == pytest.approx(whole)
        assert layer_adapter_params(job, layout, "moe")[0] == pytest.approx(mixtral_adapters()[0])


def test_adapter_flops_count_the_k_experts_a_token_goes_to_not_all_e():
    job, layout = job_layout(framework="hf-accelerate", finetune="lora")
    attention, expert = mixtral_adapters()
    assert adapter_flops_per_token(job, layout) == pytest.approx(2 * (attention + MIXTRAL.moe.top_k * expert))


def test_frozen_experts_run_no_weight_gradient_and_their_adapters_run_as_grouped_gemms():
    full, _ = estimate_ops(scenario(parallel={"ep": 8}))
    lora, _ = estimate_ops(scenario(parallel={"ep": 8}, finetune="lora"))
    full_names = {(o.name, o.phase) for o in full}
    lora_ops = {(o.name, o.phase): o for o in lora}
    for gemm in ("experts_up", "experts_down", "router", "qkv"):
        assert (f"{gemm}.wgrad", "backward") in full_names
        assert (f"{gemm}.wgrad", "backward") not in lora_ops
        assert (f"{gemm}.dgrad", "backward") in lora_ops
    assert ("experts_up.lora_a", "forward") in lora_ops and ("experts_down.lora_b", "backward") in lora_ops


def test_lora_and_qlora_shrink_the_state_and_qlora_the_stored_experts():
    full, lora, qlora = (estimate(scenario(parallel={"ep": 8, "zero": 0}, finetune=ft)).memory
                         for ft in ("full", "lora", "qlora"))
    assert lora.gradients_bytes < full.gradients_bytes / 50 and lora.optimizer_bytes < full.optimizer_bytes / 50
    assert qlora.weights_bytes < 0.4 * lora.weights_bytes < lora.weights_bytes <= full.weights_bytes * 1.05


def test_frozen_expert_weights_follow_expert_parallelism():
    """The frozen experts are stored ÷ e on a device: more ep, fewer expert bytes; the adapters' state too."""
    weights = [estimate(scenario(parallel={"ep": ep, "zero": 0}, finetune="lora")).memory.weights_bytes
               for ep in (1, 2, 4, 8)]
    assert weights == sorted(weights, reverse=True)
    expert_bytes = MIXTRAL.expert_params * 2.0
    assert weights[0] - weights[3] == pytest.approx(expert_bytes * (1 - 1 / 8), rel=0.02)


def test_a_python_expert_loop_launches_every_local_experts_adapters():
    """Per layer pass: a grouped framework launches each expert adapter's GEMMs once; a Python loop
    over the experts (PEFT on transformers' MoE block) once per local expert: E/e times as many."""
    job, layout = job_layout(framework="hf-accelerate", finetune="lora", parallel={"ep": 2})
    looped = adapter_kernels(job, layout, "moe")
    grouped = adapter_kernels(job._replace(framework="torchtitan"), layout, "moe")
    attention = adapter_kernels(job._replace(lora_targets="attention"), layout, "moe")
    local = MIXTRAL.moe.experts / 2
    assert (looped[0] - attention[0]) == pytest.approx(local * (grouped[0] - attention[0]))


def test_moe_lora_is_flagged_as_unvalidated():
    from trainest.caveats import prior_warnings
    assert any("mixture-of-experts model" in w and "no measured" in w
               for w in prior_warnings(scenario(finetune="lora")))
    assert not any("mixture-of-experts model:" in w for w in prior_warnings(scenario()))


def test_plan_searches_expert_parallelism_for_a_moe_lora_and_its_pick_reproduces():
    """The plan search keeps the adapters and searches ep; its best plan re-estimated gives its step time."""
    from trainest.search import job_scenario, search
    base = job_scenario({"model": "mixtral-8x7b", "hardware": "h100-sxm", "seq_len": 4096, "global_batch": 32,
                         "finetune": "lora"})
    result = search(base, 8)
    eps = {e.scenario.parallel.ep for e in result.plans}
    best = result.plans[0]
    assert best.scenario.finetune.method == "lora" and eps - {1}
    assert estimate(best.scenario).step.time_s == pytest.approx(best.step.time_s, rel=1e-6)


@pytest.mark.parametrize("framework", ["megatron-core", "hf-accelerate"])
def test_frozen_experts_launch_no_weight_gradient_gemms(framework):
    """A frozen expert's backward launches its data gradients only: per local expert, the host loop's
    backward loses one launch per expert GEMM (EXPERT_GEMM_LAUNCHES; a Python loop: its k_f matrices)."""
    from trainest.step.moe import EXPERT_GEMM_LAUNCHES, expert_pass_launches
    job, layout = job_layout(framework=framework, parallel={"ep": 8})
    fwd_full, bwd_full = expert_pass_launches(job, layout)
    job, layout = job_layout(framework=framework, parallel={"ep": 8}, finetune="lora")
    fwd_lora, bwd_lora = expert_pass_launches(job, layout)
    wgrads = EXPERT_GEMM_LAUNCHES if framework == "megatron-core" else MIXTRAL.mlp_matrices
    assert fwd_lora == pytest.approx(fwd_full)
    assert bwd_full - bwd_lora == pytest.approx(MIXTRAL.moe.experts / 8 * wgrads)


def test_dualpipe_devices_hold_two_stages_of_adapters_and_frozen_weights():
    """DualPipe: each device holds two stages (schedule.py: dualpipe_copies), so twice the adapters'
    gradients and Adam state and, with a quantised base, twice the stored base (the dequantised copy once).
    An 8-bit LoRA: Megatron's DualPipe has no QLoRA (a QLoRA runs under the Hugging Face stack)."""
    from trainest.memory import sharded_state_bytes
    from trainest.step.finetune import dequant_workspace_bytes
    state = {}
    for schedule in ("1f1b", "dualpipe"):
        s = scenario_from_mapping({"model": "deepseek-v3", "hardware": "h100-sxm", "devices": 64,
                                   "finetune": {"method": "lora", "base_bits": 8},
                                   "parallel": {"pp": 4, "ep": 8, "zero": 1, "pipeline_split": "balanced",
                                                "pipeline_schedule": schedule}}, "test")
        job, layout = job_of(s), layout_of(s)
        state[schedule] = sharded_state_bytes(job, layout)
    workspace = dequant_workspace_bytes(job, layout)
    assert state["dualpipe"][0] - workspace == pytest.approx(2.0 * (state["1f1b"][0] - workspace))
    assert state["dualpipe"][1] == pytest.approx(2.0 * state["1f1b"][1])
    assert state["dualpipe"][2] == pytest.approx(2.0 * state["1f1b"][2])


@pytest.mark.parametrize("tp", [1, 2])
def test_qlora_dequantised_copy_of_mla_is_its_widest_real_matrix(tp):
    """MLA has no fused QKV: DeepSeek-V3's widest quantised matrix is a dense layer's MLP matrix (7168 ×
    18432 ÷ t; its output projection is 128·128 × 7168 ÷ t), not h·(a + 2g)·d_h."""
    from trainest.step.finetune import dequant_workspace_bytes
    s = scenario_from_mapping({"model": "deepseek-v3", "hardware": "h100-sxm", "devices": 8, "finetune": "qlora",
                               "parallel": {"tp": tp, "ep": 8 // tp}}, "test")
    job, layout = job_of(s), layout_of(s)
    assert dequant_workspace_bytes(job, layout) == pytest.approx(2.0 * 7168 * 18432 / tp)


def test_attention_only_lora_of_a_moe_model_does_not_claim_expert_adapters():
    """--lora-targets attention leaves the routed experts unadapted: the warning says so, and still that
    no measured MoE fine-tuning run checks it."""
    from trainest.caveats import prior_warnings
    warnings = [w for w in prior_warnings(scenario(finetune={"method": "lora", "targets": "attention"}))
                if "mixture-of-experts model" in w]
    assert len(warnings) == 1 and "no measured" in warnings[0]
    assert "every routed expert gets its own adapters" not in warnings[0]
