"""Model entries of the catalog (`specs/models/*.yaml`, Hugging Face configs through
`trainest.hf_config`): the transformer's shape, its mixture-of-experts and multi-head latent attention
blocks, parameter counts (total and active), validated once (`model_from_mapping`); CLI shape overrides
(`with_shape`). Loading by name or path is `trainest.catalog.load_model`."""

from __future__ import annotations

from typing import Any

from trainest import fields as F
from trainest.choices import MLPS, WINDOW_KINDS
from trainest.errors import SpecError, at, head
from trainest.knobs import CLI_MODEL
from trainest.model_blocks import (  # noqa: F401 (re-exported: the model's records are found here)
    HYBRID_BLOCKS,
    MLA,
    MTP,
    AttentionWindow,
    Hybrid,
    Mamba,
    MoE,
)
from trainest.record import NamedTuple

MLP_KINDS = MLPS



class Model(NamedTuple):
    """A decoder-only transformer's shape: dense, or with mixture-of-experts MLPs (`moe`) and/or
    multi-head latent attention (`mla`). Biases, attention sinks and QK-norms are not counted."""

    name: str
    layers: int
    hidden: int
    ffn_hidden: int             # f: MLP width of the dense layers (with `moe` and no dense layer: f_e, unused)
    heads: int
    kv_heads: int
    vocab: int
    mlp: str                    # gelu (2 matrices) | swiglu (3 matrices: any gated MLP, experts included)
    seq_len: int                # default sequence length
    tied_embeddings: bool
    source: str
    head_dim: int               # d_h; usually h/a (MaxText synthetic models use 128 regardless; MLA: d_n + d_r)
    dropout: bool = True        # trained with dropout (masks stored, extra traffic); modern LLMs: false
    moe: MoE | None = None      # mixture-of-experts MLPs; None = every layer dense
    mla: MLA | None = None      # multi-head latent attention; None = standard multi-head / grouped-query attention
    positional: str = "learned"   # POSITIONALS: rope (rotary on Q and K every pass) | learned | alibi | none
    hybrid: Hybrid | None = None  # a block pattern of Mamba-2, attention and MLP blocks; None = transformer layers
    mtp: MTP | None = None        # multi-token prediction modules after the last layer; None = none
    attention_window: AttentionWindow | None = None   # local (sliding/chunked) attention; None = full causal everywhere

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.mlp == "swiglu" else 2

    # --- layer layout

    @property
    def moe_layers(self) -> int:
        """L_m = (L - d) // k: layers whose MLP is a mixture of experts (0 for a dense model); a hybrid
        model's E blocks."""
        if self.hybrid is not None:
            return self.hybrid.count("E")
        if self.moe is None:
            return 0
        return (self.layers - self.moe.dense_layers) // self.moe.layer_frequency

    @property
    def dense_layers_count(self) -> int:
        """L_d = L - L_m: layers with the dense MLP of width f; a hybrid model's - blocks."""
        if self.hybrid is not None:
            return self.hybrid.count("-")
        return self.layers - self.moe_layers

    @property
    def attention_layers(self) -> int:
        """L_a: layers (blocks) with attention: every layer of a transformer, a hybrid model's * blocks."""
        return self.layers if self.hybrid is None else self.hybrid.count("*")

    @property
    def windowed_layers(self) -> int:
        """L_w: attention layers with a sliding or chunked window (0 without `attention_window`)."""
        w = self.attention_window
        return 0 if w is None else w.windowed_layers(self.attention_layers)

    @property
    def mamba(self) -> Mamba:
        """A hybrid model's Mamba-2 mixer (ValueError for a transformer)."""
        if self.hybrid is None:
            raise ValueError(f"{self.name} has no Mamba-2 blocks")
        return self.hybrid.mamba

    def block_count(self, kind: str) -> int:
        """A hybrid model's blocks of `kind` (M, *, E, -; ValueError for a transformer)."""
        if self.hybrid is None:
            raise ValueError(f"{self.name} is not a hybrid model")
        return self.hybrid.count(kind)

    @property
    def mamba_layers(self) -> int:
        """L_s: a hybrid model's Mamba-2 blocks (0 for a transformer)."""
        return 0 if self.hybrid is None else self.hybrid.count("M")

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer `index` (0-based) is MoE: index >= d and (index - d + 1) mod k = 0 (hybrid: an E block)."""
        if self.hybrid is not None:
            return self.hybrid.pattern[index] == "E"
        if self.moe is None or index < self.moe.dense_layers:
            return False
        return (index - self.moe.dense_layers + 1) % self.moe.layer_frequency == 0

    # --- parameters of the parts of a layer [params]

    @property
    def attention_params(self) -> int:
        """Weights of one attention block [params].

        Standard / grouped-query: Q h·a·d_h, K and V 2·h·g·d_h, output a·d_h·h.
        MLA: query h·r_q + r_q (latent norm) + r_q·a·(d_n + d_r), or h·a·(d_n + d_r) when r_q is None;
        KV down-projection h·(r_kv + d_r), KV latent norm r_kv, KV up-projection r_kv·a·(d_n + d_v),
        output a·d_v·h (DeepSeek-V2, arXiv:2405.04434, §2.1).
        """
        h, a = self.hidden, self.heads
        if self.mla is None:
            qkv = h * (a + 2 * self.kv_heads) * self.head_dim
            return qkv + a * self.head_dim * h
        m = self.mla
        if m.q_lora_rank is None:
            q = h * a * m.qk_head_dim
        else:
            q = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * a * m.qk_head_dim
        kv_down = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank          # latent + shared RoPE key, norm
        kv_up = m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim)
        kv = kv_down + kv_up
        return q + kv + a * m.v_head_dim * h

    @property
    def layer_norm_params(self) -> int:
        """The two RMS/LayerNorm gains of a layer, 2h [params]."""
        return 2 * self.hidden

    @property
    def dense_mlp_params(self) -> int:
        """k·h·f: the MLP of a dense layer [params]."""
        return self.mlp_matrices * self.hidden * self.ffn_hidden

    @property
    def expert_hidden(self) -> int:
        """h_e: the width the routed experts read and write: h, or LatentMoE's latent l (Nemotron 3 Super:
        its experts run on a 1024-wide projection of the 4096-wide hidden state) [elements]."""
        if self.moe is None or self.moe.latent_size is None:
            return self.hidden
        return self.moe.latent_size

    @property
    def params_per_expert(self) -> int:
        """k·h_e·f_e: one routed expert's MLP [params] (0 for a dense model)."""
        return 0 if self.moe is None else self.mlp_matrices * self.expert_hidden * self.moe.expert_ffn_hidden

    @property
    def latent_params_per_moe_layer(self) -> int:
        """2·h·l: LatentMoE's down- and up-projection around the routed experts (0 without a latent) [params]."""
        return 0 if self.moe is None or self.moe.latent_size is None else 2 * self.hidden * self.moe.latent_size

    @property
    def router_params(self) -> int:
        """h·E: the router (gate) of one MoE layer [params] (its bias or score-correction bias ignored), with
        LatentMoE's latent projections (`latent_params_per_moe_layer`: every token uses them too)."""
        return 0 if self.moe is None else self.hidden * self.moe.experts + self.latent_params_per_moe_layer

    @property
    def expert_params_per_moe_layer(self) -> int:
        """E·k·h·f_e: the routed experts of one MoE layer [params]."""
        return 0 if self.moe is None else self.moe.experts * self.params_per_expert

    @property
    def shared_expert_params_per_moe_layer(self) -> int:
        """S·k·h·f_s: the shared experts of one MoE layer [params]."""
        if self.moe is None:
            return 0
        return self.moe.shared_experts * self.mlp_matrices * self.hidden * self.moe.shared_width

    # --- parameters per layer [params]

    @property
    def params_per_dense_layer(self) -> int:
        """Weights of one dense layer: attention + k·h·f + 2h (for a dense standard-attention model:
        QKV h·(a + 2g)·d_h, output a·d_h·h, MLP k·h·f, two norms 2h; biases ignored)."""
        return self.attention_params + self.dense_mlp_params + self.layer_norm_params

    @property
    def params_per_moe_layer(self) -> int:
        """Weights of one MoE layer: attention + router h·E + routed experts E·k·h·f_e + shared experts
        S·k·h·f_s + 2h (0 for a dense model)."""
        if self.moe is None:
            return 0
        return (self.attention_params + self.router_params + self.expert_params_per_moe_layer
                + self.shared_expert_params_per_moe_layer + self.layer_norm_params)

    @property
    def active_params_per_moe_layer(self) -> int:
        """Weights one token uses in a MoE layer: attention + router h·E + K·k·h·f_e + S·k·h·f_s + 2h."""
        if self.moe is None:
            return 0
        return (self.attention_params + self.router_params + self.moe.top_k * self.params_per_expert
                + self.shared_expert_params_per_moe_layer + self.layer_norm_params)

    @property
    def params_per_layer(self) -> float:
        """Weights of one layer [params]. Dense model: params_per_dense_layer = QKV h·(a + 2g)·d_h +
        output a·d_h·h + MLP k·h·f + two norms 2h (biases ignored). MoE model: the mean over the layers,
        (L_d·P_dense + L_m·P_moe) / L, so that L·params_per_layer + embedding_params = params. Hybrid:
        the mean over the blocks (`hybrid_layer_params`)."""
        if self.hybrid is not None:
            return self.hybrid_layer_params(active=False) / self.layers
        if self.moe is None:
            return self.params_per_dense_layer
        return (self.dense_layers_count * self.params_per_dense_layer
                + self.moe_layers * self.params_per_moe_layer) / self.layers

    def hybrid_layer_params(self, active: bool) -> float:
        """Weights of all of a hybrid model's blocks, each with its one pre-norm h [params]:
        L_s·(mixer + h) + L_a·(attention + h) + L_d·(k·h·f + h) + L_m·(router + E (active: K)·k·h·f_e +
        S·k·h·f_s + h) (`block_params` of each kind, times its count)."""
        if self.hybrid is None:
            raise ValueError(f"{self.name} is not a hybrid model")
        return sum(self.hybrid.count(k) * self.block_params(k, active) for k in HYBRID_BLOCKS if self.hybrid.count(k))

    @property
    def expert_params_per_layer(self) -> float:
        """L_m·E·k·h·f_e / L: the routed experts' weights per layer, as a mean over the layers [params]
        (the part of params_per_layer that expert parallelism shards; 0 for a dense model)."""
        return 0.0 if self.moe is None else self.expert_params / self.layers

    def block_params(self, kind: str, active: bool = False) -> float:
        """Weights of one block of `kind` (M, *, E, -) with its pre-norm h [params] (a transformer layer is
        a * block and a - or E block)."""
        h = self.hidden
        if kind == "M":
            return float(self.mamba.params(h) + h)
        if kind == "*":
            return float(self.attention_params + h)
        if kind == "-":
            return float(self.dense_mlp_params + h)
        if self.moe is None:
            raise ValueError(f"{self.name} has no mixture-of-experts layers")
        experts = self.moe.top_k if active else self.moe.experts
        return float(self.router_params + experts * self.params_per_expert + self.shared_expert_params_per_moe_layer
                     + h)

    @property
    def mtp_module_params(self) -> float:
        """Weights of one multi-token-prediction module: its blocks, the 2h -> h projection of the normed
        hidden state and next-token embedding, and those two norms and its final norm 3h (the embedding
        and the output head are the model's, shared) [params]; 0 without MTP."""
        if self.mtp is None:
            return 0.0
        h = self.hidden
        return sum(self.block_params(k) for k in self.mtp.pattern) + 2.0 * h * h + 3.0 * h

    @property
    def mtp_layers(self) -> float:
        """The MTP modules in layers of the model: depth × (1 for a transformer's `*E`/`*-`, its blocks for a
        hybrid model) (0 without MTP): what the balanced pipeline split counts on the last stage."""
        if self.mtp is None:
            return 0.0
        return float(self.mtp.depth * (len(self.mtp.pattern) if self.hybrid is not None else 1))

    @property
    def mtp_params(self) -> float:
        """All multi-token-prediction weights: mtp_module_params × the modules with weights [params]
        (not in `params`: model cards count the main model; DeepSeek-V3 671 B + 14 B MTP)."""
        return 0.0 if self.mtp is None else self.mtp.modules_with_weights * self.mtp_module_params

    @property
    def mtp_expert_params(self) -> float:
        """The routed experts among mtp_params (what expert parallelism shards) [params]."""
        if self.mtp is None or self.moe is None:
            return 0.0
        return self.mtp.modules_with_weights * self.mtp.pattern.count("E") * self.expert_params_per_moe_layer

    # --- attention widths [elements]

    @property
    def qk_head_dim(self) -> int:
        """d_qk: query/key width of one head (d_h; MLA: d_n + d_r)."""
        return self.head_dim if self.mla is None else self.mla.qk_head_dim

    @property
    def v_head_dim(self) -> int:
        """d_v: value (and attention output) width of one head (d_h; MLA: v_head_dim)."""
        return self.head_dim if self.mla is None else self.mla.v_head_dim

    # --- whole model [params]

    @property
    def embedding_params(self) -> float:
        """Input embedding V·h, plus the output layer V·h when not tied, plus the final norm."""
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2) + self.hidden

    @property
    def expert_params(self) -> int:
        """L_m·E·k·h·f_e: the routed experts of all MoE layers [params] (what expert parallelism shards)."""
        return self.moe_layers * self.expert_params_per_moe_layer

    @property
    def params(self) -> float:
        """Total weights: L·params_per_layer + embedding_params (dense), or
        L_d·P_dense + L_m·P_moe + embedding_params (MoE) [params]."""
        if self.hybrid is not None:
            return self.hybrid_layer_params(active=False) + self.embedding_params
        if self.moe is None:
            return self.layers * self.params_per_layer + self.embedding_params
        return (self.dense_layers_count * self.params_per_dense_layer + self.moe_layers * self.params_per_moe_layer
                + self.embedding_params)

    @property
    def active_params(self) -> float:
        """Weights one token uses: L_d·P_dense + L_m·P_moe_active + embedding_params [params]; = params for
        a dense model. Both embedding tables count (some model cards leave out the input embedding)."""
        if self.hybrid is not None:
            return self.hybrid_layer_params(active=True) + self.embedding_params
        if self.moe is None:
            return self.params
        return (self.dense_layers_count * self.params_per_dense_layer
                + self.moe_layers * self.active_params_per_moe_layer + self.embedding_params)


