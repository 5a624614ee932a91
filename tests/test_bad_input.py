"""Bad input at every boundary: CLI options, scenario YAML (--config), model and hardware YAML given by
path, and the bundled specs. Every case must give exit code 1 (2 for a usage error from the parser),
exactly one `Error: ...` line on stderr naming the key/value/file, no traceback and nothing on stdout.

Each case runs through the typer app (CliRunner, stdout and stderr kept apart) and through the console
script's entry point `trainest.cli.main.main` (which may parse `estimate` options itself, without typer).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
from helpers import call_entry
import yaml
from typer.testing import CliRunner

from trainest.cli import app

REPO = Path(__file__).resolve().parent.parent
H100 = yaml.safe_load((REPO / "specs" / "hardware" / "h100-sxm.yaml").read_text(encoding="utf-8"))
LLAMA = yaml.safe_load((REPO / "specs" / "models" / "llama3-8b.yaml").read_text(encoding="utf-8"))
RUNNER = CliRunner()


def assert_clean_failure(code: int, stdout: str, stderr: str, expected: int, words: tuple[str, ...]) -> None:
    """The contract for bad input: the right exit code, nothing on stdout, one line on stderr, no traceback."""
    assert code == expected, f"exit {code} (wanted {expected}); stderr: {stderr!r}"
    assert stdout == "", f"stdout must be empty on error, got {stdout[:200]!r}"
    assert "Traceback" not in stderr
    if expected == 1:
        lines = stderr.splitlines()
        assert len(lines) == 1, f"want one stderr line, got {lines!r}"
        assert lines[0].startswith("Error: ")
    else:
        assert stderr.strip(), "a usage error must say what is wrong on stderr"
    for word in words:
        assert word in stderr, f"{word!r} not in {stderr!r}"


def invoke(args: list[str], env: dict | None = None) -> tuple[int, str, str]:
    result = RUNNER.invoke(app, args, env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.stdout, result.stderr


def invoke_entry(args: list[str], capsys) -> tuple[int, str, str]:
    """The console script's own entry point, in process (it may bypass typer for `estimate`)."""
    return call_entry(args, capsys)


