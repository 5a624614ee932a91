"""trainest.scenario: defaults, the `derived` record, and every divisibility rule with its message."""

from __future__ import annotations

import pytest

from trainest.errors import SpecError
from trainest.scenario import DEFAULT_PUE, DEFAULT_TOKENS_PER_PARAM, DEFAULT_TOKENS_PER_STEP, scenario_from_mapping


def make(**data):
    return scenario_from_mapping(data, "test")


# ------------------------------------------------------------------------------------------ defaults

def test_dp_is_derived_from_the_devices():
    s = make(model="gpt3-13b", hardware="a100-80gb-sxm", devices=64, parallel={"tp": 8, "pp": 2})
    assert s.parallel.dp == 4
    assert s.parallel.devices == s.devices == 64
    assert "parallel.dp" in s.derived


def test_devices_are_derived_from_dp():
    s = make(model="gpt3-13b", parallel={"tp": 2, "dp": 3})
    assert s.devices == 6
    assert "devices" in s.derived and "parallel.dp" not in s.derived


def test_global_batch_defaults_to_half_a_million_tokens_in_whole_multiples_of_dp_times_micro_batch():
    s = make(model="gpt3-1.3b", devices=16, micro_batch=2)          # seq 2048: 256 sequences = 0.5M tokens
    assert s.global_batch == DEFAULT_TOKENS_PER_STEP // 2048 == 256
    assert s.micro_batches == 256 // 32
    assert "global_batch" in s.derived and "micro_batch" not in s.derived
    assert make(model="gpt3-1.3b", devices=512).global_batch == 512                # rounded up to d·b
    assert make(model="gpt3-1.3b", devices=8, parallel={"pp": 4, "vpp": 2}).micro_batches % 4 == 0


def test_micro_batches_and_tokens_per_step():
    s = make(model="gpt3-1.3b", devices=16, parallel={"pp": 2}, micro_batch=2, global_batch=64, seq_len=1024)
    assert s.micro_batches == 64 // (8 * 2)
    assert s.tokens_per_step == 64 * 1024


def test_given_values_are_not_marked_derived():
    s = make(model="gpt3-1.3b", hardware="h100-sxm", devices=8, precision="bf16", global_batch=8, recompute="full",
             pue=1.3, tokens="1B", parallel={"tp": 1, "zero": 1})
    for key in ("model", "hardware", "devices", "precision", "global_batch", "recompute", "pue", "tokens",
                "parallel.tp", "parallel.zero"):
        assert key not in s.derived
    for key in ("seq_len", "micro_batch", "attention", "parallel.pp", "parallel.dp"):
        assert key in s.derived


def test_documented_defaults():
    s = make(model="gpt3-1.3b")
    assert s.devices == 8 and s.precision == "bf16" and s.recompute == "selective" and s.attention == "flash"
    assert s.parallel.zero == 3 and s.micro_batch == 1
    assert s.seq_len == s.model.seq_len
    assert s.tokens == pytest.approx(DEFAULT_TOKENS_PER_PARAM * s.model.params)
    assert s.pue == DEFAULT_PUE
    assert s.price_usd_per_hour == s.hardware.price_usd_per_hour
    assert make(model="gpt3-1.3b", parallel={"pp": 2}).parallel.zero == 1     # distributed optimizer with PP
    assert make(model="gpt3-1.3b", parallel={"tp": 4, "pp": 4}).devices == 16  # the layout needs 16


def test_tokens_accept_human_counts():
    assert make(model="gpt3-1.3b", tokens="300B").tokens == 300e9


def test_fsdp_means_zero_3():
    assert make(model="gpt3-1.3b", parallel={"fsdp": True}).parallel.zero == 3


def test_run_only_keys_are_accepted_and_ignored():
    s = make(model="gpt3-1.3b", id="x", source="paper", measured={"step_s": 1.0}, notes="n")
    assert s.model.name == "gpt3-1.3b"


def test_model_given_as_a_mapping():
    s = make(model={"layers": 2, "hidden": 64, "ffn_hidden": 256, "heads": 4, "vocab": 100}, devices=1)
    assert s.model.layers == 2


