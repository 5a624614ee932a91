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
from trainest.catalog import Hardware, Model, load_hardware, load_model, model_from_mapping, model_mapping, with_shape
from trainest.choices import ATTENTIONS, DP_COLLECTIVES, KERNELS, MOE_OVERLAPS, PIPELINE_SPLITS, PRECISIONS, RECOMPUTES
from trainest.errors import SpecError
from trainest.knobs import KNOBS, PARALLEL, PARALLEL_KEYS, SCENARIO
from trainest.units import parse_count

DEFAULT_MODEL = "llama3-8b"
DEFAULT_HARDWARE = "h100-sxm"
DEFAULT_DEVICES = 8
DEFAULT_PRECISION = "bf16"
DEFAULT_TOKENS_PER_PARAM = 20.0     # Hoffmann et al. 2022 (Chinchilla): ~20 training tokens per parameter
DEFAULT_PUE = 1.2                   # typical modern data-centre power usage effectiveness

# `trainest estimate` with no scenario options at all: an everyday case that fits, Llama 3 8B on one
# 8-GPU H100 node with FSDP and a 0.5M-token batch (torchtitan's Llama 3 8B recipe uses FSDP on 8 GPUs).
BUILTIN_DEFAULT = {"model": DEFAULT_MODEL, "hardware": DEFAULT_HARDWARE, "devices": DEFAULT_DEVICES,
                   "parallel": {"zero": 3}, "micro_batch": 1, "global_batch": 64, "recompute": "selective"}

# the keys of a scenario mapping: the scenario knobs (trainest.knobs), the model and the layout
SCENARIO_KEYS = ("model", *(k.yaml_key for k in KNOBS if k.group == SCENARIO and k.name != "model"), PARALLEL)
RUN_ONLY_KEYS = ("id", "source", "measured", "expressible", "reason", "confidence", "notes", "duplicate_of")
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
    ep: int = 1                  # expert parallel size (MoE layers)
    etp: int = 1                 # expert tensor parallel size (MoE layers; ep·etp·edp = tp·cp·dp)
    moe_overlap: str = "none"    # what the framework overlaps of the MoE all-to-alls: none | deepep

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
    derived: tuple[str, ...] = field(default=())   # names of values filled by defaults

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
    if isinstance(value, dict):
        from trainest.catalog import hardware_from_mapping
        return hardware_from_mapping(value, f"{where}.hardware")
    return load_hardware(F.text(value, f"{where}.hardware"))


def _parallel_sizes(par: dict[str, Any], r: _Reader) -> dict[str, Any]:
    """tp, pp, cp, vpp, zero (fsdp = zero 3), sequence_parallel and tp_overlap of `parallel`."""
    w = f"{r.where}.parallel"
    sizes: dict[str, Any] = {k: F.integer(par.get(k, 1), f"{w}.{k}", maximum=10**6)
                             for k in ("tp", "pp", "cp", "vpp", "ep", "etp")}
    sizes["zero"] = F.integer(par.get("zero", 0), f"{w}.zero", minimum=0, maximum=3)
    if par.get("fsdp") is not None and F.boolean(par["fsdp"], f"{w}.fsdp"):
        if par.get("zero") not in (None, 3):
            raise SpecError(f"{w}: fsdp means zero=3, but zero={par['zero']} was given")
        sizes["zero"] = 3
    for key in ("tp", "pp", "cp", "vpp", "zero", "sequence_parallel"):
        if par.get(key) is None:
            r.derive(f"parallel.{key}")
    sizes["sequence_parallel"] = F.boolean(par.get("sequence_parallel", False), f"{w}.sequence_parallel")
    sizes["tp_overlap"] = F.boolean(par.get("tp_overlap", False), f"{w}.tp_overlap")
    return sizes


def _devices_and_dp(par: dict[str, Any], sizes: dict[str, Any], r: _Reader) -> tuple[int, int]:
    """(devices N, data-parallel size d) with N = t·p·c·d: either may be derived from the other."""
    tp, pp, cp, where = sizes["tp"], sizes["pp"], sizes["cp"], r.where
    model_parallel = tp * pp * cp
    if r.data.get("devices") is None and par.get("dp") is not None:
        devices = model_parallel * F.integer(par["dp"], f"{where}.parallel.dp")
        r.derived.append("devices")
    else:
        devices = F.integer(r.default("devices", DEFAULT_DEVICES), f"{where}.devices", maximum=10**7)
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


