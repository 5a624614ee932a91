"""trainest.hf_config: a Hugging Face config.json read offline gives the same Model as the matching preset,
and every config it cannot express is one clean SpecError saying why."""

from __future__ import annotations

import copy
import dataclasses

from trainest.record import replace
import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainest import catalog, hf_config
from trainest.catalog import load_model
from trainest.errors import SpecError
from trainest.catalog import model_from_hf_config
from trainest.hf_config import HF_SEQ_LEN_CAP

REPO = Path(__file__).resolve().parent.parent
CONFIGS = Path(__file__).resolve().parent / "hf_configs"   # hand-written from the public config.json files


def _config(name: str) -> dict:
    return json.loads((CONFIGS / name / "config.json").read_text(encoding="utf-8"))


def _write(tmp_path: Path, data, name: str = "config.json") -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return str(path)


# ------------------------------------------------------------------------- configs equal the presets

@pytest.mark.parametrize("folder, preset", [
    ("Meta-Llama-3-8B", "llama3-8b"),
    ("Mistral-7B-v0.1", "mistral-7b"),
    ("Qwen3-8B", "qwen3-8b"),
    ("Mixtral-8x7B-v0.1", "mixtral-8x7b"),
    ("Qwen3-30B-A3B", "qwen3-30b-a3b"),
    ("gpt-oss-120b", "gpt-oss-120b"),
    ("DeepSeek-V3", "deepseek-v3"),
    ("Kimi-K2-Instruct", "kimi-k2"),
    ("Llama-4-Maverick-17B-128E", "llama4-maverick"),
    ("GLM-4.5", "glm-4.5"),
    ("gemma-2-2b", "gemma-2-2b"),
    ("gemma-2-9b", "gemma-2-9b"),
    ("gemma-2-27b", "gemma-2-27b"),
    ("gemma-3-1b-pt", "gemma-3-1b"),
    ("gemma-3-4b-pt", "gemma-3-4b"),       # text_config without heads, KV heads, head_dim, vocab: Gemma3TextConfig's
    ("gemma-3-12b-pt", "gemma-3-12b"),
    ("gemma-3-27b-pt", "gemma-3-27b"),
])
def test_config_gives_the_preset_shape(folder, preset):
    """Every field but name, source and the default sequence length (a chosen default) is the preset's."""
    from_hf, want = load_model(str(CONFIGS / folder / "config.json")), load_model(preset)
    assert replace(from_hf, name=want.name, source=want.source, seq_len=want.seq_len) == want
    assert from_hf.params == want.params and from_hf.active_params == want.active_params
    assert from_hf.name == folder and "config.json" in from_hf.source


@pytest.mark.parametrize("folder, params", [
    ("Phi-3-mini-4k-instruct", 3.82e9),    # microsoft/Phi-3-mini-4k-instruct: "3.8B parameters"
    ("OLMo-2-1124-7B", 7.30e9),            # allenai/OLMo-2-1124-7B: 7.30B (model card)
])
def test_llama_shaped_configs_without_a_preset_load_with_their_published_size(folder, params):
    m = load_model(str(CONFIGS / folder / "config.json"))
    assert m.params == pytest.approx(params, rel=0.01) and m.mlp == "swiglu" and not m.tied_embeddings
    assert m.seq_len == 4096 and m.name == folder


def test_glm45_is_deepseek_v3s_moe_layout_on_grouped_query_attention():
    """zai-org/GLM-4.5: 355B total, 32B active (model card); 3 leading dense layers, 160 routed experts
    (8 a token) and one shared of width 1536, GQA with head_dim 128 (96·128 ≠ hidden 5120), one MTP layer."""
    m = load_model(str(CONFIGS / "GLM-4.5" / "config.json"))
    assert m.params == pytest.approx(355e9, rel=0.01)
    # the published 32B active leaves out the input and output embeddings (2 × 151552 × 5120 = 1.55B)
    assert m.active_params - 2 * 151552 * 5120 == pytest.approx(32e9, rel=0.02)
    assert (m.moe.experts, m.moe.top_k, m.moe.dense_layers, m.moe.shared_experts) == (160, 8, 3, 1)
    assert m.mla is None and m.head_dim == 128 and m.kv_heads == 8 and m.mtp is not None


def test_a_folder_holding_config_json_loads_the_same():
    assert load_model(str(CONFIGS / "Mixtral-8x7B-v0.1")) == load_model(str(CONFIGS / "Mixtral-8x7B-v0.1" / "config.json"))


def test_a_bare_config_json_is_named_after_the_current_folder(tmp_path, monkeypatch):
    """`--model config.json` run inside the model's folder was named 'config' in every table (found walking issue
    36's Hugging Face MoE task); the folder's name is the model id, as for `--model FOLDER/config.json`."""
    folder = tmp_path / "my-moe"
    folder.mkdir()
    data = _config("Mixtral-8x7B-v0.1")
    data.pop("_name_or_path", None)
    (folder / "config.json").write_text(json.dumps(data), encoding="utf-8")
    monkeypatch.chdir(folder)
    assert load_model("config.json").name == "my-moe" == load_model(str(folder / "config.json")).name