def unmodelled_features(model: Model) -> tuple[str, ...]:
    """What `model` has that the step-time and memory model does not compute: empty for every model
    the schema can express (dense, mixture-of-experts and multi-head latent attention models are all
    modelled: docs/model.md §15). Kept for features added to the schema before their physics."""
    del model
    return ()


POSITIONALS = ("rope", "learned", "alibi", "none")   # position encodings (only rope costs traffic, docs/model.md §2.5)
MODEL_REQUIRED = ("layers", "hidden", "ffn_hidden", "heads", "vocab")
MODEL_OPTIONAL = ("name", "display_name", "source", "kv_heads", "mlp", "seq_len", "tied_embeddings", "aliases", "notes",
                  "params_b", "head_dim", "params", "active_params", "dropout", "moe", "mla", "positional", "hybrid",
                  "mtp", "attention_window")
MOE_REQUIRED = ("experts", "top_k", "expert_ffn_hidden")
MOE_OPTIONAL = ("shared_experts", "shared_expert_ffn_hidden", "dense_layers", "layer_frequency", "capacity_factor",
                "imbalance", "router_groups", "router_group_top_k", "latent_size", "expert_bias", "glu_clamp")
MLA_REQUIRED = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
MLA_OPTIONAL = ("q_lora_rank",)
MTP_REQUIRED = ("depth",)
MTP_OPTIONAL = ("pattern", "shared")
HYBRID_REQUIRED = ("pattern", "mamba_heads", "mamba_head_dim", "state_dim", "groups")
HYBRID_OPTIONAL = ("conv_kernel", "chunk")
WINDOW_REQUIRED = ("size",)
WINDOW_OPTIONAL = ("kind", "global_every")
MAX_WINDOW_TOKENS = 10**8      # the sequence lengths trainest accepts (scenario seq_len)


