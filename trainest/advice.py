"""Advice on a result: what would make a layout that does not fit in memory fit, and a pipeline layout
that balances stages the even or balanced split leaves uneven (`layout_hint`).

Every suggestion is an evaluated alternative, never a rule of thumb: single changes of what the user
left open on the same devices (each estimated), the fastest layout that fits on the same device count
(the plan search), and otherwise the smallest device count at which one fits, with its layout. Only
changes that differ from what was given are named, and sharding is never suggested on one device.
The does-not-fit advice imports numpy through the plan search; `layout_hint` evaluates a few dozen
layouts with the step model alone (about 2 ms each) and runs only with a pipeline."""

from __future__ import annotations

from trainest.choices import DEFAULT_RECOMPUTE_MODULES, RECOMPUTE_MODULES
from trainest.errors import SpecError
from trainest.estimate import TIGHT_FIT_FRACTION, Estimate, estimate, host_misfit_words
from trainest.frameworks import FRAMEWORKS
from trainest.record import NamedTuple, replace
from trainest.scenario import Scenario, layout_of
from trainest.units import GiB, plural

MAX_DEVICES_TRIED = 2**20        # the device-count search doubles up to this many devices
MIN_SEQ_LEN_TRIED = 512          # the shortest default sequence the advice halves down to (shorter_sequence_fitting)


