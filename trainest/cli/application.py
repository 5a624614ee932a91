"""The typer app: one command per module of this package, registered in help order.

Shell completion: typer's `trainest --install-completion` (the current shell) and `trainest completion
SHELL` (prints the script for bash, zsh, fish or powershell).

Exit codes: 0 success; 1 bad input or spec (one `Error: ...` line on stderr); 2 usage error from
the parser; 3 a CI gate (--max-days, --max-cost, --require-fit) was broken.
"""

from __future__ import annotations

from typing import Annotated

import typer

from trainest.cli import calibrate, compare, completion, listing, plan, probe, sweep, validate
from trainest.cli.estimate import HELP as ESTIMATE_HELP
from trainest.cli.estimate import run_estimate
from trainest.cli.options import typer_command
from trainest.knobs import COMPARE_OPTIONS, ESTIMATE_OPTIONS, PLAN_OPTIONS, SWEEP_OPTIONS

app = typer.Typer(add_completion=True, no_args_is_help=True, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="Estimate LLM training step time, memory, bottleneck and cost, analytically, in milliseconds.")


def _version(value: bool) -> None:
    if value:
        from trainest import SCHEMA_VERSION, __version__
        print(f"trainest {__version__} (JSON schema {SCHEMA_VERSION})")
        raise typer.Exit()


@app.callback()
def main(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                               help="Print the version and exit.")] = False) -> None:
    """Estimate LLM training step time, memory, bottleneck and cost, analytically, in milliseconds."""


app.command("estimate")(typer_command(ESTIMATE_OPTIONS, ESTIMATE_HELP, run_estimate, "estimate"))
app.command("list")(listing.list_command)
app.command("plan")(typer_command(PLAN_OPTIONS, plan.HELP, plan.run_plan, "plan"))
app.command("compare")(typer_command(COMPARE_OPTIONS, compare.HELP, compare.run_compare, "compare"))
app.command("sweep")(typer_command(SWEEP_OPTIONS, sweep.HELP, sweep.run_sweep, "sweep"))
app.command("validate")(validate.validate)
app.command("calibrate")(calibrate.calibrate)
app.command("probe")(probe.probe_command)
app.command("completion")(completion.completion_command)
