"""The blocks of a model's shape, as records: mixture-of-experts MLPs (`MoE`), multi-head latent attention
(`MLA`), Mamba-2 (`Mamba`), the hybrid layer pattern (`Hybrid`), multi-token prediction (`MTP`) and sliding
attention windows (`AttentionWindow`). `trainest.models` holds the `Model` built of them and reads them from a
mapping."""

from __future__ import annotations

from trainest.record import NamedTuple

# ------------------------------------------------------------------------------------------- models
# Symbols (docs/model.md; all counts in elements or parameters): L layers, h hidden, f dense MLP width,
# a heads, g KV heads, d_h head dim, V vocab, k MLP matrices (2 GeLU, 3 gated), E routed experts,
# K top-k, f_e expert MLP width, S shared experts, f_s shared-expert width, L_d dense and L_m MoE layers,
# r_q / r_kv MLA query / key-value latent ranks, d_n / d_r / d_v MLA no-RoPE / RoPE / value head dims.

class MoE(NamedTuple):
    """The mixture-of-experts MLP of a model's MoE layers (its dense layers keep `Model.ffn_hidden`).

    Layout: the first `dense_layers` layers are dense; after them every `layer_frequency`-th layer is
    MoE, counting the k-th: layer i (0-based) is MoE when i >= d and (i - d + 1) mod k = 0, so
    L_m = (L - d) // k (Llama 4 `interleave_moe_layer_step`, Qwen `decoder_sparse_step`, DeepSeek
    `first_k_dense_replace`).
    """

    experts: int                                 # E: routed experts per MoE layer
    top_k: int                                   # K: routed experts each token goes to
    expert_ffn_hidden: int                       # f_e: MLP width of one routed expert [elements]
    shared_experts: int = 0                      # S: experts every token goes through (DeepSeek, Llama 4)
    shared_expert_ffn_hidden: int | None = None  # f_s: width of one shared expert; None (no shared experts) = f_e
    dense_layers: int = 0                        # d: leading dense layers
    layer_frequency: int = 1                     # k: every k-th layer after them is MoE
    capacity_factor: float | None = None         # expert capacity over the mean load; None = dropless
    imbalance: float = 1.0                       # tokens on the busiest expert over the mean (1 = forced balance)
    router_groups: int = 1                       # G: expert groups of group-limited routing (DeepSeek n_group)
    router_group_top_k: int = 1                  # g: groups a token's experts come from (topk_group; G: no limit)
    latent_size: int | None = None               # l: LatentMoE's expert width (h -> l -> experts -> h); None: h
    expert_bias: bool = False                    # the routed experts' linear layers carry biases (GPT-OSS)
    glu_clamp: float | None = None               # the experts' GLU clamps its two inputs at ±this (GPT-OSS 7.0)

    @property
    def shared_width(self) -> int:
        """f_s [elements]: the shared experts' MLP width (f_e unless given)."""
        return self.expert_ffn_hidden if self.shared_expert_ffn_hidden is None else self.shared_expert_ffn_hidden