def test_seq_len_is_the_pretraining_length_capped():
    assert load_model(str(CONFIGS / "Meta-Llama-3-8B")).seq_len == 8192               # 8192 positions
    assert load_model(str(CONFIGS / "Mistral-7B-v0.1")).seq_len == HF_SEQ_LEN_CAP == 8192  # 32768 positions
    assert load_model(str(CONFIGS / "DeepSeek-V3")).seq_len == 4096     # rope_scaling: 4096 before YaRN
    assert load_model(str(CONFIGS / "Qwen3-30B-A3B")).seq_len == 4096   # the architecture's pre-training length
    data = {**_config("Meta-Llama-3-8B"), "max_position_embeddings": 2048}
    assert model_from_hf_config(data, "t").seq_len == 2048
    data = {**_config("Meta-Llama-3-8B"), "max_position_embeddings": 131072,
            "rope_scaling": {"rope_type": "llama3", "original_max_position_embeddings": 8192}}
    assert model_from_hf_config(data, "t").seq_len == 8192


# every fixture with a preset of the same model (moe.md M7: the config.json defaulted to 8192 tokens, the
# preset to 4096, so README's Qwen3 config example was not the preset's answer)
MATCHING_PRESETS = {"DeepSeek-V3": "deepseek-v3", "GLM-4.5": "glm-4.5", "Kimi-K2-Instruct": "kimi-k2",
                    "Llama-4-Maverick-17B-128E": "llama4-maverick", "Meta-Llama-3-8B": "llama3-8b",
                    "Mistral-7B-v0.1": "mistral-7b", "Mixtral-8x7B-v0.1": "mixtral-8x7b",
                    "Qwen3-30B-A3B": "qwen3-30b-a3b", "Qwen3-8B": "qwen3-8b", "gpt-oss-120b": "gpt-oss-120b",
                    "gemma-2-2b": "gemma-2-2b", "gemma-2-9b": "gemma-2-9b", "gemma-2-27b": "gemma-2-27b",
                    "gemma-3-1b-pt": "gemma-3-1b", "gemma-3-4b-pt": "gemma-3-4b", "gemma-3-12b-pt": "gemma-3-12b",
                    "gemma-3-27b-pt": "gemma-3-27b"}


@pytest.mark.parametrize("folder,preset", MATCHING_PRESETS.items())
def test_a_config_with_default_flags_estimates_as_its_preset(folder, preset):
    from trainest.estimate import estimate
    from trainest.scenario import scenario_from_mapping
    config = estimate(scenario_from_mapping({"model": str(CONFIGS / folder / "config.json")}))
    ours = estimate(scenario_from_mapping({"model": preset}))
    assert config.scenario.seq_len == ours.scenario.seq_len and "seq_len" in config.scenario.derived
    assert config.step.time_s == ours.step.time_s
    assert config.memory.per_device_bytes == ours.memory.per_device_bytes


def test_dense_estimate_from_a_config_equals_the_presets():
    from typer.testing import CliRunner

    from trainest.cli import app
    args = ["estimate", "--hardware", "h100-sxm", "--devices", "8", "--global-batch", "64", "--json"]
    runner = CliRunner()
    preset = runner.invoke(app, [*args, "--model", "llama3-8b"])
    hf = runner.invoke(app, [*args, "--model", str(CONFIGS / "Meta-Llama-3-8B" / "config.json")])
    assert preset.exit_code == hf.exit_code == 0, hf.stderr
    a, b = json.loads(preset.stdout), json.loads(hf.stdout)
    assert a["step"] == b["step"] and a["memory"] == b["memory"] and a["throughput"] == b["throughput"]


# ------------------------------------------------------------------------------ other architectures

def test_gemma_defaults_to_tied_embeddings_and_its_own_head_dim():
    """Gemma 7B: config.json has no tie_word_embeddings (the class default, true, is not saved) and
    head_dim 256 != hidden/heads = 192; 8.54B parameters (Gemma Team 2024, Table 1)."""
    m = load_model(str(CONFIGS / "gemma-7b"))
    assert m.tied_embeddings and m.head_dim == 256 and m.mlp == "swiglu" and m.moe is None
    assert m.params / 1e9 == pytest.approx(8.54, rel=0.01)


def test_gemma2_uses_hidden_activation():
    m = load_model(str(CONFIGS / "gemma-2-9b"))
    assert m.kv_heads == 8 and m.tied_embeddings
    assert m.params / 1e9 == pytest.approx(9.24, rel=0.01)


