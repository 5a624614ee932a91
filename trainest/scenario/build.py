"""`scenario_from_mapping`: a scenario mapping (CLI options or YAML) read into a validated `Scenario`, defaults
filled and recorded as derived, every rule of the layout checked (trainest/rules.py)."""

from __future__ import annotations

from typing import Any

from trainest import fields as F
from trainest import rules
from trainest.catalog import (
    Hardware,
    Model,
    load_hardware,
    load_model,
    model_from_mapping,
    with_shape,
)
from trainest.choices import (
    ADAM_MOMENTS,
    ATTENTIONS,
    DP_COLLECTIVES,
    KERNELS,
    MOE_OVERLAPS,
    OPTIMIZERS,
    PIPELINE_SCHEDULES,
    PIPELINE_SPLITS,
    PRECISIONS,
    RECOMPUTES,
)
from trainest.errors import SpecError, at, head
from trainest.frameworks import FRAMEWORKS
from trainest.knobs import SIMPLE, Knob
from trainest.rules import Facts, facts_of
from trainest.scenario.checks import (
    check_bf16_layers,
    check_device_knobs,
    check_finetune,
    check_memory_knobs,
    check_network,
    check_offload,
    check_offload_layers,
    check_optimizer,
    check_recompute_layers,
    check_scenario_keys,
    default_global_batch,
    default_precision,
    default_tokens,
    finetune_defaults,
    hybrid_support,
    memory_headroom_bytes,
    module_precision_of,
    packed_length_of,
    recompute_modules_of,
    remat_policy_recompute,
)
from trainest.scenario.framework import (
    check_framework,
    check_framework_finetune,
    check_framework_hardware,
    check_framework_kernels,
    check_quantised_base,
    default_framework,
    default_sequence_parallel,
    default_zero,
    finetune_method_given,
    framework_given,
    framework_label,
    unfused_cp,
)
from trainest.scenario.host import host_of
from trainest.scenario.records import (
    DEFAULT_DEVICES,
    DEFAULT_GRID_GCO2_PER_KWH,
    DEFAULT_HARDWARE,
    DEFAULT_MEMORY_HEADROOM,
    DEFAULT_MODEL,
    DEFAULT_PUE,
    ECHO_KEYS,
    FineTune,
    Parallel,
    Scenario,
)
from trainest.units import parse_count, parse_length


def _model_from(value: Any, where: str) -> Model:
    """The model of a scenario: a preset name or path, a mapping of its shape, or (a plan of a job) the job's."""
    if isinstance(value, Model):
        return value
    if isinstance(value, dict):
        return model_from_mapping(value, at(where, "model"))
    if isinstance(value, str) and value.strip():
        return load_model(value)
    raise SpecError(f"{at(where, 'model')}: {F.show(value)} must be a preset name, a path, or a mapping of the shape")


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

    def default_in(self, block: dict[str, Any], key: str, value: Any) -> Any:
        """block[name] of a nested `key` (`parallel.dp_overlap`), or `value` (recorded as derived) when absent."""
        name = key.rsplit(".", 1)[-1]
        if block.get(name) is None:
            self.derive(key)
            return value
        return block[name]

    def derive(self, key: str) -> None:
        if key not in self.derived:
            self.derived.append(key)


def _hardware_from(value: Any, where: str) -> Hardware:
    """The hardware of a scenario; one trainest does not model (Hardware.unsupported_reason) is refused. A
    Hardware (a plan of a job: the job's, perhaps with trial efficiencies) is taken as it is."""
    if isinstance(value, Hardware):
        return value
    if isinstance(value, dict):
        from trainest.catalog import hardware_from_mapping
        hardware = hardware_from_mapping(value, at(where, "hardware"))
    else:
        hardware = load_hardware(F.text(value, at(where, "hardware")))
    if hardware.unsupported_reason:
        raise SpecError(f"hardware {hardware.name!r} ({hardware.execution_model}) cannot be estimated: "
                        f"{hardware.unsupported_reason}")
    return hardware


