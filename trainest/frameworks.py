"""The software stack as an input: what each training framework does that the step model needs
(docs/model.md §2.9). Facts with their sources; standard library only (start-up path).

A framework sets
- `dispatch`: how kernels reach the GPU. `python`: every kernel is launched from Python through
  PyTorch's dispatcher (eager PyTorch, Megatron, DeepSpeed, torchtitan, Composer; torch.compile
  fuses kernels but still launches each from Python); `xla`: the step is one compiled program
  (JAX/XLA, MaxText): no per-kernel host work. The host time per kernel of the `python` class is
  the hardware's `efficiency.host_us_per_kernel` (its CPU runs the Python: plain PyTorch's dispatch
  of one kernel) times the framework's `host_scale`: 1, but FITTED for a framework whose measured
  small-kernel steps say its layers cost more per kernel (Megatron-DeepSpeed: the vTrain rows;
  Megatron-Core and NeMo: the host-bound MoE runs; `specs/frameworks.json`, written by
  tools/fit_defaults.py; docs/model.md §2.9).
- `micro_batch_sync`: whether the framework synchronises host and device at every micro-batch, so that
  the host's Python for a micro-batch outside its kernels (fetching and broadcasting the batch, the
  schedule's bookkeeping: the hardware's `efficiency.host_ms_per_micro_batch`, times the framework's
  `micro_batch_host_scale`, FITTED like `host_scale`) is on the step's path (docs/model.md §2.9).
  Megatron-DeepSpeed: every `get_batch` (and `get_batch_pipe` under its pipeline engine) calls
  `tensor_parallel.broadcast_data`, which copies the batch's sizes back to the host
  (`_build_key_size_numel_dictionaries`: `sizes_cuda.cpu()`): the host waits there for the device to
  finish the previous micro-batch, and the device then waits for the host's Python before its first
  kernel (older Megatron timers also call `torch.cuda.synchronize()` around each micro-batch's forward and
  backward). The Hugging Face Trainer (hf-accelerate) tests every micro-batch's loss for NaN/inf in
  Python with its default `logging_nan_inf_filter=True` (`if ... torch.isnan(tr_loss_step) or
  torch.isinf(tr_loss_step)` in `Trainer._inner_training_loop`), which reads the loss back to the host;
  its scale is not fitted (no measured run): the system's prior. Megatron-Core's `get_batch_on_this_tp_rank`
  broadcasts without a host copy, and the other frameworks' loops let the device run ahead across
  micro-batches: False, their per-micro-batch Python hides behind the device.
- `kernels`: its element-wise kernels when the run does not say (fused | eager).
- `dp_bucket_params`, `dp_bucket_params_per_rank`: how many collectives carry the data-parallel gradients
  (and, with ZeRO-1/2, the updated weights) each step, each paying its own latency (docs/model.md §4.3):
  one per bucket of max(dp_bucket_params, dp_bucket_params_per_rank·dp·cp) parameters, Megatron-Core's DDP
  (`bucket_size = max(40_000_000, 1_000_000 * data_parallel_world_size)` in
  `distributed_data_parallel.py`) and DeepSpeed's (`reduce_bucket_size` and `allgather_bucket_size`,
  5e8 elements by default); 0: one per layer, PyTorch FSDP wrapping each transformer block (llm-foundry,
  torchtitan, OLMo-core, Accelerate's FSDP with its transformer auto-wrap policy), MaxText's per-layer
  scan, MLX.
- `dp_gather_overlap`: whether ZeRO-1/2's all-gather of the updated weights hides behind the next step's
  first forward. Megatron-Core's distributed optimizer (`--overlap-param-gather`: each bucket's all-gather
  is waited for in a forward pre-hook of its first module) and FSDP's SHARD_GRAD_OP (each unit gathered
  before its forward) do; DeepSpeed's ZeRO-1/2 optimizer (`DeepSpeedZeroOptimizer.step` in
  deepspeed/runtime/zero/stage_1_and_2.py: `all_gather_dp_groups` after the partition's update) gathers
  every bucket at the end of the step, before the next forward starts: exposed in full. InternEvo's
  broadcasts likewise (`overlap_sync_param` off in its configs).
- `zero_all_reduce`: ZeRO-1/2 as InternEvo's HybridZeroOptimizer runs it (and ColossalAI's low-level ZeRO
  optimizer it descends from, without gradient partitioning): each bucket of gradients is all-reduced over
  the whole data-parallel group, every rank keeps its shard's part and updates it, then every owner of a
  shard broadcasts its updated weights to its shard group, one broadcast per owner
  (`hybrid_zero_optim.py`: `_reduce_and_copy`, `broadcast_params`). The bytes are an all-reduce's and an
  all-gather's, but the weights take one ring latency per owner: n·(n−1)·α over a shard group of n ranks,
  which a shard group spanning hundreds of ranks over a RoCE network turns into seconds (the InternEvo
  rows at zero1=-1 against zero1=8 on 16-1024 A100s; docs/model.md §4.4). Its `zero1` size is
  `parallel.dp_shard`. False: a reduce-scatter and one all-gather per bucket (Megatron-Core's distributed
  optimizer, DeepSpeed, FSDP).
- `tp_shards_activations`: whether its tensor parallelism also shards the activations between the GEMMs (the
  residual stream, the norms, the element-wise ops), so that with tp > 1 each device runs them on 1/t of the
  layer's activations and the tensor-parallel collectives are an all-gather before and a reduce-scatter after
  each block: Megatron's sequence parallelism in effect, which is then the derived default (`parallel.sequence_
  parallel` on with tp > 1; a run can say otherwise). MaxText: its logical axis rules map the activations' embed
  dimension to the `tensor` mesh axis (`['activation_embed', 'tensor']` in MaxText/configs/base.yml, read from
  the maxtext 0.1.0 wheel; the decoder layers constrain their inputs and outputs to ('activation_batch',
  'activation_norm_length', 'activation_embed')), so GSPMD keeps the residual stream sharded over the hidden
  dimension and gathers it before the projections (docs/model.md §4.1). The others: off unless the run says so
  (Megatron-Core's `--sequence-parallel` is a flag; torchtitan's plan is imported as stated).
- `dp_overlap`: whether it overlaps the data-parallel gradient reduction with the backward by
  default (bucketing). A run can say otherwise (`parallel.dp_overlap`).
- `interleaved`: whether it has the interleaved (virtual-stage) pipeline schedule.
- `seen`: whether the bundled measured runs include it (docs/validation.md); an estimate for a
  framework never seen is marked as such. `moe_seen`: the same for the mixture-of-experts runs (all
  Megatron-Bridge, i.e. Megatron-Core): a MoE estimate under another framework says its expert kernels,
  dispatcher and overlap are not validated.
- `megatron_softmax`: standard (non-flash) attention runs Megatron's fused scale-mask-softmax, which
  falls back to an FP32 PyTorch softmax for shapes its kernel does not take (docs/model.md §2.9,
  `step/kernels.py: softmax_fallback`).
- `unfused_cross_entropy`: the loss is Megatron's vocab-parallel cross-entropy run as separate PyTorch
  operators over an FP32 copy of the logits (Megatron-DeepSpeed; Megatron-Core without
  `--cross-entropy-loss-fusion`), not the 4 FP32 passes trainest assumes otherwise
  (`step/kernels.py: cross_entropy_bytes_per_logit`).
- `loss_bytes_per_logit`: bytes per logit the loss holds at its peak, while every layer's
  activations are still kept (docs/model.md §7.4). Megatron (`tensor_parallel/cross_entropy.py`:
  `_VocabParallelCrossEntropy`, fused or not) casts the 16-bit logits to FP32, turns them into the
  softmax in place, saves that and computes its gradient in place in the backward: 2 + 4 = 6.
  torchtitan calls `F.cross_entropy(pred.float(), ...)` and deletes the 16-bit `pred` before the
  backward: the FP32 log-softmax it saves, the gradient arriving at it and the gradient it returns
  are alive together at the start of the backward: 3·4 = 12. llm-foundry's MPT defaults to
  `loss_fn: fused_crossentropy`, flash-attn's xentropy kernel on the 16-bit logits (FP32 only in
  registers and one log-sum-exp per row), whose 16-bit gradient sits beside the logits Composer keeps
  in its state through the backward: 2 + 2 = 4. Hugging Face transformers' causal LMs (4.45
  modeling_llama.py: `logits = logits.float()`, then `CrossEntropyLoss` on a shifted `.contiguous()` copy; the
  Trainer's `compute_loss` drops the outputs before the backward) and torchtune's recipes without a chunked loss
  (the model returns `self.output(h).float()`, `nn.CrossEntropyLoss`, the recipe's `del logits`) hold what
  torchtitan holds: 3·4 = 12 (hf-accelerate, deepspeed; the torchtune recipe rows are imported under
  hf-accelerate). Frameworks not examined: 8 (the FP32 logits and their gradient).
- `loss_parallel_bytes_per_logit`: the same under tensor parallelism, where the framework's loss is
  another implementation: torchtitan (Dec 2024) runs its loss inside `loss_parallel()` when tp > 1, on
  logits sharded over the vocabulary, which is DTensor's vocabulary-parallel cross-entropy
  (torch/distributed/tensor/parallel/loss.py): its backward computes the NLL's and the log-softmax's
  gradients together, `(grad_input + torch.exp(x)) * grad_output` beside the saved FP32 log-softmax `x`
  and the zeros-then-scattered `grad_input`: four FP32 tensors at once, 16 (its forward holds 14: the 16-bit
  logits, their FP32 copy, `shifted` and the result). None: the same loss as without tensor parallelism.
- `saves_gathered_inputs`: under sequence parallelism the column-parallel linears (Q/K/V and the MLP's up
  projections) save the all-gathered, full-sequence norm output for their weight gradient, not the ÷t shard:
  torchtitan's `ColwiseParallel(input_layouts=Shard(1))` redistributes the input to `Replicate()` before
  `F.linear`, whose autograd saves that input (with Float8 the gathered FP8 copy; under async TP the fused
  all-gather-matmul's gathered output). Megatron-Core saves the shard and gathers it again in the backward
  (`LinearWithGradAccumulationAndAsyncCommunication`). docs/model.md §7.3.
- `pp_unsharded_zero3`: with ZeRO-3/FSDP and pipeline parallelism the stage's parameters are not
  resharded after the forward and its gradients are accumulated unsharded over the micro-batches
  (reduce-scattered at the last one), so a device holds its stage's gathered 16-bit weights and
  full-size gradients in the reduce dtype through the step (torchtitan: `reshard_after_forward` is
  off when pipeline parallelism is on, "to avoid per-microbatch all-gathers"; the pipeline schedule
  syncs gradients only on the last micro-batch; FSDP2 accumulates unsynced gradients in its
  `reduce_dtype`, FP32). docs/model.md §7.2, `memory.py: zero_state_bytes`.
- `stage_buffers_per_micro_batch`: its pipeline runs on `torch.distributed.pipelining` (torch 2.5.1/2.6
  `stage.py`), whose stage allocates, for each of the m micro-batches, a receive buffer for its input (not on
  the first stage: `PipelineStage._prepare_forward_infra`) and one for its output's gradient (not on the last:
  `_prepare_backward_infra`), kept from step to step, and appends every micro-batch's output to
  `output_chunks` (`forward_one_chunk`), freed only by `clear_runtime_states` at the next step's start: the
  last stage's outputs are the 16-bit logits (torch 2.8 keeps the last stage's only), which `step` merges into one
  more tensor at the step's end (`_merge_outputs`). docs/model.md §7.4, `memory.py: stage_buffer_bytes`,
  `merged_output_bytes`.
- `cp_gathers_kv`: its context parallelism is torch's (`torch.distributed.tensor.experimental.context_parallel`,
  torch 2.6 `_attention.py`) with the all-gather rotate method (`_ContextParallelOptions.rotate_method`
  ALL_GATHER, torchtitan's `context_parallel_rotate_method` default "allgather"): each attention all-gathers the
  K and V of the whole sequence (`_AllGatherRotater`; torchtitan's `repeat_kv` has expanded them to the query
  heads), and its backward (`_templated_ring_attention_backward`) gathers them again beside FP32 accumulators
  for dQ, dK, dV, the kernel's 16-bit gradients and the FP32 dK/dV it passes round (all-to-all, sent and
  received). docs/model.md §7.4, `memory.py: cp_exchange_bytes`.
- `cp_fused_attention`: its context parallelism runs only with fused attention kernels, so `attention: standard`
  (the materialised s×s softmax) takes cp = 1 (rules.CP_FUSED_ATTENTION). Megatron-Core, and so NeMo and
  Megatron-Bridge: its local attention module refuses a context-parallel group (megatron-core 0.16
  `transformer/dot_product_attention.py`: "Context parallelism is only supported by TEDotProductAttention!");
  torchtitan: torch's `context_parallel` replaces the fused SDPA kernels (flash, memory-efficient, cuDNN) by its
  ring, not the math path. docs/model.md §4.2.
- `packed_fused_attention`: its packed sequences (documents of `packed_length` tokens in one sequence) run only
  through a fused kernel's variable-length path, so `attention: standard` takes no `packed_length`. Megatron-Core
  (NeMo, Megatron-Bridge): packed sequences travel as Transformer Engine's THD format, and its local attention
  module refuses them (megatron-core 0.16, DotProductAttention.forward: "Packed sequence is not supported").
- `zero_stages`: the ZeRO stages (docs/model.md §4.4, §7.2) it has. All four where it has them or it was not
  examined. Megatron-Core and NeMo (Megatron-Bridge): 0 DDP, 1 the distributed optimizer
  (--use-distributed-optimizer), 2 and 3 Megatron-FSDP's `optim_grads` and `optim_grads_params` (megatron-core
  0.16 `megatron/core/distributed/fsdp/src/megatron_fsdp/fully_shard.py`: "'optim_grads' / 2: Shards gradients and
  optimizer states, which is conceptually similar to 'ZeRO-2'"; torch FSDP2 is 3 too). DeepSpeed and
  Megatron-DeepSpeed: 0-3 (`zero_optimization.stage`). torchtitan: 0 (DDP/`data_parallel_replicate_degree`),
  2 (FSDP2 with `fsdp_reshard_after_forward: never`, which torchtitan itself calls "ZeRO-2 style FSDP",
  torchtitan 0.3 `experiments/graph_trainer/graph_pp/pipeline.py`), 3 (FSDP2): FSDP2 has no optimizer-only
  sharding, so no ZeRO-1. llm-foundry (Composer's PyTorch FSDP `sharding_strategy`): NO_SHARD 0,
  SHARD_GRAD_OP 2, FULL_SHARD 3 (mosaicml 0.32 `composer/distributed/dist_strategy.py`), no ZeRO-1. OLMo-core:
  `DataParallelType` ddp, fsdp, hsdp (ai2-olmo-core 3.0 `olmo_core/distributed/parallel/data_parallel.py`): 0
  and 3.
- `pipeline`: whether it has pipeline parallelism. llm-foundry (Composer: FSDP only) and the Hugging Face
  Trainer (DDP/FSDP/DeepSpeed ZeRO on a transformers model; Accelerate's pipeline, `prepare_pippy`, is for
  inference) do not.
- `pp_zero_stages`: the ZeRO stages it runs together with pipeline parallelism. DeepSpeed's PipelineEngine
  refuses ZeRO-2 and -3 (`deepspeed/runtime/pipe/engine.py`, `PipelineEngine.__init__`: "ZeRO-2 and ZeRO-3 are
  incompatible with pipeline parallelism"): DeepSpeed and Megatron-DeepSpeed (its pipeline is that engine) run
  0 and 1 with pp > 1. The others: their `zero_stages` (torchtitan and OLMo-core run FSDP2 with pipeline
  parallelism, `pp_unsharded_zero3`).
- `zero3_live_params`: how many parameters ZeRO-3 keeps gathered at once. 0: a whole layer and the
  prefetched next one (PyTorch FSDP wraps each transformer block: FSDP1 and FSDP2 gather a block and
  prefetch one). DeepSpeed ZeRO-3 gathers submodule by submodule and releases what exceeds
  `stage3_max_live_parameters` (default 1e9) while prefetching `stage3_prefetch_bucket_size` (default
  5e8) ahead (DeepSpeed configuration docs, "ZeRO optimizations"): DS_ZERO3_LIVE_PARAMS = 1.5e9, and at
  least the largest matrix, which must be whole to be multiplied (`memory.py: gathered_layer_params`).
- `lora_fused`: the adapter granularity of a LoRA/QLoRA (docs/model.md §13.1). True: one adapter on
  each of the layer's fused matrices, the QKV projection and the up/gate projection (with the output and
  down projections: 4 per layer), as Megatron-Core's `ParallelLinearAdapter` on `linear_qkv` and
  `linear_fc1` (NeMo 2 / Megatron-Bridge PEFT `target_modules: linear_qkv, linear_proj, linear_fc1,
  linear_fc2`; Megatron-DeepSpeed's models have the same fused `query_key_value` and
  `dense_h_to_4h`). False: one per projection, q, k, v, o, gate, up, down (7 per layer), as Hugging
  Face PEFT's `target_modules="all-linear"` on a transformers model (`q_proj`, `k_proj`, `v_proj`,
  `o_proj`, `gate_proj`, `up_proj`, `down_proj`), which is what the Hugging Face Trainer/Accelerate,
  DeepSpeed on HF models and llm-foundry (its `peft_config` on Hugging Face models) run; torchtitan and
  OLMo-core have no LoRA of their own, their users take PEFT, and their models keep the q, k, v and the
  gate and up weights apart too; mlx-lm's LoRA
  adapts `q_proj`, `k_proj`, `v_proj`, `o_proj`, `gate_proj`, `up_proj`, `down_proj` separately (its
  default `lora_layers: 16` adapts only the last 16 layers: not modelled, every layer is adapted); MaxText
  has no LoRA trainer of its own and keeps query, key and value as separate projections: assumed separate.
- `qlora`: whether it runs QLoRA, LoRA on a 4-bit NF4 base (docs/model.md §13.2). QLoRA is bitsandbytes'
  `Linear4bit` layers under PEFT on a Hugging Face transformers model, the stack Dettmers et al. 2023 released
  and trained with: it runs where such models are trained, the Hugging Face Trainer/Accelerate (also under
  FSDP, bitsandbytes' `bnb_4bit_quant_storage`), DeepSpeed on those models (ZeRO-3 with 4-bit layers, the
  PEFT/Accelerate guides) and llm-foundry's `hf_causal_lm` with a `peft_config`; mlx-lm fine-tunes LoRA
  adapters on a 4-bit quantised model (its own affine 4-bit format and a fused quantised matmul, modelled
  as NF4 dequantised each pass). The Megatron family
  (Megatron-Core, NeMo 2/Megatron-Bridge, whose PEFT adapts 16-bit linear layers, and Megatron-DeepSpeed),
  torchtitan, OLMo-core and MaxText have no 4-bit base layer: a QLoRA under them is refused, and a QLoRA
  that names no framework takes `QLORA_FRAMEWORK` (the Hugging Face stack; mlx on Apple silicon).
  litgpt quantises its own models through Lightning Fabric's `BitsandbytesPrecision` (`--quantize bnb.nf4`,
  bitsandbytes' `Linear4bit`): it runs QLoRA too.
- `holds_last_graph`: its training loop keeps the previous micro-batch's `logits` and `loss` bound while the
  next forward runs (litgpt finetune/lora.py and full.py: `logits = model(input_ids, ...)` rebinds only once
  the forward returns), so the previous micro-batch's autograd graph is released only then. What the backward
  frees (tensors saved with `save_for_backward`) is gone by then; what stays is the previous 16-bit logits and,
  over a bitsandbytes-quantised base, every quantised linear's 16-bit input, which bitsandbytes' matmuls keep
  as a ctx attribute (bitsandbytes 0.42 autograd/_functions.py: MatMul4Bit `ctx.tensors = (A, B)`,
  MatMul8bitLt `ctx.tensors = (CAt, subA, A)`), freed with the graph, not after the backward
  (docs/model.md §13.3; `memory.py: last_graph_bytes`). The Hugging Face Trainer returns `loss.detach()`
  from its training step (the graph is freed there); torchtune's NF4 linear keeps no input.
- `torch_eager`: its eager kernels (`kernels eager`) are PyTorch modules run operator by operator under
  autograd, which keep more for the backward than fused kernels (the FP32 norm inputs and the normalised inputs,
  under standard attention the attention output's copy, SwiGLU's SiLU output: `step/activations.py:
  eager_extra_bytes`). False for MLX (its own lazy arrays and fused `mx.fast` norms) and MaxText (JAX/XLA).
- `expands_kv_heads`: with grouped-query attention its attention modules copy each K and V head to the query
  heads that share it before calling SDPA, so the backward keeps K and V at the query width a·d_h, not g·d_h:
  Hugging Face transformers' `repeat_kv` (LlamaAttention), litgpt's `k.expand(...)` then `reshape` (model.py
  CausalSelfAttention: "flash attention requires it"), torchtune 0.3.1's `k.expand(...)` then `reshape`
  (modules/attention.py), whose recipes are imported under hf-accelerate. Eager or compiled alike: the compiled
  graph saves SDPA's inputs as SDPA's backward reads them (counted, docs/model/07-memory.md §7.3).
- `frees_grads`: its loop calls `zero_grad(set_to_none=True)` (PyTorch's default since 2.0) after each optimizer
  step, so the gradients are freed and each is allocated anew when the backward computes it: with one micro-batch
  per step and no pipeline, no gradient is alive while the forward builds the activations, and the backward frees
  a layer's activations as it writes that layer's gradients (`memory.py: phase_peak`). torchtune's recipes
  (`self._optimizer.zero_grad(set_to_none=True)`), litgpt (`optimizer.zero_grad()`), the Hugging Face Trainer
  (`model.zero_grad()`). Not set where unexamined (torchtitan's FSDP2 buffers; Megatron and DeepSpeed keep
  contiguous gradient buffers).
- `eager_norm_fp32_weight`: its eager RMSNorm multiplies the FP32 normalised input by the weight before the
  cast back (litgpt model.py RMSNorm: `(x_normed * weight.float()).to(dtype)`), so the backward keeps that
  normalised input in FP32 (4 B), where Hugging Face's and torchtune's cast it to 16 bit first
  (`self.weight * hidden_states.to(input_dtype)`, `x_normed.type_as(x) * self.scale`).
- `qlora_stable_embedding`: with a bitsandbytes-quantised base it swaps the token embedding for bitsandbytes'
  `StableEmbedding` after building the optimizer (litgpt finetune/lora.py: `old_embedding =
  model.transformer.wte`, then a new `StableEmbedding` whose weight copies it): the replaced embedding stays
  referenced for the whole run, and the new one's weight trains (it requires grad) outside the optimizer, so
  its V·h 16-bit gradient is computed and kept: one more embedding among the weights and one among the
  gradients (`finetune.py: stable_embedding_bytes`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType

from trainest.choices import FRAMEWORKS as FRAMEWORK_NAMES
from trainest.record import NamedTuple

DISPATCH_HOST_FACTOR = {"python": 1.0, "xla": 0.0}   # host time per kernel, relative to the python class
ZERO_STAGES = (0, 1, 2, 3)          # every ZeRO stage: a framework that has them all, or was not examined
DEEPSPEED_PP_ZERO = (0, 1)          # DeepSpeed's PipelineEngine: ZeRO-2 and -3 are incompatible with a pipeline
FSDP2_ZERO = (0, 3)                 # PyTorch FSDP2: DDP (replicate) or fully sharded, no optimizer-only sharding
# DeepSpeed ZeRO-3's defaults: stage3_max_live_parameters 1e9 + stage3_prefetch_bucket_size 5e8 (module docstring)
DS_ZERO3_LIVE_PARAMS = 1.0e9 + 5.0e8
FITTED_FILE = "frameworks.json"     # in the bundled specs: the fitted host scales (tools/fit_defaults.py)


# what an estimate under a framework no bundled measured run uses rests on (`Framework.seen` false)
NOT_SEEN_NOTE = ("no bundled measured run uses it; its host dispatch and defaults (trainest/frameworks.py) are not "
                 "validated")


def unseen_frameworks(names: Iterable[str]) -> dict[str, int]:
    """How many of `names` (one framework per run) name each framework no bundled measured run uses, sorted."""
    counts: dict[str, int] = {}
    for name in names:
        if name in FRAMEWORKS and not FRAMEWORKS[name].seen:
            counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items()))


def moe_unseen_frameworks(runs: Iterable[tuple[str, bool]]) -> dict[str, int]:
    """How many of `runs` ((framework, is a mixture of experts) per run) are mixture-of-experts runs under a
    framework no bundled measured MoE run uses (`moe_seen` false), per framework, sorted."""
    counts: dict[str, int] = {}
    for name, moe in runs:
        if moe and name in FRAMEWORKS and not FRAMEWORKS[name].moe_seen:
            counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items()))


class Framework(NamedTuple):
    """What a training framework does (see the module docstring)."""

    name: str
    dispatch: str               # python | xla
    kernels: str                # fused | eager: its default element-wise kernels
    dp_overlap: bool            # gradient reduction overlapped with the backward by default
    interleaved: bool           # has the interleaved pipeline schedule
    seen: bool                  # bundled measured runs use it
    source: str
    megatron_softmax: bool = False      # Megatron's fused scale-mask-softmax (with its FP32 fallback)
    unfused_cross_entropy: bool = False  # Megatron's vocab-parallel cross-entropy, operator by operator
    pp_unsharded_zero3: bool = False     # ZeRO-3 with pp > 1 keeps the stage gathered, its gradients unsharded
    loss_bytes_per_logit: float = 8.0    # bytes per logit the loss holds at its peak (module docstring)
    loss_parallel_bytes_per_logit: float | None = None   # the same under tensor parallelism, where its loss is
    #                                      another, vocabulary-parallel implementation (None: the same loss)
    moe_seen: bool = False               # bundled measured mixture-of-experts runs use it (Megatron-Bridge)
    host_scale: float = 1.0              # its host time per kernel over plain PyTorch's (fitted: FITTED_FILE)
    expert_loop: str = "gemm"            # EXPERT_LOOPS: how its MoE layer launches the local experts' work
    stage_layout: bool = False           # takes any layers per pipeline stage (a pipeline layout, docs/model.md §5.1)
    zero3_live_params: float = 0.0       # ZeRO-3's gathered parameters at once (0: two whole layers; module docstring)
    micro_batch_sync: bool = False       # host and device synchronised at every micro-batch (module docstring)
    micro_batch_host_scale: float = 1.0  # its host time per micro-batch over the system's prior (fitted: FITTED_FILE)
    zero_stages: tuple[int, ...] = ZERO_STAGES      # the ZeRO stages it has (module docstring)
    pipeline: bool = True                           # has pipeline parallelism
    pp_zero_stages: tuple[int, ...] = ZERO_STAGES   # the ZeRO stages it runs with pipeline parallelism
    lora_fused: bool = False             # LoRA adapters on the fused QKV and up/gate matrices, not per projection
    qlora: bool = False                  # runs QLoRA: bitsandbytes' 4-bit layers under PEFT (module docstring)
    # the hardware kinds (catalog `kind`) it runs on: the CUDA/ROCm stacks not on TPUs or Apple silicon, MLX
    # only on Apple silicon (and a CPU), MaxText not on Apple silicon; any: Hugging Face (MPS, torch_xla)
    runs_on: tuple[str, ...] = ("gpu", "cpu-gpu", "asic", "wafer", "cpu")
    # its activation recomputation (trainest's modes): Megatron's selective (the attention core) only in the
    # Megatron family and MaxText's remat policies; torchtitan's and OLMo-core's per-op checkpointing (op);
    # the others checkpoint whole layers (full) or nothing
    recompute_modes: tuple[str, ...] = ("none", "selective", "full")
    tp_overlap: bool = False             # pipelines TP collectives with GEMMs (TE userbuffers; torchtitan's async TP)
    # its tensor parallelism shards the activations between the layers' GEMMs as well (module docstring:
    # `tp_shards_activations`): sequence parallelism is its default with tp > 1
    tp_shards_activations: bool = False
    # its data-parallel gradient collectives per step: one per bucket of max(dp_bucket_params,
    # dp_bucket_params_per_rank·dp·cp) parameters, or (0) one per layer: FSDP's units (module docstring)
    dp_bucket_params: float = 0.0
    dp_bucket_params_per_rank: float = 0.0
    # ZeRO-1/2's all-gather of the updated weights hidden behind the next step's first forward, bucket by
    # bucket (Megatron --overlap-param-gather, FSDP's per-unit gathers); False: run at the end of the
    # optimizer step before the next forward starts (DeepSpeed's ZeRO-1/2, module docstring)
    dp_gather_overlap: bool = True
    # memory its own code holds beyond the model's tensors (module docstring: `holds_last_graph`,
    # `qlora_stable_embedding`)
    holds_last_graph: bool = False
    qlora_stable_embedding: bool = False
    # its eager kernels are PyTorch modules under autograd (module docstring: `torch_eager`)
    torch_eager: bool = True
    # ZeRO-1/2 reduces the gradients with an all-reduce over the data-parallel group (each rank keeps its
    # shard's) and sends the updated weights by one broadcast per shard owner, one after another, not by a
    # reduce-scatter and one all-gather (module docstring)
    zero_all_reduce: bool = False
    # its attention modules copy K and V to every query head before SDPA (module docstring: `expands_kv_heads`)
    expands_kv_heads: bool = False
    # its loop frees the gradients each step and computes them anew in the backward (`frees_grads`)
    frees_grads: bool = False
    # its eager RMSNorm multiplies the normalised input by the weight in FP32 (`eager_norm_fp32_weight`)
    eager_norm_fp32_weight: bool = False
    # under sequence parallelism its column-parallel linears save their all-gathered inputs (module docstring)
    saves_gathered_inputs: bool = False
    # its pipeline stages keep per-micro-batch send/receive buffers and outputs through the step (module docstring)
    stage_buffers_per_micro_batch: bool = False
    # its context parallelism all-gathers K and V of the whole sequence per attention (module docstring)
    cp_gathers_kv: bool = False
    # its context parallelism needs fused attention kernels: standard attention takes cp 1 (module docstring)
    cp_fused_attention: bool = False
    # its packed sequences need a fused kernel's variable-length path: standard attention takes none (module docstring)
    packed_fused_attention: bool = False

    @property
    def default_recompute(self) -> str:
        """Its recompute when none is given: Megatron's selective where it has it, else per-op checkpointing
        where it has that (torchtitan's default), else none (the Hugging Face Trainer, DeepSpeed, Composer)."""
        return next(m for m in ("selective", "op", "none") if m in self.recompute_modes)

    def zero_stages_with(self, pp: int) -> tuple[int, ...]:
        """The ZeRO stages it runs with `pp` pipeline stages (none: it has no pipeline)."""
        if pp == 1:
            return self.zero_stages
        return tuple(z for z in self.pp_zero_stages if z in self.zero_stages) if self.pipeline else ()

    @property
    def lora_granularity(self) -> str:
        """A LoRA's adapters: `fused` (one per fused QKV and up/gate matrix, Megatron) or `separate` (one per
        q, k, v, o, gate, up and down projection, PEFT)."""
        return "fused" if self.lora_fused else "separate"

    @property
    def dispatch_factor(self) -> float:
        """Host time of a plain PyTorch operator relative to Python dispatch (1 for python, 0 for a
        compiled step): the dispatch class alone, without the framework's layer machinery."""
        return DISPATCH_HOST_FACTOR[self.dispatch]

    @property
    def host_factor(self) -> float:
        """Host time per kernel relative to the system's plain PyTorch dispatch: the dispatch class's (1
        for python, 0 for a compiled step) times the framework's fitted `host_scale`."""
        return DISPATCH_HOST_FACTOR[self.dispatch] * self.host_scale

    @property
    def micro_batch_host_factor(self) -> float:
        """Host time per micro-batch on the step's path relative to the system's: the fitted
        `micro_batch_host_scale` times the dispatch factor where the framework synchronises at every
        micro-batch (`micro_batch_sync`), else 0 (the device runs ahead of that Python)."""
        return DISPATCH_HOST_FACTOR[self.dispatch] * self.micro_batch_host_scale if self.micro_batch_sync else 0.0


# How a framework's MoE layer launches its local experts' work from the host (step/moe.py:
# expert_pass_launches): `gemm` one GEMM per local expert in a host loop (Transformer Engine GroupedLinear,
# Megatron-Core TEGroupedMLP), `grouped` one kernel per grouped GEMM whatever the experts (torch._grouped_mm in
# torchtitan's MoE, MegaBlocks' block-sparse dMoE in llm-foundry, the grouped_gemm library in OLMo-core,
# MLX's gather_mm, XLA's ragged dot), `python` every local expert's MLP as eager operators in a Python loop
# (Hugging Face transformers' MixtralSparseMoeBlock, DeepSpeed-MoE's Experts).
EXPERT_LOOPS = ("gemm", "grouped", "python")

F = Framework
# data-parallel gradient buckets [parameters]: Megatron-Core DDP's max(40M, 1M·dp); DeepSpeed's 5e8-element buckets
MEGATRON_BUCKET_PARAMS = 40e6
MEGATRON_BUCKET_PER_RANK = 1e6
DEEPSPEED_BUCKET_PARAMS = 5e8
INTERNEVO_BUCKET_PARAMS = 512 * 2**20   # InternEvo's hybrid_zero_optimizer.reduce_bucket_size (elements)

DECLARED: tuple[Framework, ...] = (
    F("megatron-core", "python", "fused", True, True, True,
      "Megatron-LM/Megatron-Core: fused kernels (apex/TE), --overlap-grad-reduce, interleaved 1F1B "
      "(Narayanan et al. 2021; megatron/core/pipeline_parallel/schedules.py); any layers per stage "
      "(--pipeline-model-parallel-layout); LoRA on linear_qkv and linear_fc1 (ParallelLinearAdapter)",
      megatron_softmax=True, loss_bytes_per_logit=6.0, moe_seen=True, stage_layout=True, lora_fused=True,
      tp_overlap=True, dp_bucket_params=MEGATRON_BUCKET_PARAMS, dp_bucket_params_per_rank=MEGATRON_BUCKET_PER_RANK,
      cp_fused_attention=True, packed_fused_attention=True),
    F("nemo", "python", "fused", True, True, True,
      "NVIDIA NeMo 2 / Megatron-Bridge: Megatron-Core underneath (NeMo performance docs); its PEFT LoRA targets "
      "linear_qkv, linear_proj, linear_fc1, linear_fc2", megatron_softmax=True,
      loss_bytes_per_logit=6.0, moe_seen=True, stage_layout=True, lora_fused=True, tp_overlap=True,
      dp_bucket_params=MEGATRON_BUCKET_PARAMS, dp_bucket_params_per_rank=MEGATRON_BUCKET_PER_RANK,
      cp_fused_attention=True, packed_fused_attention=True),
    F("megatron-deepspeed", "python", "fused", True, False, True,
      "microsoft/Megatron-DeepSpeed: Megatron's fused kernels under the DeepSpeed engine; its 1F1B "
      "pipeline has no interleaved schedule (DeepSpeed PipelineEngine); gradient bucketing on by default; "
      "the loss is megatron/core/tensor_parallel/cross_entropy.py's unfused vocab-parallel cross-entropy",
      megatron_softmax=True, unfused_cross_entropy=True, loss_bytes_per_logit=6.0, expert_loop="python",
      zero3_live_params=DS_ZERO3_LIVE_PARAMS, micro_batch_sync=True, pp_zero_stages=DEEPSPEED_PP_ZERO,
      lora_fused=True, dp_bucket_params=DEEPSPEED_BUCKET_PARAMS, dp_gather_overlap=False),
    F("deepspeed", "python", "eager", True, False, False,
      "DeepSpeed ZeRO on Hugging Face/PyTorch models: eager kernels, overlap_comm (DeepSpeed config docs); "
      "ZeRO-3 keeps at most stage3_max_live_parameters + stage3_prefetch_bucket_size gathered",
      expert_loop="python", zero3_live_params=DS_ZERO3_LIVE_PARAMS, pp_zero_stages=DEEPSPEED_PP_ZERO,
      recompute_modes=("none", "full"), dp_bucket_params=DEEPSPEED_BUCKET_PARAMS, qlora=True,
      dp_gather_overlap=False, expands_kv_heads=True, loss_bytes_per_logit=12.0),
    F("torchtitan", "python", "eager", True, True, True,
      "pytorch/torchtitan: FSDP2 (gradient reduce-scatter overlapped), eager unless torch.compile, "
      "interleaved 1F1B among its pipeline schedules (torchtitan docs); with pipeline parallelism FSDP "
      "does not reshard after forward and gradients sync on the last micro-batch only (parallelize_llama.py); "
      "stage boundaries anywhere (pipeline_parallel_split_points)",
      pp_unsharded_zero3=True, loss_bytes_per_logit=12.0, loss_parallel_bytes_per_logit=16.0,
      saves_gathered_inputs=True, stage_buffers_per_micro_batch=True, cp_gathers_kv=True, cp_fused_attention=True,
      expert_loop="grouped",
      stage_layout=True,
      zero_stages=(0, 2, 3), recompute_modes=("none", "op", "full"), tp_overlap=True),
    F("maxtext", "xla", "fused", True, True, True,
      "google/maxtext: JAX/XLA, the step is one compiled program (XLA fuses element-wise ops; "
      "collectives scheduled by the compiler); its circular pipeline (num_pipeline_repeats > 1: each stage "
      "holds several non-adjacent layer groups) is the interleaved schedule", expert_loop="grouped",
      runs_on=("tpu", "gpu", "cpu-gpu", "cpu"), torch_eager=False, tp_shards_activations=True),
    F("llm-foundry", "python", "fused", True, False, True,
      "mosaicml/llm-foundry (Composer): PyTorch FSDP, fused/flash kernels in its MPT models, no pipeline; "
      "flash-attn's fused cross-entropy by default (loss_fn: fused_crossentropy)", loss_bytes_per_logit=4.0,
      expert_loop="grouped", zero_stages=(0, 2, 3), pipeline=False, recompute_modes=("none", "full"), qlora=True),
    F("olmo-core", "python", "fused", True, False, True,
      "allenai/OLMo-core: PyTorch FSDP2/HSDP or DDP (DataParallelType), torch.compile in its recipes",
      expert_loop="grouped", zero_stages=FSDP2_ZERO, recompute_modes=("none", "op", "full")),
    F("hf-accelerate", "python", "eager", True, False, False,
      "Hugging Face Accelerate/Trainer (DDP/FSDP): eager transformers modules; the Trainer reads every "
      "micro-batch's loss back to test it for NaN/inf (logging_nan_inf_filter, on by default); PEFT LoRA on "
      "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj", expert_loop="python",
      micro_batch_sync=True, pipeline=False, runs_on=("gpu", "cpu-gpu", "tpu", "asic", "wafer", "apple", "cpu"),
      recompute_modes=("none", "full"), qlora=True, expands_kv_heads=True, frees_grads=True,
      loss_bytes_per_logit=12.0),
    F("litgpt", "python", "eager", True, False, False,
      "Lightning-AI/litgpt: eager PyTorch modules under Lightning Fabric (DDP or FSDP), SDPA attention; LoRA "
      "per projection (q, k, v inside the fused QKV: LoRAQKVLinear); QLoRA through Fabric's "
      "BitsandbytesPrecision (--quantize bnb.nf4), its embedding swapped for bitsandbytes' StableEmbedding; the "
      "loop keeps the last micro-batch's logits and loss bound through the next forward (finetune/lora.py)",
      expert_loop="python", zero_stages=FSDP2_ZERO, pipeline=False, recompute_modes=("none", "full"),
      qlora=True, holds_last_graph=True, qlora_stable_embedding=True, expands_kv_heads=True, frees_grads=True,
      eager_norm_fp32_weight=True),
    F("mlx", "python", "eager", True, False, True,
      "Apple MLX: lazy evaluation of eager operators on the unified-memory GPU; mlx-lm's LoRA adapts q, k, v, o, "
      "gate, up and down projections separately", expert_loop="grouped", runs_on=("apple", "cpu"),
      recompute_modes=("none", "full"), qlora=True, torch_eager=False),
    F("internevo", "python", "fused", True, True, True,
      "InternLM/InternEvo: flash attention and fused kernels, interleaved 1F1B (num_chunks), full activation "
      "checkpointing; its ZeRO-1 (HybridZeroOptimizer, zero1 = the shard group) all-reduces the gradients bucket "
      "by bucket in the last backward (overlap_sync_grad) and then broadcasts each owner's updated shard in turn "
      "(broadcast_params), not overlapped with the next forward (overlap_sync_param off); FSDP as its ZeRO-3",
      dp_gather_overlap=False, zero_all_reduce=True, dp_bucket_params=INTERNEVO_BUCKET_PARAMS,
      zero_stages=(0, 1, 3), pp_zero_stages=(0, 1), recompute_modes=("none", "full")),
)
DEFAULT_FRAMEWORK = "megatron-core"
QLORA_FRAMEWORK = "hf-accelerate"    # a QLoRA's framework when none is given (module docstring: `qlora`)

# where a quantised base's kernels exist (QLoRA's 4-bit NF4, LoRA's 8-bit LLM.int8): bitsandbytes ships CUDA and ROCm
# kernels (NVIDIA and AMD GPUs, the Grace superchips and the DGX Spark: kinds gpu and cpu-gpu), mlx-lm its quantised
# matmul on Apple silicon (apple). None for TPUs (XLA), Trainium (Neuron), Gaudi (SynapseAI) or the other ASICs, and
# no framework of the catalog brings its own there: a quantised base on them is refused (`quantised_base_refusal`).
QUANTISED_BASE_KINDS = ("gpu", "cpu-gpu", "apple")
_VENDOR_STACK = {"Google": "XLA (TPU)", "AWS": "AWS Neuron (Trainium)", "Intel": "Intel Gaudi's SynapseAI"}


def quantised_base_refusal(kind: str, vendor: str, hardware_name: str, base_bits: int, framework: str) -> str | None:
    """Why a frozen base of `base_bits` bits cannot run on hardware of `kind` (None: it can, or the base is 16-bit):
    its kernels (bitsandbytes' NF4/int8 layers, mlx-lm's quantised matmul) exist only on QUANTISED_BASE_KINDS."""
    if base_bits >= 16 or kind in QUANTISED_BASE_KINDS:
        return None
    what = "QLoRA's 4-bit NF4 base" if base_bits == 4 else "an 8-bit (LLM.int8) base"
    why = f"{_VENDOR_STACK.get(vendor, f'the {vendor or kind} software stack')} has no such layer"
    return (f"{what} has no kernels on {hardware_name}: bitsandbytes' quantised layers run on NVIDIA and AMD GPUs "
            f"(CUDA, ROCm) and mlx-lm's on Apple silicon; {why}, and {framework} does not bring them. Alternatives: "
            f"--finetune lora with a 16-bit base (--base-bits 16), or a GPU (e.g. --hardware h100-sxm)")


def fitted_file() -> Path | None:
    """specs/frameworks.json of the installed package or the source tree (None: not there)."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "specs" / FITTED_FILE, here.parent / "specs" / FITTED_FILE):
        if candidate.is_file():
            return candidate
    return None


def with_fitted(declared: Iterable[Framework], path: Path | None) -> dict[str, Framework]:
    """The frameworks by name, each with the host scales fitted for it in `path` (specs/frameworks.json;
    tools/fit_defaults.py), if any."""
    fitted = {} if path is None else json.loads(path.read_text(encoding="utf-8")).get("frameworks", {})
    table = {}
    for f in declared:
        entry = fitted.get(f.name)
        if entry is not None:
            f = f._replace(host_scale=float(entry["host_scale"]))
            if entry.get("micro_batch_host_scale") is not None:
                f = f._replace(micro_batch_host_scale=float(entry["micro_batch_host_scale"]))
        table[f.name] = f
    return table


if tuple(f.name for f in DECLARED) != FRAMEWORK_NAMES:      # the vocabulary of --framework (choices.py)
    raise ImportError(f"trainest.frameworks declares {[f.name for f in DECLARED]}, but choices.FRAMEWORKS lists "
                      f"{list(FRAMEWORK_NAMES)}: the two must name the same frameworks in the same order")
_TABLE: dict[str, Framework] = with_fitted(DECLARED, fitted_file())
FRAMEWORKS: Mapping[str, Framework] = MappingProxyType(_TABLE)   # read-only: built once, at import


def set_host_scale(name: str, scale: float, micro_batch_scale: float | None = None) -> None:
    """Give framework `name` the host scale `scale` (and, when given, the per-micro-batch host scale) in
    this process: the fit's trial values (tools/fit_defaults.py), its one writer."""
    f = _TABLE[name]._replace(host_scale=float(scale))
    if micro_batch_scale is not None:
        f = f._replace(micro_batch_host_scale=float(micro_batch_scale))
    _TABLE[name] = f


@contextmanager
def substituted(framework: Framework) -> Iterator[None]:
    """Within the block, `framework` replaces the framework of its name (a test of one capability)."""
    saved = _TABLE[framework.name]
    _TABLE[framework.name] = framework
    try:
        yield
    finally:
        _TABLE[framework.name] = saved
