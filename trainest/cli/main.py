"""The `trainest` console script and `python -m trainest`.

A single `trainest estimate ...` whose options `trainest.cli.argv.parse_estimate_argv` fully
understands runs without importing typer (start-up is most of a single estimate's wall time). Every
other command line (another command, --help, an unknown or malformed option) goes to the typer app in
`trainest.cli.app`, so usage errors and help are typer's own. Set TRAINEST_NO_FAST_PATH=1 to send
everything to typer (the tests compare both paths).
"""

from __future__ import annotations

import os
import sys
from typing import Any

NO_FAST_PATH_ENV = "TRAINEST_NO_FAST_PATH"


def fast_path_enabled() -> bool:
    return os.environ.get(NO_FAST_PATH_ENV, "") in ("", "0")


class _QuietFlush:
    """Stream proxy whose flush ignores a closed pipe (`trainest estimate --json | head -1`), as click does."""

    def __init__(self, wrapped) -> None:
        self.wrapped = wrapped

    def flush(self) -> None:
        try:
            self.wrapped.flush()
        except BrokenPipeError:
            pass

    def __getattr__(self, name: str):
        return getattr(self.wrapped, name)


def _run_fast(values: dict) -> int:
    """Exit code of the estimate; a closed stdout pipe exits 1 and Ctrl-C exits 130, as under typer."""
    from trainest.cli.estimate import run_estimate
    try:
        code = run_estimate(values)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        sys.stdout = _QuietFlush(sys.stdout)
        sys.stderr = _QuietFlush(sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: the fast path for a plain `estimate`, else the typer app."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["estimate"] and fast_path_enabled():
        from trainest.cli.argv import parse_estimate_argv
        values = parse_estimate_argv(args[1:])
        if values is not None:
            sys.exit(_run_fast(values))
    from trainest.cli.application import app
    sys.exit(_run_typer(app, args))


def _usage_error_types() -> tuple[type[Exception], type[Exception]]:
    """(UsageError, Abort) of the parser typer uses, found through typer's public exception classes
    (typer vendors its own click in recent releases, older ones use click)."""
    import typer

    usage_error = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
    return usage_error, typer.Abort


def _run_typer(app, args: list[str]) -> int:
    """Run the typer app; a usage error becomes one `Error: ...` line on stderr with exit code 2."""
    usage_error, abort = _usage_error_types()
    try:
        result = app(args=args, standalone_mode=False)
    except usage_error as error:
        exc: Any = error
        if type(exc).__name__ == "NoArgsIsHelpError":
            return exc.exit_code            # the parser has printed the help already
        ctx = getattr(exc, "ctx", None)
        hint = f"see '{ctx.command_path} --help'" if ctx is not None else "see 'trainest --help'"
        message = " ".join(exc.format_message().split())
        print(f"Error: {message} ({hint})", file=sys.stderr)
        return exc.exit_code
    except abort:
        print("Error: aborted", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 1
    except KeyboardInterrupt:
        return 130
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    main()
