"""Hybrid Mamba-2 / attention / MoE models (docs/model.md §16): parameters, the conservation of a
transformer written as blocks, the Mamba-2 block's physics, bad input and the config.json reader."""

from __future__ import annotations

import json
import math

import pytest

from trainest.catalog import load_model
from trainest.errors import SpecError
from trainest.estimate import estimate
from trainest.models import Mamba, model_from_mapping, model_mapping
from trainest.scenario import scenario_from_mapping
from trainest.step.flops import model_flops_per_step, ssd_flops_per_token

NANO = "nemotron-3-nano"


def test_nano_parameters_match_the_published_counts():
    """Nemotron 3 Nano: 31.6 B total, 3.6 B active with both embedding tables (tech report; the shared
    reference counts 31.58 B / 3.58 B from the dimensions)."""
    m = load_model(NANO)
    assert (m.layers, m.mamba_layers, m.attention_layers, m.moe_layers, m.dense_layers_count) == (52, 23, 6, 23, 0)
    assert m.params == pytest.approx(31.58e9, rel=1e-3)
    assert m.active_params == pytest.approx(3.58e9, rel=1e-3)


def test_latent_moe_parameters_match_the_published_counts():
    """Nemotron 3 Super: 120.6 B total, 12.7 B active (tech report; 120.67 B / 12.77 B from the dimensions):
    512 experts of 2688 on a 1024-wide latent, with the 2·h·l latent projections."""
    m = load_model("nemotron-3-super")
    assert m.expert_hidden == 1024 and m.latent_params_per_moe_layer == 2 * 4096 * 1024
    assert m.params == pytest.approx(120.67e9, rel=1e-3)
    assert m.active_params == pytest.approx(12.77e9, rel=1e-3)
    ultra = load_model("nemotron-3-ultra")            # 549.3 B / 56.1 B from the dimensions (published 550 / 55)
    assert (ultra.params, ultra.active_params) == pytest.approx((549.3e9, 56.06e9), rel=1e-3)


def test_a_latent_makes_the_experts_and_their_all_to_alls_cheaper():
    """The same model with its experts on a latent a quarter of h: fewer expert FLOPs and a smaller dispatch."""
    base = {"model": "nemotron-3-super", "hardware": "gb200", "devices": 64, "precision": "fp8", "seq_len": 8192,
            "micro_batch": 1, "global_batch": 64, "parallel": {"ep": 64, "zero": 1}}
    latent = estimate(scenario_from_mapping(base, "t"))
    data = model_mapping(load_model("nemotron-3-super"))
    data["moe"].pop("latent_size")
    data["name"] = "super without latent"
    full = estimate(scenario_from_mapping({**base, "model": data}, "t"))
    assert latent.step.time_s < full.step.time_s
    assert latent.throughput.model_flops_per_step < full.throughput.model_flops_per_step


def test_mamba_mixer_parameters_by_hand():
    """in_proj h·(2·d_in + 2GN + H), conv (k + 1)·(d_in + 2GN), 3H, the gated norm d_in, out_proj d_in·h."""
    b = Mamba(heads=64, head_dim=64, state_dim=128, groups=8, conv_kernel=4)
    h = 2688
    assert b.params(h) == h * 10304 + 5 * 6144 + 192 + 4096 + 4096 * h


def _as_blocks(model) -> dict:
    """A transformer of L layers written as a hybrid of 2L blocks: attention, dense MLP, attention, ..."""
    data = model_mapping(model)
    data.update(name=f"{model.name} as blocks", layers=2 * model.layers,
                hybrid={"pattern": "*-" * model.layers, "mamba_heads": 8, "mamba_head_dim": 64, "state_dim": 16,
                        "groups": 8})
    return data


