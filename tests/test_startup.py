"""Start-up of a single `trainest estimate` (issue 2): what it imports, and that its typer-free fast path
(trainest.cli.main + trainest.cli.argv) behaves exactly like the typer command built from the same table.

Structural checks only (which modules load, what each path prints and returns); the timing itself is
measured by bench/bench_estimate.py, not asserted here (the machine is shared and noisy).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import call_entry

from trainest import catalog, choices
from trainest.cli import argv as options
from trainest.cli import main as entry
from trainest import fields as F
from trainest.cli.argv import parse_estimate_argv
from trainest.knobs import ESTIMATE_OPTIONS

REPO = Path(__file__).resolve().parent.parent

# Never imported by `trainest estimate --json` with bundled specs (the design's guarantee).
HEAVY = ("typer", "click", "pydantic", "rich", "numpy", "yaml", "difflib")

KORTHIKANTI_175B = ["--model", "gpt3-175b", "--hardware", "a100-80gb-sxm", "--gpus", "64", "--tp", "8", "--pp", "8",
                    "--vpp", "3", "--sequence-parallel", "--micro-batch", "1", "--global-batch", "64",
                    "--seq-len", "2048", "--recompute", "selective"]


def imported_modules(*args: str, env: dict | None = None) -> tuple[set[str], subprocess.CompletedProcess]:
    """Top-level package names imported by `python -X importtime -m trainest ARGS`, and the process."""
    full_env = dict(os.environ)
    full_env.pop(entry.NO_FAST_PATH_ENV, None)
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "trainest", *args], capture_output=True,
                          text=True, timeout=120, env=full_env, cwd=REPO)
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names, proc


# ------------------------------------------------------------------------------------------ imports

@pytest.mark.parametrize("args", [["estimate", "--json"], ["estimate", *KORTHIKANTI_175B, "--json"]],
                         ids=["default", "korthikanti-175b"])
def test_single_json_estimate_imports_nothing_heavy(args):
    names, proc = imported_modules(*args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["step"]["time_s"] > 0
    assert {"trainest", "json"} <= names, "importtime output not understood"
    assert not names & set(HEAVY), f"imported on the single-estimate path: {sorted(names & set(HEAVY))}"
    # the records are trainest.record.NamedTuple: dataclasses (and the inspect, ast and dis it imports) is not
    # loaded either (issue 36's start-up)
    assert not names & {"dataclasses", "inspect"}, sorted(names & {"dataclasses", "inspect"})


def test_table_output_needs_rich_only():
    names, proc = imported_modules("estimate", env={"NO_COLOR": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "rich" in names and "Step" in proc.stdout
    assert not names & {"typer", "click", "pydantic", "numpy", "yaml"}


def test_user_yaml_goes_through_yaml_and_other_commands_through_typer(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("model: llama3-8b\ndevices: 16\nparallel: {tp: 2}\n", encoding="utf-8")
    names, proc = imported_modules("estimate", "--config", str(scenario), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "yaml" in names and "typer" not in names
    assert json.loads(proc.stdout)["inputs"]["parallel"]["tp"] == 2
    names, proc = imported_modules("estimate", "--help")
    assert proc.returncode == 0 and "typer" in names and "--gpus" in proc.stdout
    names, proc = imported_modules("estimate", "--json", env={entry.NO_FAST_PATH_ENV: "1"})
    assert proc.returncode == 0 and "typer" in names


def test_console_script_is_the_light_entry_point():
    from importlib.metadata import entry_points
    scripts = [ep for ep in entry_points(group="console_scripts") if ep.name == "trainest"]
    assert scripts, "trainest is not installed (pip install -e .)"
    assert scripts[0].value == "trainest.cli.main:main", "reinstall: pip install -e ."


# ----------------------------------------------------------------------------- fast reader vs typer

def test_option_table_is_the_typer_command():
    """The typer command's options are exactly the table's (so the fast reader knows every flag)."""
    import typer.main

    from trainest.cli import app
    command = typer.main.get_command(app).commands["estimate"]
    typer_flags = {}
    for p in command.params:
        if p.name == "help":
            continue
        for flag in [*p.opts, *p.secondary_opts]:
            typer_flags[flag] = p.name
    table_flags = {flag: o.name for flag, (o, _) in options._flag_table(ESTIMATE_OPTIONS).items()}
    assert typer_flags == table_flags


def test_choice_options_take_their_vocabulary_from_trainest_choices():
    """Each choice option of the table offers exactly its vocabulary's words, and the library's
    checks use the same words (one definition: trainest.choices)."""
    from trainest import hardware, models, scenario
    by_name = {o.name: o for o in ESTIMATE_OPTIONS}
    assert by_name["precision"].choice_values == hardware.PRECISIONS == choices.PRECISIONS
    assert tuple(choices.enum("Precision")) == choices.PRECISIONS
    assert by_name["mlp"].choice_values == models.MLP_KINDS
    assert by_name["recompute"].choice_values == choices.RECOMPUTES == tuple(choices.RECOMPUTE_CODES)
    assert "recompute" in scenario.SCENARIO_KEYS and "parallel" in scenario.SCENARIO_KEYS


@pytest.mark.parametrize("args", [
    ["--help"], ["-h"], ["--bogus"], ["--tp"], ["--tp", "x"], ["--tp", "-1"], ["--tp", "+2"], ["--tp", "2.0"],
    ["--tp", "\u0663"], ["--devices", "1.5"], ["--pue", "1e"], ["--pue", "nan"], ["--pue", "inf"], ["--pue", ".5"],
    ["--pue", "1_0"], ["--precision", "bf17"], ["extra"], ["--", "--json"], ["-n8"],
    ["-qn", "8"], ["--json=1"], ["--json=true"], ["--sequence-parallel=1"], ["--model", "--json"], ["--model"],
    ["--gpu", "8"], ["--model", "-x.yaml"],
])
def test_fast_reader_declines_what_it_cannot_read_like_typer(args):
    assert parse_estimate_argv(args) is None


def test_fast_reader_values():
    v = parse_estimate_argv(["--gpus", "64", "-b", "2", "--global-batch=128", "--precision", "fp8", "--pue", "1.25",
                             "--max-cost", "1e6", "--sequence-parallel", "--tp", "2", "--tp", "8", "-q", "--json",
                             "--model=", "--tokens", "300B"])
    assert v["devices"] == 64 and v["micro_batch"] == 2 and v["global_batch"] == 128 and v["tp"] == 8
    assert v["precision"] == "fp8" and v["pue"] == 1.25 and v["max_cost"] == "1e6" and v["tokens"] == "300B"
    assert v["sequence_parallel"] is True and v["quiet"] is True and v["json_out"] is True and v["model"] == ""
    assert v["hardware"] is None and v["fsdp"] is False and set(v) == {o.name for o in ESTIMATE_OPTIONS}
    assert parse_estimate_argv(["--sequence-parallel", "--no-sequence-parallel"])["sequence_parallel"] is False


def run_entry(args: list[str], capsys, monkeypatch, fast: bool) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `trainest ARGS` through trainest.cli.main.main, in process."""
    if fast:
        monkeypatch.delenv(entry.NO_FAST_PATH_ENV, raising=False)
    else:
        monkeypatch.setenv(entry.NO_FAST_PATH_ENV, "1")
    monkeypatch.setenv("NO_COLOR", "1")
    return call_entry(args, capsys)