def test_gemma3_text_config_keys_left_out_are_gemma3textconfigs_defaults():
    """google/gemma-3-4b-pt saves no num_attention_heads, num_key_value_heads, head_dim or vocab_size in its
    text_config (transformers fills 8, 4, 256, 262208); a key the file gives wins (27B: head_dim 128). Other
    architectures still need the keys."""
    m = load_model(str(CONFIGS / "gemma-3-4b-pt"))
    assert (m.heads, m.kv_heads, m.head_dim, m.vocab) == (8, 4, 256, 262208)
    assert load_model(str(CONFIGS / "gemma-3-27b-pt")).head_dim == 128
    data = {k: v for k, v in _config("gemma-2-9b").items() if k != "vocab_size"}
    with pytest.raises(SpecError, match=r"missing 'vocab_size', which Gemma2ForCausalLM needs"):
        model_from_hf_config(data, "c.json")


def test_multimodal_config_reads_its_text_config():
    data = {"architectures": ["Gemma3ForConditionalGeneration"], "text_config": {
        **{k: v for k, v in _config("gemma-7b").items() if k != "architectures"}}, "vision_config": {"hidden_size": 1152}}
    assert model_from_hf_config(data, "t").params == load_model(str(CONFIGS / "gemma-7b")).params


def test_qwen2_moe_shared_expert_and_leading_dense_layers():
    data = {**_config("Qwen3-30B-A3B"), "architectures": ["Qwen2MoeForCausalLM"], "shared_expert_intermediate_size": 5632,
            "mlp_only_layers": [0, 1]}
    m = model_from_hf_config(data, "t")
    assert (m.moe.shared_experts, m.moe.shared_expert_ffn_hidden, m.moe.dense_layers) == (1, 5632, 2)
    assert m.moe_layers == 46 and m.dense_layers_count == 2


def test_qwen_sparse_step_is_the_layer_frequency():
    m = model_from_hf_config({**_config("Qwen3-30B-A3B"), "decoder_sparse_step": 2}, "t")
    assert m.moe.layer_frequency == 2 and m.moe_layers == 24
    assert [i for i in range(4) if m.is_moe_layer(i)] == [1, 3]   # Qwen: (i + 1) % step == 0


def test_deepseek_v2_lite_without_query_compression():
    data = {**_config("DeepSeek-V3"), "architectures": ["DeepseekV2ForCausalLM"], "q_lora_rank": None,
            "num_hidden_layers": 27, "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 16,
            "first_k_dense_replace": 1, "n_routed_experts": 64, "num_experts_per_tok": 6, "n_shared_experts": 2,
            "moe_intermediate_size": 1408, "intermediate_size": 10944, "vocab_size": 102400}
    m = model_from_hf_config(data, "t")
    assert m.mla.q_lora_rank is None and m.moe.shared_experts == 2
    # DeepSeek-V2-Lite: 15.7B total, 2.4B active, which (like GPT-OSS's) leaves out the input embedding
    assert m.params / 1e9 == pytest.approx(15.7, rel=0.02)
    assert (m.active_params - m.vocab * m.hidden) / 1e9 == pytest.approx(2.4, rel=0.03)


def test_dropout_is_read_from_the_dropout_keys():
    assert not load_model(str(CONFIGS / "Meta-Llama-3-8B")).dropout
    assert model_from_hf_config({**_config("Meta-Llama-3-8B"), "attention_dropout": 0.1}, "t").dropout


# --------------------------------------------------------------------------------------- bad input

def test_unknown_architecture_lists_the_supported_ones():
    with pytest.raises(SpecError) as err:
        model_from_hf_config({**_config("Meta-Llama-3-8B"), "architectures": ["FancyNewForCausalLM"]}, "c.json")
    message = str(err.value)
    assert "c.json.architectures" in message and "'FancyNewForCausalLM' is not supported" in message
    for arch in ("LlamaForCausalLM", "MixtralForCausalLM", "DeepseekV3ForCausalLM", "GptOssForCausalLM",
                 "Qwen3MoeForCausalLM", "Gemma2ForCausalLM"):
        assert arch in message
    assert "\n" not in message


def test_other_hybrid_mamba_families_are_not_expressible_and_say_why():
    """Nemotron-H's block pattern is modelled (tests/test_hybrid.py); Jamba's interleaving is not."""
    with pytest.raises(SpecError, match=r"JambaForCausalLM is not expressible in trainest: hybrid Mamba .*"
                                        r"NemotronHForCausalLM is supported"):
        model_from_hf_config({"architectures": ["JambaForCausalLM"], "hidden_size": 2688}, "c.json")
    with pytest.raises(SpecError, match=r"missing 'hybrid_override_pattern'|hybrid_override_pattern"):
        model_from_hf_config({"architectures": ["NemotronHForCausalLM"], "hidden_size": 2688,
                              "num_attention_heads": 32, "num_hidden_layers": 4, "vocab_size": 100}, "c.json")


