"""What the user asked: the `Scenario`, built and validated once from a mapping (CLI or YAML).

`scenario_from_mapping` is the only way a Scenario is made from user data; it fills documented
defaults, records which values were derived (so reports can show them), and checks every
divisibility rule with a message that says what would be allowed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainest import fields as F
from trainest.catalog import (
    Hardware,
    Model,
    hardware_reference,
    load_hardware,
    load_model,
    model_from_mapping,
    model_mapping,
    with_shape,
)
from trainest.choices import (
    ADAM_MOMENTS,
    ATTENTIONS,
    BASE_BITS,
    DEFAULT_RECOMPUTE_MODULES,
    DP_COLLECTIVES,
    FINETUNE_CODES,
    FINETUNES,
    KERNELS,
    LORA_TARGETS,
    MOE_OVERLAPS,
    OFFLOAD_CODES,
    OFFLOADS,
    PIPELINE_SCHEDULES,
    PIPELINE_SPLITS,
    PRECISIONS,
    RECOMPUTE_CODES,
    RECOMPUTE_MODULES,
    RECOMPUTES,
)
from trainest.errors import SpecError
from trainest.frameworks import DEFAULT_FRAMEWORK, FRAMEWORKS, QLORA_FRAMEWORK
from trainest.knobs import FINETUNE, FINETUNE_KEYS, KNOBS, PARALLEL, PARALLEL_KEYS, SCENARIO
from trainest.layout import Job, Layout
from trainest.units import parse_count, parse_length

DEFAULT_MODEL = "llama3-8b"
DEFAULT_HARDWARE = "h100-sxm"
DEFAULT_DEVICES = 8
DEFAULT_PRECISION = "bf16"
DEFAULT_TOKENS_PER_PARAM = 20.0     # Hoffmann et al. 2022 (Chinchilla): ~20 training tokens per parameter
# A LoRA/QLoRA fine-tune trains on a data set, not a compute-optimal budget: 100 M tokens (e.g. 2 epochs of 50k
# examples of 1k tokens; Alpaca's 52k instructions are ~10 M tokens, Tulu 3's SFT mix ~1 B), docs/cases.md's yardstick
DEFAULT_FINETUNE_TOKENS = 100e6
DEFAULT_PUE = 1.2                   # typical modern data-centre power usage effectiveness
# Carbon intensity of the world's electricity generation in 2023: 480 gCO2/kWh (Ember, Global Electricity
# Review 2024, world power-sector CO2 intensity; the IEA's figures for the same year are within a few per
# cent). Direct (combustion) emissions of generation, not life-cycle; a region's grid can be 20-800.
DEFAULT_GRID_GCO2_PER_KWH = 480.0
# LoRA defaults: rank 16 on every linear layer of the blocks (PEFT's target_modules="all-linear"; the
# QLoRA paper finds adapters on all linear layers needed to match full fine-tuning, Dettmers et al. 2023
# §4; r = 16 is the common recipe value, between PEFT's default 8 and the paper's 64)
DEFAULT_LORA_RANK = 16
DEFAULT_LORA_TARGETS = "all"
QLORA_PRECISIONS = ("bf16", "fp16", "fp32", "tf32")   # bitsandbytes dequantises NF4 to the 16/32-bit compute dtype
# Device memory a layout must leave free to count as fitting (`memory_headroom`): 5 % of capacity (4 GiB on
# an 80 GB device). The memory model counts what training needs plus a fixed framework reserve and 5 %
# fragmentation (docs/model.md §7.5); what it leaves out varies from run to run: the caching allocator's
# peak above the live tensors (torchtitan's published peaks sit 8-13 GiB above trainest's count at 8B),
# NCCL buffers per communicator, CUDA graphs, a dataloader's pinned memory. A plan at 71.4 of 74.5 GiB is
# not a safe fit. `0` turns the margin off (what ran, e.g. the published runs, may well use all of it).
DEFAULT_MEMORY_HEADROOM = "5%"

# The one default scenario (with or without options, CLI or YAML): an everyday case that fits, Llama 3
# 8B on one 8-GPU H100 node with FSDP, selective recompute and a 0.5M-token batch (torchtitan's Llama 3
# 8B recipe: FSDP on 8 GPUs). Every knob a user leaves out keeps its default where that is valid with
# what was given, and is marked derived:
DEFAULT_ZERO = 3                    # FSDP / ZeRO-3 without pipeline parallelism (torchtitan, PyTorch FSDP) ...
DEFAULT_ZERO_WITH_PP = 1            # ... the distributed optimizer (ZeRO-1) with it (Megatron-LM): ZeRO-3 would
                                    #     gather every stage's weights again for every micro-batch
DEFAULT_TOKENS_PER_STEP = 64 * 8192   # 0.5M tokens: 64 sequences of Llama 3's 8192; rounded up to a multiple
                                      # of dp·micro_batch (·pp when interleaved) so that it divides

# the keys of a scenario mapping: the scenario knobs (trainest.knobs), the model and the layout
SCENARIO_KEYS = ("model", *(k.yaml_key for k in KNOBS if k.group == SCENARIO and k.name != "model"), PARALLEL,
                 FINETUNE)
RUN_ONLY_KEYS = ("id", "set", "source", "measured", "expressible", "reason", "confidence", "notes", "duplicate_of")
# informational keys of the `inputs` echo in `estimate --json`, accepted so that it loads again:
# `derived` is ignored; `micro_batches` must agree with global_batch / (dp · micro_batch)
ECHO_KEYS = ("derived", "micro_batches")


@dataclass(frozen=True)
class Parallel:
    """The parallel layout. N = tp·pp·cp·dp devices."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    vpp: int = 1                 # virtual (interleaved) stages per pipeline rank
    zero: int = 0                # 0 none, 1 optimizer state, 2 + gradients, 3 + weights (FSDP)
    sequence_parallel: bool = False
    tp_overlap: bool = False     # TP collectives pipelined with GEMMs (Megatron --tp-comm-overlap)
    dp_shard: int = 0            # ZeRO shard group size (hybrid sharding, HSDP); 0 means all of dp
    pipeline_split: str = "even"  # even (L divides by p·v) | balanced (embedding and loss count as layers)
    dp_collectives: str = "hierarchical"  # DP rings over every NIC of a node | flat: one NIC per rank
    dp_overlap: bool = True      # the gradient reduction overlapped with the backward (bucketing)
    ep: int = 1                  # expert parallel size (MoE layers)
    etp: int = 1                 # expert tensor parallel size (MoE layers; ep·etp·edp = tp·cp·dp)
    moe_overlap: str = "none"    # what the framework overlaps of the MoE all-to-alls: none | deepep
    pipeline_schedule: str = "1f1b"   # PIPELINE_SCHEDULES: 1f1b (interleaved with vpp > 1) | dualpipe
    pipeline_layout: str | None = None  # Megatron-Core's layout string (pipeline_split "layout"), as given
    rank_layers: tuple[int, ...] = ()    # decoder layers on each pipeline rank, from pipeline_layout

    @property
    def edp(self) -> int:
        """Expert data-parallel size tp·cp·dp/(ep·etp)."""
        return self.tp * self.cp * self.dp // (self.ep * self.etp)

    @property
    def shard(self) -> int:
        """Ranks the ZeRO state is sharded over: dp_shard, or dp when not hybrid."""
        return self.dp_shard or self.dp

    @property
    def devices(self) -> int:
        return self.tp * self.pp * self.cp * self.dp


@dataclass(frozen=True)
class FineTune:
    """What is trained: every weight (full), or low-rank adapters on a frozen base (LoRA; QLoRA: on a
    4-bit NF4 base). rank, alpha, targets and base_bits matter only for LoRA/QLoRA."""

    method: str = "full"         # FINETUNES
    rank: int = DEFAULT_LORA_RANK
    alpha: float | None = None   # the adapter scale α/r; no cost (None: α = r)
    targets: str = DEFAULT_LORA_TARGETS   # LORA_TARGETS
    base_bits: int = 16          # 16 | 8 (LLM.int8) | 4 (NF4, QLoRA)
    stated: bool = False         # the method was given (`finetune: full` too): a fine-tune, not pre-training

    @property
    def frozen(self) -> bool:
        """LoRA or QLoRA: the base weights are frozen."""
        return self.method != "full"

    @property
    def fine_tune(self) -> bool:
        """A fine-tune (any method given, or adapters), which trains on a fine-tuning set; False: pre-training."""
        return self.frozen or self.stated

    @property
    def scale(self) -> float:
        """The adapter scale's α as used: the given one, else α = r (the documented default)."""
        return float(self.rank) if self.alpha is None else self.alpha