SCENARIO_YAML = "model: llama3-8b\nhardware: h100-sxm\ndevices: 16\nparallel: {tp: 2, zero: 1}\nglobal_batch: 64\n"
BOTH_PATHS = [
    ["--model", "llama3.1-405b", "--gpus", "1024", "--tp", "8", "--pp", "8", "--vpp", "4", "--pipeline-split",
     "balanced", "--tp-overlap", "--zero", "1", "--dp-shard", "8", "--global-batch", "512", "--json"],
    ["--attention", "flash2", "--no-tp-overlap", "--json"],
    ["--json"],
    [],
    ["--json", "--quiet"],
    [*KORTHIKANTI_175B, "--json"],
    KORTHIKANTI_175B,
    ["--gpus", "16", "--tp", "2", "--json"],
    ["--devices=16", "--tp=2", "--json"],
    ["-n", "16", "-b", "2", "-B", "64", "--json"],
    ["--precision", "fp8", "--json"],
    ["--precision", "FP8", "--recompute", "Full", "--json"],   # choices are case-insensitive on both paths
    ["--seq-len", "8k", "--global-batch-tokens", "4M", "--json"],
    ["--global-batch", "8", "--global-batch-tokens", "4M"],  # exactly one: exit 1
    ["--seq-len", "3000", "--global-batch-tokens", "4M"],    # not whole sequences: exit 1
    ["--precision", "fp4", "--json"],                       # h100 has no fp4 peak: exit 1
    ["--tp", "3"],                                          # does not divide the devices: exit 1
    ["--model", "llama3-70b", "--require-fit", "--json", "--quiet"],   # CI gate: exit 3
    ["--model", "llama3-70b", "--json"],                    # does not fit: warning
    ["--max-days", "0.001", "--json"],
    ["--max-cost", "0", "--json"],
    ["--max-cost", "1000", "--json"],
    ["--hardware", "a100-80gb-pcie", "--json"],             # no catalog price
    ["--pue", "1.5", "--price-per-hour", "2.5", "--tokens", "300B", "--json"],
    ["--tokens", "lots", "--json"],
    ["--tp", "2", "--sequence-parallel", "--no-sequence-parallel", "--json"],
    ["--tp", "2", "--tp", "4", "--json"],
    ["--gpus", "8", "--devices", "16", "--json"],
    ["--no-sequence-parallel", "--json"],
    ["--model=", "--json"],
    ["--tokens=1.5T", "--json", "--json", "-q", "-q"],
    ["--layers", "4", "--hidden", "512", "--heads", "8", "--ffn-hidden", "2048", "--vocab", "1000", "--mlp", "gelu",
     "--json"],
    ["--recompute", "full", "--attention", "standard", "--fsdp", "--json"],
    ["--fsdp", "--zero", "1"],
    ["--model", "lama3-8b"],                                # did you mean
    ["--hardware", "specs/hardware/h100-sxm.yaml", "--json"],
    ["--model", "specs/models/llama3-8b.yaml", "--seq-len", "4096", "--json"],
    ["--config", "{scenario}", "--json"],
    ["--config", "{scenario}", "--devices", "32", "--json"],
    ["--config", "does-not-exist.yaml"],
]
DECLINED = [["--tp", "x"], ["--bogus"], ["--precision", "bf17"], ["--json=1"], ["extra"]]   # typer answers on both


