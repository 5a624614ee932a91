"""A Hugging Face `config.json`, read offline (no network, no `transformers`), as a trainest Model.

Imported only when a config.json is loaded (`catalog.load_model`), so other start-ups never pay for it.
Each supported `architectures` entry has a reader that maps the config's keys onto the model schema
of specs/README.md; the mapping then goes through `catalog.model_from_mapping`, the same validation
as a model YAML file.

Keys read (HF -> trainest):
    num_hidden_layers -> layers          hidden_size -> hidden            intermediate_size -> ffn_hidden
    num_attention_heads -> heads         num_key_value_heads -> kv_heads (default: heads)
    head_dim -> head_dim (default hidden/heads; MLA: qk_nope_head_dim + qk_rope_head_dim)
    vocab_size -> vocab                  tie_word_embeddings -> tied_embeddings (default: the architecture's)
    rope_scaling.original_max_position_embeddings, else the architecture's pre-training length, else
        max_position_embeddings -> seq_len, capped at HF_SEQ_LEN_CAP (pretraining_seq_len)
    hidden_act / hidden_activation -> mlp: every supported architecture has a gated (3-matrix) MLP, which
        trainest calls `swiglu` whatever the activation (SiLU, GeLU: the matmuls are the same)
    attention_dropout, hidden_dropout... > 0 -> dropout
    MoE: num_local_experts / num_experts / n_routed_experts -> moe.experts; num_experts_per_tok -> top_k;
        moe_intermediate_size (else intermediate_size) -> expert_ffn_hidden; n_shared_experts or
        shared_expert_intermediate_size -> shared_experts, shared_expert_ffn_hidden;
        first_k_dense_replace or mlp_only_layers [0..d-1] -> dense_layers; decoder_sparse_step or
        interleave_moe_layer_step -> layer_frequency; n_group, topk_group (DeepSeek, when topk_group <
        n_group) -> router_groups, router_group_top_k
    MLA: q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim -> mla.*
    GLM-4.5 (Glm4MoeForCausalLM): DeepSeek-V3's MoE keys above on grouped-query attention (head_dim)
    Nemotron-H / Nemotron 3 (NemotronHForCausalLM): hybrid_override_pattern -> hybrid.pattern;
        mamba_num_heads, mamba_head_dim, ssm_state_size, n_groups, conv_kernel, chunk_size -> hybrid.*;
        n_routed_experts, num_experts_per_tok, moe_intermediate_size, n_shared_experts,
        moe_shared_expert_intermediate_size, moe_latent_size -> moe.*; mlp_hidden_act relu2 -> mlp gelu

    Local attention (`attention_window`, `attention_window_mapping`): layer_types (sliding_attention /
        chunked_attention / full_attention per layer) -> the kind and global_every, with sliding_window or
        attention_chunk_size -> size; without layer_types: sliding_window on every layer (Mistral, Mixtral,
        Phi-3; Qwen2/Qwen3 only with use_sliding_window true, on the layers from max_window_layers on),
        Gemma 2 and GPT-OSS on every other layer (layer 0 sliding), Gemma 3 every sliding_window_pattern-th
        layer global (default 6, transformers' Gemma3TextConfig), Llama 4 attention_chunk_size chunked on
        the RoPE layers of no_rope_layers (0 = NoPE, global; default every no_rope_layer_interval = 4th
        layer global, transformers' Llama4TextConfig)

Approximated (the config has it, trainest's model does not): biases (Qwen2 QKV, GPT-OSS),
attention sinks, QK-norms and extra norms (Gemma 2/3 have four per layer) are not counted; logit
soft-capping, embedding scaling and RoPE variants change no matmul; DeepSeek's
num_nextn_predict_layers is read as mtp.depth (one MoE layer per depth, docs/model.md §15.10); vision
towers of multimodal configs (Llama 4, Gemma 3) are left out, only their text_config is read. Keys
absent from a config are not filled with transformers' class defaults (except the ones named above, and Gemma 3's
num_attention_heads 8, num_key_value_heads 4, head_dim 256 and vocab_size 262208, which Google's multimodal Gemma 3
files leave to Gemma3TextConfig): they are errors.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainest import fields as F
from trainest.errors import SpecError, did_you_mean

# Long-context positions are mostly reached by a later context-extension phase; pre-training runs at
# 4K-8K tokens (Llama 3: 8192; DeepSeek-V3, Qwen3, Kimi K2: 4096). The default sequence length of a
# config-derived model is that pre-training length, the rule the presets' `seq_len` follows
# (`pretraining_seq_len`): the context before RoPE scaling (rope_scaling.original_max_position_embeddings:
# DeepSeek-V3, GPT-OSS 4096, Llama 3.1 8192), else the architecture's (PRETRAINING_SEQ_LEN), else
# max_position_embeddings; capped here (override it with --seq-len / seq_len).
HF_SEQ_LEN_CAP = 8192
# the pre-training length of the architectures whose presets train shorter than their positions, without a
# rope_scaling that says so (specs/models: qwen3-*, qwen3-30b-a3b, kimi-k2, mixtral-8x7b, glm-4.5 `seq_len`):
# Qwen3 dense and MoE (the Qwen3 technical report's general stage: 4,096 tokens), DeepSeek-V3's architecture
# (also Kimi K2: 4,096), Mixtral and GLM-4.5 (the presets' chosen 4096 of their 32K / 128K)
PRETRAINING_SEQ_LEN = {"Qwen3ForCausalLM": 4096, "Qwen3MoeForCausalLM": 4096, "DeepseekV3ForCausalLM": 4096,
                       "MixtralForCausalLM": 4096, "Glm4MoeForCausalLM": 4096}
# The activations a gated MLP of these architectures uses (the MLP has 3 matrices whichever it is).
GATED_ACTIVATIONS = ("silu", "swish", "gelu", "gelu_pytorch_tanh", "gelu_new", "gelu_fast", "gelu_python",
                     "quick_gelu", "relu")
DROPOUT_KEYS = ("attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop", "dropout")
MAX_CONFIG_BYTES = 16 * 2**20   # a config.json is a few kB; larger is not one

_MISSING = object()


class _Config:
    """A config mapping with typed getters whose errors name the file and the HF key."""

    def __init__(self, data: dict, where: str, architecture: str) -> None:
        self.data, self.where, self.architecture = data, where, architecture

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        value = self.data.get(key)
        if value is None:
            if default is _MISSING:
                raise SpecError(f"{self.where}: missing {key!r}, which {self.architecture} needs (trainest does not "
                                f"fill in transformers' defaults; add the key from the model's configuration)")
            return default
        return value

    def integer(self, key: str, default: Any = _MISSING, *, minimum: int = 1) -> Any:
        """A whole number >= minimum; `default` (which may be None) when the key is absent or null."""
        value = self.raw(key, default)
        return None if value is None else F.integer(value, f"{self.where}.{key}", minimum=minimum)

    def boolean(self, key: str, default: bool) -> bool:
        return F.boolean(self.raw(key, default), f"{self.where}.{key}")


# ----------------------------------------------------------------------------------------- readers

def pretraining_seq_len(c: _Config) -> int:
    """The default sequence length of a config [tokens]: the context before RoPE scaling, else the
    architecture's pre-training length, else max_position_embeddings; at most max_position_embeddings
    and HF_SEQ_LEN_CAP (see HF_SEQ_LEN_CAP)."""
    max_positions = c.integer("max_position_embeddings", HF_SEQ_LEN_CAP)
    scaling = c.raw("rope_scaling", None)
    original = scaling.get("original_max_position_embeddings") if isinstance(scaling, dict) else None
    if isinstance(original, int) and not isinstance(original, bool) and original > 0:
        length = original
    else:
        length = PRETRAINING_SEQ_LEN.get(c.architecture, max_positions)
    return min(length, max_positions, HF_SEQ_LEN_CAP)


def _dense(c: _Config, *, tied_default: bool = False, head_dim_required: bool = False) -> dict:
    """The dense keys every supported architecture shares (Llama layout: gated MLP, GQA, RMSNorm)."""
    heads = c.integer("num_attention_heads")
    act = c.raw("hidden_activation", None) or c.raw("hidden_act", "silu")
    if not isinstance(act, str) or act.lower() not in GATED_ACTIVATIONS:
        raise SpecError(f"{c.where}.hidden_act: {F.show(act)} is not an activation trainest knows for "
                        f"{c.architecture}{did_you_mean(str(act), GATED_ACTIVATIONS)}; "
                        f"allowed: {', '.join(GATED_ACTIVATIONS)}")
    dropout = any(F.number(c.raw(k, 0.0), f"{c.where}.{k}", allow_zero=True) > 0 for k in DROPOUT_KEYS)
    mapping = {
        "layers": c.integer("num_hidden_layers"),
        "hidden": c.integer("hidden_size"),
        "ffn_hidden": c.integer("intermediate_size"),
        "heads": heads,
        "kv_heads": c.integer("num_key_value_heads", heads),
        "vocab": c.integer("vocab_size"),
        "mlp": "swiglu",
        "seq_len": pretraining_seq_len(c),
        "tied_embeddings": c.boolean("tie_word_embeddings", tied_default),
        "dropout": dropout,
        "positional": "rope",       # every supported architecture rotates Q and K (RoPE and its YaRN/NTK variants)
    }
    if c.has("head_dim") or head_dim_required:
        mapping["head_dim"] = c.integer("head_dim")
    return mapping


def _llama(c: _Config) -> dict:
    """Llama, Mistral, Qwen2, Qwen3, Phi-3/Phi-4, OLMo/OLMo 2, Granite (dense): the common keys only."""
    return _dense(c)


# transformers' Gemma3TextConfig defaults for the keys Google's Gemma 3 multimodal config.json files leave out of
# their text_config (google/gemma-3-4b-pt saves no heads, KV heads, head_dim or vocab_size; 12B and 27B no vocab_size)
GEMMA3_TEXT_DEFAULTS = {"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 262208}


def _gemma(c: _Config) -> dict:
    """Gemma 1/2/3: tied embeddings by default; head_dim is not hidden/heads (Gemma 7B: 256, not 192);
    Gemma 3 keys absent from the file take GEMMA3_TEXT_DEFAULTS, as transformers does."""
    if c.architecture.startswith("Gemma3"):
        c = _Config({**GEMMA3_TEXT_DEFAULTS, **{k: v for k, v in c.data.items() if v is not None}}, c.where,
                    c.architecture)
    return _dense(c, tied_default=True, head_dim_required=True)


def _mixtral(c: _Config) -> dict:
    """Mixtral: every layer MoE; each expert is an MLP of intermediate_size."""
    mapping = _dense(c)
    mapping["moe"] = {"experts": c.integer("num_local_experts"), "top_k": c.integer("num_experts_per_tok"),
                      "expert_ffn_hidden": mapping["ffn_hidden"]}
    return mapping


def _gpt_oss(c: _Config) -> dict:
    """GPT-OSS: every layer MoE (experts of intermediate_size); head_dim 64 != hidden/heads; the class's experts
    carry biases (transformers GptOssExperts: gate_up_proj_bias, down_proj_bias) and its GLU clamps its inputs at
    swiglu_limit (docs/model.md §15.13)."""
    mapping = _mixtral(c)
    mapping["moe"]["expert_bias"] = True
    limit = c.raw("swiglu_limit", None)
    if limit is not None:                   # checked with the model's other fields (models._moe_from)
        mapping["moe"]["glu_clamp"] = limit
    return mapping


def _leading_dense(c: _Config, key: str, layers: int) -> int:
    """d from a list of dense layer indices, which must be the leading layers 0..d-1."""
    value = c.raw(key, [])
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise SpecError(f"{c.where}.{key}: {F.show(value)} must be a list of layer indices")
    if sorted(value) != list(range(len(value))):
        raise SpecError(f"{c.where}.{key}: {F.show(value)}: trainest expresses dense layers only as the leading "
                        f"layers 0..d-1 of the {layers}")
    return len(value)


def _qwen_moe(c: _Config) -> dict:
    """Qwen2-MoE / Qwen3-MoE: layer i is MoE when (i + 1) % decoder_sparse_step == 0 and i is not in
    mlp_only_layers; Qwen2-MoE adds one shared expert of shared_expert_intermediate_size."""
    mapping = _dense(c)
    step = c.integer("decoder_sparse_step", 1)
    dense = _leading_dense(c, "mlp_only_layers", mapping["layers"])
    if dense and step > 1:
        raise SpecError(f"{c.where}: mlp_only_layers together with decoder_sparse_step={step} is not expressible "
                        f"(trainest's MoE layers follow the leading dense layers every layer_frequency layers)")
    moe: dict = {"experts": c.integer("num_experts"), "top_k": c.integer("num_experts_per_tok"),
                 "expert_ffn_hidden": c.integer("moe_intermediate_size"), "dense_layers": dense,
                 "layer_frequency": step}
    shared = c.integer("shared_expert_intermediate_size", 0, minimum=0)
    if shared:
        moe.update(shared_experts=1, shared_expert_ffn_hidden=shared)
    mapping["moe"] = moe
    return mapping


def _deepseek(c: _Config) -> dict:
    """DeepSeek-V2/V3 (and Kimi K2, which uses this architecture): MLA attention; the first
    first_k_dense_replace layers dense (intermediate_size), then MoE layers of n_routed_experts of
    moe_intermediate_size plus n_shared_experts of the same width. The config's head_dim (transformers
    sets it to qk_rope_head_dim) is not the attention width and is ignored."""
    mapping = _dense(c)
    mapping.pop("head_dim", None)
    mapping.update(_deepseek_moe(c))
    mapping["mla"] = {"q_lora_rank": c.integer("q_lora_rank", None), "kv_lora_rank": c.integer("kv_lora_rank"),
                      "qk_nope_head_dim": c.integer("qk_nope_head_dim"),
                      "qk_rope_head_dim": c.integer("qk_rope_head_dim"), "v_head_dim": c.integer("v_head_dim")}
    return mapping


def _glm4_moe(c: _Config) -> dict:
    """GLM-4.5/4.6 (Glm4MoeForCausalLM): DeepSeek-V3's MoE layout (leading dense layers, shared expert,
    group routing keys, MTP layers) on grouped-query attention with its own head_dim instead of MLA."""
    mapping = _dense(c)
    mapping.update(_deepseek_moe(c))
    return mapping


def _deepseek_moe(c: _Config) -> dict:
    """The MoE and multi-token-prediction keys DeepSeek-V3's config layout shares with GLM-4.5."""
    mapping: dict = {}
    frequency = c.integer("moe_layer_freq", 1)
    if frequency != 1:
        raise SpecError(f"{c.where}.moe_layer_freq: {frequency} is not expressible (DeepSeek's layer i is MoE when "
                        f"i % moe_layer_freq == 0, trainest counts every k-th layer after the dense ones); allowed: 1")
    width = c.integer("moe_intermediate_size")
    moe: dict = {"experts": c.integer("n_routed_experts"), "top_k": c.integer("num_experts_per_tok"),
                 "expert_ffn_hidden": width, "dense_layers": c.integer("first_k_dense_replace", 0, minimum=0)}
    shared = c.integer("n_shared_experts", 0, minimum=0)
    if shared:
        moe.update(shared_experts=shared, shared_expert_ffn_hidden=width)
    groups = c.integer("n_group", 1)
    picked = c.integer("topk_group", groups)
    if picked < groups:         # group-limited routing (DeepSeek-V3: 4 of 8 groups; Kimi K2: 1 of 1, none)
        moe.update(router_groups=groups, router_group_top_k=picked)
    mapping["moe"] = moe
    nextn = c.integer("num_nextn_predict_layers", 0, minimum=0)
    if nextn:                   # multi-token prediction (DeepSeek-V3: 1 MoE layer; Kimi K2: 0)
        mapping["mtp"] = {"depth": nextn, "pattern": "*E"}
    return mapping


