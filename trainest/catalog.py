"""The bundled catalog (`specs/`): hardware and model presets, loaded into frozen dataclasses.

A name is looked up in the catalog; a value that ends in `.yaml`/`.yml` or names an existing
file is read as a path. Human units in the YAML (TFLOP/s, GB, GB/s, Gb/s, us) are converted to
SI here, once.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from trainest import fields as F
from trainest.choices import Mlp, Precision
from trainest.errors import SpecError, did_you_mean
from trainest.units import BITS_PER_BYTE, GB, MICROSECOND, TERA

PRECISIONS = Precision.values()
MLP_KINDS = Mlp.values()


@functools.cache
def specs_dir() -> Path:
    """The bundled specs folder: inside the installed package, or the source tree's `specs/`."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "specs", here.parent / "specs"):
        if (candidate / "hardware").is_dir():
            return candidate
    raise SpecError(f"bundled specs not found next to {here} (broken installation?)")


# ----------------------------------------------------------------------------------------- hardware

@dataclass(frozen=True)
class Efficiency:
    """Achievable fractions of peak: per-hardware data, fitted by `trainest calibrate` (docs/model.md)."""

    gemm: float                 # large-GEMM fraction of dense peak
    gemm_half_dim: float        # GEMM dimension at which a dimension's factor is 1/2 [elements]
    attention: float            # fused attention fraction of the 16-bit peak
    memory: float               # fraction of HBM bandwidth reached by streaming kernels
    scale_up: float             # fraction of scale-up bandwidth reached by collectives
    scale_out: float            # fraction of scale-out bandwidth reached by collectives
    low_precision_gemm: float   # FP8/FP4 GEMM efficiency relative to `gemm` (casts, scaling)
    flash2_attention: float     # FlashAttention-2 relative to `attention` (the best fused kernel)
    layer_overhead_s: float     # fixed time per layer pass (kernel launches, sync) [s]
    overlap_contention: float   # share of an overlapped collective's time added to the work hiding it
    fitted: bool
    method: str


EFFICIENCY_KEYS = ("gemm", "gemm_half_dim", "attention", "memory", "scale_up", "scale_out")
EFFICIENCY_OPTIONAL = ("low_precision_gemm", "flash2_attention", "layer_overhead_us", "overlap_contention", "fitted",
                       "method", "fit_runs", "fit_mape_pct")
DEFAULT_LOW_PRECISION_GEMM = 0.85   # FP8 GEMMs reach a lower fraction of their (2x) peak than BF16
DEFAULT_FLASH2_ATTENTION = 1.0     # FlashAttention-2 relative to `attention`: the same unless fitted
DEFAULT_LAYER_OVERHEAD_US = 30.0    # launch and sync overhead per transformer layer per pass
# Collective/compute contention by hardware kind: while a collective runs behind computation, the
# computation slows by this share of the collective's time. GPUs run NCCL/RCCL collectives as kernels
# on their SMs/CUs (one thread block per channel, and they stream through HBM): ~10–25 % of an A100's
# 108 or an H100's 132 SMs at the usual 16–32 channels; 0.15 is the same share trainest already
# leaves exposed of pipelined TP traffic. TPUs (ICI DMA), Gaudi (on-chip RoCE engines) and Trainium
# (collective engines) move collective data off the compute cores: 0. docs/model.md §4.7.
DEFAULT_OVERLAP_CONTENTION = {"gpu": 0.15, "cpu-gpu": 0.15}
DEFAULT_SCALE_UP_LATENCY_US = 3.0   # used when a hardware file gives no latency (NVLink-class)
DEFAULT_SCALE_OUT_LATENCY_US = 8.0  # InfiniBand/RoCE-class


