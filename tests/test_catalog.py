"""trainest.catalog: lookups with "did you mean", unit conversion to SI, model shapes and parameter counts."""

from __future__ import annotations

import pytest

from trainest.catalog import (hardware_from_mapping, hardware_names, load_hardware, load_model, model_from_mapping,
                              model_names, with_efficiency, with_shape)
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
