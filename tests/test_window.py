"""Sliding-window and chunked attention (docs/model.md §2.4.1): the share of the causal scores a window
computes, its limits, the mean layer of windowed and global layers, the model FLOPs, what does not
change (a model without a window, standard attention), the config.json reader and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from trainest.catalog import load_model
from trainest.cli import app
from trainest.errors import SpecError
from trainest.estimate import estimate
from trainest.models import AttentionWindow, model_from_mapping, model_mapping, with_shape
from trainest.scenario import job_of, layout_of, scenario_from_mapping, scenario_mapping
from trainest.step.flops import CAUSAL_FRACTION, mean_window_fraction, model_flops_per_step
from trainest.step.layer import attention_ops
from trainest.step.rates import (
    ATTENTION_HALF_SEQ,
    chunked_fraction,
    local_shape,
    packed_fraction,
    rates_of,
    sliding_window_fraction,
    window_fraction,
    windowed_layer_fraction,
)

CONFIGS = Path(__file__).resolve().parent / "hf_configs"
RUNNER = CliRunner()


def windowed(model_name: str, window: dict | None) -> dict:
    """The preset's model mapping with `window` as its attention_window (None: without one)."""
    data = model_mapping(load_model(model_name))
    data.pop("attention_window", None)
    if window is not None:
        data["attention_window"] = window
    return data


def scenario(model: dict | str, **extra):
    if isinstance(model, str):
        model = model_mapping(load_model(model))
    base = {"model": model, "hardware": "h100-sxm", "devices": 8, "seq_len": 4096, "global_batch": 64,
            "micro_batch": 1, "parallel": {"tp": 1, "pp": 1}}
    if isinstance(model, dict) and model.get("moe") is not None:
        base["parallel"] = {"tp": 1, "pp": 1, "ep": 8}
    return scenario_from_mapping({**base, **extra}, "test")


def attention_parts(s):
    job, layout = job_of(s), layout_of(s)
    return attention_ops(job, layout, rates_of(job, layout), local_shape(job, layout))


# ------------------------------------------------------------------------------------ the fractions

@pytest.mark.parametrize("s", [1.0, 7.0, 1024.0, 4096.0, 131072.0])
def test_a_window_at_least_the_sequence_computes_the_whole_causal_mask(s):
    for w in (s, s + 1.0, 10.0 * s):
        assert sliding_window_fraction(w, s) == 1.0 and chunked_fraction(w, s) == 1.0


def test_the_sliding_fraction_counts_min_i_plus_1_w_keys_per_query():
    """Brute force over a small mask: query i sees min(i + 1, w) keys, of the s(s + 1)/2 causal ones."""
    s = 37
    for w in range(1, 40):
        keys = sum(min(i + 1, w) for i in range(s))
        assert sliding_window_fraction(float(w), float(s)) == pytest.approx(keys / (s * (s + 1) / 2), rel=1e-12)


def test_the_chunked_fraction_counts_each_querys_own_chunk():
    """Brute force: query i sees the keys of its chunk up to itself, i mod c + 1 of them."""
    s = 37
    for c in range(1, 40):
        keys = sum(i % c + 1 for i in range(s))
        assert chunked_fraction(float(c), float(s)) == pytest.approx(keys / (s * (s + 1) / 2), rel=1e-12)


def test_a_one_token_window_computes_almost_nothing_and_matches_the_closed_form():
    s = 4096.0
    assert sliding_window_fraction(1.0, s) == pytest.approx(2.0 / (s + 1.0))     # the diagonal only
    assert chunked_fraction(1.0, s) == pytest.approx(2.0 / (s + 1.0))
    # (2w/s)(1 − w/(2s)) for w << s; GPT-OSS: 128 of 4096 keys -> 6.2 % of the causal scores
    assert sliding_window_fraction(128.0, s) == pytest.approx(2 * 128 / s * (1 - 128 / (2 * s)), rel=2e-3)
    assert chunked_fraction(1024.0, s) == pytest.approx(1024.0 / s, rel=1e-3)


def test_fractions_rise_with_the_window():
    s = 8192.0
    for fraction in (sliding_window_fraction, chunked_fraction):
        values = [fraction(float(w), s) for w in (1, 2, 16, 128, 512, 1024, 4096, 8192)]
        assert values == sorted(values) and values[-1] == 1.0 and values[0] < 1e-3
    # a sliding window sees at least the keys a chunk of the same length does
    for w in (128.0, 1000.0, 4096.0):
        assert sliding_window_fraction(w, s) >= chunked_fraction(w, s)