def _single_changes(s: Scenario) -> list[tuple[str, Scenario]]:
    """Alternatives that change one knob on the same devices, only to values not already given."""
    p = s.parallel
    fw = FRAMEWORKS[s.framework]
    runs = fw.zero_stages_with(p.pp)      # only what the framework runs (trainest/frameworks.py)
    tries: list[tuple[str, Scenario]] = []
    cheap = cheap_recompute_modules(s)
    if s.recompute in ("none", "selective") and s.recompute_modules == DEFAULT_RECOMPUTE_MODULES and cheap:
        label = ("" if s.recompute == "selective" else "--recompute selective ") + \
            f"--recompute-modules {','.join(cheap)}"
        tries.append((label, replace(s, recompute="selective", recompute_modules=cheap)))
    if s.recompute != "full":
        tries.append(("--recompute full", replace(s, recompute="full")))
    if layout_of(s).shard * p.cp > 1:      # ZeRO shards over the data-parallel (x CP) group: not on one rank
        tries += [(f"--zero {z}", replace(s, parallel=replace(p, zero=z))) for z in range(p.zero + 1, 4)
                  if z in runs]
    if p.tp > 1 and not p.sequence_parallel:
        tries.append(("--sequence-parallel", replace(s, parallel=replace(p, sequence_parallel=True))))
    if s.micro_batch > 1:
        tries.append(("--micro-batch 1", replace(s, micro_batch=1)))
    if s.offload == "none" and not s.hardware.memory_unified:
        tries.append(("--offload optimizer", replace(s, offload="optimizer")))
    for knob in ("tp", "pp"):
        k = getattr(p, knob) * 2
        divides = s.model.heads % k == 0 if knob == "tp" else s.model.layers % k == 0
        if p.dp % 2 == 0 and divides:
            new = replace(p, **{knob: k}, dp=p.dp // 2, dp_shard=0)
            if s.global_batch % (new.dp * s.micro_batch) == 0 and new.zero in fw.zero_stages_with(new.pp):
                tries.append((f"--{knob} {k}", replace(s, parallel=new)))
    return tries


def cheap_recompute_modules(s: Scenario) -> tuple[str, ...]:
    """The output-discarding recompute modules of a model with latent attention or experts (Megatron-Core:
    mla_up_proj, moe_act, and layernorm with them; docs/model.md §2.6): little time for what they free,
    the DeepSeek-V3 recipes' choice. None for a dense model (Transformer Engine fuses its norms into the
    next GEMM, where Megatron-Core's layernorm module does not apply)."""
    m = s.model
    if m.mla is None and m.moe is None:
        return ()
    picked = {"layernorm"} | ({"mla_up_proj"} if m.mla is not None else set()) | \
        ({"moe_act"} if m.moe is not None else set())
    return tuple(n for n in RECOMPUTE_MODULES if n in picked)


def _fitting_single_changes(s: Scenario) -> list[str]:
    """The labels of the single changes whose scenario is valid (checked as given, so that every rule of
    the scenario applies: an expert-parallel size that no longer divides a stage's ranks, an offload the
    host cannot take) and fits."""
    from trainest.scenario import scenario_from_mapping, scenario_mapping
    fixes = []
    for label, alt in _single_changes(s):
        try:
            scenario_from_mapping(scenario_mapping(alt), "advice")
            if estimate(alt).memory.fits:
                fixes.append(label)
        except SpecError:   # an alternative that is itself invalid is simply not suggested
            continue
    return fixes


def plan_words(e: Estimate) -> str:
    """A plan's layout, step time and memory, in words."""
    s, p = e.scenario, e.scenario.parallel
    layout = (f"tp {p.tp} pp {p.pp} cp {p.cp} dp {p.dp}" + (f" vpp {p.vpp}" if p.vpp > 1 else "")
              + (f" ep {p.ep}" + (f" etp {p.etp}" if p.etp > 1 else "") if s.model.moe is not None else "")
              + f" zero {p.zero} micro-batch {s.micro_batch} recompute {s.recompute}")
    return f"{layout}, {e.step.time_s:.3g} s per step, {e.memory.per_device_bytes / GiB:.1f} GiB per device"


def _reproduce(e: Estimate) -> str:
    """The `trainest estimate` options that reproduce a plan's layout."""
    from trainest.knobs import estimate_args
    from trainest.scenario import framework_args, scenario_mapping
    args = estimate_args(scenario_mapping(e.scenario)) + framework_args(e.scenario)
    return f"estimate options {' '.join(args)}"


def _plan_text(e: Estimate) -> str:
    """A plan's layout and the estimate options that reproduce it."""
    return f"{plan_words(e)} ({_reproduce(e)})"


def reproduce_args(e: Estimate) -> list[str]:
    """The `trainest estimate` options that select a plan's device count and layout."""
    from trainest.knobs import estimate_args
    from trainest.scenario import framework_args, scenario_mapping
    return estimate_args(scenario_mapping(e.scenario)) + framework_args(e.scenario)


class FitAdvice(NamedTuple):
    """What to do when a scenario does not fit: the single changes that fit (option words), and the fastest
    layout that fits on the same devices or on the smallest count that has one (`best`, None: none found)."""

    need_bytes: float
    capacity_bytes: float
    changes: tuple[str, ...]          # e.g. "--recompute full", "--offload optimizer"
    best: Estimate | None
    same_devices: bool                # `best` is on the scenario's own device count
    text: str                         # the one-line warning (fit_suggestions)
    host_words: str = ""              # the device part fits, the offloaded part not: why, in words
    seq_len: int = 0                  # `best` runs this shorter sequence (0: its own; shorter_sequence_fitting)


def fit_advice(s: Scenario, e: Estimate) -> FitAdvice:
    """`FitAdvice` of a scenario that does not fit (each suggestion estimated)."""
    fixes = _fitting_single_changes(s)
    found, best = smallest_fitting(s)
    seq_len = 0
    if best is None and not fixes:
        shorter, best = shorter_sequence_fitting(s)
        if best is not None:
            found, seq_len = f"{found}; {shorter}", best.scenario.seq_len
    same = best is not None and best.scenario.devices == s.devices
    return FitAdvice(need_bytes=e.memory.per_device_bytes, capacity_bytes=e.memory.capacity_bytes,
                     changes=tuple(fixes), best=best, same_devices=same, text=_misfit_text(s, e, fixes, found),
                     host_words=host_misfit_words(e.memory) if e.memory.device_fits else "", seq_len=seq_len)


def shorter_sequence_fitting(s: Scenario) -> tuple[str, Estimate | None]:
    """Where no layout fits at any device count tried and the sequence length is a default the user did not
    give (the model's context): the fastest layout on s.devices at the longest halving of it, down to
    MIN_SEQ_LEN_TRIED, that fits (words, its estimate; None: none, or the length was given)."""
    from trainest.search import search
    if "seq_len" not in s.derived:
        return "", None
    seq_len = s.seq_len // 2
    while seq_len >= MIN_SEQ_LEN_TRIED:
        alt = replace(s, seq_len=seq_len, derived=tuple(k for k in s.derived if k != "seq_len"))
        try:
            best = search(alt, s.devices, top=1).plans[0]
        except SpecError:
            seq_len //= 2
            continue
        return (f"with a shorter sequence than the default {s.seq_len:,} tokens, --seq-len {seq_len:,} on the same "
                f"devices: {_plan_text(best)}"), best
    return "", None


def smallest_fitting(s: Scenario) -> tuple[str, Estimate | None]:
    """The fastest layout that fits on s.devices, else on the smallest count s.devices·2^k that has one:
    (what was found, in words; its estimate or None). Each count is an exhaustive plan search."""
    from trainest.search import search
    n = s.devices
    while n <= MAX_DEVICES_TRIED:
        try:
            best = search(s, n, top=1).plans[0]
        except SpecError as exc:
            if "no scale-out network" in str(exc) or "path is unknown" in str(exc):
                if n == s.devices:
                    return f"no layout fits ({exc})", None
                return (f"no layout fits on up to {plural(n // 2, 'device')}, and {n} would need a path between "
                        f"nodes that {s.hardware.name}'s entry does not give (a hardware file with "
                        f"system.scale_out_gbit_per_s, or --devices-per-node if they share one server)"), None
            n *= 2
            continue
        where = "on the same devices" if n == s.devices else f"the smallest count that fits is {plural(n, 'device')}"
        return f"{where}: {_plan_text(best)}", best
    return f"no layout fits on up to {MAX_DEVICES_TRIED:,} devices", None


def fit_suggestions(s: Scenario, e: Estimate) -> str:
    """A one-line 'does not fit' warning: the single changes that would make it fit, and the fastest
    layout that fits on these devices or on the smallest device count that has one."""
    return fit_advice(s, e).text


def _misfit_text(s: Scenario, e: Estimate, fixes: list[str], found: str) -> str:
    need = e.memory.per_device_bytes / GiB
    have = e.memory.capacity_bytes / GiB
    margin = e.memory.required_headroom_bytes / GiB
    kept = f" ({margin:.1f} GiB kept free, --memory-headroom {s.memory_headroom})" if margin else ""
    over = need / have - 1.0
    maybe = (f" (over by {100 * over:.0f} %, within the memory model's error on published runs: it may fit; "
             f"docs/validation.md)") if 0.0 < over <= TIGHT_FIT_FRACTION else ""
    hint = ("; would fit with: " + ", ".join(fixes)) if fixes else ""
    if not e.memory.host_fits and e.memory.device_fits:   # only the offloaded part is too big: say so
        return f"does not fit in host memory: {host_misfit_words(e.memory)} per device " \
               f"(the device part, {need:.1f} GiB of {s.hardware.name}'s {have:.1f} GiB, fits){hint}; {found}"
    host = f"; and in host memory {host_misfit_words(e.memory)}" if not e.memory.host_fits else ""
    return f"does not fit: needs {need:.1f} GiB per device, {s.hardware.name} has {have:.1f} GiB{kept}{maybe}{host}" \
           f"{hint}; {found}"


def modules_plan_note(result, space) -> str | None:
    """For a plan search of a model with latent attention or experts, with neither recompute modules
    given nor selective recompute ruled out: the best plan with selective recompute of the cheap
    modules (`cheap_recompute_modules`), searched in full, when it beats the plan found (a note in
    words with its reproduce line; None otherwise). `result`: a search.SearchResult of `space`."""
    from trainest.search import search
    base = result.base
    cheap = cheap_recompute_modules(base)
    if not cheap or base.recompute_modules != DEFAULT_RECOMPUTE_MODULES or "selective" not in result.space["recompute"]:
        return None
    alt_base = replace(base, recompute="selective", recompute_modules=cheap)
    try:
        alt = search(alt_base, result.devices, replace(space, recompute=("selective",)), objective=result.objective,
                     top=1)
    except SpecError:
        return None
    if alt.scores[0] >= result.scores[0] * (1.0 - 1e-3):
        return None
    e = alt.plans[0]
    return (f"selective recompute of {', '.join(cheap)} (Megatron-Core's recompute modules, --recompute-modules "
            f"{','.join(cheap)}) has a better plan: {plan_words(e)}, "
            f"{1.0 - alt.scores[0] / result.scores[0]:.0%} better by the objective ({_reproduce(e)})")


LAYOUT_HINT_MIN_GAIN = 0.02      # name a pipeline layout only when it shortens the step by at least this share


def _rank_counts(layers: int, pp: int, first: int, last: int) -> tuple[int, ...] | None:
    """Decoder layers per rank with `first` and `last` on the end ranks and the rest spread over the
    middle ones (the earlier ones one more where it does not divide); None when that is impossible."""
    rest = layers - first - last
    if rest < 0 or (pp == 2 and rest):
        return None
    if pp == 2:
        return (first, last)
    q, r = divmod(rest, pp - 2)
    return (first, *([q + 1] * r + [q] * (pp - 2 - r)), last)


def layout_hint(s: Scenario, e: Estimate) -> str | None:
    """A one-line hint when a pipeline layout (docs/model.md §5.1) would shorten the step by at least
    LAYOUT_HINT_MIN_GAIN: every layout with u − 2 … u + 1 layers on the first rank and 0 … u + 1 on the
    last (u = ⌈L/p⌉), the rest spread evenly over the middle ranks, evaluated by the step model; the
    fastest that fits wherever the scenario fits. None without a pipeline, with a layout given, for hybrid
    block patterns and DualPipe, and under a framework that splits the layers itself."""
    from trainest.frameworks import FRAMEWORKS
    from trainest.memory import memory_per_device
    from trainest.pipeline_layout import layout_string, rank_layers_text
    from trainest.scenario import job_of
    from trainest.step import step_terms
    p, m = s.parallel, s.model
    if p.pp == 1 or p.pipeline_layout is not None or m.hybrid is not None or p.pipeline_schedule == "dualpipe" \
            or not FRAMEWORKS[s.framework].stage_layout:
        return None
    job, base = job_of(s), layout_of(s)
    u = -(-m.layers // p.pp)
    tried = []
    for first in range(max(u - 2, 0), u + 2):
        for last in range(0, u + 2):
            counts = _rank_counts(m.layers, p.pp, first, last)
            if counts is not None:
                laid = base._replace(pipeline_split="layout", rank_layers=counts)
                tried.append((float(step_terms(job, laid).time_s), counts, laid))
    for time_s, counts, laid in sorted(tried):
        if time_s > e.step.time_s * (1.0 - LAYOUT_HINT_MIN_GAIN):
            return None
        need = float(memory_per_device(job, laid).total_bytes)
        if e.memory.fits and need + e.memory.required_headroom_bytes > e.memory.capacity_bytes:
            continue
        from trainest.step.schedule import stage_layers
        heavy_n, last_n = stage_layers(m, float(p.pp), float(p.vpp), p.pipeline_split)
        even = len(set(counts)) == 1 and (m.layers // p.pp) % p.vpp == 0
        option = "--pipeline-split even" if even else \
            f"--pipeline-layout '{layout_string(counts, p.vpp, m.mtp.depth if m.mtp is not None else 0)}'"
        mtp = " and the MTP modules" if m.mtp is not None else ""
        return (f"pipeline stages uneven: the {p.pipeline_split} split puts {heavy_n:g} layers on the heaviest stage "
                f"and {last_n:g} with the loss{mtp} on the last; {option} (layers per rank {rank_layers_text(counts)}) "
                f"would take the step from {e.step.time_s:.3g} to {time_s:.3g} s "
                f"({100 * (time_s / e.step.time_s - 1):+.0f} %)")
    return None


def winner_layout_note(result) -> str | None:
    """`layout_hint` for the first plan of a search (a plan is searched with the even and the balanced
    split only; a layout may do better), or None."""
    if not result.plans or result.plans[0].scenario.parallel.pp == 1:
        return None
    best = result.plans[0]
    hint = layout_hint(best.scenario, best)
    return None if hint is None else f"plan 1, {hint}"
