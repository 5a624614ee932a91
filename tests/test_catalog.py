"""trainest.catalog: lookups with "did you mean", unit conversion to SI, model shapes and parameter counts
(dense, mixture of experts, multi-head latent attention), and their validation."""

from __future__ import annotations

import pytest

from trainest.catalog import (MLA, NOT_EXPRESSIBLE_MODELS, MoE, hardware_from_mapping, hardware_names, load_hardware,
                              load_model, model_from_mapping, model_mapping, model_names, unmodelled_features,
                              with_efficiency, with_shape)
from trainest.errors import SpecError

TINY = {"layers": 2, "hidden": 64, "ffn_hidden": 256, "heads": 4, "vocab": 100}


# ------------------------------------------------------------------------------------------ lookups

def test_hardware_lookup_converts_human_units_to_si():
    hw = load_hardware("a100-80gb-sxm")
    assert hw.peak("bf16") == 312e12                   # TFLOP/s -> FLOP/s
    assert hw.memory_bytes == 80e9                      # GB -> B
    assert hw.memory_bytes_per_s == 2039e9              # GB/s -> B/s
    assert hw.scale_up_bytes_per_s == 300e9
    assert hw.scale_out_bytes_per_s == 200e9 / 8        # Gbit/s -> B/s
    assert hw.scale_up_latency_s == pytest.approx(3e-6)  # us -> s


def test_lookup_is_case_insensitive():
    assert load_hardware("A100-80GB-SXM").name == "a100-80gb-sxm"
    assert load_model("GPT3-175B").name == "gpt3-175b"


def test_unknown_hardware_suggests_the_closest_name():
    with pytest.raises(SpecError, match=r"unknown hardware 'a100-80gb-sxn' \(did you mean 'a100-80gb-sxm'"):
        load_hardware("a100-80gb-sxn")


@pytest.mark.parametrize(("typed", "meant", "named_for_it"), [("h100pcie", "'h100-pcie'?", True),
                                                            ("b2000", "'b200'", False), ("h1000", "'h100-sxm'", False)])
def test_a_mistyped_hardware_name_suggests_its_own_entry_not_a_device_name_inside_it(typed, meant, named_for_it):
    """A squeezed catalog name (h100pcie) names its own entry, not the one of a device-name fragment inside it
    (H100 -> h100-sxm); a longer model number (b2000) is a typo with the closest names, not the B200 by name."""
    with pytest.raises(SpecError) as refused:
        load_hardware(typed)
    line = str(refused.value)
    assert f"did you mean {meant}" in line and ("the catalog's name for" in line) == named_for_it


def test_unknown_model_suggests_the_closest_name():
    with pytest.raises(SpecError, match=r"did you mean 'llama3-8b'"):
        load_model("llama3-8")


def test_nothing_close_gives_no_suggestion():
    with pytest.raises(SpecError) as err:
        load_model("zzzzzzzzzz")
    assert "did you mean" not in str(err.value)


def test_model_aliases():
    assert load_model("gpt3").name == "gpt3-175b"


def test_every_catalog_entry_loads():
    assert len(hardware_names()) > 10 and len(model_names()) > 10
    for name in hardware_names():
        assert load_hardware(name).memory_bytes > 0
    for name in model_names():
        assert load_model(name).params > 0


def test_a_path_loads_a_user_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("layers: 2\nhidden: 64\nffn_hidden: 256\nheads: 4\nvocab: 100\n")
    assert load_model(str(path)).layers == 2
    with pytest.raises(SpecError, match="does not exist"):
        load_model(str(tmp_path / "missing.yaml"))


# --------------------------------------------------------------------------------------- hardware

def test_peak_of_a_missing_precision_lists_the_supported_ones():
    hw = load_hardware("a100-80gb-sxm")
    with pytest.raises(SpecError, match=r"no fp8 peak; it supports: fp32, tf32, bf16, fp16"):
        hw.peak("fp8")
    assert hw.peak_16bit_flops_per_s == hw.peak("bf16")


def test_with_efficiency_returns_a_modified_copy():
    hw = load_hardware("a100-80gb-sxm")
    before = hw.efficiency.gemm
    new = with_efficiency(hw, gemm=0.123)
    assert new.efficiency.gemm == 0.123
    assert hw.efficiency.gemm == before != 0.123          # the cached catalog entry is untouched
    assert new.efficiency.memory == hw.efficiency.memory


