"""The command line as a contract: streams (results on stdout only, warnings and errors on stderr),
exit codes (0 ok, 1 bad input, 2 usage, 3 CI gate), --quiet, NO_COLOR / non-terminal plain text, the
CI gates --max-days / --max-cost / --require-fit, documented options, and real console-script runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import call_entry
from typer.testing import CliRunner

from trainest.cli import app

RUNNER = CliRunner()
ANSI = "\x1b["
SCRIPT = shutil.which("trainest", path=str(Path(sys.executable).parent)) or shutil.which("trainest")
NO_PRICE_HARDWARE = "gaudi3"     # price_usd_per_hour: null in specs/hardware (an 8-device node with its network)


def invoke(*args: str, env: dict | None = None):
    result = RUNNER.invoke(app, list(args), env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def estimate_json(*args: str) -> dict:
    result = invoke("estimate", *args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


# ------------------------------------------------------------------------------------- documentation

def test_every_command_and_option_is_documented():
    import typer.main
    group = typer.main.get_command(app)
    assert set(group.commands) >= {"estimate", "list"}
    for name, command in group.commands.items():
        assert (command.help or "").strip(), f"command {name} has no help"
        for param in command.params:
            if param.param_type_name == "option":
                assert (param.help or "").strip(), f"{name} {param.opts} has no help"
    result = invoke("estimate", "--help")
    assert result.exit_code == 0
    for flag in ("--max-days", "--max-cost", "--require-fit", "--json", "--quiet", "--config"):
        assert flag in result.stdout


# ---------------------------------------------------------------------------------------- streams

def test_json_goes_to_stdout_alone():
    result = invoke("estimate", "--json")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)           # the whole of stdout is one JSON document
    assert doc["step"]["time_s"] > 0
    assert result.stderr == ""                # the default scenario fits and has a price: nothing to warn


def test_warnings_go_to_stderr_and_quiet_silences_them():
    result = invoke("estimate", "--hardware", NO_PRICE_HARDWARE, "--json")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["training"]["cost_usd"] is None
    assert any("price" in w for w in doc["warnings"]), "the JSON records the warning too"
    assert result.stderr.startswith("Warning: ") and "price" in result.stderr
    quiet = invoke("estimate", "--hardware", NO_PRICE_HARDWARE, "--json", "--quiet")
    assert quiet.exit_code == 0 and quiet.stderr == ""
    assert json.loads(quiet.stdout) == doc, "--quiet changes stderr only"


def test_table_output_has_no_ansi_when_not_a_terminal():
    result = invoke("estimate", "--hardware", NO_PRICE_HARDWARE)
    assert result.exit_code == 0
    assert "Step" in result.stdout and "Memory per device" in result.stdout
    assert ANSI not in result.stdout and ANSI not in result.stderr
    assert "Warning" not in result.stdout, "warnings never go to stdout"


def _run_in_pty(args: list[str], env: dict) -> bytes:
    """Run the console script with stdout on a pseudo-terminal (a real terminal to rich)."""
    pty = pytest.importorskip("pty")
    main_fd, child_fd = pty.openpty()
    try:
        subprocess.run([SCRIPT, *args], stdout=child_fd, stderr=subprocess.DEVNULL, env=env, timeout=60, check=True)
    finally:
        os.close(child_fd)
    out = b""
    while True:
        try:
            chunk = os.read(main_fd, 1 << 16)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.close(main_fd)
    return out


@pytest.mark.skipif(SCRIPT is None or os.name != "posix", reason="needs the console script and a POSIX pty")
def test_no_color_gives_plain_text_even_on_a_terminal():
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM")}
    env["TERM"] = "xterm-256color"
    styled = _run_in_pty(["estimate"], env)
    assert ANSI.encode() in styled, "on a terminal the tables are styled (so the next check can fail)"
    plain = _run_in_pty(["estimate"], {**env, "NO_COLOR": "1"})
    assert b"Step" in plain
    assert ANSI.encode() not in plain


# ------------------------------------------------------------------------------------------ CI gates

@pytest.fixture(scope="module")
def baseline() -> dict:
    return estimate_json()


def test_gates_pass_when_within_limits(baseline):
    days, cost = baseline["training"]["time_days"], baseline["training"]["cost_usd"]
    result = invoke("estimate", "--max-days", f"{days * 2}", "--max-cost", f"{cost * 2}", "--require-fit", "--json")
    assert result.exit_code == 0, result.stderr
    assert "Gate failed" not in result.stderr


def test_gate_at_exactly_the_limit_passes(baseline):
    days = baseline["training"]["time_days"]
    result = invoke("estimate", "--max-days", repr(days), "--json")
    assert result.exit_code == 0, result.stderr


def test_max_days_gate(baseline):
    days = baseline["training"]["time_days"]
    result = invoke("estimate", "--max-days", f"{days / 2}", "--json")
    assert result.exit_code == 3
    doc = json.loads(result.stdout)
    assert doc.pop("gates")[0]["gate"] == "--max-days"      # the JSON names the gate
    assert doc == baseline, "results still go to stdout"
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Gate failed:") and "--max-days" in lines[0]
    assert f"{days:.2f} days" in lines[0]


def test_max_cost_gate(baseline):
    cost = baseline["training"]["cost_usd"]
    result = invoke("estimate", "--max-cost", f"{cost / 2}")
    assert result.exit_code == 3
    assert "Whole run" in result.stdout
    assert "--max-cost" in result.stderr and "--max-days" not in result.stderr


def test_every_broken_gate_is_named(baseline):
    days, cost = baseline["training"]["time_days"], baseline["training"]["cost_usd"]
    result = invoke("estimate", "--model", "gpt3-175b", "--max-days", f"{days / 2}", "--max-cost", f"{cost / 2}",
                    "--require-fit", "--json", "--quiet")
    assert result.exit_code == 3
    gates = [line for line in result.stderr.splitlines() if line.startswith("Gate failed:")]
    assert len(gates) == 3
    assert [g for g in gates if "--max-days" in g] and [g for g in gates if "--max-cost" in g]
    assert [g for g in gates if "--require-fit" in g]
    assert "Warning" not in result.stderr, "--quiet silences warnings but never the gates"


def test_require_fit_gate():
    fits = invoke("estimate", "--require-fit", "--json")
    assert fits.exit_code == 0 and json.loads(fits.stdout)["memory"]["fits"] is True
    big = invoke("estimate", "--model", "llama3-70b", "--devices", "8", "--require-fit", "--json")
    assert big.exit_code == 3
    doc = json.loads(big.stdout)
    assert doc["memory"]["fits"] is False
    assert "--require-fit" in big.stderr and "GiB" in big.stderr


def test_max_cost_without_price_fails_the_gate():
    result = invoke("estimate", "--hardware", NO_PRICE_HARDWARE, "--max-cost", "1e12", "--quiet")
    assert result.exit_code == 3
    assert "--max-cost" in result.stderr and "price" in result.stderr
    priced = invoke("estimate", "--hardware", NO_PRICE_HARDWARE, "--price-per-hour", "1", "--max-cost", "1e12")
    assert priced.exit_code == 0, priced.stderr


def test_a_gate_never_hides_bad_input():
    """Bad input is exit 1 even when a gate is given (errors are checked before gates)."""
    result = invoke("estimate", "--tp", "3", "--max-days", "1", "--require-fit")
    assert result.exit_code == 1 and result.stdout == ""


# --------------------------------------------------------------------------- the real console script

def _script(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    full_env.update(env or {})
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=120, env=full_env)


pytestmark_script = pytest.mark.skipif(SCRIPT is None, reason="console script `trainest` not installed")


@pytestmark_script
def test_script_success_json():
    proc = _script("estimate", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["schema_version"]
    assert proc.stderr == ""


@pytestmark_script
@pytest.mark.parametrize("env", [{}, {"TRAINEST_NO_FAST_PATH": "1"}], ids=["fast-path", "typer"])
def test_script_exit_codes(env):
    bad = _script("estimate", "--tp", "3", env=env)
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("Error: ") and "Traceback" not in bad.stderr
    usage = _script("estimate", "--no-such-option", env=env)
    assert usage.returncode == 2 and usage.stdout == "" and "Traceback" not in usage.stderr
    gate = _script("estimate", "--model", "llama3-70b", "--require-fit", "--json", "--quiet", env=env)
    assert gate.returncode == 3
    assert json.loads(gate.stdout)["memory"]["fits"] is False
    assert gate.stderr.startswith("Gate failed:")


@pytestmark_script
def test_script_bad_file_and_plain_output(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("model: !!python/object/apply:os.system ['echo pwned']\n", encoding="utf-8")
    proc = _script("estimate", "--config", str(path))
    assert proc.returncode == 1 and proc.stdout == "" and "pwned" not in proc.stderr
    assert "evil.yaml" in proc.stderr and proc.stderr.count("\n") == 1
    table = _script("estimate", env={"NO_COLOR": "1"})
    assert table.returncode == 0 and ANSI not in table.stdout and "Step" in table.stdout


def test_python_dash_m():
    proc = subprocess.run([sys.executable, "-m", "trainest", "estimate", "--json", "--quiet"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["step"]["time_s"] > 0


def test_does_not_fit_warning_says_it_may_fit_only_when_marginal():
    """Over capacity by <= TIGHT_FIT_FRACTION: the warning says it may fit (the memory model leans
    high on published runs); further over: no such hedge. `fits` is false either way."""

    from trainest.advice import fit_suggestions
    from trainest.estimate import TIGHT_FIT_FRACTION, estimate
    from trainest.scenario import scenario_from_mapping
    s = scenario_from_mapping({"model": "llama3-8b", "devices": 8, "parallel": {"zero": 3}, "seq_len": 8192,
                               "micro_batch": 1, "global_batch": 8, "recompute": "none"}, "test")
    e = estimate(s)
    for over, hedged in ((0.5 * TIGHT_FIT_FRACTION, True), (3.0 * TIGHT_FIT_FRACTION, False)):
        mem = e.memory._replace(capacity_bytes=e.memory.per_device_bytes / (1.0 + over), fits=False)
        text = fit_suggestions(s, e._replace(memory=mem))
        assert text.startswith("does not fit") and (("it may fit" in text) == hedged), text


def test_list_hardware_sorts_and_shows_what_a_buyer_compares(capsys):
    code, out, err = call_entry(["list", "hardware", "--sort", "price", "--json"], capsys)
    assert code == 0, err
    rows = json.loads(out)["hardware"]
    prices = [r["price_usd_per_hour"] for r in rows if r["price_usd_per_hour"] is not None]
    assert prices == sorted(prices) and rows[-1]["price_usd_per_hour"] is None     # unknown prices last
    h100 = next(r for r in rows if r["name"] == "h100-sxm")
    assert h100["calibration"] == "fitted" and h100["price_date"] and h100["scale_up"]["domain"] == 8
    assert h100["scale_out"]["bytes_per_s"] > 0 and h100["power_w"] == 700 and "nvidia.com" in h100["source"]
    code, out, err = call_entry(["list", "hardware", "--sort", "bf16"], capsys)
    assert code == 0 and out.index("gb200") < out.index("h100-sxm") < out.index("a100-40gb-sxm")
    code, out, err = call_entry(["list", "hardware", "--sort", "speed"], capsys)
    assert code == 1 and "--sort" in err


@pytest.mark.parametrize("what", ["hardware", "models", "frameworks"])
def test_list_keeps_every_value_whole_on_an_80_column_terminal(what, capsys, monkeypatch):
    """Regression: on 80 columns `list models` cut the parameter counts to '67…' over two lines."""
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = call_entry(["list", what], capsys)
    assert code == 0, err
    assert "…" not in out
    if what == "models":
        row = next(line for line in out.splitlines() if line.split()[:1] == ["deepseek-v3"])
        assert "671 B" in row and "37.6 B" in row


def test_the_default_device_count_is_one_node_at_most_eight_and_says_so(capsys):
    """A DGX Spark, a laptop or one card is one device: an estimate without --devices on it is for that
    one device, not for eight of them; the count is marked as a default."""
    import json
    for hardware, want in (("dgx-spark", 1), ("apple-m4-max", 1), ("h100-sxm", 8)):
        code, out, err = call_entry(["estimate", "-H", hardware, "-m", "llama3-8b", "--finetune", "lora",
                                     "--global-batch", "8", "--json"], capsys)
        assert code == 0, err
        assert json.loads(out)["inputs"]["devices"] == want, hardware
    code, out, err = call_entry(["estimate", "-H", "dgx-spark", "-m", "llama3-8b", "--finetune", "lora",
                                 "--global-batch", "8"], capsys)
    assert "1 device  (default)" in out
    code, out, err = call_entry(["estimate", "-H", "dgx-spark", "-m", "llama3-8b", "--finetune", "lora",
                                 "--global-batch", "8", "-n", "2"], capsys)
    assert "2 devices," in out and "2 devices  (default)" not in out


def test_shell_completion(capsys):
    code, out, err = call_entry(["completion", "zsh"], capsys)
    assert code == 0 and out.startswith("#compdef trainest")
    code, out, err = call_entry(["completion", "bash"], capsys)
    assert code == 0 and "_TRAINEST_COMPLETE" in out
    script = shutil.which("trainest", path=str(Path(sys.executable).parent)) or shutil.which("trainest")
    if script is None:
        pytest.skip("the trainest console script is not installed")
    env = {**os.environ, "_TRAINEST_COMPLETE": "complete_bash", "COMP_WORDS": "trainest com", "COMP_CWORD": "1"}
    proc = subprocess.run([script], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0 and "compare" in proc.stdout.split()
    # catalog names complete too: --hardware (the last of a comma list) and --model
    for words, cword, expected, absent in (("trainest estimate --hardware h1", "3", "h100-sxm", "h200-sxm"),
                                           ("trainest compare --hardware h100-sxm,b2", "3", "h100-sxm,b200", "b200"),
                                           ("trainest plan --model qwen3-3", "3", "qwen3-30b-a3b", "qwen3-8b")):
        env = {**os.environ, "_TRAINEST_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": cword}
        proc = subprocess.run([script], capture_output=True, text=True, env=env, timeout=60)
        assert proc.returncode == 0 and expected in proc.stdout.split() and absent not in proc.stdout.split()


def test_bare_estimate_and_one_naming_the_default_model_are_the_same_scenario(capsys):
    """Issue 11, case 8: the same default with or without options, and `--help` shows it."""
    from helpers import call_entry
    docs = []
    for args in ([], ["--model", "llama3-8b"], ["--tokens", "1.5T"]):
        code, out, _ = call_entry(["estimate", *args, "--json"], capsys)
        assert code == 0
        doc = json.loads(out)
        docs.append(doc)
        assert doc["memory"]["fits"]
    for doc in docs[1:]:
        assert doc["step"]["time_s"] == docs[0]["step"]["time_s"]
        assert {k: doc["inputs"][k] for k in ("parallel", "recompute", "global_batch", "micro_batch")} == \
            {k: docs[0]["inputs"][k] for k in ("parallel", "recompute", "global_batch", "micro_batch")}
    help_text = " ".join(invoke("estimate", "--help", env={"COLUMNS": "300"}).stdout.replace("│", " ").split())
    for shown in ("3 (FSDP); 1 with --pp > 1", "(selective)", "0.5M tokens"):
        assert shown in help_text, shown


def _advice(mapping):
    from trainest.advice import fit_suggestions
    from trainest.estimate import estimate
    from trainest.scenario import scenario_from_mapping
    s = scenario_from_mapping(mapping, "options")
    e = estimate(s)
    assert not e.memory.fits
    return s, fit_suggestions(s, e)


def test_advice_on_one_device_never_suggests_sharding_nor_repeats_what_was_given():
    """Issue 11, case 5: `--hardware gh200 --devices 1 --zero 3 --recompute full` was told to 'combine
    sharding (--zero 3, --tp, --pp) with --recompute full'. Now: the smallest device count that fits,
    with its layout, found by the plan search; nothing that was given, no sharding on one rank."""
    _, text = _advice({"model": "llama3-70b", "hardware": "gh200", "devices": 1, "parallel": {"zero": 3},
                       "recompute": "full", "global_batch": 1})
    assert "would fit with" not in text and "combine sharding" not in text
    assert "the smallest count that fits is 16 devices" in text, text


def test_advice_names_only_changes_that_fit_and_a_layout_that_fits():
    from trainest.estimate import estimate
    from trainest.scenario import scenario_from_mapping
    s, text = _advice({"model": "llama3-8b", "devices": 8, "parallel": {"zero": 0}, "recompute": "none"})
    # 79.6 GiB usable (issue 34): ZeRO-2 is now enough, and ZeRO-3 still is
    assert "would fit with: --zero 2, --zero 3" in text and "--recompute full" not in text.split(";")[1]
    args = text.split("estimate options ")[1].rstrip(")").split()
    layout = {a: b for a, b in zip(args, args[1:] + [""]) if a.startswith("--") and not b.startswith("--")}
    alt = scenario_from_mapping({"model": "llama3-8b", "devices": int(layout["--devices"]),
                                 "parallel": {"tp": int(layout["--tp"]), "pp": int(layout["--pp"]),
                                              "zero": int(layout["--zero"])},
                                 "global_batch": int(layout["--global-batch"]), "recompute": layout["--recompute"]},
                                "test")
    assert estimate(alt).memory.fits


# ------------------------------------------------------------------ small things (issue 11, case 9)

def test_version_and_short_help():
    from trainest import __version__
    res = invoke("--version")
    assert res.exit_code == 0 and __version__ in res.stdout
    for args in (["-h"], ["estimate", "-h"], ["plan", "-h"]):
        res = invoke(*args)
        assert res.exit_code == 0 and "Usage:" in res.stdout, args


def test_one_is_singular(capsys, tmp_path, monkeypatch):
    from helpers import call_entry
    monkeypatch.setenv("COLUMNS", "200")     # the phrases below, unwrapped whatever the worker's terminal
    code, out, _ = call_entry(["estimate", "--model", "gpt3-1.3b", "--hardware", "gh200", "--devices", "1",
                               "--global-batch", "1"], capsys)
    assert code == 0 and "1 device," in out and "1 devices" not in out and "1 micro-batch per step" in out
    runs = tmp_path / "one.yaml"
    runs.write_text(json.dumps([{"id": "r1", "source": "test", "model": "llama3-8b", "hardware": "h100-sxm",
                                 "devices": 8, "seq_len": 8192, "precision": "bf16", "parallel": {"zero": 3},
                                 "micro_batch": 1, "global_batch": 64, "recompute": "selective",
                                 "measured": {"step_time_s": 8.1}}]))
    res = invoke("validate", "--runs", str(runs), env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "1 run compared" in res.stdout and "1 runs" not in res.stdout


def test_errors_name_options_not_internal_keys(capsys):
    from helpers import call_entry
    for args, flag in ((["--zero", "5"], "--zero"), (["--memory-headroom", "150%"], "--memory-headroom"),
                       (["--pue", "0.5"], "--pue"), (["--micro-batch", "0"], "--micro-batch"),
                       # a digit in the key (gco2) and the shape overrides, validated as the model's keys
                       (["--grid-gco2-per-kwh", "-3"], "--grid-gco2-per-kwh"), (["--layers", "0"], "--layers"),
                       (["--hidden", "0"], "--hidden"),
                       # a bare number is bytes: 1.5 is a share or a size without its unit, not a margin
                       (["--memory-headroom", "1.5"], "--memory-headroom")):
        code, out, err = call_entry(["estimate", *args], capsys)
        assert code == 1 and out == "" and flag in err and "options." not in err and "options:" not in err, err


def test_moe_errors_name_their_options(capsys):
    """The MoE checks run inside the model's moe: block and on ep·etp: their errors still name the flags."""
    from helpers import call_entry
    moe = ["--model", "mixtral-8x7b"]
    for args, flag in ((["--ep", "3"], "--ep"), (["--devices", "8", "--ep", "8", "--etp", "2"], "--etp"),
                       (["--devices", "8", "--tp", "2", "--ep", "8", "--etp", "2"], "--ep, --etp"),
                       (["--top-k", "9"], "--top-k"), (["--moe-imbalance", "0.5"], "--moe-imbalance")):
        code, out, err = call_entry(["estimate", *moe, *args], capsys)
        assert code == 1 and out == "" and err.startswith(f"Error: {flag}:") and "options" not in err, err
    # adapters in a hybrid Mamba-2 MoE model are not modelled: the error names --finetune
    code, out, err = call_entry(["estimate", "--model", "nemotron-3-nano", "--finetune", "lora"], capsys)
    assert code == 1 and out == "" and err.startswith("Error: --finetune:") and "options" not in err, err


