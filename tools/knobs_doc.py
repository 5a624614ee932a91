"""Write docs/inputs.md, the reference of every input, and the simple knobs' properties of the JSON schemas
(the `inputs` echo of estimate and sweep, the `job` of plan and compare) from the knob table (trainest/knobs.py).

    python tools/knobs_doc.py          # rewrite docs/inputs.md and docs/schema/*.schema.json's knob properties
    python tools/knobs_doc.py --check  # exit 1 when either is not what the table gives
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trainest.knobs import (  # noqa: E402
    COMMAND_KNOBS,
    BY_NAME,
    COMPARE_OPTIONS,
    HOST_NAMES,
    KNOBS,
    MOE_MESSAGE_KEYS,
    PLAN_OPTIONS,
    SHAPE,
    SIMPLE,
    SWEEP_OPTIONS,
    SWEEP_RANGES,
    Knob,
)

OUT = ROOT / "docs" / "inputs.md"
SCHEMA_DIR = ROOT / "docs" / "schema"
# where each command's JSON echoes the job's inputs: the path of that object in its schema
ECHO_OBJECTS = {"estimate": ("properties", "inputs"), "plan": ("properties", "job"),
                "compare": ("properties", "job"), "sweep": ("properties", "sweep", "items", "properties", "inputs")}

# a shape override's key in a model mapping (models.py: the MoE keys sit in its moe: block, the window's size in
# attention_window:), where it is not `model.<name>`
MODEL_KEYS = {**{name: f"model.moe.{key}" for key, name in MOE_MESSAGE_KEYS.items()},
              "attention_window": "model.attention_window.size"}


def _yaml_key(k: Knob) -> str:
    return MODEL_KEYS.get(k.name, k.path) if k.group == SHAPE else k.path


def _values(k: Knob) -> str:
    if k.kind == "choice":
        return " \\| ".join(k.choice_values)
    return {"int": "integer", "float": "number", "str": "text", "flag": "flag", "switch": "on/off",
            "list": "repeatable text", "length": "whole count of tokens (8k = 8192, 4M = 4·2^20)"}[k.kind]


def _row(k: Knob, *, yaml: bool) -> str:
    flags = ", ".join(f"`{f}`" for f in k.flags)
    default = k.show_default if k.show_default is not None else ("" if k.default in (None, False) else str(k.default))
    where = [w for w, on in (("plan varies it", k.searched), ("plan keeps it for every plan", k.job)) if on]
    cells = [flags] + ([f"`{_yaml_key(k)}`"] if yaml else []) + [_values(k), default, k.help.replace("|", "\\|"),
                                                           "; ".join(where)]
    return "| " + " | ".join(cells) + " |"


def document() -> str:
    head = ["# Inputs", "",
            "Every input of `trainest estimate` (the command-line option and the scenario / runs YAML key it",
            "sets) and of `trainest plan`, `compare` and `sweep`, generated from the knob table in `trainest/knobs.py` by",
            "`python tools/knobs_doc.py`; do not edit by hand. A value not given is derived and shown as",
            "`(default)` in the output. The shape overrides (`--layers` ... `--attention-window`) change a preset or",
            "a model file on the command line; in a scenario file the model is given whole, and their YAML key is",
            "that model mapping's (`model: {layers: 32, moe: {experts: 8, top_k: 2, ...}, ...}`, specs/README.md).", "",
            "## Scenario (`estimate`, scenario and runs YAML)", "",
            "| option | YAML key | values | default | what it is | plan |", "|---|---|---|---|---|---|"]
    rows = [_row(k, yaml=True) for k in KNOBS]
    cmd = ["", "## `estimate` only", "", "| option | values | default | what it is | |", "|---|---|---|---|---|"]
    cmd += [_row(k, yaml=False) for k in COMMAND_KNOBS]
    shared = {k.name for k in KNOBS} | {k.name for k in COMMAND_KNOBS}
    plan = ["", "## `plan` only (its other options are the scenario's, above)", "",
            "| option | values | default | what it is | |", "|---|---|---|---|---|"]
    plan += [_row(k, yaml=False) for k in PLAN_OPTIONS if k.name not in shared]
    more = _command_section("compare", COMPARE_OPTIONS, shared, also=("hardware",))
    more += _command_section("sweep", SWEEP_OPTIONS, shared)
    more += ["", "`sweep` takes one of " + ", ".join(f"`--{n.replace('_', '-')}`" for n in SWEEP_RANGES)
             + " as a range (`a..b` doubling, `a..b:step`) or a list (`a,b,c`); the others as above."]
    return "\n".join(head + rows + cmd + plan + more) + "\n"


def _command_section(name: str, options: tuple[Knob, ...], shared: set[str], also: tuple[str, ...] = ()) -> list[str]:
    """The options of a command that are not the scenario's or estimate's (those read as above)."""
    own = [k for k in options if k.name not in shared or k.name in also]
    lines = ["", f"## `{name}` (its other options are the scenario's and plan's, above)",
             "", "| option | values | default | what it is | |", "|---|---|---|---|---|"]
    return lines + [_row(k, yaml=False) for k in own]


def knob_property(k: Knob) -> dict[str, Any]:
    """A simple knob's JSON-schema property: its words, or its type and limits; its help as description."""
    prop: dict[str, Any]
    if k.kind == "choice":
        prop = {"enum": list(k.choice_values)}
    else:
        prop = {"type": {"int": "integer", "float": "number", "switch": "boolean"}.get(k.kind, "string")}
        if k.limits is not None:
            prop.update(minimum=k.limits[0], maximum=k.limits[1])
    return {**prop, "description": k.help}


def schema_texts() -> dict[Path, str]:
    """Every schema that echoes the job, with each simple knob's property and its name among the required, and
    the host knobs' properties."""
    out = {}
    for name, path in ECHO_OBJECTS.items():
        file = SCHEMA_DIR / f"{name}.schema.json"
        doc = json.loads(file.read_text(encoding="utf-8"))
        obj = doc
        for key in path:
            obj = obj[key]
        for k in SIMPLE:
            obj["properties"][k.yaml_key] = knob_property(k)
            if k.yaml_key not in obj["required"]:
                obj["required"].append(k.yaml_key)
        for name in HOST_NAMES:        # echoed only when given (scenario/host.py)
            obj["properties"][name] = knob_property(BY_NAME[name])
        out[file] = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    return out


if __name__ == "__main__":
    texts = {OUT: document(), **schema_texts()}
    if "--check" in sys.argv[1:]:
        sys.exit(0 if all(f.read_text(encoding="utf-8") == t for f, t in texts.items()) else 1)
    for file, text in texts.items():
        file.write_text(text, encoding="utf-8")
        print(f"wrote {file.relative_to(ROOT)}")
