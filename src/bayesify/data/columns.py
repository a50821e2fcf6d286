"""What kind of values a table column holds, decided by its dtype family, not by its name.

One classification serves training (which columns are numbers, which are one-hot encoded,
which are refused) and prediction (a value is turned into the same text or number it was
trained on), so a column reads the same from CSV, Parquet, ``.npz``, a DataFrame or JSON:

* :attr:`Kind.NUMBER`: integers and floats (nullable ``Int64``/``Float64`` included, integers
  with missing values included), and text all of whose values are numbers (digits stored as
  text in Parquet);
* :attr:`Kind.BOOL`: ``bool``/``boolean`` columns and object columns of ``True``/``False``
  (a CSV column of booleans with empty cells); one-hot encoded as the categories ``False`` and
  ``True``;
* :attr:`Kind.CATEGORY`: ``category`` columns and text, including object columns mixing text
  and numbers; one-hot encoded, each value as :func:`category_text` writes it;
* :attr:`Kind.TIME`: datetimes, dates, durations and periods, and text whose every value is an
  ISO 8601 date or time (``2024-01-31``, ``2024-01-31T08:00``): refused, since a date has no
  one meaning as an input (day of year? days since a start?);
* :attr:`Kind.OTHER`: anything else (complex numbers, bytes, intervals): refused.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["Kind", "category_text", "column_kind", "describe_kind", "numbers"]

#: ``pandas.api.types.infer_dtype`` answers (skipping missing values) per kind, object columns
_INFERRED = {
    "boolean": "bool",
    "integer": "number",
    "floating": "number",
    "mixed-integer-float": "number",
    "decimal": "number",
    "string": "text",
    "mixed": "text",
    "mixed-integer": "text",
    "categorical": "text",
    "empty": "text",
    "datetime64": "time",
    "datetime": "time",
    "date": "time",
    "time": "time",
    "timedelta64": "time",
    "timedelta": "time",
    "period": "time",
}


class Kind(StrEnum):
    """The kinds of column a table holds."""

    NUMBER = "number"
    """Integers and floats, and text whose every value is a number."""
    BOOL = "bool"
    """True/False values, one-hot encoded as the categories ``False`` and ``True``."""
    CATEGORY = "category"
    """Text and ``category`` columns, one-hot encoded."""
    TIME = "time"
    """Dates, times, durations: refused."""
    OTHER = "other"
    """Complex numbers, bytes and the like: refused."""


def _is_iso_time(text: pd.Series) -> bool:
    """Whether every value of a text column (missing values dropped) is an ISO 8601 date."""
    import pandas as pd

    values = text.dropna()
    if values.empty or not values.astype(str).str.match(r"^\d{4}-\d\d-\d\d").all():
        return False
    parsed = pd.to_datetime(values, format="ISO8601", errors="coerce", utc=True)
    return bool(parsed.notna().all())


def column_kind(col: pd.Series) -> Kind:
    """The kind of values in ``col`` (its dtype family; object and text columns by their
    values: all numbers -> NUMBER, all True/False -> BOOL, all ISO dates -> TIME)."""
    import pandas as pd
    from pandas.api import types

    dtype = col.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        return Kind.CATEGORY
    if types.is_bool_dtype(dtype):
        return Kind.BOOL
    if types.is_complex_dtype(dtype):
        return Kind.OTHER
    if types.is_numeric_dtype(dtype):
        return Kind.NUMBER
    if (
        types.is_datetime64_any_dtype(dtype)
        or types.is_timedelta64_dtype(dtype)
        or isinstance(dtype, pd.PeriodDtype)
    ):
        return Kind.TIME
    if not (types.is_object_dtype(dtype) or types.is_string_dtype(dtype)):
        return Kind.OTHER
    family = _INFERRED.get(types.infer_dtype(col, skipna=True), "other")
    if family == "text":
        present = col.dropna()
        if len(present) and pd.to_numeric(present, errors="coerce").notna().all():
            return Kind.NUMBER
        return Kind.TIME if _is_iso_time(col) else Kind.CATEGORY
    return Kind(family) if family != "other" else Kind.OTHER


def describe_kind(col: pd.Series, kind: Kind) -> str:
    """A few words on what the column holds, for notes and errors (``text``, ``true/false``,
    ``dates or times (datetime64[us])``)."""
    import pandas as pd

    if kind is Kind.BOOL:
        return "true/false"
    if kind is Kind.CATEGORY:
        return "a category column" if isinstance(col.dtype, pd.CategoricalDtype) else "text"
    if kind is Kind.NUMBER:
        return "numbers" if pd.api.types.is_numeric_dtype(col.dtype) else "numbers stored as text"
    what = "dates or times" if kind is Kind.TIME else "values bayesify cannot read as inputs"
    return f"{what} ({col.dtype})"


def numbers(col: pd.Series) -> np.ndarray:
    """``col`` as float64 ``[N]``: missing values and text that is not a number are NaN."""
    import pandas as pd

    if isinstance(col.dtype, pd.CategoricalDtype):
        col = col.astype(object)
    return pd.to_numeric(col, errors="coerce").to_numpy(np.float64, na_value=np.nan)


def _text(v: Any) -> str:
    if isinstance(v, bool | np.bool_):
        return str(bool(v))
    if isinstance(v, int | np.integer):
        return str(int(v))
    if isinstance(v, float | np.floating):
        f = float(v)
        return str(int(f)) if f.is_integer() and abs(f) < 2**53 else repr(f)
    return str(v)


def category_text(col: pd.Series) -> pd.Series:
    """The values of ``col`` as the text one-hot categories are named by (missing stays
    missing): text as it is, booleans ``True``/``False``, whole numbers without a decimal point
    (``3.0`` -> ``"3"``, so a column of integers read as floats because of an empty cell keeps
    its categories), other numbers as Python writes them."""
    import pandas as pd
    from pandas.api import types

    if isinstance(col.dtype, pd.CategoricalDtype):
        col = col.astype(object)
    if types.is_string_dtype(col.dtype) and types.infer_dtype(col, skipna=True) in (
        "string",
        "empty",
    ):
        return col.astype("string")
    return col.astype(object).map(_text, na_action="ignore").astype("string")
