"""`NamedTuple`, the base of trainest's frozen records: a class statement `class X(NamedTuple): ...` makes a tuple
subclass with named fields, defaults, `_replace`, `_asdict`, `_make` and the class's own methods and properties, as
`typing.NamedTuple` does, built at import without compiling code per class (issue 36).

`typing.NamedTuple` checks every field's annotation when a class is made (`typing._type_check`, which compiles each
string annotation into a `ForwardRef`), and `collections.namedtuple`, under it, compiles a `__new__` for each class
(`eval` of its source): together some 0.5 ms a class, and ~60 records are made on the start path of `trainest
estimate`. Here every record shares one `__new__` and one set of methods (`_Record`, which binds the arguments to the
fields from the class's field names and defaults); a class is only its fields' getters (namedtuple's) and its own
namespace. A record is still a tuple: equal to the tuple of its values, hashable, pickled and printed as a namedtuple
(`Name(field=value, ...)`), JSON a list. Keyword-only construction, the usual one, binds in C (`map` of `dict.pop`),
about 2x namedtuple's compiled `__new__`. The annotations are kept as written (strings, under `from __future__
import annotations`), unchecked; type checkers see `typing.NamedTuple` itself, so mypy checks the records exactly as
before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from typing import NamedTuple as NamedTuple
else:
    from collections import _tuplegetter  # namedtuple's field getter (a property of itemgetter where C lacks it)

    # attributes a record must not redefine, and those its class statement brings that the record keeps its own
    # of (as typing's NamedTupleMeta)
    _PROHIBITED = frozenset({"__new__", "__init__", "__slots__", "__getnewargs__", "_fields", "_field_defaults",
                             "_make", "_replace", "_asdict", "_source", "_required_fields", "_default_fields",
                             "_defaults"})
    _SPECIAL = frozenset({"__module__", "__name__", "__annotations__"})

    class _Record(tuple):
        """What every record shares: construction from positional and keyword arguments with the class's
        defaults, and namedtuple's methods. A record class sets `_fields` (names in order), `_field_defaults`
        (name -> default, for the trailing fields), `_required_fields` (the fields without a default),
        `_default_fields` (those with one) and `_defaults` (their defaults, in order)."""

        __slots__ = ()
        _fields: tuple[str, ...] = ()
        _field_defaults: dict[str, Any] = {}
        _required_fields: tuple[str, ...] = ()
        _default_fields: tuple[str, ...] = ()
        _defaults: tuple[Any, ...] = ()

        def __new__(cls, *args, **kwargs):
            if not args:                  # keywords only (most calls): each field's value, or its default
                try:
                    values = (*map(kwargs.pop, cls._required_fields),
                              *map(kwargs.pop, cls._default_fields, cls._defaults))
                except KeyError as missing:
                    raise TypeError(f"{cls.__name__}() missing required argument: {missing.args[0]!r}") from None
                if kwargs:
                    raise TypeError(f"{cls.__name__}() got an unexpected keyword argument '{next(iter(kwargs))}'")
                return tuple.__new__(cls, values)
            if not kwargs and len(args) == len(cls._fields):
                return tuple.__new__(cls, args)
            return tuple.__new__(cls, _bound(cls, args, kwargs))

        @classmethod
        def _make(cls, iterable):
            """A record from a sequence or iterable of all its fields' values."""
            result = tuple.__new__(cls, iterable)
            if len(result) != len(cls._fields):
                raise TypeError(f"Expected {len(cls._fields)} arguments, got {len(result)}")
            return result

        def _replace(self, /, **kwargs):
            """A new record with the named fields replaced by new values."""
            result = self._make(map(kwargs.pop, self._fields, self))
            if kwargs:
                raise ValueError(f"Got unexpected field names: {list(kwargs)!r}")
            return result

        def _asdict(self):
            """A new dict which maps field names to their values."""
            return dict(zip(self._fields, self, strict=True))

        def __repr__(self):
            fields = ", ".join(f"{name}={value!r}" for name, value in zip(self._fields, self, strict=True))
            return f"{type(self).__name__}({fields})"

        def __getnewargs__(self):
            return tuple(self)

    def _bound(cls, args, kwargs) -> tuple:
        """The values of a record's fields from positional `args` and keyword `kwargs`, the defaults filling the
        rest; a TypeError naming the argument for too many, a missing, a repeated or an unknown one."""
        fields, given = cls._fields, len(args)
        if given > len(fields):
            raise TypeError(f"{cls.__name__}() takes {len(fields)} positional arguments but {given} were given")
        twice = [name for name in fields[:given] if name in kwargs]
        if twice:
            raise TypeError(f"{cls.__name__}() got multiple values for argument '{twice[0]}'")
        required = len(cls._required_fields)
        first_default = max(given, required)
        try:
            values = (*args, *map(kwargs.pop, fields[given:required]),
                      *map(kwargs.pop, fields[first_default:], cls._defaults[first_default - required:]))
        except KeyError as missing:
            raise TypeError(f"{cls.__name__}() missing required argument: {missing.args[0]!r}") from None
        if kwargs:
            raise TypeError(f"{cls.__name__}() got an unexpected keyword argument '{next(iter(kwargs))}'")
        return values

    class _RecordMeta(type):
        def __new__(mcs, typename, bases, namespace):
            if bases != (_Base,):
                raise TypeError("a record inherits from NamedTuple only")
            annotations = dict(namespace.get("__annotations__", {}))
            fields = tuple(annotations)
            defaults: dict[str, Any] = {}
            for name in fields:
                if name.startswith("_"):          # (namedtuple's rule: the methods and attributes are _names)
                    raise ValueError(f"Field names cannot start with an underscore: {name!r}")
                if name in namespace:
                    defaults[name] = namespace[name]
                elif defaults:
                    raise TypeError(f"non-default field {name} follows a field with a default in {typename}")
            body = {"__doc__": f"{typename}({', '.join(fields)})", "__slots__": (), "_fields": fields,
                    "_field_defaults": defaults,
                    "_required_fields": fields[:len(fields) - len(defaults)], "_default_fields": tuple(defaults),
                    "_defaults": tuple(defaults.values()), "__match_args__": fields,
                    "__annotations__": annotations, "__module__": namespace["__module__"]}
            for key, value in namespace.items():
                if key in _PROHIBITED:
                    raise AttributeError(f"cannot overwrite NamedTuple attribute {key}")
                if key not in _SPECIAL and key not in defaults:
                    body[key] = value
            for index, name in enumerate(fields):
                body[name] = _tuplegetter(index, f"Alias for field number {index}")
            return type(typename, (_Record,), body)

    _Base = type.__new__(_RecordMeta, "NamedTuple", (), {})

    def NamedTuple(typename, fields=None, /, **kwargs):  # noqa: N802 (typing's name)
        """Only the class form is used: `class X(NamedTuple): ...` (see the module's docstring)."""
        raise TypeError("trainest.record.NamedTuple: use the class form")

    NamedTuple.__mro_entries__ = lambda bases: (_Base,)


_T = TypeVar("_T")


def replace(record: _T, /, **changes: Any) -> _T:
    """A copy of `record` with `changes`: a record's `_replace`, or `dataclasses.replace` of a dataclass (the
    one call for both, so that a record can move between the two without touching its callers)."""
    if hasattr(record, "_replace"):
        copy: _T = record._replace(**changes)
        return copy
    import dataclasses
    return dataclasses.replace(record, **changes)  # type: ignore[type-var]