@pytest.mark.parametrize("extra", [
    {},
    {"parallel": {"tp": 2, "pp": 2, "zero": 1}},
    {"parallel": {"tp": 4, "sequence_parallel": True, "zero": 1}, "recompute": "selective"},
    {"attention": "standard", "recompute": "none", "parallel": {"zero": 1}},
    {"precision": "fp8", "parallel": {"tp": 2, "zero": 1}},
])
def test_a_transformer_written_as_blocks_is_the_same_transformer(extra):
    """Conservation: an attention block plus a dense MLP block is a transformer layer (the same GEMMs,
    norms, collectives, kernels and saved tensors), so the same step, FLOPs and activations."""
    dense = load_model("llama3-8b")
    blocks = model_from_mapping(_as_blocks(dense), "test")
    assert blocks.params == dense.params and blocks.active_params == dense.active_params
    assert model_flops_per_step(blocks, 4096, 64) == pytest.approx(model_flops_per_step(dense, 4096, 64), rel=1e-12)
    base = {"hardware": "h100-sxm", "devices": 8, "precision": "bf16", "seq_len": 4096, "micro_batch": 1,
            "global_batch": 64, "parallel": {"zero": 1}, **extra}
    a = estimate(scenario_from_mapping({**base, "model": model_mapping(dense)}, "dense"))
    b = estimate(scenario_from_mapping({**base, "model": _as_blocks(dense)}, "blocks"))
    assert b.step.time_s == pytest.approx(a.step.time_s, rel=1e-9)
    assert b.step.compute_s == pytest.approx(a.step.compute_s, rel=1e-9)
    assert b.memory.activations_bytes == pytest.approx(a.memory.activations_bytes, rel=1e-9)


def test_scan_flops_by_hand():
    """SSD: 2·G·Q·N + H·(2·Q·P·½ + 4·N·P) per token (Nano: G 8, Q 128, N 128, H 64, P 64)."""
    m = load_model(NANO)
    assert ssd_flops_per_token(m) == 2 * 8 * 128 * 128 + 64 * (2 * 128 * 64 * 0.5 + 4 * 128 * 64)


def test_scan_bytes_by_hand_kernel_by_kernel():
    """The scan's bytes per token counted from mamba_ssm's kernels (docs/model.md §16.2), Nano (d_in 4096, G·N 1024,
    H 64, states H·P·N/Q 4096, scores G·Q 1024), 16 bit. Forward: x read by chunk_state and chunk_scan, the gate z
    read and y written gated and ungated (5 passes over d_in: Megatron-Core passes z to the scan), B and C twice
    each, the states 12 B, the scores 8 B, dt and its sum 24 B a head. Backward: 17 passes over d_in (the gate's
    backward kernel reads the output gradient, y, z and x and writes dz and the ungated gradient; the others read x
    and the output gradient with dx written), 17 passes over G·N (dB and dC as FP32 residuals), 38 B per state, 24
    per score, 96 a head: 3.3x the forward. The bugs this catches: the backward was taken as twice the forward's
    bytes, which is too few for the gradient kernels' reads; the gate's passes were counted as the norm's."""
    from trainest.scenario import job_of
    from trainest.step.hybrid import SSD_BACKWARD_PASSES, SSD_FORWARD_PASSES, ssd_bytes_per_token
    job = job_of(scenario_from_mapping(_nano(), "t"))
    forward = 2 * (5 * 4096 + 4 * 1024 + 64) + 12 * 4096 + 8 * 1024 + 24 * 64
    backward = 2 * (17 * 4096 + 17 * 1024 + 64) + 38 * 4096 + 24 * 1024 + 96 * 64
    assert ssd_bytes_per_token(job, SSD_FORWARD_PASSES) == forward
    assert ssd_bytes_per_token(job, SSD_BACKWARD_PASSES) == backward
    assert 3.3 < backward / forward < 3.4


def _mamba_elementwise(**over) -> tuple[float, float, float]:
    """(tokens, forward, backward element-wise bytes) of one Mamba-2 block of Nano on one device."""
    from trainest.scenario import job_of, layout_of
    from trainest.step.compose import layer_terms
    s = scenario_from_mapping(_nano(**over), "t")
    job, layout = job_of(s), layout_of(s)
    ops = dict(layer_terms(job, layout).mean.parts)["mamba"].lp.ops
    forward = next(o for o in ops.forward if o.name == "elementwise")
    backward = next(o for o in ops.backward if o.name == "elementwise")
    return layout.tokens(job), forward.bytes, backward.bytes