def _window_from(data: object, where: str, attention_layers: int) -> AttentionWindow:
    """Validate an `attention_window:` mapping (specs/README.md): size a positive whole number of tokens;
    kind sliding | chunked (default sliding); global_every 0 (every attention layer windowed, the default)
    or 2..L_a (every k-th attention layer global: at least one layer of each kind)."""
    data = F.check_keys(data, where, WINDOW_REQUIRED, WINDOW_OPTIONAL)
    try:
        size = F.integer(data["size"], at(where, "size"), maximum=MAX_WINDOW_TOKENS)
    except SpecError:
        raise SpecError(f"{at(where, 'size')}: {F.show(data['size'])} must be a positive whole number of tokens, at "
                        f"most "
                        f"{MAX_WINDOW_TOKENS:,} (the window or chunk length, e.g. 128 or 4096)") from None
    kind = F.choice(F.given(data, "kind", "sliding"), at(where, "kind"), WINDOW_KINDS)
    every_value = F.given(data, "global_every", 0)
    every = F.integer(every_value, at(where, "global_every"), minimum=0, maximum=10**5)
    if every == 1 or every > attention_layers:
        allowed = "0 (every layer windowed)" + (f" or 2 to {attention_layers} (every k-th layer keeps full attention)"
                                                if attention_layers >= 2 else "")
        raise SpecError(f"{at(where, 'global_every')}: {F.show(every_value)} does not fit the {attention_layers} "
                        f"attention "
                        f"layers; allowed: {allowed}" + ("; 1 would make every layer global: leave attention_window out"
                                                         if every == 1 else ""))
    return AttentionWindow(size=size, kind=kind, global_every=every)


