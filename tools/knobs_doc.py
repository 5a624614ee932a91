"""Write docs/inputs.md, the reference of every input, from the knob table (trainest/knobs.py).

    python tools/knobs_doc.py          # rewrite docs/inputs.md
    python tools/knobs_doc.py --check  # exit 1 when docs/inputs.md is not what the table gives
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trainest.knobs import COMMAND_KNOBS, KNOBS, PLAN_OPTIONS, Knob  # noqa: E402

OUT = ROOT / "docs" / "inputs.md"


def _values(k: Knob) -> str:
    if k.kind == "choice":
        return " \\| ".join(k.choice_values)
    return {"int": "integer", "float": "number", "str": "text", "flag": "flag", "switch": "on/off",
            "list": "repeatable text", "length": "whole count of tokens (8k = 8192, 4M = 4·2^20)"}[k.kind]


def _row(k: Knob, *, yaml: bool) -> str:
    flags = ", ".join(f"`{f}`" for f in k.flags)
    default = k.show_default if k.show_default is not None else ("" if k.default in (None, False) else str(k.default))
    where = [w for w, on in (("plan varies it", k.searched), ("plan keeps it for every plan", k.job)) if on]
    cells = [flags] + ([f"`{k.path}`"] if yaml else []) + [_values(k), default, k.help.replace("|", "\\|"),
                                                           "; ".join(where)]
    return "| " + " | ".join(cells) + " |"


def document() -> str:
    head = ["# Inputs", "",
            "Every input of `trainest estimate` (the command-line option and the scenario / runs YAML key it",
            "sets) and of `trainest plan`, generated from the knob table in `trainest/knobs.py` by",
            "`python tools/knobs_doc.py`; do not edit by hand. A value not given is derived and shown as",
            "`(default)` in the output.", "",
            "## Scenario (`estimate`, scenario and runs YAML)", "",
            "| option | YAML key | values | default | what it is | plan |", "|---|---|---|---|---|---|"]
    rows = [_row(k, yaml=True) for k in KNOBS]
    cmd = ["", "## `estimate` only", "", "| option | values | default | what it is | |", "|---|---|---|---|---|"]
    cmd += [_row(k, yaml=False) for k in COMMAND_KNOBS]
    shared = {k.name for k in KNOBS} | {k.name for k in COMMAND_KNOBS}
    plan = ["", "## `plan` only (its other options are the scenario's, above)", "",
            "| option | values | default | what it is | |", "|---|---|---|---|---|"]
    plan += [_row(k, yaml=False) for k in PLAN_OPTIONS if k.name not in shared]
    return "\n".join(head + rows + cmd + plan) + "\n"


if __name__ == "__main__":
    text = document()
    if "--check" in sys.argv[1:]:
        sys.exit(0 if OUT.read_text(encoding="utf-8") == text else 1)
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
