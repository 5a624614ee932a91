"""The command line: parse options, build a Scenario, call the library, render. Nothing else.

Exit codes: 0 success; 1 bad input or spec (one `Error: ...` line on stderr); 2 usage error from
the parser; 3 a CI gate (--max-days, --max-cost, --require-fit) was broken.
"""

from __future__ import annotations

import inspect
import sys
from enum import Enum
from typing import Annotated, Any

import typer

from trainest.commands._options import option_annotation
from trainest.errors import SpecError
from trainest.options import ESTIMATE_HELP, ESTIMATE_OPTIONS, EXIT_BAD_INPUT, Opt, run_estimate

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Estimate LLM training step time, memory, bottleneck and cost, analytically, in milliseconds.")

# The `estimate` command is declared once, in trainest.options.ESTIMATE_OPTIONS; its typer signature is
# generated from that table here, and the same table drives the typer-free fast path (trainest.entry).

def fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    """One line on stderr, nothing on stdout, non-zero exit."""
    print(f"Error: {message}", file=sys.stderr)
    raise typer.Exit(code)


def _typer_command(options: tuple[Opt, ...], help_text: str, body: Any) -> Any:
    """A function typer can register: keyword parameters generated from `options`; it calls
    `body(values)` and exits with its code."""
    def command(**values: Any) -> None:
        code = body(values)
        if code:
            raise typer.Exit(code)

    params = [inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default,
                                annotation=option_annotation(o)) for o in options]
    command.__signature__ = inspect.Signature(params, return_annotation=None)
    command.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
    command.__doc__ = help_text
    command.__name__ = command.__qualname__ = "estimate"
    return command


estimate = app.command("estimate")(_typer_command(ESTIMATE_OPTIONS, ESTIMATE_HELP, run_estimate))


JsonOpt = option_annotation("json_out")


class Listable(str, Enum):
    hardware = "hardware"
    models = "models"


@app.command("list")
def list_cmd(what: Annotated[Listable, typer.Argument(help="hardware or models")],
             json_out: JsonOpt = False) -> None:
    """List the bundled hardware catalog or model presets."""
    try:
        from trainest import catalog
        if what == Listable.hardware:
            rows = []
            for name in catalog.hardware_names():
                hw = catalog.load_hardware(name)
                rows.append({"name": name, "display_name": hw.display_name,
                             "peak_tflops": {k: v / 1e12 for k, v in hw.peak_flops_per_s.items()},
                             "memory_bytes": hw.memory_bytes, "memory_bytes_per_s": hw.memory_bytes_per_s,
                             "devices_per_node": hw.devices_per_node, "efficiency_fitted": hw.efficiency.fitted})
        else:
            rows = []
            for name in catalog.model_names():
                mo = catalog.load_model(name)
                rows.append({"name": name, "params": mo.params, "layers": mo.layers, "hidden": mo.hidden,
                             "heads": mo.heads, "kv_heads": mo.kv_heads, "mlp": mo.mlp, "seq_len": mo.seq_len,
                             "source": mo.source})
    except SpecError as exc:
        fail(str(exc))
        return
    from trainest import report
    if json_out:
        print(report.dumps({"schema_version": "1.0", what.value: rows}))
        return
    from rich.table import Table
    table = Table(title=f"{what.value} ({len(rows)})", title_justify="left")
    keys = ["name", "display_name", "peak_tflops", "memory_bytes", "devices_per_node"] if what == Listable.hardware \
        else ["name", "params", "layers", "hidden", "heads", "kv_heads", "mlp", "seq_len"]
    for k in keys:
        table.add_column(k)
    for r in rows:
        cells = []
        for k in keys:
            v = r[k]
            if k == "peak_tflops":
                v = " ".join(f"{p}:{x:g}" for p, x in v.items())
            elif k == "memory_bytes":
                v = report.fmt_gib(v)
            elif k == "params":
                v = f"{v / 1e9:.2f} B"
            cells.append(str(v))
        table.add_row(*cells)
    report._console().print(table)


from trainest.commands.plan import plan  # noqa: E402 - registered after estimate and list, in help order
from trainest.commands.validate import calibrate, validate  # noqa: E402

app.command()(plan)
app.command()(validate)
app.command()(calibrate)


def main() -> None:
    """Entry point (the console script is trainest.entry:main, which does the same without importing
    this module for a plain `trainest estimate`)."""
    from trainest.entry import main as entry_main
    entry_main()


if __name__ == "__main__":
    main()