def _llama4(c: _Config) -> dict:
    """Llama 4 (text model): every interleave_moe_layer_step-th layer MoE with one shared expert, all
    experts of intermediate_size; the other layers dense of intermediate_size_mlp."""
    mapping = _dense(c)
    width = mapping["ffn_hidden"]
    mapping["ffn_hidden"] = c.integer("intermediate_size_mlp")
    step = c.integer("interleave_moe_layer_step", 1)
    layers = mapping["layers"]
    if c.has("moe_layers"):
        listed = c.raw("moe_layers")
        if listed != list(range(step - 1, layers, step)):
            raise SpecError(f"{c.where}.moe_layers: {F.show(listed)} is not every {step}-th layer; trainest expresses "
                            f"only that layout")
    mapping["moe"] = {"experts": c.integer("num_local_experts"), "top_k": c.integer("num_experts_per_tok"),
                      "expert_ffn_hidden": width, "shared_experts": 1, "shared_expert_ffn_hidden": width,
                      "layer_frequency": step}
    return mapping


# architectures whose attention reads sliding_window (the others, Llama and OLMo among them, ignore the key)
SLIDING_WINDOW_ARCHITECTURES = ("MistralForCausalLM", "MixtralForCausalLM", "Phi3ForCausalLM", "Qwen2ForCausalLM",
                                "Qwen3ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "Gemma2ForCausalLM",
                                "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration", "GptOssForCausalLM")
