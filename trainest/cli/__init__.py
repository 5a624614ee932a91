"""The command line: one module per command (estimate, plan, validate, calibrate, list), the
typer app that registers them (`application.py`), the typer-free fast path of a single estimate
(`main.py`, `argv.py`) and the shared option annotations (`options.py`). Commands only parse and
render: they build inputs, call the library and hand the results to trainest.report.

`from trainest.cli import app` imports typer; importing this package alone does not.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "app":
        from trainest.cli.application import app
        return app
    raise AttributeError(name)