def test_tokens_given_as_sequences_warn(capsys):
    """--global-batch 4194304 (tokens mistaken for sequences) ran silently into a 5.7-day step."""
    from helpers import call_entry
    code, out, err = call_entry(["estimate", "--global-batch", "4194304", "--json"], capsys)
    assert code == 0
    warnings = json.loads(out)["warnings"]
    assert any("beyond any published training run" in w and "--global-batch-tokens" in w for w in warnings)
    assert any("far outside any measured run" in w for w in warnings)


@pytest.mark.parametrize("columns", ["80", "100", "130"])
def test_piped_tables_honour_columns_and_never_cut_a_number(columns):
    """In process (CliRunner's stdout is no terminal, as a pipe is not; COLUMNS set as a shell would):
    the console script's own pipe is test_script_bad_file_and_plain_output's."""
    env = {"COLUMNS": columns}
    args = ["plan", "--model", "llama3.1-405b", "--devices", "1024", "--global-batch", "2048", "-q"]
    proc = invoke(*args, env=env)
    assert proc.exit_code == 0, proc.stderr
    assert "…" not in proc.stdout
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("Reproduce the winner: "))
    assert "--global-batch 2048" in line and "--recompute" in line       # one line, not hard-wrapped
    est = invoke("estimate", env=env)
    assert max(len(ln) for ln in est.stdout.splitlines()) <= int(columns)


