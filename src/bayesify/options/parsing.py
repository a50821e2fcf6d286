"""The one way option values are parsed: a string as an Enum member, any value against a field's
type, every field of a dataclass; and :func:`shown`, how one-line errors show a value."""

from __future__ import annotations

import dataclasses
import functools
import numbers
import types
import typing
from enum import Enum
from typing import Any, TypeVar

E = TypeVar("E", bound=Enum)


def shown(value: Any) -> str:
    """``value`` as a one-line error shows it: Python's repr of plain values, but numpy and torch
    scalars as the plain number or string they hold (``1``, not ``np.int64(1)``) and lists and
    tuples element by element."""
    if isinstance(value, list | tuple):
        items = ", ".join(shown(v) for v in value)
        return f"[{items}]" if isinstance(value, list) else f"({items}{',' * (len(value) == 1)})"
    if type(value).__module__ in ("numpy", "torch") and hasattr(value, "tolist"):
        return shown(value.tolist())  # a scalar's number, an array's nested lists
    return repr(value)


def parse_option(
    kind: type[E], value: Any, *, option: str, error: type[ValueError] = ValueError
) -> E:
    """``value`` (a member or its string) as a member of ``kind``.

    Anything else raises ``error`` (a ``ValueError``) naming ``option``, the value and the valid
    values: ``unknown prior 'foo'; valid: gaussian, mixture``.
    """
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            pass
    valid = ", ".join(str(m.value) for m in kind)
    raise error(f"unknown {option} {shown(value)}; valid: {valid}")


def _describe(hint: Any) -> str:
    """``int`` -> ``an int``, for messages."""
    if isinstance(hint, type) and issubclass(hint, Enum):
        return "one of " + ", ".join(str(m.value) for m in hint)
    if typing.get_origin(hint) is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    name = getattr(hint, "__name__", str(hint))
    return {"int": "an int", "float": "a number", "bool": "true or false", "str": "a string"}.get(
        name, name
    )


def parse_value(hint: Any, value: Any, *, option: str) -> Any:
    """``value`` checked against the type ``hint`` and converted where that is lossless.

    ``int``: an integer (not a bool); ``float``: any real number, returned as ``float``;
    ``bool``: a bool; ``str``: a string; an Enum: a member or its string (:func:`parse_option`);
    ``Literal[...]``: one of its values; ``X | Y``: the first arm that takes it (``None`` only
    for ``X | None``). Other types (dicts, tuples, ``Any``) pass unchecked. A bad value raises
    ``ValueError``: ``bank_size must be an int, got 'abc'``.
    """
    origin = typing.get_origin(hint)
    if origin is typing.Union or isinstance(hint, types.UnionType):
        arms = typing.get_args(hint)
        if value is None:
            if type(None) in arms:
                return None
        else:
            for arm in arms:
                if arm is type(None):
                    continue
                try:
                    return parse_value(arm, value, option=option)
                except ValueError:
                    continue
        expected = " or ".join("None" if a is type(None) else _describe(a) for a in arms)
        raise ValueError(f"{option} must be {expected}, got {shown(value)}")
    if isinstance(hint, type) and issubclass(hint, Enum):
        return parse_option(hint, value, option=option)
    if origin is typing.Literal:
        if value in typing.get_args(hint):
            return value
    elif hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
    elif hint is float:
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    else:
        return value
    raise ValueError(f"{option} must be {_describe(hint)}, got {shown(value)}")


@functools.cache
def _field_hints(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.name in hints}


def parse_fields(obj: Any) -> None:
    """Check and convert every field of the dataclass instance ``obj`` by its declared type
    (:func:`parse_value`; frozen dataclasses too). For a config's ``__post_init__``."""
    for name, hint in _field_hints(type(obj)).items():
        object.__setattr__(obj, name, parse_value(hint, getattr(obj, name), option=name))
