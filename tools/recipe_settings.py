"""The settings each Megatron-Bridge performance recipe resolved to, as trainest inputs (issue 33).

Reads <reference>/megatron-bridge-recipes.yaml (one record per row of the Megatron-Bridge performance summaries,
releases 25.09-26.08, with the settings that release's recipe resolved to) and gives, for one imported
Megatron-Bridge run, the scenario keys trainest has for those settings plus a note naming each one and the
recipe settings that change time or memory but that trainest does not model. Used by tools/import_runs.py.

A run is matched to its recipe record by the summary row it transcribes: release, task, system, GPU count,
global batch and published tokens/s per GPU, then the precision where two records share a row. Nothing is keyed
on a release, a model or a run: each setting maps to its input the same way for every record.

Dependencies: Python >= 3.11 standard library + PyYAML.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import yaml

RUN_ID = re.compile(r"mbridge-(?P<release>[\d.]+)-(?P<task>Pre-Training|SFT|LoRA)-.*-DGX-(?P<system>[A-Z0-9]+)-"
                    r"(?P<precision>[A-Za-z0-9-]+)-(?P<gpus>\d+)g-gbs(?P<gbs>\d+)$")
TASKS = {"Pre-Training": "pretrain", "SFT": "sft", "LoRA": "lora"}
# the summary's precision column against the record's (25.11: FP8-CS/FP8-MX; 25.09 has none)
PRECISION_ALIASES = {"FP8": ("FP8", "FP8-CS"), "MXFP8": ("MXFP8", "FP8-MX"), "FP8-CS": ("FP8-CS", "FP8"),
                     "FP8-MX": ("FP8-MX", "MXFP8"), "NVFP4": ("NVFP4",), "BF16": ("BF16",)}
# Megatron-Core's recompute modules that trainest models (choices.RECOMPUTE_MODULES)
KNOWN_MODULES = ("core_attn", "layernorm", "mla_up_proj", "moe_act", "moe", "mlp", "shared_experts")


def _value(rec: dict, section: str, key: str):
    entry = (rec.get("settings") or {}).get(section, {}).get(key)
    return entry.get("value") if isinstance(entry, dict) else entry


class Recipes:
    """The recipe records, indexed by the summary row they belong to."""

    def __init__(self, path: Path):
        self.path = path
        # libyaml's loader where installed (the same data; the pure-Python one took ~40 s of CPU on this file)
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        self.records = yaml.load(path.read_text(), Loader=loader)["records"] if path.exists() else []  # noqa: S506
        self.index: dict[tuple, list[dict]] = defaultdict(list)
        for r in self.records:
            row = r["summary_row"]
            self.index[(r["release"], r["task"], r["system"], r["num_gpus"], row["gbs"],
                        row.get("tokens_per_sec_per_gpu"))].append(r)

    def match(self, run_id: str, tokens_per_gpu) -> dict | None:
        """The recipe record of a run (by its id's release, task, system, precision, GPUs and global batch and
        its published tokens/s per GPU), or None."""
        m = RUN_ID.match(run_id)
        if m is None:
            return None
        found = self.index.get((m["release"], TASKS[m["task"]], "DGX-" + m["system"], int(m["gpus"]), int(m["gbs"]),
                                tokens_per_gpu), [])
        if len(found) > 1:
            found = [r for r in found if r["precision"] in PRECISION_ALIASES.get(m["precision"], ())]
        return found[0] if len(found) == 1 else None


def cuda_graphs_of(rec: dict) -> tuple[str, str]:
    """trainest's cuda_graphs for the recipe's graph settings, and what it read: full_iteration (or a scope
    holding the MoE block or the whole layer) is `full`; TE-scoped graphs of other parts `partial`; none `none`.
    A scope without an implementation is not active (the recipes' _meta). A scope the dump gives as null after
    the runtime setup is read from `before_runtime_setup` (the list the setup converted)."""
    impl = _value(rec, "cuda_graph", "cuda_graph_impl")
    scope = _value(rec, "cuda_graph", "cuda_graph_scope")
    if scope is None:        # the runtime setup's scope did not serialise (null): the scope it was set up from
        scope = ((rec.get("settings") or {}).get("cuda_graph", {}).get("cuda_graph_scope") or {}).get(
            "before_runtime_setup")
    legacy = _value(rec, "cuda_graph", "enable_cuda_graph")
    scopes = [scope] if isinstance(scope, str) else list(scope or [])
    said = f"cuda_graph_impl {impl}, scope {scopes or 'none'}" + (", enable_cuda_graph true" if legacy else "")
    if impl == "full_iteration" or "full_iteration" in scopes:
        return "full", said
    if impl in (None, "none") and not legacy:
        return "none", said
    if not scopes or "full" in scopes or "moe" in scopes:
        return "full", said
    return "partial", said


def dispatcher_of(rec: dict) -> tuple[str | None, str]:
    """trainest's moe_dispatcher for the recipe's token dispatcher (alltoall; flex with its DeepEP or HybridEP
    backend; moe_enable_deepep), None where trainest has none for it (allgather)."""
    kind = _value(rec, "moe", "moe_token_dispatcher_type")
    backend = _value(rec, "moe", "moe_flex_dispatcher_backend")
    said = f"moe_token_dispatcher_type {kind}" + (f" ({backend})" if kind == "flex" else "")
    if _value(rec, "moe", "moe_enable_deepep"):
        return "deepep", said + ", moe_enable_deepep true"
    if kind == "flex":
        return (backend if backend in ("deepep", "hybridep") else None), said
    return ("alltoall" if kind == "alltoall" else None), said


def recompute_of(rec: dict) -> tuple[str, list[str], list[str]]:
    """(recompute, its modules, the modules trainest does not model) from the recipe's granularity and modules;
    no granularity is no recomputation (Megatron-Core applies recompute_modules only with selective)."""
    granularity = _value(rec, "recompute", "recompute_granularity")
    modules = list(_value(rec, "recompute", "recompute_modules") or [])
    if granularity == "full":
        return "full", [], []
    if granularity != "selective":
        return "none", [], []
    known, unknown = [m for m in modules if m in KNOWN_MODULES], [m for m in modules if m not in KNOWN_MODULES]
    return ("selective" if known else "none"), known, unknown     # selective of no module re-runs nothing


# the summary row's layout columns (recipe_selection.mismatches) and the scenario key each sets
LAYOUT_COLUMNS = {"tp": "parallel.tp", "pp": "parallel.pp", "cp": "parallel.cp", "vp": "parallel.vpp",
                  "ep": "parallel.ep", "mbs": "micro_batch", "gbs": "global_batch", "seq": "seq_len",
                  "fsdp": "parallel.zero"}


def conflicting_of(rec: dict, run: dict) -> dict:
    """The run's settings that its summary row states otherwise than its release's recipe resolved them
    (recipe_selection.mismatches), each scenario key at the recipe's value where that differs from the run's, and
    the data-parallel size the recipe's layout leaves on the run's devices; {} where they agree. The run keeps
    the row's values (the row is what was measured); validate says whether the recipe's would fit (runs key
    `conflicting`). A recipe's Megatron FSDP is zero 3 (weights, gradients and optimizer state sharded), its
    distributed optimizer zero 1; an interleaving the recipe leaves unset is vpp 1."""
    par = run["parallel"]
    out: dict = {}
    for column, values in (rec["recipe_selection"].get("mismatches") or {}).items():
        key = LAYOUT_COLUMNS.get(column)
        if key is None:
            continue
        value = values["recipe"]
        if column == "vp":
            value = int(value or 1)
        elif column == "fsdp":
            value = 3 if value else 1
        stated = par.get(key.removeprefix("parallel."), 1) if key.startswith("parallel.") else run.get(key)
        if value != stated:
            out[key] = value
    if not out:
        return out
    tp, pp, cp = (out.get(f"parallel.{k}", par.get(k, 1)) for k in ("tp", "pp", "cp"))
    dp = run["devices"] // (tp * pp * cp)
    if dp != par.get("dp"):
        out["parallel.dp"] = dp
    return out


def settings_of(rec: dict, moe: bool) -> tuple[dict, dict, list[str]]:
    """(top-level scenario keys, parallel keys, notes) for one recipe record; `moe`: the model has experts. The
    top-level keys include `unmodelled`, the recipe's settings that trainest has no input for (`unmodelled`)."""
    top: dict = {}
    par: dict = {}
    used: list[str] = []
    graphs, said = cuda_graphs_of(rec)
    top["cuda_graphs"] = graphs
    used.append(f"cuda_graphs {graphs} ({said})")
    recompute, modules, unknown = recompute_of(rec)
    top["recompute"] = recompute
    if recompute == "selective":
        top["recompute_modules"] = modules
    granularity = _value(rec, "recompute", "recompute_granularity")
    used.append(f"recompute {recompute}" + (f" of {modules}" if recompute == "selective" else
                                            f" (recompute_granularity {granularity}, modules "
                                            f"{_value(rec, 'recompute', 'recompute_modules')})")
                + (f" (modules trainest does not model: {unknown})" if unknown else ""))
    precision_aware = _value(rec, "optimizer", "use_precision_aware_optimizer")
    if precision_aware and _value(rec, "optimizer", "exp_avg_dtype") == "bfloat16":
        top["adam_moments"] = "bf16"
        used.append("adam_moments bf16 (use_precision_aware_optimizer, exp_avg_dtype bfloat16)")
    if _value(rec, "precision", "fp8_param"):
        top["fp8_params"] = True
        used.append("fp8_params true (fp8_param: FP8 weights and their all-gather)")
    low = _value(rec, "precision", "fp8") or _value(rec, "precision", "fp4")
    # taken as set also with GPT-OSS's learnable sinks: Transformer Engine >= 2.15 runs them in FP8 through cuDNN
    # on sm >= 100 (the recipes set it on GB200/GB300 only) and raises where no backend can (docs/model.md §15.11)
    if low and _value(rec, "precision", "fp8_dot_product_attention"):
        top["fp8_attention"] = True
        used.append("fp8_attention true (fp8_dot_product_attention: the attention core's two products in FP8)")
    if _value(rec, "overlap", "grad_reduce_in_fp32") is False:
        top["grad_dtype"] = "bf16"
        used.append("grad_dtype bf16 (grad_reduce_in_fp32 false: BF16 gradient buffers and reduction)")
    tp_overlap = _value(rec, "overlap", "tp_comm_overlap")
    if tp_overlap is not None:
        par["tp_overlap"] = bool(tp_overlap)
        used.append(f"tp_overlap {str(bool(tp_overlap)).lower()} (tp_comm_overlap)")
    if moe:
        dispatcher, said = dispatcher_of(rec)
        if dispatcher is not None:
            top["moe_dispatcher"] = dispatcher
        used.append(f"moe_dispatcher {dispatcher or 'alltoall (recipe: not modelled)'} ({said})")
        overlap = bool(_value(rec, "overlap", "overlap_moe_expert_parallel_comm"))
        par["moe_overlap"] = "deepep" if overlap else "none"
        used.append(f"moe_overlap {par['moe_overlap']} (overlap_moe_expert_parallel_comm {str(overlap).lower()}, "
                    f"delay_wgrad_compute {str(bool(_value(rec, 'overlap', 'delay_wgrad_compute'))).lower()})")
    kept = bf16_layers_of(rec)
    if kept:
        top["bf16_layers"] = kept
        used.append(f"bf16_layers {kept} (first_last_layers_bf16: num_layers_at_start_in_bf16 + "
                    f"num_layers_at_end_in_bf16)")
    modules = module_precision_of(rec)
    if modules is not None:
        top["module_precision"] = modules
        used.append(f"module_precision {modules} (quant_recipe's module matchers)")
    fused = bool(moe and _value(rec, "fusions", "use_transformer_engine_op_fuser")
                 and _value(rec, "moe", "moe_grouped_gemm"))
    if fused:
        top["fused_grouped_mlp"] = True
        used.append("fused_grouped_mlp true (use_transformer_engine_op_fuser with moe_grouped_gemm: the experts' "
                    "activation and its cast in the grouped GEMMs)")
    offloaded = offloaded_layers_of(rec)
    if offloaded is not None:
        top["offload"], top["offload_layers"] = "activations", offloaded
        used.append(f"offload activations of {offloaded} layers (cpu_offloading with cpu_offloading_num_layers "
                    f"{offloaded}, activations only)")
    layout = pipeline_layout_of(rec)
    if layout is not None:
        par["pipeline_layout"] = layout
        par["pipeline_split"] = "layout"
        used.append(f"pipeline_layout {layout} (pipeline_model_parallel_layout)")
    # the op fuser's one modelled effect is the fused grouped MLP of a MoE model; elsewhere it stays unmodelled;
    # a pipeline layout is an input (the importer checks it against the run and names it unmodelled if it does not fit)
    lacking = [w for w in unmodelled(rec) if not (fused and w.startswith("use_transformer_engine_op_fuser"))
               and not (modules is not None and w.startswith("quant_recipe"))
               and not (layout is not None and w.startswith("pipeline_model_parallel_layout"))
               and not (offloaded is not None and w.startswith("cpu_offloading"))]
    if lacking:
        top["unmodelled"] = lacking
    return top, par, [f"recipe settings ({rec['id']}, {rec['source']['tag']}): " + "; ".join(used) + "."
                      + (" Recipe settings trainest has no input for (the run's `unmodelled`): " + ", ".join(lacking)
                         + "." if lacking else "")]


# the recipe settings that change time or memory and that trainest has no input for, with the value that does
# (None: any value but off/empty): BF16 main gradients of the precision-aware optimizer, the TE op fuser,
# the shared experts overlapped with the dispatch, paged stashing of the expert activations, fine-grained
# activation offloading and Megatron's CPU offloading of some layers' activations (cpu_offloading with
# cpu_offloading_num_layers: trainest's `offload: activations` streams every layer's), Megatron FSDP, a pipeline
# layout given as a list of stages, per-module precision overrides
# (a quantisation recipe of module matchers) where a matcher names a module trainest has no `module_precision` for
# (module_precision_of); the layers kept in BF16 are an input (bf16_layers, settings_of); FP8 parameters are an input (fp8_params, settings_of)
UNMODELLED = (("precision", "quant_recipe", None),
              ("optimizer", "main_grads_dtype", "bfloat16"), ("fusions", "use_transformer_engine_op_fuser", None),
              ("moe", "moe_shared_expert_overlap", None), ("moe", "moe_paged_stash", None),
              ("offload", "fine_grained_activation_offloading", None), ("offload", "cpu_offloading", None),
              ("data_parallel", "use_megatron_fsdp", None),
              ("pipeline", "pipeline_model_parallel_layout", None))


# Megatron-Core's layer names in a pipeline layout given as a list of stages, and their letters in the string form
# trainest reads (trainest/pipeline_layout.py; Megatron-Core PipelineParallelLayerLayout)
LAYOUT_LETTERS = {"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}


def pipeline_layout_of(rec: dict) -> str | None:
    """The recipe's pipeline layout as Megatron-Core's layout string (`Et*4|(t*4|)*14tmL`; a list of stages, each a
    list of layer names, is written stage by stage with `|`), None where it has none or names a layer trainest does
    not place."""
    value = _value(rec, "pipeline", "pipeline_model_parallel_layout")
    if isinstance(value, str) and value.strip().startswith("["):       # a list of stages the dump wrote as text
        try:
            value = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            return None
    elif isinstance(value, str) and value.strip():
        return value.strip()
    if not isinstance(value, list) or not value:
        return None
    stages = []
    for stage in value:
        names = stage if isinstance(stage, list) else [stage]
        if any(n not in LAYOUT_LETTERS for n in names):
            return None
        stages.append("".join(LAYOUT_LETTERS[n] for n in names))
    return "|".join(stages)


def offloaded_layers_of(rec: dict) -> int | None:
    """The layers whose activations Megatron-Core's CPU offloading sends to the host (cpu_offloading with
    cpu_offloading_num_layers, activations only: trainest's `offload: activations` of `offload_layers` layers), None
    where the recipe does not offload or also offloads the weights (not an input)."""
    if not _value(rec, "offload", "cpu_offloading") or _value(rec, "offload", "cpu_offloading_weights"):
        return None
    if _value(rec, "offload", "cpu_offloading_activations") is False:
        return None
    layers = _value(rec, "offload", "cpu_offloading_num_layers")
    return int(layers) if layers else None


# a quantisation recipe's matcher (Megatron-Core RecipeConfig: GlobMatcher(pattern=..., config_key=...)) and the
# module of trainest's `module_precision` (trainest/precision.py MODULE_PRECISION_MODULES) each pattern names, by the
# end of the pattern; the config keys as trainest's precisions (MXFP8 is a block-scaled FP8)
MATCHER = re.compile(r"GlobMatcher\(pattern=([^,]+), config_key=([^)]+)\)")
PATTERN_MODULES = ((r"(^|\.)linear_qkv$", "linear_qkv"), (r"(^|\.)linear_proj$", "linear_proj"),
                   (r"mixer\.in_proj$", "in_proj"), (r"mixer\.out_proj$", "out_proj"),
                   (r"fc(\[12\]|1|2)_latent_proj$", "latent_proj"), (r"^mtp\.\*$", "mtp"))
CONFIG_PRECISIONS = {"bf16": "bf16", "mxfp8": "fp8", "fp8": "fp8"}


def module_precision_of(rec: dict) -> str | None:
    """The recipe's quantisation recipe as trainest's `module_precision` (`module=precision,...`), None where it has
    none, or names a pattern or a config trainest has no module or precision for (it then stays unmodelled).
    fc1_latent_proj and fc2_latent_proj are one module (latent_proj): a recipe giving them two precisions stays
    unmodelled."""
    value = _value(rec, "precision", "quant_recipe")
    if not isinstance(value, str) or not value.strip():
        return None
    kept: dict[str, str] = {}
    for pattern, config in MATCHER.findall(value):
        module = next((m for rx, m in PATTERN_MODULES if re.search(rx, pattern.strip())), None)
        precision = CONFIG_PRECISIONS.get(config.strip())
        if module is None or precision is None or kept.get(module, precision) != precision:
            return None
        kept[module] = precision
    return ",".join(f"{m}={kept[m]}" for _, m in PATTERN_MODULES if m in kept) or None


def bf16_layers_of(rec: dict) -> int:
    """The layers an FP8/FP4 recipe keeps in BF16 (Megatron-Core applies num_layers_at_start/end_in_bf16 only with
    first_last_layers_bf16), 0 for none."""
    low = _value(rec, "precision", "fp8") or _value(rec, "precision", "fp4")
    if not (low and _value(rec, "precision", "first_last_layers_bf16")):
        return 0
    return int(_value(rec, "precision", "num_layers_at_start_in_bf16") or 0) + int(
        _value(rec, "precision", "num_layers_at_end_in_bf16") or 0)


def unmodelled(rec: dict) -> list[str]:
    """The recipe's settings that change time or memory and that trainest has no input for (UNMODELLED), each
    as 'key value'."""
    said = []
    for section, key, when in UNMODELLED:
        v = _value(rec, section, key)
        if (v == when) if when is not None else v not in (None, False, [], ""):
            shown = str(v).lower() if isinstance(v, bool) else v
            if isinstance(v, list):
                said.append(f"{key} (a list of {len(v)} stages)")
            elif isinstance(v, str) and "matcher(" in v:        # a quantisation recipe: its module overrides
                said.append(f"{key} ({v.count('matcher(')} module precision overrides)")
            elif key == "cpu_offloading":                        # how many layers' activations go to the host
                layers = _value(rec, "offload", "cpu_offloading_num_layers")
                said.append(f"{key} {shown}" + ("" if layers is None else f" ({layers} layers' activations)"))
            else:
                said.append(f"{key} {shown}")
    return said