@dataclass(frozen=True)
class Hardware:
    """One accelerator and the system it sits in. All SI: FLOP/s, bytes, bytes/s, s, W."""

    name: str
    display_name: str
    kind: str
    peak_flops_per_s: dict[str, float]     # dense peak by GEMM precision; absent = unsupported
    memory_bytes: float
    memory_bytes_per_s: float
    power_w: float | None
    price_usd_per_hour: float | None
    devices_per_node: int
    scale_up_bytes_per_s: float | None     # per device, per direction
    scale_up_domain: int
    scale_up_latency_s: float
    scale_out_bytes_per_s: float | None    # per device, per direction
    scale_out_latency_s: float
    efficiency: Efficiency
    source: str
    path: str

    def peak(self, precision: str) -> float:
        """Dense peak FLOP/s for `precision`, or a SpecError listing what the device has."""
        if precision not in self.peak_flops_per_s:
            have = ", ".join(p for p in PRECISIONS if p in self.peak_flops_per_s)
            raise SpecError(f"hardware {self.name!r} has no {precision} peak; it supports: {have}")
        return self.peak_flops_per_s[precision]

    @property
    def peak_16bit_flops_per_s(self) -> float:
        """The 16-bit matrix peak used for attention and for MFU of mixed precision."""
        for p in ("bf16", "fp16", "tf32", "fp32"):
            if p in self.peak_flops_per_s:
                return self.peak_flops_per_s[p]
        raise SpecError(f"hardware {self.name!r} has no 16- or 32-bit peak")


HW_REQUIRED = ("name", "peak_tflops", "memory", "system", "efficiency", "source")
HW_OPTIONAL = ("display_name", "vendor", "kind", "launch_year", "power_w", "price_usd_per_hour", "price_source",
               "notes", "derived_fields", "on_chip_cache_mb", "extra")
SYSTEM_KEYS = ("devices_per_node", "scale_up_name", "scale_up_gb_per_s", "scale_up_domain", "scale_up_latency_us",
               "scale_out_gbit_per_s", "scale_out_latency_us")


def _given(data: dict, key: str, default: object) -> object:
    """data[key], or `default` when the key is absent or null (a given 0 stays 0 and is then validated)."""
    value = data.get(key)
    return default if value is None else value


def default_overlap_contention(kind: str) -> float:
    """The overlap contention of a hardware kind when its file gives none (DEFAULT_OVERLAP_CONTENTION)."""
    return DEFAULT_OVERLAP_CONTENTION.get(kind, 0.0)


def _efficiency_from(data: dict, where: str, kind: str) -> Efficiency:
    F.check_keys(data, where, EFFICIENCY_KEYS, EFFICIENCY_OPTIONAL)
    return Efficiency(
        gemm=F.fraction(data["gemm"], f"{where}.gemm"),
        gemm_half_dim=F.number(data["gemm_half_dim"], f"{where}.gemm_half_dim", allow_zero=True),
        attention=F.fraction(data["attention"], f"{where}.attention"),
        memory=F.fraction(data["memory"], f"{where}.memory"),
        scale_up=F.fraction(data["scale_up"], f"{where}.scale_up"),
        scale_out=F.fraction(data["scale_out"], f"{where}.scale_out"),
        low_precision_gemm=F.fraction(data.get("low_precision_gemm", DEFAULT_LOW_PRECISION_GEMM),
                                      f"{where}.low_precision_gemm"),
        flash2_attention=F.fraction(data.get("flash2_attention", DEFAULT_FLASH2_ATTENTION),
                                    f"{where}.flash2_attention"),
        layer_overhead_s=F.number(data.get("layer_overhead_us", DEFAULT_LAYER_OVERHEAD_US),
                                  f"{where}.layer_overhead_us", allow_zero=True) * MICROSECOND,
        overlap_contention=F.number(_given(data, "overlap_contention", default_overlap_contention(kind)),
                                    f"{where}.overlap_contention", allow_zero=True, maximum=1.0),
        fitted=F.boolean(data.get("fitted", False), f"{where}.fitted"),
        method=F.text(data.get("method", ""), f"{where}.method") or "",
    )