def test_hardware_without_any_peak_is_rejected():
    data = {"name": "x", "peak_tflops": {"bf16": None}, "memory": {"capacity_gb": 1, "bandwidth_gb_per_s": 1},
            "system": {"devices_per_node": 1}, "source": "test",
            "efficiency": {"gemm": 0.7, "gemm_half_dim": 128, "attention": 0.5, "memory": 0.8, "scale_up": 0.7,
                           "scale_out": 0.7}}
    with pytest.raises(SpecError, match="at least one precision"):
        hardware_from_mapping(data, "x.yaml")
    data["peak_tflops"] = {"bf16": 100}
    assert hardware_from_mapping(data, "x.yaml").peak("bf16") == 100e12


# ----------------------------------------------------------------------------------------- models

def test_gpt_block_has_twelve_h_squared_parameters():
    """QKV 3h², output h², MLP 8h² (f = 4h), two norms 2h; no biases."""
    m = model_from_mapping(TINY, "t")
    h = 64
    assert m.params_per_layer == 12 * h * h + 2 * h
    assert m.embedding_params == 2 * 100 * h + h          # untied input and output, final norm
    assert m.params == 2 * m.params_per_layer + m.embedding_params


def test_tied_embeddings_count_once():
    untied = model_from_mapping(TINY, "t")
    tied = model_from_mapping({**TINY, "tied_embeddings": True}, "t")
    assert untied.params - tied.params == 100 * 64


def test_gqa_and_swiglu_parameter_counts():
    m = model_from_mapping({**TINY, "kv_heads": 1, "mlp": "swiglu"}, "t")
    h, d_h, f = 64, 16, 256
    assert m.params_per_layer == h * (4 + 2 * 1) * d_h + 4 * d_h * h + 3 * h * f + 2 * h


@pytest.mark.parametrize("name, billions", [("gpt3-175b", 175), ("llama3-8b", 8.0), ("llama2-70b", 69),
                                            ("gpt3-13b", 13)])
def test_preset_parameter_counts_match_their_names(name, billions):
    assert load_model(name).params / 1e9 == pytest.approx(billions, rel=0.03)


@pytest.mark.parametrize("change, message", [
    ({"hidden": 65}, "not divisible by heads"),
    ({"kv_heads": 3}, "not divisible by kv_heads"),
    ({"mlp": "relu"}, "mlp"),
    ({"layers": 0}, "layers"),
    ({"hiddn": 64}, "did you mean 'hidden'"),
])
def test_invalid_model_shapes(change, message):
    with pytest.raises(SpecError, match=message):
        model_from_mapping({**TINY, **change}, "t")


def test_with_shape_overrides_and_keeps_mha():
    m = load_model("gpt3-1.3b")
    new = with_shape(m, heads=32)
    assert new.heads == new.kv_heads == 32
    assert new.head_dim == m.hidden // 32
    assert "modified" in new.name
    assert with_shape(m) is m


# ----------------------------------------------------------------------------- mixture of experts, MLA

MOE_TINY = {**TINY, "layers": 4, "mlp": "swiglu", "moe": {"experts": 8, "top_k": 2, "expert_ffn_hidden": 32}}
MLA_TINY = {**TINY, "hidden": 256, "heads": 4, "mla": {"q_lora_rank": 96, "kv_lora_rank": 64, "qk_nope_head_dim": 32,
                                                      "qk_rope_head_dim": 16, "v_head_dim": 24}}


def test_dense_model_has_no_moe_numbers_and_unchanged_params():
    """A dense model: its per-layer weights are the dense layer's; every MoE count is zero; active = total."""
    m = load_model("llama3-8b")
    assert m.moe is None and m.mla is None and unmodelled_features(m) == ()
    assert m.params_per_layer == m.params_per_dense_layer == m.attention_params + m.dense_mlp_params + 2 * m.hidden
    assert m.params == 32 * m.params_per_layer + m.embedding_params == 8_030_261_248
    assert m.active_params == m.params
    assert (m.moe_layers, m.dense_layers_count, m.expert_params, m.router_params, m.params_per_moe_layer) == (0, 32, 0, 0, 0)