# use_sliding_window gates the window (Qwen2/Qwen3 configs; transformers' default false)
GATED_WINDOW_ARCHITECTURES = ("Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM")
# every k-th layer global when the config has no layer_types (transformers' defaults of these configs)
ALTERNATING_WINDOW = {"Gemma2ForCausalLM": 2, "GptOssForCausalLM": 2}
LAYER_TYPES = {"full_attention": None, "sliding_attention": "sliding", "chunked_attention": "chunked"}


def _global_every(where: str, windowed: list[bool]) -> int:
    """k of a per-layer list (True = windowed): 0 when every layer is windowed, else the k for which layer i
    is global exactly when (i + 1) mod k = 0; SpecError for another layout (trainest counts every k-th)."""
    if all(windowed):
        return 0
    first = windowed.index(False) + 1
    if first >= 2 and all(w == bool((i + 1) % first) for i, w in enumerate(windowed)):
        return first
    layout = "".join("w" if w else "G" for w in windowed)
    raise SpecError(f"{where}: windowed (w) and global (G) layers {layout} are not expressible: trainest's "
                    f"attention_window makes every k-th layer global (layers k-1, 2k-1, ...) or none")


def attention_window_mapping(c: _Config, layers: int) -> dict | None:
    """The model schema's attention_window of a config (the module docstring lists the keys), None for
    full causal attention on every layer."""
    arch = c.architecture
    if c.has("layer_types"):
        types = c.raw("layer_types")
        if not isinstance(types, list) or len(types) != layers or any(t not in LAYER_TYPES for t in types):
            raise SpecError(f"{c.where}.layer_types: {F.show(types)} must list one of {', '.join(LAYER_TYPES)} for "
                            f"each of the {layers} layers")
        kinds = {LAYER_TYPES[t] for t in types} - {None}
        if not kinds:
            return None
        if len(kinds) > 1:
            raise SpecError(f"{c.where}.layer_types: sliding and chunked layers in one model are not expressible; "
                            f"allowed: one window kind beside full_attention")
        kind = kinds.pop()
        size = c.integer("sliding_window" if kind == "sliding" else "attention_chunk_size")
        every = _global_every(f"{c.where}.layer_types", [LAYER_TYPES[t] is not None for t in types])
        return {"size": size, "kind": kind, "global_every": every}
    if arch.startswith("Llama4"):
        chunk = c.integer("attention_chunk_size", None)
        if chunk is None:
            return None
        rope = c.raw("no_rope_layers", None)
        if rope:
            if not isinstance(rope, list) or len(rope) != layers or any(v not in (0, 1) for v in rope):
                raise SpecError(f"{c.where}.no_rope_layers: {F.show(rope)} must give 1 (RoPE, chunked) or 0 (NoPE, "
                                f"global) for each of the {layers} layers")
            every = _global_every(f"{c.where}.no_rope_layers", [v == 1 for v in rope])
        else:
            every = c.integer("no_rope_layer_interval", 4)
        return _window_of(chunk, "chunked", every, layers)
    if arch not in SLIDING_WINDOW_ARCHITECTURES or not c.has("sliding_window"):
        return None
    if arch in GATED_WINDOW_ARCHITECTURES:
        if not c.boolean("use_sliding_window", False):
            return None
        first = c.integer("max_window_layers", 0, minimum=0)     # layers from this index on are windowed
        if first >= layers:
            return None
        if first:
            raise SpecError(f"{c.where}.max_window_layers: {first} full-attention layers before {layers - first} "
                            f"windowed ones are not expressible (trainest's attention_window makes every k-th layer "
                            f"global); allowed: 0 or at least num_hidden_layers={layers}")
    size = c.integer("sliding_window")
    if arch.startswith("Gemma3"):
        every = c.integer("sliding_window_pattern", 6)
    else:
        every = ALTERNATING_WINDOW.get(arch, 0)
    return _window_of(size, "sliding", every, layers)