def hardware_from_mapping(data: dict, where: str) -> Hardware:
    """Validate one hardware mapping (schema in specs/README.md) and convert it to SI."""
    F.check_keys(data, where, HW_REQUIRED, HW_OPTIONAL)
    peaks_raw = F.check_keys(data["peak_tflops"], f"{where}.peak_tflops", (), PRECISIONS)
    peaks = {p: F.number(v, f"{where}.peak_tflops.{p}") * TERA for p, v in peaks_raw.items() if v is not None}
    if not peaks:
        raise SpecError(f"{where}.peak_tflops: at least one precision needs a peak")
    mem = F.check_keys(data["memory"], f"{where}.memory", ("capacity_gb", "bandwidth_gb_per_s"), ("type",))
    sys_ = F.check_keys(data["system"], f"{where}.system", ("devices_per_node",), SYSTEM_KEYS)
    up = F.number(sys_.get("scale_up_gb_per_s"), f"{where}.system.scale_up_gb_per_s", allow_none=True)
    out = F.number(sys_.get("scale_out_gbit_per_s"), f"{where}.system.scale_out_gbit_per_s", allow_none=True)
    devices_per_node = F.integer(sys_["devices_per_node"], f"{where}.system.devices_per_node")
    domain = F.integer(_given(sys_, "scale_up_domain", 1), f"{where}.system.scale_up_domain")
    kind = F.text(data.get("kind") or "gpu", f"{where}.kind")
    return Hardware(
        name=F.text(data["name"], f"{where}.name"),
        display_name=F.text(data.get("display_name") or data["name"], f"{where}.display_name"),
        kind=kind,
        peak_flops_per_s=peaks,
        memory_bytes=F.number(mem["capacity_gb"], f"{where}.memory.capacity_gb") * GB,
        memory_bytes_per_s=F.number(mem["bandwidth_gb_per_s"], f"{where}.memory.bandwidth_gb_per_s") * GB,
        power_w=F.number(data.get("power_w"), f"{where}.power_w", allow_none=True),
        price_usd_per_hour=F.number(data.get("price_usd_per_hour"), f"{where}.price_usd_per_hour", allow_none=True),
        devices_per_node=devices_per_node,
        scale_up_bytes_per_s=up * GB if up else None,
        scale_up_domain=domain if up else 1,
        scale_up_latency_s=F.number(_given(sys_, "scale_up_latency_us", DEFAULT_SCALE_UP_LATENCY_US),
                                    f"{where}.system.scale_up_latency_us",
                                    allow_zero=True) * MICROSECOND,
        scale_out_bytes_per_s=out * GB / BITS_PER_BYTE if out else None,
        scale_out_latency_s=F.number(_given(sys_, "scale_out_latency_us", DEFAULT_SCALE_OUT_LATENCY_US),
                                     f"{where}.system.scale_out_latency_us",
                                     allow_zero=True) * MICROSECOND,
        efficiency=_efficiency_from(data["efficiency"], f"{where}.efficiency", kind),
        source=F.text(data["source"], f"{where}.source"),
        path=where,
    )


# ------------------------------------------------------------------------------------------- models
# Symbols (docs/model.md; all counts in elements or parameters): L layers, h hidden, f dense MLP width,
# a heads, g KV heads, d_h head dim, V vocab, k MLP matrices (2 GeLU, 3 gated), E routed experts,
# K top-k, f_e expert MLP width, S shared experts, f_s shared-expert width, L_d dense and L_m MoE layers,
# r_q / r_kv MLA query / key-value latent ranks, d_n / d_r / d_v MLA no-RoPE / RoPE / value head dims.

@dataclass(frozen=True)
class MoE:
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

    @property
    def shared_width(self) -> int:
        """f_s [elements]: the shared experts' MLP width (f_e unless given)."""
        return self.expert_ffn_hidden if self.shared_expert_ffn_hidden is None else self.shared_expert_ffn_hidden


@dataclass(frozen=True)
class MLA:
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