@pytest.mark.parametrize("args", BOTH_PATHS + DECLINED, ids=lambda a: " ".join(a)[:60] or "(none)")
def test_fast_path_and_typer_path_agree(args, capsys, monkeypatch, tmp_path):
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO_YAML, encoding="utf-8")
    args = [a.replace("{scenario}", str(scenario)) for a in args]
    assert (parse_estimate_argv(args) is None) == (args in DECLINED)   # the fast path is really taken
    monkeypatch.chdir(REPO)
    fast = run_entry(["estimate", *args], capsys, monkeypatch, fast=True)
    slow = run_entry(["estimate", *args], capsys, monkeypatch, fast=False)
    assert fast == slow
    assert "Traceback" not in fast[2]


# ------------------------------------------------------------------------------ bundled catalog cache

def test_catalog_cache_is_up_to_date():
    committed = (catalog.specs_dir() / catalog.CATALOG_CACHE_NAME)
    assert committed.exists(), "specs/_catalog.json is missing: run python tools/build_catalog_cache.py"
    fresh = catalog.catalog_cache_text(catalog.build_catalog_cache())
    assert committed.read_text(encoding="utf-8") == fresh, \
        "specs/_catalog.json is out of date with specs/*.yaml: run python tools/build_catalog_cache.py"


def test_catalog_cache_gives_what_yaml_gives():
    """Same mappings, same key order, for every bundled file (key order shows in list and JSON output)."""
    for kind in catalog.CATALOG_KINDS:
        for path in sorted((catalog.specs_dir() / kind).glob("*.yaml")):
            from_cache = catalog._read_spec(path, kind)
            assert json.dumps(from_cache) == json.dumps(F.load_yaml_mapping(path, kind)), path.name


def test_the_cache_read_line_by_line_is_the_whole_cache_document():
    """An estimate parses only the entries it reads (one line each): together they are exactly the document's."""
    doc = json.loads((catalog.specs_dir() / catalog.CATALOG_CACHE_NAME).read_text(encoding="utf-8"))
    catalog._catalog_cache.cache_clear()
    assert sorted(catalog._catalog_cache()) == sorted(doc["files"])
    for key, entry in doc["files"].items():
        assert catalog._cache_entry(key) == entry, key


