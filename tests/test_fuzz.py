"""Fuzzing the boundaries (hypothesis, bounded in time): the number parsers, the scenario loader, the
YAML file reader, the runs loader and the model/hardware readers. Whatever the input, the only
exception that may escape is SpecError, and its message is one line."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import yaml
from helpers import read_yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainest import catalog, fields
from trainest.errors import SpecError
from trainest.scenario import PARALLEL_KEYS, SCENARIO_KEYS, scenario_from_mapping
from trainest.units import parse_bytes, parse_count, parse_duration_s

REPO = Path(__file__).resolve().parent.parent
FUZZ = settings(max_examples=200, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def only_spec_error(fn, *args, **kwargs):
    """Call fn; a SpecError is fine (one-line message), any other exception fails the test."""
    try:
        return fn(*args, **kwargs)
    except SpecError as exc:
        message = str(exc)
        assert message and "\n" not in message, repr(message)
        assert len(message) < 2000, f"message of {len(message)} characters"
        return None


# ------------------------------------------------------------------------------------ number parsers

SUFFIXES = ["", "K", "M", "B", "G", "T", "P", "k", "b", "GB", "GiB", "gib", "TB", "TiB", "KB", "MiB",
            "s", "m", "min", "h", "d", "w", "X", "e", " ", "  B", "BB", "%", "ms"]
NUMBER_TEXT = st.one_of(
    st.integers(-10**30, 10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.from_regex(r"[+-]?\d{0,400}(\.\d{0,5})?([eE][+-]?\d{1,4})?", fullmatch=True),
)
HUMAN_TEXT = st.builds(lambda n, s, pad: f"{pad}{n}{s}{pad}", NUMBER_TEXT, st.sampled_from(SUFFIXES),
                       st.sampled_from(["", " ", "\t"]))
ANY_VALUE = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(10**300, 10**5000),
                      st.floats(allow_nan=True, allow_infinity=True), st.lists(st.integers(), max_size=3),
                      st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
PARSERS = [parse_count, parse_bytes, parse_duration_s]


@pytest.mark.parametrize("parse", PARSERS, ids=lambda f: f.__name__)
@FUZZ
@given(text=st.one_of(HUMAN_TEXT, st.text(max_size=40), ANY_VALUE))
def test_number_parsers_raise_only_spec_error(parse, text):
    value = only_spec_error(parse, text)
    if value is not None:
        assert math.isfinite(value) and value > 0


@pytest.mark.parametrize("text,expected", [
    ("7B", 7e9), ("1.5T", 1.5e12), ("300b", 3e11), ("2e12", 2e12), (" 12K ", 12e3), ("1P", 1e15)])
def test_parse_count_examples(text, expected):
    assert parse_count(text) == pytest.approx(expected)


@pytest.mark.parametrize("text,expected", [
    ("80GiB", 80 * 2**30), ("80GB", 80e9), ("1.5 TiB", 1.5 * 2**40), ("512", 512.0), ("8.5e10", 8.5e10)])
def test_parse_bytes_examples(text, expected):
    assert parse_bytes(text) == pytest.approx(expected)


@pytest.mark.parametrize("text,expected", [("30d", 30 * 86400), ("12h", 43200), ("2w", 14 * 86400),
                                           ("3600", 3600), ("90min", 5400)])
def test_parse_duration_examples(text, expected):
    assert parse_duration_s(text) == pytest.approx(expected)


@pytest.mark.parametrize("parse", PARSERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "-inf", "1e400", "", "abc", "7X", "1.2.3", "B", "--5"])
def test_number_parsers_reject(parse, text):
    with pytest.raises(SpecError):
        parse(text)


# -------------------------------------------------------------------------------- scenario mappings

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**7), st.integers(10**300, 10**400),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                    st.sampled_from(["llama3-8b", "gpt3-125m", "h100-sxm", "tpu-v5p", "bf16", "fp8", "full",
                                     "flash", "300B", "1.5T", "8", "x.yaml", "/", ""]))
KEYS = st.one_of(st.sampled_from(SCENARIO_KEYS + PARALLEL_KEYS), st.text(max_size=8), st.integers(0, 3))
NESTED = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(KEYS, inner, max_size=4)), max_leaves=12)


@FUZZ
@given(mapping=st.dictionaries(KEYS, NESTED, max_size=8))
def test_scenario_from_random_mappings(mapping):
    only_spec_error(scenario_from_mapping, mapping, "fuzz")


@FUZZ
@given(data=st.data())
def test_scenario_from_mutated_valid_mappings(data):
    """A valid scenario with one key (or one parallel key) replaced by junk: near-miss inputs."""
    base = {"model": "llama3-8b", "hardware": "h100-sxm", "devices": 16, "precision": "bf16", "seq_len": 4096,
            "parallel": {"tp": 2, "pp": 2, "zero": 1, "sequence_parallel": True}, "micro_batch": 1,
            "global_batch": 32, "recompute": "selective", "tokens": "1T", "price_per_hour": 2.0, "pue": 1.3}
    doc = copy.deepcopy(base)
    if data.draw(st.booleans()):
        doc["parallel"][data.draw(st.sampled_from(PARALLEL_KEYS))] = data.draw(NESTED)
    else:
        doc[data.draw(st.sampled_from(SCENARIO_KEYS))] = data.draw(NESTED)
    only_spec_error(scenario_from_mapping, doc, "fuzz")


RUN_RECORDS = [rec for path in sorted((REPO / "specs" / "runs").glob("*.yaml"))
               for rec in (read_yaml(path) or {}).get("runs", [])[:5]]


@FUZZ
@given(data=st.data())
def test_mutated_run_records(data):
    """Run records from specs/runs with one key set to junk go through the same validation."""
    rec = copy.deepcopy(data.draw(st.sampled_from(RUN_RECORDS)))
    rec[data.draw(st.sampled_from(sorted(rec)))] = data.draw(NESTED)
    only_spec_error(scenario_from_mapping, rec, "fuzz run")


MODEL = yaml.safe_load((REPO / "specs" / "models" / "llama3-8b.yaml").read_text(encoding="utf-8"))
HARDWARE = yaml.safe_load((REPO / "specs" / "hardware" / "h100-sxm.yaml").read_text(encoding="utf-8"))


@FUZZ
@given(data=st.data())
def test_mutated_model_and_hardware_mappings(data):
    model = copy.deepcopy(MODEL)
    model[data.draw(st.sampled_from(sorted(model) + ["head_dim", "junk"]))] = data.draw(NESTED)
    only_spec_error(catalog.model_from_mapping, model, "fuzz model")
    hw = copy.deepcopy(HARDWARE)
    section = data.draw(st.sampled_from(["peak_tflops", "memory", "system", "efficiency", None]))
    target = hw if section is None else hw[section]
    target[data.draw(st.sampled_from(sorted(target) + ["junk"]))] = data.draw(NESTED)
    only_spec_error(catalog.hardware_from_mapping, hw, "fuzz hardware")


MOE_MODEL = yaml.safe_load((REPO / "specs" / "models" / "deepseek-v3.yaml").read_text(encoding="utf-8"))


@FUZZ
@given(data=st.data())
def test_mutated_moe_and_mla_mappings(data):
    """A key of DeepSeek-V3's model, moe or mla block set to junk: SpecError only."""
    model = copy.deepcopy(MOE_MODEL)
    section = data.draw(st.sampled_from(["moe", "mla", None]))
    target = model if section is None else model[section]
    target[data.draw(st.sampled_from(sorted(target) + ["junk"]))] = data.draw(NESTED)
    only_spec_error(catalog.model_from_mapping, model, "fuzz moe model")


