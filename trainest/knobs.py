"""The one table of inputs. Every knob a user can set is one `Knob` here; from this table derive

- the command-line options of `estimate` (typer and the typer-free fast path) and the job options
  of `plan` (`cli/options.py`),
- the scenario and runs YAML keys (`scenario.SCENARIO_KEYS`, `PARALLEL_KEYS`, `SHAPE_KEYS`) and the
  mapping an option set becomes (`mapping_from_values`),
- the plan search's knobs and `--allow` names (`SEARCHED`, `ALLOW_NAMES`), the job a plan keeps
  (`JOB_KEYS`), and the `trainest estimate` options that reproduce a plan (`estimate_args`),
- the `inputs` echo of every JSON document (`scenario.scenario_mapping` checks its keys against this
  table in tests) and the inputs reference `docs/inputs.md` (`python tools/knobs_doc.py`).

Adding a knob: one entry here, its field on the Scenario (or the Model), and its physics.
Standard library only: this module is on the start-up path of every `trainest estimate`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from trainest.choices import VOCABULARIES

# groups: where a knob's value lives in a scenario mapping
SHAPE = "shape"          # model.<key>: overrides of the model's shape
SCENARIO = "scenario"    # <key>: top-level scenario keys
PARALLEL = "parallel"    # parallel.<key>: the layout
COMMAND = "command"      # options of a command only (config file, CI gates, output)


class Knob(NamedTuple):
    """One input.

    kind: "int" | "float" | "str" | "list" | "choice" (a word of the vocabulary `choices`) |
    "switch" (`--x/--no-x`, default None). Value options default to None ("not given").
    flags: the option names, long names first; a switch has one "--x/--no-x" entry.
    key: the YAML key within its group (default: the name).
    searched: the plan search varies it (it is a Layout knob); job: `plan` takes it for every plan.
    """

    name: str
    flags: tuple[str, ...]
    kind: str
    help: str
    show_default: str | None = None
    choices: str = ""           # the name of a vocabulary (trainest.choices.VOCABULARIES)
    group: str = SCENARIO
    key: str = ""
    searched: bool = False
    job: bool = False
    value: Any = None           # the default a command fills in itself (None: "not given")

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
        return VOCABULARIES[self.choices] if self.choices else ()

    @property
    def path(self) -> str:
        """Where the value sits in a scenario mapping: `parallel.tp`, `model.layers`, `seq_len`."""
        prefix = {SHAPE: "model.", PARALLEL: "parallel."}.get(self.group, "")
        return prefix + self.yaml_key


K = Knob
KNOBS: tuple[Knob, ...] = (
    K("model", ("--model", "-m"), "str", "Model preset name or YAML path.", "llama3-8b", job=True),
    K("hardware", ("--hardware", "-H"), "str", "Hardware catalog name or YAML path.", "h100-sxm", job=True),
    K("devices", ("--devices", "--gpus", "-n"), "int", "Number of devices N.", "8"),
    K("devices_per_node", ("--devices-per-node",), "int", "Devices per node / host.", "hardware's", job=True),
    K("precision", ("--precision",), "choice", "GEMM precision (FP32 master weights and Adam state).", "bf16",
      "Precision", job=True),
    K("seq_len", ("--seq-len",), "int", "Sequence length, in tokens.", "model's", job=True),
    K("layers", ("--layers",), "int", "Override: layers L.", group=SHAPE),
    K("hidden", ("--hidden",), "int", "Override: hidden size h.", group=SHAPE),
    K("ffn_hidden", ("--ffn-hidden",), "int", "Override: MLP hidden size f.", group=SHAPE),
    K("heads", ("--heads",), "int", "Override: attention heads a.", group=SHAPE),
    K("kv_heads", ("--kv-heads",), "int", "Override: key/value heads g.", group=SHAPE),
    K("vocab", ("--vocab",), "int", "Override: vocabulary V.", group=SHAPE),
    K("mlp", ("--mlp",), "choice", "Override: MLP kind.", None, "Mlp", group=SHAPE),
    K("experts", ("--experts",), "int", "Override: routed experts E per MoE layer (with --top-k, makes a dense "
      "model's MLPs mixtures of experts).", group=SHAPE),
    K("top_k", ("--top-k",), "int", "Override: routed experts K each token goes to.", group=SHAPE),
    K("expert_ffn_hidden", ("--expert-ffn-hidden",), "int", "Override: MLP width f_e of one routed expert.",
      group=SHAPE),
    K("moe_imbalance", ("--moe-imbalance",), "float", "Override: tokens on the busiest expert over the mean "
      "(1 = forced balance).", group=SHAPE),
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
    K("zero", ("--zero",), "int", "ZeRO stage 0-3.", "0", group=PARALLEL, searched=True),
    K("fsdp", ("--fsdp",), "flag", "Fully sharded data parallel (= --zero 3).", group=PARALLEL),
    K("sequence_parallel", ("--sequence-parallel/--no-sequence-parallel",), "switch",
      "Megatron sequence parallelism.", "off", group=PARALLEL, searched=True),
    K("tp_overlap", ("--tp-overlap/--no-tp-overlap",), "switch",
      "Pipeline TP collectives with the GEMMs (Megatron --tp-comm-overlap).", "off", group=PARALLEL, job=True),
    K("dp_shard", ("--dp-shard",), "int", "Hybrid sharding: ZeRO shard group size (divides dp).", "dp",
      group=PARALLEL),
    K("pipeline_split", ("--pipeline-split",), "choice",
      "even (layers divide p·v) or balanced (embedding and loss count as layers).", "even", "PipelineSplit",
      group=PARALLEL),
    K("dp_collectives", ("--dp-collectives",), "choice",
      "Data-parallel/ZeRO rings: hierarchical (every NIC of a node) or flat (one NIC per device, e.g. "
      "DeepSpeed ZeRO-3 of 2021).", "hierarchical", "DpCollectives", group=PARALLEL, job=True),
    K("micro_batch", ("--micro-batch", "-b"), "int", "Micro-batch b, in sequences.", "1", searched=True),
    K("global_batch", ("--global-batch", "-B"), "int", "Global batch B, in sequences.", "dp × micro-batch",
      job=True),
    K("recompute", ("--recompute",), "choice", "Activation recomputation: selective = Megatron's (attention core); "
      "op = torchtitan's per-op selective checkpointing (every second matmul and the element-wise ops).", "none",
      "Recompute", searched=True),
    K("attention", ("--attention",), "choice", "flash (best fused kernel: FA3/cuDNN on Hopper+), flash2 "
      "(FlashAttention-2) or standard (materialised scores).", "flash", "Attention", job=True),
    K("kernels", ("--kernels",), "choice", "Element-wise kernels: fused (Megatron/Transformer Engine, torch.compile, "
      "XLA) or eager (PyTorch without torch.compile: one kernel per operator, FP32 norms).", "fused", "Kernels",
      job=True),
    K("tokens", ("--tokens",), "str", "Training tokens, e.g. 300B or 1.5T.", "20 per parameter", job=True),
    K("price_per_hour", ("--price-per-hour",), "float", "USD per device-hour.", "catalog price", job=True),
    K("pue", ("--pue",), "float", "Data-centre power usage effectiveness.", "1.2", job=True),
)

COMMAND_KNOBS: tuple[Knob, ...] = (
    K("config", ("--config", "-c"), "str", "Scenario YAML; options given here override it.", group=COMMAND),
    K("max_days", ("--max-days",), "float", "CI gate: exit 3 if the run takes longer.", group=COMMAND),
    K("max_cost", ("--max-cost",), "float", "CI gate: exit 3 if the run costs more (USD).", group=COMMAND),
    K("require_fit", ("--require-fit",), "flag", "CI gate: exit 3 if it does not fit in memory.", group=COMMAND),
    K("json_out", ("--json",), "flag", "Print one JSON object on stdout.", group=COMMAND),
    K("quiet", ("--quiet", "-q"), "flag", "Silence warnings.", group=COMMAND),
)

ESTIMATE_OPTIONS: tuple[Knob, ...] = KNOBS + COMMAND_KNOBS
BY_NAME: dict[str, Knob] = {k.name: k for k in ESTIMATE_OPTIONS}

# `trainest plan`: the job knobs (set for every plan), then what steers the search
_PLAN_HELP = {
    "devices": "Device count N, or a range such as 256..8192 with --deadline/--budget.",
    "global_batch": "Global batch B, in sequences (required).",
    "tp_overlap": "Every plan pipelines its TP collectives with the GEMMs (Megatron --tp-comm-overlap).",
    "dp_collectives": "How every plan's data-parallel/ZeRO rings use the NICs: hierarchical (every NIC of a node) "
                      "or flat (one NIC per device, e.g. DeepSpeed ZeRO-3 of 2021).",
    "moe_overlap": "What every plan's framework overlaps of the MoE all-to-alls: none (exposed) or deepep (hidden "
                   "behind another micro-batch's computation).",
    "config": "Scenario YAML for the job (its parallel layout, micro-batch and recompute are ignored); "
              "options override it.",
}
PLAN_OPTIONS: tuple[Knob, ...] = (
    BY_NAME["model"], BY_NAME["hardware"],
    BY_NAME["devices"]._replace(kind="str", help=_PLAN_HELP["devices"]),
    BY_NAME["global_batch"]._replace(help=_PLAN_HELP["global_batch"], show_default=None),
    *(BY_NAME[n] for n in ("precision", "seq_len", "devices_per_node", "attention", "kernels", "tokens",
                           "price_per_hour", "pue")),
    BY_NAME["config"]._replace(help=_PLAN_HELP["config"]),
    BY_NAME["tp_overlap"]._replace(help=_PLAN_HELP["tp_overlap"]),
    BY_NAME["dp_collectives"]._replace(help=_PLAN_HELP["dp_collectives"]),
    BY_NAME["moe_overlap"]._replace(help=_PLAN_HELP["moe_overlap"]),
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
      "cp=1 vpp=1 mb=1,2 (repeatable).", group=COMMAND),
    K("deadline", ("--deadline",), "str", "Find the fewest devices (over the --devices range) that train the tokens "
      "within this time, e.g. 30d.", group=COMMAND),
    K("budget", ("--budget",), "str", "Find the fewest devices (over the --devices range) that train the tokens "
      "for at most this many USD, e.g. 2e6.", group=COMMAND),
    K("device_counts", ("--device-counts",), "choice", "Counts tried in a --devices range: powers of two, or "
      "multiples of the node size.", "pow2", "DeviceCounts", group=COMMAND, value="pow2"),
    BY_NAME["json_out"],
    BY_NAME["quiet"]._replace(help="No progress bar."),
)

SHAPE_KEYS = tuple(k.yaml_key for k in KNOBS if k.group == SHAPE)
PARALLEL_KEYS = tuple(k.yaml_key for k in KNOBS if k.group == PARALLEL)
# the plan search: the knobs it varies (in the order of the runner-up table) and what `plan` keeps
SEARCHED = tuple(k.name for k in KNOBS if k.searched)
JOB_KEYS = tuple(k.yaml_key for k in KNOBS if k.job and k.group == SCENARIO)
JOB_PARALLEL_KEYS = tuple(k.yaml_key for k in KNOBS if k.job and k.group == PARALLEL)
# `--allow NAME=...`: every searched knob by its name, plus short aliases
ALLOW_NAMES = {**{k: k for k in SEARCHED}, "mb": "micro_batch", "sp": "sequence_parallel"}


def _plain(value: Any) -> Any:
    """A choice (typer passes Enum members) as its string value; anything else unchanged."""
    return value.value if hasattr(value, "value") else value


def mapping_from_values(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(scenario mapping, model shape overrides) of option values keyed by knob name (None: not given)."""
    mapping: dict[str, Any] = {}
    shape: dict[str, Any] = {}
    parallel: dict[str, Any] = {}
    for k in KNOBS:
        value = values.get(k.name)
        if value is None or value is False and k.kind == "flag":
            continue
        target = {SHAPE: shape, PARALLEL: parallel}.get(k.group, mapping)
        target[k.yaml_key] = True if k.kind == "flag" else _plain(value)
    if parallel:
        mapping["parallel"] = parallel
    return mapping, shape


