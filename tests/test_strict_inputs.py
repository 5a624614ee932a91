"""Issue 32, input items 2, 3, 7, 10, 11: no input taken silently as something else than it shows.

A YAML or JSON file that says a key twice, or a number in a YAML 1.1 form (base 60, hexadecimal, octal, an
infinity), is refused naming the key; a value listed as derived but edited is the user's (kept and
validated), never dropped; a hardware kind is checked as the hardware's key; `probe --budget`, `calibrate -o`
and `validate --set` refuse or list what they must."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from trainest import probe
from trainest.cli import app
from trainest.errors import SpecError
from trainest.fields import load_yaml


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def refused(result) -> str:
    """The one error line of a refused command (exit 1, nothing on stdout)."""
    assert result.exit_code == 1, result.stdout
    assert result.stdout == ""
    assert result.stderr.startswith("Error: ") and "Traceback" not in result.stderr
    return result.stderr


# ------------------------------------------------------------------ 7. strict YAML and JSON

@pytest.mark.parametrize(("text", "key", "what"), [
    ("devices: 64\ndevices: 8\n", "devices", "given twice"),
    ("parallel:\n  tp: 2\n  tp: 4\n", "parallel.tp", "given twice"),
    ("global_batch: 0x40\n", "global_batch", "hexadecimal"),
    ("devices: 1:04\n", "devices", "base-60"),
    ("parallel:\n  tp: 017\n", "parallel.tp", "octal"),
    ("global_batch: 0o100\n", "global_batch", "not a whole number"),   # YAML 1.1 text: refused as such
    ("tokens: .inf\n", "tokens", "not a finite number"),
    ("tokens: -.inf\n", "tokens", "not a finite number"),
    ("pue: .nan\n", "pue", "not a finite number"),
], ids=["duplicate", "nested-duplicate", "hex", "base60", "octal-leading-0", "octal-0o", "inf", "minus-inf", "nan"])
def test_a_scenario_file_refuses_what_yaml_would_misread_naming_the_key(text, key, what, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    message = refused(run("estimate", "--config", str(path)))
    assert f"{key}:" in message or f"key {key} " in message
    assert what in message


def test_plain_decimal_numbers_and_quoted_text_still_load(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("devices: 8\nglobal_batch: 64\ntokens: 1_000_000_000\nprice_per_hour: 2.5\nnotes: '0x40'\n")
    assert load_yaml(path, "scenario") == {"devices": 8, "global_batch": 64, "tokens": 1_000_000_000,
                                           "price_per_hour": 2.5, "notes": "0x40"}


@pytest.mark.parametrize("kind", ["runs", "hardware", "model"])
def test_every_yaml_input_is_strict(kind, tmp_path):
    """Runs, hardware and model files are read by the same reader as scenario files."""
    path = tmp_path / f"{kind}.yaml"
    path.write_text("name: x\nlayers: 4\nlayers: 8\n")
    with pytest.raises(SpecError, match="key layers is given twice"):
        load_yaml(path, kind)


def test_a_runs_file_with_a_duplicated_key_is_refused(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("runs:\n- id: a\n  model: llama3-8b\n  hardware: h100-sxm\n  devices: 8\n  devices: 16\n"
                    "  seq_len: 8192\n  global_batch: 32\n  measured: {step_time_s: 3.0}\n")
    assert "runs[0].devices is given twice" in refused(run("validate", "--runs", str(path)))


@pytest.mark.parametrize(("tail", "what"), [(', "num_hidden_layers": 16}', "num_hidden_layers is given twice"),
                                            (', "rope_theta": NaN}', "NaN is not a finite number"),
                                            (', "rope_theta": -Infinity}', "-Infinity is not a finite number")])
def test_a_config_json_refuses_duplicate_keys_and_non_finite_numbers(tail, what, tmp_path):
    config = {"architectures": ["LlamaForCausalLM"], "hidden_size": 1024, "intermediate_size": 4096,
              "num_attention_heads": 16, "num_hidden_layers": 4, "num_key_value_heads": 4, "vocab_size": 32000,
              "max_position_embeddings": 2048}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config)[:-1] + tail)
    assert what in refused(run("estimate", "--model", str(path)))


# ------------------------------------------------------------------ 2, 3. derived values are never dropped unseen

def _inputs(tmp_path: Path, **edits) -> Path:
    doc = json.loads(run("estimate", "--json").stdout)["inputs"]
    for key, value in edits.items():
        doc[key] = value
    path = tmp_path / "inputs.json"
    path.write_text(json.dumps(doc))
    return path


def _estimate(path: Path) -> dict:
    r = run("estimate", "--config", str(path), "--json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_an_unedited_echo_reloads_with_its_derived_values_derived_again(tmp_path):
    doc = json.loads(run("estimate", "--json").stdout)
    again = _estimate(_inputs(tmp_path))
    kept = ("model", "hardware")        # an echo carries them resolved: kept as given (specs/README.md)
    assert {k: v for k, v in again["inputs"].items() if k != "derived"} == \
        {k: v for k, v in doc["inputs"].items() if k != "derived"}
    assert again["inputs"]["derived"] == [k for k in doc["inputs"]["derived"] if k not in kept]
    assert again["step"]["time_s"] == doc["step"]["time_s"]


def test_an_edited_device_count_in_an_echo_is_taken_and_no_longer_derived(tmp_path):
    doc = _estimate(_inputs(tmp_path, devices=16))
    assert doc["inputs"]["devices"] == 16 and doc["inputs"]["parallel"]["dp"] == 16
    assert "devices" not in doc["inputs"]["derived"] and "parallel.dp" in doc["inputs"]["derived"]


def test_an_edited_sequence_length_in_an_echo_is_taken(tmp_path):
    doc = _estimate(_inputs(tmp_path, seq_len=4096))
    assert doc["inputs"]["seq_len"] == 4096 and "seq_len" not in doc["inputs"]["derived"]
    # the batch was derived: 0.5M tokens again, in sequences of the new length
    assert doc["inputs"]["global_batch"] * 4096 == 64 * 8192


def test_a_value_listed_as_derived_is_still_validated(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("devices: banana\nfinetune: {METHOD: lora}\nderived: [devices, tokens, finetune]\n")
    assert "devices: 'banana' is not a whole number" in refused(run("estimate", "--config", str(path)))
    path.write_text("finetune: {METHOD: lora}\nderived: [devices, tokens, finetune]\n")
    assert "unknown key 'METHOD'" in refused(run("estimate", "--config", str(path)))


def test_a_derived_value_equal_to_its_derivation_still_follows_an_override(tmp_path):
    """The echo's device count (derived, unedited) follows --hardware's node like the override alone."""
    alone = json.loads(run("estimate", "--hardware", "dgx-spark", "--json").stdout)["inputs"]
    r = run("estimate", "--config", str(_inputs(tmp_path)), "--hardware", "dgx-spark", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["inputs"]["devices"] == alone["devices"]


# ------------------------------------------------------------------ 10. a hardware file's kind

def test_an_unknown_hardware_kind_names_the_hardware_key_and_its_kinds(tmp_path):
    data = yaml.safe_load(Path("specs/hardware/h100-sxm.yaml").read_text())
    data["kind"] = "graphics"
    path = tmp_path / "hw.yaml"
    path.write_text(yaml.safe_dump(data))
    message = refused(run("estimate", "--hardware", str(path)))
    assert ".kind: 'graphics' is not allowed" in message and "gpu, cpu-gpu, tpu" in message
    assert "--framework" not in message


def test_a_hardware_kind_in_upper_case_is_the_kind_as_every_choice_is(tmp_path):
    data = yaml.safe_load(Path("specs/hardware/h100-sxm.yaml").read_text())
    data["kind"] = "GPU"
    path = tmp_path / "hw.yaml"
    path.write_text(yaml.safe_dump(data))
    r = run("estimate", "--hardware", str(path), "--json")
    assert r.exit_code == 0, r.stderr


# ------------------------------------------------------------------ 11. probe, calibrate, validate

@pytest.mark.parametrize("budget", ["1e308", "nan", "inf", "0", "-1", "0.01", "3601"])
def test_probe_refuses_a_budget_outside_its_range(budget, tmp_path):
    message = refused(run("probe", "-o", str(tmp_path / "p.yaml"), "--budget", budget))
    assert "must be a number of seconds from 0.1 to 3600" in message
    assert not (tmp_path / "p.yaml").exists()


def test_the_probe_copy_buffers_grow_with_the_budget():
    big_l3 = 512 * 2**20             # 2 x L3 would be 1 GiB per buffer
    short, long_ = probe.copy_buffer_bytes(big_l3, 64e9, 0.3), probe.copy_buffer_bytes(big_l3, 64e9, 60.0)
    assert short < long_ == probe.COPY_BUFFER_L3_MULTIPLE * big_l3
    assert short <= max(probe.COPY_BUFFER_MIN_BYTES, probe.COPY_BUFFER_BYTES_PER_BUDGET_S * 0.3)
    assert probe.copy_buffer_bytes(big_l3, 64e9, 0.01) >= probe.COPY_BUFFER_MIN_BYTES   # still streams DRAM


@pytest.mark.parametrize("output", ["", " "])
def test_calibrate_refuses_a_blank_output_name(output, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    message = refused(run("calibrate", "--runs", "specs/runs/narayanan2021.yaml", "-o", output))
    assert "is an empty name" in message
    assert list(tmp_path.iterdir()) == []


def test_validate_lists_every_set_of_the_runs_files_incl_those_of_single_records():
    message = refused(run("validate", "--set", "nosuch"))
    assert "finetune" in message and "public" in message and "vtrain-single-node" in message


def test_a_calibration_reports_its_progress():
    from trainest.calibrate import fit_efficiency
    from trainest.validate import load_runs
    cases = [c for c in load_runs(["specs/runs/narayanan2021.yaml"], user_files=True).cases
             if c.scenario.hardware.name == "a100-80gb-sxm"][:4]
    seen: list[tuple[int, int]] = []
    fit_efficiency(cases, names=("gemm",), progress=lambda done, total: seen.append((done, total)))
    assert seen and all(1 <= done <= total == len(cases) for done, total in seen)