def _mtp_from(data: object, where: str, moe: MoE | None, hybrid: Hybrid | None) -> MTP:
    """Validate an `mtp:` mapping: depth >= 1; the pattern of one module's blocks (default *E with moe,
    else *-): a transformer's one layer (*E needs the model's moe), a hybrid model's blocks of the kinds
    its own pattern has; shared (default false)."""
    data = F.check_keys(data, where, MTP_REQUIRED, MTP_OPTIONAL)
    depth = F.integer(data["depth"], at(where, "depth"), maximum=64)
    pattern = F.text(F.given(data, "pattern", "*E" if moe is not None else "*-"), at(where, "pattern")).strip()
    if hybrid is None:
        allowed = ("*E", "*-") if moe is not None else ("*-",)
        ok = pattern in allowed
        text = " or ".join(allowed) + " (one transformer layer" + (": MoE or dense)" if moe is not None else ")")
    else:
        ok = bool(pattern) and set(pattern) <= set(hybrid.pattern)
        text = f"blocks of the kinds the model's pattern has ({''.join(sorted(set(hybrid.pattern)))})"
    if not ok:
        raise SpecError(f"{at(where, 'pattern')}: {F.show(pattern)} must be one module's blocks: {text}"
                        + ("; E needs the model's moe" if "E" in pattern and moe is None else ""))
    return MTP(depth=depth, pattern=pattern, shared=F.boolean(F.given(data, "shared", False), at(where, "shared")))


