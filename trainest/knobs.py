"""The one table of inputs. Every knob a user can set is one `Knob` here; from this table derive

- the command-line options of `estimate` (typer and the typer-free fast path) and the job options
  of `plan` (`cli/options.py`),
- the scenario and runs YAML keys (`scenario.SCENARIO_KEYS`, `PARALLEL_KEYS`, `SHAPE_KEYS`) and the
  mapping an option set becomes (`mapping_from_values`),
- the plan search's knobs and `--allow` names (`SEARCHED`, `ALLOW_NAMES`), the job a plan keeps
  (`JOB_KEYS`), and the `trainest estimate` options that reproduce a plan (`estimate_args`),
- the `inputs` echo of every JSON document (`scenario.scenario_mapping` checks its keys against this
  table in tests) and the inputs reference `docs/inputs.md` (`python tools/knobs_doc.py`).

Adding a knob (a single value of the job: a choice, a number or an on/off): one `Knob` entry in KNOBS with a
`fallback` (its default; a `choices` tuple, `limits` for a number), the field of the same name and default on
`layout.Job`, its rules (`rules.py`, or a check in `scenario/checks.py` when it constrains other inputs), its
physics in `step/` and its tests. The table drives the rest: the option of estimate, plan, compare and sweep;
reading, checking and defaulting it in a scenario (`scenario/build.py: simple_knobs`, its value kept in
`Scenario.knobs`); the `inputs` echo and the job of plan and compare; the Job the step model gets (`job_of`).
Then run `python tools/knobs_doc.py` (docs/inputs.md and the knob properties of docs/schema/*.json) and
`python tools/cli_doc.py` (docs/cli.md); their currency tests fail until you do. A knob the plan search varies
is a `Layout` field instead (`searched=True`) with its candidates in `search/grid.py`.
Standard library only: this module is on the start-up path of every `trainest estimate`.
"""

from __future__ import annotations

import re
from typing import Any

from trainest.choices import VOCABULARIES
from trainest.frameworks import DEFAULT_FRAMEWORK, FRAMEWORKS
from trainest.record import NamedTuple

# groups: where a knob's value lives in a scenario mapping
SHAPE = "shape"          # model.<key>: overrides of the model's shape
SCENARIO = "scenario"    # <key>: top-level scenario keys
PARALLEL = "parallel"    # parallel.<key>: the layout
FINETUNE = "finetune"    # finetune.<key>: the fine-tuning method and its adapters
NESTED = (PARALLEL, FINETUNE)   # groups that are a mapping of their own in a scenario
COMMAND = "command"      # options of a command only (config file, CI gates, output)


class Knob(NamedTuple):
    """One input.

    kind: "int" | "float" | "str" | "list" | "choice" (a word of the vocabulary `choices`) |
    "length" (a whole count of tokens: 8192, 8k, 4M; units.parse_length) | "switch" (`--x/--no-x`, default
    None). Value options default to None ("not given").
    flags: the option names, long names first; a switch has one "--x/--no-x" entry.
    key: the YAML key within its group (default: the name).
    searched: the plan search varies it (it is a Layout knob); job: `plan` takes it for every plan.
    """

    name: str
    flags: tuple[str, ...]
    kind: str
    help: str
    show_default: str | None = None
    choices: str | tuple[str, ...] = ""   # the name of a vocabulary (trainest.choices.VOCABULARIES), or its words
    group: str = SCENARIO
    key: str = ""
    searched: bool = False
    job: bool = False
    value: Any = None           # the default a command fills in itself (None: "not given")
    fallback: Any = None        # a simple knob's default in a scenario (None: not a simple knob; see SIMPLE)
    limits: tuple[float, float] | None = None   # a simple int/float knob's [minimum, maximum]
    help_panel: str = ""        # the `--help` panel (default: PANELS, else Output)

    @property
    def default(self) -> Any:
        if self.value is not None:
            return self.value
        return False if self.kind == "flag" else None

    @property
    def yaml_key(self) -> str:
        return self.key or self.name

    @property
    def choice_values(self) -> tuple[str, ...]:
        if isinstance(self.choices, tuple):
            return self.choices
        return VOCABULARIES[self.choices] if self.choices else ()

    @property
    def simple(self) -> bool:
        """A simple knob: one value of the job, read, checked, defaulted, echoed and handed to the Job from
        this table alone (its `fallback` given)."""
        return self.fallback is not None

    @property
    def panel(self) -> str:
        """The group of options `--help` shows it in (PANELS; Output where not listed)."""
        return self.help_panel or PANEL_OF.get(self.name, OUTPUT_PANEL)

    @property
    def path(self) -> str:
        """Where the value sits in a scenario mapping: `parallel.tp`, `model.layers`, `seq_len`."""
        prefix = {SHAPE: "model.", PARALLEL: "parallel.", FINETUNE: "finetune."}.get(self.group, "")
        return prefix + self.yaml_key


# the groups of `--help` and docs/cli.md, in the order they are shown: each knob by name (Knob.panel)
OUTPUT_PANEL = "Output"
PANELS: dict[str, tuple[str, ...]] = {
    "Model": ("model", "config", "layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "mlp", "experts",
              "top_k", "expert_ffn_hidden", "moe_imbalance", "attention_window"),
    "Hardware": ("hardware", "all_hardware", "devices", "devices_per_node", "host_cores", "host_memory_gb",
                 "host_pcie_gen", "host_pcie_lanes", "device_counts", "memory_headroom"),
    "Layout": ("tp", "pp", "dp", "cp", "vpp", "ep", "etp", "zero", "fsdp", "dp_shard", "sequence_parallel",
               "tp_overlap", "dp_overlap", "dp_collectives", "moe_overlap", "pipeline_schedule", "pipeline_split",
               "pipeline_layout", "recompute", "recompute_modules", "recompute_layers", "remat_policy", "offload",
               "offload_layers",
               "attention", "kernels", "framework", "plan", "allow", "max_tp", "max_pp", "max_cp", "max_vpp",
               "max_micro_batch"),
    "Batch": ("micro_batch", "global_batch", "global_batch_tokens", "seq_len", "packed_length"),
    "Precision": ("precision", "adam_moments", "optimizer", "master_weights", "grad_dtype", "optimizer_in_backward",
                  "loss", "fp8_params", "bf16_layers", "module_precision", "fp8_attention"),
    "Fine-tuning": ("finetune", "lora_rank", "lora_alpha", "lora_targets", "base_bits", "double_quant"),
    "Run and cost": ("tokens", "price_per_hour", "pue", "grid_gco2_per_kwh", "objective", "deadline", "budget",
                     "max_days", "max_cost", "require_fit"),
    OUTPUT_PANEL: ("json_out", "quiet", "top", "ops", "timeline", "csv", "png", "svg"),
}
PANEL_OF = {name: panel for panel, names in PANELS.items() for name in names}

