"""The checks and defaults of a scenario's single values: the mapping's keys, the fine-tuning method and its
adapters, offload, the memory headroom, the token budget, packed sequences, selective recompute's modules, the
network a layout needs."""

from __future__ import annotations

import math
from typing import Any

from trainest import fields as F
from trainest.catalog import (
    Hardware,
    Model,
)
from trainest.choices import (
    BASE_BITS,
    DEFAULT_RECOMPUTE_MODULES,
    FINETUNES,
    LORA_TARGETS,
    LOW_PRECISIONS,
    OFFLOADS,
    RECOMPUTE_MODULES,
)
from trainest.errors import SpecError, at, head, name_of
from trainest.knobs import FINETUNE_KEYS, PARALLEL_KEYS
from trainest.precision import MODULE_PRECISION_MODULES, NO_MODULE_PRECISION, module_precisions
from trainest.scenario.records import (
    DEFAULT_FINETUNE_TOKENS,
    DEFAULT_LORA_RANK,
    DEFAULT_LORA_TARGETS,
    DEFAULT_PRECISION,
    DEFAULT_TOKENS_PER_PARAM,
    DEFAULT_TOKENS_PER_STEP,
    ECHO_KEYS,
    QLORA_PRECISIONS,
    RUN_ONLY_KEYS,
    SCENARIO_KEYS,
    FineTune,
)