def _hybrid_from(data: object, where: str, layers: int, moe: MoE | None) -> Hybrid:
    """Validate a `hybrid:` mapping (specs/README.md): a pattern of `layers` blocks, its E blocks
    with the model's `moe`, Mamba-2 groups that divide its heads."""
    data = F.check_keys(data, where, HYBRID_REQUIRED, HYBRID_OPTIONAL)
    pattern = F.text(data["pattern"], at(where, "pattern")).strip()
    bad = sorted(set(pattern) - set(HYBRID_BLOCKS))
    if not pattern or bad:
        allowed = ", ".join(f"{k} ({v})" for k, v in HYBRID_BLOCKS.items())
        raise SpecError(f"{at(where, 'pattern')}: {F.show(data['pattern'])} must be one character per block, each one "
                        f"of "
                        f"{allowed}")
    if len(pattern) != layers:
        raise SpecError(f"{at(where, 'pattern')}: {len(pattern)} blocks but layers={layers}; a hybrid model's layers "
                        f"are "
                        f"its pattern's blocks (set layers: {len(pattern)})")
    if ("E" in pattern) != (moe is not None):
        raise SpecError(f"{at(where, 'pattern')}: " + ("E (MoE) blocks need the model's moe: mapping" if moe is None
                                                 else "has no E block, but the model has a moe: mapping"))
    if moe is not None and (moe.dense_layers or moe.layer_frequency != 1):
        raise SpecError(f"{head(where)}moe.dense_layers and moe.layer_frequency must be left out with a hybrid pattern "
                        f"(its E blocks say which blocks are MoE)")
    heads = F.integer(data["mamba_heads"], at(where, "mamba_heads"), maximum=10**5)
    groups = F.integer(data["groups"], at(where, "groups"), maximum=10**5)
    if heads % groups:
        raise SpecError(f"{at(where, 'groups')}: {groups} must divide mamba_heads={heads} (each group's B and C serve "
                        f"mamba_heads/groups heads)")
    mamba = Mamba(heads=heads, head_dim=F.integer(data["mamba_head_dim"], at(where, "mamba_head_dim"), maximum=10**5),
                  state_dim=F.integer(data["state_dim"], at(where, "state_dim"), maximum=10**5), groups=groups,
                  conv_kernel=F.integer(F.given(data, "conv_kernel", 4), at(where, "conv_kernel"), maximum=64),
                  chunk=F.integer(F.given(data, "chunk", 128), at(where, "chunk"), maximum=10**5))
    return Hybrid(pattern=pattern, mamba=mamba)


def _moe_from(data: object, where: str, layers: int) -> MoE:
    """Validate a `moe:` mapping (specs/README.md) against the model's layer count."""
    data = F.check_keys(data, where, MOE_REQUIRED, MOE_OPTIONAL)
    experts = F.integer(data["experts"], at(where, "experts"), maximum=10**6)
    top_k = F.integer(data["top_k"], at(where, "top_k"), maximum=10**6)
    if top_k > experts:
        raise SpecError(f"{at(where, 'top_k')}: {top_k} must be at most experts={experts} (each token goes to top_k "
                        f"different experts)")
    shared = F.integer(F.given(data, "shared_experts", 0), at(where, "shared_experts"), minimum=0, maximum=10**6)
    width = F.integer(data["expert_ffn_hidden"], at(where, "expert_ffn_hidden"), maximum=10**8)
    shared_width = F.integer(data.get("shared_expert_ffn_hidden"), at(where, "shared_expert_ffn_hidden"),
                             maximum=10**8, allow_none=True)
    if shared_width is not None and shared == 0:
        raise SpecError(f"{at(where, 'shared_expert_ffn_hidden')}: {shared_width} is given but shared_experts is 0; "
                        f"set shared_experts (at least 1) or remove shared_expert_ffn_hidden")
    dense = F.integer(F.given(data, "dense_layers", 0), at(where, "dense_layers"), minimum=0, maximum=10**5)
    if dense >= layers:
        raise SpecError(f"{at(where, 'dense_layers')}: {dense} must be less than layers={layers} (at least one layer "
                        f"must be MoE); allowed: 0 to {layers - 1}")
    frequency = F.integer(F.given(data, "layer_frequency", 1), at(where, "layer_frequency"), maximum=10**5)
    if (layers - dense) // frequency < 1:
        raise SpecError(f"{at(where, 'layer_frequency')}: {frequency} leaves no MoE layer among the {layers - dense} "
                        f"layers after dense_layers={dense}; allowed: 1 to {layers - dense}")
    capacity = F.number(data.get("capacity_factor"), at(where, "capacity_factor"), allow_none=True, maximum=10**6)
    imbalance_value = F.given(data, "imbalance", 1.0)
    imbalance = F.number(imbalance_value, at(where, "imbalance"), minimum=-F.MAX_REASONABLE)   # range checked below
    most = experts / top_k   # the busiest expert can at most receive every token: T over the mean T·K/E
    if not 1.0 <= imbalance <= most:
        raise SpecError(f"{at(where, 'imbalance')}: {F.show(imbalance_value)} must be between 1 (forced balance) and "
                        f"experts/top_k = {most:g} (the busiest expert receives every token)")
    groups, picked = _router_groups_from(data, where, experts, top_k)
    latent = F.integer(data.get("latent_size"), at(where, "latent_size"), maximum=10**7, allow_none=True)
    bias = F.boolean(F.given(data, "expert_bias", False), at(where, "expert_bias"))
    clamp = F.number(data.get("glu_clamp"), at(where, "glu_clamp"), allow_none=True, maximum=10**6)
    return MoE(experts=experts, top_k=top_k, expert_ffn_hidden=width, shared_experts=shared,
               shared_expert_ffn_hidden=(shared_width or width) if shared else None, dense_layers=dense,
               layer_frequency=frequency, capacity_factor=capacity, imbalance=imbalance, router_groups=groups,
               router_group_top_k=picked, latent_size=latent, expert_bias=bias, glu_clamp=clamp)


