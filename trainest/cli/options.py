"""typer parameter annotations generated from the knob table (trainest.knobs), shared by the
commands, so an option that several commands take (--model, --hardware, --precision, --json...) is
declared once. Imports typer: only for the command modules, never for the fast estimate path."""

from __future__ import annotations

import inspect
from enum import Enum
from typing import Annotated, Any, Callable, Optional

import typer

from trainest.knobs import BY_NAME, ESTIMATE_OPTIONS, Knob

OPTION = BY_NAME


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
    if o.kind == "list":
        return Annotated[Optional[list[str]], typer.Option(*o.flags, help=o.help, **extra)]
    value_type = {"switch": bool, "choice": o.choices}.get(o.kind) or _VALUE_TYPES[o.kind]
    return Annotated[Optional[value_type], typer.Option(*o.flags, help=o.help, **extra)]


def typer_command(options: tuple[Knob, ...], help_text: str, body: Callable[[dict[str, Any]], int],
                  name: str) -> Callable[..., None]:
    """A function typer can register: keyword parameters generated from `options` (the knob
    table); it calls `body(values)` and exits with its code."""
    def command(**values: Any) -> None:
        code = body(values)
        if code:
            raise typer.Exit(code)

    params = [inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default,
                                annotation=option_annotation(o)) for o in options]
    command.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
    command.__doc__ = help_text
    command.__name__ = command.__qualname__ = name
    return command
