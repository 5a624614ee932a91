"""typer parameter annotations generated from the option table (trainest.options), shared by the
commands, so an option that several commands take (--model, --hardware, --precision, --json...) is
declared once. Imports typer: only for the command modules, never for the fast estimate path."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Optional

import typer

from trainest.options import ESTIMATE_OPTIONS, Opt

OPTION = {o.name: o for o in ESTIMATE_OPTIONS}


def _choice_enum(option_name: str) -> type[Enum]:
    """The str Enum typer needs for a choice option of the table (values = the option's choices)."""
    o = OPTION[option_name]
    return Enum(o.enum, {c: c for c in o.choices}, type=str, module=__name__)


# one Enum per choice option of the table (a new choice option needs nothing here)
_CHOICE_ENUMS = {o.name: _choice_enum(o.name) for o in ESTIMATE_OPTIONS if o.kind == "choice"}
_VALUE_TYPES = {"int": int, "float": float, "str": str}


def option_annotation(o: Opt | str, **changes: Any) -> Any:
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