def _check_router_groups(model: Model, moe: dict[str, Any]) -> None:
    """The group-limited routing a preset keeps (router_groups G, router_group_top_k g: no option sets them)
    still holds for the experts and top_k the options give; else an error naming those options: the
    experts must split into the G groups, and the g groups a token may use must hold top_k experts."""
    e = model.moe
    if e is None or e.router_groups <= 1:
        return
    groups, picked = e.router_groups, e.router_group_top_k
    experts, top_k = moe.get("experts", e.experts), moe.get("top_k", e.top_k)
    if not isinstance(experts, int) or not isinstance(top_k, int) or not 1 <= top_k <= experts:
        return                                 # the model's own checks name the bad value
    how = (f"{model.name} routes each token within {picked} of {groups} expert groups (group-limited routing: "
           f"its router_groups and router_group_top_k, which no option sets)")
    if experts % groups:
        raise SpecError(f"{at(CLI_MODEL, 'moe.experts')}: {experts} does not split into {groups} equal groups: {how}; "
                        f"allowed: a multiple of {groups}")
    reach = picked * experts // groups
    if top_k > reach:
        raise SpecError(f"{at(CLI_MODEL, 'moe.top_k')}: {top_k} with {experts} experts: {how}, which hold {reach} "
                        f"experts; allowed: a top_k of at most {reach}, or at least {-(-top_k * groups // picked)} "
                        f"experts")


def _router_groups_from(data: dict[str, Any], where: str, experts: int, top_k: int) -> tuple[int, int]:
    """(G, g) of group-limited routing: G groups dividing the experts, g of them per token, enough
    experts in g groups for top_k; without `router_groups` no limit (1, 1)."""
    if data.get("router_groups") is None:
        if data.get("router_group_top_k") is not None:
            raise SpecError(f"{at(where, 'router_group_top_k')}: given without router_groups; set both (DeepSeek-V3: "
                            f"router_groups 8, router_group_top_k 4) or neither")
        return 1, 1
    groups = F.integer(data["router_groups"], at(where, "router_groups"), maximum=10**6)
    if experts % groups:
        raise SpecError(f"{at(where, 'router_groups')}: {groups} must divide experts={experts} (the experts are split "
                        f"into equal groups)")
    picked = F.integer(F.given(data, "router_group_top_k", groups), at(where, "router_group_top_k"), maximum=10**6)
    if picked > groups or picked * experts // groups < top_k:
        raise SpecError(f"{at(where, 'router_group_top_k')}: {picked} must be at most router_groups={groups} and leave "
                        f"top_k={top_k} experts in its groups; allowed: {-(-top_k * groups // experts)} to {groups}")
    return (1, 1) if picked == groups else (groups, picked)