def test_a_document_shorter_than_the_window_is_unaffected_by_it():
    """Packed documents: the window restarts in each document, so documents of L <= w keep their causal blocks."""
    s = scenario(windowed("mistral-7b", {"size": 4096}), seq_len=8192, packed_length=1024)
    job = job_of(s)
    assert windowed_layer_fraction(job) == packed_fraction(job) == pytest.approx(1024 / 8192)
    s = scenario(windowed("mistral-7b", {"size": 256}), seq_len=8192, packed_length=1024)
    job = job_of(s)
    assert windowed_layer_fraction(job) == pytest.approx(packed_fraction(job) * window_fraction("sliding", 256, 1024))
    assert windowed_layer_fraction(job) < packed_fraction(job)


# ------------------------------------------------------------------------------ the model's window

def test_the_window_counts_its_layers():
    gpt_oss = load_model("gpt-oss-120b")
    assert gpt_oss.attention_window == AttentionWindow(size=128, kind="sliding", global_every=2)
    assert gpt_oss.windowed_layers == 18 and gpt_oss.attention_layers == 36
    assert load_model("mistral-7b").windowed_layers == 32
    assert load_model("llama4-scout").windowed_layers == 36 and load_model("llama4-scout").attention_window.kind \
        == "chunked"
    assert AttentionWindow(size=1024, global_every=6).windowed_layers(26) == 22   # Gemma 3 1B: 4 global of 26
    assert load_model("llama3-8b").attention_window is None and load_model("llama3-8b").windowed_layers == 0


def test_the_model_mapping_round_trips_the_window():
    for name in ("gpt-oss-120b", "mistral-7b", "llama4-maverick"):
        m = load_model(name)
        assert model_from_mapping(model_mapping(m), "t") == m


def test_the_estimate_json_echoes_the_window_and_loads_again():
    e = estimate(scenario("gpt-oss-120b"))
    echoed = scenario_mapping(e.scenario)
    assert echoed["model"]["attention_window"] == {"size": 128, "kind": "sliding", "global_every": 2}
    again = estimate(scenario_from_mapping(json.loads(json.dumps(echoed)), "echo"))
    assert again.scenario.model.attention_window == e.scenario.model.attention_window
    assert again.step.time_s == e.step.time_s
    assert "attention_window" not in scenario_mapping(estimate(scenario("llama3-8b")).scenario)["model"]


def test_the_override_sets_the_window_size():
    m = with_shape(load_model("gpt-oss-120b"), attention_window=256)
    assert m.attention_window == AttentionWindow(size=256, kind="sliding", global_every=2)
    assert with_shape(load_model("llama3-8b"), attention_window=512).attention_window == AttentionWindow(512)


# ------------------------------------------------------------------------------- the step and FLOPs

def test_a_model_without_a_window_keeps_one_attention_op():
    fwd, bwd = attention_parts(scenario("llama3-8b"))
    assert [o.name for o in fwd] == ["attention"] and [o.name for o in bwd] == ["attention"]


def test_a_window_as_long_as_the_sequence_changes_nothing():
    """w >= s: every layer computes its whole causal block at the unwindowed rate: the same step, the same
    FLOPs, to the bit for a window on every layer (the op is only renamed)."""
    plain = estimate(scenario(windowed("mistral-7b", None)))
    for window in ({"size": 4096}, {"size": 10**6}, {"size": 4096, "kind": "chunked"}):
        long = estimate(scenario(windowed("mistral-7b", window)))
        assert long.step.time_s == plain.step.time_s
        assert long.throughput.model_flops_per_step == plain.throughput.model_flops_per_step
    half = estimate(scenario(windowed("mistral-7b", {"size": 8192, "global_every": 2})))
    assert half.step.time_s == pytest.approx(plain.step.time_s, rel=1e-12)