def test_one_default_scenario_with_or_without_options():
    """Issue 11, case 8: a bare `trainest estimate` and one that names the default model (or only the
    tokens) are the same scenario (before: ZeRO-3, selective, B = 64 without options; ZeRO 0, no
    recompute, B = 8 and 'DOES NOT FIT' with any)."""
    bare = scenario_from_mapping({}, "options")
    for given in ({"model": "llama3-8b"}, {"tokens": "1.5T"}, {"hardware": "h100-sxm", "devices": 8}):
        s = scenario_from_mapping(given, "options")
        assert (s.parallel.zero, s.recompute, s.micro_batch, s.global_batch, s.devices) == \
            (bare.parallel.zero, bare.recompute, bare.micro_batch, bare.global_batch, bare.devices) == \
            (3, "selective", 1, 64, 8)
    assert {"model", "hardware", "devices", "parallel.zero", "global_batch", "recompute"} <= set(bare.derived)


# ------------------------------------------------------------------------------------------- errors

@pytest.mark.parametrize("data, message", [
    ({"devices": 12, "parallel": {"tp": 8}}, r"devices=12 is not divisible by tp·pp·cp"),
    ({"devices": 16, "parallel": {"tp": 8, "dp": 4}}, r"does not equal devices=16"),
    ({"devices": 24, "parallel": {"tp": 3}}, r"tp=3 does not divide heads=16; try 1, 2, 4, 8, 16"),
    ({"devices": 5, "parallel": {"pp": 5}}, r"pp=5 does not divide layers=24"),
    ({"devices": 8, "parallel": {"vpp": 2}}, r"vpp=2 needs pipeline parallelism"),
    ({"devices": 8, "parallel": {"pp": 8, "vpp": 2}}, r"vpp=2 does not divide layers per stage"),
    ({"devices": 8, "parallel": {"pp": 4, "vpp": 2}, "global_batch": 2},
     r"interleaved schedule \(vpp=2\) needs .* m = global_batch/\(dp·micro_batch\) = 2/\(2·1\) = 1, to be a "
     r"multiple of pp=4.*multiple of dp·micro_batch·pp = 8"),
    ({"devices": 9, "seq_len": 1000, "parallel": {"cp": 3}}, r"cp=3 does not divide seq_len=1000"),
    ({"devices": 8, "attention": "standard", "parallel": {"cp": 2}},
     r"cp=2 with attention standard: megatron-core's context parallelism runs fused attention kernels only.*"
     r"use attention flash or flash2, or cp 1"),
    ({"devices": 8, "attention": "standard", "framework": "torchtitan", "parallel": {"cp": 2}},
     r"cp=2 with attention standard: torchtitan's context parallelism"),
    # the knobs that name a device kernel (checks.check_device_knobs)
    ({"devices": 8, "hardware": "h100-sxm", "precision": "fp8", "attention": "flash2", "fp8_attention": True},
     r"fp8_attention: true runs the fused attention kernel's FP8 path .* attention is flash2: FlashAttention-2 has "
     r"16-bit kernels only; allowed with it: attention flash"),
    ({"devices": 8, "hardware": "h100-sxm", "precision": "fp8", "attention": "standard", "fp8_attention": True},
     r"attention is standard: the materialised softmax of standard attention has no FP8 path"),
    ({"devices": 8, "hardware": "tpu-v5p", "cuda_graphs": "full"},
     r"cuda_graphs: full replays captured CUDA kernels, and maxtext compiles the step into one XLA program; "
     r"allowed here: none"),
    ({"devices": 8, "hardware": "tpu-v5p", "framework": "hf-accelerate", "cuda_graphs": "partial"},
     r"cuda_graphs: partial replays captured CUDA kernels, and tpu-v5p is a tpu, not a GPU"),
    ({"devices": 8, "hardware": "tpu-v5p", "kernels": "eager"},
     r"kernels: eager runs each element-wise operator as a kernel of its own, and maxtext compiles the step into "
     r"one XLA program, which fuses them; allowed here: fused"),
    ({"devices": 8, "hardware": "gaudi3", "attention": "flash2"},
     r"attention: flash2 is FlashAttention-2, a GPU kernel, and gaudi3 is an asic; allowed here: flash"),
    ({"devices": 8, "attention": "standard", "packed_length": 1024},
     r"packed_length: 1024 with attention standard: megatron-core runs packed sequences through a fused kernel's "
     r"variable-length path only"),
    ({"devices": 8, "global_batch": 12, "micro_batch": 1}, r"global_batch=12 is not divisible by dp·micro_batch"),
    ({"devices": 8, "parallel": {"fsdp": True, "zero": 1}}, r"fsdp means zero=3"),
    ({"devices": 8, "parallel": {"zero": 4}}, r"zero"),
    ({"devices": 8, "recompute": "some"}, r"recompute"),
    ({"devices": 8, "pue": 0.5}, r"pue"),
    ({"devices": 8, "tokens": "lots"}, r"tokens 'lots' is not a number"),
    ({"devices": 8, "gpus": 8}, r"unknown key 'gpus'"),
    ({"devices": 8, "parallel": {"tpp": 2}}, r"unknown key 'tpp'"),
])
def test_invalid_scenarios_raise_one_clear_error(data, message):
    with pytest.raises(SpecError, match=message):
        make(model="gpt3-1.3b", **data)


