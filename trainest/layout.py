"""What the step model is called with: the `Job` (everything but the parallel layout, never an
array) and the `Layout` (the knobs a plan search varies; each numeric knob may be a numpy array, so
one call evaluates every plan at once).

`estimate`, `plan` and `calibrate` all call `step_terms(job, layout)` and
`memory_per_device(job, layout)`; they differ only in how they build the two (`job_of`,
`layout_of` from a Scenario; the plan grid builds a Layout of arrays). The vocabularies' masks
(full recompute, ZeRO-3, ...) are Layout properties, so a mode's code is compared in one place.

Both are typed, immutable records (`typing.NamedTuple`, like the model's other intermediate and
result records): defining a frozen dataclass costs ~2 ms of start-up on a slow core, a NamedTuple a
quarter of that, and every `trainest estimate` pays it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, TypeAlias

from trainest import xp
from trainest.choices import (
    DEFAULT_RECOMPUTE_MODULES,
    FINETUNE_CODES,
    FULL_PRECISIONS,
    LOW_PRECISIONS,
    OFFLOAD_CODES,
    RECOMPUTE_CODES,
)
from trainest.hardware import Hardware
from trainest.models import Model
from trainest.precision import FP8_PARAM_BYTES, grad_bytes_per_param, weight_bytes_per_param
from trainest.record import NamedTuple

if TYPE_CHECKING:
    import numpy as np

    Num: TypeAlias = float | np.ndarray     # a knob's value: one float, or one per plan
else:
    # at run time only a name the annotations use (they are strings: `from __future__ import annotations`);
    # typing.Union with a string would compile a ForwardRef at import, start-up time (issue 36)
    Num = "float | np.ndarray"

# Bytes of one activation element, the tensors between kernels (docs/model.md, notation e): FP32/TF32
# training keeps them in FP32 (TF32 is FP32 storage with TF32 tensor-core math); BF16/FP16 mixed
# precision in 16 bit, and so do the FP8/FP4 recipes (their GEMM inputs are cast inside the GEMM:
# GEMM_INPUT_BYTES, the casts' traffic in step/layer.py).
ELEMENT_BYTES = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 2.0, "fp4": 2.0}
GEMM_INPUT_BYTES = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5}


class Job(NamedTuple):
    """One training job without its layout: the model, the hardware and what the step computes."""

    model: Model
    hardware: Hardware
    precision: str              # Precision
    attention: str              # Attention
    kernels: str                # Kernels
    seq_len: float              # s [tokens]
    global_batch: float         # B [sequences]
    devices_per_node: int
    framework: str = "megatron-core"   # trainest/frameworks.py
    lora_rank: float = 16.0     # r of the LoRA adapters (used where Layout.finetune is lora/qlora)
    lora_targets: str = "all"   # LoraTargets: attention | mlp | all
    base_bits: float = 16.0     # bits per frozen base weight of a LoRA plan, 16 or 8 (scenario.lora_base_bits);
                                # a QLoRA plan's 4-bit NF4 comes from its method (Layout.qlora)
    packed_length: float = 0.0  # mean document length of packed sequences [tokens] (0: unpacked)
    adam_moments: str = "fp32"  # AdamMoments: the dtype of Adam's two moments
    optimizer: str = "adamw"    # Optimizer: adamw | adamw-8bit | adafactor | sgd (its state, docs/model.md §7.2)
    recompute_modules: tuple[str, ...] = DEFAULT_RECOMPUTE_MODULES   # what selective recompute re-runs
    devices: float = math.inf   # N = t·p·c·d (inf: not said): whether a group may straddle two domains (§3.2)
    cuda_graphs: str = "none"   # CudaGraphs: none | partial (the static-shape parts) | full (every layer), §2.10
    moe_dispatcher: str = "alltoall"   # MoeDispatcher: alltoall (NCCL) | deepep | hybridep, §15.11
    master_weights: str = "fp32"     # fp32 (mixed precision's FP32 master) | none (pure 16-bit), docs/model.md §7.2
    grad_dtype: str = "auto"         # auto | fp32 | bf16: the gradients' dtype (precision.grad_bytes_per_param)
    optimizer_in_backward: bool = False   # the optimizer step fused into the backward (gradients freed per layer)
    loss: str = "standard"           # standard | chunked | compiled | fused: the loss's bytes per logit, §7.4
    fp8_params: bool = False         # the working weights stored in FP8 (TE/Megatron fp8_param), docs/model.md §7.9
    fp8_attention: bool = False      # the attention core's products in FP8 (TE FP8 dot-product attention), §2.4
    fused_grouped_mlp: bool = False  # the routed experts' activation and its cast in the grouped GEMMs, §15.12
    bf16_layers: float = 0.0         # layers whose GEMMs stay BF16 in an FP8/FP4 model (first/last layers), §2.2
    module_precision: str = "none"   # modules kept in BF16/FP8 under an FP8/FP4 recipe (`module=precision,...`), §2.2
    recompute_layers: float = 0.0    # full recompute of this many layers per stage and chunk (0: all), §7.10
    offload_layers: float = 0.0      # activation offload of this many layers per stage (0: all), §14.3
    remat_policy: str = "auto"       # RematPolicy: MaxText's remat_policy (auto: not given), step/remat.py, §7.11
    double_quant: bool = True        # QLoRA's NF4 absmax quantised again to 8 bit (else FP32), docs/model.md §13.2

    def recomputes(self, module: str) -> float:
        """1.0 when selective recompute re-runs `module` (choices.RECOMPUTE_MODULES), else 0.0."""
        return 1.0 if module in self.recompute_modules else 0.0

    def moe_rerun(self, layout: Layout) -> Num:
        """1 where the backward re-runs a MoE layer's block after attention (its routing, experts and
        all-to-alls): full recompute, or selective recompute of the `moe` module; else 0."""
        return layout.full + layout.selective * self.recomputes("moe")

    @property
    def grad_bytes(self) -> float:
        """Bytes per gradient element [B]: precision.grad_bytes_per_param of its precision, grad_dtype and
        master_weights (docs/model.md §7.2)."""
        return grad_bytes_per_param(self.precision, self.grad_dtype, self.master_weights)

    @property
    def weight_bytes(self) -> float:
        """Bytes per working weight [B]: FP8_PARAM_BYTES with fp8_params (FP8 weights, gathered in FP8), else
        precision.weight_bytes_per_param of the precision (docs/model.md §7.9)."""
        return FP8_PARAM_BYTES if self.fp8_params else weight_bytes_per_param(self.precision)

    @property
    def low_precision(self) -> bool:
        """FP8/FP4 GEMMs (cast per GEMM, 16-bit weights kept)."""
        return self.precision in LOW_PRECISIONS

    @property
    def full_precision(self) -> bool:
        """FP32/TF32 training: 32-bit weights, no master copy."""
        return self.precision in FULL_PRECISIONS

    @property
    def gemm_input_bytes(self) -> float:
        """Bytes per GEMM input element at the run's precision [B]."""
        return GEMM_INPUT_BYTES[self.precision]

    @property
    def element_bytes(self) -> float:
        """e: bytes per activation element at the run's precision, 4 for FP32/TF32, else 2 [B]."""
        return ELEMENT_BYTES[self.precision]

    @property
    def tokens_per_step(self) -> float:
        """B·s [tokens]."""
        return self.global_batch * self.seq_len


