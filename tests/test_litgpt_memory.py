"""Issue 34: what litgpt holds beyond the model's tensors (frameworks.py `holds_last_graph`,
`qlora_stable_embedding`; docs/model.md §13.3): the previous micro-batch's logits and, over a bitsandbytes-quantised
base, its quantised linears' inputs; with a quantised base, the replaced embedding and the StableEmbedding's
gradient."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from trainest.estimate import estimate
from trainest.scenario import scenario_from_mapping

QLORA = {"model": "llama2-7b", "hardware": "l4", "devices": 1, "seq_len": 512, "precision": "bf16",
         "master_weights": "none", "parallel": {"tp": 1, "pp": 1, "zero": 0}, "micro_batch": 2, "global_batch": 8,
         "recompute": "none", "attention": "flash2", "loss": "chunked",
         "finetune": {"method": "qlora", "rank": 32, "targets": "attention"}}
H, F_, V, L, HEADS_DIM = 4096, 11008, 32000, 32, 4096      # Llama 2 7B
TOKENS = 2 * 512


def est(data: dict, **changes):
    return estimate(scenario_from_mapping({**data, **changes}, "test")).memory


def test_litgpt_qlora_holds_the_last_graphs_inputs_and_two_embeddings():
    """Against the same QLoRA under the Hugging Face stack (whose Trainer frees the graph in its step): the previous
    micro-batch's quantised-linear inputs (QKV and MLP-up h, output projection a·d_h, MLP-down f, 2 B each, every
    layer), its 16-bit logits, and two V·h 16-bit embeddings (the replaced one, the StableEmbedding's gradient); and
    its RMSNorms' normalised inputs in FP32, not 16 bit (`eager_norm_fp32_weight`): 2 norms × (4 − 2) B × h."""
    hf, lit = est(QLORA, framework="hf-accelerate"), est(QLORA, framework="litgpt")
    inputs = 2.0 * TOKENS * (2 * H + HEADS_DIM + F_) * L
    logits = 2.0 * TOKENS * V
    norms = 2.0 * (4.0 - 2.0) * TOKENS * H * L
    embedding = 2.0 * V * H
    assert lit.activations_bytes - hf.activations_bytes == pytest.approx(inputs + logits + norms, rel=1e-9)
    assert lit.weights_bytes - hf.weights_bytes == pytest.approx(embedding, rel=1e-9)
    assert lit.gradients_bytes - hf.gradients_bytes == pytest.approx(embedding, rel=1e-9)
    assert lit.optimizer_bytes == hf.optimizer_bytes


def test_a_16bit_lora_under_litgpt_holds_only_the_previous_logits():
    """A 16-bit base has no bitsandbytes matmul and no StableEmbedding swap: only the previous logits stay (and
    litgpt's FP32 normalised norm inputs, 2 norms × (4 − 2) B × h per layer)."""
    lora = {**QLORA, "finetune": {"method": "lora", "rank": 32, "targets": "attention"}}
    hf, lit = est(lora, framework="hf-accelerate"), est(lora, framework="litgpt")
    norms = 2.0 * (4.0 - 2.0) * TOKENS * H * L
    assert lit.activations_bytes - hf.activations_bytes == pytest.approx(2.0 * TOKENS * V + norms, rel=1e-9)
    assert lit.weights_bytes == hf.weights_bytes and lit.gradients_bytes == hf.gradients_bytes


def test_full_recompute_leaves_no_quantised_inputs_in_the_last_graph():
    """A checkpointed layer's forward records no graph (its recompute's graph is local to its backward): under full
    recompute the previous micro-batch's quantised inputs are gone, the logits stay (and the one re-materialised
    layer's FP32 normalised norm inputs)."""
    hf = est(QLORA, framework="hf-accelerate", recompute="full")
    lit = est(QLORA, framework="litgpt", recompute="full")
    norms = 2.0 * (4.0 - 2.0) * TOKENS * H
    assert lit.activations_bytes - hf.activations_bytes == pytest.approx(2.0 * TOKENS * V + norms, rel=1e-9)


def _memory_runs():
    path = Path(__file__).resolve().parents[1] / "tools" / "memory_runs.py"
    spec = importlib.util.spec_from_file_location("memory_runs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_importer_reads_litgpt_targets_that_are_switched_off():
    """litgpt's 'query, value (lora_key/projection/mlp/head false)' adapts no MLP: `attention`, not `all` (the
    importer read the 'mlp' inside the parenthesis as on); torchtune's '... + MLP' stays `all`."""
    mr = _memory_runs()
    litgpt = {"method": "LoRA", "rank": 32, "targets": "query, value (lora_key/projection/mlp/head false)"}
    assert mr.finetune_of(litgpt, [])["targets"] == "attention"
    assert mr.finetune_of({"method": "QLoRA", "rank": 8,
                           "targets": "q_proj, v_proj, k_proj, output_proj + MLP"}, [])["targets"] == "all"


def test_importer_unties_litgpt_llama_3_2():
    """litgpt's converter copies a tied embedding into its own lm_head: a litgpt Llama 3.2 is untied."""
    mr = _memory_runs()
    m = {"name": "Llama 3.2 1B", "layers": 16, "hidden": 2048, "ffn_hidden": 8192, "heads": 32, "kv_heads": 8,
         "vocab": 128256, "mlp": "swiglu"}
    assert mr.model_of(m, [], litgpt=True)["tied_embeddings"] is False
    assert mr.model_of(m, [])["tied_embeddings"] is True


FULL = {**{k: v for k, v in QLORA.items() if k != "finetune"}, "framework": "hf-accelerate"}


def test_eager_modules_keep_fp32_norm_inputs_the_normalised_inputs_and_silu():
    """kernels eager over fused, per layer and token: 2 norms × ((4 − 2) B FP32 input + 2 B normalised input) × h,
    2 B × f (SwiGLU); no attention-output copy under flash attention (SDPA writes it token-major); every layer's
    under no recompute."""
    fused, eager = est(FULL, kernels="fused"), est(FULL, kernels="eager")
    per_layer = TOKENS * (2 * 4.0 * H + 2.0 * F_)
    # the layers' activations (the chunked loss's logits differ apart: compiled per chunk under fused kernels)
    layers = eager.activations_bytes - eager.logits_bytes - (fused.activations_bytes - fused.logits_bytes)
    assert layers == pytest.approx(L * per_layer, rel=1e-9)
    assert eager.weights_bytes == fused.weights_bytes


def test_eager_extras_under_full_recompute_are_the_one_layer_recomputed():
    """Full recompute keeps each layer's input only; the eager extras are held by the one layer re-materialised."""
    fused, eager = est(FULL, kernels="fused", recompute="full"), est(FULL, kernels="eager", recompute="full")
    per_layer = TOKENS * (2 * 4.0 * H + 2.0 * F_)
    layers = eager.activations_bytes - eager.logits_bytes - (fused.activations_bytes - fused.logits_bytes)
    assert layers == pytest.approx(per_layer, rel=1e-9)


def test_importer_takes_the_loss_torchtunes_recipe_config_builds():
    """torchtune's README rows name their recipe config: the llama3_1 8B and 70B configs build
    CEWithChunkedOutputLoss (loss chunked); 405B_qlora's torch.nn.CrossEntropyLoss, like any non-chunked torchtune
    loss, gets FP32 logits the model upcast outside the compiled loss (standard: FP32 logits and gradient). The
    importer had assumed 'compiled' (16-bit logits) for all of them."""
    mr = _memory_runs()
    rec = {"source": "torchtune README",
           "other_settings": "recipe config llama3_1/70B_lora (lora_finetune_distributed); packed; torch.compile"}
    assert mr.loss_of(rec, []) == "chunked"
    rec["other_settings"] = "recipe config llama3_1/8B_qlora_single_device; packed dataset; torch.compile"
    assert mr.loss_of(rec, []) == "chunked"
    rec["other_settings"] = "recipe config llama3_1/405B_qlora (lora_finetune_distributed); packed; torch.compile"
    assert mr.loss_of(rec, []) == "standard"      # FP32 logits upcast in the model, outside the compiled loss
    rec["other_settings"] = "packed=True, torch.compile=True, cross-entropy=standard"
    assert mr.loss_of(rec, []) == "standard"
    assert mr.loss_of({**rec, "source": "another stack"}, []) == "compiled"


def test_importer_reads_not_fused_into_backward_as_not_fused():
    """'torch.optim.AdamW (not fused into backward)' (torchtune's LoRA rows) is no optimizer-in-backward; the importer
    read the phrase 'fused into backward' inside it as one."""
    mr = _memory_runs()
    assert "optimizer_in_backward" not in mr.optimizer_of("torch.optim.AdamW (not fused into backward)", [])
    assert mr.optimizer_of("AdamW fused into backward (optimizer_in_bwd)", [])["optimizer_in_backward"] is True
    assert mr.optimizer_of("bitsandbytes PagedAdamW8bit with optimizer_in_bwd=True", [])["optimizer_in_backward"]


def test_nf4_without_double_quant_keeps_an_fp32_absmax_per_64_weights():
    """double_quant off: 0.5 + 32/64/8 B per base linear weight instead of 0.5 + 0.127/8 (the base's linear weights
    only; norms and embeddings unchanged); a 16-bit LoRA is unaffected."""
    from trainest.step.finetune import DOUBLE_QUANT_BITS_PER_PARAM
    on, off = est(QLORA, double_quant=True), est(QLORA, double_quant=False)
    linear = L * (4 * H * HEADS_DIM + 3 * H * F_)         # Llama 2 7B: q, k, v, o and gate, up, down per layer
    assert off.weights_bytes - on.weights_bytes == pytest.approx(linear * (0.5 - DOUBLE_QUANT_BITS_PER_PARAM) / 8.0,
                                                                 rel=1e-9)
    lora = {**QLORA, "finetune": {"method": "lora", "rank": 32, "targets": "attention"}}
    assert est(lora, double_quant=False).weights_bytes == est(lora).weights_bytes


@pytest.mark.parametrize("bad", ["maybe", 2, "nf4"])
def test_double_quant_takes_only_true_or_false(bad):
    from trainest.errors import SpecError
    with pytest.raises(SpecError) as err:
        scenario_from_mapping({**QLORA, "double_quant": bad}, "s")
    assert "double_quant" in str(err.value) and "\n" not in str(err.value)


def test_double_quant_is_a_job_knob_of_plan():
    from trainest.knobs import JOB_KEYS
    assert "double_quant" in JOB_KEYS


def test_importer_reads_litgpt_quantize_mode():
    mr = _memory_runs()
    assert mr.double_quant_of({"base_format": "bitsandbytes NF4 (quantize: bnb.nf4)"}) is False
    assert mr.double_quant_of({"base_format": "bitsandbytes NF4 (quantize: bnb.nf4-dq)"}) is True
    assert mr.double_quant_of({"base_format": "NF4 (torchao)"}) is None


ZERO3 = {**FULL, "devices": 4, "devices_per_node": 4, "parallel": {"tp": 1, "pp": 1, "zero": 3}, "global_batch": 8}


def test_pure_bf16_zero3_keeps_its_16bit_parameter_shard():
    """Bug: ZeRO-3 in BF16 counted no 16-bit shard (FSDP mixed precision keeps the FP32 master, counted with the
    optimizer state), also for pure BF16 (master_weights none), which has no master: its sharded parameters are the
    BF16 weights, 2 B × P / d. With the master, the weights are the two gathered layers only."""
    from trainest.scenario import job_of, layout_of
    s = scenario_from_mapping(ZERO3, "test")
    params = s.model.params
    pure, mixed = est(ZERO3), est(ZERO3, master_weights="fp32")
    assert pure.weights_bytes - mixed.weights_bytes == pytest.approx(2.0 * params / 4, rel=1e-6)
    assert job_of(s).master_weights == "none" and layout_of(s).zero == 3


def test_the_runs_that_ran_out_of_memory_are_called_does_not_fit():
    """Issue 34: memory-given.yaml's two OOM rows (litgpt's full fine-tunes of Llama 2 7B and Llama 3 8B on 4 A10G
    under FSDP) are boundary points with no measured peak: trainest must call them "does not fit" as stated, and a
    run at a quarter of their size (the same recipe, 4x fewer layers) must fit, so the verdict is the model's."""
    from helpers import read_yaml

    from trainest.validate_memory import OOM_REASON_PREFIX, oom_verdicts
    path = Path(__file__).parents[1] / "specs" / "runs" / "memory-given.yaml"
    assert oom_verdicts(path) == (("litgpt-llama-2-7b-full-4xa10g", False), ("litgpt-llama-3-8b-full-4xa10g", False))
    runs = [r for r in read_yaml(path)["runs"] if str(r.get("reason")).startswith(OOM_REASON_PREFIX)]
    for rec in runs:
        scenario = {k: v for k, v in rec.items() if k not in
                    ("id", "source", "measured", "expressible", "reason", "confidence", "notes", "assumed")}
        assert not estimate(scenario_from_mapping(scenario, rec["id"])).memory.fits, rec["id"]
        smaller = {**scenario, "model": {**scenario["model"], "layers": scenario["model"]["layers"] // 4}}
        assert estimate(scenario_from_mapping(smaller, rec["id"])).memory.fits, rec["id"]