@dataclass(frozen=True)
class Scenario:
    """A fully resolved training scenario (all defaults filled in)."""

    model: Model
    hardware: Hardware
    seq_len: int
    devices: int
    devices_per_node: int
    precision: str
    parallel: Parallel
    micro_batch: int
    global_batch: int
    recompute: str
    attention: str
    tokens: float
    price_usd_per_hour: float | None
    pue: float
    kernels: str = "fused"          # element-wise kernels: fused | eager (docs/model.md §2.5)
    framework: str = DEFAULT_FRAMEWORK   # trainest/frameworks.py
    grid_gco2_per_kwh: float = DEFAULT_GRID_GCO2_PER_KWH   # carbon intensity of the electricity [gCO2/kWh]
    finetune: FineTune = FineTune()
    offload: str = "none"           # OFFLOADS (docs/model.md §14)
    packed_length: int | None = None   # mean document length of packed sequences (None: unpacked; docs/model.md §2.4)
    adam_moments: str = "fp32"         # ADAM_MOMENTS: the dtype of Adam's two moments (docs/model.md §7.1)
    recompute_modules: tuple[str, ...] = DEFAULT_RECOMPUTE_MODULES   # what selective re-runs (docs/model.md §2.6)
    derived: tuple[str, ...] = field(default=())   # names of values filled by defaults
    memory_headroom: str = DEFAULT_MEMORY_HEADROOM   # as given: a share of capacity ("5%") or a size ("2GiB")
    memory_headroom_bytes: float = 0.0               # that margin [B]: a layout fits if it leaves it free

    @property
    def micro_batches(self) -> int:
        """m: micro-batches per step per pipeline = global batch / (dp · micro-batch)."""
        return self.global_batch // (self.parallel.dp * self.micro_batch)

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def _divisor_hint(n: int) -> str:
    divs = _divisors(n) if n <= 100_000 else []
    return "; try " + ", ".join(str(k) for k in divs[:16]) + (" ..." if len(divs) > 16 else "") if divs else ""


def _model_from(value: Any, where: str) -> Model:
    if isinstance(value, dict):
        return model_from_mapping(value, f"{where}.model")
    if isinstance(value, str) and value.strip():
        return load_model(value)
    raise SpecError(f"{where}.model: {F.show(value)} must be a preset name, a path, or a mapping of the shape")


class _Reader:
    """Reads a scenario mapping's values, recording which ones were filled by a default."""

    def __init__(self, data: dict[str, Any], where: str, derived: list[str]) -> None:
        self.data, self.where, self.derived = data, where, derived

    def default(self, key: str, value: Any) -> Any:
        """data[key], or `value` (recorded as derived) when absent."""
        if self.data.get(key) is None and key not in self.derived:
            self.derived.append(key)
            return value
        return self.data[key]

    def derive(self, key: str) -> None:
        if key not in self.derived:
            self.derived.append(key)


def _hardware_from(value: Any, where: str) -> Hardware:
    """The hardware of a scenario; one trainest does not model (Hardware.unsupported_reason) is refused."""
    if isinstance(value, dict):
        from trainest.catalog import hardware_from_mapping
        hardware = hardware_from_mapping(value, f"{where}.hardware")
    else:
        hardware = load_hardware(F.text(value, f"{where}.hardware"))
    if hardware.unsupported_reason:
        raise SpecError(f"hardware {hardware.name!r} ({hardware.execution_model}) cannot be estimated: "
                        f"{hardware.unsupported_reason}")
    return hardware


def default_zero(framework: str, pp: int) -> int:
    """The ZeRO stage a layout takes when none is given: DEFAULT_ZERO, DEFAULT_ZERO_WITH_PP with pp > 1, where
    the framework runs it (Framework.zero_stages_with); a framework without the distributed optimizer (ZeRO-1)
    shards fully with a pipeline too (torchtitan, OLMo-core: FSDP2 with pipeline parallelism), else its highest."""
    fw = FRAMEWORKS.get(framework, FRAMEWORKS[DEFAULT_FRAMEWORK])
    stages = fw.zero_stages_with(pp) or fw.zero_stages
    for z in ((DEFAULT_ZERO_WITH_PP,) if pp > 1 else ()) + (DEFAULT_ZERO,):
        if z in stages:
            return z
    return max(stages)


def _parallel_sizes(par: dict[str, Any], r: _Reader, framework: str) -> dict[str, Any]:
    """tp, pp, cp, vpp, zero (fsdp = zero 3; default `default_zero`: DEFAULT_ZERO, DEFAULT_ZERO_WITH_PP with
    pp > 1, where the framework has it), sequence_parallel and tp_overlap of `parallel`."""
    w = f"{r.where}.parallel"
    sizes: dict[str, Any] = {k: F.integer(par.get(k, 1), f"{w}.{k}", maximum=10**6)
                             for k in ("tp", "pp", "cp", "vpp", "ep", "etp")}
    if par.get("pp") is None and isinstance(par.get("pipeline_layout"), str):
        # a layout without pp: its stages over vpp (pipeline_layout.stage_count; checked with the layout)
        from trainest.pipeline_layout import stage_count
        stages = stage_count(par["pipeline_layout"], f"{w}.pipeline_layout")
        sizes["pp"] = stages // sizes["vpp"] if stages % sizes["vpp"] == 0 else sizes["pp"]
    zero = par.get("zero")
    if isinstance(zero, int) and not isinstance(zero, bool) and zero > 3:
        raise SpecError(f"{w}.zero: {zero} is not a ZeRO stage; allowed: 0, 1, 2, 3 (at most 3)")
    fsdp = None if par.get("fsdp") is None else F.boolean(par["fsdp"], f"{w}.fsdp")
    # fsdp: true is zero 3; fsdp: false says "not fully sharded": plain data parallelism (zero 0) unless a
    # zero stage below 3 is given. Either way the stage is the user's, not derived.
    if fsdp is None:
        default = default_zero(framework, sizes["pp"])
    else:
        default = 3 if fsdp else 0
    sizes["zero"] = F.integer(default if zero is None else zero, f"{w}.zero", minimum=0, maximum=3)
    if fsdp is True and zero is not None and sizes["zero"] != 3:
        raise SpecError(f"{w}: fsdp means zero=3, but zero={zero} was given")
    if fsdp is False and sizes["zero"] == 3:
        raise SpecError(f"{w}: fsdp: false contradicts zero=3 (ZeRO-3 is fully sharded data parallel); allowed "
                        f"with fsdp: false: zero 0, 1 or 2 (or drop fsdp)")
    for key in ("tp", "pp", "cp", "vpp", "zero", "sequence_parallel"):
        if par.get(key) is None and not (key == "zero" and fsdp is not None):
            r.derive(f"parallel.{key}")
    sizes["sequence_parallel"] = F.boolean(par.get("sequence_parallel", False), f"{w}.sequence_parallel")
    sizes["tp_overlap"] = F.boolean(par.get("tp_overlap", False), f"{w}.tp_overlap")
    return sizes


