"""The softmax's exponentials as a ceiling on fused attention (docs/model.md §2.4): each score takes one
exponential on the special-function units and 2·(d_qk + d_v) FLOPs on the tensor cores forward, so a device whose
tensor cores outgrew its exponential units (Blackwell: 16 exponentials to 8,192 tensor FLOPs per SM and clock) runs
narrow heads and FP8 products at the exponentials' rate."""

from __future__ import annotations

import pytest

from helpers import call_entry, job_and_layout
from trainest.catalog import load_hardware, load_model
from trainest.record import replace
from trainest.step import step_terms
from trainest.step.layer import exponential_slowdown
from trainest.step.rates import attention_peak_flops_per_s

LLAMA = load_model("llama2-7b")                    # d_h = 128
NARROW = replace(LLAMA, head_dim=64, heads=64)     # d_h = 64, the same width


def _job(hw_name: str, model=LLAMA, precision: str = "bf16", fp8_attention: bool = False):
    job, layout = job_and_layout(model, load_hardware(hw_name), precision, seq_len=8192.0, dp=8.0, global_batch=8.0)
    return replace(job, fp8_attention=fp8_attention), layout


def _attention_s(hw_name: str, **kw) -> tuple[float, float]:
    parts = step_terms(*_job(hw_name, **kw)).parts.layer
    return float(parts.attn_fwd_s), float(parts.attn_bwd_s)


def test_the_exponential_rate_is_the_16_bit_peak_times_the_architectures_ratio():
    """H100: 989 TFLOP/s × 16/4096 = 3.86 × 10¹² exponentials/s, FlashAttention-3's quoted 3.9 (Shah et al. 2024);
    GB200: 2500 × 16/8192 = 4.9, NVIDIA's 5 for Blackwell; Blackwell Ultra twice per clock."""
    rate = {n: load_hardware(n).compute.exp_per_s for n in ("h100-sxm", "gb200", "b200", "gb300", "a100-80gb-sxm")}
    assert rate["h100-sxm"] == pytest.approx(3.9e12, rel=0.02)
    assert rate["gb200"] == pytest.approx(5.0e12, rel=0.03)
    assert rate["gb300"] == pytest.approx(2.0 * rate["gb200"], rel=1e-3)
    assert rate["b200"] == pytest.approx(load_hardware("b200").peak_16bit_flops_per_s * 16 / 8192, rel=1e-3)
    assert rate["a100-80gb-sxm"] == pytest.approx(312e12 * 16 / 2048, rel=1e-3)


@pytest.mark.parametrize("hw", ["h100-sxm", "a100-80gb-sxm", "gb300", "b300"])
def test_no_ceiling_where_the_exponential_units_keep_up_at_16_bit(hw):
    """Ampere, Hopper and Blackwell Ultra compute a d_h = 64 head's exponentials at least as fast as its products
    (Hopper and Blackwell Ultra exactly as fast: 4 × 64 FLOPs per exponential = 4096/16 = 8192/32)."""
    for model in (LLAMA, NARROW):
        assert exponential_slowdown(_job(hw, model)[0]) == pytest.approx((1.0, 1.0), abs=1e-3)


def test_blackwell_runs_narrow_heads_at_the_exponentials_rate():
    job = _job("b200", NARROW)[0]
    hw = job.hardware
    forward, backward = exponential_slowdown(job)
    assert forward == pytest.approx(hw.peak_16bit_flops_per_s / (hw.compute.exp_per_s * 2 * (64 + 64)))
    assert forward == pytest.approx(2.0, rel=1e-3)       # 8192 / (16 × 4 × 64)
    assert backward == 1.0                               # 2.5× the FLOPs per exponential: under the peak
    wide = exponential_slowdown(_job("b200", LLAMA)[0])
    assert wide[0] == pytest.approx(1.0, abs=1e-3)       # d_h = 128: the two rates meet
    fwd_narrow, bwd_narrow = _attention_s("b200", model=NARROW)
    fwd_wide, bwd_wide = _attention_s("b200", model=LLAMA)
    # the same score count at half the width: the products halve, the exponentials do not
    assert fwd_narrow > 0.75 * fwd_wide


def test_fp8_products_gain_nothing_on_blackwell_and_1_6x_on_hopper():
    """FP8 attention speeds up the products, not the exponentials: on an H100 (3.86 × 10¹²/s, 1.98 PFLOP/s of
    exponential-bound products at d_h = 128) the FP8 kernel's 1.6 PFLOP/s stays under the ceiling; on a B200 its
    3.6 PFLOP/s meets the 16-bit kernel's ceiling of 2.25."""
    h_on, h_off = (_attention_s("h100-sxm", precision="fp8", fp8_attention=f)[0] for f in (True, False))
    b_on, b_off = (_attention_s("b200", precision="fp8", fp8_attention=f)[0] for f in (True, False))
    assert h_off / h_on == pytest.approx(1.62, rel=0.01)
    assert b_off / b_on == pytest.approx(1.0, abs=0.01)
    job = _job("b200", precision="fp8", fp8_attention=True)[0]
    assert exponential_slowdown(job)[0] == pytest.approx(attention_peak_flops_per_s(job) / 2250e12, rel=1e-3)


def test_a_device_without_an_exponential_rate_has_no_ceiling():
    hw = load_hardware("b200")
    job = replace(_job("b200", NARROW)[0], hardware=replace(hw, compute=replace(hw.compute, exp_per_s=None)))
    assert exponential_slowdown(job) == (1.0, 1.0)


def test_standard_attention_has_no_fused_kernel_to_bound():
    job = replace(_job("b200", NARROW)[0], attention="standard")
    assert exponential_slowdown(job) == (1.0, 1.0)


def test_a_bad_exponential_rate_in_a_hardware_file_is_one_clear_line(tmp_path, capsys):
    import yaml

    from trainest.catalog import specs_dir
    doc = yaml.safe_load((specs_dir() / "hardware" / "b200.yaml").read_text())
    doc["name"] = "my-b200"
    doc["compute"]["exp_tera_per_s"] = -4.0
    path = tmp_path / "my-b200.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, out, err = call_entry(["estimate", "--hardware", str(path), "--devices", "8"], capsys)
    assert code != 0 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "exp_tera_per_s" in err and "Traceback" not in err
