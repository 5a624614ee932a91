"""What every command shares: exit codes and the one way to fail."""

from __future__ import annotations

import sys
from typing import NoReturn

EXIT_OK = 0
EXIT_BAD_INPUT = 1       # bad input or spec: one `Error: ...` line on stderr
EXIT_USAGE = 2           # the parser's usage errors
EXIT_GATE = 3            # a CI gate (--max-days, --max-cost, --require-fit) was broken


class CommandFailed(Exception):
    """Raised by `fail`; the typer wrapper turns it into its exit code (no traceback)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def error_line(message: str) -> None:
    """One `Error: ...` line on stderr."""
    print(f"Error: {message}", file=sys.stderr)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """One line on stderr, nothing on stdout, non-zero exit."""
    error_line(message)
    import typer
    raise typer.Exit(code)