def test_moe_layer_parameters_by_component():
    """Router h·E, routed experts E·3·h·f_e (SwiGLU), attention and norms as in a dense layer."""
    m = model_from_mapping(MOE_TINY, "t")
    h, f_e, E = 64, 32, 8
    dense = model_from_mapping({**MOE_TINY, "moe": None}, "t")
    assert m.router_params == h * E
    assert m.params_per_expert == 3 * h * f_e and m.expert_params_per_moe_layer == E * 3 * h * f_e
    assert m.params_per_moe_layer == dense.attention_params + h * E + E * 3 * h * f_e + 2 * h
    assert m.active_params_per_moe_layer == dense.attention_params + h * E + 2 * 3 * h * f_e + 2 * h
    assert m.params == 4 * m.params_per_moe_layer + m.embedding_params
    assert m.active_params == 4 * m.active_params_per_moe_layer + m.embedding_params
    assert m.expert_params == 4 * E * 3 * h * f_e
    assert unmodelled_features(m) == ()       # MoE is modelled


def test_one_expert_top_one_is_the_dense_model_plus_a_router():
    """Limit case: E = K = 1 with f_e = f holds the dense MLP once, plus the h·1 router."""
    dense = model_from_mapping({**TINY, "mlp": "swiglu"}, "t")
    one = model_from_mapping({**TINY, "mlp": "swiglu", "moe": {"experts": 1, "top_k": 1, "expert_ffn_hidden": 256}}, "t")
    assert one.params == one.active_params == dense.params + 2 * 64


def test_top_k_equal_to_experts_makes_every_weight_active():
    m = model_from_mapping({**MOE_TINY, "moe": {"experts": 4, "top_k": 4, "expert_ffn_hidden": 32}}, "t")
    assert m.active_params == m.params


def test_shared_experts_are_always_active():
    base = model_from_mapping(MOE_TINY, "t")
    shared = model_from_mapping({**MOE_TINY, "moe": {**MOE_TINY["moe"], "shared_experts": 2,
                                                     "shared_expert_ffn_hidden": 48}}, "t")
    extra = 4 * 2 * 3 * 64 * 48
    assert shared.params - base.params == shared.active_params - base.active_params == extra
    default_width = model_from_mapping({**MOE_TINY, "moe": {**MOE_TINY["moe"], "shared_experts": 1}}, "t")
    assert default_width.moe.shared_expert_ffn_hidden == 32 == default_width.moe.shared_width


def test_gelu_experts_have_two_matrices():
    m = model_from_mapping({**MOE_TINY, "mlp": "gelu"}, "t")
    assert m.params_per_expert == 2 * 64 * 32


@pytest.mark.parametrize("layers, dense, freq, moe_indices", [
    (4, 0, 1, [0, 1, 2, 3]),
    (6, 3, 1, [3, 4, 5]),          # DeepSeek: first_k_dense_replace
    (6, 0, 2, [1, 3, 5]),          # Llama 4 Maverick / Qwen decoder_sparse_step: the k-th, 2k-th, ...
    (7, 1, 3, [3, 6]),
])
def test_moe_layer_layout(layers, dense, freq, moe_indices):
    m = model_from_mapping({**MOE_TINY, "layers": layers, "moe": {**MOE_TINY["moe"], "dense_layers": dense,
                                                                  "layer_frequency": freq}}, "t")
    assert [i for i in range(layers) if m.is_moe_layer(i)] == moe_indices
    assert m.moe_layers == len(moe_indices) and m.dense_layers_count == layers - len(moe_indices)
    assert m.params == (m.dense_layers_count * m.params_per_dense_layer + m.moe_layers * m.params_per_moe_layer
                        + m.embedding_params)
    assert m.layers * m.params_per_layer + m.embedding_params == pytest.approx(m.params, rel=1e-15)


def test_mla_attention_parameters_by_projection():
    """q down h·r_q + norm r_q + q up r_q·a·(d_n+d_r); kv down h·(r_kv+d_r) + norm r_kv + kv up
    r_kv·a·(d_n+d_v); output a·d_v·h (DeepSeek-V2 §2.1)."""
    m = model_from_mapping(MLA_TINY, "t")
    h, a, r_q, r_kv, d_n, d_r, d_v = 256, 4, 96, 64, 32, 16, 24
    q = h * r_q + r_q + r_q * a * (d_n + d_r)
    kv = h * (r_kv + d_r) + r_kv + r_kv * a * (d_n + d_v)
    assert m.attention_params == q + kv + a * d_v * h
    assert m.head_dim == d_n + d_r and m.kv_heads == a
    plain = model_from_mapping({**MLA_TINY, "mla": {**MLA_TINY["mla"], "q_lora_rank": None}}, "t")
    assert plain.attention_params == h * a * (d_n + d_r) + kv + a * d_v * h
    assert plain.mla.q_lora_rank is None
    assert unmodelled_features(m) == ()       # MLA is modelled