def _window_of(size: int, kind: str, every: int, layers: int) -> dict | None:
    """The attention_window mapping of a window on all but every k-th of `layers` layers: None when every
    layer is global (k = 1), global_every 0 when none is (k = 0 or k > layers)."""
    if every == 1:
        return None
    return {"size": size, "kind": kind, "global_every": every if every <= layers else 0}


Reader = Callable[[_Config], dict]
# architecture -> (reader, read the nested text_config of a multimodal config)
NEMOTRON_H_MLP_ACTIVATIONS = ("relu2",)   # squared ReLU: a non-gated 2-matrix MLP (trainest's `gelu` MLP)


def _nemotron_h(c: _Config) -> dict:
    """Nemotron-H and Nemotron 3 (NemotronHForCausalLM): a block pattern (hybrid_override_pattern: M
    Mamba-2, * attention, - dense MLP, E MoE MLP), one block per num_hidden_layers; Mamba-2 mamba_num_heads,
    mamba_head_dim, ssm_state_size, n_groups, conv_kernel, chunk_size (default 128); squared-ReLU MLPs and
    experts (2 matrices); no position embedding."""
    heads = c.integer("num_attention_heads")
    act = c.raw("mlp_hidden_act", "relu2")
    if not isinstance(act, str) or act.lower() not in NEMOTRON_H_MLP_ACTIVATIONS:
        raise SpecError(f"{c.where}.mlp_hidden_act: {F.show(act)} is not an MLP activation trainest knows for "
                        f"{c.architecture}; allowed: {', '.join(NEMOTRON_H_MLP_ACTIVATIONS)}")
    pattern = c.raw("hybrid_override_pattern")
    if not isinstance(pattern, str):
        raise SpecError(f"{c.where}.hybrid_override_pattern: {F.show(pattern)} must be a string of block kinds")
    dropout = any(F.number(c.raw(k, 0.0), f"{c.where}.{k}", allow_zero=True) > 0 for k in DROPOUT_KEYS)
    mapping: dict[str, Any] = {
        "layers": c.integer("num_hidden_layers"), "hidden": c.integer("hidden_size"), "heads": heads,
        "kv_heads": c.integer("num_key_value_heads", heads), "vocab": c.integer("vocab_size"), "mlp": "gelu",
        "seq_len": min(c.integer("max_position_embeddings", HF_SEQ_LEN_CAP), HF_SEQ_LEN_CAP),
        "tied_embeddings": c.boolean("tie_word_embeddings", False), "dropout": dropout, "positional": "none",
        "hybrid": {"pattern": pattern, "mamba_heads": c.integer("mamba_num_heads"),
                   "mamba_head_dim": c.integer("mamba_head_dim"), "state_dim": c.integer("ssm_state_size"),
                   "groups": c.integer("n_groups"), "conv_kernel": c.integer("conv_kernel", 4),
                   "chunk": c.integer("chunk_size", 128)},
    }
    if c.has("head_dim"):
        mapping["head_dim"] = c.integer("head_dim")
    if "-" in pattern:
        mapping["ffn_hidden"] = c.integer("intermediate_size")
    if "E" in pattern:
        moe: dict[str, Any] = {"experts": c.integer("n_routed_experts"), "top_k": c.integer("num_experts_per_tok"),
                               "expert_ffn_hidden": c.integer("moe_intermediate_size")}
        shared = c.integer("n_shared_experts", 0, minimum=0)
        shared_width = c.integer("moe_shared_expert_intermediate_size", 0, minimum=0)
        if shared_width and not shared:          # Nemotron 3 configs give the shared expert's width alone
            shared = 1
        if shared:
            moe["shared_experts"] = shared
            moe["shared_expert_ffn_hidden"] = shared_width or moe["expert_ffn_hidden"]
        latent_keys = sorted(k for k in c.data if "latent" in k and k != "moe_latent_size")
        if latent_keys:       # a LatentMoE key this reader does not know: not read silently as plain experts
            raise SpecError(f"{c.where}.{latent_keys[0]}: trainest reads LatentMoE's latent width from "
                            f"moe_latent_size only; give the model as YAML with moe.latent_size")
        if c.raw("moe_latent_size", None) is not None:
            moe["latent_size"] = c.integer("moe_latent_size")
        mapping["moe"] = moe
    return mapping


