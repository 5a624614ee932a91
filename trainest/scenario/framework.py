"""What the training framework runs (trainest/frameworks.py) checked against a scenario: its default (by the
hardware's kind, a QLoRA's), its ZeRO stages with and without a pipeline, its schedules, TP overlap, hardware
kinds and QLoRA."""

from __future__ import annotations

from typing import Any

from trainest.catalog import (
    Hardware,
)
from trainest.errors import SpecError, at, head, name_of
from trainest.frameworks import DEFAULT_FRAMEWORK, FRAMEWORKS, QLORA_FRAMEWORK
from trainest.scenario.records import DEFAULT_ZERO, DEFAULT_ZERO_WITH_PP, Scenario


def default_zero(framework: str, pp: int) -> int:
    """The ZeRO stage a layout takes when none is given: DEFAULT_ZERO, DEFAULT_ZERO_WITH_PP with pp > 1, where
    the framework runs it (Framework.zero_stages_with); a framework without the distributed optimizer (ZeRO-1)
    shards fully with a pipeline too (torchtitan, OLMo-core: FSDP2 with pipeline parallelism), else its highest."""
    fw = FRAMEWORKS.get(framework, FRAMEWORKS[DEFAULT_FRAMEWORK])
    stages = fw.zero_stages_with(pp) or fw.zero_stages
    for z in ((DEFAULT_ZERO_WITH_PP,) if pp > 1 else ()) + (DEFAULT_ZERO,):
        if z in stages:
            return z
    return max(stages)


def default_sequence_parallel(framework: str, tp: int) -> bool:
    """Sequence parallelism when the run does not say: on with tp > 1 where the framework's tensor parallelism
    shards the activations as well (Framework.tp_shards_activations: MaxText, docs/model.md §4.1), else off."""
    fw = FRAMEWORKS.get(framework, FRAMEWORKS[DEFAULT_FRAMEWORK])
    return fw.tp_shards_activations and tp > 1


def check_framework_pipeline(framework: str, vpp: int, layout: bool, where: str, label: str = "") -> None:
    """What the framework's pipeline can run: the interleaved schedule (vpp > 1), a pipeline layout."""
    named = label or framework      # the framework in the messages
    fw = FRAMEWORKS[framework]
    if layout and not fw.stage_layout:
        raise SpecError(f"{at(where, 'parallel.pipeline_layout')}: {named} does not place layers per stage as asked "
                        f"(its pipeline splits them itself); frameworks that do: "
                        f"{', '.join(n for n, f in FRAMEWORKS.items() if f.stage_layout)}")
    if vpp > 1 and not fw.interleaved:
        raise SpecError(f"{head(where)}vpp={vpp} needs the interleaved pipeline schedule, which {named} "
                        f"does not have; use vpp=1 or a framework that has it")


def check_framework(framework: str, sizes: dict[str, Any], par: dict[str, Any], where: str,
                     label: str = "") -> None:
    """What the framework runs of the layout: its pipeline schedules and layouts, its ZeRO stages."""
    named = label or framework      # the framework in the messages
    check_framework_pipeline(framework, sizes["vpp"], par.get("pipeline_layout") is not None, where, label)
    if sizes["tp_overlap"] and not FRAMEWORKS[framework].tp_overlap:
        raise SpecError(f"{at(where, 'parallel.tp_overlap')}: {named} does not pipeline its TP collectives with the "
                        f"GEMMs (Transformer "
                        f"Engine's userbuffers, torchtitan's async TP); frameworks that do: "
                        f"{', '.join(n for n, f in FRAMEWORKS.items() if f.tp_overlap)}")
    check_framework_zero(framework, sizes["pp"], sizes["zero"], "zero" not in par and "fsdp" not in par, where,
                          label)


def check_framework_hardware(framework: str, hardware: Hardware, where: str) -> None:
    """The framework runs on this kind of hardware (`Framework.runs_on`): no Megatron on a TPU, no MLX on a GPU."""
    fw = FRAMEWORKS[framework]
    if hardware.kind in fw.runs_on:
        return
    able = ", ".join(n for n, f in FRAMEWORKS.items() if hardware.kind in f.runs_on)
    raise SpecError(f"{at(where, 'framework')}: {framework} does not run on {hardware.name} ({hardware.kind}); "
                    f"frameworks that "
                    f"do: {able}")


def check_framework_zero(framework: str, pp: int, zero: int, derived: bool, where: str, label: str = "") -> None:
    """What the framework's data parallelism runs (trainest/frameworks.py: `pipeline`, `zero_stages`,
    `pp_zero_stages`, with their sources): pipeline parallelism at all, and the ZeRO stage with or without it."""
    named = label or framework      # the framework in the messages
    fw = FRAMEWORKS[framework]
    pp_name, zero_name = name_of(where, "parallel.pp"), name_of(where, "parallel.zero")
    if pp > 1 and not fw.pipeline:
        raise SpecError(f"{head(where)}{pp_name} {pp}: {named} has no pipeline parallelism; allowed under it: "
                        f"{pp_name} 1 (frameworks with a pipeline: "
                        f"{', '.join(n for n, f in FRAMEWORKS.items() if f.pipeline)})")
    stages = fw.zero_stages_with(pp)
    if zero in stages:
        return
    given = "" if not derived else " (the default)"
    listed = ", ".join(map(str, stages))
    if zero not in fw.zero_stages:
        raise SpecError(f"{head(where)}{zero_name} {zero}{given}: {named} has no ZeRO-{zero} (trainest/frameworks.py); "
                        f"allowed under it: {zero_name} {listed}")
    raise SpecError(f"{head(where)}{zero_name} {zero}{given} with {pp_name} {pp}: {named} does not run ZeRO-{zero} "
                    f"with pipeline parallelism (DeepSpeed's PipelineEngine: ZeRO-2 and ZeRO-3 are incompatible "
                    f"with it); allowed with a pipeline: {zero_name} {listed}, or {pp_name} 1 for ZeRO-{zero}")


