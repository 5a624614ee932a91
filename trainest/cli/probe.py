"""`trainest probe -o FILE`: measure this machine and write a hardware YAML that `--hardware` accepts
(the library is trainest/probe.py: run_probe)."""

from __future__ import annotations

from typing import Annotated

import typer

HELP = ("Measure this machine (CPU GEMM rate per dtype and memory copy bandwidth; with PyTorch and a GPU, the "
        "GPU's GEMM rates, HBM copy bandwidth, launch floor and peer bandwidth) and write a hardware YAML for "
        "--hardware, marked as probed.")


def probe_command(
    output: Annotated[str, typer.Option("--output", "-o", help="Hardware YAML to write (.yaml or .yml).")],
    budget: Annotated[float, typer.Option("--budget", help="About how long to measure, in seconds.")] = 60.0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No summary on stderr.")] = False,
) -> None:
    """Measure this machine and write a hardware YAML for --hardware (see trainest/probe.py)."""
    from trainest.probe import run_probe
    code = run_probe(output, budget_s=budget, quiet=quiet)
    if code:
        raise typer.Exit(code)


probe_command.__doc__ = HELP