def test_precision_the_hardware_lacks_lists_what_it_has():
    with pytest.raises(SpecError, match=r"no fp8 peak; it supports: .*bf16"):
        make(model="gpt3-1.3b", hardware="a100-80gb-sxm", precision="fp8")


def test_unknown_model_and_hardware_are_spec_errors():
    with pytest.raises(SpecError, match="unknown model"):
        make(model="gpt-99")
    with pytest.raises(SpecError, match="unknown hardware"):
        make(model="gpt3-1.3b", hardware="h1000")


def test_interleaved_schedule_accepts_micro_batches_that_are_a_multiple_of_pp():
    """Megatron-LM's interleaved schedule runs m = k·p micro-batches; 1F1B (vpp = 1) runs any m."""
    assert make(model="gpt3-1.3b", devices=8, parallel={"pp": 4, "vpp": 2}, global_batch=8).micro_batches == 4
    assert make(model="gpt3-1.3b", devices=8, parallel={"pp": 4}, global_batch=2).micro_batches == 1


@pytest.mark.parametrize("value, expected", [("5%", 0.05 * 81559 * 2**20), ("0", 0.0), ("2GiB", 2 * 2**30), (8e9, 8e9)])
def test_memory_headroom_as_a_share_or_a_size(value, expected):
    s = make(model="gpt3-1.3b", hardware="h100-sxm", memory_headroom=value)
    assert s.memory_headroom_bytes == pytest.approx(expected)


@pytest.mark.parametrize("value, message", [("120%", "below 100%"), ("lots", "not a size"), ("90GB", "whole memory")])
def test_bad_memory_headroom_is_one_clear_error(value, message):
    with pytest.raises(SpecError, match=message):
        make(model="gpt3-1.3b", hardware="h100-sxm", memory_headroom=value)


def test_lora_of_a_hybrid_moe_model_is_refused_with_one_line():
    """Adapters in hybrid Mamba-2 blocks are not modelled: one clear error, not a transformer LoRA's numbers
    (a transformer MoE model's LoRA is modelled: tests/test_finetune_moe.py)."""
    from trainest.errors import SpecError
    from trainest.scenario import scenario_from_mapping
    with pytest.raises(SpecError, match="adapters in hybrid Mamba-2 models are not modelled"):
        scenario_from_mapping({"model": "nemotron-3-nano", "finetune": "lora"}, "test")
    assert scenario_from_mapping({"model": "mixtral-8x7b", "finetune": "lora"}, "test").finetune.method == "lora"


def test_packed_length_beyond_the_sequence_is_one_line_naming_the_sequence():
    """A packed example cannot be longer than the sequence it is packed into."""
    from trainest.errors import SpecError
    from trainest.scenario import scenario_from_mapping
    with pytest.raises(SpecError, match="packed_length: 9000 must be at most the sequence length 8192"):
        scenario_from_mapping({"seq_len": 8192, "packed_length": 9000}, "test")


def test_a_runs_file_given_as_a_scenario_says_which_command_reads_it(tmp_path):
    from trainest.scenario import load_scenario_file
    path = tmp_path / "runs.yaml"
    path.write_text("source: mine\nruns:\n- id: a\n  model: llama3-8b\n")
    with pytest.raises(SpecError, match=r"is a runs file .*`trainest validate --runs "):
        load_scenario_file(str(path))