def test_the_mamba_mixer_copies_its_input_and_output_only_for_several_sequences_per_micro_batch():
    """Megatron-Core's MambaMixer transposes the input projection's output (s, b) -> (b, s) and y back with
    .contiguous(): a copy when b > 1 only (a size-1 dimension leaves the tensor contiguous). Per token and 16-bit
    element: forward one read and one write of the in_proj output (2·d_in + 2GN + H = 10304 wide for Nano) and
    of y (d_in = 4096), backward of the in_proj output's gradient. The bug this catches: the copies were not
    counted, so Nano's Blackwell runs (micro-batch 2 and 4) were charged less per token than its H100 runs
    (micro-batch 1) for the same kernels."""
    t1, f1, b1 = _mamba_elementwise()
    t2, f2, b2 = _mamba_elementwise(micro_batch=2, global_batch=128)
    assert t2 == 2 * t1
    assert f2 / t2 - f1 / t1 == pytest.approx(2 * 2 * (10304 + 4096))
    assert b2 / t2 - b1 / t1 == pytest.approx(2 * 2 * 10304)
    # split over t like the heads: half the width per rank at tp 2
    t4, f4, _ = _mamba_elementwise(micro_batch=2, global_batch=128, parallel={"tp": 2, "ep": 4, "zero": 1})
    _, f3, _ = _mamba_elementwise(parallel={"tp": 2, "ep": 4, "zero": 1})
    assert f4 / t4 - f3 / (t4 / 2) == pytest.approx(2 * 2 * (10304 + 4096) / 2)


def _nano(**over) -> dict:
    s = {"model": NANO, "hardware": "h100-sxm", "devices": 8, "precision": "fp8", "seq_len": 8192, "micro_batch": 1,
         "global_batch": 64, "parallel": {"ep": 8, "zero": 1}}
    s.update(over)
    return s


def test_the_scan_grows_with_the_state_and_the_step_with_the_sequence():
    m = load_model(NANO)
    wider = model_from_mapping({**model_mapping(m), "hybrid": {**model_mapping(m)["hybrid"], "state_dim": 256}}, "t")
    assert ssd_flops_per_token(wider) > ssd_flops_per_token(m)
    # the same tokens per micro-batch: longer sequences cost the attention blocks more, the scan per token the same
    short = estimate(scenario_from_mapping(_nano(seq_len=4096, micro_batch=2, global_batch=128), "t")).step.time_s
    long = estimate(scenario_from_mapping(_nano(), "t")).step.time_s
    assert long > short


def test_tensor_parallelism_splits_the_mamba_heads_and_groups():
    one = estimate(scenario_from_mapping(_nano(), "t"))
    two = estimate(scenario_from_mapping(_nano(parallel={"tp": 2, "ep": 4, "zero": 1}), "t"))
    assert two.memory.activations_bytes < one.memory.activations_bytes
    with pytest.raises(SpecError, match=r"tp=16 does not divide the Mamba-2 groups=8"):
        scenario_from_mapping(_nano(devices=16, parallel={"tp": 16, "ep": 1}), "t")


@pytest.mark.parametrize("over, message", [
    ({"parallel": {"cp": 2, "ep": 4}}, r"cp=2: context parallelism over .*Mamba-2 blocks is not modelled"),
    ({"recompute": "op", "framework": "olmo-core", "parallel": {"ep": 4, "zero": 3}},
     r"recompute: op is not modelled for .*hybrid blocks"),
    ({"finetune": "lora"}, r"finetune.*lora .*not modelled"),
])
def test_what_is_not_modelled_is_one_clear_error(over, message):
    with pytest.raises(SpecError, match=message):
        scenario_from_mapping(_nano(**over), "t")


