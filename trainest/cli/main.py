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


# what a character the output's encoding lacks becomes (PYTHONIOENCODING=ascii, a C locale): plain ASCII, so
# that the tables still read (rich draws their boxes in ASCII on such a stream itself); anything else is '?'
ASCII_FALLBACK = {"×": "x", "·": ".", "–": "-", "—": "-", "…": "...", "≈": "~", "≤": "<=", "≥": ">=", "→": "->",
                  "←": "<-", "µ": "u", "²": "^2", "³": "^3", "±": "+/-", "÷": "/", "√": "sqrt", "∞": "inf",
                  "‰": "per mille", "°": " deg", "†": "+", "‘": "'", "’": "'", "“": '"', "”": '"', "•": "*",
                  "α": "alpha", "β": "beta", "φ": "phi", "Σ": "sum", "≠": "!=", "\u00a0": " "}
ASCII_ERRORS = "trainest-ascii"


def _ascii_fallback(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start:error.end]
    return "".join(ASCII_FALLBACK.get(c, "?") for c in text), error.end


def plain_output_streams() -> None:
    """stdout and stderr whose encoding cannot write Unicode (not UTF-8/16/32) write ASCII stand-ins instead of
    raising UnicodeEncodeError."""
    import codecs
    try:
        codecs.lookup_error(ASCII_ERRORS)
    except LookupError:
        codecs.register_error(ASCII_ERRORS, _ascii_fallback)
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "utf-8").lower().replace("-", "").replace("_", "")
        if not encoding.startswith("utf") and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors=ASCII_ERRORS)


class _GuardedStdout:
    """stdout, remembering a write or flush that failed other than by a closed pipe (a full disk, /dev/full), so
    that `main` can tell that failure from any other OSError."""

    def __init__(self, wrapped) -> None:
        self.wrapped = wrapped
        self.failed: OSError | None = None

    def write(self, text: str) -> int:
        try:
            return self.wrapped.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            self.failed = exc
            raise

    def flush(self) -> None:
        try:
            self.wrapped.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            self.failed = exc
            raise

    def __getattr__(self, name: str):
        return getattr(self.wrapped, name)


def _output_failed(why: str) -> int:
    """One error line for output that could not be written; stdout pointed at the null device, so that the
    interpreter's last flush does not fail again (a second message and exit code 120)."""
    import os
    try:
        print(f"Error: cannot write the output: {why}", file=sys.stderr)
    except (OSError, ValueError, AttributeError):
        pass
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
    except OSError:
        pass
    sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (open until exit)
    return 1


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: the fast path for a plain `estimate`, else the typer app. Output that cannot
    be written (a closed stdout, a full disk) is one `Error:` line on stderr and exit 1. Run as the console
    script (`argv` None), a fast-path estimate skips the garbage collector and the interpreter's teardown
    (`_exit_now`): about a quarter of its CPU time (issue 36; bench/bench_estimate.py)."""
    standalone = argv is None
    args = sys.argv[1:] if argv is None else list(argv)
    if sys.stdout is None:                       # `trainest ... >&-`
        sys.exit(_output_failed("standard output is closed"))
    plain_output_streams()
    guard = _GuardedStdout(sys.stdout)
    sys.stdout = guard
    fast = False
    try:
        code, fast = _dispatch(args, standalone)
        sys.stdout.flush()
    except OSError as exc:
        if guard.failed is None:
            raise
        code = _output_failed(exc.strerror or str(exc))
    if fast and standalone:
        _exit_now(code)
    sys.exit(code)


def _exit_now(code: int) -> None:
    """Exit with `code` once stdout and stderr are flushed, without the interpreter's teardown (freeing every
    module and object one by one: 10-25 ms of a 100 ms estimate). Only for a fast-path estimate run as the
    console script: it opens no file it does not close itself (--timeline is written in a `with`), registers
    no atexit hook, and nothing runs after it."""
    import os
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            code = code or 1
    os._exit(code)


def _dispatch(args: list[str], standalone: bool = False) -> tuple[int, bool]:
    """(the exit code of the command line `args`, whether the fast path ran it). Standalone, the garbage
    collector is off while the fast path runs: a single estimate makes no reference cycles worth collecting,
    and the collections its imports trigger cost 5-10 ms."""
    if args[:1] == ["estimate"] and fast_path_enabled():
        import gc
        if standalone:
            gc.disable()
        from trainest.cli.argv import parse_estimate_argv
        values = parse_estimate_argv(args[1:])
        if values is not None:
            return _run_fast(values), True
        if standalone:
            gc.enable()
    from trainest.cli.application import app
    return _run_typer(app, args), False


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
