"""The vocabularies of trainest's inputs, defined once: every choice a scenario, a runs file or the
command line may name. Standard library only (on the start-up path of every command)."""

from __future__ import annotations

from enum import StrEnum


class Choice(StrEnum):
    """A named choice; its value is the word users write."""

    @classmethod
    def values(cls) -> tuple[str, ...]:
        return tuple(c.value for c in cls)


class Precision(Choice):
    """GEMM precision (FP32 master weights and Adam state in every mixed-precision mode)."""

    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    FP4 = "fp4"


LOW_PRECISIONS = (Precision.FP8.value, Precision.FP4.value)     # GEMMs below 16 bit (cast per GEMM)
FULL_PRECISIONS = (Precision.FP32.value, Precision.TF32.value)  # 32-bit weights, no master copy


class Mlp(Choice):
    """MLP kind: GeLU (2 matrices, h→f→h) or SwiGLU (3 matrices: gate, up, down)."""

    GELU = "gelu"
    SWIGLU = "swiglu"


class Recompute(Choice):
    """Activation recomputation. selective: Megatron's (the attention core); full: the whole layer;
    op: torchtitan's per-op selective checkpointing (every second matmul and the element-wise ops
    recomputed, attention saved)."""

    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"
    OP = "op"

    @property
    def code(self) -> int:
        """The number the vectorised model carries for this mode (Layout.recompute)."""
        return RECOMPUTE_CODES[self.value]


RECOMPUTE_CODES = {"none": 0, "selective": 1, "full": 2, "op": 3}


class Attention(Choice):
    """Attention kernel: flash (the best fused kernel: FA3/cuDNN on Hopper+), flash2
    (FlashAttention-2) or standard (materialised s×s scores)."""

    FLASH = "flash"
    FLASH2 = "flash2"
    STANDARD = "standard"


class Kernels(Choice):
    """Element-wise kernels: fused (Megatron/Transformer Engine, torch.compile, XLA) or eager
    (PyTorch without torch.compile: one kernel per operator, FP32 norms)."""

    FUSED = "fused"
    EAGER = "eager"


class PipelineSplit(Choice):
    """even: L/p layers per stage (L divides by p·v); balanced: the embedding and the loss count as
    one layer each (Megatron's account-for-embedding-and-loss split)."""

    EVEN = "even"
    BALANCED = "balanced"


class DpCollectives(Choice):
    """How the data-parallel/ZeRO rings use the NICs: hierarchical (every NIC of a node) or flat
    (one NIC per rank)."""

    HIERARCHICAL = "hierarchical"
    FLAT = "flat"


class Objective(Choice):
    """What `plan` minimises: step time, cost or energy of the whole run."""

    TIME = "time"
    COST = "cost"
    ENERGY = "energy"


class DeviceCounts(Choice):
    """Device counts tried in a --devices range: powers of two or multiples of the node size."""

    POW2 = "pow2"
    NODE = "node"
