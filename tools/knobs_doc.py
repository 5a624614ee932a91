"""Write docs/inputs.md, the reference of every input, from the knob table (trainest/knobs.py).

    python tools/knobs_doc.py          # rewrite docs/inputs.md
    python tools/knobs_doc.py --check  # exit 1 when docs/inputs.md is not what the table gives
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trainest.knobs import (  # noqa: E402
    COMMAND_KNOBS,
    COMPARE_OPTIONS,
    KNOBS,
    MOE_MESSAGE_KEYS,
    PLAN_OPTIONS,
    SHAPE,
    SWEEP_OPTIONS,
    SWEEP_RANGES,
    Knob,
)

OUT = ROOT / "docs" / "inputs.md"

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


if __name__ == "__main__":
    text = document()
    if "--check" in sys.argv[1:]:
        sys.exit(0 if OUT.read_text(encoding="utf-8") == text else 1)
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
