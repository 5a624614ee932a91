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


@pytest.fixture(scope="session")
def validate_all_stdout() -> str:
    """The stdout of `trainest validate --json` (every bundled run, ~1,400 estimates), run once for the tests
    that read it: the validate-all golden and its JSON schema check."""
    import contextlib
    import io

    from trainest.cli.main import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(["validate", "--json"])
        except SystemExit as exc:
            assert not exc.code, exc.code
    return out.getvalue()