ARCHITECTURES: dict[str, tuple[Reader, bool]] = {
    "NemotronHForCausalLM": (_nemotron_h, False),
    "LlamaForCausalLM": (_llama, False),
    "MistralForCausalLM": (_llama, False),
    "Qwen2ForCausalLM": (_llama, False),
    "Qwen3ForCausalLM": (_llama, False),
    "Phi3ForCausalLM": (_llama, False),       # Phi-3 mini/medium, Phi-3.5 mini, Phi-4 (fused qkv, gate_up)
    "OlmoForCausalLM": (_llama, False),
    "Olmo2ForCausalLM": (_llama, False),      # OLMo 2: QK-norms, not counted
    "GraniteForCausalLM": (_llama, False),    # IBM Granite 3: Llama shapes with scalar multipliers (no matmul)
    "GemmaForCausalLM": (_gemma, False),
    "Gemma2ForCausalLM": (_gemma, False),
    "Gemma3ForCausalLM": (_gemma, False),
    "Gemma3ForConditionalGeneration": (_gemma, True),
    "MixtralForCausalLM": (_mixtral, False),
    "Qwen2MoeForCausalLM": (_qwen_moe, False),
    "Qwen3MoeForCausalLM": (_qwen_moe, False),
    "DeepseekV2ForCausalLM": (_deepseek, False),
    "DeepseekV3ForCausalLM": (_deepseek, False),
    "Glm4MoeForCausalLM": (_glm4_moe, False),
    "GptOssForCausalLM": (_gpt_oss, False),
    "Llama4ForCausalLM": (_llama4, False),
    "Llama4ForConditionalGeneration": (_llama4, True),
}
NOT_EXPRESSIBLE = {
    **dict.fromkeys(("JambaForCausalLM", "FalconH1ForCausalLM", "Zamba2ForCausalLM"),
                    "hybrid Mamba state-space / attention layers other than Nemotron-H's block pattern "
                    "(NemotronHForCausalLM is supported)"),
    **dict.fromkeys(("MambaForCausalLM", "Mamba2ForCausalLM"), "state-space (Mamba) layers, no attention"),
    "RecurrentGemmaForCausalLM": "recurrent (Griffin) layers; trainest models transformer layers only",
}