def test_deepseek_v3_attention_and_layers_by_hand():
    m = load_model("deepseek-v3")
    assert m.attention_params == (7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * (512 + 64) + 512 + 512 * 128 * 256
                                  + 128 * 128 * 7168)
    assert (m.moe_layers, m.dense_layers_count, m.head_dim) == (58, 3, 192)
    assert m.params_per_dense_layer == m.attention_params + 3 * 7168 * 18432 + 2 * 7168
    assert m.params_per_moe_layer == m.attention_params + 7168 * 256 + 257 * 3 * 7168 * 2048 + 2 * 7168
    assert unmodelled_features(m) == ()


# Published totals and active counts; tolerance 2 % unless a reason is given.
PUBLISHED = [
    # preset, total B, active B, active counts the input embedding (None: neither table), tolerance, why
    ("mixtral-8x7b", 46.7, 12.9, True, 0.02, "Mistral AI announcement"),
    ("mixtral-8x22b", 141, 39, True, 0.02, "Mistral AI announcement"),
    ("qwen3-30b-a3b", 30.5, 3.3, True, 0.02, "model card; QK-norms not counted"),
    ("qwen3-235b-a22b", 235, 22, True, 0.02, "model card"),
    ("gpt-oss-120b", 117, 5.1, False, 0.02, "README; biases and sinks (0.04B) not counted"),
    ("gpt-oss-20b", 21, 3.6, False, 0.02, "model card"),
    ("deepseek-v3", 671, 37, True, 0.02, "README, without the 14B MTP module"),
    ("kimi-k2", 1000, 32, True, 0.03, "README rounds to 1T and 32B; we count 1026.4B and 32.9B"),
    ("grok-1", 314, None, True, 0.02, "README (no active count published); extra norms not counted"),
    ("llama4-scout", 109, 17, True, 0.02, "Meta; 109B includes the vision encoder, not counted"),
    ("llama4-maverick", 400, 17, True, 0.02, "Meta"),
    ("qwen3-0.6b", 0.6, None, True, 0.02, "model card"),
    ("qwen3-8b", 8.2, None, True, 0.02, "model card"),
    ("qwen3-32b", 32.8, None, True, 0.02, "model card"),
    ("glm-4.5", 355, 32, None, 0.02, "model card; 32B without either embedding table"),
    ("glm-4.5-air", 106, 12, None, 0.02, "model card; 12B without either embedding table"),
    ("gemma-2-2b", 2.614, None, True, 0.001, "Gemma 2 report Table 1, 590M + 2024M; extra norms not counted"),
    ("gemma-2-9b", 9.242, None, True, 0.001, "Gemma 2 report Table 1, 918M + 8324M"),
    ("gemma-2-27b", 27.227, None, True, 0.001, "Gemma 2 report Table 1, 1180M + 26047M"),
    ("gemma-3-1b", 1.000, None, True, 0.002, "Gemma 3 report Table 1, 302M + 698M"),
    # Gemma 3 4B-27B: the text decoder of Table 1 (embedding, which holds the 3-6M multimodal projector, plus
    # non-embedding); the 417M SigLIP vision encoder in the published 4.3B / 12.2B / 27.4B is not modelled
    ("gemma-3-4b", 3.884, None, True, 0.002, "Gemma 3 report Table 1, 675M + 3209M, no vision encoder"),
    ("gemma-3-12b", 11.771, None, True, 0.002, "Gemma 3 report Table 1, 1012M + 10759M, no vision encoder"),
    ("gemma-3-27b", 27.016, None, True, 0.002, "Gemma 3 report Table 1, 1416M + 25600M, no vision encoder"),
]


@pytest.mark.parametrize("name, total, active, with_input_embedding, tolerance, why", PUBLISHED,
                         ids=[p[0] for p in PUBLISHED])
