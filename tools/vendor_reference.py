"""Copy the shared reference files the tests read into tests/reference/ (xz-compressed), so the
importer tests run in any clone, with or without ../shared/reference.

    python tools/vendor_reference.py [--reference DIR]      # after the shared reference changed

tests/conftest.py (fixture `reference_dir`) unpacks them into a temporary folder.
"""

from __future__ import annotations

import argparse
import lzma
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "reference"
# what tools/import_runs.py (with tools/memory_runs.py) and tools/import_hardware.py read
FILES = ("runs-megatron-public.yaml", "runs-vendors-public.yaml", "runs-vtrain-single-fit.yaml",
         "runs-hunt-2026-12-given.yaml", "model-shapes.yaml", "hardware.yaml", "memory-given.yaml",
         "megatron-bridge-recipes.yaml")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reference", type=Path, default=REPO.parent / "shared" / "reference")
    args = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        data = (args.reference / name).read_bytes()
        (OUT / f"{name}.xz").write_bytes(lzma.compress(data, preset=9))
        print(f"wrote tests/reference/{name}.xz ({len(data):,} bytes unpacked)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