@dataclass(frozen=True)
class Model:
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

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.mlp == "swiglu" else 2

    # --- layer layout

    @property
    def moe_layers(self) -> int:
        """L_m = (L - d) // k: layers whose MLP is a mixture of experts (0 for a dense model)."""
        if self.moe is None:
            return 0
        return (self.layers - self.moe.dense_layers) // self.moe.layer_frequency

    @property
    def dense_layers_count(self) -> int:
        """L_d = L - L_m: layers with the dense MLP of width f."""
        return self.layers - self.moe_layers

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer `index` (0-based) is MoE: index >= d and (index - d + 1) mod k = 0."""
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
    def params_per_expert(self) -> int:
        """k·h·f_e: one routed expert's MLP [params] (0 for a dense model)."""
        return 0 if self.moe is None else self.mlp_matrices * self.hidden * self.moe.expert_ffn_hidden

    @property
    def router_params(self) -> int:
        """h·E: the router (gate) of one MoE layer [params] (its bias or score-correction bias ignored)."""
        return 0 if self.moe is None else self.hidden * self.moe.experts

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
        (L_d·P_dense + L_m·P_moe) / L, so that L·params_per_layer + embedding_params = params."""
        if self.moe is None:
            return self.params_per_dense_layer
        return (self.dense_layers_count * self.params_per_dense_layer
                + self.moe_layers * self.params_per_moe_layer) / self.layers

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
        if self.moe is None:
            return self.layers * self.params_per_layer + self.embedding_params
        return (self.dense_layers_count * self.params_per_dense_layer + self.moe_layers * self.params_per_moe_layer
                + self.embedding_params)

    @property
    def active_params(self) -> float:
        """Weights one token uses: L_d·P_dense + L_m·P_moe_active + embedding_params [params]; = params for
        a dense model. Both embedding tables count (some model cards leave out the input embedding)."""
        if self.moe is None:
            return self.params
        return (self.dense_layers_count * self.params_per_dense_layer
                + self.moe_layers * self.active_params_per_moe_layer + self.embedding_params)


UNMODELLED_MOE = "mixture of experts"
UNMODELLED_MLA = "multi-head latent attention"


def unmodelled_features(model: Model) -> tuple[str, ...]:
    """What `model` has that the step-time and memory model does not yet compute (empty for a dense
    transformer). An estimate of such a model would be a dense model's numbers: callers refuse it."""
    return tuple(name for name, present in ((UNMODELLED_MOE, model.moe is not None),
                                            (UNMODELLED_MLA, model.mla is not None)) if present)


MODEL_REQUIRED = ("layers", "hidden", "ffn_hidden", "heads", "vocab")
MODEL_OPTIONAL = ("name", "display_name", "source", "kv_heads", "mlp", "seq_len", "tied_embeddings", "aliases", "notes",
                  "params_b", "head_dim", "params", "dropout", "moe", "mla")
MOE_REQUIRED = ("experts", "top_k", "expert_ffn_hidden")
MOE_OPTIONAL = ("shared_experts", "shared_expert_ffn_hidden", "dense_layers", "layer_frequency", "capacity_factor",
                "imbalance")
MLA_REQUIRED = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
MLA_OPTIONAL = ("q_lora_rank",)


def _moe_from(data: object, where: str, layers: int) -> MoE:
    """Validate a `moe:` mapping (specs/README.md) against the model's layer count."""
    data = F.check_keys(data, where, MOE_REQUIRED, MOE_OPTIONAL)
    experts = F.integer(data["experts"], f"{where}.experts", maximum=10**6)
    top_k = F.integer(data["top_k"], f"{where}.top_k", maximum=10**6)
    if top_k > experts:
        raise SpecError(f"{where}.top_k: {top_k} must be at most experts={experts} (each token goes to top_k "
                        f"different experts)")
    shared = F.integer(_given(data, "shared_experts", 0), f"{where}.shared_experts", minimum=0, maximum=10**6)
    width = F.integer(data["expert_ffn_hidden"], f"{where}.expert_ffn_hidden", maximum=10**8)
    shared_width = F.integer(data.get("shared_expert_ffn_hidden"), f"{where}.shared_expert_ffn_hidden",
                             maximum=10**8, allow_none=True)
    if shared_width is not None and shared == 0:
        raise SpecError(f"{where}.shared_expert_ffn_hidden: {shared_width} is given but shared_experts is 0; "
                        f"set shared_experts (at least 1) or remove shared_expert_ffn_hidden")
    dense = F.integer(_given(data, "dense_layers", 0), f"{where}.dense_layers", minimum=0, maximum=10**5)
    if dense >= layers:
        raise SpecError(f"{where}.dense_layers: {dense} must be less than layers={layers} (at least one layer "
                        f"must be MoE); allowed: 0 to {layers - 1}")
    frequency = F.integer(_given(data, "layer_frequency", 1), f"{where}.layer_frequency", maximum=10**5)
    if (layers - dense) // frequency < 1:
        raise SpecError(f"{where}.layer_frequency: {frequency} leaves no MoE layer among the {layers - dense} "
                        f"layers after dense_layers={dense}; allowed: 1 to {layers - dense}")
    capacity = F.number(data.get("capacity_factor"), f"{where}.capacity_factor", allow_none=True, maximum=10**6)
    imbalance_value = _given(data, "imbalance", 1.0)
    imbalance = F.number(imbalance_value, f"{where}.imbalance", minimum=-F.MAX_REASONABLE)   # range checked below
    most = experts / top_k   # the busiest expert can at most receive every token: T over the mean T·K/E
    if not 1.0 <= imbalance <= most:
        raise SpecError(f"{where}.imbalance: {F.show(imbalance_value)} must be between 1 (forced balance) and "
                        f"experts/top_k = {most:g} (the busiest expert receives every token)")
    return MoE(experts=experts, top_k=top_k, expert_ffn_hidden=width, shared_experts=shared,
               shared_expert_ffn_hidden=(shared_width or width) if shared else None, dense_layers=dense,
               layer_frequency=frequency, capacity_factor=capacity, imbalance=imbalance)


