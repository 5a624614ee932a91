"""Issue 34: the memory inputs the measured runs of specs/runs/memory-given.yaml need: master weights and gradient
dtypes (pure 16-bit training, BF16 gradients beside an FP32 master), the optimizer fused into the backward, and the
loss's logits (docs/model.md §7.2, §7.4). Physics and behaviour, each against the default it departs from."""

from __future__ import annotations

import math

import pytest

from trainest.errors import SpecError
from trainest.estimate import estimate
from trainest.precision import grad_bytes_per_param, optimizer_bytes_per_param
from trainest.scenario import scenario_from_mapping
from trainest.step.optimizer import adam_bytes_per_param

# one device, no sharding: every parameter's state on it; two micro-batches per step, so the first one's gradients
# are alive through the second one's forward and every part counts at the peak (memory.py phase_peak)
ONE = {"model": "llama3.2-3b", "hardware": "a100-80gb-sxm", "devices": 1, "seq_len": 4096, "micro_batch": 2,
       "global_batch": 4, "recompute": "full", "framework": "hf-accelerate", "parallel": {"zero": 0}}


def est(**changes):
    return estimate(scenario_from_mapping({**ONE, **changes}, "test"))


def state_bytes(e) -> float:
    m = e.memory
    return m.weights_bytes + m.gradients_bytes + m.optimizer_bytes


def test_pure_bf16_keeps_8_bytes_per_parameter_where_mixed_precision_keeps_18():
    """No master: 2 B weights + 2 B gradients + 2·2 B AdamW moments (torch.optim's state in the parameters' dtype)
    = 8 B per parameter, against 2 + 4 + 4 + 8 = 18 with the FP32 master and FP32 gradients."""
    mixed, pure = est(), est(master_weights="none")
    params = mixed.memory.weights_bytes / 2.0
    assert state_bytes(mixed) == pytest.approx(18.0 * params, rel=1e-9)
    assert state_bytes(pure) == pytest.approx(8.0 * params, rel=1e-9)
    assert pure.memory.activations_bytes == mixed.memory.activations_bytes
    assert optimizer_bytes_per_param("bf16", "bf16", "adamw", "none") == 4.0
    assert grad_bytes_per_param("bf16", "auto", "none") == 2.0 and grad_bytes_per_param("fp16") == 2.0
    assert grad_bytes_per_param("bf16") == 4.0 and grad_bytes_per_param("fp32", "auto", "fp32") == 4.0


def test_pure_bf16_defaults_its_moments_to_bf16_and_keeps_a_given_dtype():
    s = scenario_from_mapping({**ONE, "master_weights": "none"}, "test")
    assert s.adam_moments == "bf16" and "adam_moments" in s.derived
    given = scenario_from_mapping({**ONE, "master_weights": "none", "adam_moments": "fp32"}, "test")
    assert given.adam_moments == "fp32" and "adam_moments" not in given.derived
    eight = scenario_from_mapping({**ONE, "master_weights": "none", "optimizer": "adamw-8bit"}, "test")
    assert eight.adam_moments == "fp32"          # the 8-bit optimizer states its own dtype


def test_bf16_gradients_beside_an_fp32_master_halve_the_gradients_only():
    mixed, bf16_grads = est(), est(grad_dtype="bf16")
    assert bf16_grads.memory.gradients_bytes == pytest.approx(mixed.memory.gradients_bytes / 2.0)
    assert bf16_grads.memory.optimizer_bytes == mixed.memory.optimizer_bytes
    assert bf16_grads.memory.weights_bytes == mixed.memory.weights_bytes


def test_the_optimizer_step_moves_what_its_state_and_gradients_are():
    """34 B per parameter by default; without the master its read and write (8) become a 16-bit read (2); 16-bit
    gradients save 2 B on each of their two reads; nothing moves for the precision's own gradients."""
    assert adam_bytes_per_param() == 34.0
    assert adam_bytes_per_param("fp32", "adamw", "fp32", 2.0, 2.0) == 34.0      # fp16 runs: their own gradients
    assert adam_bytes_per_param("fp32", "adamw", "fp32", 2.0, 4.0) == 30.0      # bf16 gradients, FP32 master
    assert adam_bytes_per_param("bf16", "adamw", "none", 2.0, 4.0) == 34.0 - 8.0 - 6.0 - 4.0
    assert est(master_weights="none").step.optimizer_s < est().step.optimizer_s


def test_the_optimizer_in_the_backward_holds_one_layer_or_the_output_projection():
    """Gradients freed as they are applied: at most max(one layer's, V·h) parameters' gradients live at once;
    weights, optimizer state and the step time do not change."""
    from trainest.memory import sharded_state_bytes
    from trainest.scenario import job_of, layout_of

    one = {"global_batch": 2, "master_weights": "none"}       # the optimizer in the backward runs one micro-batch
    off, on = est(**one), est(**one, optimizer_in_backward=True)
    s = scenario_from_mapping({**ONE, **one, "optimizer_in_backward": True}, "test")
    m = s.model
    largest = max(m.params_per_layer, m.vocab * m.hidden)
    grads = sharded_state_bytes(job_of(s), layout_of(s))[1]
    assert grads == pytest.approx(2.0 * largest, rel=1e-9)
    assert on.memory.gradients_bytes <= grads
    assert grads < est(master_weights="none").memory.gradients_bytes / 5
    for k in ("weights_bytes", "optimizer_bytes"):
        assert getattr(on.memory, k) == getattr(off.memory, k)
    assert on.step.time_s == off.step.time_s


