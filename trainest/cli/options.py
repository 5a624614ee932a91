"""typer parameter annotations generated from the knob table (trainest.knobs), shared by the
commands, so an option that several commands take (--model, --hardware, --precision, --json...) is
declared once. Imports typer: only for the command modules, never for the fast estimate path."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Optional

import typer

from trainest.knobs import BY_NAME, ESTIMATE_OPTIONS, Knob

OPTION = BY_NAME


def _choice_enum(option_name: str) -> type[Enum]:
    """The Enum typer shows for a choice option: the knob's own vocabulary (trainest.choices)."""
    choices = OPTION[option_name].choices
    if choices is None:
        raise TypeError(f"knob {option_name!r} is a choice without a vocabulary")
    return choices


# one Enum per choice option of the table (a new choice option needs nothing here)
_CHOICE_ENUMS = {o.name: _choice_enum(o.name) for o in ESTIMATE_OPTIONS if o.kind == "choice"}
_VALUE_TYPES = {"int": int, "float": float, "str": str}


def option_annotation(o: Knob | str, **changes: Any) -> Any:
    """`Annotated[type, typer.Option(...)]` for one option of the table (by object or name);
    `changes` replace fields of the option (e.g. a command-specific help text)."""
    if isinstance(o, str):
        o = OPTION[o]
    if changes:
        from dataclasses import replace
        o = replace(o, **changes)
    extra = {} if o.show_default is None else {"show_default": o.show_default}
    if o.kind == "flag":
        return Annotated[bool, typer.Option(*o.flags, help=o.help, **extra)]
    value_type = {"switch": bool, "choice": _CHOICE_ENUMS.get(o.name)}.get(o.kind) or _VALUE_TYPES[o.kind]
    return Annotated[Optional[value_type], typer.Option(*o.flags, help=o.help, **extra)]