def test_the_windowed_share_of_the_flops_and_its_shorter_kernel():
    """The windowed layers' op computes φ_w of the causal FLOPs at the rate of a w-token kernel; the global
    layers' op what a full layer does; each weighted by its layers' share; the bytes are a full layer's."""
    plain_f, _ = attention_parts(scenario(windowed("gpt-oss-120b", None)))
    s = scenario("gpt-oss-120b")
    job, layout = job_of(s), layout_of(s)
    r = rates_of(job, layout)
    fwd, bwd = attention_parts(s)
    assert [o.name for o in fwd] == [o.name for o in bwd] == ["attention", "attention.window"]
    full = plain_f[0]
    phi = sliding_window_fraction(128.0, 4096.0)
    assert fwd[0].flops == pytest.approx(0.5 * full.flops, rel=1e-12)
    assert fwd[1].flops == pytest.approx(0.5 * phi * full.flops, rel=1e-12)
    assert fwd[0].bytes + fwd[1].bytes == pytest.approx(full.bytes, rel=1e-12)
    length = (128.0 / (128.0 + ATTENTION_HALF_SEQ)) / (4096.0 / (4096.0 + ATTENTION_HALF_SEQ))
    assert r.window_attention_flops_per_s == pytest.approx(r.attention_flops_per_s * length, rel=1e-12)
    assert fwd[1].compute_s == pytest.approx(0.5 * phi * full.flops / r.window_attention_flops_per_s, rel=1e-12)


def test_mixed_layers_lie_between_all_windowed_and_all_global():
    """global_every 2 is the mean of a window on every layer and none: FLOPs exactly, the step in between."""
    none = estimate(scenario(windowed("gpt-oss-120b", None)))
    half = estimate(scenario(windowed("gpt-oss-120b", {"size": 128, "global_every": 2})))
    every = estimate(scenario(windowed("gpt-oss-120b", {"size": 128})))
    assert every.step.time_s < half.step.time_s < none.step.time_s
    mean = (none.throughput.model_flops_per_step + every.throughput.model_flops_per_step) / 2.0
    assert half.throughput.model_flops_per_step == pytest.approx(mean, rel=1e-12)


def test_gpt_oss_is_faster_with_its_window_at_4096_tokens():
    with_window, without = estimate(scenario("gpt-oss-120b")), estimate(scenario(windowed("gpt-oss-120b", None)))
    assert with_window.scenario.seq_len == 4096
    assert with_window.step.time_s < without.step.time_s
    assert with_window.throughput.model_flops_per_step < without.throughput.model_flops_per_step


def test_a_smaller_window_never_takes_longer():
    times = [estimate(scenario(windowed("mistral-7b", {"size": w}), seq_len=16384)).step.time_s
             for w in (128, 512, 2048, 4096, 8192, 16384)]
    assert times == sorted(times)


def test_model_flops_count_what_the_window_computes():
    m = load_model("gpt-oss-120b")
    plain = model_from_mapping(windowed("gpt-oss-120b", None), "t")
    phi = sliding_window_fraction(128.0, 4096.0)
    assert mean_window_fraction(m, 4096) == pytest.approx(0.5 + 0.5 * phi, rel=1e-12)
    assert mean_window_fraction(plain, 4096) == 1.0
    # only the attention core's term moves: the difference is the masked-out scores, 3 passes
    attention = 3 * 36 * 4096 * 2 * 4096 * 64 * (64 + 64) * CAUSAL_FRACTION
    diff = model_flops_per_step(plain, 4096, 1) - model_flops_per_step(m, 4096, 1)
    assert diff == pytest.approx(attention * (1 - mean_window_fraction(m, 4096)), rel=1e-9)
    # the full-mask convention (causal=False) is the same with or without a window
    assert model_flops_per_step(m, 4096, 1, causal=False) == model_flops_per_step(plain, 4096, 1, causal=False)


def test_standard_attention_computes_every_score_whatever_the_window():
    """Megatron's unfused path materialises s×s scores: the same step and hardware FLOPs; only the model
    FLOPs (what MFU counts) are the window's."""
    plain = estimate(scenario(windowed("mistral-7b", None), seq_len=8192, attention="standard"))
    window = estimate(scenario(windowed("mistral-7b", {"size": 1024}), seq_len=8192, attention="standard"))
    assert window.step.time_s == plain.step.time_s
    assert window.throughput.hardware_tflops_per_device == pytest.approx(
        plain.throughput.hardware_tflops_per_device, rel=1e-12)
    assert window.throughput.model_flops_per_step < plain.throughput.model_flops_per_step


def test_memory_does_not_depend_on_the_window():
    plain = estimate(scenario(windowed("gpt-oss-120b", None)))
    window = estimate(scenario("gpt-oss-120b"))
    assert window.memory.per_device_bytes == plain.memory.per_device_bytes