class MLA(NamedTuple):
    """Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434 §2.1; DeepSeek-V3; Kimi K2): queries
    and keys/values are projected through low-rank latents; each head's key is d_n latent-derived dims
    plus d_r RoPE dims shared by all heads. Every head has its own keys and values (no GQA)."""

    q_lora_rank: int | None      # r_q: query latent rank; None = a plain h × a·(d_n + d_r) query projection
    kv_lora_rank: int            # r_kv: key/value latent rank
    qk_nope_head_dim: int        # d_n: per-head query/key dims without RoPE
    qk_rope_head_dim: int        # d_r: per-head query/key dims with RoPE
    v_head_dim: int              # d_v: per-head value dims

    @property
    def qk_head_dim(self) -> int:
        """d_n + d_r: the query/key width of one head (the model's head_dim) [elements]."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim


class Mamba(NamedTuple):
    """A Mamba-2 mixer block (Dao & Gu 2024, "Transformers are SSMs", arXiv:2405.21060 §7; mamba_ssm
    Mamba2, Megatron-Core MambaMixer): an input projection to z, x, B, C and dt, a causal depthwise
    convolution over x, B and C, the chunked state-space scan (SSD), a gated RMSNorm and an output
    projection. d_in = H·P inner width; G groups share their B and C (like GQA's key-value heads)."""

    heads: int                   # H: SSM heads
    head_dim: int                # P: channels per head
    state_dim: int               # N: state size per channel
    groups: int                  # G: B/C groups
    conv_kernel: int = 4         # width of the causal depthwise convolution
    chunk: int = 128             # SSD chunk length Q (mamba_ssm / Megatron-Core default chunk_size)

    @property
    def inner(self) -> int:
        """d_in = H·P [elements]."""
        return self.heads * self.head_dim

    @property
    def conv_channels(self) -> int:
        """d_in + 2·G·N: the channels the convolution runs over (x, B, C) [elements]."""
        return self.inner + 2 * self.groups * self.state_dim

    @property
    def in_proj_width(self) -> int:
        """2·d_in + 2·G·N + H: the input projection's outputs z, x, B, C, dt [elements]."""
        return 2 * self.inner + 2 * self.groups * self.state_dim + self.heads

    def params(self, hidden: int) -> int:
        """Weights of one mixer (without the block's pre-norm): in_proj h·(2·d_in + 2GN + H), conv
        (k + 1)·(d_in + 2GN) with its bias, dt_bias, A_log and D 3·H, the gated norm d_in, out_proj d_in·h."""
        return (hidden * self.in_proj_width + (self.conv_kernel + 1) * self.conv_channels + 3 * self.heads
                + self.inner + self.inner * hidden)


class AttentionWindow(NamedTuple):
    """Local attention on some of a model's attention layers (Beltagy et al. 2020, Longformer; Jiang et al.
    2023, Mistral 7B; Gemma 2/3; OpenAI 2025, gpt-oss; Meta 2025, Llama 4 chunked attention): `sliding`, each
    query attends to the w keys ending at itself; `chunked`, the sequence is cut into chunks of w tokens and
    each query attends causally within its own chunk. Every `global_every`-th attention layer (counting the
    k-th: layer i with (i + 1) mod k = 0) keeps full causal attention; 0: every attention layer is windowed.
    Which layers they are does not change the estimate (the mean layer weighs the two kinds by their counts)."""

    size: int                    # w: window (sliding) or chunk (chunked) length [tokens]
    kind: str = "sliding"        # WINDOW_KINDS
    global_every: int = 0        # k: every k-th attention layer is global (full causal); 0 = none is

    def windowed_layers(self, attention_layers: int) -> int:
        """L_w = L_a − L_a // k: the attention layers that use the window (all of them when k = 0)."""
        return attention_layers if self.global_every == 0 else attention_layers - attention_layers // self.global_every


HYBRID_BLOCKS = {"M": "Mamba-2", "*": "attention", "E": "MoE MLP", "-": "dense MLP"}


class MTP(NamedTuple):
    """Multi-token prediction (DeepSeek-V3 §2.2, arXiv:2412.19437; Megatron-Core mtp_num_layers): `depth`
    sequential modules after the last layer, each predicting one more future token: it norms the last
    hidden state and the next token's embedding, projects their concatenation (2h -> h), runs one block
    pattern (`pattern`: `*E` an attention and a MoE block = one MoE transformer layer, `*-` a dense
    one) and the shared output head and loss. `shared`: every depth re-applies one module's weights
    (Megatron-Core mtp_use_repeated_layer; Nemotron 3)."""

    depth: int
    pattern: str
    shared: bool = False

    @property
    def modules_with_weights(self) -> int:
        """Modules whose weights are trained: 1 when shared, else depth."""
        return 1 if self.shared else self.depth


class Hybrid(NamedTuple):
    """A hybrid model's block pattern (Megatron-Core hybrid_override_pattern, Nemotron-H, Nemotron 3): one
    character per block, each block one pre-norm and one mixer or MLP with its residual: M Mamba-2, *
    attention, E MoE MLP, - dense MLP. The model's `layers` are these blocks (a transformer layer is two
    of them, * and - or E)."""

    pattern: str
    mamba: Mamba

    def count(self, kind: str) -> int:
        return self.pattern.count(kind)
