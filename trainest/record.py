"""`NamedTuple`, the base of trainest's frozen records, built at import for start-up time.

`typing.NamedTuple` checks every field's annotation when a class is made (`typing._type_check`, which compiles
each string annotation into a `ForwardRef`): about 0.2 ms a class, and the ~60 records on the start path of
`trainest estimate` spent some 10 ms of CPU on it (issue 36). Here a class statement `class X(NamedTuple): ...`
makes the same `collections.namedtuple` with the same fields, defaults, methods and properties, and keeps the
annotations as written (strings, under `from __future__ import annotations`) without checking them; type
checkers see `typing.NamedTuple` itself, so mypy checks the records exactly as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from typing import NamedTuple as NamedTuple
else:
    import collections

    # attributes a record must not redefine, and those its class statement brings that the tuple keeps its own
    # of (as typing's NamedTupleMeta)
    _PROHIBITED = frozenset({"__new__", "__init__", "__slots__", "__getnewargs__", "_fields", "_field_defaults",
                             "_make", "_replace", "_asdict", "_source"})
    _SPECIAL = frozenset({"__module__", "__name__", "__annotations__"})

    class _RecordMeta(type):
        def __new__(mcs, typename, bases, namespace):
            if bases != (_Record,):
                raise TypeError("a record inherits from NamedTuple only")
            annotations = dict(namespace.get("__annotations__", {}))
            defaults = []
            for name in annotations:
                if name in namespace:
                    defaults.append(namespace[name])
                elif defaults:
                    raise TypeError(f"non-default field {name} follows a field with a default in {typename}")
            record = collections.namedtuple(typename, list(annotations), defaults=defaults,
                                            module=namespace["__module__"])
            record.__annotations__ = record.__new__.__annotations__ = annotations
            for key, value in namespace.items():
                if key in _PROHIBITED:
                    raise AttributeError(f"cannot overwrite NamedTuple attribute {key}")
                if key not in _SPECIAL and key not in record._fields:
                    setattr(record, key, value)
            return record

    _Record = type.__new__(_RecordMeta, "NamedTuple", (), {})

    def NamedTuple(typename, fields=None, /, **kwargs):  # noqa: N802 (typing's name)
        """Only the class form is used: `class X(NamedTuple): ...` (see the module's docstring)."""
        raise TypeError("trainest.record.NamedTuple: use the class form")

    NamedTuple.__mro_entries__ = lambda bases: (_Record,)


_T = TypeVar("_T")


def replace(record: _T, /, **changes: Any) -> _T:
    """A copy of `record` with `changes`: a record's `_replace`, or `dataclasses.replace` of a dataclass (the
    one call for both, so that a record can move between the two without touching its callers)."""
    if hasattr(record, "_replace"):
        copy: _T = record._replace(**changes)
        return copy
    import dataclasses
    return dataclasses.replace(record, **changes)  # type: ignore[type-var]