K = Knob
KNOBS: tuple[Knob, ...] = (
    K("model", ("--model", "-m"), "str",
      "Model: a preset name, a model YAML, or a Hugging Face config.json (the file or its folder).", "llama3-8b",
      job=True),
    K("hardware", ("--hardware", "-H"), "str",
      "Hardware: a catalog name (trainest list hardware) or a hardware YAML (schema: specs/README.md).", "h100-sxm",
      job=True),
    K("devices", ("--devices", "--gpus", "-n"), "int", "Number of devices N.",
      "one node (at most 8), or tp·pp·cp rounded up"),
    K("devices_per_node", ("--devices-per-node",), "int", "Devices per node / host.", "hardware's", job=True),
    K("host_cores", ("--host-cores",), "int", "CPU cores of one host (node), shared by its devices; used by CPU "
      "offload (CPU Adam).", "hardware's; a PCIe card's: a typical dual-socket server of its PCIe generation",
      job=True, limits=(1, 10**6)),
    K("host_memory_gb", ("--host-memory-gb",), "float", "Host memory of one node in GB (1e9 B), shared by its "
      "devices; what CPU offload may fill.", "as --host-cores", job=True, limits=(0, 1e9)),
    K("host_pcie_gen", ("--host-pcie-gen",), "int", "PCIe generation (1-6) of the device-to-host link: sets its "
      "rate and the typical server a PCIe card's host figures come from.", "hardware's", job=True, limits=(1, 6)),
    K("host_pcie_lanes", ("--host-pcie-lanes",), "int", "PCIe lanes (1, 2, 4, 8, 16) of the device-to-host link.",
      "hardware's", job=True, limits=(1, 16)),
    K("precision", ("--precision",), "choice", "GEMM precision (master weights and optimizer state: "
      "--master-weights, --adam-moments).",
      "bf16 (without a bf16 peak: fp16, tf32 or fp32)",
      "Precision", job=True),
    K("seq_len", ("--seq-len",), "length", "Sequence length, in tokens (8192, 8k).", "model's", job=True),
    K("layers", ("--layers",), "int", "Override: layers L.", group=SHAPE, job=True),
    K("hidden", ("--hidden",), "int", "Override: hidden size h.", group=SHAPE, job=True),
    K("ffn_hidden", ("--ffn-hidden",), "int", "Override: MLP hidden size f.", group=SHAPE, job=True),
    K("heads", ("--heads",), "int", "Override: attention heads a.", group=SHAPE, job=True),
    K("kv_heads", ("--kv-heads",), "int", "Override: key/value heads g.", group=SHAPE, job=True),
    K("vocab", ("--vocab",), "int", "Override: vocabulary V.", group=SHAPE, job=True),
    K("mlp", ("--mlp",), "choice", "Override: MLP kind.", None, "Mlp", group=SHAPE, job=True),
    K("experts", ("--experts",), "int", "Override: routed experts E per MoE layer (with --top-k, makes a dense "
      "model's MLPs mixtures of experts).", group=SHAPE, job=True),
    K("top_k", ("--top-k",), "int", "Override: routed experts K each token goes to.", group=SHAPE, job=True),
    K("expert_ffn_hidden", ("--expert-ffn-hidden",), "int", "Override: MLP width f_e of one routed expert.",
      group=SHAPE, job=True),
    K("moe_imbalance", ("--moe-imbalance",), "float", "Override: tokens on the busiest expert over the mean "
      "(1 = forced balance).", group=SHAPE, job=True),
    K("attention_window", ("--attention-window",), "int", "Override: the window (sliding) or chunk (chunked) "
      "length w in tokens of the model's windowed attention layers (a model YAML's attention_window.size); a model "
      "without one gets a sliding window of w on every layer.", group=SHAPE, job=True),
    K("tp", ("--tp",), "int", "Tensor-parallel size t.", "1", group=PARALLEL, searched=True),
    K("pp", ("--pp",), "int", "Pipeline-parallel size p.", "1", group=PARALLEL, searched=True),
    K("dp", ("--dp",), "int", "Data-parallel size d.", "N/(t·p·c)", group=PARALLEL),
    K("cp", ("--cp",), "int", "Context-parallel size c.", "1", group=PARALLEL, searched=True),
    K("vpp", ("--vpp",), "int", "Virtual pipeline stages per rank v.", "1", group=PARALLEL, searched=True),
    K("ep", ("--ep",), "int", "Expert-parallel size e (MoE; divides the experts, e·etp divides t·c·d).", "1",
      group=PARALLEL, searched=True),
    K("etp", ("--etp",), "int", "Expert tensor-parallel size (MoE; Megatron-Core ep·etp·edp = tp·cp·dp).", "1",
      group=PARALLEL, searched=True),
    K("moe_overlap", ("--moe-overlap",), "choice", "What the framework overlaps of the MoE all-to-alls: none "
      "(exposed) or deepep (hidden behind another micro-batch's computation, DeepEP/DualPipe-style).", "none",
      "MoeOverlap", group=PARALLEL, job=True),
    K("pipeline_schedule", ("--pipeline-schedule",), "choice", "Pipeline schedule: 1f1b (Megatron's 1F1B, "
      "interleaved with --vpp > 1) or dualpipe (DeepSeek-V3's bidirectional schedule: smaller bubble, two stages' "
      "weights per device, its all-to-alls hidden; needs an even --pp of 2 or more and --vpp 1).", "1f1b",
      "PipelineSchedule", group=PARALLEL, job=True),
    K("zero", ("--zero",), "int", "ZeRO stage 0-3.", "3 (FSDP); 1 with --pp > 1", group=PARALLEL, searched=True),
    K("fsdp", ("--fsdp",), "flag", "Fully sharded data parallel (= --zero 3).", group=PARALLEL),
    K("sequence_parallel", ("--sequence-parallel/--no-sequence-parallel",), "switch",
      "Megatron sequence parallelism (the activations between the GEMMs sharded over the TP ranks).",
      "off; on with --tp > 1 under MaxText (its activations are sharded over the tensor axis)", group=PARALLEL,
      searched=True),
    K("tp_overlap", ("--tp-overlap/--no-tp-overlap",), "switch",
      "Pipeline TP collectives with the GEMMs (Megatron --tp-comm-overlap).", "off", group=PARALLEL, job=True),
    K("dp_overlap", ("--dp-overlap/--no-dp-overlap",), "switch", "Overlap the data-parallel gradient reduction "
      "with the backward (bucketing).", "the framework's", group=PARALLEL, job=True),
    K("dp_shard", ("--dp-shard",), "int", "Hybrid sharding: ZeRO shard group size (divides dp).", "dp",
      group=PARALLEL),
    K("pipeline_split", ("--pipeline-split",), "choice",
      "even (layers divide p·v), balanced (embedding and loss count as layers) or layout (set by "
      "--pipeline-layout).", "even", "PipelineSplit", group=PARALLEL),
    K("pipeline_layout", ("--pipeline-layout",), "str", "Megatron-Core's pipeline layout: the p·v stages "
      "separated by '|', E embedding, t decoder layer, m MTP module, L loss, x*n and (...)*n repeats, e.g. "
      "'Et*4|(t*4|)*14tmL' (DeepSeek-V3, pp 16); without --pp it sets pp.", "none (the split)", group=PARALLEL),
    K("dp_collectives", ("--dp-collectives",), "choice",
      "Data-parallel/ZeRO rings: hierarchical (every NIC of a node) or flat (one NIC per device, e.g. "
      "DeepSpeed ZeRO-3 of 2021).", "hierarchical", "DpCollectives", group=PARALLEL, job=True),
    K("micro_batch", ("--micro-batch", "-b"), "int", "Micro-batch b, in sequences.", "1", searched=True),
    K("global_batch", ("--global-batch", "-B"), "int", "Global batch B, in sequences.",
      "0.5M tokens (64 × 8192) in whole sequences, a multiple of dp × micro-batch (plan, compare: of the device "
      "count)", job=True),
    K("global_batch_tokens", ("--global-batch-tokens",), "length", "Global batch in tokens (4M = 4·2^20), instead "
      "of --global-batch; must divide by the sequence length.", job=True),
    K("recompute", ("--recompute",), "choice", "Activation recomputation: selective = Megatron's (attention core); "
      "op = torchtitan's per-op selective checkpointing (every second matmul and the element-wise ops).", "selective",
      "Recompute", searched=True),
    K("recompute_modules", ("--recompute-modules",), "str", "What selective recompute re-runs (Megatron-Core's "
      "recompute_modules), comma-separated: core_attn, layernorm, mla_up_proj (MLA), moe_act, moe (the MoE block "
      "with its all-to-alls), mlp (dense layers), shared_experts.", "core_attn", job=True),
    K("recompute_layers", ("--recompute-layers",), "int", "Full recompute of only this many layers per pipeline "
      "stage and model chunk, the others keeping every activation (Megatron-Core --recompute-method block "
      "--recompute-num-layers N, NeMo activations_checkpoint_num_layers); 0: every layer. Needs recompute full; "
      "docs/model.md §7.10.", "0 (every layer)", job=True, fallback=0, limits=(0, 100000)),
    K("remat_policy", ("--remat-policy",), "choice", "MaxText only: its activation checkpointing policy "
      "(remat_policy): full (saves only the layer input), minimal (the weight matmuls' outputs; re-runs attention "
      "and the element-wise ops), minimal_flash (minimal and the attention output: re-runs element-wise ops only), "
      "minimal_offloaded (minimal's tensors kept in host memory), qkv_proj_offloaded (Q, K, V in host memory, the "
      "rest re-run). Sets recompute (full or selective) and what it keeps; docs/model.md §7.11.",
      "auto (recompute as given)", "RematPolicy", job=True, fallback="auto"),
    K("attention", ("--attention",), "choice", "flash (best fused kernel: FA3/cuDNN on Hopper+), flash2 "
      "(FlashAttention-2) or standard (materialised scores).", "flash", "Attention", job=True),
    K("framework", ("--framework",), "choice", "Training framework: sets the kernels' host dispatch, the default "
      "element-wise kernels and data-parallel overlap, and which pipeline schedules exist.",
      "megatron-core (Apple silicon: mlx, TPU: maxtext)", "Framework", job=True),
    K("packed_length", ("--packed-length",), "int", "Packed sequences: the mean length of the documents packed into "
      "each sequence, each attending only to itself (THD/varlen attention, cu_seqlens); not given: one document per "
      "sequence.", "unpacked", job=True),
    K("adam_moments", ("--adam-moments",), "choice", "The dtype of Adam's two moments: fp32 (12 B of optimizer "
      "state per parameter with the FP32 master) or bf16 (8 B; DeepSeek-V3, Megatron-Core --exp-avg-dtype/"
      "--exp-avg-sq-dtype bf16 of its precision-aware optimizer).", "fp32", "AdamMoments", job=True),
    K("optimizer", ("--optimizer",), "choice", "The optimizer, which sets the state kept per parameter beside the "
      "FP32 master and the bytes its step moves: adamw (two moments, 8 B; 4 with --adam-moments bf16), adamw-8bit "
      "(bitsandbytes' block-wise 8-bit moments, 2 B), adafactor (factored second moment, no momentum: ~0 B) or sgd "
      "(momentum, 4 B).", "adamw", "Optimizer", job=True),
    K("master_weights", ("--master-weights",), "choice", "The optimizer's copy of the weights: fp32 (an FP32 master "
      "beside the 16-bit working weights: mixed precision, 4 B per parameter) or none (pure 16-bit training: the "
      "16-bit weights are the parameters the optimizer updates, e.g. torchtune's and litgpt's bf16-true; Adam's "
      "moments then default to bf16).", "fp32", ("fp32", "none"), job=True, fallback="fp32"),
    K("grad_dtype", ("--grad-dtype",), "choice", "The gradients' dtype: auto (FP32 with an FP32 master, FP16 for "
      "fp16 runs, the weights' 16-bit dtype without a master), fp32 (Megatron's main_grad, FSDP's reduce dtype) or "
      "bf16 (DeepSpeed's bf16 mode: BF16 gradients beside an FP32 master; half the gradient memory and the data-"
      "parallel reduction's bytes).", "auto", ("auto", "fp32", "bf16"), job=True, fallback="auto"),
    K("optimizer_in_backward", ("--optimizer-in-backward/--no-optimizer-in-backward",), "switch", "Fuse the "
      "optimizer step into the backward: each parameter is updated as soon as its gradient is computed and the "
      "gradient freed (torchtune optimizer_in_bwd, LOMO), so about one layer's gradients live at once instead of "
      "the model's; needs one micro-batch per step (no gradient accumulation).", "off", job=True, fallback=False),
    K("loss", ("--loss",), "choice", "The cross-entropy's memory for the logits: standard (the framework's own), "
      "chunked (16-bit logits, FP32 upcast per chunk: torchtune CEWithChunkedOutputLoss, litgpt; with kernels fused "
      "the chunk's upcast and loss compiled, no FP32 chunk held), compiled "
      "(torch.compile fuses the upcast and the loss: 16-bit logits and their gradient) or fused (the output "
      "projection and the loss fused, no full logits: Liger FusedLinearCrossEntropy, Cut Cross-Entropy).",
      "standard", ("standard", "chunked", "compiled", "fused"), job=True, fallback="standard"),
    K("fp8_params", ("--fp8-params/--no-fp8-params",), "switch", "Keep the working weights in FP8 (precision fp8 or "
      "fp4 only): Transformer Engine's Float8Tensor weights, Megatron-Core --fp8-param-gather, torchao's float8 "
      "all-gather: 1 B per weight instead of 2 (the FP32 master unchanged), gathered and all-gathered in FP8; a "
      "LoRA's frozen base stored in FP8 (MLPerf's Llama 2 70B LoRA). docs/model.md §7.9.", "off", job=True,
      fallback=False),
    K("bf16_layers", ("--bf16-layers",), "int", "With precision fp8 or fp4: this many of the model's layers (at its "
      "start and end) keep their GEMMs in BF16 (Megatron-Core --first-last-layers-bf16 with "
      "--num-layers-at-start-in-bf16 and --num-layers-at-end-in-bf16, summed); 0: every layer in low precision. "
      "docs/model.md §2.2.", "0", job=True, fallback=0, limits=(0, 100000)),
    K("module_precision", ("--module-precision",), "str", "With precision fp8 or fp4: modules whose GEMMs stay in a "
      "higher precision, comma-separated module=precision with Megatron-Core's module names (what a quantisation "
      "recipe's matchers name): linear_qkv, linear_proj (attention), in_proj, out_proj (a Mamba-2 mixer), "
      "latent_proj (LatentMoE's latent projections), mtp (the multi-token-prediction module); precision bf16, or "
      "fp8 (MXFP8) under fp4. E.g. linear_qkv=bf16,out_proj=fp8. none: every module at the run's precision "
      "(Megatron-Core without a quantisation recipe). docs/model.md §2.2.", "none", job=True, fallback="none"),
    K("fp8_attention", ("--fp8-attention/--no-fp8-attention",), "switch", "Run the attention core's two products "
      "(QKᵀ and PV) on the FP8 tensor cores (precision fp8 or fp4 only): Transformer Engine's FP8 dot-product "
      "attention (NVTE_FP8_DPA=1, Megatron-Core --fp8-dot-product-attention; MLPerf's Llama 2 70B LoRA), cuDNN's "
      "and FlashAttention-3's FP8 kernels. docs/model.md §2.4.", "off", job=True, fallback=False),
    K("kernels", ("--kernels",), "choice", "Element-wise kernels: fused (Megatron/Transformer Engine, torch.compile, "
      "XLA) or eager (PyTorch without torch.compile: one kernel per operator, FP32 norms).", "fused", "Kernels",
      job=True),
    K("cuda_graphs", ("--cuda-graphs",), "choice", "CUDA graphs: none (every kernel launched from the host), "
      "partial (the static-shape parts: every layer but a MoE layer's routed experts, their permutation and "
      "dispatch; Megatron-Core TE-scoped graphs attn, moe_router, moe_preprocess) or full (every layer, one graph "
      "per pass; a MoE model's expert inputs padded to a capacity). Removes host launch time, not device work "
      "(docs/model.md §2.10).", "none", ("none", "partial", "full"), job=True, fallback="none",
      help_panel="Layout"),
    K("moe_dispatcher", ("--moe-dispatcher",), "choice", "The MoE token dispatcher: alltoall (NCCL's all-to-all, "
      "Megatron-Core's alltoall dispatcher: every token copy sent, the host reads the token counts each layer), "
      "deepep (DeepEP's kernels: a token sent once per remote domain, 20 SMs, the host waits for the counts) or "
      "hybridep (NVIDIA's HybridEP: deduplicated, 32 SMs; every dispatcher's host reads the counts unless "
      "cuda_graphs full); "
      "docs/model.md §15.11.", "alltoall", ("alltoall", "deepep", "hybridep"), job=True, fallback="alltoall",
      help_panel="Layout"),
    K("fused_grouped_mlp", ("--fused-grouped-mlp/--no-fused-grouped-mlp",), "switch", "MoE models only: the routed "
      "experts' activation (and the FP8/FP4 quantisation of the second GEMM's input) fused into the grouped GEMMs, "
      "forward and backward (Transformer Engine's operation fuser, Megatron-Core --use-transformer-engine-op-fuser "
      "with grouped GEMMs): no separate pass over the experts' hidden rows. docs/model.md §15.12.", "off", job=True,
      fallback=False, help_panel="Layout"),
    K("finetune", ("--finetune",), "choice", "Fine-tuning: full (every weight trained), lora (frozen base weights "
      "and low-rank adapters, Hu et al. 2021) or qlora (LoRA on a 4-bit NF4 base, Dettmers et al. 2023).", "full",
      "Finetune", group=FINETUNE, key="method", searched=True, job=True),
    K("lora_rank", ("--lora-rank",), "int", "LoRA rank r (1 to the hidden size).", "16", group=FINETUNE, key="rank",
      job=True),
    K("lora_alpha", ("--lora-alpha",), "float", "LoRA scale α (the adapter output is multiplied by α/r; it does not "
      "change the cost).", "rank", group=FINETUNE, key="alpha", job=True),
    K("lora_targets", ("--lora-targets",), "choice", "Linear layers that get adapters: attention (q, k, v, o), mlp "
      "(gate, up, down) or all (PEFT's all-linear). One adapter per projection (PEFT, mlx-lm), or one per fused "
      "QKV and up/gate matrix under megatron-core, nemo and megatron-deepspeed (list frameworks: lora).", "all",
      "LoraTargets", group=FINETUNE, key="targets", job=True),
    K("base_bits", ("--base-bits",), "int", "Bits per frozen base weight: 16 (unquantised: stored at the training "
      "precision, 2 B per weight, 4 B at fp32/tf32), 8 (LLM.int8, LoRA only) or 4 (NF4, QLoRA only).", "16; qlora: 4",
      group=FINETUNE, job=True),
    K("double_quant", ("--double-quant/--no-double-quant",), "switch", "QLoRA only: the NF4 base's per-64-weight "
      "absmax quantised again to 8 bit per 256 blocks (Dettmers et al. 2023 §3: 0.127 bits per weight; bitsandbytes "
      "compress_statistics, litgpt --quantize bnb.nf4-dq, Hugging Face bnb_4bit_use_double_quant), or kept in FP32 "
      "(0.5 bits per weight: litgpt bnb.nf4, the Hugging Face default). docs/model.md §13.2.", "on", job=True,
      fallback=True),
    K("offload", ("--offload",), "choice", "Offload to host memory: optimizer (ZeRO-Offload: FP32 master and Adam "
      "state, CPU Adam), optimizer+weights (ZeRO-Infinity, FSDP CPU offload) or activations (checkpoints to the "
      "host and back).", "none", "Offload", searched=True, job=True),
    K("offload_layers", ("--offload-layers",), "int", "Activation offload of only this many layers per pipeline "
      "stage, the others keeping their activations on the device (Megatron-Core --cpu-offloading-num-layers, "
      "Transformer Engine's CPU offload context); 0: every layer. Needs offload activations; docs/model.md §14.3.",
      "0 (every layer)", job=True, fallback=0, limits=(0, 100000)),
    K("tokens", ("--tokens",), "str", "Training tokens, e.g. 300B or 1.5T.",
      "20 per parameter (a fine-tune, --finetune given: 100M)", job=True),
    K("price_per_hour", ("--price-per-hour",), "float", "USD per device-hour.", "catalog price", job=True),
    K("pue", ("--pue",), "float", "Data-centre power usage effectiveness.", "1.2", job=True),
    K("grid_gco2_per_kwh", ("--grid-gco2-per-kwh",), "float", "Carbon intensity of the electricity, in gCO2 per kWh "
      "(training.co2_kg).", "480: world average 2023 (Ember)", job=True),
    K("memory_headroom", ("--memory-headroom",), "str", "Device memory kept free for the fit decision: a share "
      "of capacity (5%) or a size (2GiB, 0).", "5%", job=True),
)