def test_a_default_zero_stage_with_nothing_to_shard_says_so(capsys):
    """dp = 1: the default ZeRO-3/FSDP has no data-parallel ranks to shard over; the table says so
    instead of presenting the stage as if it did something."""
    code, out, _ = call_entry(["estimate", "-m", "gpt2-350m", "-H", "a100-80gb-sxm", "-n", "8", "--tp", "8"], capsys)
    text = " ".join(out.replace("│", " ").split())        # a table cell may wrap on a narrow terminal
    assert code == 0 and "zero=3 (default: FSDP; nothing to shard with dp=1)" in text
    code, out, _ = call_entry(["estimate", "-m", "gpt2-350m", "-H", "a100-80gb-sxm", "-n", "8"], capsys)
    text = " ".join(out.replace("│", " ").split())
    assert code == 0 and "zero=3 (default: FSDP)" in text and "nothing to shard" not in text


def test_gates_take_durations_and_amounts_as_deadline_and_tokens_do():
    """`--max-days 1d` / `12h` and `--max-cost 10k` were refused while `plan --deadline 30d` and `--tokens 300B`
    took such values; a bare --max-days number is still days."""
    for days in ("1", "1d", "24h"):
        result = invoke("estimate", "--max-days", days, "--json")
        assert result.exit_code == 3 and "--max-days 1" in result.stderr, days
    result = invoke("estimate", "--max-cost", "10k", "--json")
    assert result.exit_code == 3 and "--max-cost $10,000" in result.stderr
    for bad in (("--max-days", "1x"), ("--max-cost", "ten")):
        result = invoke("estimate", *bad)
        assert result.exit_code == 1 and result.stdout == "" and bad[1] in result.stderr