# the knobs that select a plan's layout, in the order `estimate_args` writes them; those in
# LAYOUT_DEFAULTS are left out at that value (the command line's own default)
LAYOUT_ARGS = ("devices", "tp", "pp", "cp", "vpp", "ep", "etp", "zero", "sequence_parallel", "micro_batch",
               "global_batch", "recompute", "tp_overlap", "pipeline_split", "dp_collectives", "moe_overlap")
LAYOUT_DEFAULTS = {"ep": 1, "etp": 1, "tp_overlap": False, "pipeline_split": "even", "dp_collectives": "hierarchical",
                   "moe_overlap": "none"}


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
    parallel = mapping.get("parallel") or {}
    for name in LAYOUT_ARGS:
        k = BY_NAME[name]
        value = (parallel if k.group == PARALLEL else mapping).get(k.yaml_key)
        if value is None or (name in LAYOUT_DEFAULTS and value == LAYOUT_DEFAULTS[name]):
            continue
        out += option_args(k, value)
    return out


def given_args(values: dict[str, Any], names: tuple[str, ...]) -> list[str]:
    """The command-line words of the options in `names` that were given (not None)."""
    out: list[str] = []
    for name in names:
        if values.get(name) is not None:
            out += option_args(BY_NAME[name], values[name])
    return out
