"""Helpers shared by the CLI tests."""

from __future__ import annotations


def call_entry(args: list[str], capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the console script's entry point `trainest ARGS`, in process."""
    from trainest import entry

    capsys.readouterr()
    try:
        entry.main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    out = capsys.readouterr()
    return code, out.out, out.err