def test_the_layout_row_marks_the_parallel_sizes_that_were_defaults():
    """tp, pp, cp, vpp and sequence-parallel are listed in inputs.derived; the table said nothing."""
    words = " ".join(invoke("estimate", "--tp", "2").stdout.replace("│", " ").split())
    assert "(pp, cp, vpp, sequence-parallel: default)" in words


def test_plan_help_says_what_plan_does_without_a_global_batch_and_with_quiet(capsys):
    """`plan --help` called --global-batch required (plan takes 0.5M tokens without it) and --quiet 'No
    progress bar.' (it silences the warnings too)."""
    result = invoke("plan", "--help", env={"COLUMNS": "200"})
    text = " ".join(result.stdout.split())
    assert "is required" not in text and "0.5M tokens in whole sequences" in text
    assert "No progress bar, no warnings." in text
    code, out, err = call_entry(["plan", "--model", "qwen3-0.6b", "--hardware", "dgx-spark", "--devices", "1",
                                 "--finetune", "lora", "--quiet"], capsys)
    assert code == 0 and "Global batch" not in err and err == ""
    assert "(default: 0.5M tokens, a multiple of the device count)" in " ".join(out.split())


# ------------------------------------------------------------------------- -q and the gates in the JSON

def test_every_command_takes_quiet():
    import typer.main
    for name, command in typer.main.get_command(app).commands.items():
        flags = {opt for param in command.params for opt in getattr(param, "opts", [])}
        assert {"--quiet", "-q"} <= flags, f"trainest {name} has no -q"


