"""The typer app: one command per module of this package, registered in help order.

Exit codes: 0 success; 1 bad input or spec (one `Error: ...` line on stderr); 2 usage error from
the parser; 3 a CI gate (--max-days, --max-cost, --require-fit) was broken.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import typer

from trainest.cli import calibrate, listing, plan, validate
from trainest.cli.estimate import HELP as ESTIMATE_HELP, run_estimate
from trainest.cli.options import option_annotation
from trainest.knobs import ESTIMATE_OPTIONS, Knob

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Estimate LLM training step time, memory, bottleneck and cost, analytically, in milliseconds.")


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


app.command("estimate")(typer_command(ESTIMATE_OPTIONS, ESTIMATE_HELP, run_estimate, "estimate"))
app.command("list")(listing.list_command)
app.command("plan")(plan.plan)
app.command("validate")(validate.validate)
app.command("calibrate")(calibrate.calibrate)