@FUZZ
@given(data=st.data())
def test_mutated_hf_configs(data):
    """A key of a Hugging Face config.json set to junk: SpecError only."""
    import json

    from trainest.catalog import model_from_hf_config
    folder = data.draw(st.sampled_from(sorted(p.name for p in (REPO / "tests" / "hf_configs").iterdir() if p.is_dir())))
    config = json.loads((REPO / "tests" / "hf_configs" / folder / "config.json").read_text(encoding="utf-8"))
    target = config["text_config"] if "text_config" in config and data.draw(st.booleans()) else config
    target[data.draw(st.sampled_from(sorted(target) + ["junk"]))] = data.draw(NESTED)
    only_spec_error(model_from_hf_config, config, "fuzz config.json")


# --------------------------------------------------------------------------------------- files

YAMLISH = st.one_of(
    st.text(max_size=200),
    st.lists(st.sampled_from(["model: ", "devices: ", "parallel:", "  tp: ", "- ", "&a ", "*a", "!!python/object:os.system",
                              "!!binary ", "{", "}", "[", "]", ": ", "\n", "  ", "\t", "'", '"', "#", "---", "...",
                              "8", "1e400", "9" * 5000, ".nan", "llama3-8b", "~", "<<: *a", "%YAML 1.1", "\x00",
                              "\ufeff", "?"]), max_size=40).map("".join),
    NESTED.map(lambda v: yaml.safe_dump(v) if not isinstance(v, int) or abs(v) < 10**100 else "x: 1"),
)


@FUZZ
@given(text=YAMLISH)
def test_random_scenario_files(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("fuzz") / "scenario.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass") if "\ud800" not in text else \
        path.write_bytes(text.encode("utf-8", "replace"))
    doc = only_spec_error(fields.load_yaml_mapping, path, "scenario")
    if doc is not None:
        only_spec_error(scenario_from_mapping, doc, str(path))


@FUZZ
@given(blob=st.binary(max_size=300))
def test_random_binary_files(tmp_path_factory, blob):
    path = tmp_path_factory.mktemp("fuzz") / "blob.yaml"
    path.write_bytes(blob)
    doc = only_spec_error(fields.load_yaml_mapping, path, "scenario")
    if doc is not None:
        only_spec_error(scenario_from_mapping, doc, str(path))


@settings(FUZZ, max_examples=100)
@given(records=st.lists(st.one_of(NESTED, st.sampled_from(RUN_RECORDS)), max_size=3), source=SCALARS)
def test_random_runs_files(tmp_path_factory, records, source):
    """The runs loader (trainest.validate.load_runs, used by validate and calibrate)."""
    validate = pytest.importorskip("trainest.validate")
    path = tmp_path_factory.mktemp("fuzz") / "runs.yaml"
    doc = {"source": source, "runs": records}
    try:
        text = yaml.safe_dump(doc)
    except (yaml.YAMLError, ValueError, RecursionError):
        return
    path.write_text(text, encoding="utf-8")
    only_spec_error(validate.load_runs, [path])
