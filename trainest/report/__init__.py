"""The report layer: every table, markdown and JSON document trainest prints is built here, from the
result dataclasses. One module per command; this one holds what they share (JSON hygiene, the
consoles, warnings, the progress bar). rich is imported only inside the table functions, so
`--json` never pays for it."""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Any

from trainest.units import fmt_co2, fmt_gib, fmt_money, fmt_seconds, fmt_si

__all__ = ["LazyProgress", "clean", "command_line", "console", "dumps", "fmt_co2", "fmt_gib", "fmt_money",
           "fmt_seconds", "fmt_si", "print_command", "warn"]


def clean(value: Any) -> Any:
    """Make a value JSON-safe: NaN/inf never reach the output (they become null)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def dumps(doc: dict[str, Any]) -> str:
    """One JSON document, indented, never NaN."""
    return json.dumps(doc, indent=2, allow_nan=False)


PIPED_WIDTH = 110      # columns of piped output when COLUMNS does not say


def output_width() -> int | None:
    """The width tables are laid out for: COLUMNS when set (a terminal or a pipe), else the terminal's
    (None: rich asks it), else PIPED_WIDTH for a pipe."""
    text = os.environ.get("COLUMNS", "").strip()
    if text.isdigit() and int(text) >= 20:
        return int(text)
    return None if sys.stdout.isatty() else PIPED_WIDTH


def console(stderr: bool = False):
    """A rich console on stdout (results) or stderr (messages); NO_COLOR honoured; COLUMNS honoured,
    piped output otherwise PIPED_WIDTH columns wide."""
    from rich.console import Console
    no_color = bool(os.environ.get("NO_COLOR"))
    # NO_COLOR (no-color.org): no ANSI escapes at all; rich's no_color alone still emits bold/italic.
    # emoji=False: a ':name:' in a model path or a name stays as written (and rich's emoji table, 2 ms of start-up
    # and a pass over every cell, is never loaded)
    return Console(stderr=stderr, no_color=no_color, color_system=None if no_color else "auto", highlight=False,
                   soft_wrap=False, width=output_width(), emoji=False)


def print_table(con, table) -> None:
    """Print a table without cutting a number: the table is laid out once, at the console's width; when rich
    shortened a cell to fit (a number ending in '…'), it is printed at its natural width instead (lines run past
    the edge)."""
    from rich.measure import Measurement
    with con.capture() as captured:
        con.print(table)
    text = captured.get()
    if "…" not in text:
        con.file.write(text)
        return
    width = con.width
    con.width = Measurement.get(con, con.options.update_width(100_000), table).maximum
    try:                             # (Console.print clamps its own width argument to the console's)
        con.print(table, crop=False)
    finally:
        con.width = width


def command_line(words: list[str]) -> str:
    """`trainest WORDS...` as a shell command that pastes: every word quoted where the shell needs it
    (a model path with spaces or parentheses)."""
    import shlex
    return "trainest " + shlex.join(str(w) for w in words)


def print_command(con, label: str, words: list[str]) -> None:
    """`label: trainest ...` on one line, never hard-wrapped (so that it pastes from a pipe or a narrow
    terminal), the command quoted for the shell and shown as is (no rich markup read in it)."""
    from rich.markup import escape
    con.print(f"{label}: [dim]{escape(command_line(words))}[/dim]", soft_wrap=True, highlight=False)


def warn(message: str) -> None:
    """A warning line on stderr (plain text; never on stdout)."""
    print(f"Warning: {message}", file=sys.stderr)


PROGRESS_AFTER_S = 1.0   # draw a progress bar only for work on course to take longer than this


class LazyProgress:
    """A rich progress bar on stderr, started only once the work is projected to exceed
    PROGRESS_AFTER_S; call it with (done, total), then close() it."""

    def __init__(self, what: str, enabled: bool = True) -> None:
        import time

        self._clock = time.perf_counter
        self.what, self.enabled, self.t0 = what, enabled, time.perf_counter()
        self.bar: Any = None
        self.task: Any = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or done <= 0:
            return
        if self.bar is None:
            elapsed = self._clock() - self.t0
            if done >= total or elapsed * total / done < PROGRESS_AFTER_S:
                return
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn
            self.bar = Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                                TimeRemainingColumn(), console=console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.what, total=total)
        self.bar.update(self.task, completed=done, total=total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