# ---------------------------------------------------------------- CLI options (argv after `estimate`)
# (id, argv, exit code, words that must appear in the message)
BAD_OPTIONS = [
    ("devices-zero", ["--devices", "0"], 1, ("devices", "0", "at least 1")),
    ("devices-negative", ["--devices", "-4"], 1, ("devices", "-4")),
    ("devices-fraction", ["--devices", "1.5"], 2, ("--devices",)),
    ("devices-nan", ["--devices", "nan"], 2, ("--devices",)),
    ("devices-text", ["--devices", "eight"], 2, ("--devices",)),
    ("devices-absurd", ["--devices", "1" + "0" * 30], 1, ("devices", "absurdly large")),
    ("tp-not-dividing-devices", ["--tp", "3", "--devices", "8"], 1, ("devices=8", "tp·pp·cp", "try 1, 2, 4, 8")),
    ("tp-not-dividing-heads", ["--tp", "3", "--devices", "24"], 1,
     ("tp=3 does not divide heads=32; try 1, 2, 4, 8, 16, 32",)),
    ("tp-zero", ["--tp", "0"], 1, ("tp", "at least 1")),
    ("pp-not-dividing-layers", ["--pp", "5", "--devices", "40"], 1, ("pp=5 does not divide layers=32",)),
    ("cp-not-dividing-seq", ["--cp", "3", "--devices", "24", "--seq-len", "8192"], 1,
     ("cp=3 does not divide seq_len=8192",)),
    ("vpp-without-pp", ["--vpp", "2"], 1, ("vpp=2", "pp > 1")),
    ("dp-collectives-unknown", ["--dp-collectives", "ring"], 2, ("--dp-collectives", "ring", "hierarchical", "flat")),
    ("vpp-not-dividing-stage", ["--pp", "2", "--vpp", "3", "--devices", "8"], 1, ("vpp=3", "layers per stage")),
    ("dp-mismatch", ["--dp", "3", "--devices", "8"], 1, ("does not equal devices=8",)),
    ("zero-stage-4", ["--zero", "4"], 1, ("zero", "4", "at most 3")),
    ("zero-negative", ["--zero", "-1"], 1, ("zero", "-1")),
    ("fsdp-with-zero-2", ["--fsdp", "--zero", "2"], 1, ("fsdp", "zero=2")),
    ("global-batch-not-dividing", ["--global-batch", "7"], 1, ("global_batch=7", "multiple of 8")),
    ("micro-batch-not-dividing", ["--micro-batch", "3", "--global-batch", "16"], 1, ("global_batch=16", "24")),
    ("micro-batch-zero", ["--micro-batch", "0"], 1, ("--micro-batch", "at least 1")),
    ("global-batch-negative", ["--global-batch", "-8"], 1, ("--global-batch", "-8")),
    ("seq-len-zero", ["--seq-len", "0"], 1, ("--seq-len", "at least 1")),
    ("seq-len-absurd", ["--seq-len", "1000000000"], 1, ("--seq-len", "absurdly large")),
    ("precision-missing-fp4", ["--precision", "fp4"], 1, ("h100-sxm", "no fp4 peak", "bf16")),
    ("precision-missing-fp8", ["--hardware", "a100-80gb-sxm", "--precision", "fp8"], 1, ("no fp8 peak",)),
    ("precision-unknown", ["--precision", "int8"], 2, ("--precision",)),
    ("layers-zero", ["--layers", "0"], 1, ("layers", "at least 1")),
    ("hidden-absurd", ["--hidden", "1" + "0" * 30], 1, ("hidden", "absurdly large")),
    ("hidden-not-dividing-heads", ["--hidden", "4097"], 1, ("hidden=4097", "heads=32")),
    ("heads-zero", ["--heads", "0"], 1, ("heads", "at least 1")),
    ("kv-heads-zero", ["--kv-heads", "0"], 1, ("--kv-heads", "at least 1")),
    ("kv-heads-not-dividing", ["--kv-heads", "5"], 1, ("heads=32", "kv_heads=5")),
    ("vocab-zero", ["--vocab", "0"], 1, ("vocab", "at least 1")),
    ("ffn-negative", ["--ffn-hidden", "-1"], 1, ("--ffn-hidden",)),
    ("mlp-unknown", ["--mlp", "relu"], 2, ("--mlp",)),
    ("tokens-zero", ["--tokens", "0"], 1, ("tokens", "greater than 0")),
    ("tokens-negative", ["--tokens", "-5B"], 1, ("tokens",)),
    ("tokens-nan", ["--tokens", "nan"], 1, ("tokens", "nan")),
    ("tokens-inf", ["--tokens", "inf"], 1, ("tokens", "inf")),
    ("tokens-absurd", ["--tokens", "1e30"], 1, ("tokens", "absurdly large")),
    ("tokens-text", ["--tokens", "lots"], 1, ("tokens", "lots", "300B")),
    ("tokens-bad-suffix", ["--tokens", "7X"], 1, ("tokens", "7X")),
    ("tokens-empty", ["--tokens", ""], 1, ("tokens",)),
    ("price-negative", ["--price-per-hour", "-1"], 1, ("--price-per-hour", "-1")),
    ("price-nan", ["--price-per-hour", "nan"], 1, ("--price-per-hour", "finite")),
    ("price-inf", ["--price-per-hour", "inf"], 1, ("--price-per-hour", "finite")),
    ("price-absurd", ["--price-per-hour", "1e30"], 1, ("--price-per-hour", "absurdly large")),
    ("price-text", ["--price-per-hour", "cheap"], 2, ("--price-per-hour",)),
    ("pue-below-one", ["--pue", "0.5"], 1, ("pue", "0.5", ">= 1")),
    ("pue-nan", ["--pue", "nan"], 1, ("pue", "finite")),
    ("pue-absurd", ["--pue", "50"], 1, ("pue", "at most 10")),
    ("max-days-zero", ["--max-days", "0"], 1, ("--max-days", "greater than 0")),
    ("max-days-negative", ["--max-days", "-1"], 1, ("--max-days",)),
    ("max-days-nan", ["--max-days", "nan"], 1, ("--max-days",)),
    ("max-cost-zero", ["--max-cost", "0"], 1, ("--max-cost", "greater than 0")),
    ("max-cost-nan", ["--max-cost", "nan"], 1, ("--max-cost",)),
    ("model-unknown", ["--model", "llama3-8bb"], 1, ("unknown model", "did you mean", "llama3-8b")),
    ("hardware-unknown", ["--hardware", "h100"], 1, ("unknown hardware", "did you mean", "h100-sxm")),
    ("hardware-empty-name", ["--hardware", ""], 1, ("hardware",)),
    ("hardware-prefix-first", ["--hardware", "a100"], 1, ("did you mean 'a100-40gb-sxm' or 'a100-80gb-pcie' or "
                                                          "'a100-80gb-sxm'",)),
    # networks the catalog does not list (issue 11, case 2): a clear refusal with the fix, no placeholder
    ("network-missing-l40s", ["--hardware", "l40s", "--devices", "8", "--zero", "3"], 1,
     ("8 l40s devices span 8 nodes of 1", "no scale-out network", "--devices-per-node 8",
      "system.scale_out_gbit_per_s")),
    ("network-missing-h100-pcie-tp8", ["--hardware", "h100-pcie", "--devices", "8", "--tp", "8"], 1,
     ("span 4 nodes of 2", "--devices-per-node 8")),
    # execution models trainest does not have (issue 11, case 4): one line saying what it does not model
    ("hardware-wafer-scale", ["--hardware", "cerebras-wse-3", "--precision", "fp16", "--devices", "1"], 1,
     ("cerebras-wse-3", "cannot be estimated", "wafer-scale", "DRAM/HBM")),
    ("hardware-dataflow-lpu", ["--hardware", "groq-lpu", "--devices", "1"], 1,
     ("groq-lpu", "cannot be estimated", "dataflow")),
    ("hardware-ipu", ["--hardware", "graphcore-bow", "--devices", "4"], 1, ("graphcore-bow", "cannot be estimated")),
    ("model-name-too-long", ["--model", "a" * 5000], 1, ("unknown model",)),
    ("model-path-too-long", ["--model", "a" * 5000 + ".yaml"], 1, ("model file", "cannot be read")),
    ("model-missing-file", ["--model", "no/such/model.yaml"], 1, ("model file", "does not exist")),
    ("config-missing-file", ["--config", "no-such-scenario.yaml"], 1, ("scenario file", "does not exist")),
    ("unknown-option", ["--gpu", "8"], 2, ("--gpu",)),
    ("missing-value", ["--devices"], 2, ("--devices",)),
    # a repeat count past the unrolled limit was built first: MemoryError (traceback), or 1.2 GB and 15 s
    ("pipeline-layout-huge-repeat", ["--pipeline-layout", "Et*999999999999|L"], 1,
     ("--pipeline-layout", "unrolls to more than 100,000 tokens")),
    ("pipeline-layout-many-repeats", ["--pp", "2", "--devices", "8", "--pipeline-layout", "(t*99999|)*12000"], 1,
     ("--pipeline-layout", "unrolls to more than 100,000 tokens")),
    # DualPipe without a pipeline was accepted, warned as if applied, and estimated as 1F1B
    ("dualpipe-pp-1", ["--pipeline-schedule", "dualpipe", "--pp", "1"], 1,
     ("--pipeline-schedule", "dualpipe needs a pipeline", "pp=1", "even pp")),
    ("dualpipe-pp-default", ["--pipeline-schedule", "dualpipe"], 1, ("--pipeline-schedule", "pp=1")),
    # an adapter option without --finetune: the method is full because none was given, and the message says so
    ("lora-rank-without-finetune", ["--lora-rank", "16"], 1,
     ("--lora-rank", "LoRA/QLoRA adapters only", "full (the default: no fine-tuning method given)", "--finetune")),
]