COMMAND_KNOBS: tuple[Knob, ...] = (
    K("config", ("--config", "-c"), "str", "Scenario YAML; options given here override it.", group=COMMAND),
    K("max_days", ("--max-days",), "str", "CI gate: exit 3 if the run takes longer: days (30), or a duration "
      "with its unit (30d, 12h, 2w).", group=COMMAND),
    K("max_cost", ("--max-cost",), "str", "CI gate: exit 3 if the run costs more (USD): 250000, 250k, 1.5M.",
      group=COMMAND),
    K("require_fit", ("--require-fit",), "flag", "CI gate: exit 3 if it does not fit in memory.", group=COMMAND),
    K("ops", ("--ops",), "flag", "Also list every operation of the step on the roofline (FLOPs, bytes, intensity, "
      "the device's ridge point, bound, time, share); with --json, an `ops` list.", group=COMMAND),
    K("timeline", ("--timeline",), "str", "Also write the predicted step as a Chrome trace to this JSON file "
      "(Perfetto, chrome://tracing): one track per stream, every op of every micro-batch (docs/model.md §17).",
      group=COMMAND),
    K("json_out", ("--json",), "flag", "Print one JSON object on stdout.", group=COMMAND),
    K("quiet", ("--quiet", "-q"), "flag", "Silence warnings.", group=COMMAND),
)

