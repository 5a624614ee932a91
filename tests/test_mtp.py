"""Multi-token prediction (docs/model.md §15.10): its parameters, its place on the last pipeline stage,
shared modules, its FLOPs, the config.json key and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainest.catalog import load_model
from trainest.errors import SpecError
from trainest.estimate import estimate
from trainest.models import model_from_mapping, model_mapping
from trainest.scenario import scenario_from_mapping
from trainest.step.flops import model_flops_per_step, mtp_flops_per_step
from trainest.step.schedule import stage_layers


def _with_mtp(name: str, **mtp) -> dict:
    data = model_mapping(load_model(name))
    data.pop("mtp", None)
    if mtp:
        data["mtp"] = mtp
    data["name"] = f"{name} mtp {mtp}"
    return data


def test_deepseek_v3_module_is_one_moe_layer_and_a_projection():
    """DeepSeek-V3's MTP module: one MoE layer, the 2h -> h projection and three norms (its embedding and
    output head are the model's): 11.6 B of its own (685 B on Hugging Face = 671 B + this + the shared
    embedding and head counted again)."""
    m = load_model("deepseek-v3")
    assert m.mtp is not None and (m.mtp.depth, m.mtp.pattern) == (1, "*E")
    h = m.hidden
    assert m.mtp_params == pytest.approx(m.params_per_moe_layer + 2 * h * h + 3 * h)
    assert m.mtp_params + m.params + 2 * m.vocab * h == pytest.approx(685e9, rel=0.01)
    assert m.params == pytest.approx(671.0e9, rel=1e-3)        # the main model's count is unchanged


def test_shared_modules_train_one_set_of_weights_and_run_every_depth():
    one = model_from_mapping(_with_mtp("nemotron-3-nano", depth=1), "t")
    two = model_from_mapping(_with_mtp("nemotron-3-nano", depth=2, shared=True), "t")
    assert two.mtp_params == one.mtp_params > 0
    assert mtp_flops_per_step(two, 8192, 64) == pytest.approx(2 * mtp_flops_per_step(one, 8192, 64))
    base = {"hardware": "b200", "devices": 8, "precision": "fp8", "seq_len": 8192, "micro_batch": 1,
            "global_batch": 64, "parallel": {"ep": 8, "zero": 1}}
    t = [estimate(scenario_from_mapping({**base, "model": _with_mtp("nemotron-3-nano", **kw)}, "t")).step.time_s
         for kw in ({}, {"depth": 1}, {"depth": 2, "shared": True})]
    assert t[0] < t[1] < t[2]


def test_the_balanced_split_gives_the_last_stage_fewer_layers():
    """Megatron-Bridge's DeepSeek-V3 layout puts MTP on the last stage with fewer layers: the balanced
    split counts the MTP module as a layer there."""
    plain = model_from_mapping(_with_mtp("deepseek-v3"), "t")
    mtp = load_model("deepseek-v3")
    assert stage_layers(mtp, 16, 1, "balanced")[1] == stage_layers(plain, 16, 1, "balanced")[1] - 1
    base = {"hardware": "h800-sxm", "devices": 2048, "precision": "fp8", "seq_len": 4096, "micro_batch": 1,
            "global_batch": 15360, "recompute": "full",
            "parallel": {"pp": 16, "ep": 64, "zero": 1, "pipeline_split": "balanced"}}
    a = estimate(scenario_from_mapping({**base, "model": model_mapping(plain)}, "t"))
    b = estimate(scenario_from_mapping({**base, "model": "deepseek-v3"}, "t"))
    assert b.step.time_s == pytest.approx(a.step.time_s, rel=0.02)     # the heavy stage still sets the pace
    assert b.memory.weights_bytes >= a.memory.weights_bytes


def test_model_flops_count_the_modules():
    m = load_model("deepseek-v3")
    plain = model_from_mapping(_with_mtp("deepseek-v3"), "t")
    assert model_flops_per_step(m, 4096, 1) == model_flops_per_step(plain, 4096, 1)
    per_token = mtp_flops_per_step(m, 4096, 1) / 4096 / 3
    assert per_token > 2 * m.hidden * m.vocab      # its head, its projection, its MoE layer


def test_config_json_reads_the_nextn_layers(tmp_path):
    """DeepSeek's num_nextn_predict_layers is the MTP depth (the preset's: tests/test_hf_config.py)."""
    config = json.loads((Path(__file__).parent / "hf_configs" / "DeepSeek-V3" / "config.json").read_text())
    for depth in (0, 2):
        (tmp_path / f"c{depth}.json").write_text(json.dumps({**config, "num_nextn_predict_layers": depth}))
        m = load_model(str(tmp_path / f"c{depth}.json"))
        assert (m.mtp.depth if m.mtp else 0) == depth


@pytest.mark.parametrize("mtp, message", [
    ({"depth": 0}, r"mtp.depth: 0"),
    ({"depth": 1, "pattern": "*E"}, r"mtp.pattern: .*E needs the model's moe"),
    ({"depth": 1, "pattern": "M-"}, r"mtp.pattern: .*must be one module's blocks: \*- \(one transformer layer\)"),
    ({"depth": 1, "pattern": "**-"}, r"mtp.pattern: '\*\*-' must be one module's blocks"),
])
def test_bad_mtp_names_the_value(mtp, message):
    data = {**model_mapping(load_model("llama3-8b")), "mtp": mtp}
    with pytest.raises(SpecError, match=message):
        model_from_mapping(data, "m")


def test_a_last_stage_of_only_the_mtp_module_and_the_loss():
    """The balanced split can leave the last stage no layer of the main model (DeepSeek-V3 on pp 32: 2
    units a stage, the MTP module and the loss): the step stays finite (it divided by its 0 layers)."""
    import math
    m = load_model("deepseek-v3")
    assert stage_layers(m, 32, 1, "balanced")[1] == 0
    s = scenario_from_mapping({"model": "deepseek-v3", "hardware": "h800-sxm", "devices": 2048, "precision": "fp8",
                               "seq_len": 4096, "micro_batch": 1, "global_batch": 4096, "recompute": "full",
                               "parallel": {"pp": 32, "ep": 64, "zero": 1, "pipeline_split": "balanced"}}, "t")
    assert math.isfinite(estimate(s).step.time_s)


def test_a_hybrid_mtp_pattern_uses_the_kinds_of_its_blocks():
    data = {**model_mapping(load_model("nemotron-3-nano")), "mtp": {"depth": 1, "pattern": "*-"}}
    with pytest.raises(SpecError, match=r"mtp.pattern: '\*-' must be one module's blocks: blocks of the kinds"):
        model_from_mapping(data, "m")


def test_the_mtp_modules_all_to_alls_are_expert_parallel_traffic_not_tp():
    """moe.md #4: DeepSeek-V3 at tp 1 has no TP traffic; its MTP module's all-to-alls count as EP, and the
    step is the same sum of its terms."""
    base = {"model": "deepseek-v3", "hardware": "gb200", "devices": 256, "precision": "fp8", "global_batch": 4096,
            "parallel": {"pp": 4, "vpp": 4, "pipeline_split": "balanced", "ep": 64, "zero": 1}}
    e = estimate(scenario_from_mapping(base, "t"))
    detail = e.step.communication_detail_s
    assert detail["tp"] == 0.0
    assert sum(detail.values()) == pytest.approx(e.step.communication_s, rel=1e-12)
    from trainest.scenario import job_of, layout_of
    from trainest.step import step_terms
    s = scenario_from_mapping(base, "t")
    p = step_terms(job_of(s), layout_of(s)).parts
    assert float(p.last_is_max) == 1.0 and float(p.mtp_ep_s) > 0.0 and float(p.head_tp_s) == 0.0
    layers_ep = float(p.ep_exposed_s * p.layers * p.micro_batches)
    assert detail["ep"] == pytest.approx(layers_ep + float(p.mtp_ep_s * p.micro_batches), rel=1e-12)
