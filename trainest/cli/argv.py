"""The typer-free reader of `trainest estimate ARGS`: the common case (`trainest estimate --json
--gpus 64 ...`) is read directly from the option table (trainest.knobs), so a single estimate starts
without importing typer. It accepts only what it is sure typer would read the same way and returns
None for anything else (--help, an unknown or malformed option, a value typer might read
differently), in which case the typer app runs and owns the outcome. Standard library only."""

from __future__ import annotations

import re
from typing import Any

from trainest.knobs import ESTIMATE_OPTIONS, Knob


def _flag_table(options: tuple[Knob, ...]) -> dict[str, tuple[Knob, Any]]:
    """flag -> (option, value for flags and switches / None for options that take a value)."""
    table: dict[str, tuple[Knob, Any]] = {}
    for o in options:
        for flag in o.flags:
            if o.kind == "switch":
                on, off = flag.split("/")
                table[on] = (o, True)
                table[off] = (o, False)
            else:
                table[flag] = (o, True if o.kind == "flag" else None)
    return table


# patterns as text: compiled on first use through re's cache, not at import (start-up time, issue 36)
_PLAIN_INT = r"[0-9]+"
_PLAIN_LENGTH = r"[0-9]+[kKmMgG]?"
_PLAIN_FLOAT = r"[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?"


def _convert(o: Knob, text: str) -> tuple[bool, Any]:
    """(understood, value) for one option value given as text."""
    if o.kind == "int":
        return (True, int(text)) if re.fullmatch(_PLAIN_INT, text) else (False, None)
    if o.kind == "length":       # a string typer passes on as well; the scenario parses it
        return (True, text) if re.fullmatch(_PLAIN_LENGTH, text) else (False, None)
    if o.kind == "float":
        return (True, float(text)) if re.fullmatch(_PLAIN_FLOAT, text) else (False, None)
    if o.kind == "choice":       # case-insensitive, as typer's choices (cli/options.py)
        return (True, text.lower()) if text.lower() in o.choice_values else (False, None)
    return True, text


def parse_estimate_argv(args: list[str], options: tuple[Knob, ...] = ESTIMATE_OPTIONS) -> dict[str, Any] | None:
    """Option values for `estimate` from the words after the command name, or None when the words hold
    anything this reader is not certain typer would read identically (then typer must parse them).

    Understood: `--long value`, `--long=value`, `-x value` (separate word), flags, `--x/--no-x`, and a
    repeated option (the last one wins, as in click). Declined: --help, unknown options, `--`,
    positional words, clustered or attached short options (`-qn8`), a value that starts with '-', a
    missing value, and a value typer would convert differently or reject.
    """
    table = _flag_table(options)
    values: dict[str, Any] = {o.name: o.default for o in options}
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if word.startswith("--") and "=" in word:
            flag, _, text = word.partition("=")
            entry = table.get(flag)
            if entry is None or entry[1] is not None:   # unknown, or a flag given a value
                return None
        else:
            entry = table.get(word)
            if entry is None:
                return None
            if entry[1] is not None:                     # a flag or one side of a switch
                values[entry[0].name] = entry[1]
                continue
            if i >= len(args) or args[i].startswith("-"):
                return None
            text = args[i]
            i += 1
        understood, value = _convert(entry[0], text)
        if not understood:
            return None
        values[entry[0].name] = value
    return values