@pytest.mark.parametrize("change, words", [
    ({"architectures": None}, ("architectures", "must be a list")),
    ({"architectures": "LlamaForCausalLM"}, ("architectures", "must be a list")),
    ({"num_hidden_layers": None}, ("missing 'num_hidden_layers'", "LlamaForCausalLM")),
    ({"hidden_size": 4096.5}, ("hidden_size", "not a whole number")),
    ({"num_key_value_heads": 7}, ("not divisible by kv_heads",)),
    ({"hidden_act": "swoosh"}, ("hidden_act", "'swoosh'", "allowed")),
    ({"tie_word_embeddings": "no"}, ("tie_word_embeddings", "true or false")),
    ({"attention_dropout": -1}, ("attention_dropout",)),
])
def test_bad_llama_config(change, words):
    with pytest.raises(SpecError) as err:
        model_from_hf_config({**_config("Meta-Llama-3-8B"), **change}, "c.json")
    for w in words:
        assert w in str(err.value)


@pytest.mark.parametrize("folder, change, words", [
    ("Mixtral-8x7B-v0.1", {"num_experts_per_tok": 9}, ("moe.top_k", "at most experts=8")),
    ("DeepSeek-V3", {"moe_layer_freq": 2}, ("moe_layer_freq", "allowed: 1")),
    ("DeepSeek-V3", {"kv_lora_rank": 8192}, ("kv_lora_rank", "less than hidden=7168")),
    ("DeepSeek-V3", {"first_k_dense_replace": 61}, ("dense_layers", "less than layers=61")),
    ("Qwen3-30B-A3B", {"mlp_only_layers": [3, 7]}, ("mlp_only_layers", "leading layers")),
    ("Qwen3-30B-A3B", {"mlp_only_layers": [0], "decoder_sparse_step": 2}, ("not expressible",)),
    ("Llama-4-Maverick-17B-128E", {"text_config": "x"}, ("text_config", "must be an object")),
])
def test_bad_moe_config(folder, change, words):
    with pytest.raises(SpecError) as err:
        model_from_hf_config({**_config(folder), **change}, "c.json")
    for w in words:
        assert w in str(err.value)


def test_llama4_moe_layers_must_be_the_interleaved_ones():
    data = copy.deepcopy(_config("Llama-4-Maverick-17B-128E"))
    data["text_config"]["moe_layers"] = list(range(1, 48, 2))
    assert model_from_hf_config(data, "t").moe_layers == 24
    data["text_config"]["moe_layers"] = [0, 5]
    with pytest.raises(SpecError, match="moe_layers"):
        model_from_hf_config(data, "t")


@pytest.mark.parametrize("content, words", [
    ("{not json", ("not valid JSON", "line 1")),
    ("[1, 2]", ("must hold an object",)),
    ('{"architectures": ["LlamaForCausalLM"], "hidden_size": ' + "9" * 5000 + "}", ("number too long",)),
    (b"\x89PNG\r\n\x1a\n\xff\xfe", ("not UTF-8",)),
])
def test_bad_config_file(tmp_path, content, words):
    path = tmp_path / "config.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(SpecError) as err:
        load_model(str(path))
    for w in (*words, "config.json"):
        assert w in str(err.value)


def test_missing_config_and_folder_without_one(tmp_path):
    with pytest.raises(SpecError, match="does not exist"):
        load_model(str(tmp_path / "nowhere" / "config.json"))
    with pytest.raises(SpecError, match="is a directory holding no config.json"):
        load_model(str(tmp_path))


def test_cli_error_is_one_line(tmp_path):
    from typer.testing import CliRunner

    from trainest.cli import app
    path = _write(tmp_path, {"architectures": ["JambaForCausalLM"]})
    result = CliRunner().invoke(app, ["estimate", "--model", path])
    assert result.exit_code == 1 and result.stdout == ""
    assert "not expressible" in result.stderr and "Traceback" not in result.stderr


# ------------------------------------------------------------------------------------------ start-up

def test_hf_config_is_imported_only_for_a_config_json(tmp_path):
    """A preset estimate never imports trainest.hf_config; a config.json does (and still skips yaml)."""
    def modules(*args: str) -> set[str]:
        proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "trainest", *args], capture_output=True,
                              text=True, timeout=120, cwd=REPO)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:") and "|" in line}
    assert "trainest.hf_config" not in modules("estimate", "--model", "llama3-8b", "--json")
    loaded = modules("estimate", "--model", str(CONFIGS / "Meta-Llama-3-8B"), "--json")
    assert "trainest.hf_config" in loaded and "yaml" not in loaded


def test_module_is_importable_without_the_cli():
    assert hf_config.ARCHITECTURES and catalog.Model