def test_the_default_precision_is_one_the_hardware_has():
    """bf16 by default; a V100 (no bf16) took bf16 and failed ('has no bf16 peak'), a CPU probe too."""
    from trainest.scenario import scenario_from_mapping
    v100 = scenario_from_mapping({"model": "gpt2-124m", "hardware": "v100-sxm2-32gb"}, "t")
    assert v100.precision == "fp16" and "precision" in v100.derived
    assert scenario_from_mapping({"model": "gpt2-124m", "hardware": "h100-sxm"}, "t").precision == "bf16"
    with pytest.raises(SpecError, match="has no bf16 peak"):      # given, it is not replaced
        scenario_from_mapping({"model": "gpt2-124m", "hardware": "v100-sxm2-32gb", "precision": "bf16"}, "t")


def test_the_default_framework_is_one_that_runs_on_the_hardware():
    """Megatron-Core was the default everywhere, also where it does not run (Apple silicon, TPUs)."""
    from trainest.scenario import scenario_from_mapping
    for hardware, framework in (("h100-sxm", "megatron-core"), ("apple-m4-max", "mlx"), ("tpu-v5p", "maxtext")):
        s = scenario_from_mapping({"model": "gpt2-124m", "hardware": hardware}, "t")
        assert s.framework == framework and "framework" in s.derived, hardware
    given = scenario_from_mapping({"model": "gpt2-124m", "hardware": "tpu-v5p", "framework": "hf-accelerate"}, "t")
    assert given.framework == "hf-accelerate"           # torch_xla; torchtitan on a TPU is refused (test_bad_input)


def test_fsdp_false_means_plain_data_parallel_not_the_default_zero_3():
    """`fsdp: false` is a user's "not FSDP": zero 0 (plain DDP), not the default ZeRO-3, and not derived."""
    s = make(model="gpt3-1.3b", parallel={"fsdp": False})
    assert s.parallel.zero == 0 and "parallel.zero" not in s.derived
    assert make(model="gpt3-1.3b", parallel={"fsdp": False, "zero": 1}).parallel.zero == 1
    assert "parallel.zero" not in make(model="gpt3-1.3b", parallel={"fsdp": True}).derived
    assert "parallel.zero" in make(model="gpt3-1.3b").derived


def test_fsdp_false_with_zero_3_is_a_contradiction():
    with pytest.raises(SpecError, match=r"fsdp: false contradicts zero=3.*allowed with fsdp: false: zero 0, 1 or 2"):
        make(model="gpt3-1.3b", parallel={"fsdp": False, "zero": 3})
    with pytest.raises(SpecError, match="fsdp means zero=3, but zero=2"):
        make(model="gpt3-1.3b", parallel={"fsdp": True, "zero": 2})


def test_standard_attention_keeps_context_parallelism_where_the_framework_is_not_known_to_refuse_it():
    """rules.CP_FUSED_ATTENTION binds only the frameworks whose context parallelism is known to run fused kernels
    alone (Framework.cp_fused_attention): Megatron-Core's local attention asserts a context-parallel size of 1,
    torch's context_parallel replaces only the fused SDPA kernels. Elsewhere standard attention keeps cp > 1, and
    flash attention keeps it everywhere."""
    assert make(model="gpt3-1.3b", devices=8, attention="standard", framework="deepspeed",
                parallel={"cp": 2}).parallel.cp == 2
    assert make(model="gpt3-1.3b", devices=8, attention="flash", parallel={"cp": 2}).parallel.cp == 2


def test_a_gpu_dispatcher_needs_a_gpu_and_cuda_graphs_run_on_any_gpu():
    """DeepEP and HybridEP are GPU kernels: refused on a TPU with one line naming alltoall; CUDA graphs run on
    every GPU (HIP graphs on AMD's) and a GPU superchip."""
    with pytest.raises(SpecError, match=r"moe_dispatcher: deepep is a GPU dispatcher .* tpu-v5p is a tpu; allowed "
                                        r"here: alltoall"):
        make(model="qwen3-30b-a3b", hardware="tpu-v5p", devices=8, moe_dispatcher="deepep")
    for hardware in ("mi300x", "gh200", "h100-sxm"):
        assert make(model="gpt3-1.3b", hardware=hardware, devices=8, cuda_graphs="full").knob("cuda_graphs") == "full"
