"""The house rules, checked on the source: no import cycle between trainest's modules, the layers
import downwards only (the model never imports the search, the report or the CLI; the search never
imports the report), and no function is longer than 80 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "trainest"
MAX_FUNCTION_LINES = 80


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports(path: Path, *, module_level: bool = True) -> set[str]:
    """trainest modules imported by `path` (at module level only, or anywhere)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if module_level else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.If):     # `if TYPE_CHECKING:` blocks import nothing at run time
            continue
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("trainest"):
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith("trainest")]
        found.update(n for n in names if n in MODULES)
    return found


def test_no_import_cycle():
    def ancestors(name: str) -> set[str]:
        parts = name.split(".")
        return {".".join(parts[:i]) for i in range(1, len(parts))}

    # importing a.b.c runs the package a.b first, unless the importer is inside a.b already
    graph = {m: {a for n in imports(p) for a in ancestors(n) | {n} if a not in ancestors(m) and a != m}
             for m, p in MODULES.items()}
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycle = stack[stack.index(n):] + [n] if n in stack else [m, n]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n, stack + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


@pytest.mark.parametrize(("low", "high"), [
    ("trainest.step", "trainest.search"), ("trainest.step", "trainest.report"), ("trainest.step", "trainest.cli"),
    ("trainest.memory", "trainest.report"), ("trainest.search", "trainest.report"), ("trainest.search", "trainest.cli"),
    ("trainest.estimate", "trainest.report"), ("trainest.validate", "trainest.report"),
    ("trainest.report", "trainest.cli"), ("trainest.knobs", "trainest.scenario"),
    ("trainest.band", "trainest.estimate"), ("trainest.band", "trainest.report"),
    ("trainest.compare", "trainest.report"), ("trainest.compare", "trainest.cli"),
    ("trainest.sweep", "trainest.report"), ("trainest.sweep", "trainest.cli"),
])
def test_layers_import_downwards(low, high):
    """No module of `low` imports anything of `high`, even inside a function."""
    for m, p in MODULES.items():
        if m == low or m.startswith(low + "."):
            bad = {n for n in imports(p, module_level=False) if n == high or n.startswith(high + ".")}
            assert not bad, f"{m} imports {sorted(bad)}"


def test_no_function_is_longer_than_80_lines():
    long = []
    for m, p in MODULES.items():
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{m}.{node.name}: {lines} lines")
    assert not long, "; ".join(long)


def test_every_package_is_installed():
    """A non-editable install ships only the packages pyproject.toml lists: trainest.scenario, .search and
    .trace were missing after the split, so `pip install .` then `trainest estimate` raised ModuleNotFoundError
    (the editable install of the tests did not show it)."""
    import tomllib
    ROOT = PACKAGE.parent
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "trainest").rglob("__init__.py")}
    assert on_disk <= listed, f"add to [tool.setuptools] packages: {sorted(on_disk - listed)}"
