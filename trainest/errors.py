"""The one error type for bad input anywhere in trainest.

Every check of user data (CLI options, scenario and runs YAML, hardware and model files) raises
`SpecError` with a one-line message that names the file, the key, the value and what is allowed.
The CLI turns it into `Error: ...` on stderr and exit code 1.
"""

from __future__ import annotations

import difflib


class SpecError(ValueError):
    """Bad input: a value, file or combination that trainest cannot use."""


def did_you_mean(value: str, choices: list[str] | tuple[str, ...] | set[str]) -> str:
    """Return ' (did you mean X?)' for the closest choice, or '' when none is close."""
    close = difflib.get_close_matches(str(value), sorted(choices), n=3, cutoff=0.5)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"