ESTIMATE_OPTIONS: tuple[Knob, ...] = KNOBS + COMMAND_KNOBS
# the simple knobs (Knob.simple): every one is a top-level scenario key, a job knob of plan and compare, and a
# field of layout.Job
SIMPLE: tuple[Knob, ...] = tuple(k for k in KNOBS if k.simple)
SIMPLE_NAMES: tuple[str, ...] = tuple(k.name for k in SIMPLE)
BY_NAME: dict[str, Knob] = {k.name: k for k in ESTIMATE_OPTIONS}
# the host's figures (scenario/host.py): each the hardware's unless given, echoed with the value in effect
HOST_NAMES: tuple[str, ...] = ("host_cores", "host_memory_gb", "host_pcie_gen", "host_pcie_lanes")

# `trainest plan`: the job knobs (set for every plan), then what steers the search
_PLAN_HELP = {
    "devices": "Device count N, or a range such as 256..8192 (the counts --device-counts picks) or 256..8192:256 "
               "(every 256th); with --deadline, --budget, or neither: the fewest that fit, and the fastest plan per "
               "count.",
    "global_batch": "Global batch B, in sequences (or --global-batch-tokens).",
    "tp_overlap": "Every plan pipelines its TP collectives with the GEMMs (Megatron --tp-comm-overlap).",
    "dp_collectives": "How every plan's data-parallel/ZeRO rings use the NICs: hierarchical (every NIC of a node) "
                      "or flat (one NIC per device, e.g. DeepSpeed ZeRO-3 of 2021).",
    "moe_overlap": "What every plan's framework overlaps of the MoE all-to-alls: none (exposed) or deepep (hidden "
                   "behind another micro-batch's computation).",
    "pipeline_schedule": "Every plan's pipeline schedule: 1f1b (interleaved where vpp > 1) or dualpipe (pp even "
                         "and vpp 1 only).",
    "config": "Scenario YAML for the job (its parallel layout, micro-batch and recompute are ignored); "
              "options override it.",
}
PLAN_OPTIONS: tuple[Knob, ...] = (
    BY_NAME["model"],
    # a list so that a second --hardware is an error pointing to `compare` (a plain option keeps the last)
    BY_NAME["hardware"]._replace(kind="list", help="Hardware catalog name or YAML path (one; to compare several, "
                                                   "use trainest compare)."),
    BY_NAME["devices"]._replace(kind="str", help=_PLAN_HELP["devices"]),
    BY_NAME["global_batch"]._replace(help=_PLAN_HELP["global_batch"],
                                     show_default="0.5M tokens in whole sequences, a multiple of the (largest) "
                                                  "device count"),
    BY_NAME["global_batch_tokens"],
    *(k for k in KNOBS if k.group == SHAPE),      # the model's shape overrides, as estimate takes them
    *(BY_NAME[n] for n in ("precision", "seq_len", "devices_per_node", *HOST_NAMES, "attention", "framework",
                           "kernels", *SIMPLE_NAMES, "packed_length", "adam_moments", "optimizer", "recompute_modules",
                           "finetune", "lora_rank", "lora_alpha", "lora_targets",
                           "base_bits", "offload", "tokens", "price_per_hour", "pue", "grid_gco2_per_kwh",
                           "memory_headroom")),
    BY_NAME["config"]._replace(help=_PLAN_HELP["config"]),
    BY_NAME["tp_overlap"]._replace(help=_PLAN_HELP["tp_overlap"]),
    BY_NAME["dp_collectives"]._replace(help=_PLAN_HELP["dp_collectives"]),
    BY_NAME["dp_overlap"],
    BY_NAME["moe_overlap"]._replace(help=_PLAN_HELP["moe_overlap"]),
    BY_NAME["pipeline_schedule"]._replace(help=_PLAN_HELP["pipeline_schedule"]),
    K("top", ("--top", "-k"), "int", "How many plans to show.", group=COMMAND, value=5),
    K("objective", ("--objective",), "choice", "Rank by step time, cost or energy of the whole run.", "time",
      "Objective", group=COMMAND, value="time"),
    K("max_tp", ("--max-tp",), "int", "Largest tensor-parallel size.", "scale-up domain", group=COMMAND),
    K("max_pp", ("--max-pp",), "int", "Largest pipeline-parallel size.", "no limit", group=COMMAND),
    K("max_cp", ("--max-cp",), "int", "Largest context-parallel size.", "no limit", group=COMMAND),
    K("max_vpp", ("--max-vpp",), "int", "Most virtual stages per pipeline rank.", "no limit", group=COMMAND),
    K("max_micro_batch", ("--max-micro-batch",), "int", "Largest micro-batch, in sequences.", "no limit",
      group=COMMAND),
    K("allow", ("--allow",), "list", "Restrict a knob, e.g. zero=0,1,3 recompute=selective,full sp=on tp=4,8 pp=1,2 "
      "cp=1 vpp=1 mb=1,2, or search a job choice value by value: moe_dispatcher=alltoall,deepep,hybridep "
      "cuda_graphs=none,full moe_overlap=none,deepep fused_grouped_mlp=on,off fp8_params=on,off "
      "fp8_attention=on,off (repeatable).", group=COMMAND),
    K("deadline", ("--deadline",), "str", "Find the fewest devices (over the --devices range) that train the tokens "
      "within this time, e.g. 30d.", group=COMMAND),
    K("budget", ("--budget",), "str", "Find the best count by --objective (time: the fastest) over the --devices "
      "range among those that train the tokens for at most this many USD, e.g. 2e6.", group=COMMAND),
    K("device_counts", ("--device-counts",), "choice", "Counts tried in a --devices range without a step: "
      "powers of two, or multiples of the node size.", "pow2", "DeviceCounts", group=COMMAND, value="pow2"),
    BY_NAME["json_out"],
    BY_NAME["quiet"]._replace(help="No progress bar, no warnings."),
)

