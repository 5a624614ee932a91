"""FP8 dot-product attention (`fp8_attention`, docs/model.md §2.4): the attention core's products on the FP8
tensor cores, at the fraction of the FP8 peak FlashAttention-3's FP8 kernel reaches relative to its BF16 one."""

from __future__ import annotations

import pytest

from helpers import call_entry, job_and_layout
from trainest.catalog import load_hardware, load_model
from trainest.record import replace
from trainest.step import step_terms
from trainest.step.rates import FP8_ATTENTION_RELATIVE, attention_flops_per_s

H100 = load_hardware("h100-sxm")
LLAMA = load_model("llama2-7b")


def _job(fp8_attention: bool, hw=H100, precision="fp8"):
    job, layout = job_and_layout(LLAMA, hw, precision, seq_len=8192.0, dp=8.0, global_batch=8.0)
    return replace(job, fp8_attention=fp8_attention), layout


def test_the_ratio_is_flashattention3s_fp8_over_bf16_fraction_of_peak():
    """FA3 on H100 SXM5: BF16 740 TFLOP/s of 989, FP8 close to 1200 of 1979 (Shah et al. 2024)."""
    assert FP8_ATTENTION_RELATIVE == pytest.approx((1200 / 1979) / (740 / 989))
    assert 0.75 < FP8_ATTENTION_RELATIVE < 0.85


def test_fp8_attention_runs_at_the_fp8_peak_times_the_kernels_relative_reach():
    on, off = (attention_flops_per_s(*_job(flag)) for flag in (True, False))
    ratio = H100.peak("fp8") / H100.peak_16bit_flops_per_s * FP8_ATTENTION_RELATIVE
    assert on / off == pytest.approx(ratio, rel=1e-12)
    assert 1.5 < ratio < 1.7             # FA3's measured FP8 speed-up over BF16 on H100: ~1.6


def test_only_the_attention_core_gets_faster():
    """The GEMMs, the memory-bound work and the traffic do not change; the step gets shorter by what the
    attention core saves (the exposed traffic by no more than a hair: a faster core leaves a little more of
    the windows waiting for the host, where hidden traffic contends with nothing, docs/model.md §4.7)."""
    on, off = (step_terms(*_job(flag)) for flag in (True, False))
    assert on.time_s < off.time_s
    assert float(on.memory_s) == pytest.approx(float(off.memory_s), rel=1e-12)
    assert float(on.communication_s) <= float(off.communication_s) * (1.0 + 1e-12)
    assert float(on.communication_s) == pytest.approx(float(off.communication_s), rel=1e-4)
    attn_on = float(on.parts.layer.attn_fwd_s + on.parts.layer.attn_bwd_s)
    attn_off = float(off.parts.layer.attn_fwd_s + off.parts.layer.attn_bwd_s)
    assert attn_on < attn_off
    layers = LLAMA.layers * float(off.parts.micro_batches)
    assert float(off.compute_s - on.compute_s) == pytest.approx(layers * (attn_off - attn_on), rel=1e-6)


def test_fp8_attention_without_an_fp8_recipe_is_refused(capsys):
    code, out, err = call_entry(["estimate", "--model", "llama2-7b", "--hardware", "h100-sxm", "--devices", "8",
                                 "--precision", "bf16", "--fp8-attention"], capsys)
    assert code != 0 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "fp8-attention" in err and "bf16" in err and "Traceback" not in err


def test_the_importer_reads_the_records_fp8_dpa_setting():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
    from import_runs import hunt_fp8_attention
    assert hunt_fp8_attention({"notes": "Config sets FP8_DPA=1. LoRA: ..."}) is True
    assert hunt_fp8_attention({"notes": "step time). FP8_DPA=False. LoRA"}) is False
    assert hunt_fp8_attention({"notes": "FP8_DPA=0."}) is False
    assert hunt_fp8_attention({"notes": "nothing said"}) is None