@pytest.mark.parametrize("args", [["list", "hardware", "-q"], ["validate", "--set", "finetune", "-q"]])
def test_quiet_silences_stderr(args):
    result = invoke(*args)
    assert result.exit_code == 0 and result.stderr == ""


def test_the_json_names_the_gate_that_failed():
    result = invoke("estimate", "--json", "--max-days", "1", "--max-cost", "1e9", "--require-fit")
    assert result.exit_code == 3
    gates = {g["gate"]: g for g in json.loads(result.stdout)["gates"]}
    assert not gates["--max-days"]["passed"] and gates["--max-days"]["value"] > 1
    assert gates["--max-cost"]["passed"] and gates["--require-fit"]["passed"]
    assert gates["--max-days"]["message"] in result.stderr
    assert "gates" not in json.loads(invoke("estimate", "--json").stdout)         # no gate given: no key


def test_compares_failed_gate_says_the_same_on_stderr_as_in_the_json():
    """compare's JSON said 'within 86400 s' and stderr 'meets --deadline 1d': two wordings of one gate, one of them
    in seconds (found checking issue 36's 'the JSON names the gate that failed')."""
    result = invoke("compare", "--model", "llama3-70b", "--hardware", "h100-sxm,b200", "--devices", "8..16",
                    "--deadline", "1d", "--budget", "1000", "--json")
    assert result.exit_code == 3
    failed = [g for g in json.loads(result.stdout)["gates"] if not g["passed"]]
    assert {g["gate"] for g in failed} == {"--deadline", "--budget"}
    assert result.stderr.splitlines() == [f"Gate failed: {g['message']}" for g in failed]
    assert "86400" not in result.stderr