def test_context_parallel_ring_traffic_is_kept():
    """The ring moves every K, V chunk as before (conservative); the window's shorter attention hides less."""
    plain = estimate(scenario(windowed("mistral-7b", None), seq_len=32768, parallel={"tp": 1, "pp": 1, "cp": 4}))
    window = estimate(scenario(windowed("mistral-7b", {"size": 4096}), seq_len=32768,
                               parallel={"tp": 1, "pp": 1, "cp": 4}))
    assert window.step.time_s < plain.step.time_s


# ------------------------------------------------------------------------------------- config.json

def _config(name: str) -> dict:
    return json.loads((CONFIGS / name / "config.json").read_text(encoding="utf-8"))


def _model(data: dict):
    from trainest.catalog import model_from_hf_config
    return model_from_hf_config(data, "config.json")


def test_configs_give_the_presets_window():
    assert load_model(str(CONFIGS / "gpt-oss-120b")).attention_window == load_model("gpt-oss-120b").attention_window
    assert load_model(str(CONFIGS / "Mistral-7B-v0.1")).attention_window == load_model("mistral-7b").attention_window
    assert load_model(str(CONFIGS / "Llama-4-Maverick-17B-128E")).attention_window == \
        load_model("llama4-maverick").attention_window
    assert load_model(str(CONFIGS / "gemma-2-9b")).attention_window == AttentionWindow(4096, "sliding", 2)
    assert load_model(str(CONFIGS / "Phi-3-mini-4k-instruct")).attention_window == AttentionWindow(2047)
    for name in ("Qwen3-8B", "Qwen3-30B-A3B", "Meta-Llama-3-8B", "Mixtral-8x7B-v0.1", "DeepSeek-V3"):
        assert load_model(str(CONFIGS / name)).attention_window is None, name


def test_gemma3_and_layer_types_layouts():
    gemma2 = _config("gemma-2-9b")
    gemma3 = {**gemma2, "architectures": ["Gemma3ForCausalLM"], "sliding_window": 1024, "num_hidden_layers": 62}
    assert _model(gemma3).attention_window == AttentionWindow(1024, "sliding", 6)
    assert _model({**gemma3, "sliding_window_pattern": 4}).attention_window == AttentionWindow(1024, "sliding", 4)
    types = ["sliding_attention"] * 5 + ["full_attention"]
    assert _model({**gemma3, "layer_types": types * 10 + types[:2]}).windowed_layers == 52
    assert _model({**gemma3, "layer_types": ["full_attention"] * 62}).attention_window is None
    llama4 = _config("Llama-4-Maverick-17B-128E")
    text = {**llama4["text_config"], "no_rope_layers": [1, 0] * 24}
    assert _model({**llama4, "text_config": text}).attention_window == AttentionWindow(8192, "chunked", 2)


def test_qwen_windows_need_use_sliding_window():
    qwen = {**_config("Qwen3-8B"), "sliding_window": 4096}
    assert _model(qwen).attention_window is None
    assert _model({**qwen, "use_sliding_window": True, "max_window_layers": 0}).attention_window == AttentionWindow(4096)
    assert _model({**qwen, "use_sliding_window": True, "max_window_layers": 36}).attention_window is None
    with pytest.raises(SpecError, match=r"max_window_layers: 28 full-attention layers before 8 windowed"):
        _model({**qwen, "use_sliding_window": True, "max_window_layers": 28})


def test_layouts_trainest_cannot_express_are_one_clear_error():
    data = _config("gpt-oss-120b")
    with pytest.raises(SpecError, match=r"layer_types: windowed \(w\) and global \(G\) layers GwGw"):
        _model({**data, "layer_types": ["full_attention", "sliding_attention"] * 18})
    with pytest.raises(SpecError, match=r"layer_types: .* must list one of"):
        _model({**data, "layer_types": ["sliding_attention"] * 35})
    mixed = ["sliding_attention", "chunked_attention"] * 18
    with pytest.raises(SpecError, match="sliding and chunked layers in one model"):
        _model({**data, "layer_types": mixed, "attention_chunk_size": 8192})


# -------------------------------------------------------------------------------------- bad input

