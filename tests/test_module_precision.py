"""Modules kept in a higher precision under an FP8/FP4 recipe (`module_precision`, docs/model.md §2.2): each named
module's GEMMs at its own precision's rates, the MTP module as a job of its precision, the boundary checks, and the
importer's reading of a Megatron-Core quantisation recipe."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import call_entry

from trainest.errors import SpecError
from trainest.estimate import estimate
from trainest.precision import MODULE_PRECISION_MODULES
from trainest.record import replace
from trainest.scenario import job_of, layout_of, scenario_from_mapping
from trainest.step.collectives import job_tiers
from trainest.step.mtp import mtp_pass
from trainest.step.rates import gemm_peak_fraction, local_shape, module_rates, rates_of

REPO = Path(__file__).resolve().parents[1]
SUPER = {"model": "nemotron-3-super", "hardware": "gb300", "devices": 64, "precision": "fp4", "micro_batch": 1,
         "global_batch": 512, "seq_len": 8192, "parallel": {"ep": 64}, "bf16_layers": 14}


def _job(**given):
    s = scenario_from_mapping({**SUPER, **given}, "t")
    return job_of(s), layout_of(s)


def _step_s(**given) -> float:
    return float(estimate(scenario_from_mapping({**SUPER, **given}, "t")).step.time_s)


def test_a_module_kept_in_bf16_or_fp8_runs_at_that_precisions_rates():
    """A BF16 module: the BF16 peak, η_gemm and 2-byte inputs; an FP8 (MXFP8) module under FP4: the FP8 peak and
    η_lp·η_gemm blended with the BF16 layers (those layers run it in BF16 too); a module not named: the job's own
    rates. The bug this catches: the Nemotron 3 Super NVFP4 recipes' BF16 attention and latent projections and
    their MXFP8 Mamba output projection ran at the FP4 rate."""
    job, layout = _job(module_precision="linear_qkv=bf16,out_proj=fp8")
    r = rates_of(job, layout)
    hw, eff = job.hardware, job.hardware.efficiency
    qkv, out, other = (module_rates(job, r, m) for m in ("linear_qkv", "out_proj", "in_proj"))
    assert qkv.peak_flops_per_s == hw.peak("bf16") and qkv.gemm_peak_fraction == pytest.approx(eff.gemm)
    assert qkv.gemm_input_bytes == 2.0
    kept = 14.0 / job.model.layers
    fp8, bf16 = hw.peak("fp8") * eff.gemm * eff.low_precision_gemm, hw.peak("bf16") * eff.gemm
    assert out.peak_flops_per_s == hw.peak("fp8") and out.gemm_input_bytes == 1.0
    assert out.peak_flops_per_s * out.gemm_peak_fraction == pytest.approx(1.0 / ((1 - kept) / fp8 + kept / bf16))
    assert other is r and r.peak_flops_per_s == hw.peak("fp4")
    assert gemm_peak_fraction(job) == r.gemm_peak_fraction
    # the same GEMM costs more the higher its precision
    shape = (8192.0, 4096.0, 4096.0)
    times = [rr.gemm_op("g", *shape).compute_s for rr in (other, out, qkv)]
    assert times[0] < times[1] < times[2]


@pytest.mark.parametrize("module", list(MODULE_PRECISION_MODULES))
def test_every_module_a_model_has_moves_its_step_when_kept_in_bf16(module):
    """Each module of MODULE_PRECISION_MODULES is wired to its GEMMs: kept in BF16 the step is slower than at FP4,
    and in FP8 between the two (the GEMMs are device time of a device-bound step)."""
    fp4, bf16 = _step_s(), _step_s(module_precision=f"{module}=bf16")
    assert bf16 > fp4
    if module != "mtp":
        assert fp4 < _step_s(module_precision=f"{module}=fp8") < bf16


def test_the_mtp_module_kept_in_bf16_is_a_bf16_job():
    """mtp=bf16 computes the whole MTP module (its GEMMs and casts) as a BF16 job: the same pass as the job at
    BF16, not the FP4 one."""
    job, layout = _job(module_precision="mtp=bf16")
    x = local_shape(job, layout)
    tiers = job_tiers(job)
    got = mtp_pass(job, layout, rates_of(job, layout), x, tiers)
    at16 = replace(job, precision="bf16", bf16_layers=0.0)
    want = mtp_pass(at16, layout, rates_of(at16, layout), x, tiers)
    fp4 = replace(job, module_precision="none")
    low = mtp_pass(fp4, layout, rates_of(fp4, layout), x, tiers)
    assert got.lp == want.lp and got.extra_c == want.extra_c
    assert got.extra_c > low.extra_c


def test_the_given_form_is_checked_and_written_canonically():
    """Written in the table's module order, lower case, spaces dropped; `none` and an empty text keep no module."""
    s = scenario_from_mapping({**SUPER, "module_precision": " MTP=bf16, linear_qkv = BF16"}, "t")
    assert s.knob("module_precision") == "linear_qkv=bf16,mtp=bf16"
    for empty in ("none", ""):
        assert scenario_from_mapping({**SUPER, "module_precision": empty}, "t").knob("module_precision") == "none"
    assert scenario_from_mapping(SUPER, "t").knob("module_precision") == "none"


