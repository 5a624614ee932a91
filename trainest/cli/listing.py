"""`trainest list hardware|models|frameworks`."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from trainest.cli import fail
from trainest.cli.options import JsonFlag, QuietFlag


class Listable(StrEnum):
    hardware = "hardware"
    models = "models"
    frameworks = "frameworks"


SORT_HELP = ("Sort hardware by: name, vendor, year, bf16, fp8, memory, bandwidth, scale-up, scale-out, power, price "
             "(cheapest first), tflops-per-dollar; numbers largest first, unknown values last.")


def list_command(what: Annotated[Listable, typer.Argument(help="hardware, models or frameworks")],
                 sort: Annotated[str, typer.Option("--sort", help=SORT_HELP)] = "name",
                 json_out: JsonFlag = False, quiet: QuietFlag = False) -> None:
    """List the bundled hardware catalog (peaks, memory, links, power, price and its date, calibration, sources), the model presets or the training frameworks."""  # noqa: E501
    from trainest.errors import SpecError, did_you_mean
    from trainest.report import dumps
    from trainest.report.catalog import SORT_KEYS, framework_rows, hardware_rows, list_dict, model_rows, print_list
    if sort not in SORT_KEYS:
        fail(f"--sort {sort!r} is not one of {', '.join(SORT_KEYS)}{did_you_mean(sort, SORT_KEYS)}")
    if sort != "name" and what != Listable.hardware:
        fail("--sort applies to `trainest list hardware`")
    try:
        rows = (hardware_rows(sort) if what == Listable.hardware
                else framework_rows() if what == Listable.frameworks else model_rows())
    except SpecError as exc:
        fail(str(exc))
    if json_out:
        print(dumps(list_dict(what.value, rows)))
    else:
        print_list(what.value, rows)       # (--quiet: list prints nothing on stderr to silence)
