"""Rebuild specs/_catalog.json, the JSON read cache of the bundled hardware and model YAML files.

Run after editing anything in specs/hardware or specs/models:  python tools/build_catalog_cache.py
(The YAML stays the source of truth; trainest ignores a cache entry whose file text has changed, and
tests/test_startup.py fails while the cache is out of date.)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trainest import catalog  # noqa: E402


def main() -> None:
    doc = catalog.build_catalog_cache()
    target = catalog.specs_dir() / catalog.CATALOG_CACHE_NAME
    text = catalog.catalog_cache_text(doc)
    if target.exists() and target.read_text(encoding="utf-8") == text:
        print(f"{target}: up to date ({len(doc['files'])} files)")
        return
    target.write_text(text, encoding="utf-8")
    print(f"{target}: wrote {len(doc['files'])} files")


if __name__ == "__main__":
    main()