@pytest.mark.parametrize("hybrid, message", [
    ({"pattern": "M*X"}, r"pattern: .* must be one character per block"),
    ({"pattern": "M*"}, r"pattern: 2 blocks but layers=3"),
    ({"pattern": "M*E"}, r"E \(MoE\) blocks need the model's moe: mapping"),
    ({"pattern": "M*-", "groups": 3}, r"groups: 3 must divide mamba_heads=8"),
])
def test_bad_hybrid_mappings_name_the_value(hybrid, message):
    data = {"layers": 3, "hidden": 512, "ffn_hidden": 2048, "heads": 8, "vocab": 1000,
            "hybrid": {"pattern": "M*-", "mamba_heads": 8, "mamba_head_dim": 64, "state_dim": 16, "groups": 2,
                       **hybrid}}
    with pytest.raises(SpecError, match=message):
        model_from_mapping(data, "m")


def test_plan_keeps_to_what_the_mamba_blocks_allow():
    from trainest.search import SearchSpace, search
    base = scenario_from_mapping(_nano(devices=16, global_batch=128), "t")
    plans = search(base, 16, SearchSpace()).plans
    assert plans and all(p.scenario.parallel.cp == 1 and 8 % p.scenario.parallel.tp == 0
                         and p.scenario.recompute != "op" for p in plans)


def test_config_json_reads_as_the_preset(tmp_path):
    config = {"architectures": ["NemotronHForCausalLM"], "num_hidden_layers": 52, "hidden_size": 2688,
              "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 131072,
              "tie_word_embeddings": False, "hybrid_override_pattern": load_model(NANO).hybrid.pattern,
              "mamba_num_heads": 64, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4,
              "mlp_hidden_act": "relu2", "n_routed_experts": 128, "num_experts_per_tok": 6,
              "moe_intermediate_size": 1856, "moe_shared_expert_intermediate_size": 3712}
    (tmp_path / "config.json").write_text(json.dumps(config))
    hf, preset = load_model(str(tmp_path / "config.json")), load_model(NANO)
    assert (hf.params, hf.hybrid, hf.moe) == (preset.params, preset.hybrid, preset.moe)
    (tmp_path / "jamba.json").write_text(json.dumps({**config, "architectures": ["JambaForCausalLM"]}))
    with pytest.raises(SpecError, match=r"JambaForCausalLM is not expressible"):
        load_model(str(tmp_path / "jamba.json"))


def test_cli_estimate_of_a_hybrid_model():
    from typer.testing import CliRunner

    from trainest.cli import app
    out = CliRunner().invoke(app, ["estimate", "--model", NANO, "--devices", "8", "--ep", "8", "--precision", "fp8",
                                   "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["inputs"]["model"]["hybrid"]["pattern"] == load_model(NANO).hybrid.pattern
    assert math.isfinite(data["step"]["time_s"]) and data["step"]["time_s"] > 0


def test_the_hybrid_warning_states_the_current_errors_on_the_nemotron_runs():
    """Every hybrid estimate says what the measured hybrid runs say of it (those with LatentMoE apart):
    a model change that moves their errors must move the words too."""
    from trainest.caveats import HYBRID_ERROR_RANGE_PCT, LATENT_MOE_ERROR_RANGE_PCT, job_warnings
    from helpers import bundled_cases

    from trainest.validate import compare
    plain, latent = [], []
    for c in bundled_cases("public"):
        m = c.scenario.model
        if m.hybrid is not None:
            (latent if m.moe is not None and m.moe.latent_size else plain).append(compare(c).error_pct)
    for errors, stated in ((plain, HYBRID_ERROR_RANGE_PCT), (latent, LATENT_MOE_ERROR_RANGE_PCT)):
        assert (len(errors), round(min(errors)), round(max(errors))) == stated
    warning = [w for w in job_warnings(scenario_from_mapping(_nano(), "t")) if "hybrid Mamba-2" in w]
    runs, low, high = HYBRID_ERROR_RANGE_PCT
    assert len(warning) == 1 and f"{runs} measured" in warning[0] and f"{low:+d} to {high:+d} %" in warning[0]