def _parallel_sizes(par: dict[str, Any], r: _Reader, framework: str) -> dict[str, Any]:
    """tp, pp, cp, vpp, zero (fsdp = zero 3; default `default_zero`: DEFAULT_ZERO, DEFAULT_ZERO_WITH_PP with
    pp > 1, where the framework has it), sequence_parallel and tp_overlap of `parallel`."""
    w = at(r.where, "parallel")
    sizes: dict[str, Any] = {k: F.integer(par.get(k, 1), at(w, k), maximum=10**6)
                             for k in ("tp", "pp", "cp", "vpp", "ep", "etp")}
    if par.get("pp") is None and isinstance(par.get("pipeline_layout"), str):
        # a layout without pp: its stages over vpp (pipeline_layout.stage_count; checked with the layout)
        from trainest.pipeline_layout import stage_count
        stages = stage_count(par["pipeline_layout"], at(w, "pipeline_layout"))
        sizes["pp"] = stages // sizes["vpp"] if stages % sizes["vpp"] == 0 else sizes["pp"]
    zero = par.get("zero")
    if isinstance(zero, int) and not isinstance(zero, bool) and zero > 3:
        raise SpecError(f"{at(w, 'zero')}: {zero} is not a ZeRO stage; allowed: 0, 1, 2, 3 (at most 3)")
    fsdp = None if par.get("fsdp") is None else F.boolean(par["fsdp"], at(w, "fsdp"))
    # fsdp: true is zero 3; fsdp: false says "not fully sharded": plain data parallelism (zero 0) unless a
    # zero stage below 3 is given. Either way the stage is the user's, not derived.
    if fsdp is None:
        default = default_zero(framework, sizes["pp"])
    else:
        default = 3 if fsdp else 0
    sizes["zero"] = F.integer(default if zero is None else zero, at(w, "zero"), minimum=0, maximum=3)
    if fsdp is True and zero is not None and sizes["zero"] != 3:
        raise SpecError(f"{head(w)}fsdp means zero=3, but zero={zero} was given")
    if fsdp is False and sizes["zero"] == 3:
        raise SpecError(f"{head(w)}fsdp: false contradicts zero=3 (ZeRO-3 is fully sharded data parallel); allowed "
                        f"with fsdp: false: zero 0, 1 or 2 (or drop fsdp)")
    for key in ("tp", "pp", "cp", "vpp", "zero", "sequence_parallel"):
        if par.get(key) is None and not (key == "zero" and fsdp is not None):
            r.derive(f"parallel.{key}")
    sizes["sequence_parallel"] = F.boolean(par.get("sequence_parallel",
                                                   default_sequence_parallel(framework, sizes["tp"])),
                                           at(w, "sequence_parallel"))
    sizes["tp_overlap"] = F.boolean(par.get("tp_overlap", False), at(w, "tp_overlap"))
    return sizes


