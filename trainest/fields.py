"""One mechanism to read untrusted mappings (YAML files, CLI options) into typed values.

Every reader names where the value came from (`file: key`), checks the type and range, and
raises `SpecError` with the value and what is allowed. Unknown keys are errors, with a
"did you mean" when a known key is close.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal, overload

from trainest.errors import SpecError, did_you_mean
from trainest.errors import show as show  # re-exported: F.show

MAX_REASONABLE = 1e18  # sizes above this (layers, hidden, devices...) are rejected as absurd
MAX_SHOWN_PATH_CHARS = 200   # a file name is quoted in an error message up to this length


def load_yaml_mapping(path: Path, what: str) -> dict[str, Any]:
    """Read a YAML file with `yaml.safe_load` and require a mapping at its top level."""
    data = load_yaml(path, what)
    if not isinstance(data, dict):
        raise SpecError(f"{what} file {show(str(path), MAX_SHOWN_PATH_CHARS)} must hold a mapping (key: value), "
                        f"not a {type(data).__name__}")
    return data


def load_yaml(path: Path, what: str) -> Any:
    """Read a YAML file with `yaml.safe_load` (any top-level value but nothing: an empty file is an error)."""
    import yaml  # here, not at the top: a bundled-catalog estimate never needs it (start-up time)
    name = show(str(path), MAX_SHOWN_PATH_CHARS)
    try:
        exists, is_dir = path.exists(), path.is_dir()
    except OSError as exc:   # e.g. a name too long for the file system
        raise SpecError(f"{what} file {name} cannot be read: {exc.strerror or exc}") from None
    if not exists:
        raise SpecError(f"{what} file {name} does not exist")
    if is_dir:
        raise SpecError(f"{what} file {name} is a directory, not a YAML file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{what} file {name} is not UTF-8 text (binary file?)") from None
    except OSError as exc:
        raise SpecError(f"{what} file {name} cannot be read: {exc.strerror}") from None
    try:
        # the C (libyaml) safe loader when present: ~10x faster on the large runs files
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
        try:
            node = loader.get_single_node()
            if node is not None:
                strict_yaml(node, f"{what} file {name}")
            data = None if node is None else loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or "invalid YAML"
        raise SpecError(f"{what} file {name} is not valid YAML{where}: {problem}") from None
    except SpecError:
        raise
    except ValueError:       # an integer literal over Python's 4300-digit conversion limit
        raise SpecError(f"{what} file {name} holds a number too long to read") from None
    except RecursionError:   # PyYAML composes nested collections recursively
        raise SpecError(f"{what} file {name} is nested too deeply") from None
    if nesting_depth(data) > MAX_NESTING:
        raise SpecError(f"{what} file {name} is nested too deeply (more than {MAX_NESTING} levels)")
    if data is None:
        raise SpecError(f"{what} file {name} is empty")
    return data


INT_TAG, FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
DECIMAL_INT_CHARS = frozenset("0123456789_+-")


def _number_form(node: Any) -> str | None:
    """What is wrong with a plain YAML 1.1 number a reader would misread, or None: a base-60 (`1:04` is 64),
    hexadecimal (`0x40`), octal (`0o17`, `017` is 15) or binary (`0b11`) integer, an infinity or a NaN."""
    text = str(node.value).lstrip("+-")
    if node.style or node.tag not in (INT_TAG, FLOAT_TAG):      # quoted: text (libyaml gives plain as '')
        return None
    if ":" in text:
        return "a YAML 1.1 base-60 number"
    if node.tag == FLOAT_TAG:
        return "not a finite number" if text.lower() in (".inf", ".nan") else None
    if text[:2].lower() in ("0x", "0o", "0b"):
        return {"x": "a hexadecimal", "o": "an octal", "b": "a binary"}[text[1].lower()] + " number"
    if len(text.replace("_", "")) > 1 and text.startswith("0") or not set(text) <= DECIMAL_INT_CHARS:
        return "a YAML 1.1 octal number (a leading 0)"
    return None


def strict_yaml(root: Any, where: str) -> None:
    """Refuse what YAML reads without a word but a person would not mean: a key given twice in one mapping
    (the last one would win), and the YAML 1.1 number forms of `_number_form`; each named by its key path."""
    import yaml
    stack: list[tuple[Any, str]] = [(root, "")]
    walked: set[int] = set()       # an aliased node is walked once: a recursive alias is a cycle of nodes
    while stack:
        node, path = stack.pop()
        if id(node) in walked:
            continue
        walked.add(id(node))
        if isinstance(node, yaml.MappingNode):
            seen: dict[tuple[str, str], int] = {}
            for key, value in node.value:
                name = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
                at = f"{path}.{name}" if path else name
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    line = key.start_mark.line + 1
                    if (key.tag, name) in seen:
                        raise SpecError(f"{where}: key {at} is given twice (lines {seen[key.tag, name]} and {line}); "
                                        f"give it once")
                    seen[key.tag, name] = line
                stack.append((value, at))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(node.value))
        elif isinstance(node, yaml.ScalarNode) and (problem := _number_form(node)) is not None:
            shown = f"{where}: {path or 'the value'}: {node.value}"
            if problem == "not a finite number":
                raise SpecError(f"{shown} is not a finite number; allowed: a finite number in decimal digits")
            read = yaml.safe_load(str(node.value))
            raise SpecError(f"{shown} is {problem}, which YAML 1.1 reads as {read}; write the number in decimal "
                            f"digits (or quote it as text)")


MAX_NESTING = 32   # no trainest file nests deeper than 4 levels; the limit does not depend on the YAML library


def nesting_depth(data: Any) -> int:
    """Levels of nested lists/mappings in `data` (a scalar is 0), computed without recursion; a
    container met again (a recursive YAML alias) is not descended twice, so cycles stay finite and
    are left to the key and type checks."""
    deepest, stack, seen = 0, [(data, 0)], set()
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if id(item) in seen:
                continue
            seen.add(id(item))
        if isinstance(item, dict):
            children = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        if deepest > MAX_NESTING:
            return deepest
        stack.extend((c, depth + 1) for c in children)
    return deepest


def check_keys(data: Any, where: str, required: tuple[str, ...], optional: tuple[str, ...] = (),
               nested: dict[str, tuple[str, ...]] | None = None) -> dict[str, Any]:
    """Require `data` to be a mapping with all `required` keys and no keys outside required+optional; `nested`: the
    required keys of a missing key that is a mapping of its own, named in the same error (one round, not two)."""
    if not isinstance(data, dict):
        raise SpecError(f"{where}: expected a mapping (key: value), got {type(data).__name__} {show(data)}")
    allowed = set(required) | set(optional)
    for key in data:
        if not isinstance(key, str):
            raise SpecError(f"{where}: key {show(key)} is not a string")
        if key not in allowed:
            raise SpecError(f"{where}: unknown key {show(key)}{did_you_mean(key, allowed)}; "
                            f"allowed: {', '.join(sorted(allowed))}")
    missing = [key for key in required if key not in data or data[key] is None]
    if missing:                       # all of them at once: a file written by hand needs no round per key
        inside = [f"{key} needs {', '.join(nested[key])}" for key in missing if nested and nested.get(key)]
        raise SpecError(f"{where}: missing required key{'s' if len(missing) > 1 else ''} "
                        f"{', '.join(show(key) for key in missing)}" + (f" ({'; '.join(inside)})" if inside else ""))
    return data


@overload
def number(value: Any, where: str, *, minimum: float = ..., allow_zero: bool = ..., maximum: float = ...,
           allow_none: Literal[False] = ...) -> float: ...
@overload
def number(value: Any, where: str, *, minimum: float = ..., allow_zero: bool = ..., maximum: float = ...,
           allow_none: bool) -> float | None: ...
def number(value: Any, where: str, *, minimum: float = 0.0, allow_zero: bool = False,
           maximum: float = MAX_REASONABLE, allow_none: bool = False) -> float | None:
    """A finite real number > minimum (>= when allow_zero) and <= maximum."""
    if value is None:
        if allow_none:
            return None
        raise SpecError(f"{where}: a number is required")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{where}: {show(value)} is not a number")
    try:
        x = float(value)
    except OverflowError:   # an int beyond the float range
        raise SpecError(f"{where}: {show(value)} is absurdly large (at most {maximum:g})") from None
    if not math.isfinite(x):
        raise SpecError(f"{where}: {show(value)} must be a finite number")
    if x < minimum or (x == minimum and not allow_zero):
        rel = ">=" if allow_zero else ">"
        raise SpecError(f"{where}: {show(value)} must be {rel} {minimum:g}")
    if x > maximum:
        raise SpecError(f"{where}: {show(value)} is absurdly large (at most {maximum:g})")
    return x


@overload
def fraction(value: Any, where: str, *, allow_none: Literal[False] = ...) -> float: ...
@overload
def fraction(value: Any, where: str, *, allow_none: bool) -> float | None: ...
def fraction(value: Any, where: str, *, allow_none: bool = False) -> float | None:
    """A number in (0, 1]."""
    x = number(value, where, allow_none=allow_none)
    if x is not None and x > 1.0:
        raise SpecError(f"{where}: {show(value)} must be a fraction in (0, 1]")
    return x


@overload
def integer(value: Any, where: str, *, minimum: int = ..., maximum: int = ...,
            allow_none: Literal[False] = ...) -> int: ...
@overload
def integer(value: Any, where: str, *, minimum: int = ..., maximum: int = ..., allow_none: bool) -> int | None: ...
def integer(value: Any, where: str, *, minimum: int = 1, maximum: int = 10**12,
            allow_none: bool = False) -> int | None:
    """A whole number in [minimum, maximum]; 4.0 is accepted, 4.5 is not."""
    if value is None:
        if allow_none:
            return None
        raise SpecError(f"{where}: a whole number is required")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{where}: {show(value)} is not a whole number")
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise SpecError(f"{where}: {show(value)} is not a whole number")
    n = int(value)
    if n < minimum:
        raise SpecError(f"{where}: {show(value)} must be at least {minimum}")
    if n > maximum:
        raise SpecError(f"{where}: {show(value)} is absurdly large (at most {maximum})")
    return n


def choice(value: Any, where: str, allowed: tuple[str, ...]) -> str:
    """A string from `allowed` (case-insensitive)."""
    text = value.strip().lower() if isinstance(value, str) else ""
    if text not in allowed:
        raise SpecError(f"{where}: {show(value)} is not allowed{did_you_mean(text, allowed)}; "
                        f"allowed: {', '.join(allowed)}")
    return text


def canonical_choice(value: Any, where: str, allowed: tuple[str, ...]) -> str:
    """A string from `allowed`, matched case-insensitively and returned in its spelling in `allowed`
    (`hbm3e` -> `HBM3e`)."""
    by_lower = {a.lower(): a for a in allowed}
    text = value.strip().lower() if isinstance(value, str) else ""
    if text not in by_lower:
        raise SpecError(f"{where}: {show(value)} is not allowed{did_you_mean(text, tuple(by_lower))}; "
                        f"allowed: {', '.join(allowed)}")
    return by_lower[text]


def integer_choice(value: Any, where: str, allowed: tuple[int, ...]) -> int:
    """A whole number from `allowed` (PCIe generations, lane counts)."""
    n = integer(value, where, minimum=0)
    if n not in allowed:
        raise SpecError(f"{where}: {show(value)} is not allowed; allowed: {', '.join(str(a) for a in allowed)}")
    return n


def boolean(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    raise SpecError(f"{where}: {show(value)} must be true or false")


@overload
def text(value: Any, where: str, *, allow_none: Literal[False] = ...) -> str: ...
@overload
def text(value: Any, where: str, *, allow_none: bool) -> str | None: ...
def text(value: Any, where: str, *, allow_none: bool = False) -> str | None:
    if value is None and allow_none:
        return None
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        try:
            return str(value)
        except ValueError:   # an int over Python's 4300-digit conversion limit
            raise SpecError(f"{where}: {show(value)} must be text") from None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "; ".join(value)
    raise SpecError(f"{where}: {show(value)} must be text")


def given(data: dict[str, Any], key: str, default: object) -> object:
    """data[key], or `default` when the key is absent or null (a given 0 stays 0 and is then validated)."""
    value = data.get(key)
    return default if value is None else value
