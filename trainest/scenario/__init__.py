"""What the user asked: the `Scenario`, built and validated once from a mapping (CLI or YAML).

`scenario_from_mapping` is the only way a Scenario is made from user data; it fills documented
defaults, records which values were derived (so reports can show them), and checks every
rule of the layout (trainest/rules.py) with a message that says what would be allowed.

The package follows the data path:

- `records`: the frozen records (`Scenario`, `Parallel`, `FineTune`), the defaults and the schema's keys;
- `checks`: the checks and defaults of single values (fine-tuning, offload, headroom, tokens, keys);
- `framework`: what the framework runs (its defaults, pipelines, ZeRO stages, hardware, QLoRA);
- `build`: `scenario_from_mapping`, the mapping read into a validated Scenario;
- `files`: a scenario file loaded (paths relative to it, an `inputs` echo's derived values dropped);
- `echo`: the scenario as a mapping again (the JSON `inputs`), and the step model's view (`job_of`, `layout_of`).

Everything is re-exported here: `from trainest.scenario import scenario_from_mapping`.
"""

from trainest.knobs import PARALLEL_KEYS
from trainest.scenario.build import scenario_from_mapping
from trainest.scenario.checks import (
    LORA_DEFAULT_KEYS,
    check_finetune,
    check_offload,
    check_scenario_keys,
    default_global_batch,
    default_precision,
    default_tokens,
    default_tokens_text,
    finetune_defaults,
    hybrid_support,
    is_finite_positive,
    memory_headroom_bytes,
    recompute_modules_of,
)
from trainest.scenario.echo import finetune_mapping, job_of, layout_of, lora_base_bits, scenario_mapping
from trainest.scenario.files import (
    BATCH_KEYS,
    KEPT_WHEN_DERIVED,
    PATH_KEYS,
    load_scenario_file,
    relative_to_file,
    underive,
)
from trainest.scenario.framework import (
    FRAMEWORK_BY_KIND,
    check_framework_finetune,
    check_quantised_base,
    chosen_by_qlora,
    default_framework,
    default_zero,
    finetune_method_given,
    framework_args,
    unfused_cp,
)
from trainest.scenario.records import (
    DEFAULT_DEVICES,
    DEFAULT_FINETUNE_TOKENS,
    DEFAULT_GRID_GCO2_PER_KWH,
    DEFAULT_HARDWARE,
    DEFAULT_LORA_RANK,
    DEFAULT_LORA_TARGETS,
    DEFAULT_MEMORY_HEADROOM,
    DEFAULT_MODEL,
    DEFAULT_PRECISION,
    DEFAULT_PUE,
    DEFAULT_TOKENS_PER_PARAM,
    DEFAULT_TOKENS_PER_STEP,
    DEFAULT_ZERO,
    DEFAULT_ZERO_WITH_PP,
    ECHO_KEYS,
    QLORA_PRECISIONS,
    RUN_ONLY_KEYS,
    SCENARIO_KEYS,
    FineTune,
    Parallel,
    Scenario,
)

__all__ = [
    "BATCH_KEYS", "DEFAULT_DEVICES", "DEFAULT_FINETUNE_TOKENS", "DEFAULT_GRID_GCO2_PER_KWH", "DEFAULT_HARDWARE",
    "DEFAULT_LORA_RANK", "DEFAULT_LORA_TARGETS", "DEFAULT_MEMORY_HEADROOM", "DEFAULT_MODEL", "DEFAULT_PRECISION",
    "DEFAULT_PUE", "DEFAULT_TOKENS_PER_PARAM", "DEFAULT_TOKENS_PER_STEP", "DEFAULT_ZERO", "DEFAULT_ZERO_WITH_PP",
    "ECHO_KEYS", "FRAMEWORK_BY_KIND", "KEPT_WHEN_DERIVED", "LORA_DEFAULT_KEYS", "PARALLEL_KEYS", "PATH_KEYS",
    "QLORA_PRECISIONS", "RUN_ONLY_KEYS", "SCENARIO_KEYS", "FineTune", "Parallel", "Scenario",
    "check_finetune", "check_framework_finetune", "check_quantised_base", "check_offload", "check_scenario_keys",
    "chosen_by_qlora",
    "default_framework", "default_global_batch", "default_precision", "default_tokens", "default_tokens_text",
    "default_zero", "finetune_defaults", "finetune_mapping", "finetune_method_given", "framework_args",
    "hybrid_support", "is_finite_positive", "job_of", "layout_of", "load_scenario_file", "lora_base_bits",
    "memory_headroom_bytes", "recompute_modules_of", "relative_to_file", "unfused_cp",
    "scenario_from_mapping", "scenario_mapping", "underive",
]
