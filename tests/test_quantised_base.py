"""A quantised frozen base (QLoRA's NF4, LLM.int8) is refused where its kernels do not exist (issue 36)."""

from __future__ import annotations

import json

import pytest
from helpers import call_entry

from trainest.errors import SpecError
from trainest.scenario import scenario_from_mapping

JOB = {"model": "llama3.2-3b", "devices": 1}


@pytest.mark.parametrize("hardware", ["tpu-v5p", "tpu-v6e", "trainium2", "gaudi2", "gaudi3"])
@pytest.mark.parametrize("finetune", [{"method": "qlora"}, {"method": "lora", "base_bits": 8}])
def test_a_quantised_base_is_refused_without_its_kernels(hardware, finetune):
    with pytest.raises(SpecError, match="has no kernels on") as err:
        scenario_from_mapping({**JOB, "hardware": hardware, "finetune": finetune}, "options")
    assert "--finetune lora" in str(err.value)            # the alternatives


@pytest.mark.parametrize("hardware", ["h100-sxm", "mi300x", "dgx-spark", "gh200", "apple-m4-max"])
def test_qlora_runs_where_its_kernels_exist(hardware):
    s = scenario_from_mapping({**JOB, "hardware": hardware, "finetune": "qlora"}, "options")
    assert s.finetune.base_bits == 4


def test_a_16_bit_lora_still_runs_on_a_tpu():
    s = scenario_from_mapping({**JOB, "hardware": "tpu-v5p", "finetune": "lora"}, "options")
    assert s.finetune.base_bits == 16


def test_cli_refusal_is_one_line(capsys):
    code, out, err = call_entry(["estimate", "--hardware", "gaudi3", "--finetune", "qlora"], capsys)
    assert code == 1 and out == "" and err.count("\n") == 1 and "Gaudi" in err


def test_compare_keeps_the_tpu_with_the_reason(capsys):
    code, out, _ = call_entry(["compare", "--hardware", "h100-sxm,tpu-v5p", "--model", "llama3.2-3b", "--devices",
                               "1", "--finetune", "qlora", "--json", "-q"], capsys)
    assert code == 0
    by = {e["hardware"]: e for e in json.loads(out)["compare"]}
    assert by["h100-sxm"]["can_run"] and not by["tpu-v5p"]["can_run"]
    assert "no kernels on tpu-v5p" in by["tpu-v5p"]["reason"]
