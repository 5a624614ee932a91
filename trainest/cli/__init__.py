"""The command line: one module per command (estimate, plan, validate, calibrate, list), the
typer app that registers them (`application.py`), the typer-free fast path of a single estimate
(`main.py`, `argv.py`) and the shared option annotations (`options.py`). Commands only parse and
render: they build inputs, call the library and hand the results to trainest.report.

What every command shares lives here: the exit codes and the one way to fail. `from trainest.cli
import app` imports typer; importing this package alone does not.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

EXIT_OK = 0
EXIT_BAD_INPUT = 1       # bad input or spec: one `Error: ...` line on stderr
EXIT_USAGE = 2           # the parser's usage errors
EXIT_GATE = 3            # a CI gate (--max-days, --max-cost, --require-fit) was broken


def error_line(message: str) -> None:
    """One `Error: ...` line on stderr (a message names an option by its flag where it is read: errors.at)."""
    print(f"Error: {message}", file=sys.stderr)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """One line on stderr, nothing on stdout, non-zero exit."""
    error_line(message)
    import typer
    raise typer.Exit(code)


def __getattr__(name: str) -> Any:
    if name == "app":
        from trainest.cli.application import app
        return app
    raise AttributeError(name)