def test_preset_parameter_counts_match_the_published_ones(name, total, active, with_input_embedding, tolerance, why):
    m = load_model(name)
    assert m.params / 1e9 == pytest.approx(total, rel=tolerance), why
    if active is not None:
        # with_input_embedding None: the published count leaves out both tables (input and output)
        tables = {True: 0, False: 1, None: 2}[with_input_embedding]
        counted = m.active_params - tables * m.vocab * m.hidden
        assert counted / 1e9 == pytest.approx(active, rel=tolerance), why
    assert m.active_params <= m.params


@pytest.mark.parametrize("change, message", [
    ({"top_k": 9}, r"t\.moe\.top_k: 9 must be at most experts=8"),
    ({"top_k": 0}, r"t\.moe\.top_k: 0 must be at least 1"),
    ({"experts": 0}, r"t\.moe\.experts: 0 must be at least 1"),
    ({"expert_ffn_hidden": None}, r"t\.moe: missing required key 'expert_ffn_hidden'"),
    ({"dense_layers": 4}, r"t\.moe\.dense_layers: 4 must be less than layers=4 .*allowed: 0 to 3"),
    ({"dense_layers": -1}, r"t\.moe\.dense_layers: -1 must be at least 0"),
    ({"layer_frequency": 0}, r"t\.moe\.layer_frequency: 0 must be at least 1"),
    ({"layer_frequency": 5}, r"t\.moe\.layer_frequency: 5 leaves no MoE layer .*allowed: 1 to 4"),
    ({"capacity_factor": 0}, r"t\.moe\.capacity_factor: 0 must be > 0"),
    ({"capacity_factor": -1.5}, r"t\.moe\.capacity_factor: -1.5 must be > 0"),
    ({"imbalance": 0.9}, r"t\.moe\.imbalance: 0.9 must be between 1 .* and experts/top_k = 4"),
    ({"imbalance": 5}, r"t\.moe\.imbalance: 5 must be between 1"),
    ({"imbalance": "high"}, r"t\.moe\.imbalance: 'high' is not a number"),
    ({"shared_expert_ffn_hidden": 64}, r"shared_expert_ffn_hidden: 64 is given but shared_experts is 0"),
    ({"shared_experts": -1}, r"t\.moe\.shared_experts: -1 must be at least 0"),
    ({"topk": 2}, r"t\.moe: unknown key 'topk' \(did you mean 'top_k'\?\)"),
    ({"router_groups": 3}, r"t\.moe\.router_groups: 3 must divide experts=8"),
    ({"router_groups": 4, "router_group_top_k": 5}, r"router_group_top_k: 5 must be at most router_groups=4.*allowed: 1 to 4"),
    ({"router_groups": 8, "router_group_top_k": 1}, r"router_group_top_k: 1 .*leave top_k=2 experts.*allowed: 2 to 8"),
    ({"router_group_top_k": 2}, r"t\.moe\.router_group_top_k: given without router_groups"),
])
def test_invalid_moe(change, message):
    moe = {k: v for k, v in {**MOE_TINY["moe"], **change}.items() if v is not None}
    with pytest.raises(SpecError, match=message):
        model_from_mapping({**MOE_TINY, "moe": moe}, "t")


@pytest.mark.parametrize("change, message", [
    ({"kv_lora_rank": 256},
     r"t\.mla\.kv_lora_rank: 256 must be less than hidden=256 and heads·\(qk_nope_head_dim \+ v_head_dim\) = "
     r"\d+·\(\d+ \+ \d+\) = 224"),
    ({"kv_lora_rank": 230}, r"t\.mla\.kv_lora_rank: 230 must be less than"),      # fits hidden, not the heads
    ({"q_lora_rank": 300}, r"t\.mla\.q_lora_rank: 300 must be less than hidden=256"),
    ({"qk_nope_head_dim": 0}, r"t\.mla\.qk_nope_head_dim: 0 must be at least 1"),
    ({"v_head_dim": -8}, r"t\.mla\.v_head_dim: -8 must be at least 1"),
    ({"qk_rope_head_dim": 15}, r"t\.mla\.qk_rope_head_dim: 15 must be even"),
    ({"kv_lora_rank": None}, r"t\.mla: missing required key 'kv_lora_rank'"),
    ({"kv_rank": 4}, r"unknown key 'kv_rank' \(did you mean 'kv_lora_rank'"),
])
def test_invalid_mla(change, message):
    mla = {k: v for k, v in {**MLA_TINY["mla"], **change}.items() if v is not None}
    with pytest.raises(SpecError, match=message):
        model_from_mapping({**MLA_TINY, "mla": mla}, "t")


