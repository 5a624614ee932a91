"""`trainest list hardware|models`."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from trainest.cli import fail
from trainest.cli.options import JsonFlag


class Listable(StrEnum):
    hardware = "hardware"
    models = "models"


def list_command(what: Annotated[Listable, typer.Argument(help="hardware or models")],
                 json_out: JsonFlag = False) -> None:
    """List the bundled hardware catalog or model presets."""
    from trainest.errors import SpecError
    from trainest.report import dumps
    from trainest.report.catalog import hardware_rows, list_dict, model_rows, print_list
    try:
        rows = hardware_rows() if what == Listable.hardware else model_rows()
    except SpecError as exc:
        fail(str(exc))
    if json_out:
        print(dumps(list_dict(what.value, rows)))
    else:
        print_list(what.value, rows)