@pytest.mark.parametrize("command", ["estimate", "plan", "compare", "sweep"])
def test_model_help_says_a_hugging_face_config_is_taken(command):
    """--model takes a Hugging Face config.json (issue 36's newcomer task 'a Hugging Face MoE config on 64 GPUs'), and
    its --help said only 'Model preset name or YAML path'."""
    text = " ".join(invoke(command, "--help", env={"COLUMNS": "200"}).stdout.split())
    assert "config.json" in text


@pytest.mark.parametrize("command", ["validate", "calibrate"])
def test_runs_help_points_to_the_runs_schema(command):
    """A newcomer validating their own runs finds from --help alone where a runs file's keys are described."""
    text = " ".join(invoke(command, "--help", env={"COLUMNS": "200"}).stdout.split())
    assert "specs/README.md" in text


def test_option_help_keeps_square_brackets(capsys, monkeypatch):
    """`sweep --png`'s help names the plot extra, `pip install "trainest[plot]"`: rich read `[plot]` as markup and
    dropped it, leaving `pip install "trainest"` (found trying the newcomer's sweep-with-a-plot task, issue 36)."""
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = call_entry(["sweep", "--help"], capsys)
    assert code == 0 and 'pip install "trainest[plot]"' in out


@pytest.mark.parametrize(("command", "flag", "value"),
                         [("estimate", "--devices", "8..64"), ("estimate", "-n", "8..64:8"),
                          ("estimate", "--gpus", "8,16"), ("calibrate", "--devices", "8..64"),
                          ("estimate", "--tp", "1..2")])