def hybrid_support(model: Model, recompute: str, finetune_method: str, where: str) -> None:
    """What trainest does not model for a hybrid model: op recompute (torchtitan's per-op policy) and
    LoRA/QLoRA adapters (their targets in Mamba-2 blocks)."""
    if model.hybrid is None:
        return
    if recompute == "op":
        raise SpecError(f"{at(where, 'recompute')}: op is not modelled for {model.name}'s hybrid blocks; allowed: "
                        f"none, "
                        f"selective, full")
    if finetune_method != "full":
        raise SpecError(f"{at(where, 'finetune.method')}: {finetune_method} adapters in hybrid Mamba-2 models are not "
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
        raise SpecError(f"{head(where)}{value!r} must be a list of module names; allowed: "
                        f"{', '.join(RECOMPUTE_MODULES)}")
    picked = tuple(dict.fromkeys(n.strip() for n in names if n.strip()))
    if not picked:
        raise SpecError(f"{head(where)}no module given; allowed: {', '.join(RECOMPUTE_MODULES)}")
    for n in picked:
        if n not in RECOMPUTE_MODULES:
            raise SpecError(f"{head(where)}unknown module {n!r}; allowed: {', '.join(RECOMPUTE_MODULES)}")
    if recompute != "selective" and picked != DEFAULT_RECOMPUTE_MODULES:
        raise SpecError(f"{head(where)}modules are what selective recompute re-runs, but recompute is {recompute!r}; "
                        f"use recompute: selective (--recompute selective) with them")
    missing = {"mla_up_proj": (model.mla is None, "has no multi-head latent attention"),
               "moe_act": (model.moe is None, "has no mixture-of-experts layers"),
               "moe": (model.moe is None, "has no mixture-of-experts layers"),
               "shared_experts": (model.moe is None or model.moe.shared_experts == 0, "has no shared experts"),
               "mlp": (model.dense_layers_count == 0, "has no dense MLP layers")}
    for n in picked:
        absent, why = missing.get(n, (False, ""))
        if absent:
            raise SpecError(f"{head(where)}{n} cannot be recomputed: {model.name} {why}")
    return tuple(m for m in RECOMPUTE_MODULES if m in picked)


def _setting(where: str, key: str) -> str:
    """How a message tells the user to set `key`: its flag (`--hardware`), or its YAML key (`hardware:`)."""
    name = name_of(where, key)
    return name if name != key else f"{key}:"


def check_network(hardware: Hardware, devices_per_node: int, devices: int, where: str) -> None:
    """Every path the layout's groups need is in the hardware data (docs/model.md §3.1): no placeholder
    network for a group that leaves the node, no placeholder rate for an unknown intra-node path."""
    from trainest.step.collectives import network_gap  # (the step model's tiers; imported on use)
    gap = network_gap(hardware, devices_per_node, devices, node_option=_setting(where, "devices_per_node"),
                      hardware_option=_setting(where, "hardware"))
    if gap:
        raise SpecError(f"{head(where)}{gap}")


def memory_headroom_bytes(value: Any, capacity_bytes: float, where: str) -> tuple[str, float]:
    """(the margin as given, in bytes) of `memory_headroom`: "5%" (of capacity), "2GiB", "8e9" or 0."""
    from trainest.units import parse_bytes
    text = str(value).strip()
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or not text:
        raise SpecError(f"{head(where)}{F.show(value)} is not a margin; use a share of capacity such as 5% or a size "
                        f"such as 2GiB (0: none)")
    if text.endswith("%"):
        try:
            share = float(text[:-1]) / 100.0
        except ValueError:
            share = math.nan
        if not 0.0 <= share < 1.0:
            raise SpecError(f"{head(where)}{F.show(value)} must be a share of capacity from 0% to below 100%")
        return text, share * capacity_bytes
    if text in ("0", "0.0"):
        return text, 0.0
    size = parse_bytes(value, where)
    if size < 2**20 and not any(ch.isalpha() for ch in text.replace("e", "").replace("E", "")):
        # a bare number is bytes: one below a MiB is a share or a size without its unit, not a margin
        raise SpecError(f"{head(where)}{F.show(value)} is {size:g} bytes; give a share of capacity (e.g. 5%) or a size "
                        f"with its unit (e.g. {text}GiB), or 0 for none")
    if size >= capacity_bytes:
        raise SpecError(f"{head(where)}{F.show(value)} is at least the device's whole memory "
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


def check_finetune(data: Any, model: Model, precision: str, where: str) -> FineTune:
    """The `finetune:` mapping: method, and for LoRA/QLoRA rank (1..h), alpha, targets, base_bits."""
    w = at(where, "finetune")
    if isinstance(data, str):            # `finetune: lora` is short for `finetune: {method: lora}`
        data = {"method": data}
    d = F.check_keys({} if data is None else data, w, (), FINETUNE_KEYS)
    method = F.choice(d.get("method", "full"), at(w, "method"), FINETUNES)
    stated = d.get("method") is not None
    if method == "full":
        given = [k for k in ("rank", "alpha", "targets") if d.get(k) is not None]
        if given:
            how = "full" if stated else "full (the default: no fine-tuning method given)"
            raise SpecError(f"{at(w, given[0])}: {F.show(d[given[0]])} applies to LoRA/QLoRA adapters only, and the "
                            f"method is {how}; give method lora or qlora (--finetune)")
        if d.get("base_bits") not in (None, 16):
            raise SpecError(f"{at(w, 'base_bits')}: {F.show(d['base_bits'])} is for a frozen, quantised base (LoRA: 8, "
                            f"QLoRA: 4); a full fine-tune trains 16-bit weights: use 16 or method lora/qlora")
        return FineTune(stated=stated)
    rank = F.integer(d.get("rank", DEFAULT_LORA_RANK), at(w, "rank"), minimum=-10**12, maximum=10**12)
    if not 1 <= rank <= model.hidden:
        raise SpecError(f"{at(w, 'rank')}: {rank} must be between 1 and the hidden size {model.hidden} of {model.name}")
    bits = F.integer_choice(d.get("base_bits", 4 if method == "qlora" else 16), at(w, "base_bits"), BASE_BITS)
    if method == "qlora" and bits != 4:
        raise SpecError(f"{at(w, 'base_bits')}: {bits} is not allowed with method qlora: QLoRA's base is 4-bit NF4 "
                        f"(Dettmers et al. 2023); use base_bits 4, or method lora for a 16- or 8-bit base")
    if method == "lora" and bits == 4:
        raise SpecError(f"{at(w, 'base_bits')}: 4 with method lora: a LoRA on a 4-bit NF4 base is QLoRA; use method "
                        f"qlora")
    if method == "qlora" and precision not in QLORA_PRECISIONS:
        raise SpecError(f"{at(where, 'precision')}: {precision} with QLoRA: bitsandbytes dequantises the 4-bit base "
                        f"to the "
                        f"16- or 32-bit compute dtype; use one of {', '.join(QLORA_PRECISIONS)}")
    alpha = F.number(d.get("alpha"), at(w, "alpha"), allow_none=True, maximum=1e6)
    return FineTune(method=method, rank=rank, alpha=alpha,
                    targets=F.choice(d.get("targets", DEFAULT_LORA_TARGETS), at(w, "targets"), LORA_TARGETS),
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


def check_optimizer(optimizer: str, moments: str, offload: str, where: str) -> str:
    """`optimizer`, checked: BF16 moments are AdamW's (the other optimizers state their own dtype);
    optimizer offload runs ZeRO-Offload's CPU Adam, so only with adamw."""
    if moments != "fp32" and optimizer != "adamw":
        raise SpecError(f"{at(where, 'adam_moments')}: {moments} is the dtype of AdamW's moments; optimizer "
                        f"{optimizer!r} "
                        f"keeps its own state (allowed with it: fp32)")
    if optimizer != "adamw" and offload.startswith("optimizer"):
        raise SpecError(f"{at(where, 'optimizer')}: {optimizer!r} with offload {offload!r} is not modelled "
                        f"(ZeRO-Offload runs "
                        f"its CPU Adam); allowed with it: adamw")
    return optimizer


def check_offload(data: Any, hardware: Hardware, where: str) -> str:
    """The offload mode, checked against the hardware: a unified memory has nothing to offload to,
    and offload needs the host link and the host's cores, memory and bandwidth."""
    offload = F.choice(data, where, OFFLOADS)
    if offload == "none":
        return offload
    hw, host = hardware, hardware.host
    if hw.memory_unified:
        raise SpecError(f"{head(where)}{offload} does not apply to {hw.name}: its memory is unified (CPU and "
                        f"device share {hw.memory_bytes / 1e9:.0f} GB), so there is no host memory to offload to; "
                        f"use offload none")
    if host.link.kind in (None, "none", "unified") or host.link.bytes_per_s_per_device is None:
        raise SpecError(f"{head(where)}{offload} needs the host link (CPU to device) of {hw.name}, which its "
                        f"hardware entry does not give (host.link); use offload none or a hardware file with "
                        f"host.link.gb_per_s")
    unknown = [name for name, value in (("host.cpu_cores", host.cpu_cores), ("host.memory_gb", host.memory_bytes),
                                        ("host.memory_gb_per_s", host.memory_bytes_per_s),
                                        ("host.devices", host.devices)) if value is None]
    if unknown:
        raise SpecError(f"{head(where)}{offload} needs the host's CPU cores, memory and memory bandwidth; "
                        f"{hw.name}'s entry does not give {', '.join(unknown)} ({host.system or 'host not described'});"
                        f" give them in a hardware file")
    return offload


def check_scenario_keys(data: Any, where: str) -> None:
    """A scenario mapping's keys, and its `parallel` block's, are the schema's (specs/README.md): the one
    check of `estimate`, `plan`, `compare` and `sweep` alike (a search reads only the job's keys of it, and
    a misspelt key would otherwise change its answer unseen)."""
    F.check_keys(data, where, (), SCENARIO_KEYS + RUN_ONLY_KEYS + ECHO_KEYS)
    if data.get("parallel") is not None:
        F.check_keys(data["parallel"], at(where, "parallel"), (), PARALLEL_KEYS)


def packed_length_of(packed: Any, seq_len: int, where: str) -> int | None:
    """`packed_length`: the mean length of the examples packed into one sequence, at most the sequence."""
    if isinstance(packed, int) and not isinstance(packed, bool) and packed > seq_len:
        raise SpecError(f"{at(where, 'packed_length')}: {packed} must be at most the sequence length {seq_len} (the "
                        f"mean "
                        f"length of the examples packed into one sequence)")
    return F.integer(packed, at(where, "packed_length"), maximum=seq_len, allow_none=True)


def default_precision(hardware: Hardware) -> str:
    """DEFAULT_PRECISION where the hardware has its peak, else its first of fp16, tf32, fp32 (a CPU written
    by `trainest probe` has only fp32; a V100 no bf16)."""
    for p in (DEFAULT_PRECISION, "fp16", "tf32", "fp32"):
        if p in hardware.peak_flops_per_s:
            return p
    return DEFAULT_PRECISION          # none of them: hardware.peak names what it has


def is_finite_positive(x: float) -> bool:
    return math.isfinite(x) and x > 0


def check_recompute_layers(layers: int, model_layers: int, where: str) -> None:
    """`recompute_layers` N > 0 re-runs N layers per stage and chunk under full recompute (docs/model.md §7.10; with
    another recompute it has no effect, and `estimate` warns): refused above the model's layers."""
    if layers > model_layers:
        raise SpecError(f"{at(where, 'recompute_layers')}: {layers} is more than the model's {model_layers} layers; "
                        f"allowed: 0 (every layer) to {model_layers}")


def check_offload_layers(layers: int, model_layers: int, where: str) -> None:
    """`offload_layers` N > 0 sends N layers' activations per stage to the host under activation offload
    (docs/model.md §14.3; with another offload it has no effect, and `estimate` warns): refused above the model's
    layers."""
    if layers > model_layers:
        raise SpecError(f"{at(where, 'offload_layers')}: {layers} is more than the model's {model_layers} layers; "
                        f"allowed: 0 (every layer) to {model_layers}")


def check_bf16_layers(layers: int, model_layers: int, precision: str, where: str) -> None:
    """`bf16_layers` N > 0 keeps N layers' GEMMs in BF16 (docs/model.md §2.2): only an FP8/FP4 model has lower-
    precision GEMMs to keep them from, and no model has more layers than its own."""
    if layers and precision not in LOW_PRECISIONS:
        raise SpecError(f"{at(where, 'bf16_layers')}: {layers} keeps layers in BF16 out of FP8/FP4 GEMMs, and "
                        f"precision is {precision}; allowed with it: 0 (or give precision fp8 or fp4)")
    if layers > model_layers:
        raise SpecError(f"{at(where, 'bf16_layers')}: {layers} is more than the model's {model_layers} layers; "
                        f"allowed: 0 to {model_layers}")


def _modules_of(model: Model) -> tuple[str, ...]:
    """The modules of precision.MODULE_PRECISION_MODULES that `model` has."""
    attention = model.hybrid is None or model.hybrid.count("*") > 0
    latent = model.moe is not None and model.moe.latent_size is not None
    has = {"linear_qkv": attention and model.mla is None, "linear_proj": attention,
           "in_proj": model.mamba_layers > 0, "out_proj": model.mamba_layers > 0, "latent_proj": latent,
           "mtp": model.mtp is not None}
    return tuple(m for m in MODULE_PRECISION_MODULES if has[m])


def module_precision_of(text: str, model: Model, precision: str, hardware: Hardware, where: str) -> str:
    """`module_precision` checked and written canonically (`module=precision,...` in MODULE_PRECISION_MODULES'
    order, or none; docs/model.md §2.2): only an FP8/FP4 model has low-precision modules to keep out, each module
    one `model` has, FP8 only under FP4 and on hardware with an FP8 peak."""
    path = at(where, "module_precision")
    try:
        given = module_precisions(text)
    except ValueError as e:
        raise SpecError(f"{path}: {e}") from None
    if not given:
        return NO_MODULE_PRECISION
    if precision not in LOW_PRECISIONS:
        raise SpecError(f"{path}: {text} keeps modules out of FP8/FP4 GEMMs, and precision is {precision}; allowed "
                        f"with it: none (or give precision fp8 or fp4)")
    has = _modules_of(model)
    for module, kept in given.items():
        if module not in has:
            raise SpecError(f"{path}: {model.name} has no {module} ({MODULE_PRECISION_MODULES[module]}); allowed: "
                            f"{', '.join(has) or 'none'}")
        if kept == "fp8" and (precision != "fp4" or not hardware.peak_flops_per_s.get("fp8")):
            raise SpecError(f"{path}: {module}=fp8 keeps a module in FP8 out of FP4 GEMMs, and precision is "
                            f"{precision} on {hardware.name}; allowed: {module}=bf16")
    return ",".join(f"{m}={given[m]}" for m in MODULE_PRECISION_MODULES if m in given)


def check_memory_knobs(knobs: dict[str, Any], precision: str, micro_batches: int, where: str) -> None:
    """The dtype and optimizer knobs against the precision and the batch (docs/model.md §7.2): BF16 gradients are a
    BF16 run's (FP16 runs keep FP16 ones, FP32/TF32 runs FP32 ones); no master only where the weights are 16-bit;
    the optimizer fused into the backward frees each gradient as it is applied, so nothing is accumulated over
    micro-batches (torchtune refuses gradient accumulation with optimizer_in_bwd)."""
    full = precision in ("fp32", "tf32")
    if knobs["grad_dtype"] == "bf16" and (full or precision == "fp16"):
        raise SpecError(f"{at(where, 'grad_dtype')}: bf16 with precision {precision} is not a recipe ({precision} "
                        f"training keeps {'FP32' if full else 'FP16'} gradients); allowed with it: auto, fp32")
    if knobs["master_weights"] == "none" and full:
        raise SpecError(f"{at(where, 'master_weights')}: none is pure 16-bit training, and precision {precision} "
                        f"trains FP32 weights with no master already; allowed with it: fp32")
    if knobs["fp8_params"] and precision not in LOW_PRECISIONS:
        raise SpecError(f"{at(where, 'fp8_params')}: true keeps the weights in FP8, which needs FP8 GEMMs, and "
                        f"precision is {precision}; allowed with it: false (or give precision fp8)")
    if knobs["fp8_attention"] and precision not in LOW_PRECISIONS:
        raise SpecError(f"{at(where, 'fp8_attention')}: true runs the attention's products in FP8, which an FP8 "
                        f"recipe does, and precision is {precision}; allowed with it: false (or give precision fp8)")
    if knobs["optimizer_in_backward"] and micro_batches > 1:
        raise SpecError(f"{at(where, 'optimizer_in_backward')}: true needs one micro-batch per step, and this step has "
                        f"{micro_batches} (global_batch / (dp·micro_batch)): a gradient is applied and freed in the "
                        f"backward, so none accumulates; give global_batch = dp·micro_batch, or "
                        f"optimizer_in_backward: false")


# Device kernels some knobs name, and where they exist: CUDA graphs replay captured CUDA (or HIP) kernels and
# collectives (torch.cuda.CUDAGraph, Transformer Engine's make_graphed_callables), which a compiled XLA step or an
# accelerator other than a GPU has not; DeepEP and HybridEP are GPU kernels over NVLink/NVSHMEM and RDMA (their
# repositories: deepseek-ai/DeepEP, Megatron-Core's fused_a2a); FP8 attention is the fused kernel's FP8 path
# (Transformer Engine's cuDNN FusedAttention, FlashAttention-3): FlashAttention-2 has 16-bit kernels only and the
# materialised softmax of standard attention none.
GRAPH_KINDS = ("gpu", "cpu-gpu")


def _a_kind(kind: str) -> str:
    """'a tpu', 'an asic': the hardware kind with its article."""
    return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"


def check_device_knobs(knobs: dict[str, Any], attention: str, dispatch: str, framework: str, hardware_name: str,
                       hardware_kind: str, where: str) -> None:
    """The knobs that name a device kernel against the attention, the framework's dispatch and the hardware's kind
    (GRAPH_KINDS): FlashAttention-2 is a GPU kernel; FP8 attention needs the fused kernel; CUDA graphs and the
    DeepEP/HybridEP dispatchers a GPU, and CUDA graphs a framework that launches kernels from Python (an XLA step
    is one compiled program)."""
    if attention == "flash2" and hardware_kind not in GRAPH_KINDS:
        raise SpecError(f"{at(where, 'attention')}: flash2 is FlashAttention-2, a GPU kernel, and {hardware_name} is "
                        f"{_a_kind(hardware_kind)}; allowed here: flash (its own fused attention) or standard")
    if knobs["fp8_attention"] and attention != "flash":
        kernel = "FlashAttention-2 has 16-bit kernels only" if attention == "flash2" else \
            "the materialised softmax of standard attention has no FP8 path"
        raise SpecError(f"{at(where, 'fp8_attention')}: true runs the fused attention kernel's FP8 path (Transformer "
                        f"Engine's cuDNN attention, FlashAttention-3), and attention is {attention}: {kernel}; "
                        f"allowed with it: attention flash (or fp8_attention false)")
    graphs = knobs["cuda_graphs"]
    if graphs != "none" and (hardware_kind not in GRAPH_KINDS or dispatch != "python"):
        why = (f"{framework} compiles the step into one XLA program" if dispatch != "python"
               else f"{hardware_name} is {_a_kind(hardware_kind)}, not a GPU")
        raise SpecError(f"{at(where, 'cuda_graphs')}: {graphs} replays captured CUDA kernels, and {why}; allowed "
                        f"here: none")
    dispatcher = knobs["moe_dispatcher"]
    if dispatcher != "alltoall" and hardware_kind not in GRAPH_KINDS:
        raise SpecError(f"{at(where, 'moe_dispatcher')}: {dispatcher} is a GPU dispatcher (NVLink and RDMA kernels), "
                        f"and {hardware_name} is {_a_kind(hardware_kind)}; allowed here: alltoall")


def remat_policy_recompute(policy: str, framework: str, model: Model, recompute: str, modules: tuple[str, ...],
                           data: dict[str, Any], where: str) -> tuple[str, tuple[str, ...]]:
    """(recompute, recompute_modules) under MaxText's `remat_policy` (docs/model.md §7.11): auto leaves them as
    given; a policy needs framework maxtext and a dense model, sets the mode and modules that time its re-run
    (step/remat.py: REMAT_MODES), and refuses a recompute or modules the mapping `data` gives that differ (the
    same, as an echo states them, pass)."""
    from trainest.step.remat import REMAT_MODES
    if policy == "auto":
        return recompute, modules
    path = at(where, "remat_policy")
    if framework != "maxtext":
        raise SpecError(f"{path}: {policy} is MaxText's remat_policy and the framework is {framework}; use "
                        f"framework maxtext with it, or recompute instead")
    if model.moe is not None or model.mla is not None or model.hybrid is not None:
        raise SpecError(f"{path}: {policy} is modelled for dense transformer layers only and {model.name} has "
                        f"MoE, MLA or hybrid layers; use recompute (none, selective, full) with it")
    mode, policy_modules = REMAT_MODES[policy]
    recompute_given, modules_given = "recompute" in data, data.get("recompute_modules") is not None
    if recompute_given and recompute != mode:
        raise SpecError(f"{at(where, 'recompute')}: {recompute} differs from remat_policy {policy}, which recomputes "
                        f"as {mode}; give one of them")
    if modules_given and modules != policy_modules:
        raise SpecError(f"{at(where, 'recompute_modules')}: remat_policy {policy} decides what is re-run; give one "
                        f"of them")
    return mode, policy_modules
