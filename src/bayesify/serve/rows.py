"""JSON rows of a request checked before any array is made: values that are not numbers where
numbers are read (``true`` would read as 1.0, ``null`` as NaN), and table rows' fields against
the bundle's features (unknown fields and missing features named, every one). Every refusal is
an :class:`InputError` naming the field."""

from __future__ import annotations

import math
from typing import Any

from bayesify.data.preprocessing import Preprocessing
from bayesify.options import shown

#: names one error lists before it gives the count of the rest
MAX_NAMED = 50
_NUMBER_TYPES = {int, float}
_JSON_NAMES = {bool: "true/false", type(None): "null", str: "a string", dict: "an object"}
_BOOLEAN_SPELLINGS = {"true": True, "false": False}


class InputError(ValueError):
    """A request field that cannot be used: ``loc`` names it (``["body", "inputs", 3, 1]``)."""

    def __init__(self, loc: list[str | int], message: str) -> None:
        super().__init__(message)
        self.loc = loc
        self.message = message


def names_listed(names: list[Any], limit: int = MAX_NAMED) -> str:
    """``['a', 'b']``, or the first ``limit`` names and how many there are in all."""
    if len(names) <= limit:
        return shown(list(names))
    return f"{shown(list(names[:limit]))[:-1]}, ... ({len(names)} in all)]"


def too_large(value: Any) -> tuple[list[int], bool]:
    """Where in nested lists the first integer beyond float64 is (JSON allows any integer)."""
    if isinstance(value, list):
        for i, v in enumerate(value):
            where, found = too_large(v)
            if found:
                return [i, *where], True
        return [], False
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            float(value)
        except OverflowError:
            return [], True
    return [], False


def not_a_number(value: Any, path: list[int]) -> tuple[list[int], str] | None:
    """Where in nested lists the first value that is not a JSON number is, and what it is
    (``true`` would otherwise read as 1.0 and ``null`` as NaN)."""
    if not isinstance(value, list):
        if type(value) in _NUMBER_TYPES:
            return None
        return path, _JSON_NAMES.get(type(value), type(value).__name__)
    if value and not isinstance(value[0], list) and set(map(type, value)) <= _NUMBER_TYPES:
        return None  # the common case, a list of numbers, checked without a Python loop
    for i, v in enumerate(value):
        found = not_a_number(v, [*path, i])
        if found is not None:
            return found
    return None


def boolean_features(prep: Preprocessing) -> dict[str, dict[bool, str]]:
    """Features whose values are true/false: category features whose categories are spellings
    of the two booleans (``True``/``False``, any case). Per feature, the category each JSON
    boolean stands for."""
    out = {}
    for f, cats in (prep.categories or {}).items():
        spelled = {_BOOLEAN_SPELLINGS.get(str(c).lower()): str(c) for c in cats}
        if cats and None not in spelled:
            out[f] = {b: c for b, c in spelled.items() if b is not None}
    return out


def boolean_text(categories: dict[bool, str], value: str) -> str:
    """``value`` as its boolean feature's category when it spells a boolean in any case
    (``"true"`` -> ``"True"``, given ``categories`` from :func:`boolean_features`), else as
    it is."""
    spelled = _BOOLEAN_SPELLINGS.get(value.lower())
    return value if spelled is None else categories[spelled]


def check_table_rows(prep: Preprocessing, inputs: list, loc: list[str | int],
                     booleans: dict[str, dict[bool, str]]) -> list:  # fmt: skip
    """Table rows (``{feature: value}`` objects, or lists in feature order) checked field by
    field: every feature present and no other field, values that are numbers or category
    names (not lists, objects, NaN or numbers beyond float64), JSON booleans only in boolean
    features (``booleans``, from :func:`boolean_features`), where the text
    ``"true"``/``"false"`` in any case is read as the boolean. Returns the rows, booleans
    written as their feature's category names."""
    names = prep.features or []
    known = set(names)
    named = isinstance(inputs[0], dict)
    out = []
    for i, row in enumerate(inputs):
        if isinstance(row, dict) != named:
            raise InputError([*loc, i], "mix of objects and lists; give every row as an "
                             "object {feature: value} or every row as a list")  # fmt: skip
        if named:
            _check_fields(row, names, known, prep.target, [*loc, i])
            values = [(n, n, row[n]) for n in names]
        else:
            if not isinstance(row, list) or len(row) != len(names):
                raise InputError([*loc, i], f"a row is {len(names)} values in the order "
                                 f"{names_listed(names)}, or an object "
                                 "{feature: value}")  # fmt: skip
            values = [(k, n, v) for k, (n, v) in enumerate(zip(names, row, strict=True))]
        swaps = {}
        for k, feature, v in values:
            where = [*loc, i, k]
            if isinstance(v, list | dict):
                raise InputError(where, "a number or a category name, not a list or an object")
            if isinstance(v, bool):
                if feature not in booleans:
                    raise InputError(where, _not_boolean(prep, feature))
                swaps[k] = booleans[feature][v]
            elif isinstance(v, str) and feature in booleans:
                swaps[k] = boolean_text(booleans[feature], v)
            elif isinstance(v, float) and not math.isfinite(v):
                raise InputError(where, "not a finite number")
            elif isinstance(v, int) and too_large(v)[1]:
                raise InputError(where, "number too large for a float64")
        if swaps:
            row = {**row, **swaps} if named else [swaps.get(k, v) for k, v in enumerate(row)]
        out.append(row)
    return out


def _check_fields(row: dict, names: list[str], known: set[str], target: str | None,
                  loc: list[str | int]) -> None:  # fmt: skip
    missing = [n for n in names if n not in row]
    unknown = [k for k in row if k not in known]
    problems = []
    if missing:
        problems.append(f"missing feature(s) {names_listed(missing)}")
    if unknown:
        why = f" ({target!r} is the target the model predicts)" if target in unknown else ""
        problems.append(f"unknown field(s) {names_listed(unknown)}{why}")
    if problems:
        raise InputError(loc, f"{'; '.join(problems)}; the model reads exactly the features "
                         f"{names_listed(names)}")  # fmt: skip


def _not_boolean(prep: Preprocessing, feature: str) -> str:
    cats = (prep.categories or {}).get(feature)
    if cats is None:
        return f"true/false in feature {feature!r}, which reads numbers; send a number"
    return (f"true/false in feature {feature!r}, a category of {names_listed(cats)}; send "
            "one of them")  # fmt: skip
