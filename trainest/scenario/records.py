"""The scenario's records: `Scenario`, `Parallel` and `FineTune` (frozen), the defaults of the one default
scenario and the keys of a scenario mapping (specs/README.md). Derived sizes of the layout (edp, the ZeRO shard
group) are `Layout`'s (trainest/layout.py), not these records'."""

from __future__ import annotations

from typing import Any

from trainest.catalog import (
    Hardware,
    Model,
)
from trainest.choices import (
    DEFAULT_RECOMPUTE_MODULES,
)
from trainest.frameworks import DEFAULT_FRAMEWORK
from trainest.knobs import FINETUNE, KNOBS, PARALLEL, SCENARIO
from trainest.record import NamedTuple

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


# unmodelled: the settings a run states that trainest has no input for; assumed: the scenario keys its importer
# assumed, the record not stating them (validate names both on a no-fit)
RUN_ONLY_KEYS = ("id", "set", "source", "measured", "expressible", "reason", "confidence", "notes", "duplicate_of",
                 "unmodelled", "assumed", "conflicting")


# informational keys of the `inputs` echo in `estimate --json`, accepted so that it loads again:
# `derived` is ignored; `micro_batches` must agree with global_batch / (dp · micro_batch)
ECHO_KEYS = ("derived", "micro_batches")


class Parallel(NamedTuple):
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
    def devices(self) -> int:
        return self.tp * self.pp * self.cp * self.dp


class FineTune(NamedTuple):
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


class Scenario(NamedTuple):
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
    optimizer: str = "adamw"           # OPTIMIZERS: the optimizer, whose state it keeps (docs/model.md §7.2)
    recompute_modules: tuple[str, ...] = DEFAULT_RECOMPUTE_MODULES   # what selective re-runs (docs/model.md §2.6)
    derived: tuple[str, ...] = ()   # names of values filled by defaults
    memory_headroom: str = DEFAULT_MEMORY_HEADROOM   # as given: a share of capacity ("5%") or a size ("2GiB")
    memory_headroom_bytes: float = 0.0               # that margin [B]: a layout fits if it leaves it free
    # the simple knobs' values (knobs.SIMPLE), (name, value) in the table's order: read and checked by
    # scenario.build.simple_knobs, echoed in `inputs`, handed to the Job's fields of the same names
    knobs: tuple[tuple[str, Any], ...] = ()
    host: tuple[tuple[str, Any], ...] = ()    # the host figures given (scenario/host.py), (key, value)

    def knob(self, name: str) -> Any:
        """The value of simple knob `name` (knobs.SIMPLE)."""
        return dict(self.knobs)[name]

    @property
    def micro_batches(self) -> int:
        """m: micro-batches per step per pipeline = global batch / (dp · micro-batch)."""
        return self.global_batch // (self.parallel.dp * self.micro_batch)

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len