# `trainest compare`: plan's job and search options, over several hardware entries
_BY_PLAN = {k.name: k for k in PLAN_OPTIONS}
COMPARE_OPTIONS: tuple[Knob, ...] = (
    BY_NAME["model"],
    K("hardware", ("--hardware", "-H"), "list", "Hardware to compare: catalog names or YAML paths, comma-separated "
      "or repeated (e.g. h100-sxm,b200,mi300x,tpu-v5p).", group=COMMAND),
    K("all_hardware", ("--all-hardware",), "flag", "Compare every entry of the catalog.", group=COMMAND),
    _BY_PLAN["devices"]._replace(help="Device count N (every hardware at N), or a range such as 64..8192 (or "
                                      "64..8192:64, every 64th) with --deadline (fewest devices in time) or --budget "
                                      "(fastest within it)."),
    _BY_PLAN["global_batch"],
    *(k for k in KNOBS if k.group == SHAPE),
    *(BY_NAME[n] for n in ("precision", "seq_len", *HOST_NAMES, "attention", "framework", "kernels", *SIMPLE_NAMES,
                           "packed_length",
                           "adam_moments", "optimizer", "recompute_modules", "finetune", "lora_rank", "lora_alpha",
                           "lora_targets",
                           "base_bits", "offload", "tokens", "pue", "grid_gco2_per_kwh", "memory_headroom")),
    _BY_PLAN["global_batch_tokens"],
    _BY_PLAN["config"]._replace(help="Scenario YAML for the job (its hardware, layout, micro-batch and recompute are "
                                     "ignored); options override it."),
    _BY_PLAN["tp_overlap"], _BY_PLAN["dp_collectives"], _BY_PLAN["dp_overlap"], _BY_PLAN["moe_overlap"],
    _BY_PLAN["pipeline_schedule"],
    _BY_PLAN["objective"]._replace(help="Rank the hardware by the whole run's time, cost or energy."),
    _BY_PLAN["deadline"]._replace(help="With a --devices range: each hardware at the fewest devices that train the "
                                       "tokens within this time, e.g. 30d."),
    _BY_PLAN["budget"]._replace(help="With a --devices range: each hardware at its fastest plan whose run costs at "
                                     "most this many USD, e.g. 2e6."),
    _BY_PLAN["device_counts"], _BY_PLAN["allow"],
    BY_NAME["price_per_hour"]._replace(kind="str", help="USD per device-hour: one price for every entry (2.5), or "
                                       "per hardware, name=price comma-separated (h100-sxm=2.5,tpu-v5p=4.2); an "
                                       "entry not named keeps its catalog price."),
    BY_NAME["json_out"],
    BY_NAME["quiet"]._replace(help="No progress bar, no warnings, no notes."),
)