def test_a_cache_of_another_format_or_a_broken_line_falls_back_to_yaml(specs_copy):
    cache = specs_copy / catalog.CATALOG_CACHE_NAME
    text = cache.read_text(encoding="utf-8")
    lines = text.split("\n")
    broken = [line[:len(line) // 2] if line.startswith('"hardware/h100-sxm.yaml"') else line for line in lines]
    cache.write_text("\n".join(broken), encoding="utf-8")
    assert catalog._cache_entry("hardware/h100-sxm.yaml") is None
    assert catalog.load_hardware("h100-sxm").memory_bytes == 80e9
    catalog._catalog_cache.cache_clear()
    other = catalog.CATALOG_CACHE_FORMAT + 1
    cache.write_text(text.replace(catalog.CATALOG_CACHE_HEADER, f'{{"format": {other}, "files": {{', 1), encoding="utf-8")
    assert catalog._catalog_cache() == {}
    assert catalog.load_model("llama3-8b").layers == 32


@pytest.fixture
def specs_copy(tmp_path, monkeypatch):
    """A copy of the bundled specs (with its cache) that catalog reads instead of the real ones."""
    import shutil
    root = tmp_path / "specs"
    for kind in catalog.CATALOG_KINDS:
        shutil.copytree(catalog.specs_dir() / kind, root / kind)
    shutil.copy(catalog.specs_dir() / catalog.CATALOG_CACHE_NAME, root / catalog.CATALOG_CACHE_NAME)
    monkeypatch.setattr(catalog, "specs_dir", lambda: root)
    caches = (catalog._catalog_cache, catalog._catalog_files, catalog._model_aliases, catalog._load_hardware_file,
              catalog._load_model_file)
    for c in caches:
        c.cache_clear()
    yield root
    for c in caches:
        c.cache_clear()


def test_unchanged_bundled_file_is_read_without_yaml(specs_copy, monkeypatch):
    def no_yaml(path, what):
        raise AssertionError(f"YAML parsed for unchanged bundled file {path}")
    monkeypatch.setattr(F, "load_yaml_mapping", no_yaml)
    hw = catalog.load_hardware("h100-sxm")
    assert hw.memory_bytes == 80e9 and catalog.load_model("llama3-8b").layers == 32


def test_edited_bundled_file_is_never_read_stale(specs_copy):
    path = specs_copy / "hardware" / "h100-sxm.yaml"
    path.write_text(path.read_text(encoding="utf-8").replace("capacity_gb: 80", "capacity_gb: 96"), encoding="utf-8")
    assert catalog.load_hardware("h100-sxm").memory_bytes == 96e9


def test_missing_or_corrupt_cache_falls_back_to_yaml(specs_copy):
    (specs_copy / catalog.CATALOG_CACHE_NAME).write_text("{not json", encoding="utf-8")
    assert catalog.load_hardware("h100-sxm").memory_bytes == 80e9
    catalog._catalog_cache.cache_clear()
    (specs_copy / catalog.CATALOG_CACHE_NAME).unlink()
    assert catalog.load_model("llama3-8b").layers == 32


def test_new_bundled_file_is_found_without_a_cache_entry(specs_copy):
    text = (specs_copy / "hardware" / "h100-sxm.yaml").read_text(encoding="utf-8")
    (specs_copy / "hardware" / "h100-test.yaml").write_text(text.replace("name: h100-sxm", "name: h100-test"),
                                                           encoding="utf-8")
    assert catalog.load_hardware("h100-test").name == "h100-test"


# ------------------------------------------------------------------------------------------ the exit

def _console(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != entry.NO_FAST_PATH_ENV}
    return subprocess.run([sys.executable, "-m", "trainest", *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=REPO)


def test_a_fast_path_estimate_that_skips_the_teardown_still_writes_everything():
    """The console script's fast-path estimate ends with os._exit (no interpreter teardown, issue 36): its whole
    stdout, its warnings on stderr and its exit code still arrive, for a result, the tables and a refusal."""
    args = ["estimate", "--model", "qwen3-4b", "--hardware", "dgx-spark", "--finetune", "lora"]
    proc = _console(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["step"]["time_s"] > 0          # the whole document (it ends the stream)
    assert "Warning:" in proc.stderr and "--tokens" in proc.stderr
    tables = _console(*args)
    assert tables.returncode == 0 and "Error band" in tables.stdout and "Warning:" in tables.stderr
    refused = _console("estimate", "--devices", "3", "--tp", "2")
    assert refused.returncode != 0 and refused.stdout == "" and refused.stderr.startswith("Error:")
    gate = _console("estimate", "--max-days", "0.001", "--json")
    assert gate.returncode != 0 and json.loads(gate.stdout)["gates"]


def test_records_keep_typing_namedtuple_behaviour():
    """trainest.record.NamedTuple (typing.NamedTuple without its per-field checks, for start-up time) makes the
    same record: fields in order, defaults, _replace, _asdict, methods and properties, pickling, and typing's
    refusals."""
    import pickle
    from trainest.hardware import Host, IntraNodeLink
    from trainest.record import NamedTuple

    class Pair(NamedTuple):
        """Two numbers."""
        low: float
        high: float = 2.0

        @property
        def width(self) -> float:
            return self.high - self.low

    p = Pair(1.0)
    assert p == (1.0, 2.0) and p._fields == ("low", "high") and p._field_defaults == {"high": 2.0}
    assert p.width == 1.0 and p._replace(high=5.0).width == 4.0 and p._asdict() == {"low": 1.0, "high": 2.0}
    assert Pair.__doc__ == "Two numbers." and Pair.__annotations__ == {"low": "float", "high": "float"}
    assert repr(p) == "Pair(low=1.0, high=2.0)"
    with pytest.raises(AttributeError):
        p.low = 3.0                                              # type: ignore[misc]
    with pytest.raises(TypeError):
        class Bad(NamedTuple):                                   # a field without a default after one with
            a: int = 1
            b: int
    with pytest.raises(AttributeError):
        class Clash(NamedTuple):
            a: int

            def _asdict(self):                                   # noqa: PLW3201
                return {}
    host = Host()
    assert pickle.loads(pickle.dumps(host)) == host and type(IntraNodeLink()).__module__ == "trainest.hardware"


def test_records_bind_their_arguments_as_namedtuple_does():
    """Records share one `__new__` (no code compiled per class): positional, keyword and mixed arguments bind to
    the same fields as a namedtuple with those defaults, and a wrong call is the same TypeError."""
    import collections
    import copy
    import json
    from trainest.record import NamedTuple

    class Three(NamedTuple):
        a: int
        b: str
        c: float = 0.5
        d: tuple = ()

    twin = collections.namedtuple("Three", ["a", "b", "c", "d"], defaults=[0.5, ()])
    calls = [((1, "x"), {}), ((), {"a": 1, "b": "x"}), ((1,), {"b": "x", "d": (2,)}), ((1, "x", 2.0, (3,)), {}),
             ((), {"d": (4,), "b": "y", "a": 0, "c": 1.0}), ((1, "x", 2.0), {"d": ()})]
    for args, kwargs in calls:
        made, expected = Three(*args, **kwargs), twin(*args, **kwargs)
        assert made == expected and tuple(made) == tuple(expected) and made._asdict() == expected._asdict()
        assert (made.a, made.b, made.c, made.d) == tuple(expected) and hash(made) == hash(expected)
    wrong = [((), {"a": 1}), ((1, "x"), {"e": 2}), ((1,), {"a": 2, "b": "x"}), ((1, "x", 2.0, (), 5), {}),
             ((), {"b": "x", "c": 1.0})]
    for args, kwargs in wrong:
        with pytest.raises(TypeError):
            twin(*args, **kwargs)
        with pytest.raises(TypeError):
            Three(*args, **kwargs)
    r = Three(1, "x")
    assert Three._make([1, "x", 0.5, ()]) == r and r._replace(c=2.0) == (1, "x", 2.0, ())
    assert Three._fields == ("a", "b", "c", "d") and Three.__match_args__ == Three._fields
    assert Three._field_defaults == {"c": 0.5, "d": ()} and isinstance(r, tuple)
    assert copy.deepcopy(r) == r and json.dumps(r) == '[1, "x", 0.5, []]'  # (pickled: Host, above)
    with pytest.raises(ValueError):
        class Hidden(NamedTuple):                                # a field would shadow the records' own _names
            _defaults: int
    with pytest.raises(TypeError):
        Three._make([1])
    with pytest.raises(ValueError):
        r._replace(e=1)
    with pytest.raises(AttributeError):
        r.__dict__                                               # noqa: B018 (a record has no instance dict)