def _check_experts(model: Model, sizes: dict[str, Any], dp: int, where: str) -> None:
    """The expert layout: ep divides the experts, ep·etp divides the ranks of a pipeline stage
    (Megatron-Core: ep·etp·edp = tp·cp·dp); a dense model takes ep = etp = 1."""
    ep, etp, stage_ranks = sizes["ep"], sizes["etp"], sizes["tp"] * sizes["cp"] * dp
    if model.moe is None:
        for key in ("ep", "etp"):
            if sizes[key] != 1:
                raise SpecError(f"{where}.parallel.{key}: {sizes[key]} needs a mixture-of-experts model, and "
                                f"{model.name} is dense; allowed: 1")
        return
    experts = model.moe.experts
    if experts % ep:
        raise SpecError(f"{where}.parallel.ep: {ep} does not divide experts={experts}{_divisor_hint(experts)}")
    if stage_ranks % (ep * etp):
        raise SpecError(f"{where}.parallel: ep·etp = {ep}·{etp} = {ep * etp} does not divide the ranks of a "
                        f"pipeline stage, tp·cp·dp = {sizes['tp']}·{sizes['cp']}·{dp} = {stage_ranks}; "
                        f"ep·etp must divide {stage_ranks}{_divisor_hint(stage_ranks)}")


def _batch(r: _Reader, dp: int, echoed_micro_batches: Any) -> tuple[int, int]:
    """(micro-batch b, global batch B); B must divide by d·b (the echoed micro_batches must agree)."""
    where = r.where
    micro_batch = F.integer(r.default("micro_batch", 1), f"{where}.micro_batch", maximum=10**7)
    global_batch = F.integer(r.default("global_batch", dp * micro_batch), f"{where}.global_batch", maximum=10**9)
    if global_batch % (dp * micro_batch):
        raise SpecError(f"{where}: global_batch={global_batch} is not divisible by dp·micro_batch = {dp}·{micro_batch}"
                        f" = {dp * micro_batch}; use a multiple of {dp * micro_batch}")
    if echoed_micro_batches is not None and \
            F.integer(echoed_micro_batches, f"{where}.micro_batches") != global_batch // (dp * micro_batch):
        raise SpecError(f"{where}.micro_batches: {echoed_micro_batches!r} is derived and must equal global_batch / "
                        f"(dp · micro_batch) = {global_batch // (dp * micro_batch)}; remove it")
    return micro_batch, global_batch


def _run_costs(r: _Reader, model: Model, hardware: Hardware) -> tuple[float, float | None, float]:
    """(tokens to train, USD per device-hour, PUE)."""
    where, data = r.where, r.data
    if data.get("tokens") is None:
        tokens = DEFAULT_TOKENS_PER_PARAM * model.params
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
    return tokens, price_usd, pue