# `trainest sweep`: estimate's inputs, of which the sweepable take a range or a list (trainest.sweep.SWEEPABLE)
SWEEP_RANGES = ("devices", "global_batch", "seq_len", "micro_batch", "tp", "pp", "cp", "vpp", "zero", "precision",
                "recompute", "attention", "kernels", "tokens", "moe_dispatcher", "cuda_graphs", "moe_overlap")
# sweepable knobs whose a..b ranges step by one (a stage number, which may be 0: 0..3 is every stage), not doubling
SWEEP_BY_ONE = ("zero",)


def sweep_forms(k: Knob) -> tuple[str, ...]:
    """The forms `trainest sweep` reads for knob `k` (trainest.sweep.parse_values): a choice only a list of its
    words; a number a range a..b (doubling, or by one for SWEEP_BY_ONE), a..b:step, or a list a,b,c."""
    if k.kind == "choice":
        return ("a,b,c",)
    return ("a..b", "a..b:step", "a,b,c")


def _sweep_help(k: Knob) -> str:
    """`k`'s help in `trainest sweep`: its own, then the forms it takes there (sweep_forms)."""
    if k.kind == "choice":
        words = k.choice_values
        return f"{k.help} Sweep: a list of {', '.join(words)} (e.g. {','.join(words[:2])})."
    steps = "by one" if k.name in SWEEP_BY_ONE else "doubling"
    return f"{k.help} Sweep: a range a..b ({steps}), a..b:step or a list a,b,c."


