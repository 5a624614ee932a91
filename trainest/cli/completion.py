"""`trainest completion bash|zsh|fish|powershell`: print the shell-completion script for a shell.

The scripts are typer's (the same `trainest --install-completion` installs for the current shell); they
call `trainest` back with `_TRAINEST_COMPLETE` set, and typer answers with the commands, options and
choices of the command line being typed."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from trainest.cli import fail
from trainest.cli.options import QuietFlag


class Shell(StrEnum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"
    powershell = "powershell"


HELP = ("Print the shell-completion script: eval \"$(trainest completion bash)\" in ~/.bashrc, or "
        "trainest completion fish > ~/.config/fish/completions/trainest.fish.")


def completion_command(shell: Annotated[Shell, typer.Argument(help="bash, zsh, fish or powershell")],
                       quiet: QuietFlag = False) -> None:
    """Print the completion script of `shell` on stdout."""
    try:
        from typer._completion_shared import get_completion_script
    except ImportError:   # a typer without it: its own option still works
        fail("this typer cannot print a script by name; use trainest --install-completion")
    print(get_completion_script(prog_name="trainest", complete_var="_TRAINEST_COMPLETE", shell=shell.value))


completion_command.__doc__ = HELP
