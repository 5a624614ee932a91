"""Suite-wide guards."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _framework_registry_unchanged():
    """No test rebinds or replaces an entry of trainest.frameworks.FRAMEWORKS (a module registry other
    tests read) beyond its own block: `frameworks.substituted(...)` swaps one entry and puts it back."""
    try:
        from trainest.frameworks import FRAMEWORKS
    except Exception:          # noqa: BLE001 - a broken package is the tests' own finding, not this guard's
        yield
        return
    before = dict(FRAMEWORKS)
    yield
    assert FRAMEWORKS == before, "a test changed trainest.frameworks.FRAMEWORKS"