def _devices_and_dp(par: dict[str, Any], sizes: dict[str, Any], r: _Reader,
                    devices_per_node: int) -> tuple[int, int]:
    """(devices N, data-parallel size d) with N = t·p·c·d: either may be derived from the other. Neither
    given: one node's devices, at most DEFAULT_DEVICES (one DGX Spark, laptop or card is one device),
    or the fewest above that which hold the model-parallel layout given."""
    tp, pp, cp, where = sizes["tp"], sizes["pp"], sizes["cp"], r.where
    model_parallel = tp * pp * cp
    if r.data.get("devices") is None and par.get("dp") is not None:
        devices = model_parallel * F.integer(par["dp"], f"{where}.parallel.dp")
        r.derived.append("devices")
    else:
        node = r.data.get("devices_per_node")      # as given (checked later), else the hardware's
        node = node if isinstance(node, int) and not isinstance(node, bool) else devices_per_node
        base = max(min(DEFAULT_DEVICES, node), 1)
        default = -(-base // model_parallel) * model_parallel
        devices = F.integer(r.default("devices", default), f"{where}.devices", maximum=10**7)
    if par.get("dp") is None:
        if devices % model_parallel:
            raise SpecError(f"{where}: devices={devices} is not divisible by tp·pp·cp = {tp}·{pp}·{cp} = "
                            f"{model_parallel}"
                            f"; tp·pp·cp must divide {devices}{_divisor_hint(devices)}")
        r.derived.append("parallel.dp")
        return devices, devices // model_parallel
    dp = F.integer(par["dp"], f"{where}.parallel.dp", maximum=10**7)
    if dp * model_parallel != devices:
        raise SpecError(f"{where}: tp·pp·cp·dp = {tp}·{pp}·{cp}·{dp} = {dp * model_parallel} does not equal "
                        f"devices={devices}; omit dp to derive it")
    return devices, dp


def _dp_shard(par: dict[str, Any], dp: int, zero: int, where: str) -> int:
    dp_shard = F.integer(par.get("dp_shard") or dp, f"{where}.parallel.dp_shard", maximum=10**7)
    if dp % dp_shard:
        raise SpecError(f"{where}: dp_shard={dp_shard} does not divide dp={dp}{_divisor_hint(dp)}")
    if dp_shard != dp and zero == 0:
        raise SpecError(f"{where}: dp_shard={dp_shard} (hybrid sharding) needs zero >= 1; "
                        f"with zero=0 nothing is sharded")
    return dp_shard


def _check_layout(model: Model, seq_len: int, sizes: dict[str, Any], split: str, where: str) -> None:
    """The divisibility rules of the layout (heads by t, layers by p·v, the sequence by c)."""
    tp, pp, vpp, cp = sizes["tp"], sizes["pp"], sizes["vpp"], sizes["cp"]
    if model.heads % tp:
        raise SpecError(f"{where}: tp={tp} does not divide heads={model.heads}{_divisor_hint(model.heads)}")
    if vpp > 1 and pp == 1:
        raise SpecError(f"{where}: vpp={vpp} needs pipeline parallelism (pp > 1)")
    if split == "even" and model.layers % pp:
        raise SpecError(f"{where}: pp={pp} does not divide layers={model.layers}{_divisor_hint(model.layers)}"
                        f"; or use parallel.pipeline_split: balanced (uneven stages)")
    if split == "even" and (model.layers // pp) % vpp:
        raise SpecError(f"{where}: vpp={vpp} does not divide layers per stage = {model.layers}/{pp} = "
                        f"{model.layers // pp}{_divisor_hint(model.layers // pp)}")
    if pp * vpp > model.layers + 2:
        raise SpecError(f"{where}: pp·vpp = {pp * vpp} pipeline chunks exceed layers={model.layers}")
    if seq_len % cp:
        raise SpecError(f"{where}: cp={cp} does not divide seq_len={seq_len}{_divisor_hint(seq_len)}")
    if model.hybrid is not None:
        _check_hybrid_layout(model, tp, cp, where)


def _check_hybrid_layout(model: Model, tp: int, cp: int, where: str) -> None:
    """A hybrid model's Mamba-2 blocks split their heads and their B/C groups over t; context
    parallelism over a Mamba-2 scan is not modelled."""
    mamba = model.mamba
    for name, value in (("mamba_heads", mamba.heads), ("groups", mamba.groups)):
        if value % tp:
            raise SpecError(f"{where}: tp={tp} does not divide the Mamba-2 {name}={value}{_divisor_hint(value)}")
    if cp > 1:
        raise SpecError(f"{where}: cp={cp}: context parallelism over {model.name}'s Mamba-2 blocks is not "
                        f"modelled; allowed: cp 1")


def hybrid_support(model: Model, recompute: str, finetune_method: str, where: str) -> None:
    """What trainest does not model for a hybrid model: op recompute (torchtitan's per-op policy) and
    LoRA/QLoRA adapters (their targets in Mamba-2 blocks)."""
    if model.hybrid is None:
        return
    if recompute == "op":
        raise SpecError(f"{where}.recompute: op is not modelled for {model.name}'s hybrid blocks; allowed: none, "
                        f"selective, full")
    if finetune_method != "full":
        raise SpecError(f"{where}.finetune.method: {finetune_method} adapters in hybrid Mamba-2 models are not "
                        f"modelled; allowed: full fine-tuning (finetune: full) or pre-training")


def default_global_batch(seq_len: int, dp: int, micro_batch: int, group: int = 1) -> int:
    """DEFAULT_TOKENS_PER_STEP in whole sequences, rounded up to a multiple of dp·micro_batch·group
    (group = pp for the interleaved schedule) [sequences]."""
    unit = dp * micro_batch * group
    sequences = max(1, -(-DEFAULT_TOKENS_PER_STEP // seq_len))
    return -(-sequences // unit) * unit


def recompute_modules_of(value: Any, recompute: str, model: Model, where: str) -> tuple[str, ...]:
    """What selective recompute re-runs (Megatron-Core's `recompute_modules`): a list of
    RECOMPUTE_MODULES or their comma-separated names; not given: the attention core. Given, it needs
    `recompute: selective`, and each module must exist in the model."""
    if value is None:
        return DEFAULT_RECOMPUTE_MODULES
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        raise SpecError(f"{where}: {value!r} must be a list of module names; allowed: {', '.join(RECOMPUTE_MODULES)}")
    picked = tuple(dict.fromkeys(n.strip() for n in names if n.strip()))
    if not picked:
        raise SpecError(f"{where}: no module given; allowed: {', '.join(RECOMPUTE_MODULES)}")
    for n in picked:
        if n not in RECOMPUTE_MODULES:
            raise SpecError(f"{where}: unknown module {n!r}; allowed: {', '.join(RECOMPUTE_MODULES)}")
    if recompute != "selective" and picked != DEFAULT_RECOMPUTE_MODULES:
        raise SpecError(f"{where}: modules are what selective recompute re-runs, but recompute is {recompute!r}; "
                        f"use recompute: selective (--recompute selective) with them")
    missing = {"mla_up_proj": (model.mla is None, "has no multi-head latent attention"),
               "moe_act": (model.moe is None, "has no mixture-of-experts layers"),
               "moe": (model.moe is None, "has no mixture-of-experts layers"),
               "shared_experts": (model.moe is None or model.moe.shared_experts == 0, "has no shared experts"),
               "mlp": (model.dense_layers_count == 0, "has no dense MLP layers")}
    for n in picked:
        absent, why = missing.get(n, (False, ""))
        if absent:
            raise SpecError(f"{where}: {n} cannot be recomputed: {model.name} {why}")
    return tuple(m for m in RECOMPUTE_MODULES if m in picked)


def _check_experts(model: Model, sizes: dict[str, Any], dp: int, where: str) -> None:
    """The expert layout (docs/model.md §15, §15.8): ep divides the experts; etp divides the expert width
    f_e (each routed expert's MLP is split etp ways) and tp (the expert tensor-parallel group is the
    innermost part of the tensor-parallel group: the plan searches exactly these); ep·etp divides the ranks
    of a pipeline stage (Megatron-Core: ep·etp·edp = tp·cp·dp). A dense model takes ep = etp = 1."""
    ep, etp, tp, stage_ranks = sizes["ep"], sizes["etp"], sizes["tp"], sizes["tp"] * sizes["cp"] * dp
    if model.moe is None:
        for key in ("ep", "etp"):
            if sizes[key] != 1:
                raise SpecError(f"{where}.parallel.{key}: {sizes[key]} needs a mixture-of-experts model, and "
                                f"{model.name} is dense; allowed: 1")
        return
    experts, width = model.moe.experts, model.moe.expert_ffn_hidden
    if experts % ep:
        raise SpecError(f"{where}.parallel.ep: {ep} does not divide experts={experts}{_divisor_hint(experts)}")
    etps = _divisors(math.gcd(tp, width))
    if width % etp:
        raise SpecError(f"{where}.parallel.etp: {etp} does not divide expert_ffn_hidden={width} (each routed "
                        f"expert's width is split etp ways); allowed with tp={tp}: {', '.join(map(str, etps))}")
    if tp % etp:
        raise SpecError(f"{where}.parallel.etp: {etp} does not divide tp={tp} (the expert tensor-parallel group "
                        f"lies inside the tensor-parallel group); allowed with tp={tp}: {', '.join(map(str, etps))}")
    if stage_ranks % (ep * etp):
        cli = where == "options"
        ep_name, etp_name = ("--ep", "--etp") if cli else ("parallel.ep", "parallel.etp")
        eps = [e for e in _divisors(experts) if stage_ranks % (e * etp) == 0]
        ks = [k for k in etps if stage_ranks % (ep * k) == 0]
        with_ep = f"; with {ep_name} {ep}: {etp_name} {', '.join(map(str, ks))}" if ks else ""
        raise SpecError(f"{where}: {ep_name}, {etp_name}: ep·etp = {ep}·{etp} = {ep * etp} does not divide the "
                        f"{stage_ranks} ranks of a pipeline stage (tp·cp·dp = {tp}·{sizes['cp']}·{dp}), and their "
                        f"product must; "
                        f"with {etp_name} {etp}: {ep_name} {', '.join(map(str, eps))}{with_ep}")


def _batch(r: _Reader, dp: int, echoed_micro_batches: Any, seq_len: int, group: int) -> tuple[int, int]:
    """(micro-batch b, global batch B); B must divide by d·b (the echoed micro_batches must agree)."""
    where = r.where
    micro_batch = F.integer(r.default("micro_batch", 1), f"{where}.micro_batch", maximum=10**7)
    tokens = r.data.get("global_batch_tokens")
    if tokens is not None:
        if r.data.get("global_batch") is not None:
            raise SpecError(f"{where}: give the global batch once: global_batch (sequences) or global_batch_tokens, "
                            f"not both")
        count = F.integer(parse_length(tokens, f"{where}.global_batch_tokens"), f"{where}.global_batch_tokens",
                          maximum=10**12)
        if count % seq_len:
            raise SpecError(f"{where}.global_batch_tokens: {count:,} tokens is not a whole number of sequences of "
                            f"seq_len={seq_len}; use a multiple of {seq_len}")
        r.data = {**r.data, "global_batch": count // seq_len}
    global_batch = F.integer(r.default("global_batch", default_global_batch(seq_len, dp, micro_batch, group)),
                             f"{where}.global_batch", maximum=10**9)
    if global_batch % (dp * micro_batch):
        raise SpecError(f"{where}: global_batch={global_batch} is not divisible by dp·micro_batch = {dp}·{micro_batch}"
                        f" = {dp * micro_batch}; use a multiple of {dp * micro_batch}")
    if echoed_micro_batches is not None and \
            F.integer(echoed_micro_batches, f"{where}.micro_batches") != global_batch // (dp * micro_batch):
        raise SpecError(f"{where}.micro_batches: {echoed_micro_batches!r} is derived and must equal global_batch / "
                        f"(dp · micro_batch) = {global_batch // (dp * micro_batch)}; remove it")
    return micro_batch, global_batch


def _check_network(hardware: Hardware, devices_per_node: int, devices: int, where: str) -> None:
    """Every path the layout's groups need is in the hardware data (docs/model.md §3.1): no placeholder
    network for a group that leaves the node, no placeholder rate for an unknown intra-node path."""
    from trainest.step.collectives import network_gap  # (the step model's tiers; imported on use)
    cli = where == "options"
    gap = network_gap(hardware, devices_per_node, devices,
                      node_option="--devices-per-node" if cli else "devices_per_node:",
                      hardware_option="--hardware" if cli else "hardware:")
    if gap:
        raise SpecError(f"{where}: {gap}")


def _check_schedule(sizes: dict[str, Any], dp: int, micro_batch: int, global_batch: int, where: str) -> None:
    """The interleaved schedule's rule (docs/model.md §5.2): with vpp > 1, the micro-batches per step
    m = B/(d·b) must be a multiple of pp (Megatron-LM, `forward_backward_pipelining_with_interleaving`)."""
    pp, vpp = sizes["pp"], sizes["vpp"]
    m = global_batch // (dp * micro_batch)
    if vpp > 1 and m % pp:
        raise SpecError(f"{where}: the interleaved schedule (vpp={vpp}) needs the micro-batches per step, "
                        f"m = global_batch/(dp·micro_batch) = {global_batch}/({dp}·{micro_batch}) = {m}, to be a "
                        f"multiple of pp={pp} (Megatron-LM's interleaved 1F1B); use vpp=1, or a global_batch "
                        f"that is a multiple of dp·micro_batch·pp = {dp * micro_batch * pp}")


def _check_framework_pipeline(framework: str, vpp: int, layout: bool, where: str, label: str = "") -> None:
    """What the framework's pipeline can run: the interleaved schedule (vpp > 1), a pipeline layout."""
    named = label or framework      # the framework in the messages
    fw = FRAMEWORKS[framework]
    if layout and not fw.stage_layout:
        raise SpecError(f"{where}.parallel.pipeline_layout: {named} does not place layers per stage as asked "
                        f"(its pipeline splits them itself); frameworks that do: "
                        f"{', '.join(n for n, f in FRAMEWORKS.items() if f.stage_layout)}")
    if vpp > 1 and not fw.interleaved:
        raise SpecError(f"{where}: vpp={vpp} needs the interleaved pipeline schedule, which {named} "
                        f"does not have; use vpp=1 or a framework that has it")


def _moe_overlap_of(par: dict[str, Any], model: Model, where: str) -> str:
    """`parallel.moe_overlap` (MOE_OVERLAPS); as ep and etp, refused on a dense model unless none."""
    moe_overlap = F.choice(par.get("moe_overlap", "none"), f"{where}.parallel.moe_overlap", MOE_OVERLAPS)
    if moe_overlap != "none" and model.moe is None:
        raise SpecError(f"{where}.parallel.moe_overlap: {moe_overlap} needs a mixture-of-experts model (it hides "
                        f"the MoE all-to-alls), and {model.name} is dense; allowed: none")
    return moe_overlap


def _check_framework(framework: str, sizes: dict[str, Any], par: dict[str, Any], where: str,
                     label: str = "") -> None:
    """What the framework runs of the layout: its pipeline schedules and layouts, its ZeRO stages."""
    named = label or framework      # the framework in the messages
    _check_framework_pipeline(framework, sizes["vpp"], par.get("pipeline_layout") is not None, where, label)
    if sizes["tp_overlap"] and not FRAMEWORKS[framework].tp_overlap:
        name = "--tp-overlap" if where == "options" else f"{where}.parallel.tp_overlap"
        raise SpecError(f"{name}: {named} does not pipeline its TP collectives with the GEMMs (Transformer "
                        f"Engine's userbuffers, torchtitan's async TP); frameworks that do: "
                        f"{', '.join(n for n, f in FRAMEWORKS.items() if f.tp_overlap)}")
    _check_framework_zero(framework, sizes["pp"], sizes["zero"], "zero" not in par and "fsdp" not in par, where,
                          label)


def _recompute_of(r: _Reader, framework: str, where: str, label: str = "") -> str:
    """`recompute`: one of the framework's modes (`Framework.recompute_modes`), by default its own
    (`Framework.default_recompute`: Megatron's selective, torchtitan's per-op, else none)."""
    named = label or framework      # the framework in the messages
    fw = FRAMEWORKS[framework]
    recompute = F.choice(r.default("recompute", fw.default_recompute), f"{where}.recompute", RECOMPUTES)
    if recompute not in fw.recompute_modes:
        name = "--recompute" if where == "options" else f"{where}.recompute"
        raise SpecError(f"{name}: {recompute} is not a recompute mode of {named}; allowed under it: "
                        f"{', '.join(fw.recompute_modes)} (selective is Megatron's, op torchtitan's per-op "
                        f"checkpointing)")
    return recompute


def _check_framework_hardware(framework: str, hardware: Hardware, where: str) -> None:
    """The framework runs on this kind of hardware (`Framework.runs_on`): no Megatron on a TPU, no MLX on a GPU."""
    fw = FRAMEWORKS[framework]
    if hardware.kind in fw.runs_on:
        return
    name = "--framework" if where == "options" else f"{where}.framework"
    able = ", ".join(n for n, f in FRAMEWORKS.items() if hardware.kind in f.runs_on)
    raise SpecError(f"{name}: {framework} does not run on {hardware.name} ({hardware.kind}); frameworks that "
                    f"do: {able}")


def _check_framework_zero(framework: str, pp: int, zero: int, derived: bool, where: str, label: str = "") -> None:
    """What the framework's data parallelism runs (trainest/frameworks.py: `pipeline`, `zero_stages`,
    `pp_zero_stages`, with their sources): pipeline parallelism at all, and the ZeRO stage with or without it."""
    named = label or framework      # the framework in the messages
    fw = FRAMEWORKS[framework]
    cli = where == "options"
    pp_name, zero_name = ("--pp", "--zero") if cli else ("parallel.pp", "parallel.zero")
    if pp > 1 and not fw.pipeline:
        raise SpecError(f"{where}: {pp_name} {pp}: {named} has no pipeline parallelism; allowed under it: "
                        f"{pp_name} 1 (frameworks with a pipeline: "
                        f"{', '.join(n for n, f in FRAMEWORKS.items() if f.pipeline)})")
    stages = fw.zero_stages_with(pp)
    if zero in stages:
        return
    given = "" if not derived else " (the default)"
    listed = ", ".join(map(str, stages))
    if zero not in fw.zero_stages:
        raise SpecError(f"{where}: {zero_name} {zero}{given}: {named} has no ZeRO-{zero} (trainest/frameworks.py); "
                        f"allowed under it: {zero_name} {listed}")
    raise SpecError(f"{where}: {zero_name} {zero}{given} with {pp_name} {pp}: {named} does not run ZeRO-{zero} "
                    f"with pipeline parallelism (DeepSpeed's PipelineEngine: ZeRO-2 and ZeRO-3 are incompatible "
                    f"with it); allowed with a pipeline: {zero_name} {listed}, or {pp_name} 1 for ZeRO-{zero}")


def _split_of(par: dict[str, Any], sizes: dict[str, Any], model: Model,
              where: str) -> tuple[str, str | None, tuple[int, ...]]:
    """(`pipeline_split`, the layout string, the decoder layers on each pipeline rank) of `parallel`: with
    a `pipeline_layout` (trainest/pipeline_layout.py) the split is "layout", else (split, None, ())."""
    from trainest.pipeline_layout import rank_layers
    w = f"{where}.parallel"
    split = F.choice(par.get("pipeline_split", "even"), f"{w}.pipeline_split", PIPELINE_SPLITS)
    if par.get("pipeline_layout") is None:
        if split == "layout":
            raise SpecError(f"{w}.pipeline_split: layout needs parallel.pipeline_layout (the stages' layers, e.g. "
                            f"'Et*4|(t*4|)*14tmL'); or use even or balanced")
        return split, None, ()
    text = F.text(par["pipeline_layout"], f"{w}.pipeline_layout").strip()
    if par.get("pipeline_split") not in (None, "layout"):
        raise SpecError(f"{w}.pipeline_split: {par['pipeline_split']} with a pipeline_layout: the layout places the "
                        f"layers; leave pipeline_split out")
    if model.hybrid is not None:
        raise SpecError(f"{w}.pipeline_layout: a layout of hybrid Mamba-2 blocks is not modelled (its stages would "
                        f"need the block kinds they hold); leave it out for the balanced or even split")
    if par.get("pipeline_schedule") == "dualpipe":
        raise SpecError(f"{w}.pipeline_layout with pipeline_schedule dualpipe is not modelled (DualPipe places two "
                        f"stages on every device); use one of them")
    mtp_depth = model.mtp.depth if model.mtp is not None else 0
    return "layout", text, rank_layers(text, sizes["pp"], sizes["vpp"], model.layers, mtp_depth,
                                       f"{w}.pipeline_layout")


def _schedule_of(par: dict[str, Any], sizes: dict[str, Any], micro_batches: int, where: str) -> str:
    """`parallel.pipeline_schedule` (PIPELINE_SCHEDULES), with DualPipe's rules checked."""
    schedule = F.choice(par.get("pipeline_schedule", "1f1b"), f"{where}.parallel.pipeline_schedule",
                        PIPELINE_SCHEDULES)
    if schedule == "dualpipe":
        _check_dualpipe(sizes, micro_batches, where)
    return schedule


def _check_dualpipe(sizes: dict[str, Any], micro_batches: int, where: str) -> None:
    """DualPipe's rules (DeepSeek-V3 §3.2.1, deepseek-ai/DualPipe): an even number of pipeline stages, no
    virtual stages (each device holds two stages of its own), and an even number of micro-batches, at least pp.
    Without a pipeline (pp 1) there is nothing to schedule: the step is 1F1B's (and `plan` searches pp)."""
    pp, vpp = sizes["pp"], sizes["vpp"]
    if pp == 1:
        return
    if pp % 2:
        raise SpecError(f"{where}.parallel.pipeline_schedule: dualpipe needs an even pp (its two pipelines run "
                        f"from both ends); pp={pp}")
    if vpp > 1:
        raise SpecError(f"{where}.parallel.pipeline_schedule: dualpipe with vpp={vpp}: DualPipe has no virtual "
                        f"stages; use vpp=1")
    if micro_batches < pp or micro_batches % 2:
        raise SpecError(f"{where}.parallel.pipeline_schedule: dualpipe needs an even number of micro-batches per "
                        f"step of at least pp={pp} (half are fed from each end); m = {micro_batches}")


def require_a_pipeline_for_dualpipe(s: Scenario, where: str) -> None:
    """An estimate asked for DualPipe without a pipeline (pp 1, given or by default) is bad input: there is no
    schedule to apply, and its step would silently be 1F1B's. (`plan` and `sweep` keep pp 1 with it: a plan
    search weighs pipelines against none, and the plan's reproducing command leaves the schedule out.)"""
    if s.parallel.pipeline_schedule == "dualpipe" and s.parallel.pp == 1:
        raise SpecError(f"{where}.parallel.pipeline_schedule: dualpipe needs a pipeline, and pp=1 has none to "
                        f"schedule (the step would be 1F1B's); give an even pp (2, 4, ...) or leave the schedule out")


def memory_headroom_bytes(value: Any, capacity_bytes: float, where: str) -> tuple[str, float]:
    """(the margin as given, in bytes) of `memory_headroom`: "5%" (of capacity), "2GiB", "8e9" or 0."""
    from trainest.units import parse_bytes
    text = str(value).strip()
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or not text:
        raise SpecError(f"{where}: {F.show(value)} is not a margin; use a share of capacity such as 5% or a size "
                        f"such as 2GiB (0: none)")
    if text.endswith("%"):
        try:
            share = float(text[:-1]) / 100.0
        except ValueError:
            share = math.nan
        if not 0.0 <= share < 1.0:
            raise SpecError(f"{where}: {F.show(value)} must be a share of capacity from 0% to below 100%")
        return text, share * capacity_bytes
    if text in ("0", "0.0"):
        return text, 0.0
    size = parse_bytes(value, where)
    if size < 2**20 and not any(ch.isalpha() for ch in text.replace("e", "").replace("E", "")):
        # a bare number is bytes: one below a MiB is a share or a size without its unit, not a margin
        raise SpecError(f"{where}: {F.show(value)} is {size:g} bytes; give a share of capacity (e.g. 5%) or a size "
                        f"with its unit (e.g. {text}GiB), or 0 for none")
    if size >= capacity_bytes:
        raise SpecError(f"{where}: {F.show(value)} is at least the device's whole memory "
                        f"({capacity_bytes / 2**30:.1f} GiB)")
    return text, size


def default_tokens(model: Model, finetune: FineTune) -> float:
    """The tokens of the whole run when none are given: a pre-training budget of DEFAULT_TOKENS_PER_PARAM
    per parameter (Chinchilla), or for a fine-tune (a method given, full, LoRA or QLoRA) DEFAULT_FINETUNE_TOKENS,
    the size of a fine-tuning set, not of the model."""
    return DEFAULT_FINETUNE_TOKENS if finetune.fine_tune else DEFAULT_TOKENS_PER_PARAM * model.params


def default_tokens_text(finetune: FineTune) -> str:
    """How `default_tokens` set them, for the tables."""
    from trainest.units import fmt_si
    return (f"{fmt_si(DEFAULT_FINETUNE_TOKENS)} tokens for a fine-tune; give --tokens" if finetune.fine_tune
            else f"{DEFAULT_TOKENS_PER_PARAM:g} per parameter")


def _run_costs(r: _Reader, model: Model, hardware: Hardware,
               finetune: FineTune) -> tuple[float, float | None, float, float]:
    """(tokens to train, USD per device-hour, PUE, grid carbon intensity [gCO2/kWh])."""
    where, data = r.where, r.data
    if data.get("tokens") is None:
        tokens = default_tokens(model, finetune)
        r.derived.append("tokens")
    else:
        tokens = parse_count(data["tokens"], f"{where}.tokens")
        if tokens > 1e18:
            raise SpecError(f"{where}.tokens: {F.show(data['tokens'])} is absurdly large (at most 1e18)")
    if data.get("price_per_hour") is None:
        price_usd = hardware.price_usd_per_hour
        r.derived.append("price_per_hour")
    else:
        price_usd = F.number(data["price_per_hour"], f"{where}.price_per_hour", allow_zero=True, maximum=1e6)
    pue = F.number(r.default("pue", DEFAULT_PUE), f"{where}.pue", minimum=1.0, allow_zero=True, maximum=10.0)
    grid = F.number(r.default("grid_gco2_per_kwh", DEFAULT_GRID_GCO2_PER_KWH), f"{where}.grid_gco2_per_kwh",
                    allow_zero=True, maximum=5000.0)
    return tokens, price_usd, pue, grid


def check_finetune(data: Any, model: Model, precision: str, where: str) -> FineTune:
    """The `finetune:` mapping: method, and for LoRA/QLoRA rank (1..h), alpha, targets, base_bits."""
    w = f"{where}.finetune"
    if isinstance(data, str):            # `finetune: lora` is short for `finetune: {method: lora}`
        data = {"method": data}
    d = F.check_keys({} if data is None else data, w, (), FINETUNE_KEYS)
    method = F.choice(d.get("method", "full"), f"{w}.method", FINETUNES)
    stated = d.get("method") is not None
    if method == "full":
        given = [k for k in ("rank", "alpha", "targets") if d.get(k) is not None]
        if given:
            how = "full" if stated else "full (the default: no fine-tuning method given)"
            raise SpecError(f"{w}.{given[0]}: {F.show(d[given[0]])} applies to LoRA/QLoRA adapters only, and the "
                            f"method is {how}; give method lora or qlora (--finetune)")
        if d.get("base_bits") not in (None, 16):
            raise SpecError(f"{w}.base_bits: {F.show(d['base_bits'])} is for a frozen, quantised base (LoRA: 8, "
                            f"QLoRA: 4); a full fine-tune trains 16-bit weights: use 16 or method lora/qlora")
        return FineTune(stated=stated)
    rank = F.integer(d.get("rank", DEFAULT_LORA_RANK), f"{w}.rank", minimum=-10**12, maximum=10**12)
    if not 1 <= rank <= model.hidden:
        raise SpecError(f"{w}.rank: {rank} must be between 1 and the hidden size {model.hidden} of {model.name}")
    bits = F.integer_choice(d.get("base_bits", 4 if method == "qlora" else 16), f"{w}.base_bits", BASE_BITS)
    if method == "qlora" and bits != 4:
        raise SpecError(f"{w}.base_bits: {bits} is not allowed with method qlora: QLoRA's base is 4-bit NF4 "
                        f"(Dettmers et al. 2023); use base_bits 4, or method lora for a 16- or 8-bit base")
    if method == "lora" and bits == 4:
        raise SpecError(f"{w}.base_bits: 4 with method lora: a LoRA on a 4-bit NF4 base is QLoRA; use method qlora")
    if method == "qlora" and precision not in QLORA_PRECISIONS:
        raise SpecError(f"{where}.precision: {precision} with QLoRA: bitsandbytes dequantises the 4-bit base to the "
                        f"16- or 32-bit compute dtype; use one of {', '.join(QLORA_PRECISIONS)}")
    alpha = F.number(d.get("alpha"), f"{w}.alpha", allow_none=True, maximum=1e6)
    return FineTune(method=method, rank=rank, alpha=alpha,
                    targets=F.choice(d.get("targets", DEFAULT_LORA_TARGETS), f"{w}.targets", LORA_TARGETS),
                    base_bits=bits, stated=stated)


LORA_DEFAULT_KEYS = ("rank", "alpha", "targets", "base_bits")   # a LoRA's adapters: `finetune.<key>` when derived


def finetune_defaults(data: Any, ft: FineTune) -> list[str]:
    """The `finetune.<key>` values a LoRA/QLoRA took by default (not in the mapping), for `derived`; `finetune`
    itself when no method was given (pre-training: its echo `{method: full}` reloads as pre-training, not
    as a stated full fine-tune)."""
    if not ft.stated:
        return ["finetune"]
    if not ft.frozen:
        return []
    given = {} if not isinstance(data, dict) else data
    return [f"finetune.{k}" for k in LORA_DEFAULT_KEYS if given.get(k) is None]


def check_offload(data: Any, hardware: Hardware, where: str) -> str:
    """The offload mode, checked against the hardware: a unified memory has nothing to offload to,
    and offload needs the host link and the host's cores, memory and bandwidth."""
    offload = F.choice(data, where, OFFLOADS)
    if offload == "none":
        return offload
    hw, host = hardware, hardware.host
    if hw.memory_unified:
        raise SpecError(f"{where}: {offload} does not apply to {hw.name}: its memory is unified (CPU and "
                        f"device share {hw.memory_bytes / 1e9:.0f} GB), so there is no host memory to offload to; "
                        f"use offload none")
    if host.link.kind in (None, "none", "unified") or host.link.bytes_per_s_per_device is None:
        raise SpecError(f"{where}: {offload} needs the host link (CPU to device) of {hw.name}, which its "
                        f"hardware entry does not give (host.link); use offload none or a hardware file with "
                        f"host.link.gb_per_s")
    unknown = [name for name, value in (("host.cpu_cores", host.cpu_cores), ("host.memory_gb", host.memory_bytes),
                                        ("host.memory_gb_per_s", host.memory_bytes_per_s),
                                        ("host.devices", host.devices)) if value is None]
    if unknown:
        raise SpecError(f"{where}: {offload} needs the host's CPU cores, memory and memory bandwidth; "
                        f"{hw.name}'s entry does not give {', '.join(unknown)} ({host.system or 'host not described'});"
                        f" give them in a hardware file")
    return offload


def check_scenario_keys(data: Any, where: str) -> None:
    """A scenario mapping's keys, and its `parallel` block's, are the schema's (specs/README.md): the one
    check of `estimate`, `plan`, `compare` and `sweep` alike (a search reads only the job's keys of it, and
    a misspelt key would otherwise change its answer unseen)."""
    F.check_keys(data, where, (), SCENARIO_KEYS + RUN_ONLY_KEYS + ECHO_KEYS)
    if data.get("parallel") is not None:
        F.check_keys(data["parallel"], f"{where}.parallel", (), PARALLEL_KEYS)


def _packed_length_of(packed: Any, seq_len: int, where: str) -> int | None:
    """`packed_length`: the mean length of the examples packed into one sequence, at most the sequence."""
    if isinstance(packed, int) and not isinstance(packed, bool) and packed > seq_len:
        raise SpecError(f"{where}.packed_length: {packed} must be at most the sequence length {seq_len} (the mean "
                        f"length of the examples packed into one sequence)")
    return F.integer(packed, f"{where}.packed_length", maximum=seq_len, allow_none=True)


def scenario_from_mapping(data: dict[str, Any], where: str = "scenario", *,
                          shape: dict[str, Any] | None = None) -> Scenario:
    """Validate a scenario mapping (schema in specs/README.md), fill the defaults of the one default
    scenario (above) where that is valid with what was given, check divisibility.

    `shape` holds CLI shape overrides (layers, hidden, ...) applied on top of the model.
    """
    check_scenario_keys(data, where)
    echoed_micro_batches = data.get("micro_batches")
    data = {k: v for k, v in data.items() if k not in ECHO_KEYS}
    derived: list[str] = []
    r = _Reader(data, where, derived)
    model = _model_from(r.default("model", DEFAULT_MODEL), where)
    if shape:
        model = with_shape(model, **shape)
    hardware = _hardware_from(r.default("hardware", DEFAULT_HARDWARE), where)
    seq_len = F.integer(parse_length(r.default("seq_len", model.seq_len), f"{where}.seq_len"), f"{where}.seq_len",
                        maximum=10**8)
    precision = F.choice(r.default("precision", default_precision(hardware)), f"{where}.precision", PRECISIONS)
    hardware.peak(precision)  # raises with the list of supported precisions
    par = {} if data.get("parallel") is None else data["parallel"]
    # the framework (checked below) decides the default ZeRO stage: the one it runs
    method = finetune_method_given(data.get("finetune"))   # a QLoRA's framework is not Megatron's
    sizes = _parallel_sizes(par, r, _framework_given(data) or default_framework(hardware, method))
    # a pipeline layout is checked first: its layer count, not the device count it implies, is what to fix
    split, layout_text, ranks = _split_of(par, sizes, model, where)
    devices, dp = _devices_and_dp(par, sizes, r, hardware.devices_per_node)
    dp_shard = _dp_shard(par, dp, sizes["zero"], where)
    devices_per_node = F.integer(r.default("devices_per_node", hardware.devices_per_node),
                                 f"{where}.devices_per_node", maximum=10**6)
    dp_collectives = F.choice(par.get("dp_collectives", "hierarchical"), f"{where}.parallel.dp_collectives",
                              DP_COLLECTIVES)
    moe_overlap = _moe_overlap_of(par, model, where)
    _check_layout(model, seq_len, sizes, split, where)
    _check_network(hardware, devices_per_node, devices, where)
    micro_batch, global_batch = _batch(r, dp, echoed_micro_batches, seq_len, sizes["pp"] if sizes["vpp"] > 1 else 1)
    _check_experts(model, sizes, dp, where)
    if model.moe is not None:
        for key in ("ep", "etp"):
            if par.get(key) is None:
                r.derive(f"parallel.{key}")
    schedule = _schedule_of(par, sizes, global_batch // (dp * micro_batch), where)
    _check_schedule(sizes, dp, micro_batch, global_batch, where)
    framework = F.choice(r.default("framework", default_framework(hardware, method)), f"{where}.framework",
                         tuple(FRAMEWORKS))
    fw = FRAMEWORKS[framework]
    label = _framework_label(framework, hardware, "framework" in derived)
    recompute = _recompute_of(r, framework, where, label)
    modules = recompute_modules_of(data.get("recompute_modules"), recompute, model, f"{where}.recompute_modules")
    attention = F.choice(r.default("attention", "flash"), f"{where}.attention", ATTENTIONS)
    packed_length = _packed_length_of(data.get("packed_length"), seq_len, where)
    kernels = F.choice(r.default("kernels", fw.kernels), f"{where}.kernels", KERNELS)
    moments = F.choice(r.default("adam_moments", "fp32"), f"{where}.adam_moments", ADAM_MOMENTS)
    if par.get("dp_overlap") is None:
        r.derive("parallel.dp_overlap")
    dp_overlap = F.boolean(par.get("dp_overlap", fw.dp_overlap), f"{where}.parallel.dp_overlap")
    _check_framework(framework, sizes, par, where, label)
    _check_framework_hardware(framework, hardware, where)
    finetune = _finetune_of(data.get("finetune"), model, precision, framework, where)
    derived += finetune_defaults(data.get("finetune"), finetune)
    tokens, price_usd, pue, grid = _run_costs(r, model, hardware, finetune)
    hybrid_support(model, recompute, finetune.method, where)
    offload = check_offload(data.get("offload", "none"), hardware, f"{where}.offload")
    if moments == "bf16" and offload.startswith("optimizer"):
        raise SpecError(f"{where}.adam_moments: bf16 with offload {offload!r} is not modelled (the CPU Adam of "
                        f"ZeRO-Offload keeps FP32 moments); allowed with it: fp32")
    headroom, headroom_bytes = memory_headroom_bytes(r.default("memory_headroom", DEFAULT_MEMORY_HEADROOM),
                                                     hardware.device_memory_bytes, f"{where}.memory_headroom")
    return Scenario(
        model=model, hardware=hardware, seq_len=seq_len, devices=devices, devices_per_node=devices_per_node,
        precision=precision, parallel=Parallel(**sizes, dp=dp, dp_shard=0 if dp_shard == dp else dp_shard,
                                               pipeline_split=split, pipeline_layout=layout_text, rank_layers=ranks,
                                               dp_collectives=dp_collectives, dp_overlap=dp_overlap,
                                               moe_overlap=moe_overlap, pipeline_schedule=schedule),
        micro_batch=micro_batch, global_batch=global_batch, recompute=recompute, attention=attention,
        tokens=tokens, price_usd_per_hour=price_usd, pue=pue, kernels=kernels, framework=framework,
        adam_moments=moments, recompute_modules=modules,
        grid_gco2_per_kwh=grid, finetune=finetune, offload=offload, derived=tuple(derived),
        memory_headroom=headroom, memory_headroom_bytes=headroom_bytes, packed_length=packed_length,
    )


# the framework an estimate takes when none is given, by the hardware's kind: Megatron-Core runs on GPUs, not on
# Apple silicon (MLX is its training stack) or TPUs (JAX/XLA: MaxText)
FRAMEWORK_BY_KIND = {"apple": "mlx", "tpu": "maxtext"}


def default_framework(hardware: Hardware, method: str = "full") -> str:
    """DEFAULT_FRAMEWORK, or the one the hardware's kind runs (FRAMEWORK_BY_KIND); for a QLoRA, QLORA_FRAMEWORK
    where the kind's own has no QLoRA and that one runs on it (bitsandbytes' 4-bit layers are a Hugging Face
    stack: trainest/frameworks.py, `qlora`)."""
    framework = FRAMEWORK_BY_KIND.get(hardware.kind, DEFAULT_FRAMEWORK)
    if method == "qlora" and not FRAMEWORKS[framework].qlora and hardware.kind in FRAMEWORKS[QLORA_FRAMEWORK].runs_on:
        return QLORA_FRAMEWORK
    return framework


def chosen_by_qlora(framework: str, hardware: Hardware, derived: bool) -> bool:
    """The framework was not given and is not the hardware's default: a QLoRA chose it (`default_framework`)."""
    return derived and framework != default_framework(hardware)


def _framework_label(framework: str, hardware: Hardware, derived: bool) -> str:
    """How a framework that refuses the layout is named: as a QLoRA's default where a QLoRA chose it ('' else)."""
    return f"{framework} (the default framework of a QLoRA)" if chosen_by_qlora(framework, hardware, derived) else ""


def framework_args(s: Scenario) -> list[str]:
    """`--framework F` where a plan's scenario took its framework by default and an estimate of the plan's own
    method would take another (a LoRA plan of a QLoRA job: the job's Hugging Face stack, not Megatron-Core);
    else nothing (the framework given is among the job's own options)."""
    if "framework" in s.derived and s.framework != default_framework(s.hardware, s.finetune.method):
        return ["--framework", s.framework]
    return []


def _finetune_of(data: Any, model: Model, precision: str, framework: str, where: str) -> FineTune:
    """`check_finetune`, and the framework runs its method (`check_framework_finetune`)."""
    finetune = check_finetune(data, model, precision, where)
    check_framework_finetune(framework, finetune.method, "--framework" if where == "options" else f"{where}.framework")
    return finetune


def _framework_given(data: dict[str, Any]) -> str | None:
    """The scenario's `framework:` where it is a word (checked later), else None."""
    return data["framework"] if isinstance(data.get("framework"), str) else None


def finetune_method_given(data: Any) -> str:
    """The fine-tuning method a scenario's `finetune:` names (a word or `{method: ...}`), unchecked, or full:
    what the default framework depends on before `check_finetune` reads the rest."""
    method = data.get("method") if isinstance(data, dict) else data
    return method if isinstance(method, str) else "full"


def check_framework_finetune(framework: str, method: str, name: str) -> None:
    """A QLoRA runs only under a framework with bitsandbytes' 4-bit layers (`Framework.qlora`); `name` is the
    option or key that asked for it."""
    if method != "qlora" or FRAMEWORKS[framework].qlora:
        return
    raise SpecError(f"{name}: {framework} has no QLoRA (no 4-bit NF4 base layer: bitsandbytes' Linear4bit is a "
                    f"Hugging Face PEFT stack); frameworks that run it: "
                    f"{', '.join(n for n, f in FRAMEWORKS.items() if f.qlora)} (--framework)")


def default_precision(hardware: Hardware) -> str:
    """DEFAULT_PRECISION where the hardware has its peak, else its first of fp16, tf32, fp32 (a CPU written
    by `trainest probe` has only fp32; a V100 no bf16)."""
    for p in (DEFAULT_PRECISION, "fp16", "tf32", "fp32"):
        if p in hardware.peak_flops_per_s:
            return p
    return DEFAULT_PRECISION          # none of them: hardware.peak names what it has


def load_scenario_file(path: str) -> dict[str, Any]:
    """Read a scenario YAML (a mapping of scenario keys); validation happens in scenario_from_mapping. A
    runs file (its `runs:` list) is refused with the command that reads it. Paths in it (model, hardware)
    are the file's (`relative_to_file`); an `inputs` echo's derived values are derived again (`underive`)."""
    if not path.strip():     # Path('') is the directory '.'
        raise SpecError(f"scenario file {path!r} is an empty name; give a scenario YAML file")
    data = F.load_yaml_mapping(Path(path), "scenario")
    if isinstance(data.get("runs"), list):
        raise SpecError(f"scenario {path!r} is a runs file (a `runs:` list of measured runs); an estimate takes one "
                        f"scenario: compare them all with `trainest validate --runs {path}`, or give one run's keys")
    check_scenario_keys(data, f"scenario {path!r}")     # every command that reads it alike
    return underive(relative_to_file(data, Path(path).parent), f"scenario {path!r}")


# an echo's derived values kept as given on a reload: the echo carries the resolved model (its shape overrides
# included) and the hardware's file, which an option (--model, --hardware) replaces anyway
KEPT_WHEN_DERIVED = ("model", "hardware")
BATCH_KEYS = ("global_batch", "micro_batch", "parallel.dp")   # what micro_batches = B / (d·b) is derived from


def underive(data: dict[str, Any], where: str) -> dict[str, Any]:
    """A scenario mapping without the values its `derived` list names (an `inputs` echo of `--json`), so that
    they are derived again for the scenario loaded, with its overrides: an echo reloaded alone gives the same
    scenario; with `--hardware b200` its price, node size and framework are b200's, with `--model` its tokens
    the new model's, with `--devices` its dp. The echoed micro_batches must still agree with the file's own
    batch (an edited echo), and go with the values it is derived from."""
    listed = data.get("derived")
    if listed is None:
        return data
    if not isinstance(listed, list) or not all(isinstance(k, str) for k in listed):
        raise SpecError(f"{where}.derived: {F.show(listed)} must be a list of the names of derived values (the "
                        f"`inputs.derived` of --json), e.g. [tokens, price_per_hour]")
    given_par = data.get("parallel")
    par: dict[str, Any] = given_par if isinstance(given_par, dict) else {}
    echoed = data.get("micro_batches")
    if echoed is not None and all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                                  for v in (data.get("global_batch"), data.get("micro_batch"), par.get("dp"))):
        expected = data["global_batch"] // (par["dp"] * data["micro_batch"])
        if F.integer(echoed, f"{where}.micro_batches") != expected:
            raise SpecError(f"{where}.micro_batches: {echoed!r} is derived and must equal global_batch / "
                            f"(dp · micro_batch) = {expected}; remove it")
    dropped = [k for k in listed if k not in KEPT_WHEN_DERIVED]
    out = {k: v for k, v in data.items() if k != "derived" and k not in dropped}
    if par and any(k.startswith("parallel.") for k in dropped):
        # dp_shard is echoed as dp when the ZeRO state is sharded over all of dp: derived with dp
        full_shard = "parallel.dp" in dropped and par.get("dp_shard") == par.get("dp")
        out["parallel"] = {k: v for k, v in par.items()
                           if f"parallel.{k}" not in dropped and not (k == "dp_shard" and full_shard)}
    if any(k in dropped for k in BATCH_KEYS):
        out.pop("micro_batches", None)
    return out


PATH_KEYS = ("model", "hardware")


def relative_to_file(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    """`data` with its relative model and hardware paths (`prof.yaml`, `../cfg/config.json`) made relative to
    `folder`, the folder of the file that holds them, so that the file means the same from any working
    directory. Catalog names (`h100-sxm`, `llama3-8b`) and absolute paths stay."""
    from trainest.catalog import is_catalog_name, is_hub_name
    out = dict(data)
    for key in PATH_KEYS:
        value = data.get(key)
        if not isinstance(value, str) or not value.strip() or is_catalog_name(key, value):
            continue
        path = Path(value.strip()).expanduser()
        named_as_path = "/" in value or value.lower().endswith((".yaml", ".yml", ".json")) or (folder / path).exists()
        if path.is_absolute() or not named_as_path:    # (a mistyped name keeps its did-you-mean error)
            continue
        if key == "model" and is_hub_name(value.strip()) and not (folder / path).exists():
            continue     # a Hugging Face Hub id (meta-llama/Meta-Llama-3-8B): load_model says what to give
        if (folder / path).exists() or not path.exists():   # (a path that only the working directory has: as given)
            out[key] = str(folder / path)
    return out


def scenario_mapping(s: Scenario) -> dict[str, Any]:
    """The resolved scenario as a plain mapping (the `inputs` echo in JSON; loadable again)."""
    m = s.model
    model: dict[str, Any] = {"name": m.name, "layers": m.layers, "hidden": m.hidden, "ffn_hidden": m.ffn_hidden,
                             "heads": m.heads, "kv_heads": m.kv_heads, "head_dim": m.head_dim, "vocab": m.vocab,
                             "mlp": m.mlp, "seq_len": m.seq_len,
                             "tied_embeddings": m.tied_embeddings, "dropout": m.dropout, "positional": m.positional,
                             "params": m.params, "active_params": m.active_params}
    # the mixture-of-experts, latent-attention, hybrid, MTP and attention-window blocks as the model schema writes
    # them (loadable again)
    blocks = ("moe", "mla", "hybrid", "mtp", "attention_window")
    model.update({k: v for k, v in model_mapping(m).items() if k in blocks})
    return {
        "model": model,
        "seq_len": s.seq_len,
        "hardware": hardware_reference(s.hardware),   # a user's file by its path: a reload uses that profile
        "devices": s.devices,
        "devices_per_node": s.devices_per_node,
        "precision": s.precision,
        "parallel": {"tp": s.parallel.tp, "pp": s.parallel.pp, "dp": s.parallel.dp, "cp": s.parallel.cp,
                     "vpp": s.parallel.vpp, "zero": s.parallel.zero,
                     "sequence_parallel": s.parallel.sequence_parallel, "tp_overlap": s.parallel.tp_overlap,
                     "dp_shard": s.parallel.shard, "pipeline_split": s.parallel.pipeline_split,
                     "dp_collectives": s.parallel.dp_collectives, "dp_overlap": s.parallel.dp_overlap,
                     "ep": s.parallel.ep, "etp": s.parallel.etp, "moe_overlap": s.parallel.moe_overlap,
                     "pipeline_schedule": s.parallel.pipeline_schedule,
                     "pipeline_layout": s.parallel.pipeline_layout},
        "micro_batch": s.micro_batch,
        "global_batch": s.global_batch,
        "micro_batches": s.micro_batches,
        "recompute": s.recompute,
        "recompute_modules": list(s.recompute_modules),
        "attention": s.attention,
        "packed_length": s.packed_length,
        "framework": s.framework,
        "kernels": s.kernels,
        "adam_moments": s.adam_moments,
        "finetune": finetune_mapping(s.finetune),
        "offload": s.offload,
        "tokens": s.tokens,
        "price_per_hour": s.price_usd_per_hour,
        "pue": s.pue,
        "grid_gco2_per_kwh": s.grid_gco2_per_kwh,
        "memory_headroom": s.memory_headroom,
        "derived": list(s.derived),
    }


def finetune_mapping(ft: FineTune) -> dict[str, Any]:
    """The `finetune:` echo: the method, and for LoRA/QLoRA its adapters and base."""
    if not ft.frozen:
        return {"method": ft.method}
    return {"method": ft.method, "rank": ft.rank, "alpha": ft.scale, "targets": ft.targets, "base_bits": ft.base_bits}


def is_finite_positive(x: float) -> bool:
    return math.isfinite(x) and x > 0


# ------------------------------------------------------------------ the step model's view of a scenario

def lora_base_bits(ft: FineTune) -> int:
    """The bits of the frozen base a LoRA plan of this job stores: the job's own 16 or 8 for a LoRA, 16
    otherwise (a QLoRA job's base is 4-bit only under QLoRA; the step model takes QLoRA's NF4 from the
    plan's method, `Layout.qlora`, so that a search over methods scores each with its own base)."""
    return ft.base_bits if ft.method == "lora" else 16


def job_of(s: Scenario, hardware: Hardware | None = None) -> Job:
    """The job of a scenario (on `hardware` instead of its own, e.g. with trial efficiencies)."""
    ft = s.finetune
    return Job(model=s.model, hardware=hardware or s.hardware, precision=s.precision, attention=s.attention,
               kernels=s.kernels,
               seq_len=float(s.seq_len), global_batch=float(s.global_batch), devices_per_node=s.devices_per_node,
               framework=s.framework, lora_rank=float(ft.rank), lora_targets=ft.targets,
               base_bits=float(lora_base_bits(ft)), packed_length=float(s.packed_length or 0),
               adam_moments=s.adam_moments,
               recompute_modules=s.recompute_modules,
               # one device has no group to place; and a search's job (devices 1) is given its N by the grid
               devices=float(s.devices) if s.devices > 1 else math.inf)


def layout_of(s: Scenario) -> Layout:
    """The layout of a scenario, as floats."""
    p = s.parallel
    return Layout(tp=float(p.tp), pp=float(p.pp), dp=float(p.dp), cp=float(p.cp), vpp=float(p.vpp),
                  micro_batch=float(s.micro_batch), zero=float(p.zero), sp=1.0 if p.sequence_parallel else 0.0,
                  recompute=float(RECOMPUTE_CODES[s.recompute]), tp_overlap=1.0 if p.tp_overlap else 0.0,
                  dp_shard=float(p.shard), pipeline_split=p.pipeline_split, dp_collectives=p.dp_collectives,
                  dp_overlap=1.0 if p.dp_overlap else 0.0,
                  finetune=float(FINETUNE_CODES[s.finetune.method]), offload=float(OFFLOAD_CODES[s.offload]),
                  ep=float(p.ep), etp=float(p.etp), moe_overlap=p.moe_overlap, pipeline_schedule=p.pipeline_schedule,
                  rank_layers=p.rank_layers)
