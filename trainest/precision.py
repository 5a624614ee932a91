"""Mixed-precision bookkeeping: bytes per parameter of the working weights, the gradients and the
Adam state at each GEMM precision. Sources: Rajbhandari et al. 2020 (ZeRO: 2 B weights + 12 B Adam
state); Megatron-LM's FP32 main gradients; Micikevicius et al. 2018 (loss-scaled FP16)."""

from __future__ import annotations

from trainest.choices import FULL_PRECISIONS

MASTER_WEIGHT_BYTES = 4.0        # FP32 master copy of each parameter (mixed precision)
MOMENT_BYTES = {"fp32": 4.0, "bf16": 2.0}   # bytes of one Adam moment per parameter (`adam_moments`)
ADAM_MOMENT_BYTES = 2.0 * MOMENT_BYTES["fp32"]   # FP32 first and second moments: 8 B
MAIN_GRAD_BYTES = 4.0            # FP32 gradient accumulation buffer (Megatron main_grad, FSDP reduce dtype)
FP16_GRAD_BYTES = 2.0            # loss-scaled FP16 training keeps and reduces FP16 gradients


# a weight stored in FP8 (Transformer Engine's Float8Tensor, Megatron-Core --fp8-param-gather, torchao's float8
# all-gather): one byte, its scale per tensor negligible (docs/model.md §7.9)
FP8_PARAM_BYTES = 1.0


def weight_bytes_per_param(precision: str) -> float:
    """Bytes of the working weights: 4 for FP32/TF32 training, 2 otherwise (FP8/FP4 recipes keep
    16-bit weights and cast per GEMM) [B]."""
    return 4.0 if precision in FULL_PRECISIONS else 2.0


GRAD_DTYPE_BYTES = {"fp32": MAIN_GRAD_BYTES, "bf16": 2.0}   # `grad_dtype` given (not auto)


def grad_bytes_per_param(precision: str, grad_dtype: str = "auto", master_weights: str = "fp32") -> float:
    """Bytes per parameter of the gradient buffer, which is also what the data-parallel reduction
    moves [B]. `grad_dtype` auto: FP32 (4) for BF16/FP8/FP4 mixed precision (Megatron forces FP32 gradient
    accumulation and reduction with BF16; FSDP's default reduce dtype) and FP32 training; FP16 (2) for
    loss-scaled FP16 mixed precision, whose gradients stay FP16 (Megatron-LM without
    --accumulate-allreduce-grads-in-fp32, DeepSpeed's FP16 ZeRO); without a master (`master_weights` none:
    pure 16-bit training) the 16-bit weights' own gradients (2). Given: fp32 4, bf16 2 (DeepSpeed's bf16 mode
    keeps BF16 gradients beside its FP32 master)."""
    if grad_dtype != "auto":
        return GRAD_DTYPE_BYTES[grad_dtype]
    if precision == "fp16" or (master_weights == "none" and precision not in FULL_PRECISIONS):
        return FP16_GRAD_BYTES
    return MAIN_GRAD_BYTES


# 8-bit Adam (bitsandbytes; Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization" §2): each moment
# one byte, plus one FP32 absmax per block of 2,048 values
BLOCKWISE_8BIT_BYTES = 1.0 + 4.0 / 2048.0


def optimizer_state_bytes(optimizer: str = "adamw", moments: str = "fp32") -> float:
    """Bytes per parameter of the optimizer's own state, the master weights aside [B]: AdamW two moments
    (2·4, or 2·2 with BF16 moments); 8-bit AdamW two block-quantised moments (2·(1 + 4/2048)); Adafactor
    (Shazeer & Stern 2018, without momentum, its default) a factored second moment, a row and a column
    vector per r×c matrix, 4·(r + c)/(r·c) B per parameter: under 0.01 B for r, c ≥ 1024, counted as 0;
    SGD with momentum one FP32 buffer (4)."""
    return {"adamw": 2.0 * MOMENT_BYTES[moments], "adamw-8bit": 2.0 * BLOCKWISE_8BIT_BYTES, "adafactor": 0.0,
            "sgd": 4.0}[optimizer]


def optimizer_bytes_per_param(precision: str, moments: str = "fp32", optimizer: str = "adamw",
                              master_weights: str = "fp32") -> float:
    """Optimizer state: FP32 master + the optimizer's own state (AdamW: 12 B); pure FP32 training needs no
    master copy (8 B), nor does pure 16-bit training (`master_weights` none: the optimizer updates the 16-bit
    weights in place; with BF16 moments, torch.optim's state in the parameters' dtype, 4 B); BF16 moments
    (`moments` bf16: DeepSeek-AI 2024 §3.3.3) halve the moments' 8 B; `optimizer_state_bytes` for the others."""
    master = 0.0 if precision in FULL_PRECISIONS or master_weights == "none" else MASTER_WEIGHT_BYTES
    return optimizer_state_bytes(optimizer, moments) + master


# Per-module precision under an FP8/FP4 recipe (`module_precision`, docs/model.md §2.2): the modules an override may
# name, by Megatron-Core's module names (the last part of the names a Megatron-Core quantisation recipe's
# GlobMatcher patterns match, e.g. `*.linear_qkv`, `*mixer.out_proj`, `*mlp.fc[12]_latent_proj`, `mtp.*`), and what
# each stands for in trainest's step model
MODULE_PRECISION_MODULES = {
    "linear_qkv": "the attention's QKV projection (not MLA's, whose projections are its own)",
    "linear_proj": "the attention's output projection (MLA's too)",
    "in_proj": "a Mamba-2 mixer's input projection",
    "out_proj": "a Mamba-2 mixer's output projection",
    "latent_proj": "LatentMoE's projections to and from the latent (fc1_latent_proj, fc2_latent_proj)",
    "mtp": "the multi-token-prediction module, all of its GEMMs",
}
MODULE_PRECISIONS = ("bf16", "fp8")    # what a module may be kept in; MXFP8 is trainest's fp8 (a block-scaled FP8)
NO_MODULE_PRECISION = "none"


def module_precisions(text: str) -> dict[str, str]:
    """The per-module precisions `module=precision,...` as {module: precision} ({} for `none`); ValueError naming
    the first part that is not one of MODULE_PRECISION_MODULES with one of MODULE_PRECISIONS, or a module given
    twice."""
    parsed: dict[str, str] = {}
    if text.strip().lower() in (NO_MODULE_PRECISION, ""):
        return parsed
    for part in text.split(","):
        module, sep, precision = (s.strip().lower() for s in part.partition("="))
        if not sep or module not in MODULE_PRECISION_MODULES or precision not in MODULE_PRECISIONS:
            raise ValueError(f"{part.strip()!r} is not module=precision; modules: {', '.join(MODULE_PRECISION_MODULES)}"
                             f"; precisions: {', '.join(MODULE_PRECISIONS)}")
        if module in parsed:
            raise ValueError(f"{module} is given twice")
        parsed[module] = precision
    return parsed