# ------------------------------------------------------------------------------------------ entry

def hf_model_mapping(data: dict, where: str) -> dict:
    """The model mapping (specs/README.md schema) of a parsed Hugging Face config.json; `where` names it
    in errors (and is its source). `catalog.model_from_hf_config` validates it into a Model."""
    if not isinstance(data, dict):
        raise SpecError(f"{where}: a config.json must hold an object (key: value), not a {type(data).__name__}")
    archs = data.get("architectures")
    if not isinstance(archs, list) or not archs or not all(isinstance(a, str) for a in archs):
        raise SpecError(f"{where}.architectures: {F.show(archs)} must be a list naming the model class "
                        f"(e.g. ['LlamaForCausalLM'])")
    arch = archs[0]
    if arch in NOT_EXPRESSIBLE:
        raise SpecError(f"{where}.architectures: {arch} is not expressible in trainest: {NOT_EXPRESSIBLE[arch]}")
    if arch not in ARCHITECTURES:
        raise SpecError(f"{where}.architectures: {arch!r} is not supported{did_you_mean(arch, ARCHITECTURES)}; "
                        f"supported: {', '.join(sorted(ARCHITECTURES))}")
    reader, nested = ARCHITECTURES[arch]
    config, config_where = data, where
    if nested and "text_config" in data:
        config, config_where = data["text_config"], f"{where}.text_config"
        if not isinstance(config, dict):
            raise SpecError(f"{config_where}: {F.show(config)} must be an object (key: value)")
        if "tie_word_embeddings" not in config and "tie_word_embeddings" in data:
            config = {**config, "tie_word_embeddings": data["tie_word_embeddings"]}
    c = _Config(config, config_where, arch)
    mapping = reader(c)
    if mapping.get("hybrid") is None:
        window = attention_window_mapping(c, mapping["layers"])
        if window is not None:
            mapping["attention_window"] = window
    name = data.get("_name_or_path")
    mapping["name"] = name if isinstance(name, str) and name.strip() else _default_name(where)
    mapping["source"] = f"Hugging Face config.json {where} ({arch})"
    return mapping


