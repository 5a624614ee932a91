"""docs/model.md against the code: every `Code:` pointer names something that exists, and every
public function of the model's modules is documented there (and has a docstring)."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODEL_DOC = (ROOT / "docs" / "model.md").read_text(encoding="utf-8")
# the modules that hold the model's formulas: each public function must appear in docs/model.md
MODEL_MODULES = ("trainest.step.flops", "trainest.step.roofline", "trainest.step.rates", "trainest.step.layer", "trainest.step.collectives",
                 "trainest.step.traffic", "trainest.step.overlap", "trainest.step.schedule", "trainest.step.optimizer",
                 "trainest.step.compose", "trainest.step.finetune", "trainest.step.offload", "trainest.step.activations",
                 "trainest.step.ops", "trainest.step.moe", "trainest.step.mla", "trainest.memory", "trainest.precision",
                 "trainest.training")
PATH = re.compile(r"`(trainest/[\w/]+\.py)(?::\s*([A-Za-z_][\w.]*))?[^`]*`")
NEXT = re.compile(r"\s*(?:,|\(|\)|→|and\b)?\s*`([A-Za-z_][\w.]*)(?:\([^`]*\))?`")


def code_pointers() -> list[tuple[str, str]]:
    """(module path, name) for every name a `Code:` bullet of docs/model.md points at: the name in
    the path's own backticks and the names chained after it (`a`, `b` (`c`) → `D`), until other text."""
    bullets, current = [], None
    for line in MODEL_DOC.splitlines():
        if "Code:" in line:
            current = [line[line.index("Code:"):]]
            bullets.append(current)
        elif current is not None and line.startswith("  ") and line.strip():
            current.append(line)
        else:
            current = None
    pointers = []
    for bullet in (" ".join(b) for b in bullets):
        for match in PATH.finditer(bullet):
            path, pos = match.group(1), match.end()
            names = [match.group(2)] if match.group(2) else []
            while (more := NEXT.match(bullet, pos)) is not None:
                names.append(more.group(1))
                pos = more.end()
            pointers += [(path, n) for n in names]
    return pointers


def resolve(path: str, name: str) -> bool:
    module = importlib.import_module(path[:-3].replace("/", "."))
    obj: object = module
    for part in name.split("."):
        if not hasattr(obj, part):
            fields = getattr(obj, "__dataclass_fields__", {})
            return part in fields
        obj = getattr(obj, part)
    return True


def test_code_pointers_are_found():
    assert len(code_pointers()) > 40


@pytest.mark.parametrize(("path", "name"), code_pointers(), ids=lambda x: str(x))
def test_every_code_pointer_names_something_that_exists(path, name):
    assert (ROOT / path).is_file(), f"docs/model.md names {path}, which does not exist"
    assert resolve(path, name), f"docs/model.md names {path}: {name}, which does not exist"


def public_functions() -> list[tuple[str, str, object]]:
    out = []
    for module_name in MODEL_MODULES:
        module = importlib.import_module(module_name)
        for name, obj in vars(module).items():
            if name.startswith("_") or not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            if getattr(obj, "__module__", None) != module_name:
                continue      # imported, documented where it is defined
            out.append((module_name, name, obj))
    return out


@pytest.mark.parametrize(("module", "name", "obj"), public_functions(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_public_model_function_is_documented(module, name, obj):
    assert re.search(rf"`[^`]*\b{name}\b[^`]*`", MODEL_DOC), f"{module}.{name} is not named in docs/model.md"
    assert inspect.getdoc(obj), f"{module}.{name} has no docstring"


def test_no_stale_references():
    assert "DESIGN.md" not in MODEL_DOC
    assert "trainest/step.py" not in MODEL_DOC and "trainest/comm.py" not in MODEL_DOC
    assert "recompute code 0/1/2" not in MODEL_DOC


def test_inputs_reference_is_generated_from_the_knob_table():
    """docs/inputs.md is what `python tools/knobs_doc.py` writes from trainest/knobs.py."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("knobs_doc", ROOT / "tools" / "knobs_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (ROOT / "docs" / "inputs.md").read_text(encoding="utf-8") == module.document(), \
        "docs/inputs.md is stale: run python tools/knobs_doc.py"


def test_the_inputs_echo_has_a_knob_for_every_key():
    """The JSON `inputs` echo (scenario_mapping) writes only keys of the knob table (and the model and
    the derived list), so it loads again as a scenario."""
    from trainest.knobs import FINETUNE, KNOBS, PARALLEL, SCENARIO
    from trainest.scenario import scenario_from_mapping, scenario_mapping
    for finetune in ("full", "qlora"):
        echo = scenario_mapping(scenario_from_mapping({"model": "llama3-8b", "devices": 8, "finetune": finetune}, "t"))
        top = {k.yaml_key for k in KNOBS if k.group == SCENARIO} | {"parallel", "finetune", "derived", "micro_batches"}
        assert set(echo) <= top, set(echo) - top
        assert set(echo["parallel"]) <= {k.yaml_key for k in KNOBS if k.group == PARALLEL}
        assert set(echo["finetune"]) <= {k.yaml_key for k in KNOBS if k.group == FINETUNE}