def _mla_from(data: object, where: str, hidden: int, heads: int) -> MLA:
    """Validate an `mla:` mapping (specs/README.md): every rank a true low-rank factor of its projection."""
    data = F.check_keys(data, where, MLA_REQUIRED, MLA_OPTIONAL)
    nope = F.integer(data["qk_nope_head_dim"], f"{where}.qk_nope_head_dim", maximum=10**5)
    rope = F.integer(data["qk_rope_head_dim"], f"{where}.qk_rope_head_dim", maximum=10**5)
    v = F.integer(data["v_head_dim"], f"{where}.v_head_dim", maximum=10**5)
    if rope % 2:
        raise SpecError(f"{where}.qk_rope_head_dim: {rope} must be even (RoPE rotates pairs of dimensions)")
    kv_rank = F.integer(data["kv_lora_rank"], f"{where}.kv_lora_rank", maximum=10**7)
    q_rank = F.integer(data.get("q_lora_rank"), f"{where}.q_lora_rank", maximum=10**7, allow_none=True)
    factors = (("kv_lora_rank", kv_rank, heads * (nope + v), "heads·(qk_nope_head_dim + v_head_dim)"),
               ("q_lora_rank", q_rank, heads * (nope + rope), "heads·(qk_nope_head_dim + qk_rope_head_dim)"))
    for key, rank, out, out_text in factors:
        if rank is not None and rank >= min(hidden, out):
            raise SpecError(f"{where}.{key}: {rank} must be less than hidden={hidden} and {out_text} = {out} "
                            f"(a low-rank latent of the projection)")
    return MLA(q_lora_rank=q_rank, kv_lora_rank=kv_rank, qk_nope_head_dim=nope, qk_rope_head_dim=rope, v_head_dim=v)