SWEEP_OPTIONS: tuple[Knob, ...] = (
    *(k._replace(kind="str", help=_sweep_help(k)) if k.name in SWEEP_RANGES else k for k in KNOBS),
    BY_NAME["config"],
    K("plan", ("--plan",), "flag", "Each point is the best plan at that value (the plan search; a swept layout knob "
      "is fixed, the others searched), not the estimate of the given layout.", group=COMMAND),
    K("csv", ("--csv",), "flag", "Print the points as CSV on stdout (instead of the table and plot).", group=COMMAND),
    K("png", ("--png",), "str", "Also write the plot as a PNG file (needs the plot extra: pip install "
      "\"trainest[plot]\").", group=COMMAND),
    K("svg", ("--svg",), "str", "Also write the plot as an SVG file (needs the plot extra).", group=COMMAND),
    BY_NAME["json_out"],
    BY_NAME["quiet"]._replace(help="No progress bar, no warnings."),
)

# the commands whose option takes a range of values where the others take one (plan and compare a --devices
# range a..b or a..b:s, sweep those and lists a,b,c of every knob of SWEEP_RANGES), for the error that points
# there (`one_value_error`)
RANGE_COMMANDS: dict[str, tuple[str, ...]] = {**{n: ("sweep",) for n in SWEEP_RANGES},
                                               "devices": ("plan", "compare", "sweep")}
LIST_COMMANDS: dict[str, tuple[str, ...]] = {n: ("sweep",) for n in SWEEP_RANGES}
_ONE_VALUE = {"devices": "one device count"}
# patterns as text: compiled on first use through re's cache, not at import (start-up time, issue 36)
_RANGE = r"[0-9]+\.\.[0-9]+(:[0-9]+)?"
_LIST = r"[0-9]+(,[0-9]+)+"


def one_value_error(k: Knob, text: str, command: str = "") -> str | None:
    """Why `text`, given to the one-value option `k` of `command`, is refused when it is a range or list
    (8..64, 8..64:8, 8,16) that another command takes: the commands that do and the line to paste there
    (sweep's, which reads every such form). None when `text` is no such range or list, or no command takes it."""
    word = text.strip()
    commands = (RANGE_COMMANDS if re.fullmatch(_RANGE, word) else LIST_COMMANDS if re.fullmatch(_LIST, word) else {})
    who = commands.get(k.name, ())
    if not who:
        return None
    listed = ", ".join(who[:-1]) + (" or " if len(who) > 1 else "") + who[-1]
    return (f"{f'trainest {command}' if command else 'this command'} takes {_ONE_VALUE.get(k.name, 'one value')} "
            f"for {k.flags[0]}, not '{word}'; a {'range' if '..' in word else 'list'} belongs to trainest {listed}, "
            f"e.g. trainest sweep {k.flags[0]} {word}")

SHAPE_KEYS = tuple(k.yaml_key for k in KNOBS if k.group == SHAPE)
PARALLEL_KEYS = tuple(k.yaml_key for k in KNOBS if k.group == PARALLEL)
# the plan search: the knobs it varies (in the order of the runner-up table) and what `plan` keeps
SEARCHED = tuple(k.name for k in KNOBS if k.searched)
JOB_KEYS = tuple(k.yaml_key for k in KNOBS if k.job and k.group == SCENARIO)
JOB_PARALLEL_KEYS = tuple(k.yaml_key for k in KNOBS if k.job and k.group == PARALLEL)
FINETUNE_KEYS = tuple(k.yaml_key for k in KNOBS if k.group == FINETUNE)
# `--allow NAME=...`: every searched knob by its name, plus short aliases
# job knobs a plan varies only when `--allow` asks (each value its own search, trainest/search/rank.py:
# search_job_choices): choices a user makes for the whole job, not columns of the search's grid
JOB_CHOICES = ("moe_dispatcher", "cuda_graphs", "moe_overlap", "fused_grouped_mlp", "fp8_params", "fp8_attention")
ALLOW_NAMES = {**{k: k for k in SEARCHED}, **{k: k for k in JOB_CHOICES}, "mb": "micro_batch",
               "sp": "sequence_parallel"}
