"""The plan search: every parallel layout of one training job on N devices, evaluated at once.

A job is everything but the layout (model, hardware, sequence length, precision, global batch B,
token budget, price). A plan adds the layout: tensor t, pipeline p, context c and data d parallel
sizes (N = t·p·c·d), virtual stages v, micro-batch b, ZeRO stage, recomputation and sequence
parallelism. The search enumerates the whole space, builds numpy arrays of the knobs and calls
`memory_per_device` and `step_terms` on them (the same functions `estimate()` calls with floats),
so a plan's numbers here are the numbers `trainest estimate` prints for it. The parts of the step
that depend on a few knobs only (the layer terms, the data-parallel collectives) are computed once
per distinct combination of those knobs and handed to `step_terms`: the same numbers, bit for bit.

Counting (the search summary): candidates are enumerated as nested choices, t → p → c (then d =
N/(t·p·c)) → v → b → ZeRO → recompute → SP. A (t, p, c) whose product does not divide N, or whose d
does not divide B, has no valid completion and is counted once as rejected ("devices_indivisible",
"batch_indivisible"); a (t, p, c, v, b) with v > 1 whose micro-batches per step m = B/(d·b) are not a
multiple of p breaks the interleaved schedule's rule (docs/model.md §5.2) and is counted once
("interleaving_indivisible"); every complete plan is counted once and is either feasible or rejected
("out_of_memory", or "non_finite" should the model produce no number). So
evaluated = feasible + Σ rejected. Values outside the space the user allowed are not counted.

Ranking: objective "time" ranks by step time (the job's step count is fixed, so also by time to
train); "cost" by steps·t_step·N·price; "energy" by steps·t_step·N·P·PUE (rated power). Device price
and power do not depend on the layout in this model, so at a fixed N the three rank plans identically
and differ only in the `objective_value` reported. Ties are broken by the lower memory per device, then
the lower ZeRO stage and recomputation.

Device counts (`smallest_devices`, a `--devices LO..HI` range): candidate counts are tried smallest
first, each with its own exhaustive search, and one is chosen by a rule the output states
(`device_rule`): with `--deadline` alone the fewest devices that meet it; with `--budget` the best by
`--objective` among the counts that meet every constraint (time: the fastest within the budget);
with neither the fewest devices that fit (every count is searched: the table shows the fastest plan at
each). When none qualifies the error names the cheapest count (a budget was missed) or the fastest.
"""

from trainest.choices import OBJECTIVES
from trainest.knobs import JOB_KEYS
from trainest.search.devices import (
    BUDGET_RULES,
    DEADLINE_RULE,
    DEVICE_COUNT_MODES,
    FIT_RULE,
    MAX_DEVICE_COUNTS,
    OBJECTIVE_RULES,
    DeviceSearch,
    DeviceTrial,
    device_counts,
    device_rule,
    device_step,
    parse_devices,
    smallest_devices,
)
from trainest.search.evaluate import CHUNK_PLANS, GridEval, Progress, evaluate_grid
from trainest.search.grid import (
    COMBO_KNOBS,
    FINETUNE_NAMES,
    OFFLOAD_NAMES,
    RECOMPUTE_NAMES,
    REJECT_REASONS,
    ROW_KNOBS,
    Grid,
    enumerate_plans,
    expert_layouts,
    pipeline_sizes,
    plan_indices,
)
from trainest.search.job import (
    default_devices,
    job_scenario,
    job_variant,
    objective_scale,
    plan_knobs,
    plan_scenario,
    with_search_framework,
)
from trainest.search.rank import (
    RunnerUp,
    SearchResult,
    SearchStats,
    _estimate_at,
    _first_rows,
    fitting_changes,
    no_fit_message,
    no_layout_message,
    search,
)
from trainest.search.space import (
    ALLOW_KEYS,
    KNOBS,
    MOE_ONLY,
    SEARCH_RECOMPUTE,
    WORD_KNOBS,
    ZERO_STAGES,
    SearchSpace,
    check_space,
    job_for_methods,
    max_tp_default,
    space_from_options,
    tp_sizes,
)

__all__ = [
    "ALLOW_KEYS", "BUDGET_RULES", "CHUNK_PLANS", "COMBO_KNOBS", "DEADLINE_RULE", "DEVICE_COUNT_MODES",
    "FINETUNE_NAMES", "FIT_RULE", "JOB_KEYS", "KNOBS", "MAX_DEVICE_COUNTS", "MOE_ONLY", "OBJECTIVES",
    "OBJECTIVE_RULES", "OFFLOAD_NAMES", "RECOMPUTE_NAMES", "REJECT_REASONS", "ROW_KNOBS", "SEARCH_RECOMPUTE",
    "WORD_KNOBS", "ZERO_STAGES", "DeviceSearch", "DeviceTrial", "Grid", "GridEval", "Progress", "RunnerUp",
    "SearchResult", "SearchSpace", "SearchStats", "_estimate_at", "_first_rows", "check_space", "default_devices",
    "device_counts", "device_rule", "enumerate_plans", "evaluate_grid", "expert_layouts", "fitting_changes",
    "job_for_methods", "job_scenario", "max_tp_default", "no_fit_message", "no_layout_message",
    "objective_scale", "job_variant",
    "parse_devices", "device_step", "pipeline_sizes", "plan_indices", "plan_knobs", "plan_scenario",
    "search", "smallest_devices", "space_from_options", "tp_sizes", "with_search_framework",
]