@pytest.mark.parametrize("loss, per_logit", [("chunked", 3.0), ("compiled", 4.0)])
def test_the_loss_sets_the_bytes_per_logit(loss, per_logit):
    """The logits' memory: standard = the framework's (hf-accelerate: 12 B per logit), chunked 2 + 8/8, compiled
    2 + 2, fused 6 / ceil(V/h); the step time does not change."""
    standard, other = est(), est(loss=loss)
    logits = 2 * 4096 * standard_vocab()
    assert standard.memory.logits_bytes == pytest.approx(12.0 * logits, rel=1e-9)
    assert other.memory.logits_bytes == pytest.approx(per_logit * logits, rel=1e-9)
    assert other.step.time_s == standard.step.time_s


def test_a_compiled_chunked_loss_holds_the_16bit_logits_and_one_chunks_gradient():
    """Chunked cross-entropy with fused kernels (torchtune compiles each chunk's upcast and loss): 2 + 2/8 B per
    logit, no FP32 chunk; eager keeps 2 + 8/8. Only the logits move, not the step time."""
    eager, fused = est(loss="chunked", kernels="eager"), est(loss="chunked", kernels="fused")
    logits = 2 * 4096 * standard_vocab()
    assert fused.memory.logits_bytes == pytest.approx((2.0 + 2.0 / 8) * logits, rel=1e-9)
    assert eager.memory.logits_bytes == pytest.approx(3.0 * logits, rel=1e-9)
    assert fused.memory.logits_bytes < est(loss="compiled", kernels="fused").memory.logits_bytes
    assert fused.memory.weights_bytes == eager.memory.weights_bytes


def test_a_fused_linear_cross_entropy_holds_one_chunk_of_logits():
    s = scenario_from_mapping(ONE, "test")
    fused = est(loss="fused")
    chunks = math.ceil(s.model.vocab / s.model.hidden)
    assert fused.memory.logits_bytes == pytest.approx(6.0 / chunks * 2 * 4096 * s.model.vocab, rel=1e-9)


def standard_vocab() -> int:
    return scenario_from_mapping(ONE, "test").model.vocab


@pytest.mark.parametrize("changes, words", [
    ({"precision": "fp16", "grad_dtype": "bf16"}, "grad_dtype: bf16 with precision fp16"),
    ({"precision": "fp32", "grad_dtype": "bf16"}, "allowed with it: auto, fp32"),
    ({"precision": "fp32", "master_weights": "none"}, "master_weights: none is pure 16-bit training"),
    ({"optimizer_in_backward": True, "global_batch": 4}, "optimizer_in_backward: true needs one micro-batch"),
    ({"loss": "liger"}, "loss"),
    ({"master_weights": "bf16"}, "master_weights"),
])
def test_bad_memory_inputs_are_one_line_naming_the_value(changes, words):
    with pytest.raises(SpecError, match=words.replace("(", r"\(")) as exc:
        scenario_from_mapping({**ONE, **changes}, "test")
    assert "\n" not in str(exc.value)


def test_the_cli_takes_the_memory_inputs_and_refuses_a_bad_one(capsys):
    from helpers import call_entry
    args = ["estimate", "--model", "llama3.2-3b", "--devices", "1", "--global-batch", "2", "--micro-batch", "2"]
    code, out, _ = call_entry([*args, "--master-weights", "none", "--loss", "chunked", "--optimizer-in-backward",
                               "--json"], capsys)
    assert code == 0 and '"master_weights": "none"' in out and '"loss": "chunked"' in out
    code, out, err = call_entry([*args, "--loss", "liger"], capsys)
    assert code != 0 and out == "" and "chunked" in err and "Traceback" not in err
    code, out, err = call_entry([*args, "--grad-dtype", "bf16", "--precision", "fp16"], capsys)
    assert code != 0 and out == "" and len(err.strip().splitlines()) == 1


def test_list_frameworks_shows_the_memory_defaults_a_scenario_derives(capsys):
    """Each framework's memory defaults (list frameworks --json: memory_defaults), the ones a scenario that gives
    none takes and lists as derived."""
    import json

    from helpers import call_entry
    from trainest.frameworks import FRAMEWORKS
    code, out, _ = call_entry(["list", "frameworks", "--json"], capsys)
    assert code == 0
    rows = {r["name"]: r["memory_defaults"] for r in json.loads(out)["frameworks"]}
    for name, f in FRAMEWORKS.items():
        assert rows[name]["loss_bytes_per_logit"] == f.loss_bytes_per_logit
        assert (rows[name]["master_weights"], rows[name]["loss"]) == ("fp32", "standard")
    s = scenario_from_mapping(ONE, "test")
    assert {"master_weights", "grad_dtype", "optimizer_in_backward", "loss"} <= set(s.derived)
    assert dict(s.knobs)["loss"] == "standard" and dict(s.knobs)["master_weights"] == "fp32"