def model_from_mapping(data: dict, where: str, *, default_seq_len: int = 2048) -> Model:
    """Validate one model mapping (schema in specs/README.md)."""
    has_moe = isinstance(data, dict) and data.get("moe") is not None
    # with `moe`, ffn_hidden (the dense layers' MLP width) may be left out when no layer is dense
    required = tuple(k for k in MODEL_REQUIRED if not (has_moe and k == "ffn_hidden"))
    F.check_keys(data, where, required, MODEL_OPTIONAL + ("ffn_hidden",))
    heads = F.integer(data["heads"], f"{where}.heads")
    kv_heads = F.integer(_given(data, "kv_heads", heads), f"{where}.kv_heads")
    hidden = F.integer(data["hidden"], f"{where}.hidden", maximum=10**7)
    layers = F.integer(data["layers"], f"{where}.layers", maximum=10**5)
    mla = None if data.get("mla") is None else _mla_from(data["mla"], f"{where}.mla", hidden, heads)
    if mla is not None:
        if kv_heads != heads:
            raise SpecError(f"{where}.kv_heads: {kv_heads} must equal heads={heads} with mla (MLA's key/value "
                            f"up-projection gives every head its own keys and values)")
        given_head_dim = data.get("head_dim")
        if given_head_dim is not None and given_head_dim != mla.qk_head_dim:
            raise SpecError(f"{where}.head_dim: {F.show(given_head_dim)} must equal qk_nope_head_dim + "
                            f"qk_rope_head_dim = {mla.qk_head_dim} with mla (or be left out)")
        head_dim_default = mla.qk_head_dim
    else:
        if data.get("head_dim") is None and hidden % heads:
            raise SpecError(f"{where}: hidden={hidden} is not divisible by heads={heads} (give head_dim if intended)")
        head_dim_default = hidden // heads
    if heads % kv_heads:
        raise SpecError(f"{where}: heads={heads} is not divisible by kv_heads={kv_heads}")
    moe = _moe_from(data["moe"], f"{where}.moe", layers) if has_moe else None
    if moe is not None and data.get("ffn_hidden") is None:   # (without moe, check_keys requires it)
        dense_count = layers - (layers - moe.dense_layers) // moe.layer_frequency
        if dense_count:
            raise SpecError(f"{where}: missing required key 'ffn_hidden' (the MLP width of the {dense_count} "
                            f"dense layers)")
        ffn_hidden = moe.expert_ffn_hidden
    else:
        ffn_hidden = F.integer(data["ffn_hidden"], f"{where}.ffn_hidden", maximum=10**8)
    return Model(
        name=F.text(data.get("name") or "custom", f"{where}.name"),
        layers=layers,
        hidden=hidden,
        ffn_hidden=ffn_hidden,
        heads=heads,
        kv_heads=kv_heads,
        vocab=F.integer(data["vocab"], f"{where}.vocab", maximum=10**8),
        mlp=F.choice(data.get("mlp", "gelu"), f"{where}.mlp", MLP_KINDS),
        seq_len=F.integer(_given(data, "seq_len", default_seq_len), f"{where}.seq_len", maximum=10**8),
        tied_embeddings=F.boolean(data.get("tied_embeddings", False), f"{where}.tied_embeddings"),
        source=F.text(data.get("source") or "user-defined", f"{where}.source"),
        head_dim=F.integer(_given(data, "head_dim", head_dim_default), f"{where}.head_dim", maximum=10**6),
        # absent: counted (the conservative choice, and Korthikanti et al.'s formulas); the presets say
        dropout=F.boolean(_given(data, "dropout", True), f"{where}.dropout"),
        moe=moe,
        mla=mla,
    )


def model_mapping(model: Model) -> dict:
    """The model as a mapping of the model schema that `model_from_mapping` turns back into an equal Model
    (for with_shape, and for echoing a resolved model as input)."""
    data: dict = {f: getattr(model, f) for f in ("name", "layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab",
                                                 "mlp", "seq_len", "tied_embeddings", "source", "head_dim", "dropout")}
    if model.moe is not None:
        e = model.moe
        data["moe"] = {"experts": e.experts, "top_k": e.top_k, "expert_ffn_hidden": e.expert_ffn_hidden,
                       "shared_experts": e.shared_experts, "dense_layers": e.dense_layers,
                       "layer_frequency": e.layer_frequency, "capacity_factor": e.capacity_factor,
                       "imbalance": e.imbalance}
        if e.shared_experts:
            data["moe"]["shared_expert_ffn_hidden"] = e.shared_width
    if model.mla is not None:
        a = model.mla
        data["mla"] = {"q_lora_rank": a.q_lora_rank, "kv_lora_rank": a.kv_lora_rank,
                       "qk_nope_head_dim": a.qk_nope_head_dim, "qk_rope_head_dim": a.qk_rope_head_dim,
                       "v_head_dim": a.v_head_dim}
    return data


# ------------------------------------------------------------------------------------------ lookups

def _looks_like_path(value: str) -> bool:
    if value.endswith((".yaml", ".yml")) or "/" in value:
        return True
    try:
        return Path(value).is_file()
    except OSError:   # a name too long for the file system is not a file
        return False


# ------------------------------------------------------------------ bundled catalog: JSON read cache
# The YAML files in specs/ are the source of truth. specs/_catalog.json holds, for each bundled
# hardware and model file, its exact text and the mapping yaml.safe_load made of it, so that an
# estimate with bundled specs never imports or runs the YAML parser (start-up time). An entry is used
# only when the file's current text equals the recorded text: an edited or new file is read as YAML,
# so a stale cache can cost time but never change a result. Rebuild it with
# `python tools/build_catalog_cache.py`; tests/test_startup.py fails while it is out of date.

CATALOG_CACHE_NAME = "_catalog.json"
CATALOG_CACHE_FORMAT = 1
CATALOG_KINDS = ("hardware", "models")