def _model_file(tmp_path: Path, window: object) -> str:
    data = yaml.safe_load((Path(__file__).resolve().parent.parent / "specs" / "models" / "gpt-oss-20b.yaml")
                          .read_text(encoding="utf-8"))
    data["attention_window"] = window
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("window, words", [
    ({"size": 0}, ("attention_window.size", "0", "positive whole number of tokens")),
    ({"size": -128}, ("attention_window.size", "-128", "positive whole number")),
    ({"size": 12.5}, ("attention_window.size", "12.5", "positive whole number")),
    ({"size": "wide"}, ("attention_window.size", "wide", "positive whole number")),
    ({}, ("attention_window", "size")),
    ({"size": 128, "kind": "banded"}, ("attention_window.kind", "banded", "sliding", "chunked")),
    ({"size": 128, "global_every": 1}, ("attention_window.global_every", "1", "2 to 24", "leave attention_window out")),
    ({"size": 128, "global_every": 25}, ("attention_window.global_every", "25", "24 attention layers", "2 to 24")),
    ({"size": 128, "every": 2}, ("attention_window", "every")),
    (128, ("attention_window",)),
], ids=["zero", "negative", "fraction", "text", "no-size", "kind", "every-1", "every-too-large", "unknown-key",
        "not-a-mapping"])
def test_a_bad_window_is_one_error_line(tmp_path, window, words):
    result = RUNNER.invoke(app, ["estimate", "--model", _model_file(tmp_path, window)])
    assert result.exit_code == 1 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


def test_a_bad_window_option_is_named_by_its_flag():
    result = RUNNER.invoke(app, ["estimate", "--attention-window", "0"])
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "Error: --attention-window: 0 must be a positive whole number of tokens, at most 100,000,000 (the window "
        "or chunk length, e.g. 128 or 4096)"]
    result = RUNNER.invoke(app, ["estimate", "--attention-window", "wide"])
    assert result.exit_code == 2 and result.stdout == "" and "--attention-window" in result.stderr


def test_the_scenario_table_names_the_window():
    from trainest.report.estimate import window_text
    assert window_text(load_model("gpt-oss-120b")) == "sliding window 128 on 18 of 36 layers"
    assert window_text(load_model("llama4-scout")) == "chunked attention (8192-token chunks) on 36 of 48 layers"
    assert window_text(load_model("llama3-8b")) == ""
    result = RUNNER.invoke(app, ["estimate", "--model", "gpt-oss-20b", "--hardware", "h100-sxm", "--ep", "8"],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "attention flash (sliding window 128 on 12 of 24 layers)" in result.stdout


def test_the_plan_search_times_windowed_models_as_estimate_does():
    """The vectorised search (arrays of layouts, cp among them: the window's span is min(s/c, w)) gives each
    plan the step time `estimate` gives it."""
    import numpy as np

    from trainest import search as S
    from trainest.choices import RECOMPUTES

    job = {"model": "mistral-7b", "hardware": "h100-sxm", "global_batch": 32, "seq_len": 32768}
    base = S.job_scenario(job)
    n = 16
    g = S.enumerate_plans(base, n, S.SearchSpace())
    ev = S.evaluate_grid(base, g)
    fit_idx = np.flatnonzero(ev.fits)
    cps = {int(g.cp[i]) for i in fit_idx}
    assert len(cps) > 1
    sample = np.random.default_rng(3).choice(fit_idx, min(12, fit_idx.size), replace=False)
    for i in sample:
        s = scenario_from_mapping({**job, "devices": n,
                                   "parallel": {"tp": int(g.tp[i]), "pp": int(g.pp[i]), "cp": int(g.cp[i]),
                                                "vpp": int(g.vpp[i]), "zero": int(g.zero[i]),
                                                "sequence_parallel": bool(g.sp[i])},
                                   "micro_batch": int(g.micro_batch[i]), "recompute": RECOMPUTES[int(g.recompute[i])]})
        assert ev.time_s[i] == pytest.approx(estimate(s).step.time_s, rel=1e-9)


def test_fewer_layers_than_the_global_period_keep_every_layer_windowed():
    """--layers 1 on GPT-OSS (every 2nd layer global): its one layer is layer 0, a sliding one."""
    m = with_shape(load_model("gpt-oss-120b"), layers=1)
    assert m.attention_window.global_every == 0 and m.windowed_layers == 1
    assert with_shape(load_model("gpt-oss-120b"), layers=6).windowed_layers == 3