# the searched knobs a plan varies only when `--allow` asks (else every plan keeps the job's value)
ASKED_ONLY = ("finetune", "offload")


def _plain(value: Any) -> Any:
    """A choice (typer passes Enum members) as its string value; anything else unchanged."""
    if isinstance(value, list | tuple):          # a list option (recompute_modules): its comma form
        return ",".join(str(v) for v in value)
    return value.value if hasattr(value, "value") else value


def mapping_from_values(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(scenario mapping, model shape overrides) of option values keyed by knob name (None: not given)."""
    mapping: dict[str, Any] = {}
    shape: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {group: {} for group in NESTED}
    for k in KNOBS:
        value = values.get(k.name)
        if value is None or value is False and k.kind == "flag":
            continue
        target = shape if k.group == SHAPE else nested.get(k.group, mapping)
        target[k.yaml_key] = True if k.kind == "flag" else _plain(value)
    for group, values_of_group in nested.items():
        if values_of_group:
            mapping[group] = values_of_group
    return mapping, shape


def value_in(mapping: dict[str, Any], k: Knob) -> Any:
    """The value knob `k` has in a scenario mapping (None: not there)."""
    if k.group in NESTED:
        return (mapping.get(k.group) or {}).get(k.yaml_key)
    return mapping.get(k.yaml_key)


# the knobs that select a plan's layout, in the order `estimate_args` writes them, the fine-tuning method
# and its adapters among them (a plan may change the method, and a LoRA's base with it); those at the
# command line's own default (`_default_of`) are left out
LAYOUT_ARGS = ("devices", "tp", "pp", "cp", "vpp", "ep", "etp", "zero", "sequence_parallel", "micro_batch",
               "global_batch", "recompute", "recompute_modules", "tp_overlap", "pipeline_split", "dp_collectives",
               "dp_overlap", "moe_overlap", "pipeline_schedule", "finetune", "lora_rank", "lora_alpha", "lora_targets",
               "base_bits", "offload", "moe_dispatcher", "cuda_graphs", "fused_grouped_mlp", "fp8_params",
               "fp8_attention")
LAYOUT_DEFAULTS = {"ep": 1, "etp": 1, "tp_overlap": False, "pipeline_split": "even", "dp_collectives": "hierarchical",
                   "moe_overlap": "none", "pipeline_schedule": "1f1b", "finetune": "full", "offload": "none",
                   "recompute_modules": ["core_attn"], "lora_rank": 16, "lora_targets": "all",
                   "moe_dispatcher": "alltoall", "cuda_graphs": "none", "fused_grouped_mlp": False, "fp8_params": False,
                   "fp8_attention": False}


def _default_of(name: str, mapping: dict[str, Any]) -> Any:
    """The value `trainest estimate` takes for layout knob `name` when it is not given, for this scenario
    mapping: LAYOUT_DEFAULTS, a LoRA's α (= its rank) and its base (QLoRA 4 bits, LoRA 16); None: no default."""
    ft = mapping.get("finetune") or {}
    if name == "lora_alpha":
        return ft.get("rank")
    if name == "base_bits":
        return 4 if ft.get("method") == "qlora" else 16
    return LAYOUT_DEFAULTS.get(name)


def option_args(k: Knob, value: Any) -> list[str]:
    """The command-line words that give knob `k` the value `value`."""
    if k.kind == "switch":
        on, off = k.flags[0].split("/")
        return [on if value else off]
    if k.kind == "flag":
        return [k.flags[0]] if value else []
    return [k.flags[0], str(_plain(value))]


def estimate_args(mapping: dict[str, Any]) -> list[str]:
    """The `trainest estimate` options that select the device count and layout of a resolved
    scenario mapping (the `inputs` echo)."""
    out: list[str] = []
    for name in LAYOUT_ARGS:
        k = BY_NAME[name]
        value = value_in(mapping, k)
        if value is None or value == _default_of(name, mapping):
            continue
        if name == "dp_overlap" and value == FRAMEWORKS[mapping.get("framework") or DEFAULT_FRAMEWORK].dp_overlap:
            continue                  # the framework's own default
        if name == "pipeline_schedule" and value == "dualpipe" and value_in(mapping, BY_NAME["pp"]) == 1:
            continue                  # no pipeline to schedule (an estimate refuses dualpipe at pp 1)
        out += option_args(k, value)
    return out


def given_args(values: dict[str, Any], names: tuple[str, ...]) -> list[str]:
    """The command-line words of the options in `names` that were given (not None)."""
    out: list[str] = []
    for name in names:
        if values.get(name) is not None:
            out += option_args(BY_NAME[name], values[name])
    return out


MOE_MESSAGE_KEYS = {"experts": "experts", "top_k": "top_k", "expert_ffn_hidden": "expert_ffn_hidden",
                    "imbalance": "moe_imbalance"}   # moe.<key> -> the knob that sets it

# the place of the command line's values (`where` of the scenario mapping its options make), and of the model its
# shape overrides make (models.with_shape); a message names a value there by its flag (errors.at, errors.name_of)
CLI = "options"
CLI_MODEL = "model options"
# a shape override's key in a model mapping (models.py): `model.<name>`, but the MoE keys sit in its moe: block
# and the window's size in attention_window:
MODEL_KEY_OF = {**{k.name: k.yaml_key for k in KNOBS if k.group == SHAPE},
                **{name: f"moe.{key}" for key, name in MOE_MESSAGE_KEYS.items()},
                "attention_window": "attention_window.size"}
FLAG_AT: dict[str, str] = {
    **{f"{CLI}.{k.path}": k.flags[0].split("/")[0] for k in KNOBS},
    **{f"{CLI_MODEL}.{MODEL_KEY_OF[k.name]}": k.flags[0] for k in KNOBS if k.group == SHAPE},
    f"{CLI}.finetune": BY_NAME["finetune"].flags[0],        # the block as a whole: its method's option
}
