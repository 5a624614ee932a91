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
def public_report():
    """`validate_runs(run_set="public")`: the published runs the accuracy gates measure, predicted once for the
    tests that read the report (test_accuracy_gate, test_vtrain_report)."""
    from trainest.validate import PUBLIC_SET, validate_runs
    return validate_runs(run_set=PUBLIC_SET)


@pytest.fixture(scope="session")
def validate_all_stdout() -> str:
    """The stdout of `trainest validate --json` (every bundled run, ~1,400 estimates), run once for the tests
    that read it: the validate-all golden, its JSON schema check and the run sets reported apart
    (test_vtrain_report)."""
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