def _devices_and_dp(par: dict[str, Any], sizes: dict[str, Any], r: _Reader,
                    devices_per_node: int) -> tuple[int, int]:
    """(devices N, data-parallel size d) with N = t·p·c·d: either may be derived from the other. Neither
    given: one node's devices, at most DEFAULT_DEVICES (one DGX Spark, laptop or card is one device),
    or the fewest above that which hold the model-parallel layout given."""
    tp, pp, cp, where = sizes["tp"], sizes["pp"], sizes["cp"], r.where
    model_parallel = tp * pp * cp
    if r.data.get("devices") is None and par.get("dp") is not None:
        devices = model_parallel * F.integer(par["dp"], at(where, "parallel.dp"))
        r.derived.append("devices")
    else:
        node = r.data.get("devices_per_node")      # as given (checked later), else the hardware's
        node = node if isinstance(node, int) and not isinstance(node, bool) else devices_per_node
        base = max(min(DEFAULT_DEVICES, node), 1)
        default = -(-base // model_parallel) * model_parallel
        devices = F.integer(r.default("devices", default), at(where, "devices"), maximum=10**7)
    if par.get("dp") is None:
        rules.check((rules.DEVICES,), Facts(devices=devices, tp=tp, pp=pp, cp=cp), where)
        r.derived.append("parallel.dp")
        return devices, devices // model_parallel
    dp = F.integer(par["dp"], at(where, "parallel.dp"), maximum=10**7)
    if dp * model_parallel != devices:
        raise SpecError(f"{head(where)}tp·pp·cp·dp = {tp}·{pp}·{cp}·{dp} = {dp * model_parallel} does not equal "
                        f"devices={devices}; omit dp to derive it")
    return devices, dp


def _dp_shard(par: dict[str, Any], dp: int, zero: int, where: str) -> int:
    """The ZeRO shard group (`parallel.dp_shard`, hybrid sharding; dp when not given)."""
    dp_shard = F.integer(par.get("dp_shard") or dp, at(where, "parallel.dp_shard"), maximum=10**7)
    rules.check(rules.SHARDING, Facts(dp=dp, dp_shard=dp_shard, zero=zero), where)
    return dp_shard


def _check_layout(model: Model, seq_len: int, sizes: dict[str, Any], split: str, where: str) -> None:
    """The divisibility rules of the layout (heads by t, layers by p·v, the sequence by c; a hybrid model's
    Mamba-2 heads and groups by t, no cp): rules.LAYOUT."""
    rules.check(rules.LAYOUT, facts_of(model, seq_len=seq_len, tp=sizes["tp"], pp=sizes["pp"], vpp=sizes["vpp"],
                                       cp=sizes["cp"], uneven=split != "even"), where)


def _framework_of(r: _Reader, hardware: Hardware, method: str, where: str) -> str:
    """`framework` (FRAMEWORKS), by default the hardware's for the fine-tuning method (`default_framework`)."""
    return F.choice(r.default("framework", default_framework(hardware, method)), at(where, "framework"),
                    tuple(FRAMEWORKS))


def _check_attention_and_kernels(attention: str, framework: str, label: str, cp: int, knobs: dict[str, Any],
                                 hardware: Hardware, packed_length: int | None, kernels: str, where: str) -> None:
    """Standard attention takes cp 1 under a framework whose context parallelism runs fused kernels only
    (rules.CP_FUSED_ATTENTION, docs/model.md §4.2), and no packed sequences where they need a fused kernel
    (`check_framework_kernels`); the knobs that name a device kernel exist with this attention, framework and
    hardware (`check_device_knobs`)."""
    rules.check((rules.CP_FUSED_ATTENTION,), Facts(cp=cp, unfused_cp=unfused_cp(attention, framework),
                                                   framework=label or framework), where)
    check_device_knobs(knobs, attention, FRAMEWORKS[framework].dispatch, label or framework, hardware.name,
                       hardware.kind, where)
    check_framework_kernels(framework, label, attention, kernels, packed_length, where)


def _check_experts(model: Model, sizes: dict[str, Any], dp: int, where: str) -> None:
    """The expert layout (docs/model.md §15, §15.8): rules.EXPERTS (a dense model takes ep = etp = 1)."""
    rules.check(rules.EXPERTS, facts_of(model, tp=sizes["tp"], cp=sizes["cp"], dp=dp, ep=sizes["ep"],
                                        etp=sizes["etp"]), where)


def _derive_expert_sizes(model: Model, par: dict[str, Any], r: _Reader) -> None:
    """A mixture of experts' ep and etp not given are derived (a dense model has none)."""
    if model.moe is not None:
        for key in ("ep", "etp"):
            if par.get(key) is None:
                r.derive(f"parallel.{key}")


def _batch(r: _Reader, dp: int, echoed_micro_batches: Any, seq_len: int, group: int) -> tuple[int, int]:
    """(micro-batch b, global batch B); B must divide by d·b (the echoed micro_batches must agree)."""
    where = r.where
    micro_batch = F.integer(r.default("micro_batch", 1), at(where, "micro_batch"), maximum=10**7)
    tokens = r.data.get("global_batch_tokens")
    if tokens is not None:
        if r.data.get("global_batch") is not None:
            raise SpecError(f"{head(where)}give the global batch once: global_batch (sequences) or "
                            f"global_batch_tokens, "
                            f"not both")
        count = F.integer(parse_length(tokens, at(where, "global_batch_tokens")), at(where, "global_batch_tokens"),
                          maximum=10**12)
        if count % seq_len:
            raise SpecError(f"{at(where, 'global_batch_tokens')}: {count:,} tokens is not a whole number of sequences "
                            f"of "
                            f"seq_len={seq_len}; use a multiple of {seq_len}")
        r.data = {**r.data, "global_batch": count // seq_len}
    global_batch = F.integer(r.default("global_batch", default_global_batch(seq_len, dp, micro_batch, group)),
                             at(where, "global_batch"), maximum=10**9)
    rules.check((rules.BATCH,), Facts(global_batch=global_batch, dp=dp, micro_batch=micro_batch), where)
    if echoed_micro_batches is not None and \
            F.integer(echoed_micro_batches, at(where, "micro_batches")) != global_batch // (dp * micro_batch):
        raise SpecError(f"{at(where, 'micro_batches')}: {echoed_micro_batches!r} is derived and must equal "
                        f"global_batch / "
                        f"(dp · micro_batch) = {global_batch // (dp * micro_batch)}; remove it")
    return micro_batch, global_batch


def _check_schedule(sizes: dict[str, Any], dp: int, micro_batch: int, global_batch: int, where: str) -> None:
    """The interleaved schedule's rule (docs/model.md §5.2): rules.INTERLEAVING."""
    rules.check((rules.INTERLEAVING,), Facts(pp=sizes["pp"], vpp=sizes["vpp"], dp=dp, micro_batch=micro_batch,
                                             global_batch=global_batch), where)


def _check_moe_dispatcher(dispatcher: str, model: Model, where: str) -> None:
    """deepep and hybridep dispatch tokens to experts: they need a mixture-of-experts model."""
    if dispatcher != "alltoall" and model.moe is None:
        raise SpecError(f"{at(where, 'moe_dispatcher')}: {dispatcher} needs a mixture-of-experts model (it dispatches "
                        f"tokens to experts); {model.name} is dense: leave it at alltoall")


def _moe_overlap_of(par: dict[str, Any], model: Model, where: str) -> str:
    """`parallel.moe_overlap` (MOE_OVERLAPS); as ep and etp, refused on a dense model unless none."""
    moe_overlap = F.choice(par.get("moe_overlap", "none"), at(where, "parallel.moe_overlap"), MOE_OVERLAPS)
    if moe_overlap != "none" and model.moe is None:
        raise SpecError(f"{at(where, 'parallel.moe_overlap')}: {moe_overlap} needs a mixture-of-experts model (it "
                        f"hides "
                        f"the MoE all-to-alls), and {model.name} is dense; allowed: none")
    return moe_overlap


def _recompute_of(r: _Reader, framework: str, where: str, label: str = "") -> str:
    """`recompute`: one of the framework's modes (`Framework.recompute_modes`), by default its own
    (`Framework.default_recompute`: Megatron's selective, torchtitan's per-op, else none)."""
    named = label or framework      # the framework in the messages
    fw = FRAMEWORKS[framework]
    recompute = F.choice(r.default("recompute", fw.default_recompute), at(where, "recompute"), RECOMPUTES)
    if recompute not in fw.recompute_modes:
        raise SpecError(f"{at(where, 'recompute')}: {recompute} is not a recompute mode of {named}; allowed under it: "
                        f"{', '.join(fw.recompute_modes)} (selective is Megatron's, op torchtitan's per-op "
                        f"checkpointing)")
    return recompute


def _split_of(par: dict[str, Any], sizes: dict[str, Any], model: Model,
              where: str) -> tuple[str, str | None, tuple[int, ...]]:
    """(`pipeline_split`, the layout string, the decoder layers on each pipeline rank) of `parallel`: with
    a `pipeline_layout` (trainest/pipeline_layout.py) the split is "layout", else (split, None, ())."""
    from trainest.pipeline_layout import rank_layers
    w = at(where, "parallel")
    split = F.choice(par.get("pipeline_split", "even"), at(w, "pipeline_split"), PIPELINE_SPLITS)
    if par.get("pipeline_layout") is None:
        if split == "layout":
            raise SpecError(f"{at(w, 'pipeline_split')}: layout needs parallel.pipeline_layout (the stages' layers, "
                            f"e.g. "
                            f"'Et*4|(t*4|)*14tmL'); or use even or balanced")
        return split, None, ()
    text = F.text(par["pipeline_layout"], at(w, "pipeline_layout")).strip()
    if par.get("pipeline_split") not in (None, "layout"):
        raise SpecError(f"{at(w, 'pipeline_split')}: {par['pipeline_split']} with a pipeline_layout: the layout "
                        f"places the "
                        f"layers; leave pipeline_split out")
    if model.hybrid is not None:
        raise SpecError(f"{at(w, 'pipeline_layout')}: a layout of hybrid Mamba-2 blocks is not modelled (its stages "
                        f"would "
                        f"need the block kinds they hold); leave it out for the balanced or even split")
    if par.get("pipeline_schedule") == "dualpipe":
        raise SpecError(f"{at(w, 'pipeline_layout')} with pipeline_schedule dualpipe is not modelled (DualPipe places "
                        f"two "
                        f"stages on every device); use one of them")
    mtp_depth = model.mtp.depth if model.mtp is not None else 0
    return "layout", text, rank_layers(text, sizes["pp"], sizes["vpp"], model.layers, mtp_depth,
                                       at(w, "pipeline_layout"))


def _schedule_of(par: dict[str, Any], sizes: dict[str, Any], dp: int, micro_batch: int, global_batch: int,
                 where: str) -> str:
    """`parallel.pipeline_schedule` (PIPELINE_SCHEDULES), with DualPipe's rules checked (rules.DUALPIPE)."""
    schedule = F.choice(par.get("pipeline_schedule", "1f1b"), at(where, "parallel.pipeline_schedule"),
                        PIPELINE_SCHEDULES)
    rules.check(rules.DUALPIPE, Facts(pp=sizes["pp"], vpp=sizes["vpp"], dp=dp, micro_batch=micro_batch,
                                      global_batch=global_batch, dualpipe=schedule == "dualpipe"), where)
    return schedule


def _run_costs(r: _Reader, model: Model, hardware: Hardware,
               finetune: FineTune) -> tuple[float, float | None, float, float]:
    """(tokens to train, USD per device-hour, PUE, grid carbon intensity [gCO2/kWh])."""
    where, data = r.where, r.data
    if data.get("tokens") is None:
        tokens = default_tokens(model, finetune)
        r.derived.append("tokens")
    else:
        tokens = parse_count(data["tokens"], at(where, "tokens"))
        if tokens > 1e18:
            raise SpecError(f"{at(where, 'tokens')}: {F.show(data['tokens'])} is absurdly large (at most 1e18)")
    if data.get("price_per_hour") is None:
        price_usd = hardware.price_usd_per_hour
        r.derived.append("price_per_hour")
    else:
        price_usd = F.number(data["price_per_hour"], at(where, "price_per_hour"), allow_zero=True, maximum=1e6)
    pue = F.number(r.default("pue", DEFAULT_PUE), at(where, "pue"), minimum=1.0, allow_zero=True, maximum=10.0)
    grid = F.number(r.default("grid_gco2_per_kwh", DEFAULT_GRID_GCO2_PER_KWH), at(where, "grid_gco2_per_kwh"),
                    allow_zero=True, maximum=5000.0)
    return tokens, price_usd, pue, grid


def _moments_of(r: _Reader, knobs: dict[str, Any], precision: str, micro_batches: int, where: str) -> str:
    """`adam_moments`, default fp32, or bf16 for AdamW without a master (pure 16-bit training: torch.optim keeps
    Adam's moments in the parameters' dtype); the memory knobs checked first (check_memory_knobs)."""
    check_memory_knobs(knobs, precision, micro_batches, where)
    pure_adamw = knobs["master_weights"] == "none" and r.data.get("optimizer") in (None, "adamw")
    return F.choice(r.default("adam_moments", "bf16" if pure_adamw else "fp32"), at(where, "adam_moments"),
                    ADAM_MOMENTS)


def _optimizer_of(r: _Reader, moments: str, offload: str, where: str) -> str:
    """`optimizer` (default adamw), checked against the moments' dtype and the offload (check_optimizer)."""
    return check_optimizer(F.choice(r.default("optimizer", "adamw"), at(where, "optimizer"), OPTIMIZERS), moments,
                           offload, where)


def _offload_of(data: dict[str, Any], hardware: Hardware, moments: str, where: str, knobs: dict[str, Any]) -> str:
    """`offload` (check_offload); BF16 Adam moments are refused with an offloaded optimizer but without a master
    (FSDP CPU offload of a pure 16-bit model runs torch's optimizer in the parameters' dtype)."""
    offload = check_offload(data.get("offload", "none"), hardware, at(where, "offload"))
    if moments == "bf16" and offload.startswith("optimizer") and knobs["master_weights"] == "fp32":
        raise SpecError(f"{at(where, 'adam_moments')}: bf16 with offload {offload!r} is not modelled (the CPU Adam of "
                        f"ZeRO-Offload keeps FP32 moments); allowed with it: fp32")
    return offload


def simple_knob(k: Knob, value: Any, path: str) -> Any:
    """One simple knob's value (knobs.SIMPLE), checked by its kind: a choice of its words, a whole or real
    number within its limits, on/off, or text."""
    low, high = k.limits or (None, None)
    if k.kind == "choice":
        return F.choice(value, path, k.choice_values)
    if k.kind == "int":
        return F.integer(value, path, minimum=int(low if low is not None else 0),
                         maximum=int(high if high is not None else 10**12))
    if k.kind == "float":
        return F.number(value, path, minimum=low if low is not None else 0.0, allow_zero=True,
                        maximum=high if high is not None else F.MAX_REASONABLE)
    if k.kind == "switch":
        return F.boolean(value, path)
    return F.text(value, path)


def simple_knobs(r: _Reader) -> tuple[tuple[str, Any], ...]:
    """(name, value) of every simple knob (knobs.SIMPLE), its fallback where not given (recorded as derived)."""
    return tuple((k.name, simple_knob(k, r.default(k.yaml_key, k.fallback), at(r.where, k.yaml_key)))
                 for k in SIMPLE)


def _check_knobs_on_the_model(knobs: dict[str, Any], model: Model, precision: str, where: str) -> None:
    """The rules of the simple knobs that read the model: the MoE dispatcher, the fused grouped MLP (experts
    needed), recompute_layers and bf16_layers (at most the model's layers)."""
    _check_moe_dispatcher(knobs["moe_dispatcher"], model, where)
    if knobs["fused_grouped_mlp"] and model.moe is None:
        raise SpecError(f"{at(where, 'fused_grouped_mlp')}: true fuses the routed experts' activation into their "
                        f"grouped GEMMs, and {model.name} has no experts; allowed with it: false")
    check_recompute_layers(knobs["recompute_layers"], model.layers, where)
    check_offload_layers(knobs["offload_layers"], model.layers, where)
    check_bf16_layers(knobs["bf16_layers"], model.layers, precision, where)


def scenario_from_mapping(data: dict[str, Any], where: str = "scenario", *,
                          shape: dict[str, Any] | None = None, schedules_need_a_pipeline: bool = False) -> Scenario:
    """Validate a scenario mapping (schema in specs/README.md), fill the defaults of the one default
    scenario (above) where that is valid with what was given, check divisibility.

    `shape` holds CLI shape overrides (layers, hidden, ...) applied on top of the model;
    `schedules_need_a_pipeline`: a schedule without a pipeline to apply it to is refused (an estimate's,
    rules.DUALPIPE_NEEDS_PP; a plan search weighs pp 1 against pipelines).
    """
    check_scenario_keys(data, where)
    echoed_micro_batches = data.get("micro_batches")
    data = {k: v for k, v in data.items() if k not in ECHO_KEYS}
    derived: list[str] = []
    r = _Reader(data, where, derived)
    model = _model_from(r.default("model", DEFAULT_MODEL), where)
    if shape:
        model = with_shape(model, **shape)
    hardware, host = host_of(data, _hardware_from(r.default("hardware", DEFAULT_HARDWARE), where), where)
    seq_len = F.integer(parse_length(r.default("seq_len", model.seq_len), at(where, "seq_len")), at(where, "seq_len"),
                        maximum=10**8)
    precision = F.choice(r.default("precision", default_precision(hardware)), at(where, "precision"), PRECISIONS)
    hardware.peak(precision)  # raises with the list of supported precisions
    par = {} if data.get("parallel") is None else data["parallel"]
    # the framework (checked below) decides the default ZeRO stage: the one it runs
    method = finetune_method_given(data.get("finetune"))   # a QLoRA's framework is not Megatron's
    sizes = _parallel_sizes(par, r, framework_given(data) or default_framework(hardware, method))
    # a pipeline layout is checked first: its layer count, not the device count it implies, is what to fix
    split, layout_text, ranks = _split_of(par, sizes, model, where)
    devices, dp = _devices_and_dp(par, sizes, r, hardware.devices_per_node)
    dp_shard = _dp_shard(par, dp, sizes["zero"], where)
    devices_per_node = F.integer(r.default("devices_per_node", hardware.devices_per_node),
                                 at(where, "devices_per_node"), maximum=10**6)
    dp_collectives = F.choice(par.get("dp_collectives", "hierarchical"), at(where, "parallel.dp_collectives"),
                              DP_COLLECTIVES)
    moe_overlap = _moe_overlap_of(par, model, where)
    _check_layout(model, seq_len, sizes, split, where)
    check_network(hardware, devices_per_node, devices, where)
    micro_batch, global_batch = _batch(r, dp, echoed_micro_batches, seq_len, sizes["pp"] if sizes["vpp"] > 1 else 1)
    _check_experts(model, sizes, dp, where)
    _derive_expert_sizes(model, par, r)
    schedule = _schedule_of(par, sizes, dp, micro_batch, global_batch, where)
    _check_schedule(sizes, dp, micro_batch, global_batch, where)
    framework = _framework_of(r, hardware, method, where)
    fw = FRAMEWORKS[framework]
    label = framework_label(framework, hardware, "framework" in derived)
    recompute = _recompute_of(r, framework, where, label)
    modules = recompute_modules_of(data.get("recompute_modules"), recompute, model, at(where, "recompute_modules"))
    attention = F.choice(r.default("attention", "flash"), at(where, "attention"), ATTENTIONS)
    packed_length = packed_length_of(data.get("packed_length"), seq_len, where)
    kernels = F.choice(r.default("kernels", fw.kernels), at(where, "kernels"), KERNELS)
    knobs = _knobs_of(r, model, precision, hardware, where)
    _check_attention_and_kernels(attention, framework, label, sizes["cp"], dict(knobs), hardware, packed_length,
                                 kernels, where)
    recompute, modules = remat_policy_recompute(dict(knobs)["remat_policy"], framework, model, recompute, modules,
                                                data, where)
    moments = _moments_of(r, dict(knobs), precision, global_batch // (dp * micro_batch), where)
    dp_overlap = F.boolean(r.default_in(par, "parallel.dp_overlap", fw.dp_overlap), at(where, "parallel.dp_overlap"))
    check_framework(framework, sizes, par, where, label)
    check_framework_hardware(framework, hardware, where)
    finetune = _finetune_of(data.get("finetune"), model, precision, framework, where, hardware)
    derived += finetune_defaults(data.get("finetune"), finetune)
    tokens, price_usd, pue, grid = _run_costs(r, model, hardware, finetune)
    hybrid_support(model, recompute, finetune.method, where)
    offload = _offload_of(data, hardware, moments, where, dict(knobs))
    headroom, headroom_bytes = memory_headroom_bytes(r.default("memory_headroom", DEFAULT_MEMORY_HEADROOM),
                                                     hardware.device_memory_bytes, at(where, "memory_headroom"))
    if schedules_need_a_pipeline:
        rules.check((rules.DUALPIPE_NEEDS_PP,), Facts(pp=sizes["pp"], dualpipe=schedule == "dualpipe"), where)
    return Scenario(
        model=model, hardware=hardware, seq_len=seq_len, devices=devices, devices_per_node=devices_per_node,
        precision=precision, parallel=Parallel(**sizes, dp=dp, dp_shard=0 if dp_shard == dp else dp_shard,
                                               pipeline_split=split, pipeline_layout=layout_text, rank_layers=ranks,
                                               dp_collectives=dp_collectives, dp_overlap=dp_overlap,
                                               moe_overlap=moe_overlap, pipeline_schedule=schedule),
        micro_batch=micro_batch, global_batch=global_batch, recompute=recompute, attention=attention,
        tokens=tokens, price_usd_per_hour=price_usd, pue=pue, kernels=kernels, knobs=knobs, host=host,
        framework=framework, adam_moments=moments, optimizer=_optimizer_of(r, moments, offload, where),
        recompute_modules=modules, grid_gco2_per_kwh=grid, finetune=finetune, offload=offload, derived=tuple(derived),
        memory_headroom=headroom, memory_headroom_bytes=headroom_bytes, packed_length=packed_length,
    )


def _knobs_of(r: _Reader, model: Model, precision: str, hardware: Hardware, where: str) -> tuple[tuple[str, Any], ...]:
    """The simple knobs (knobs.py's table), checked against the model; module_precision parsed for its precision."""
    knobs = simple_knobs(r)
    _check_knobs_on_the_model(dict(knobs), model, precision, where)
    return tuple((k, module_precision_of(v, model, precision, hardware, where) if k == "module_precision" else v)
                 for k, v in knobs)


def _finetune_of(data: Any, model: Model, precision: str, framework: str, where: str,
                 hardware: Hardware) -> FineTune:
    """`check_finetune`, the framework runs its method (`check_framework_finetune`), and a quantised base's
    kernels exist on the hardware (`check_quantised_base`)."""
    finetune = check_finetune(data, model, precision, where)
    check_framework_finetune(framework, finetune.method, at(where, "framework"))
    check_quantised_base(finetune.base_bits if finetune.frozen else 16, hardware, framework,
                         at(where, "finetune"))
    return finetune
