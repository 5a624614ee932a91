"""docs/model.md is the index of the model's documentation; its chapters are docs/model/*.md, one file per
top-level chapter (`## N ...`), in file-name order.

    python tools/model_doc.py           rewrite the index's table of contents from the chapters
    python tools/model_doc.py --check   exit 1 when the table of contents is stale

The index keeps its introduction as written (everything above CONTENTS_MARKER); below the marker it lists
every chapter and every section (`##`, `###`, `####` headings) with a link to its file and anchor, so a
pointer "docs/model.md §15.11" resolves in one click from the index. `text()` is the whole model
documentation, the introduction and the chapters concatenated, for the tests that check it against the code.
"""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INDEX = ROOT / "docs" / "model.md"
CHAPTERS = ROOT / "docs" / "model"
CONTENTS_MARKER = "<!-- contents: written by tools/model_doc.py from docs/model/*.md; edit the chapters, not below -->"
HEADING = re.compile(r"^(#{2,4}) (.+?)\s*$")


def chapter_files() -> list[Path]:
    """The chapter files, in reading order (their names start with the chapter number)."""
    return sorted(CHAPTERS.glob("*.md"))


@functools.cache
def parts() -> tuple[tuple[Path, str], ...]:
    """(file, text) of the model documentation in reading order: the index's introduction (docs/model.md above
    its contents marker), then every chapter file (read once per process)."""
    index = INDEX.read_text(encoding="utf-8")
    head = index[:index.index(CONTENTS_MARKER)] if CONTENTS_MARKER in index else index
    return ((INDEX, head), *((p, p.read_text(encoding="utf-8")) for p in chapter_files()))


def text() -> str:
    """The whole model documentation: the index's introduction and every chapter, in order, joined by a newline."""
    return "\n".join(body for _, body in parts())


def locate(offset: int) -> str:
    """`FILE:LINE` (docs/model.md or docs/model/CHAPTER.md) of a character offset into text()."""
    start = 0
    for path, body in parts():
        if offset <= start + len(body):
            return f"{path.relative_to(ROOT)}:{body[:offset - start].count(chr(10)) + 1}"
        start += len(body) + 1
    raise ValueError(f"offset {offset} is past the end of the model documentation")


def anchor(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces to `-`."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def headings(path: Path) -> list[tuple[int, str, str]]:
    """(level 2-4, title, anchor) of every heading of a chapter file outside code blocks; a repeated anchor
    gets GitHub's `-1`, `-2` suffix."""
    out, seen, fenced = [], {}, False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match is None:
            continue
        title = match.group(2)
        slug = anchor(title)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.append((len(match.group(1)), title, slug if count == 0 else f"{slug}-{count}"))
    return out


def contents() -> str:
    """The index's table of contents: every heading of every chapter file, a link to its file and anchor."""
    lines = []
    for path in chapter_files():
        for level, title, slug in headings(path):
            label = title.replace("[", r"\[").replace("]", r"\]")
            lines.append(f"{'  ' * (level - 2)}- [{label}](model/{path.name}#{slug})")
    return "\n".join(lines) + "\n"


def document() -> str:
    """docs/model.md as it should be: its introduction, the marker, the table of contents."""
    current = INDEX.read_text(encoding="utf-8")
    if CONTENTS_MARKER not in current:
        raise SystemExit(f"{INDEX.relative_to(ROOT)} has no contents marker line: {CONTENTS_MARKER}")
    head = current[:current.index(CONTENTS_MARKER)]
    return f"{head}{CONTENTS_MARKER}\n\n{contents()}"


def main(argv: list[str]) -> int:
    if argv not in ([], ["--check"]):
        print("usage: python tools/model_doc.py [--check]", file=sys.stderr)
        return 2
    wanted = document()
    if argv == ["--check"]:
        if INDEX.read_text(encoding="utf-8") != wanted:
            print("docs/model.md's contents are stale: run python tools/model_doc.py", file=sys.stderr)
            return 1
        return 0
    INDEX.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
