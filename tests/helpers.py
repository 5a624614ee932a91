"""Helpers shared by the CLI tests."""

from __future__ import annotations

import atexit
import functools
import lzma
import os
import shutil
import tempfile
from pathlib import Path


def call_entry(args: list[str], capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the console script's entry point `trainest ARGS`, in process."""
    from trainest.cli import main as entry

    capsys.readouterr()
    try:
        entry.main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    out = capsys.readouterr()
    return code, out.out, out.err


# ----------------------------------------------------------------- the model called with keyword knobs

def job_and_layout(model, hw=None, precision="bf16", attention="flash", *, seq_len=2048.0, global_batch=None,
                   devices_per_node=None, kernels="fused", pipeline_split="even", dp_collectives="hierarchical",
                   micro_batches=None, tp=1.0, pp=1.0, dp=1.0, cp=1.0, vpp=1.0, micro_batch=1.0, zero=0.0, sp=0.0,
                   recompute=0.0, tp_overlap=0.0, dp_shard=None, framework="megatron-core", dp_overlap=1.0,
                   ep=1.0, etp=1.0, moe_overlap="none", moe_dispatcher="alltoall", cuda_graphs="none"):
    """(Job, Layout) from keyword knobs (floats or arrays); the global batch may be given as
    micro-batches per step instead (B = m·d·b)."""
    from trainest.catalog import load_hardware
    from trainest.layout import Job, Layout
    hw = hw or load_hardware("h100-sxm")
    if global_batch is None:
        global_batch = (1.0 if micro_batches is None else micro_batches) * dp * micro_batch
    job = Job(model=model, hardware=hw, precision=precision, attention=attention, kernels=kernels,
              seq_len=seq_len, global_batch=global_batch,
              devices_per_node=devices_per_node or hw.devices_per_node, framework=framework,
              moe_dispatcher=moe_dispatcher, cuda_graphs=cuda_graphs)
    layout = Layout(tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp, micro_batch=micro_batch, zero=zero, sp=sp,
                    recompute=recompute, tp_overlap=tp_overlap, dp_shard=dp_shard, pipeline_split=pipeline_split,
                    dp_collectives=dp_collectives, dp_overlap=dp_overlap, ep=ep, etp=etp, moe_overlap=moe_overlap)
    return job, layout


def step_of(model, hw, precision="bf16", attention="flash", **knobs):
    """`step_terms` of keyword knobs (see job_and_layout)."""
    from trainest.step import step_terms
    return step_terms(*job_and_layout(model, hw, precision, attention, **knobs))


def memory_of(model, precision="bf16", **knobs):
    """`memory_per_device` of keyword knobs (see job_and_layout)."""
    from trainest.memory import memory_per_device
    return memory_per_device(*job_and_layout(model, None, precision, knobs.pop("attention", "flash"), **knobs))


def activations_of(model, *, precision="bf16", attention="flash", **knobs):
    """`activation_bytes_per_layer` (kept, re-materialised) of keyword knobs."""
    from trainest.memory import activation_bytes_per_layer
    return activation_bytes_per_layer(*job_and_layout(model, None, precision, attention, **knobs))


# ----------------------------------------------------------------- the vendored shared reference

@functools.lru_cache(maxsize=1)
def reference_dir() -> Path:
    """The shared reference files the importer tests read: $TRAINEST_REFERENCE when set, else the copies
    vendored in tests/reference/*.xz (tools/vendor_reference.py), unpacked once into a temporary folder."""
    given = os.environ.get("TRAINEST_REFERENCE")
    if given:
        return Path(given)
    out = Path(tempfile.mkdtemp(prefix="trainest-reference-"))
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    for packed in sorted((Path(__file__).resolve().parent / "reference").glob("*.xz")):
        (out / packed.stem).write_bytes(lzma.decompress(packed.read_bytes()))
    return out


# ----------------------------------------------------------------- files and runs read once

@functools.cache
def read_yaml(path: Path) -> object:
    """A YAML file's data, parsed once per test session with libyaml's safe loader where installed (the same
    data as yaml.safe_load, ~10x faster on the large runs files); for test inputs, not for what trainest itself
    reads. Callers must not modify the result."""
    import yaml
    return yaml.load(Path(path).read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506


@functools.lru_cache(maxsize=1)
def bundled_runs():
    """`trainest.validate.load_runs()` of the bundled runs files, loaded once for the tests that only read it
    (a LoadedRuns of immutable records). A test of the loader itself, its filters or a changed file calls
    load_runs."""
    from trainest.validate import load_runs
    return load_runs()


def bundled_cases(run_set: str | None = None) -> tuple:
    """The bundled expressible cases (bundled_runs), those of one run set when `run_set` is given: the cases
    `load_runs(run_set=...)` gives, in the same order (load_runs filters on the same `run_set`; the vTrain set's
    equality is checked in test_vtrain_report)."""
    cases = bundled_runs().cases
    return cases if run_set is None else tuple(c for c in cases if c.run_set == run_set)


# ----------------------------------------------------------------- docs/model.md and its chapters

@functools.cache
def model_doc():
    """tools/model_doc.py as a module: its text() is the model documentation, docs/model.md's introduction and
    the chapters it indexes (docs/model/*.md) concatenated; locate(offset) names the file and line of an offset."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("model_doc", Path(__file__).resolve().parent.parent / "tools" /
                                                  "model_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