def test_mla_heads_and_head_dim_must_agree():
    with pytest.raises(SpecError, match=r"t\.kv_heads: 2 must equal heads=4 with mla"):
        model_from_mapping({**MLA_TINY, "kv_heads": 2}, "t")
    with pytest.raises(SpecError, match=r"t\.head_dim: 64 must equal qk_nope_head_dim \+ qk_rope_head_dim = 48"):
        model_from_mapping({**MLA_TINY, "head_dim": 64}, "t")
    assert model_from_mapping({**MLA_TINY, "head_dim": 48}, "t") == model_from_mapping(MLA_TINY, "t")


def test_moe_block_must_be_a_mapping():
    with pytest.raises(SpecError, match=r"t\.moe: expected a mapping"):
        model_from_mapping({**TINY, "moe": [8, 2]}, "t")


def test_ffn_hidden_is_needed_only_when_a_layer_is_dense():
    no_dense = {k: v for k, v in MOE_TINY.items() if k != "ffn_hidden"}
    assert model_from_mapping(no_dense, "t").ffn_hidden == 32           # the expert width stands in (unused)
    with pytest.raises(SpecError, match=r"missing required key 'ffn_hidden' \(the MLP width of the 1 dense layers\)"):
        model_from_mapping({**no_dense, "moe": {**MOE_TINY["moe"], "dense_layers": 1}}, "t")
    with pytest.raises(SpecError, match="missing required key 'ffn_hidden'"):
        model_from_mapping({k: v for k, v in TINY.items() if k != "ffn_hidden"}, "t")


def test_every_preset_round_trips_through_its_mapping():
    for name in model_names():
        m = load_model(name)
        assert model_from_mapping(model_mapping(m), "t") == m, name


def test_every_preset_is_modelled():
    """MoE and MLA presets are modelled (docs/model.md §15): nothing the step model lacks."""
    for name in model_names():
        assert unmodelled_features(load_model(name)) == (), name
    assert isinstance(load_model("mixtral-8x7b").moe, MoE) and isinstance(load_model("kimi-k2").mla, MLA)


def test_not_expressible_models_say_why():
    assert "deepseek-v4-flash" in NOT_EXPRESSIBLE_MODELS
    with pytest.raises(SpecError, match=r"'DeepSeek-V4-Flash' is not expressible in trainest: .*compressed sparse"):
        load_model("DeepSeek-V4-Flash")
    with pytest.raises(SpecError, match=r"did you mean 'mixtral-8x7b'"):
        load_model("mixtral-8x7")


def test_with_shape_moe_overrides():
    m = load_model("deepseek-v3")
    new = with_shape(m, experts=64, top_k=4, expert_ffn_hidden=1024, moe_imbalance=1.5)
    assert (new.moe.experts, new.moe.top_k, new.moe.expert_ffn_hidden, new.moe.imbalance) == (64, 4, 1024, 1.5)
    assert new.moe.shared_expert_ffn_hidden == 1024      # as wide as the routed experts before, so after
    assert (new.moe.dense_layers, new.mla, new.head_dim) == (3, m.mla, 192)
    assert "modified: expert_ffn_hidden, experts, moe_imbalance, top_k" in new.name
    assert with_shape(m, layers=31).moe_layers == 28
    assert with_shape(m, heads=64).kv_heads == 64        # MLA: one KV head per head, kept
    # the shape overrides are the command line's (--experts, --top-k): the message names the flag
    with pytest.raises(SpecError, match=r"^--top-k: 8 must be at most experts=4"):
        with_shape(m, experts=4)


def test_with_shape_makes_a_dense_model_moe_only_when_asked_fully():
    dense = load_model("llama3-8b")
    moe = with_shape(dense, experts=8, top_k=2)
    assert moe.moe.expert_ffn_hidden == dense.ffn_hidden and moe.moe_layers == 32
    assert moe.params == pytest.approx(dense.params + 32 * (7 * 3 * 4096 * 14336 + 8 * 4096))
    with pytest.raises(SpecError, match="llama3-8b is dense; give both experts and top_k"):
        with_shape(dense, top_k=2)
    assert with_shape(dense, layers=8) == with_shape(dense, layers=8, experts=None)
