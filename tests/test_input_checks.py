"""Input checks shared by estimate, plan, compare and sweep (moe.md M3, M5, M6, M9, M10; physics.md P5):
every command refuses what `estimate` refuses, with one line that names the option and what is allowed."""

from __future__ import annotations

import pytest
from helpers import call_entry
from test_bad_input import assert_clean_failure


def flat(text: str) -> str:
    """Text with the table's box characters and line wraps removed."""
    return " ".join(text.replace("│", " ").split())


def fails(capsys, args: list[str], *words: str) -> str:
    code, out, err = call_entry(args, capsys)
    assert_clean_failure(code, out, err, 1, words)
    return err


# ------------------------------------------------------------------ M3: a config's keys, checked by every command

BAD_CONFIGS = [
    ("top-level-ep", "model: mixtral-8x7b\nseq_len: 4096\nep: 8\n", ("unknown key 'ep'",)),
    ("parallel-epp", "model: mixtral-8x7b\nseq_len: 4096\nparallel:\n  epp: 4\n", ("parallel", "unknown key 'epp'")),
    ("recompute-modul", "model: mixtral-8x7b\nrecompute_modul: [moe]\n", ("unknown key 'recompute_modul'",
                                                                          "recompute_modules")),
]
COMMANDS = [
    ["estimate"],
    ["plan", "--devices", "8"],
    ["compare", "--devices", "8", "--hardware", "h100-sxm,b200"],
    ["sweep", "--devices", "8..16"],
    ["sweep", "--devices", "8..16", "--plan"],
]


@pytest.mark.parametrize("text,words", [c[1:] for c in BAD_CONFIGS], ids=[c[0] for c in BAD_CONFIGS])
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: "-".join(c[:2]))
def test_every_command_refuses_unknown_config_keys(tmp_path, capsys, command, text, words):
    path = tmp_path / "scen.yaml"
    path.write_text(text, encoding="utf-8")
    fails(capsys, [command[0], "--config", str(path), *command[1:]], "scen.yaml", *words)