def test_a_range_given_where_one_value_is_taken_points_to_the_command_that_takes_it(command, flag, value, capsys):
    """`estimate --devices 8..64` said only that '8..64' is not a valid integer (issue 36): the error names the value,
    says the command takes one value, and gives a command taking the range that runs as pasted."""
    code, out, err = call_entry([command, flag, value], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("Error: "), err
    assert f"'{value}'" in err and "sweep" in err
    if ".." in value and flag != "--tp":
        assert "plan" in err and "compare" in err       # both take a --devices range (not a list)
    pasted = err.split("e.g. ", 1)[1].split(" (see ", 1)[0].split()
    assert pasted[:2] == ["trainest", "sweep"] and pasted[-1] == value
    code, out, err = call_entry([*pasted[1:], "--csv", "-q"], capsys)
    assert code == 0 and len(out.splitlines()) >= 3, err    # a header and at least two points


def test_a_malformed_count_is_still_refused_as_not_a_number(capsys):
    code, out, err = call_entry(["estimate", "--devices", "8..x"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "'8..x'" in err and "sweep" not in err


def test_a_bare_model_name_that_is_both_a_preset_and_a_local_folder_is_refused(tmp_path, monkeypatch, capsys):
    """`--model Mixtral-8x7B` took the preset over ./Mixtral-8x7B (a downloaded config) without a word (issue 36):
    the two may differ, so the bare name is refused naming both; ./Mixtral-8x7B takes the folder and the preset's
    path the preset."""
    from trainest.catalog import specs_dir
    folder = tmp_path / "Mixtral-8x7B"
    folder.mkdir()
    shutil.copy(Path(__file__).parent / "hf_configs" / "Mixtral-8x7B-v0.1" / "config.json", folder / "config.json")
    preset = specs_dir() / "models" / "mixtral-8x7b.yaml"
    monkeypatch.chdir(tmp_path)
    code, out, err = call_entry(["estimate", "--model", "Mixtral-8x7B", "--devices", "16", "--json"], capsys)
    assert code == 1 and out == "" and err.count("\n") == 1 and "'Mixtral-8x7B'" in err, err
    assert "./Mixtral-8x7B" in err and str(preset) in err
    docs = {}
    for choice in ("./Mixtral-8x7B", str(preset)):
        code, out, err = call_entry(["estimate", "--model", choice, "--devices", "16", "--json", "-q"], capsys)
        assert code == 0, err
        docs[choice] = json.loads(out)
    monkeypatch.chdir(Path(__file__).parent)        # no such folder here: the bare name is the preset, as before
    code, out, err = call_entry(["estimate", "--model", "Mixtral-8x7B", "--devices", "16", "--json", "-q"], capsys)
    bare = json.loads(out)
    assert code == 0 and all(bare[k] == docs[str(preset)][k] for k in ("step", "memory")), err
    monkeypatch.chdir(tmp_path)
    code, out, err = call_entry(["list", "models", "-q"], capsys)     # listing the presets is not ambiguous
    assert code == 0 and "mixtral-8x7b" in out, err


def test_sweep_help_offers_only_the_forms_sweep_reads():
    """`sweep --help` offered every sweepable knob 'a range a..b (doubling), a..b:step or a list' (issue 36's --help
    walk): --precision bf16..fp8 is refused (a choice takes a list) and a --zero range steps by one. The help now
    names the forms `knobs.sweep_forms` gives, and these are what `sweep.parse_values` reads."""
    from trainest.errors import SpecError
    from trainest.knobs import BY_NAME, SWEEP_OPTIONS, SWEEP_RANGES, sweep_forms
    from trainest.sweep import parse_values
    swept = {k.name: k for k in SWEEP_OPTIONS if k.name in SWEEP_RANGES}
    assert set(swept) == set(SWEEP_RANGES)
    for name, option in swept.items():
        k = BY_NAME[name]
        first, second = (k.choice_values[:2] if k.kind == "choice" else ("1", "2"))
        assert len(parse_values(k, f"{first},{second}")) == 2
        try:
            parse_values(k, f"{first}..{second}")
            takes_range = True
        except SpecError:
            takes_range = False
        assert takes_range == ("a..b" in sweep_forms(k)) == ("a..b" in option.help), name
    assert parse_values(BY_NAME["zero"], "0..3") == [0, 1, 2, 3] and "by one" in swept["zero"].help