def _mla_from(data: object, where: str, hidden: int, heads: int) -> MLA:
    """Validate an `mla:` mapping (specs/README.md): every rank a true low-rank factor of its projection."""
    data = F.check_keys(data, where, MLA_REQUIRED, MLA_OPTIONAL)
    nope = F.integer(data["qk_nope_head_dim"], at(where, "qk_nope_head_dim"), maximum=10**5)
    rope = F.integer(data["qk_rope_head_dim"], at(where, "qk_rope_head_dim"), maximum=10**5)
    v = F.integer(data["v_head_dim"], at(where, "v_head_dim"), maximum=10**5)
    if rope % 2:
        raise SpecError(f"{at(where, 'qk_rope_head_dim')}: {rope} must be even (RoPE rotates pairs of dimensions)")
    kv_rank = F.integer(data["kv_lora_rank"], at(where, "kv_lora_rank"), maximum=10**7)
    q_rank = F.integer(data.get("q_lora_rank"), at(where, "q_lora_rank"), maximum=10**7, allow_none=True)
    factors = (("kv_lora_rank", kv_rank, nope + v, "heads·(qk_nope_head_dim + v_head_dim)", f"({nope} + {v})"),
               ("q_lora_rank", q_rank, nope + rope, "heads·(qk_nope_head_dim + qk_rope_head_dim)",
                f"({nope} + {rope})"))
    for key, rank, per_head, out_text, sum_text in factors:
        out = heads * per_head
        if rank is not None and rank >= min(hidden, out):
            # the heads may come from an override (--heads): say how many these ranks need
            need = max(r // per + 1 for _, r, per, _, _ in factors if r is not None)
            fewest = f"; these ranks need heads >= {need}" if rank < hidden else ""
            raise SpecError(f"{at(where, key)}: {rank} must be less than hidden={hidden} and {out_text} = "
                            f"{heads}·{sum_text} = {out} (a low-rank latent of the projection){fewest}")
    return MLA(q_lora_rank=q_rank, kv_lora_rank=kv_rank, qk_nope_head_dim=nope, qk_rope_head_dim=rope, v_head_dim=v)


def model_from_mapping(data: dict[str, Any], where: str, *, default_seq_len: int = 2048) -> Model:
    """Validate one model mapping (schema in specs/README.md)."""
    has_moe = isinstance(data, dict) and data.get("moe") is not None
    has_hybrid = isinstance(data, dict) and data.get("hybrid") is not None
    # with `moe`, ffn_hidden (the dense layers' MLP width) may be left out when no layer is dense
    required = tuple(k for k in MODEL_REQUIRED if not ((has_moe or has_hybrid) and k == "ffn_hidden"))
    F.check_keys(data, where, required, MODEL_OPTIONAL + ("ffn_hidden",))
    heads = F.integer(data["heads"], at(where, "heads"))
    kv_heads = F.integer(F.given(data, "kv_heads", heads), at(where, "kv_heads"))
    hidden = F.integer(data["hidden"], at(where, "hidden"), maximum=10**7)
    layers = F.integer(data["layers"], at(where, "layers"), maximum=10**5)
    mla = None if data.get("mla") is None else _mla_from(data["mla"], at(where, "mla"), hidden, heads)
    if mla is not None:
        if kv_heads != heads:
            raise SpecError(f"{at(where, 'kv_heads')}: {kv_heads} must equal heads={heads} with mla (MLA's key/value "
                            f"up-projection gives every head its own keys and values)")
        given_head_dim = data.get("head_dim")
        if given_head_dim is not None and given_head_dim != mla.qk_head_dim:
            raise SpecError(f"{at(where, 'head_dim')}: {F.show(given_head_dim)} must equal qk_nope_head_dim + "
                            f"qk_rope_head_dim = {mla.qk_head_dim} with mla (or be left out)")
        head_dim_default = mla.qk_head_dim
    else:
        if data.get("head_dim") is None and hidden % heads:
            raise SpecError(f"{head(where)}hidden={hidden} is not divisible by heads={heads} (give head_dim if "
                            f"intended)")
        head_dim_default = hidden // heads
    if heads % kv_heads:
        raise SpecError(f"{head(where)}heads={heads} is not divisible by kv_heads={kv_heads}")
    moe = _moe_from(data["moe"], at(where, "moe"), layers) if has_moe else None
    hybrid = None if data.get("hybrid") is None else _hybrid_from(data["hybrid"], at(where, "hybrid"), layers, moe)
    if moe is not None and moe.latent_size is not None and moe.latent_size >= hidden:
        raise SpecError(f"{at(where, 'moe.latent_size')}: {moe.latent_size} must be less than hidden={hidden} "
                        f"(LatentMoE "
                        f"projects the hidden state down to it)")
    if moe is not None and data.get("ffn_hidden") is None:   # (without moe, check_keys requires it)
        dense_count = hybrid.count("-") if hybrid is not None else \
            layers - (layers - moe.dense_layers) // moe.layer_frequency
        if dense_count:
            raise SpecError(f"{head(where)}missing required key 'ffn_hidden' (the MLP width of the {dense_count} "
                            f"dense layers)")
        ffn_hidden = moe.expert_ffn_hidden
    elif hybrid is not None and data.get("ffn_hidden") is None:
        if hybrid.count("-"):
            raise SpecError(f"{head(where)}missing required key 'ffn_hidden' (the MLP width of the {hybrid.count('-')} "
                            f"dense MLP blocks)")
        ffn_hidden = hidden
    else:
        ffn_hidden = F.integer(data["ffn_hidden"], at(where, "ffn_hidden"), maximum=10**8)
    return Model(
        name=F.text(data.get("name") or "custom", at(where, "name")),
        layers=layers,
        hidden=hidden,
        ffn_hidden=ffn_hidden,
        heads=heads,
        kv_heads=kv_heads,
        vocab=F.integer(data["vocab"], at(where, "vocab"), maximum=10**8),
        mlp=F.choice(data.get("mlp", "gelu"), at(where, "mlp"), MLP_KINDS),
        seq_len=F.integer(F.given(data, "seq_len", default_seq_len), at(where, "seq_len"), maximum=10**8),
        tied_embeddings=F.boolean(data.get("tied_embeddings", False), at(where, "tied_embeddings")),
        source=F.text(data.get("source") or "user-defined", at(where, "source")),
        head_dim=F.integer(F.given(data, "head_dim", head_dim_default), at(where, "head_dim"), maximum=10**6),
        # absent: counted (the conservative choice, and Korthikanti et al.'s formulas); the presets say
        dropout=F.boolean(F.given(data, "dropout", True), at(where, "dropout")),
        moe=moe,
        mla=mla,
        # absent: learned (no rotary traffic: trainest's model before the key existed); the presets say
        positional=F.choice(F.given(data, "positional", "learned"), at(where, "positional"), POSITIONALS),
        hybrid=hybrid,
        mtp=None if data.get("mtp") is None else _mtp_from(data["mtp"], at(where, "mtp"), moe, hybrid),
        attention_window=None if data.get("attention_window") is None else _window_from(
            data["attention_window"], at(where, "attention_window"), layers if hybrid is None else hybrid.count("*")),
    )


def model_mapping(model: Model) -> dict[str, Any]:
    """The model as a mapping of the model schema that `model_from_mapping` turns back into an equal Model
    (for with_shape, and for echoing a resolved model as input)."""
    data: dict[str, Any] = {f: getattr(model, f) for f in (
        "name", "layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "mlp", "seq_len", "tied_embeddings",
        "source", "head_dim", "dropout", "positional")}
    if model.moe is not None:
        e = model.moe
        data["moe"] = {"experts": e.experts, "top_k": e.top_k, "expert_ffn_hidden": e.expert_ffn_hidden,
                       "shared_experts": e.shared_experts, "dense_layers": e.dense_layers,
                       "layer_frequency": e.layer_frequency, "capacity_factor": e.capacity_factor,
                       "imbalance": e.imbalance}
        if e.router_groups > 1:
            data["moe"].update(router_groups=e.router_groups, router_group_top_k=e.router_group_top_k)
        if e.latent_size is not None:
            data["moe"]["latent_size"] = e.latent_size
        if e.expert_bias:
            data["moe"]["expert_bias"] = True
        if e.glu_clamp is not None:
            data["moe"]["glu_clamp"] = e.glu_clamp
        if e.shared_experts:
            data["moe"]["shared_expert_ffn_hidden"] = e.shared_width
    if model.mla is not None:
        a = model.mla
        data["mla"] = {"q_lora_rank": a.q_lora_rank, "kv_lora_rank": a.kv_lora_rank,
                       "qk_nope_head_dim": a.qk_nope_head_dim, "qk_rope_head_dim": a.qk_rope_head_dim,
                       "v_head_dim": a.v_head_dim}
    if model.mtp is not None:
        data["mtp"] = {"depth": model.mtp.depth, "pattern": model.mtp.pattern, "shared": model.mtp.shared}
    if model.attention_window is not None:
        w = model.attention_window
        data["attention_window"] = {"size": w.size, "kind": w.kind, "global_every": w.global_every}
    if model.hybrid is not None:
        b = model.hybrid.mamba
        data["hybrid"] = {"pattern": model.hybrid.pattern, "mamba_heads": b.heads, "mamba_head_dim": b.head_dim,
                          "state_dim": b.state_dim, "groups": b.groups, "conv_kernel": b.conv_kernel, "chunk": b.chunk}
        if model.moe is not None:
            data["moe"].pop("dense_layers")
            data["moe"].pop("layer_frequency")
    return data


MOE_OVERRIDES = {"experts": "experts", "top_k": "top_k", "expert_ffn_hidden": "expert_ffn_hidden",
                 "moe_imbalance": "imbalance"}


def with_shape(model: Model, **overrides: object) -> Model:
    """A copy of `model` with shape fields replaced (None means keep), re-validated.

    Dense keys: layers, hidden, ffn_hidden, heads, kv_heads, vocab, mlp (and any other Model field).
    attention_window: the window (or chunk) size of the model's windowed layers; a model without a window
    gets a sliding window of that size on every attention layer.
    MoE keys (MOE_OVERRIDES): experts, top_k, expert_ffn_hidden, moe_imbalance. Shared experts as wide as
    the routed ones stay as wide when expert_ffn_hidden changes (as MHA's kv_heads follow heads). On a
    dense model, experts (with top_k; expert_ffn_hidden defaults to ffn_hidden) makes every MLP a
    mixture of experts."""
    changed = {k: v for k, v in overrides.items() if v is not None}
    if not changed:
        return model
    data = model_mapping(model)
    resized = ("hidden" in changed or "heads" in changed) and model.head_dim == model.hidden // model.heads
    if model.mla is not None or resized:   # derived again (MLA: always qk_nope_head_dim + qk_rope_head_dim)
        data["head_dim"] = None
    if "heads" in changed and "kv_heads" not in changed and model.kv_heads == model.heads:
        changed["kv_heads"] = changed["heads"]
    name = f"{model.name} (modified: {', '.join(sorted(changed))})"
    window, layers = data.get("attention_window"), changed.get("layers")
    if window is not None and isinstance(layers, int) and model.hybrid is None and window["global_every"] > layers:
        window["global_every"] = 0        # every k-th of fewer than k layers: none of them global
    if "attention_window" in changed:     # the window size; a model without one gets it on every layer, sliding
        data["attention_window"] = {**data.get("attention_window", {"kind": "sliding", "global_every": 0}),
                                    "size": changed.pop("attention_window")}
    moe_changed = {MOE_OVERRIDES[k]: changed.pop(k) for k in list(changed) if k in MOE_OVERRIDES}
    if moe_changed:
        if model.moe is None:
            if "experts" not in moe_changed or "top_k" not in moe_changed:
                raise SpecError(f"{', '.join(at(CLI_MODEL, f'moe.{k}') for k in sorted(moe_changed))}: "
                                f"{'needs' if len(moe_changed) == 1 else 'need'} a mixture-of-experts model, "
                                f"and {model.name} is dense; give both experts and top_k to make its MLPs mixtures "
                                f"of experts")
            data["moe"] = {"expert_ffn_hidden": model.ffn_hidden}
        elif ("expert_ffn_hidden" in moe_changed and model.moe.shared_experts
              and model.moe.shared_width == model.moe.expert_ffn_hidden):
            data["moe"]["shared_expert_ffn_hidden"] = moe_changed["expert_ffn_hidden"]
        data["moe"].update(moe_changed)
        if model.moe is not None:
            _check_router_groups(model, data["moe"])
    data.update(changed)
    data["name"] = name
    return model_from_mapping(data, CLI_MODEL)