@functools.cache
def _catalog_cache() -> dict[str, dict]:
    """"kind/file.yaml" -> {"text": ..., "data": ...}; empty when the cache is missing or unreadable."""
    import json
    try:
        doc = json.loads((specs_dir() / CATALOG_CACHE_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("format") != CATALOG_CACHE_FORMAT or not isinstance(doc.get("files"), dict):
        return {}
    return doc["files"]


def _read_spec(path: Path, what: str) -> dict:
    """The mapping in a spec file: from the JSON cache when `path` is a bundled file whose text is
    exactly the text the cache entry was made from, else via `fields.load_yaml_mapping`."""
    if path.parent.parent == specs_dir():
        entry = _catalog_cache().get(f"{path.parent.name}/{path.name}")
        if isinstance(entry, dict) and isinstance(entry.get("data"), dict):
            try:
                current = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                current = None
            if current == entry.get("text"):
                import copy
                return copy.deepcopy(entry["data"])
    return F.load_yaml_mapping(path, what)


def build_catalog_cache() -> dict:
    """The cache document for the current specs/ files (what `tools/build_catalog_cache.py` writes).
    A file that does not load, or whose mapping does not survive a JSON round trip unchanged (dates,
    non-string keys), is left out and so is always read as YAML."""
    import json
    files: dict[str, dict] = {}
    for kind in CATALOG_KINDS:
        for path in sorted((specs_dir() / kind).glob("*.yaml")):
            try:
                text = path.read_text(encoding="utf-8")
                data = F.load_yaml_mapping(path, kind)
                encoded = json.dumps(data, allow_nan=False)   # keeps key order
            except (SpecError, OSError, UnicodeDecodeError, TypeError, ValueError):
                continue
            if json.loads(encoded) == data:
                files[f"{kind}/{path.name}"] = {"text": text, "data": data}
    return {"format": CATALOG_CACHE_FORMAT, "files": files}


def catalog_cache_text(doc: dict) -> str:
    """The cache document as file text: deterministic, one line per spec file."""
    import json
    lines = [json.dumps(name) + ": " + json.dumps({"text": entry["text"], "data": entry["data"]}, ensure_ascii=False)
             for name, entry in sorted(doc["files"].items())]
    return ('{"format": ' + json.dumps(doc["format"]) + ', "files": {\n' + ",\n".join(lines) + "\n}}\n")


@functools.cache
def _catalog_files(kind: str) -> dict[str, Path]:
    """name (and alias) -> file for one catalog folder (`hardware` or `models`)."""
    folder = specs_dir() / kind
    try:
        names = sorted(os.listdir(folder))   # (cheaper than Path.glob + sorting Paths: start-up time)
    except OSError:
        return {}
    return {name[:-len(".yaml")]: folder / name for name in names if name.endswith(".yaml")}


@functools.cache
def _model_aliases() -> dict[str, Path]:
    """alias -> file, read from the presets' `aliases` lists (only when a name is not a file stem)."""
    aliases: dict[str, Path] = {}
    for path in _catalog_files("models").values():
        for alias in _read_spec(path, "model").get("aliases") or []:
            aliases.setdefault(str(alias).lower(), path)
    return aliases


def hardware_names() -> list[str]:
    return sorted(_catalog_files("hardware"))


def model_names() -> list[str]:
    return sorted(n for n in _catalog_files("models") if not n.startswith("_"))


@functools.cache
def _load_hardware_path(path: str) -> Hardware:
    return hardware_from_mapping(_read_spec(Path(path), "hardware"), path)


def load_hardware(value: str) -> Hardware:
    """A catalog name (`h100-sxm`) or a path to a hardware YAML file."""
    value = str(value).strip()
    files = _catalog_files("hardware")
    key = value.lower()
    if key in files:
        return _load_hardware_path(str(files[key]))
    if _looks_like_path(value):
        return _load_hardware_path(value)
    raise SpecError(f"unknown hardware {F.show(value)}{did_you_mean(key, files)}; run `trainest list hardware` "
                    f"for the catalog, or give a path to a hardware YAML file")


@functools.cache
def _load_model_path(path: str) -> Model:
    return model_from_mapping(_read_spec(Path(path), "model"), path)


@functools.cache
def _load_hf_config_path(path: str) -> Model:
    from trainest import hf_config  # only here: a YAML or preset model never pays for it (start-up time)
    return hf_config.load_hf_config(Path(path))


# Models people ask for that trainest cannot express, and why (said instead of "unknown model").
NOT_EXPRESSIBLE_MODELS = {
    **dict.fromkeys(("nemotron-3-nano", "nemotron-3-super", "nemotron-3-ultra", "nemotron-3.5-lightning"),
                    "its layers are a hybrid of Mamba-2 state-space, attention and MoE layers; trainest models "
                    "transformer layers (attention + MLP) only"),
    "deepseek-v4-flash": "its attention (compressed sparse attention with an indexer, one shared KV head, grouped "
                         "output low-rank projections) and hyper-connections are neither standard attention nor MLA",
}


def _hf_config_file(value: str) -> Path | None:
    """The config.json `value` names (a `.json` path, or a folder holding config.json), else None."""
    if value.lower().endswith(".json"):
        return Path(value)
    try:
        is_dir = Path(value).is_dir()
    except OSError:   # a name too long for the file system is not a folder
        return None
    if not is_dir:
        return None
    if not (Path(value) / "config.json").is_file():
        raise SpecError(f"model file {F.show(value, F.MAX_SHOWN_PATH_CHARS)} is a directory holding no config.json; "
                        f"give a model YAML file, or a Hugging Face config.json or its folder")
    return Path(value) / "config.json"


def load_model(value: str) -> Model:
    """A preset name (`llama3-8b`), a path to a model YAML file, or a Hugging Face `config.json` (or
    the folder holding it; read offline by trainest/hf_config.py)."""
    value = str(value).strip()
    files = _catalog_files("models")
    key = value.lower()
    if key in files:
        return _load_model_path(str(files[key]))
    hf = _hf_config_file(value)
    if hf is not None:
        return _load_hf_config_path(str(hf))
    if _looks_like_path(value):
        return _load_model_path(value)
    if key in _model_aliases():
        return _load_model_path(str(_model_aliases()[key]))
    if key in NOT_EXPRESSIBLE_MODELS:
        raise SpecError(f"model {F.show(value)} is not expressible in trainest: {NOT_EXPRESSIBLE_MODELS[key]}")
    hint = did_you_mean(key, set(files) | set(_model_aliases()))
    raise SpecError(f"unknown model {F.show(value)}{hint}; run "
                    f"`trainest list models` for the presets, or give a path to a model YAML file or a Hugging Face "
                    f"config.json")


# with_shape's names for the `moe:` keys it overrides (the CLI's --experts, --top-k, --expert-ffn-hidden,
# --moe-imbalance)
MOE_OVERRIDES = {"experts": "experts", "top_k": "top_k", "expert_ffn_hidden": "expert_ffn_hidden",
                 "moe_imbalance": "imbalance"}


def with_shape(model: Model, **overrides: object) -> Model:
    """A copy of `model` with shape fields replaced (None means keep), re-validated.

    Dense keys: layers, hidden, ffn_hidden, heads, kv_heads, vocab, mlp (and any other Model field).
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
    moe_changed = {MOE_OVERRIDES[k]: changed.pop(k) for k in list(changed) if k in MOE_OVERRIDES}
    if moe_changed:
        if model.moe is None:
            if "experts" not in moe_changed or "top_k" not in moe_changed:
                raise SpecError(f"model options: {', '.join(sorted(moe_changed))} need a mixture-of-experts model, "
                                f"and {model.name} is dense; give both experts and top_k to make its MLPs mixtures "
                                f"of experts")
            data["moe"] = {"expert_ffn_hidden": model.ffn_hidden}
        elif ("expert_ffn_hidden" in moe_changed and model.moe.shared_experts
              and model.moe.shared_width == model.moe.expert_ffn_hidden):
            data["moe"]["shared_expert_ffn_hidden"] = moe_changed["expert_ffn_hidden"]
        data["moe"].update(moe_changed)
    data.update(changed)
    data["name"] = name
    return model_from_mapping(data, "model options")


def with_efficiency(hardware: Hardware, **values: Any) -> Hardware:
    """A copy of `hardware` with some efficiency fields replaced (floats, or arrays of trial values
    in calibration)."""
    return replace(hardware, efficiency=replace(hardware.efficiency, **values))