@pytest.mark.parametrize(("given", "message"), [
    ({"module_precision": "linear_qkv=bf15"}, "'linear_qkv=bf15' is not module=precision"),
    ({"module_precision": "qkv=bf16"}, "'qkv=bf16' is not module=precision"),
    ({"module_precision": "linear_qkv"}, "'linear_qkv' is not module=precision"),
    ({"module_precision": "mtp=bf16,mtp=fp8"}, "mtp is given twice"),
    ({"module_precision": "linear_qkv=bf16", "precision": "bf16", "bf16_layers": 0},
     "keeps modules out of FP8/FP4 GEMMs, and precision is bf16"),
    ({"module_precision": "out_proj=fp8", "precision": "fp8"}, "out_proj=fp8 keeps a module in FP8 out of FP4"),
    ({"module_precision": "in_proj=bf16", "model": "llama3-8b", "parallel": {}, "bf16_layers": 0,
      "devices": 8}, "llama3-8b has no in_proj"),
    ({"module_precision": "linear_qkv=bf16", "model": "deepseek-v3", "bf16_layers": 0}, "has no linear_qkv"),
])
def test_bad_module_precisions_are_refused_naming_the_value(given, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(")) as e:
        scenario_from_mapping({**SUPER, **given}, "t")
    assert "module_precision" in str(e.value)


def test_the_cli_refuses_a_bad_module_precision_in_one_line(capsys):
    code, out, err = call_entry(["estimate", "--model", "llama3-8b", "--precision", "fp8", "--module-precision",
                                 "linear_qkv=fp4"], capsys)
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1 and "--module-precision" in err
    code, out, _ = call_entry(["estimate", "--model", "llama3-8b", "--precision", "fp8", "--module-precision",
                               "linear_qkv=bf16,linear_proj=bf16", "--json"], capsys)
    assert code == 0 and '"module_precision": "linear_qkv=bf16,linear_proj=bf16"' in out


def test_the_importer_reads_a_quantisation_recipes_matchers():
    """Megatron-Bridge's quant_recipe (Megatron-Core RecipeConfig of GlobMatchers) becomes module_precision, MXFP8
    as fp8; a pattern trainest has no module for, or a config it has no precision for, leaves it unmodelled."""
    sys.path.insert(0, str(REPO / "tools"))
    from recipe_settings import module_precision_of, settings_of

    text = ("RecipeConfig(\n  matcher(GlobMatcher(pattern=*.linear_qkv, config_key=bf16)\n"
            "  matcher(GlobMatcher(pattern=*.linear_proj, config_key=bf16)\n"
            "  matcher(GlobMatcher(pattern=*mlp.fc[12]_latent_proj, config_key=bf16)\n"
            "  matcher(GlobMatcher(pattern=mtp.*, config_key=bf16)\n"
            "  matcher(GlobMatcher(pattern=*mixer.out_proj, config_key=mxfp8)\n)")

    def rec(q):
        r = {"settings": {"precision": {"fp4": {"value": "e2m1"}, "quant_recipe": {"value": q}}}}
        r.update(id="r", source={"tag": "t"})
        return r

    want = "linear_qkv=bf16,linear_proj=bf16,out_proj=fp8,latent_proj=bf16,mtp=bf16"
    assert module_precision_of(rec(text)) == want
    top = settings_of(rec(text), True)[0]
    assert top["module_precision"] == want and not any("quant_recipe" in u for u in top.get("unmodelled", []))
    assert module_precision_of(rec(None)) is None
    odd = text.replace("*.linear_qkv", "*.linear_fc1")
    assert module_precision_of(rec(odd)) is None
    assert any("quant_recipe" in u for u in settings_of(rec(odd), True)[0]["unmodelled"])
    assert module_precision_of(rec(text.replace("config_key=mxfp8", "config_key=nvfp4"))) is None
