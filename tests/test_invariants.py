"""Invariants over generated scenarios (issue 32): what must hold for every input the command line
accepts, checked with hypothesis on dense, MoE, MLA and hybrid presets and random dense shapes, every
supported hardware and precision, several frameworks, expert parallelism, ZeRO stages and LoRA/QLoRA.

1. Every number of the JSON document is finite and non-negative (the memory headroom and the error
   band's signed fields excepted), or the run is refused with a SpecError.
2. Doubling the global batch at a fixed layout: never faster, never more than twice the step.
3. More layers never faster; twice the peak FLOP/s or any bandwidth never slower.
4. More ZeRO sharding, or more tensor parallelism on the same devices, never more memory per device.
5. LoRA and QLoRA never slower than the full fine-tune at the same layout; FP8 never slower than BF16
   on hardware with a higher FP8 peak unless a warning says why.
6. The command line agrees with itself: `--config` of an estimate's `inputs` reproduces it; sweep's
   points, compare's entries and plan's reproduce lines give estimate's numbers; the table prints the
   JSON's step time and memory.

Where an invariant fails today for a bug another change owns, the test carries a strict xfail naming
the issue item, so it fails (XPASS) once that is fixed and the marker must go. Hypothesis runs
derandomized with no shrinking and no database: a failure is reproducible and fast.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, assume, example, given, settings
from hypothesis import strategies as st

from trainest import catalog
from trainest.adapter_cost import slower_than_full_warning
from trainest.errors import SpecError
from trainest.estimate import estimate
from trainest.frameworks import FRAMEWORKS
from trainest.record import replace
from trainest.report.estimate import estimate_dict
from trainest.scenario import scenario_from_mapping
from trainest.step.collectives import network_gap

REL = 1e-9
HARDWARE = [n for n in catalog.hardware_names() if not catalog.load_hardware(n).unsupported_reason]
PRESETS = sorted(catalog.model_names())
FRAMEWORK_CHOICES = [None, "megatron-core", "nemo", "hf-accelerate", "torchtitan", "deepspeed", "llm-foundry"]
# signed by definition: memory left over (negative: does not fit), an error band's log ratios
SIGNED = ("headroom_bytes",)


def _settings(examples: int):
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.function_scoped_fixture])


def _divisors(n: int, cap: int) -> list[int]:
    return [k for k in range(1, min(n, cap) + 1) if n % k == 0]


@st.composite
def models(draw) -> dict | str:
    """A preset name (dense, MoE, MLA, hybrid), or a random dense shape that passes validation."""
    if draw(st.integers(0, 3)):
        return draw(st.sampled_from(PRESETS))
    heads = draw(st.sampled_from([2, 4, 8, 16, 32, 64]))
    head_dim = draw(st.sampled_from([64, 128]))
    return {"name": "random", "layers": draw(st.integers(2, 96)), "hidden": heads * head_dim,
            "ffn_hidden": draw(st.integers(1, 8)) * heads * head_dim, "heads": heads,
            "kv_heads": draw(st.sampled_from(_divisors(heads, heads))), "vocab": draw(st.integers(1000, 200_000)),
            "mlp": draw(st.sampled_from(["gelu", "swiglu"])), "tied_embeddings": draw(st.booleans())}


def _model(value):
    return catalog.load_model(value) if isinstance(value, str) else catalog.model_from_mapping(value, "strategy")


@st.composite
def mappings(draw, *, method: str | None = None, room_for_2tp: bool = False) -> dict:
    """A scenario mapping whose layout divides what it must (the scenario loader may still refuse it:
    a framework without the recompute mode, a layout too big for the hardware's network...).
    `room_for_2tp`: d even and 2t dividing the heads (t can double on the same devices)."""
    value = draw(models())
    model = _model(value)
    hw_name = draw(st.sampled_from(HARDWARE))
    hw = catalog.load_hardware(hw_name)
    heads = model.heads if model.hybrid is None else math.gcd(model.heads, model.hybrid.mamba.heads,
                                                              model.hybrid.mamba.groups)
    tp = draw(st.sampled_from([t for t in _divisors(heads, 8) if not room_for_2tp or heads % (2 * t) == 0] or [1]))
    pp = draw(st.sampled_from(_divisors(model.layers, 8)))
    cp = 1 if model.hybrid is not None else draw(st.sampled_from([1, 1, 2]))
    dp = draw(st.sampled_from([2, 4, 8, 16] if room_for_2tp else [1, 2, 3, 4, 8, 16]))
    parallel = {"tp": tp, "pp": pp, "cp": cp, "dp": dp, "zero": draw(st.integers(0, 3)),
                "sequence_parallel": draw(st.booleans()) if tp > 1 else False}
    if model.moe is not None:
        parallel["ep"] = draw(st.sampled_from(_divisors(math.gcd(model.moe.experts, dp * cp), 16)))
    micro_batch = draw(st.sampled_from([1, 2, 4]))
    devices = tp * pp * cp * dp
    per_node = None
    if network_gap(hw, hw.devices_per_node, devices):
        assume(devices <= 64 and network_gap(hw, devices, devices) is None)
        per_node = devices
    mapping = {"model": value, "hardware": hw_name, "precision": draw(st.sampled_from(sorted(hw.peak_flops_per_s))),
               "seq_len": draw(st.sampled_from([512, 2048, 4096, 8192])), "devices": devices,
               "parallel": parallel, "micro_batch": micro_batch,
               "global_batch": dp * micro_batch * draw(st.integers(1, 8)),
               "recompute": draw(st.sampled_from(["none", "selective", "full"])),
               "attention": draw(st.sampled_from(["flash", "flash", "standard"]))}
    if per_node is not None:
        mapping["devices_per_node"] = per_node
    framework = draw(st.sampled_from(FRAMEWORK_CHOICES))
    if framework is not None:
        mapping["framework"] = framework
    method = method or draw(st.sampled_from(["full", "full", "lora", "qlora"]))
    mapping["finetune"] = {"method": method}
    if draw(st.booleans()):
        mapping["tokens"] = draw(st.sampled_from([1e8, 1e12]))
        mapping["price_per_hour"] = draw(st.sampled_from([0.0, 2.5]))
    return mapping


def _scenario(mapping: dict):
    """The scenario, or None where the loader refuses it (an input error with its message)."""
    try:
        return scenario_from_mapping(mapping, "invariant")
    except SpecError:
        return None


def _accepted(mapping: dict):
    s = _scenario(mapping)
    assume(s is not None)
    return s


def _time(s, **changes) -> float:
    return estimate(replace(s, **changes)).step.time_s


# --------------------------------------------------------------------- 1. finite and physical, or refused

@_settings(400)
@given(mappings())
def test_every_number_of_the_json_is_finite_and_non_negative_or_the_run_is_refused(mapping):
    s = _scenario(mapping)
    if s is None:
        return                              # refused with a message: allowed
    try:
        e = estimate(s)
    except SpecError:
        return
    doc = estimate_dict(e)
    json.dumps(doc, allow_nan=False)
    for path, value in _golden().json_numbers(doc):
        assert math.isfinite(value), f"{path} = {value}"
        if not path.endswith(SIGNED):
            assert value >= 0, f"{path} = {value}"


# ---------------------------------------------------------------------------- 2. the global batch

@_settings(300)
@given(mappings())
def test_doubling_the_global_batch_at_a_fixed_layout_about_doubles_the_step(mapping):
    """Twice the micro-batches: at least the step (more work) and at most twice it (the fixed costs,
    the optimizer, the pipeline fill and drain, the exposed gradient reduction, do not double)."""
    s = _accepted(mapping)
    one = estimate(s).step.time_s
    two = _time(s, global_batch=2 * s.global_batch)
    assert one * (1 - REL) <= two <= 2 * one * (1 + REL), (one, two)


# ------------------------------------------------------------------------------- 3. size and speed

@_settings(300)
@given(mappings(), st.integers(1, 4))
def test_more_layers_are_never_faster(mapping, k):
    s = _accepted(mapping)
    assume(s.model.hybrid is None and s.model.mtp is None and s.parallel.vpp == 1)
    m = s.model
    deeper = replace(m, layers=m.layers + k * s.parallel.pp)
    if m.moe is not None:                   # keep the dense leading layers, add MoE layers
        assume(m.moe.layer_frequency == 1)
    try:
        t = _time(s, model=deeper)
    except SpecError:
        assume(False)
    assert t >= estimate(s).step.time_s * (1 - REL)


BANDWIDTHS = ["memory_bytes_per_s", "scale_up_bytes_per_s", "scale_out_bytes_per_s"]


@_settings(300)
@given(mappings(), st.sampled_from(["peak", *BANDWIDTHS]))
def test_twice_the_flops_or_the_bandwidth_is_never_slower(mapping, field):
    s = _accepted(mapping)
    hw = s.hardware
    if field == "peak":
        faster = replace(hw, peak_flops_per_s={p: 2 * v for p, v in hw.peak_flops_per_s.items()})
    else:
        assume(getattr(hw, field) is not None)
        faster = replace(hw, **{field: 2 * getattr(hw, field)})
    assert _time(s, hardware=faster) <= estimate(s).step.time_s * (1 + REL)


# ------------------------------------------------------------------------------------- 4. memory

def _memory(s, **parallel) -> float:
    return estimate(replace(s, parallel=replace(s.parallel, **parallel))).memory.per_device_bytes


@_settings(300)
@given(mappings(), st.integers(0, 2))
def test_more_zero_sharding_never_needs_more_memory_per_device(mapping, stage):
    """Stage k+1 never above stage k, but ZeRO-3's two gathered layers (current + prefetch), which can
    outweigh the shard it saves with few layers per stage on few ranks (tests/test_properties.py)."""
    s = _accepted(mapping)
    p = s.parallel
    if stage == 2:
        shard = (p.dp_shard or p.dp) * p.cp
        assume(shard == 1 or s.model.layers / p.pp * (1 - 1 / shard) >= 2)
        assume(not (FRAMEWORKS[s.framework].pp_unsharded_zero3 and p.pp > 1))
    try:
        lower = _memory(s, zero=stage)
        higher = _memory(s, zero=stage + 1)
    except SpecError:
        assume(False)
    assert higher <= lower * (1 + REL), (stage, lower, higher)


@_settings(200)
@given(mappings(room_for_2tp=True))
def test_more_tensor_parallelism_on_the_same_devices_never_needs_more_memory(mapping):
    """t -> 2t, d -> d/2 at the same global and micro-batch. A pipeline keeps min(m, p) micro-batches
    in flight, and halving d doubles m: with m < p that is more activations for a physical reason, so
    the pipelines drawn run m >= p micro-batches."""
    s = _accepted(mapping)
    p = s.parallel
    assume(p.dp % 2 == 0 and s.model.heads % (2 * p.tp) == 0 and s.global_batch % (p.dp // 2) == 0)
    assume(p.pp == 1 or s.micro_batches >= p.pp)
    _check_wider_tp(mapping, s)


def _check_wider_tp(mapping, s):
    p = s.parallel
    wider = _scenario({**mapping, "parallel": {**mapping["parallel"], "tp": 2 * p.tp, "dp": p.dp // 2,
                                               "sequence_parallel": p.sequence_parallel or p.tp == 1}})
    assume(wider is not None)
    assert _but_communicators(estimate(wider).memory) <= _but_communicators(estimate(s).memory) * (1 + REL)


def _but_communicators(m) -> float:
    """A device's memory but NCCL's buffers: a wider tensor-parallel group is one more communicator with
    its own buffers (docs/model.md §7.5), a physical cost that a toy model's few MB of tensors can show."""
    return m.per_device_bytes - m.nccl_bytes


# issue 32 item 6's reproducer: qwen3-32b on 4 TPU v5p under ZeRO-3, tp 2 -> 4 (d 2 -> 1)
ZERO3_TO_ONE_RANK = {"model": "qwen3-32b", "hardware": "tpu-v5p", "devices": 4, "parallel": {"tp": 2, "dp": 2, "zero": 3},
                     "recompute": "full", "global_batch": 4, "seq_len": 4096}


@settings(max_examples=1, deadline=None, database=None, phases=[Phase.explicit])
@example(mapping=ZERO3_TO_ONE_RANK)
@given(mappings())
def test_more_tensor_parallelism_never_needs_more_memory_when_zero3_reaches_one_rank(mapping):
    _check_wider_tp(mapping, _accepted(mapping))


# ------------------------------------------------------------------------------- 5. methods and precisions

def _method(s, method: str):
    return replace(s, finetune=replace(s.finetune, method=method))


@_settings(200)
@given(mappings(method="full"), st.sampled_from(["lora", "qlora"]))
def test_lora_and_qlora_are_never_slower_than_the_full_fine_tune_unless_the_estimate_says_why(mapping, method):
    """Adapters add thin memory-bound GEMMs, merges and kernel launches and save the base's weight
    gradients: where the step is launch- or memory-bound the added work can be more than the saved
    (docs/model.md §13.6); then the estimate says so, with the full fine-tune's step and the term that grew."""
    full = _accepted(mapping)
    adapted = _scenario({**mapping, "finetune": {"method": method}})
    assume(adapted is not None and adapted.framework == full.framework)
    t_full, e = estimate(full).step.time_s, estimate(adapted)
    warning = slower_than_full_warning(e)
    if e.step.time_s <= t_full * (1 + REL):
        assert warning is None
    else:
        assert warning and "slower than the full fine-tune" in warning and f"{t_full:.4g} s" in warning, warning
        assert re.search(r"launch-bound|memory-bound|FLOPs|collectives", warning), warning


def _fp8_gain(name: str) -> float:
    peaks = catalog.load_hardware(name).peak_flops_per_s
    return peaks.get("fp8", 0.0) / peaks["bf16"] if "bf16" in peaks else 0.0


FP8_HARDWARE = [n for n in HARDWARE if _fp8_gain(n) > 1.0]
# issue 32 item 5's reproducer: qwen3-30b-a3b on 8 B300, per-expert FP8 casts and paddings make it host-bound
FP8_MOE = {"model": "qwen3-30b-a3b", "hardware": "b300", "devices": 8, "precision": "bf16", "seq_len": 4096,
           "parallel": {"tp": 8, "ep": 2, "zero": 3, "sequence_parallel": True}, "micro_batch": 1, "global_batch": 4}


def _warnings_of(mapping: dict, tmp_dir) -> list[str]:
    """The JSON `warnings` of `trainest estimate --config` of the mapping (the command line's own)."""
    path = tmp_dir / "scenario.json"
    path.write_text(json.dumps(mapping))
    code, out = _cli(["estimate", "--config", str(path), "--json"])
    assert code == 0, out
    return json.loads(out)["warnings"]


@_settings(200)
@example(mapping=FP8_MOE, hw_name="b300")
@given(mapping=mappings(method="full"), hw_name=st.sampled_from(FP8_HARDWARE))
def test_fp8_is_never_slower_than_bf16_on_fp8_hardware_unless_a_warning_says_why(mapping, hw_name, tmp_path_factory):
    mapping = {**mapping, "hardware": hw_name, "precision": "bf16"}
    hw = catalog.load_hardware(hw_name)
    mapping.pop("devices_per_node", None)
    if network_gap(hw, hw.devices_per_node, mapping["devices"]):
        assume(mapping["devices"] <= 64 and network_gap(hw, mapping["devices"], mapping["devices"]) is None)
        mapping["devices_per_node"] = mapping["devices"]
    bf16 = _accepted(mapping)
    t_bf16, t_fp8 = estimate(bf16).step.time_s, _time(bf16, precision="fp8")
    if t_fp8 > t_bf16 * (1 + REL):
        said = _warnings_of({**mapping, "precision": "fp8"}, tmp_path_factory.mktemp("fp8"))
        assert any("fp8" in w.lower() and "slower" in w.lower() for w in said), (t_bf16, t_fp8, said)


# ------------------------------------------------------------------------- 6. the command line agrees

@functools.cache
def _golden():
    """tools/golden.py, whose run_cli the goldens use too."""
    path = Path(__file__).resolve().parent.parent / "tools" / "golden.py"
    spec = importlib.util.spec_from_file_location("golden", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cli(argv: list[str]) -> tuple[int, str]:
    """(exit code, stdout) of `trainest ARGV`, in process (tools/golden.py: run_cli)."""
    return _golden().run_cli(argv)


def _json(argv: list[str]) -> dict | None:
    """The --json document of `trainest ARGV`, or None where it refuses the input (exit 1)."""
    code, out = _cli([*argv, "--json"])
    assert code in (0, 1), (code, argv)
    if code:
        assert out == "", argv          # a refusal prints nothing on stdout
        return None
    return json.loads(out)


CLI_MODELS = ["llama3-8b", "llama3-70b", "qwen3-30b-a3b", "mixtral-8x7b", "gpt3-2.7b", "deepseek-v3", "qwen3-4b"]
CLI_HARDWARE = ["h100-sxm", "a100-80gb-sxm", "b200", "mi300x", "tpu-v5p", "gb200", "dgx-spark"]


@st.composite
def job_args(draw) -> list[str]:
    """The job's options, as a user types them (the layout left to the defaults or to plan)."""
    devices = draw(st.sampled_from([1, 2, 8, 16, 64]))
    args = ["--model", draw(st.sampled_from(CLI_MODELS)), "--hardware", draw(st.sampled_from(CLI_HARDWARE)),
            "--seq-len", str(draw(st.sampled_from([1024, 4096]))),
            "--global-batch", str(devices * draw(st.sampled_from([1, 4, 8]))),
            "--finetune", draw(st.sampled_from(["full", "full", "lora"]))]
    return args + ["--devices", str(devices)]


def _same(a: dict, b: dict) -> None:
    assert a["step"]["time_s"] == pytest.approx(b["step"]["time_s"], rel=REL)
    assert a["memory"]["per_device_bytes"] == pytest.approx(b["memory"]["per_device_bytes"], rel=REL)


def _reloaded(args: list[str], tmp_dir) -> tuple[dict, dict]:
    doc = _json(["estimate", *args])
    assume(doc is not None)
    path = tmp_dir / "inputs.yaml"
    path.write_text(json.dumps(doc["inputs"]))          # JSON is YAML
    again = _json(["estimate", "--config", str(path)])
    assert again is not None
    return doc, again


@_settings(30)
@given(args=job_args())
def test_the_config_of_an_estimates_inputs_reproduces_it(args, tmp_path_factory):
    doc, again = _reloaded(args, tmp_path_factory.mktemp("inputs"))
    assert again["step"] == doc["step"] and again["memory"] == doc["memory"]
    assert again["throughput"] == doc["throughput"] and again["training"] == doc["training"]
    without_derived = lambda d: {k: v for k, v in d["inputs"].items() if k != "derived"}   # noqa: E731
    assert without_derived(again) == without_derived(doc)


@settings(max_examples=1, deadline=None, database=None, phases=[Phase.explicit],
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(args=["--model", "qwen3-4b", "--hardware", "dgx-spark", "--finetune", "lora", "--devices", "8"])
@given(args=job_args())
def test_a_reloaded_inputs_echo_keeps_what_was_derived(args, tmp_path_factory):
    doc, again = _reloaded(args, tmp_path_factory.mktemp("inputs"))
    assert again["inputs"]["derived"] == doc["inputs"]["derived"]


def test_an_edited_fine_tuning_value_of_an_echo_is_taken_and_no_longer_derived(tmp_path):
    """A derived fine-tuning value (finetune.rank) edited in a reloaded `inputs` echo is the user's: taken,
    and no longer listed as derived; the others stay derived (issue 32 items 2-3)."""
    doc = _json(["estimate", "--model", "qwen3-4b", "--hardware", "dgx-spark", "--finetune", "lora", "--devices", "8"])
    assert doc is not None and "finetune.rank" in doc["inputs"]["derived"]
    inputs = dict(doc["inputs"], finetune=dict(doc["inputs"]["finetune"], rank=2 * doc["inputs"]["finetune"]["rank"]))
    path = tmp_path / "inputs.yaml"
    path.write_text(json.dumps(inputs))
    again = _json(["estimate", "--config", str(path)])
    assert again is not None
    assert again["inputs"]["finetune"]["rank"] == inputs["finetune"]["rank"]
    assert "finetune.rank" not in again["inputs"]["derived"]
    assert "finetune.alpha" in again["inputs"]["derived"]
    assert again["memory"]["per_device_bytes"] > doc["memory"]["per_device_bytes"]    # a larger adapter


def _table_number(pattern: str, text: str) -> tuple[float, float, str]:
    """(the number, half a unit of its last printed digit, its unit) of the first match."""
    found = re.search(pattern, text)
    assert found, (pattern, text[:2000])
    digits = found.group(1).replace(",", "")
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    return float(digits), 0.5 * 10.0 ** -decimals, found.group(2)


SECONDS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "min": 60.0, "h": 3600.0}


@_settings(25)
@given(args=job_args())
def test_the_table_prints_the_jsons_step_time_and_memory(args):
    doc = _json(["estimate", *args])
    assume(doc is not None)
    code, table = _cli(["estimate", *args])
    assert code == 0
    step, half, unit = _table_number(r"Step: ([\d.,]+) (\w+)", table)
    assert abs(step - doc["step"]["time_s"] / SECONDS[unit]) <= half * (1 + 1e-6), (step, unit, doc["step"]["time_s"])
    gib, half, _ = _table_number(r"Memory per device: ([\d.,]+) (GiB)", table)
    assert abs(gib - doc["memory"]["per_device_bytes"] / 2**30) <= half * (1 + 1e-6)


@_settings(20)
@given(args=job_args(),
       knob=st.sampled_from([("--seq-len", "1024,2048"), ("--global-batch", None), ("--precision", "bf16,fp8")]))
def test_every_sweep_point_is_the_estimate_of_its_value(args, knob):
    name, values = knob
    if values is None:                  # global batch: the job's and twice it
        gb = int(args[args.index("--global-batch") + 1])
        values = f"{gb},{2 * gb}"
    base = [a for i, a in enumerate(args) if a != name and (i == 0 or args[i - 1] != name)]
    doc = _json(["sweep", *base, name, values])
    assume(doc is not None)
    for point in doc["sweep"]:
        one = _json(["estimate", *base, name, str(point["value"])])
        if point["error"] is not None:
            assert one is None, point
            continue
        assert one is not None
        _same(point, one)


def _plan_args(args: list[str]) -> list[str]:
    """The job's options but the devices (plan and compare take them themselves)."""
    i = args.index("--devices")
    return args[:i] + args[i + 2:]


@_settings(12)
@given(args=job_args())
def test_every_plans_reproduce_line_gives_the_plans_numbers(args):
    devices = args[args.index("--devices") + 1]
    doc = _json(["plan", *_plan_args(args), "--devices", devices, "--top", "3"])
    assume(doc is not None and doc["plans"])
    for plan in doc["plans"]:
        one = _json(["estimate", *_plan_args(args), *plan["estimate_args"]])
        assert one is not None, plan["estimate_args"]
        _same(plan, one)


@_settings(8)
@given(args=job_args(), pair=st.sampled_from([("h100-sxm", "mi300x"), ("b200", "a100-80gb-sxm"), ("tpu-v5p", "gb200")]))
def test_every_compare_entry_is_the_estimate_of_its_plan(args, pair):
    job = _plan_args(args)
    i = job.index("--hardware")
    job = job[:i] + job[i + 2:]
    devices = args[args.index("--devices") + 1]
    doc = _json(["compare", *job, "--hardware", ",".join(pair), "--devices", devices])
    assume(doc is not None)
    for entry in doc["compare"]:
        if not entry["can_run"]:
            continue
        one = _json(["estimate", *job, *entry["plan"]["estimate_args"]])
        assert one is not None, entry["plan"]["estimate_args"]
        _same(entry, one)