@pytest.mark.parametrize("args,code,words", [c[1:] for c in BAD_OPTIONS], ids=[c[0] for c in BAD_OPTIONS])
def test_bad_option(args, code, words):
    assert_clean_failure(*invoke(["estimate", *args]), code, words)


@pytest.mark.parametrize("args,code,words", [c[1:] for c in BAD_OPTIONS], ids=[c[0] for c in BAD_OPTIONS])
def test_bad_option_console_entry(args, code, words, capsys):
    assert_clean_failure(*invoke_entry(["estimate", *args], capsys), code, words)


# ------------------------------------------------------------------- files: --config, --model, --hardware

def _mutated(base: dict, path: tuple, value) -> dict:
    """A deep copy of `base` with base[path[0]][path[1]]... set to value (a missing marker deletes it)."""
    doc = copy.deepcopy(base)
    node = doc
    for key in path[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return doc


_DELETE = object()
_DIR = object()
_MISSING = object()

# Raw file contents that are wrong whatever the file is for: (id, content, words).
BAD_FILE_CONTENTS = [
    ("empty", "", ("is empty",)),
    ("only-comment", "# nothing here\n", ("is empty",)),
    ("list", "- 1\n- 2\n", ("must hold a mapping", "list")),
    ("scalar", "42\n", ("must hold a mapping", "int")),
    ("string", "hello\n", ("must hold a mapping", "str")),
    ("python-object-tag", "model: !!python/object/apply:os.system ['echo hacked']\n", ("not valid YAML", "constructor")),
    ("python-name-tag", "!!python/name:os.system\n", ("not valid YAML",)),
    ("unknown-alias", "model: *nowhere\n", ("not valid YAML", "line 1")),
    ("bad-indent", "a: 1\n  b: 2\n", ("not valid YAML", "line")),
    ("tab-indent", "a:\n\tb: 2\n", ("not valid YAML", "line 2")),
    ("nul-byte", "a: 1\x00\n", ("not valid YAML",)),
    ("huge-int", "devices: " + "9" * 5000 + "\n", ("number too long",)),
    ("deep-nesting", "a: " + "[" * 3000 + "]" * 3000 + "\n", ("nest",)),   # PyYAML's depth limit or ours
    ("binary", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", ("not UTF-8",)),
    ("utf16", "devices: 8\n".encode("utf-16"), ("not UTF-8",)),
    ("missing", _MISSING, ("does not exist",)),
    ("directory", _DIR, ("is a directory",)),
]


def _write(tmp_path: Path, name: str, content) -> str:
    path = tmp_path / name
    if content is _DIR:
        path.mkdir()
    elif content is _MISSING:
        pass
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_text(yaml.safe_dump(content, sort_keys=False), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("option,what", [("--config", "scenario"), ("--model", "model"), ("--hardware", "hardware")])
@pytest.mark.parametrize("content,words", [c[1:] for c in BAD_FILE_CONTENTS], ids=[c[0] for c in BAD_FILE_CONTENTS])
def test_bad_file(tmp_path, option, what, content, words):
    path = _write(tmp_path, "input.yaml", content)
    code, out, err = invoke(["estimate", option, path])
    assert_clean_failure(code, out, err, 1, (f"{what} file", *words))
    assert "input.yaml" in err, "the message must name the file"


# Scenario YAML (--config) with bad values: (id, mapping, words).
GOOD_SCENARIO = {"model": "llama3-8b", "hardware": "h100-sxm", "devices": 8, "parallel": {"tp": 2, "zero": 1},
                 "micro_batch": 1, "global_batch": 16, "recompute": "selective"}
BAD_SCENARIOS = [
    ("unknown-key", _mutated(GOOD_SCENARIO, ("global_bach",), 16), ("unknown key 'global_bach'", "did you mean",
                                                                     "global_batch")),
    ("unknown-parallel-key", _mutated(GOOD_SCENARIO, ("parallel", "tensor"), 2), ("parallel", "unknown key 'tensor'")),
    ("dp-collectives-unknown", _mutated(GOOD_SCENARIO, ("parallel", "dp_collectives"), "tree"),
     ("parallel.dp_collectives", "'tree'", "hierarchical", "flat")),
    ("kernels-unknown", _mutated(GOOD_SCENARIO, ("kernels",), "compiled"), ("kernels", "'compiled'", "fused", "eager")),
    ("parallel-not-mapping", _mutated(GOOD_SCENARIO, ("parallel",), 4), ("parallel", "expected a mapping")),
    ("parallel-false", _mutated(GOOD_SCENARIO, ("parallel",), False), ("parallel", "expected a mapping")),
    ("parallel-list", _mutated(GOOD_SCENARIO, ("parallel",), [2, 1]), ("parallel", "expected a mapping")),
    ("devices-list", _mutated(GOOD_SCENARIO, ("devices",), [8]), ("devices", "[8]", "not a whole number")),
    ("devices-string", _mutated(GOOD_SCENARIO, ("devices",), "8"), ("devices", "'8'", "not a whole number")),
    ("devices-bool", _mutated(GOOD_SCENARIO, ("devices",), True), ("devices", "True")),
    ("devices-fraction", _mutated(GOOD_SCENARIO, ("devices",), 7.5), ("devices", "7.5", "not a whole number")),
    ("devices-nan", _mutated(GOOD_SCENARIO, ("devices",), float("nan")), ("devices", "nan")),
    ("devices-inf", _mutated(GOOD_SCENARIO, ("devices",), float("inf")), ("devices", "inf")),
    ("devices-1e30", _mutated(GOOD_SCENARIO, ("devices",), 1e30), ("devices", "absurdly large")),
    ("devices-zero", _mutated(GOOD_SCENARIO, ("devices",), 0), ("devices", "at least 1")),
    ("tp-string", _mutated(GOOD_SCENARIO, ("parallel", "tp"), "two"), ("parallel.tp", "'two'")),
    ("tp-fraction", _mutated(GOOD_SCENARIO, ("parallel", "tp"), 2.5), ("parallel.tp", "2.5")),
    ("tp-mapping", _mutated(GOOD_SCENARIO, ("parallel", "tp"), {"size": 2}), ("parallel.tp",)),
    ("sp-string", _mutated(GOOD_SCENARIO, ("parallel", "sequence_parallel"), "yes"),
     ("sequence_parallel", "true or false")),
    ("recompute-unknown", _mutated(GOOD_SCENARIO, ("recompute",), "partial"), ("recompute", "'partial'",
                                                                              "none, selective, full, op")),
    ("recompute-typo", _mutated(GOOD_SCENARIO, ("recompute",), "ful"), ("did you mean 'full'",)),
    ("recompute-bool", _mutated(GOOD_SCENARIO, ("recompute",), True), ("recompute", "True")),
    ("precision-list", _mutated(GOOD_SCENARIO, ("precision",), ["bf16"]), ("precision",)),
    ("attention-unknown", _mutated(GOOD_SCENARIO, ("attention",), "sparse"), ("attention", "flash, flash2, standard")),
    ("model-list", _mutated(GOOD_SCENARIO, ("model",), ["llama3-8b"]), ("model", "preset name")),
    ("model-number", _mutated(GOOD_SCENARIO, ("model",), 8), ("model",)),
    ("model-mapping-missing-key", _mutated(GOOD_SCENARIO, ("model",), {"layers": 2, "hidden": 64, "heads": 4}),
     ("missing required keys 'ffn_hidden', 'vocab'",)),      # every key missing, at once
    ("model-mapping-1e30-layers", _mutated(GOOD_SCENARIO, ("model",), {
        "layers": 1e30, "hidden": 4096, "ffn_hidden": 16384, "heads": 32, "vocab": 50000}), ("layers", "absurdly large")),
    ("hardware-list", _mutated(GOOD_SCENARIO, ("hardware",), [1, 2]), ("hardware", "must be text")),
    ("tokens-list", _mutated(GOOD_SCENARIO, ("tokens",), [300]), ("tokens", "[300]")),
    ("tokens-huge-int", _mutated(GOOD_SCENARIO, ("tokens",), 10**400), ("tokens", "finite")),
    ("tokens-negative", _mutated(GOOD_SCENARIO, ("tokens",), -1), ("tokens", "greater than 0")),
    ("price-string", _mutated(GOOD_SCENARIO, ("price_per_hour",), "3 dollars"), ("price_per_hour", "not a number")),
    ("pue-zero", _mutated(GOOD_SCENARIO, ("pue",), 0), ("pue",)),
    ("global-batch-not-dividing", _mutated(GOOD_SCENARIO, ("global_batch",), 6), ("global_batch=6", "multiple of 4")),
    ("key-not-string", {**GOOD_SCENARIO, 3: "x"}, ("key 3 is not a string",)),
]


@pytest.mark.parametrize("mapping,words", [c[1:] for c in BAD_SCENARIOS], ids=[c[0] for c in BAD_SCENARIOS])
def test_bad_scenario_file(tmp_path, mapping, words):
    path = _write(tmp_path, "scenario.yaml", mapping)
    code, out, err = invoke(["estimate", "--config", path])
    assert_clean_failure(code, out, err, 1, ("scenario", "scenario.yaml", *words))


def test_good_scenario_file_is_accepted(tmp_path):
    """The baseline the bad scenarios are mutated from is itself valid (so each case tests one defect)."""
    code, out, err = invoke(["estimate", "--config", _write(tmp_path, "scenario.yaml", GOOD_SCENARIO), "--json"])
    assert code == 0, err


def test_yaml_anchors_are_expanded_safely(tmp_path):
    """Anchors and aliases are plain YAML and work; a recursive alias is rejected cleanly."""
    good = "common: &p {tp: 2, zero: 1}\n"
    path = tmp_path / "anchors.yaml"
    path.write_text("parallel: &p {tp: 2, zero: 1}\nmodel: llama3-8b\ndevices: 8\nglobal_batch: 16\n", encoding="utf-8")
    code, out, err = invoke(["estimate", "--config", str(path), "--json"])
    assert code == 0, err
    path.write_text(good + "model: llama3-8b\n", encoding="utf-8")
    assert_clean_failure(*invoke(["estimate", "--config", str(path)]), 1, ("unknown key 'common'",))
    path.write_text("parallel: &p {tp: *p}\n", encoding="utf-8")
    assert_clean_failure(*invoke(["estimate", "--config", str(path)]), 1, ("parallel.tp",))
    path.write_text("model: &m [*m]\n", encoding="utf-8")
    assert_clean_failure(*invoke(["estimate", "--config", str(path)]), 1, ("model",))


# Model YAML by path (--model FILE) and hardware YAML by path (--hardware FILE).
BAD_MODELS = [
    ("unknown-key", _mutated(LLAMA, ("hiden",), 4096), ("unknown key 'hiden'", "did you mean", "hidden")),
    ("missing-layers", _mutated(LLAMA, ("layers",), _DELETE), ("missing required key 'layers'",)),
    ("layers-zero", _mutated(LLAMA, ("layers",), 0), ("layers", "at least 1")),
    ("layers-negative", _mutated(LLAMA, ("layers",), -32), ("layers", "-32")),
    ("layers-fraction", _mutated(LLAMA, ("layers",), 31.5), ("layers", "31.5")),
    ("layers-1e30", _mutated(LLAMA, ("layers",), 1e30), ("layers", "absurdly large")),
    ("hidden-nan", _mutated(LLAMA, ("hidden",), float("nan")), ("hidden", "nan")),
    ("hidden-inf", _mutated(LLAMA, ("hidden",), float("inf")), ("hidden", "inf")),
    ("hidden-string", _mutated(LLAMA, ("hidden",), "4k"), ("hidden", "'4k'")),
    ("hidden-list", _mutated(LLAMA, ("hidden",), [4096]), ("hidden", "[4096]")),
    ("kv-heads-zero", _mutated(LLAMA, ("kv_heads",), 0), ("kv_heads", "at least 1")),
    ("kv-heads-not-dividing", _mutated(LLAMA, ("kv_heads",), 5), ("heads=32", "kv_heads=5")),
    ("seq-len-zero", _mutated(LLAMA, ("seq_len",), 0), ("seq_len", "at least 1")),
    ("mlp-unknown", _mutated(LLAMA, ("mlp",), "relu"), ("mlp", "gelu, swiglu")),
    ("tied-string", _mutated(LLAMA, ("tied_embeddings",), "no"), ("tied_embeddings", "true or false")),
]
BAD_HARDWARE = [
    ("unknown-key", _mutated(H100, ("power_watts",), 700), ("unknown key 'power_watts'", "did you mean", "power_w")),
    ("missing-memory", _mutated(H100, ("memory",), _DELETE), ("missing required key 'memory'",)),
    # a missing mapping's own required keys in the same line (a hand-written file needs no second round); a
    # missing efficiency block is the prior of a device without runs (tests/test_hardware_prior.py)
    ("missing-system", _mutated(H100, ("system",), _DELETE),
     ("missing required key 'system'", "system needs devices_per_node", "intra_node")),
    ("fitted-block-without-gemm", _mutated(H100, ("efficiency", "gemm"), _DELETE), ("efficiency.fitted: true", "gemm")),
    ("gemm-above-one", _mutated(H100, ("efficiency", "gemm"), 1.5), ("efficiency.gemm", "(0, 1]")),
    ("gemm-zero", _mutated(H100, ("efficiency", "gemm"), 0), ("efficiency.gemm", "> 0")),
    ("peak-nan", _mutated(H100, ("peak_tflops", "bf16"), float("nan")), ("peak_tflops.bf16", "finite")),
    ("peak-negative", _mutated(H100, ("peak_tflops", "bf16"), -989), ("peak_tflops.bf16", "-989")),
    ("peak-string", _mutated(H100, ("peak_tflops", "bf16"), "989 TFLOPS"), ("peak_tflops.bf16", "not a number")),
    ("peak-unknown-precision", _mutated(H100, ("peak_tflops", "int4"), 100), ("peak_tflops", "unknown key 'int4'")),
    ("no-peaks", _mutated(H100, ("peak_tflops",), {p: None for p in ("fp32", "bf16")}), ("at least one precision",)),
    ("capacity-zero", _mutated(H100, ("memory", "capacity_gb"), 0), ("memory.capacity_gb", "> 0")),
    ("bandwidth-inf", _mutated(H100, ("memory", "bandwidth_gb_per_s"), float("inf")), ("bandwidth_gb_per_s", "finite")),
    ("devices-per-node-fraction", _mutated(H100, ("system", "devices_per_node"), 7.5), ("devices_per_node", "7.5")),
    ("scale-up-domain-zero", _mutated(H100, ("system", "scale_up_domain"), 0), ("scale_up_domain", "at least 1")),
    ("latency-negative", _mutated(H100, ("system", "scale_up_latency_us"), -3), ("scale_up_latency_us", "-3")),
    ("efficiency-list", _mutated(H100, ("efficiency",), [0.8]), ("efficiency", "expected a mapping")),
    ("host-per-micro-batch-negative", _mutated(H100, ("efficiency", "host_ms_per_micro_batch"), -2),
     ("efficiency.host_ms_per_micro_batch", "-2")),
]


@pytest.mark.parametrize("doc,words", [c[1:] for c in BAD_MODELS], ids=[c[0] for c in BAD_MODELS])
def test_bad_model_file(tmp_path, doc, words):
    path = _write(tmp_path, "model.yaml", doc)
    assert_clean_failure(*invoke(["estimate", "--model", path]), 1, ("model.yaml", *words))


@pytest.mark.parametrize("doc,words", [c[1:] for c in BAD_HARDWARE], ids=[c[0] for c in BAD_HARDWARE])
def test_bad_hardware_file(tmp_path, doc, words):
    path = _write(tmp_path, "hw.yaml", doc)
    assert_clean_failure(*invoke(["estimate", "--hardware", path]), 1, ("hw.yaml", *words))


def test_baseline_model_and_hardware_files_are_accepted(tmp_path):
    code, _, err = invoke(["estimate", "--model", _write(tmp_path, "model.yaml", LLAMA),
                           "--hardware", _write(tmp_path, "hw.yaml", H100), "--json"])
    assert code == 0, err


def test_bundled_specs_all_load():
    """Every bundled hardware and model file passes the same validation as a user's file."""
    from trainest import catalog
    for name in catalog.hardware_names():
        assert catalog.load_hardware(name).memory_bytes > 0
    for name in catalog.model_names():
        assert catalog.load_model(name).params > 0


# ------------------------------------------------------------------------- does not fit (not an error)

def test_model_too_large_for_any_plan_reports_does_not_fit():
    """A model whose weights alone exceed the total memory of all devices: a clean result (exit 0) with
    fits=false in JSON and a warning on stderr; --require-fit turns it into exit 3 naming the gate."""
    import json
    big = ["estimate", "--model", "gpt3-175b", "--devices", "8", "--fsdp", "--recompute", "full", "--json"]
    code, out, err = invoke(big)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["memory"]["fits"] is False
    assert doc["memory"]["per_device_bytes"] > doc["memory"]["capacity_bytes"]
    assert "does not fit" in err and "Traceback" not in err
    code, out, err = invoke([*big, "--require-fit"])
    assert code == 3
    assert json.loads(out)["memory"]["fits"] is False, "results still go to stdout when a gate fails"
    assert "--require-fit" in err


@pytest.mark.skipif(os.name != "posix", reason="relies on POSIX permissions")
def test_unreadable_file(tmp_path):
    path = tmp_path / "secret.yaml"
    path.write_text("devices: 8\n", encoding="utf-8")
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running as a user who can read any file (root)")
        assert_clean_failure(*invoke(["estimate", "--config", str(path)]), 1, ("cannot be read",))
    finally:
        path.chmod(0o600)


def test_a_fit_hint_is_a_valid_scenario(capsys):
    """`--ep 8` on 8 devices that does not fit suggested `--pp 2`, after which ep 8 no longer divides a
    stage's 4 ranks (exit 1). Every suggested change is now checked as a scenario; offload is suggested
    where the host can take it; the fastest-plan words name the expert-parallel size they change."""
    from helpers import call_entry
    code, out, err = call_entry(["estimate", "--model", "qwen3-30b-a3b", "--devices", "8", "--ep", "8",
                                 "--global-batch", "512"], capsys)
    import re
    words = " ".join(out.splitlines()[0].split())       # the advice leads the tables (issue 36)
    assert code == 0 and "--pp 2" not in words.split("fits with one change:")[1].split(";")[0]
    assert "--offload optimizer" in words and re.search(r" ep \d+ ", words)     # the words name ep


@pytest.mark.parametrize(("hardware", "framework"), [("tpu-v5p", "megatron-core"), ("h100-sxm", "mlx"),
                                                     ("apple-m2-ultra", "torchtitan"), ("tpu-v5p", "deepspeed")])
def test_a_framework_on_hardware_it_does_not_run_on_is_one_error(hardware, framework, capsys):
    """Megatron on a TPU, MLX on an H100, torchtitan on Apple silicon ran without a word (issue 12: a
    framework that cannot run what is asked is an error that says so); the defaults still run."""
    from helpers import call_entry
    code, out, err = call_entry(["estimate", "--hardware", hardware, "--devices", "1", "--framework", framework],
                                capsys)
    assert (code, out) == (1, "") and err.count("\n") == 1
    assert f"{framework} does not run on {hardware}" in err and "frameworks that do:" in err
    code, out, err = call_entry(["estimate", "--hardware", hardware, "--devices", "1", "--json"], capsys)
    assert code == 0


def test_no_fit_on_a_node_without_a_network_says_so_plainly(tmp_path, capsys):
    """4 GPUs without a scale-out network that do not fit: the warning pasted the 8-device network error
    into "no layout fits on up to 4 devices"; and 256 PCIe cards were told to "give --devices-per-node 256"."""
    from helpers import call_entry
    code, out, err = call_entry(["estimate", "--model", "llama2-13b", "--hardware", "rtx-4090", "--devices", "4",
                                 "--devices-per-node", "4", "--seq-len", "2048", "--global-batch", "16"], capsys)
    words = " ".join(out.splitlines()[0].split())   # the no-fit advice leads the tables (issue 36)
    assert code == 0 and "no layout fits on up to 4 devices, and 8 would need a path between nodes" in words
    assert "span 2 nodes" not in words
    code, out, err = call_entry(["estimate", "--hardware", "l4", "--devices", "256"], capsys)
    assert code == 1 and "--devices-per-node 256" not in err


@pytest.mark.parametrize(("args", "words"), [
    (["--framework", "hf-accelerate", "--recompute", "selective"], "selective is not a recompute mode of hf-accelerate"),
    (["--framework", "deepspeed", "--tp", "2", "--tp-overlap"], "deepspeed does not pipeline its TP collectives"),
    (["--framework", "megatron-core", "--recompute", "op"], "op is not a recompute mode of megatron-core"),
])
def test_a_recompute_or_overlap_the_framework_lacks_is_one_error(args, words, capsys):
    """Megatron's selective recompute under the Hugging Face Trainer, TE's TP overlap under DeepSpeed ran
    without a word; a framework's default recompute is its own (the Trainer: none, torchtitan: op)."""
    import json

    from helpers import call_entry
    code, out, err = call_entry(["estimate", *args], capsys)
    assert (code, out) == (1, "") and words in " ".join(err.split())
    for framework, default in (("hf-accelerate", "none"), ("torchtitan", "op"), ("megatron-core", "selective")):
        code, out, err = call_entry(["estimate", "--framework", framework, "--json"], capsys)
        assert code == 0 and json.loads(out)["inputs"]["recompute"] == default


@pytest.mark.parametrize(("args", "words"), [
    (["estimate", "--config", ""], ("scenario file '' is an empty name",)),
    (["plan", "--config", ""], ("scenario file '' is an empty name",)),
    (["compare", "--hardware", "h100-sxm,b200", "--config", ""], ("scenario file '' is an empty name",)),
    (["sweep", "--devices", "8..16", "--config", ""], ("scenario file '' is an empty name",)),
    (["plan", "--hardware", ""], ("--hardware ''", "names no hardware")),
    (["plan", "--hardware", " , "], ("--hardware ' , '", "names no hardware")),
    (["plan", "--devices", ""], ("--devices ''", "is not a number")),
    (["compare", "--hardware", "h100-sxm,b200", "--devices", ""], ("--devices ''", "is not a number")),
    (["sweep", "--devices", "8..16", "--png", ""], ("--png ''", "empty file name")),
    (["sweep", "--devices", "8..16", "--svg", " "], ("--svg ' '", "empty file name")),
], ids=lambda v: "-".join(v) if isinstance(v, list) else None)
def test_a_blank_value_is_refused_not_dropped(args, words, capsys):
    """`--config ''`, `plan --hardware ''`, `plan --devices ''` and `sweep --png ''` were taken as not given
    (the default scenario, hardware and device count; no figure) and exited 0."""
    assert_clean_failure(*invoke([*args, "--quiet"] if args[0] != "estimate" else args), 1, words)
    assert_clean_failure(*invoke_entry(args, capsys), 1, words)