# the framework an estimate takes when none is given, by the hardware's kind: Megatron-Core runs on GPUs, not on
# Apple silicon (MLX is its training stack) or TPUs (JAX/XLA: MaxText)
FRAMEWORK_BY_KIND = {"apple": "mlx", "tpu": "maxtext"}


def unfused_cp(attention: str, framework: str) -> bool:
    """True where `attention` is the materialised softmax and `framework`'s context parallelism needs fused
    attention kernels (`Framework.cp_fused_attention`; rules.CP_FUSED_ATTENTION)."""
    return attention == "standard" and FRAMEWORKS[framework].cp_fused_attention


def check_framework_kernels(framework: str, label: str, attention: str, kernels: str, packed_length: int | None,
                            where: str) -> None:
    """The kernels the framework runs: an XLA step (MaxText) fuses its element-wise operators, so `kernels: eager`
    is refused there; where packed sequences need a fused kernel's variable-length path
    (`Framework.packed_fused_attention`), `attention: standard` takes no `packed_length`."""
    fw, named = FRAMEWORKS[framework], label or framework
    if kernels == "eager" and fw.dispatch == "xla":
        raise SpecError(f"{at(where, 'kernels')}: eager runs each element-wise operator as a kernel of its own, and "
                        f"{named} compiles the step into one XLA program, which fuses them; allowed here: fused")
    if (packed_length or 0) > 0 and attention == "standard" and fw.packed_fused_attention:
        raise SpecError(f"{at(where, 'packed_length')}: {packed_length} with attention standard: {named} runs packed "
                        f"sequences through a fused kernel's variable-length path only (Transformer Engine's THD "
                        f"format); use attention flash, or leave packed_length out")


def default_framework(hardware: Hardware, method: str = "full") -> str:
    """DEFAULT_FRAMEWORK, or the one the hardware's kind runs (FRAMEWORK_BY_KIND); for a QLoRA, QLORA_FRAMEWORK
    where the kind's own has no QLoRA and that one runs on it (bitsandbytes' 4-bit layers are a Hugging Face
    stack: trainest/frameworks.py, `qlora`)."""
    framework = FRAMEWORK_BY_KIND.get(hardware.kind, DEFAULT_FRAMEWORK)
    if method == "qlora" and not FRAMEWORKS[framework].qlora and hardware.kind in FRAMEWORKS[QLORA_FRAMEWORK].runs_on:
        return QLORA_FRAMEWORK
    return framework


def chosen_by_qlora(framework: str, hardware: Hardware, derived: bool) -> bool:
    """The framework was not given and is not the hardware's default: a QLoRA chose it (`default_framework`)."""
    return derived and framework != default_framework(hardware)


def framework_label(framework: str, hardware: Hardware, derived: bool) -> str:
    """How a framework that refuses the layout is named: as a QLoRA's default where a QLoRA chose it ('' else)."""
    return f"{framework} (the default framework of a QLoRA)" if chosen_by_qlora(framework, hardware, derived) else ""


def framework_args(s: Scenario) -> list[str]:
    """`--framework F` where a plan's scenario took its framework by default and an estimate of the plan's own
    method would take another (a LoRA plan of a QLoRA job: the job's Hugging Face stack, not Megatron-Core);
    else nothing (the framework given is among the job's own options)."""
    if "framework" in s.derived and s.framework != default_framework(s.hardware, s.finetune.method):
        return ["--framework", s.framework]
    return []


def framework_given(data: dict[str, Any]) -> str | None:
    """The scenario's `framework:` where it is a word (checked later), else None."""
    return data["framework"] if isinstance(data.get("framework"), str) else None


def finetune_method_given(data: Any) -> str:
    """The fine-tuning method a scenario's `finetune:` names (a word or `{method: ...}`), unchecked, or full:
    what the default framework depends on before `check_finetune` reads the rest."""
    method = data.get("method") if isinstance(data, dict) else data
    return method if isinstance(method, str) else "full"


def check_quantised_base(base_bits: int, hardware: Hardware, framework: str, name: str) -> None:
    """A quantised frozen base (QLoRA, LLM.int8) only where its kernels exist (frameworks.quantised_base_refusal)."""
    from trainest.frameworks import quantised_base_refusal
    why = quantised_base_refusal(hardware.kind, hardware.vendor, hardware.name, base_bits, framework)
    if why:
        raise SpecError(f"{name}: {why}")


def check_framework_finetune(framework: str, method: str, name: str) -> None:
    """A QLoRA runs only under a framework with bitsandbytes' 4-bit layers (`Framework.qlora`); `name` is the
    option or key that asked for it."""
    if method != "qlora" or FRAMEWORKS[framework].qlora:
        return
    raise SpecError(f"{name}: {framework} has no QLoRA (no 4-bit NF4 base layer: bitsandbytes' Linear4bit is a "
                    f"Hugging Face PEFT stack); frameworks that run it: "
                    f"{', '.join(n for n, f in FRAMEWORKS.items() if f.qlora)} (--framework)")
