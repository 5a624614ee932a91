"""The one error type for bad input anywhere in trainest.

Every check of user data (CLI options, scenario and runs YAML, hardware and model files) raises
`SpecError` with a one-line message that names the file, the key, the value and what is allowed.
The CLI turns it into `Error: ...` on stderr and exit code 1.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MAX_SHOWN_CHARS = 60     # a bad value is quoted in an error message up to this length


class SpecError(ValueError):
    """Bad input: a value, file or combination that trainest cannot use."""


def did_you_mean(value: str, choices: Iterable[str]) -> str:
    """Return ' (did you mean X?)' for the closest choice, or '' when none is close."""
    import difflib  # only on the error path (start-up time)
    names = sorted(choices)
    text = str(value).strip().lower()
    # a name the user typed the start of (`a100`) first, then the fuzzy matches
    prefixed = [c for c in names if text and c.lower().startswith(text)]
    close = prefixed[:3] or difflib.get_close_matches(text, names, n=3, cutoff=0.5)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"


def show(value: Any, limit: int = MAX_SHOWN_CHARS) -> str:
    """repr(value), cut to `limit` characters so an error stays one short line (repr escapes newlines)."""
    try:
        shown = repr(value)
    except (ValueError, RecursionError):   # ints over 4300 digits; absurdly deep nesting
        shown = f"<{type(value).__name__} too large to show>"
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."