# the config.json keys a model-schema key is read from (the first the file has is named in an error)
HF_KEYS = {"layers": ("num_hidden_layers",), "hidden": ("hidden_size",), "ffn_hidden": ("intermediate_size",),
           "heads": ("num_attention_heads",), "kv_heads": ("num_key_value_heads", "num_attention_heads"),
           "vocab": ("vocab_size",), "head_dim": ("head_dim",), "seq_len": ("max_position_embeddings",),
           "moe.experts": ("num_local_experts", "num_experts", "n_routed_experts"),
           "moe.top_k": ("num_experts_per_tok",),
           "moe.expert_ffn_hidden": ("moe_intermediate_size", "intermediate_size"),
           "moe.shared_experts": ("n_shared_experts",),
           "moe.shared_expert_ffn_hidden": ("shared_expert_intermediate_size", "moe_shared_expert_intermediate_size"),
           "moe.dense_layers": ("first_k_dense_replace", "mlp_only_layers"),
           "moe.router_groups": ("n_group",), "moe.router_group_top_k": ("topk_group",)}


def hf_model(data: dict, where: str) -> Any:
    """The validated Model of a parsed config.json: `hf_model_mapping` through `catalog.model_from_mapping`,
    whose errors name the file's own key (`num_experts_per_tok`, not the schema's `moe.top_k`)."""
    import re

    from trainest.models import model_from_mapping
    mapping = hf_model_mapping(data, where)
    try:
        return model_from_mapping(mapping, where)
    except SpecError as exc:
        nested = data.get("text_config")
        config: dict = nested if isinstance(nested, dict) else data
        prefix = where + ("" if config is data else ".text_config")

        def named(m: re.Match) -> str:
            keys = [k for k in HF_KEYS.get(m.group(1), ()) if k in config]
            return f"{prefix}.{keys[0]} (trainest's {m.group(1)})" if keys else m.group(0)
        text = re.sub(re.escape(where) + r"\.((?:moe\.)?[a-z_]+)", named, str(exc))
        raise SpecError(text) from None