def scenario_from_mapping(data: dict[str, Any], where: str = "scenario", *,
                          shape: dict[str, Any] | None = None, builtin_default: bool = False) -> Scenario:
    """Validate a scenario mapping (schema in specs/README.md), fill defaults, check divisibility.

    `shape` holds CLI shape overrides (layers, hidden, ...) applied on top of the model.
    `builtin_default` starts from BUILTIN_DEFAULT (the no-argument scenario), marking its values derived.
    """
    F.check_keys(data, where, (), SCENARIO_KEYS + RUN_ONLY_KEYS + ECHO_KEYS)
    echoed_micro_batches = data.get("micro_batches")
    data = {k: v for k, v in data.items() if k not in ECHO_KEYS}
    derived: list[str] = []
    if builtin_default:
        base: dict[str, Any] = dict(BUILTIN_DEFAULT)
        derived.extend(k for k in base if k != "parallel")
        derived.extend(f"parallel.{k}" for k in base["parallel"])
        data = {**base, **{k: v for k, v in data.items() if v is not None}}
    r = _Reader(data, where, derived)
    model = _model_from(r.default("model", DEFAULT_MODEL), where)
    if shape:
        model = with_shape(model, **shape)
    hardware = _hardware_from(r.default("hardware", DEFAULT_HARDWARE), where)
    seq_len = F.integer(r.default("seq_len", model.seq_len), f"{where}.seq_len", maximum=10**8)
    precision = F.choice(r.default("precision", DEFAULT_PRECISION), f"{where}.precision", PRECISIONS)
    hardware.peak(precision)  # raises with the list of supported precisions
    par = {} if data.get("parallel") is None else data["parallel"]
    F.check_keys(par, f"{where}.parallel", (), PARALLEL_KEYS)
    sizes = _parallel_sizes(par, r)
    devices, dp = _devices_and_dp(par, sizes, r)
    dp_shard = _dp_shard(par, dp, sizes["zero"], where)
    devices_per_node = F.integer(r.default("devices_per_node", hardware.devices_per_node),
                                 f"{where}.devices_per_node", maximum=10**6)
    split = F.choice(par.get("pipeline_split", "even"), f"{where}.parallel.pipeline_split", PIPELINE_SPLITS)
    dp_collectives = F.choice(par.get("dp_collectives", "hierarchical"), f"{where}.parallel.dp_collectives",
                              DP_COLLECTIVES)
    moe_overlap = F.choice(par.get("moe_overlap", "none"), f"{where}.parallel.moe_overlap", MOE_OVERLAPS)
    _check_layout(model, seq_len, sizes, split, where)
    _check_experts(model, sizes, dp, where)
    if model.moe is not None:
        for key in ("ep", "etp"):
            if par.get(key) is None:
                r.derive(f"parallel.{key}")
    micro_batch, global_batch = _batch(r, dp, echoed_micro_batches)
    recompute = F.choice(r.default("recompute", "none"), f"{where}.recompute", RECOMPUTES)
    attention = F.choice(r.default("attention", "flash"), f"{where}.attention", ATTENTIONS)
    kernels = F.choice(r.default("kernels", "fused"), f"{where}.kernels", KERNELS)
    tokens, price_usd, pue = _run_costs(r, model, hardware)
    return Scenario(
        model=model, hardware=hardware, seq_len=seq_len, devices=devices, devices_per_node=devices_per_node,
        precision=precision, parallel=Parallel(**sizes, dp=dp, dp_shard=0 if dp_shard == dp else dp_shard,
                                               pipeline_split=split, dp_collectives=dp_collectives,
                                               moe_overlap=moe_overlap),
        micro_batch=micro_batch, global_batch=global_batch, recompute=recompute, attention=attention,
        tokens=tokens, price_usd_per_hour=price_usd, pue=pue, kernels=kernels, derived=tuple(derived),
    )


def load_scenario_file(path: str) -> dict[str, Any]:
    """Read a scenario YAML (a mapping of scenario keys); validation happens in scenario_from_mapping."""
    return F.load_yaml_mapping(Path(path), "scenario")


def scenario_mapping(s: Scenario) -> dict[str, Any]:
    """The resolved scenario as a plain mapping (the `inputs` echo in JSON; loadable again)."""
    m = s.model
    model: dict[str, Any] = {"name": m.name, "layers": m.layers, "hidden": m.hidden, "ffn_hidden": m.ffn_hidden,
                             "heads": m.heads, "kv_heads": m.kv_heads, "vocab": m.vocab, "mlp": m.mlp,
                             "tied_embeddings": m.tied_embeddings, "dropout": m.dropout, "params": m.params,
                             "active_params": m.active_params}
    # the mixture-of-experts and latent-attention blocks as the model schema writes them (loadable again)
    model.update({k: v for k, v in model_mapping(m).items() if k in ("moe", "mla")})
    return {
        "model": model,
        "seq_len": s.seq_len,
        "hardware": s.hardware.name,
        "devices": s.devices,
        "devices_per_node": s.devices_per_node,
        "precision": s.precision,
        "parallel": {"tp": s.parallel.tp, "pp": s.parallel.pp, "dp": s.parallel.dp, "cp": s.parallel.cp,
                     "vpp": s.parallel.vpp, "zero": s.parallel.zero,
                     "sequence_parallel": s.parallel.sequence_parallel, "tp_overlap": s.parallel.tp_overlap,
                     "dp_shard": s.parallel.shard, "pipeline_split": s.parallel.pipeline_split,
                     "dp_collectives": s.parallel.dp_collectives, "ep": s.parallel.ep, "etp": s.parallel.etp,
                     "moe_overlap": s.parallel.moe_overlap},
        "micro_batch": s.micro_batch,
        "global_batch": s.global_batch,
        "micro_batches": s.micro_batches,
        "recompute": s.recompute,
        "attention": s.attention,
        "kernels": s.kernels,
        "tokens": s.tokens,
        "price_per_hour": s.price_usd_per_hour,
        "pue": s.pue,
        "derived": list(s.derived),
    }


def is_finite_positive(x: float) -> bool:
    return math.isfinite(x) and x > 0
