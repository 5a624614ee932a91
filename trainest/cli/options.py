"""typer parameter annotations generated from the knob table (trainest.knobs), shared by the
commands, so an option that several commands take (--model, --hardware, --precision, --json...) is
declared once. Imports typer: only for the command modules, never for the fast estimate path."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any

import typer

from trainest.choices import enum
from trainest.knobs import BY_NAME, RANGE_COMMANDS, Knob, one_value_error

OPTION = BY_NAME


_VALUE_TYPES = {"int": int, "float": float, "str": str, "length": str}   # lengths: parsed by the scenario


def _name_completer(names: Callable[[], list[str]]) -> Callable[[str], list[str]]:
    """A shell-completion callback offering the catalog's names that start with what was typed; after a
    comma (`--hardware h100-sxm,b2`) it completes the last name of the list. Runs only in completion mode."""
    def complete(incomplete: str) -> list[str]:
        done, _, last = incomplete.rpartition(",")
        head = done + "," if done else ""
        return [head + n for n in names() if n.startswith(last.lower())]
    return complete


def _hardware_names() -> list[str]:
    from trainest.catalog import hardware_names
    return hardware_names()


def _model_names() -> list[str]:
    from trainest.catalog import model_names
    return model_names()


# options whose values are catalog names: completed from the catalog (file paths are the shell's to complete)
NAME_COMPLETION = {"hardware": _name_completer(_hardware_names), "model": _name_completer(_model_names)}


def _enum_of(o: Knob) -> Any:
    """The StrEnum of a choice knob: its vocabulary's, or its own words' (named after the knob)."""
    if isinstance(o.choices, tuple):
        return enum(o.name.title().replace("_", ""), o.choices)
    return enum(o.choices)


def _one_int(o: Knob, command: str) -> Callable[[str], int]:
    """typer's parser of the one-value int option `o` of `command`: a whole number, as typer reads it; a range or
    list another command takes (`--devices 8..64`) is refused naming that command (knobs.one_value_error)."""
    def integer(text: str) -> int:
        try:
            return int(text)
        except ValueError:
            raise typer.BadParameter(one_value_error(o, text, command)
                                     or f"'{text}' is not a valid integer.") from None
    integer.__name__ = "int"         # the metavar typer shows in --help (<int>, as for every other int option)
    return integer


def option_annotation(o: Knob | str, command: str = "", **changes: Any) -> Any:
    """`Annotated[type, typer.Option(...)]` for one option of the table (by object or name) of `command`;
    `changes` replace fields of the option (e.g. a command-specific help text)."""
    if isinstance(o, str):
        o = OPTION[o]
    if changes:
        o = o._replace(**changes)
    # show_default True (typer's own default) shows the actual default; a text describes a derived one
    shown: bool | str = True if o.show_default is None else o.show_default
    first, *more = o.flags
    # choices are case-insensitive, like hardware and model names and the YAML keys (`--precision FP8`)
    # the help is plain text: rich would read `pip install "trainest[plot]"` as markup and drop `[plot]`
    from rich.markup import escape
    # an int that another command takes as a range: its own parser, whose error points there
    parser = _one_int(o, command) if o.kind == "int" and o.name in RANGE_COMMANDS else None
    option = typer.Option(first, *more, help=escape(o.help), show_default=shown, case_sensitive=o.kind != "choice",
                          autocompletion=NAME_COMPLETION.get(o.name), rich_help_panel=o.panel, parser=parser)
    if o.kind == "flag":
        return Annotated[bool, option]
    if o.kind == "list":
        return Annotated[list[str] | None, option]
    value_type: Any = bool if o.kind == "switch" else _enum_of(o) if o.kind == "choice" else _VALUE_TYPES[o.kind]
    return Annotated[value_type | None, option]


# `--json` and `--quiet`, as types every command's signature can use
JsonFlag = Annotated[bool, typer.Option("--json", help=BY_NAME["json_out"].help)]
QuietFlag = Annotated[bool, typer.Option("--quiet", "-q", help="No warnings, notes or progress bar on stderr.")]


def typer_command(options: tuple[Knob, ...], help_text: str, body: Callable[[dict[str, Any]], int],
                  name: str) -> Callable[..., None]:
    """A function typer can register: keyword parameters generated from `options` (the knob
    table); it calls `body(values)` and exits with its code."""
    def command(**values: Any) -> None:
        code = body(values)
        if code:
            raise typer.Exit(code)

    params = [inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default,
                                annotation=option_annotation(o, name)) for o in options]
    command.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
    command.__doc__ = help_text
    command.__name__ = command.__qualname__ = name
    return command