class Layout(NamedTuple):
    """The parallel layout and batch split; numeric knobs are floats or equal-length arrays.
    N = tp·pp·cp·dp devices. `recompute` carries Recompute codes (choices.RECOMPUTE_CODES)."""

    tp: Num
    pp: Num
    dp: Num
    cp: Num
    vpp: Num                    # virtual (interleaved) stages per pipeline rank
    micro_batch: Num            # b [sequences]
    zero: Num                   # ZeRO stage 0-3
    sp: Num                     # sequence parallelism, 0/1
    recompute: Num              # Recompute code
    tp_overlap: Num = 0.0       # TP collectives pipelined with the GEMMs, 0/1
    dp_shard: Num | None = None   # ZeRO shard group (HSDP); None: all of dp
    dp_overlap: Num = 1.0       # the data-parallel gradient reduction overlapped with the backward, 0/1
    pipeline_split: str = "even"           # PipelineSplit (not an array: the search calls once per split)
    dp_collectives: str = "hierarchical"   # DpCollectives (not an array)
    finetune: Num = 0.0         # Finetune code (choices.FINETUNE_CODES): full 0, lora 1, qlora 2
    offload: Num = 0.0          # Offload code (choices.OFFLOAD_CODES)
    ep: Num = 1.0               # expert-parallel size e (MoE layers)
    etp: Num = 1.0              # expert tensor-parallel size t_e (MoE layers)
    moe_overlap: str = "none"   # MoeOverlap (not an array: a framework capability the plan keeps)
    pipeline_schedule: str = "1f1b"   # PipelineSchedule (not an array: the job's schedule, the plan keeps it)
    rank_layers: tuple[int, ...] = ()   # pipeline_split "layout": decoder layers on each pipeline rank
    recompute_share: Num = 1.0  # the share of a stage's layers full recompute re-runs (recompute_share), §7.10

    @property
    def split(self) -> str | tuple[int, ...]:
        """How the layers fall on the stages (step.schedule.stage_layers): "even", "balanced", or the
        layers on each rank of a pipeline layout."""
        return self.rank_layers if self.pipeline_split == "layout" else self.pipeline_split

    @property
    def expert_group(self) -> Num:
        """e·t_e: the ranks that hold one copy of every routed expert of a layer."""
        return self.ep * self.etp

    @property
    def edp(self) -> Num:
        """d_e = t·c·d/(e·t_e): expert data-parallel size (Megatron-Core: ep·etp·edp = tp·cp·dp)."""
        return self.tp * self.cp * self.dp / (self.ep * self.etp)

    @property
    def expert_shard(self) -> Num:
        """Ranks the ZeRO state of the experts is sharded over: d_e, or d_e·d_s/d with hybrid sharding
        (at least 1)."""
        return xp.maximum(self.edp * self.shard / self.dp, 1.0)

    @property
    def deepep(self) -> bool:
        """The MoE all-to-alls are hidden behind another micro-batch's computation (moe_overlap deepep)."""
        return self.moe_overlap == "deepep"

    @property
    def ep_hidden(self) -> Num:
        """1 where the MoE all-to-alls hide behind another micro-batch's computation: moe_overlap deepep,
        or DualPipe with a pipeline (its overlapped forward and backward chunks), else 0."""
        if self.deepep:
            return 1.0
        return xp.mask(self.pp > 1) if self.dualpipe else 0.0

    @property
    def dualpipe(self) -> bool:
        """DeepSeek-V3's bidirectional pipeline schedule (docs/model.md §5.4)."""
        return self.pipeline_schedule == "dualpipe"

    @property
    def shard(self) -> Num:
        """Ranks the ZeRO state is sharded over (without cp): dp_shard, or dp."""
        return self.dp if self.dp_shard is None else self.dp_shard

    def micro_batches(self, job: Job) -> Num:
        """m = B / (d·b): micro-batches per step per pipeline."""
        return job.global_batch / (self.dp * self.micro_batch)

    def tokens(self, job: Job) -> Num:
        """T = b·s/c: tokens of one micro-batch on one device."""
        return self.micro_batch * job.seq_len / self.cp

    # ---- recompute masks (1.0 where the mode holds, else 0.0)
    @property
    def no_recompute(self) -> Num:
        return xp.mask(self.recompute == RECOMPUTE_CODES["none"])

    @property
    def selective(self) -> Num:
        return xp.mask(self.recompute == RECOMPUTE_CODES["selective"])

    @property
    def full(self) -> Num:
        """Full recompute: the share of a stage's layers it re-runs (1: all of them; recompute_share), else 0. Every
        time term it multiplies (the re-run forward, its collectives) scales with it (docs/model.md §7.10)."""
        return self.full_mask * self.recompute_share

    @property
    def full_mask(self) -> Num:
        """1 where recompute is full (of some or all layers), else 0."""
        return xp.mask(self.recompute == RECOMPUTE_CODES["full"])

    @property
    def op(self) -> Num:
        """torchtitan's per-op selective checkpointing."""
        return xp.mask(self.recompute == RECOMPUTE_CODES["op"])

    @property
    def rematerialises_layer(self) -> Num:
        """Full or op: a whole layer's activations are rebuilt during its backward."""
        return self.full_mask + self.op

    # ---- ZeRO masks
    @property
    def z0(self) -> Num:
        return xp.mask(self.zero == 0)

    @property
    def zero12(self) -> Num:
        """ZeRO-1 or -2 (sharded optimizer state, gradients reduce-scattered)."""
        return xp.mask((self.zero >= 1) * (self.zero <= 2))

    @property
    def z2(self) -> Num:
        return xp.mask(self.zero == 2)

    @property
    def z3(self) -> Num:
        """ZeRO-3 / FSDP (weights sharded too)."""
        return xp.mask(self.zero >= 3)

    # ---- fine-tuning and offload masks
    @property
    def frozen(self) -> Num:
        """LoRA or QLoRA: frozen base weights, trained adapters."""
        return xp.mask(self.finetune >= FINETUNE_CODES["lora"])

    @property
    def qlora(self) -> Num:
        """QLoRA: the frozen base is 4-bit NF4."""
        return xp.mask(self.finetune == FINETUNE_CODES["qlora"])

    @property
    def offload_optimizer(self) -> Num:
        """The FP32 master weights and Adam state live in host memory; the CPU runs Adam."""
        return xp.mask((self.offload == OFFLOAD_CODES["optimizer"])
                       + (self.offload == OFFLOAD_CODES["optimizer+weights"]))

    @property
    def offload_weights(self) -> Num:
        """The 16-bit weights live in host memory too and are fetched for every pass."""
        return xp.mask(self.offload == OFFLOAD_CODES["optimizer+weights"])

    @property
    def offload_activations(self) -> Num:
        """Activation checkpoints go to host memory in the forward and come back in the backward."""
        return xp.mask(self.offload == OFFLOAD_CODES["activations"])

    @property
    def sp_div(self) -> Num:
        """What sequence parallelism divides the replicated activations by: t with SP, else 1."""
        return xp.where(self.sp > 0, self.tp, 1.0)


def recompute_share(layers: float, pp: Num, vpp: Num, recompute_layers: float) -> Num:
    """The share of a pipeline stage's layers that full recompute re-runs: all (1) when recompute_layers is 0, else
    min(1, n·v / (L/p)) for n layers per stage and model chunk (Megatron-Core --recompute-method block
    --recompute-num-layers n; NeMo activations_checkpoint_num_layers), docs/model.md §7.10."""
    if recompute_layers <= 0:
        return 1.0
    return xp.minimum(1.0, recompute_layers * vpp * pp / layers)