def _default_name(where: str) -> str:
    """The folder a config.json sits in (its model id, usually; the current folder for a bare `config.json`), else
    the file's stem."""
    path = Path(where)
    if path.name == "config.json" and path.absolute().parent.name:
        return path.absolute().parent.name
    return path.stem


class _StrictJsonError(Exception):
    """A config.json that JSON reads without a word but a person would not mean."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict, refusing a key given twice (json.loads would keep the last one)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _StrictJsonError(f"key {key} is given twice in one object; give it once")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    """NaN, Infinity and -Infinity are not JSON numbers (Python's json reads them)."""
    raise _StrictJsonError(f"{name} is not a finite number; allowed: finite numbers in decimal digits")


def read_hf_config(path: Path) -> Any:
    """Read a config.json file: its parsed JSON (errors name the file); `hf_model` makes the Model."""
    name = F.show(str(path), F.MAX_SHOWN_PATH_CHARS)
    try:
        if not path.exists():
            raise SpecError(f"model file {name} does not exist")
        if path.is_dir():
            raise SpecError(f"model file {name} is a directory, not a config.json")
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise SpecError(f"model file {name} is too large for a config.json (over {MAX_CONFIG_BYTES // 2**20} MiB)")
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"model file {name} is not UTF-8 text (binary file?)") from None
    except OSError as exc:   # e.g. a name too long for the file system
        raise SpecError(f"model file {name} cannot be read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except _StrictJsonError as exc:
        raise SpecError(f"model file {name}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"model file {name} is not valid JSON at line {exc.lineno}: {exc.msg}") from None
    except ValueError:       # an integer literal over Python's 4300-digit conversion limit
        raise SpecError(f"model file {name} holds a number too long to read") from None
    except RecursionError:
        raise SpecError(f"model file {name} is nested too deeply") from None
    return data
