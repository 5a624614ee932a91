"""`trainest list`: the hardware catalog and the model presets as rows, JSON and a table."""

from __future__ import annotations

from typing import Any

from trainest import SCHEMA_VERSION
from trainest.report import console, fmt_gib


def hardware_rows() -> list[dict[str, Any]]:
    from trainest import catalog
    rows = []
    for name in catalog.hardware_names():
        hw = catalog.load_hardware(name)
        rows.append({"name": name, "display_name": hw.display_name,
                     "peak_tflops": {k: v / 1e12 for k, v in hw.peak_flops_per_s.items()},
                     "memory_bytes": hw.memory_bytes, "memory_bytes_per_s": hw.memory_bytes_per_s,
                     "devices_per_node": hw.devices_per_node, "efficiency_fitted": hw.efficiency.fitted})
    return rows


def model_rows() -> list[dict[str, Any]]:
    from trainest import catalog
    rows = []
    for name in catalog.model_names():
        mo = catalog.load_model(name)
        rows.append({"name": name, "params": mo.params, "layers": mo.layers, "hidden": mo.hidden,
                     "heads": mo.heads, "kv_heads": mo.kv_heads, "mlp": mo.mlp, "seq_len": mo.seq_len,
                     "source": mo.source})
    return rows


def list_dict(what: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The `trainest list ... --json` document (docs/schema/list.schema.json)."""
    return {"schema_version": SCHEMA_VERSION, what: rows}


def _cell(key: str, value: Any) -> str:
    if key == "peak_tflops":
        return " ".join(f"{p}:{x:g}" for p, x in value.items())
    if key == "memory_bytes":
        return fmt_gib(value)
    if key == "params":
        return f"{value / 1e9:.2f} B"
    return str(value)


def print_list(what: str, rows: list[dict[str, Any]]) -> None:
    from rich.table import Table
    table = Table(title=f"{what} ({len(rows)})", title_justify="left")
    keys = ["name", "display_name", "peak_tflops", "memory_bytes", "devices_per_node"] if what == "hardware" \
        else ["name", "params", "layers", "hidden", "heads", "kv_heads", "mlp", "seq_len"]
    for k in keys:
        table.add_column(k)
    for r in rows:
        table.add_row(*(_cell(k, r[k]) for k in keys))
    console().print(table)
