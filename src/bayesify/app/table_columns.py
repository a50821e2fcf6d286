"""The checks of a user's table before training: which columns become inputs, and how.

Each feature column is treated by its kind (:mod:`bayesify.data.columns`, by dtype family):
numbers are inputs, true/false and text columns are one-hot encoded (a note says how many
inputs each became), dates and unreadable kinds are refused. Every problem of the table is
collected and raised as one line naming the columns and rows (:func:`problems_message`).

Problems are looked for in every row of the table; whether a column is constant is decided on
the rows the model is trained on: a column constant in the whole table is refused, one constant
only in the training rows is left out of the features with a note (the model could learn
nothing from it, and its values in the other rows must not be refused later).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bayesify.data.columns import Kind, category_text, column_kind, describe_kind, numbers
from bayesify.data.errors import DataError
from bayesify.data.preprocessing import FLOAT32_MAX, RANGE_MARGIN, Preprocessing
from bayesify.options import shown

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: a string feature column with more distinct values than this is refused, not one-hot encoded
MAX_CATEGORIES = 50
#: the largest regression target magnitude taken: predictive variances are in the target's
#: units squared and must stay within float32 (1e18² = 1e36 < 3.4e38, with room for the noise)
TARGET_MAX = 1e18
#: the smallest spread (standard deviation) of a varying regression target taken: below it the
#: predictive variances, in the target's units squared, underflow float32 to zero (1e-12² =
#: 1e-24, with room for a noise variance many orders smaller than the target's)
TARGET_MIN_SPREAD = 1e-12
#: name parts that mark a row id (``house_id``, ``sample id``, ``Index``, ``rowKey``, ...)
ID_WORDS = {"id", "ids", "key", "index", "idx", "uuid", "guid", "pk", "rowid", "identifier"}


def _rows(mask: np.ndarray) -> str:
    idx = np.flatnonzero(mask)
    first = ", ".join(str(i) for i in idx[:3])
    return f"{len(idx)} row(s) (first: row {first})"


def problems_message(path: Path | str, problems: list[str]) -> str:
    """All of a table's problems in one line: ``t.csv: <problem>`` or
    ``t.csv: 3 problems: (1) ...; (2) ...; (3) ...``."""
    if len(problems) == 1:
        return f"{path}: {problems[0]}"
    listed = "; ".join(f"({i}) {p}" for i, p in enumerate(problems, 1))
    return f"{path}: {len(problems)} problems: {listed}"


def _name_words(name: str) -> set[str]:
    """``"houseID"``, ``"sample id"``, ``"row_key"`` -> their lower-case words."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", str(name))
    return {w.lower() for w in re.split(r"[^A-Za-z0-9]+", spaced) if w}


def id_like(col: pd.Series, name: str) -> str | None:
    """Why column ``name`` looks like a row id rather than a feature, or None: a different
    whole number in every row with an id-like name (``id``, ``key``, ``index``, ...) or forming
    a run of consecutive numbers (a saved pandas index), or a different text in every row with
    an id-like name."""
    n = len(col)
    if n < 2 or col.isna().any() or col.nunique() != n:
        return None
    named = bool(_name_words(name) & ID_WORDS)
    kind = column_kind(col)
    if kind is Kind.CATEGORY:
        return "a different text in every row and an id-like name" if named else None
    if kind is not Kind.NUMBER:
        return None
    values = numbers(col)
    if not np.all(values == np.round(values)):
        return None
    if named:
        return "a different whole number in every row and an id-like name"
    if values.max() - values.min() == n - 1:
        return "the consecutive whole numbers of a row index"
    return None


@dataclass
class ColumnPlan:
    """What training makes of the feature columns."""

    features: list[str] = field(default_factory=list)  # kept, in table order
    categories: dict[str, list[str]] = field(default_factory=dict)  # one-hot columns
    notes: list[str] = field(default_factory=list)  # one line per column treated specially


def _constant(f: str, value: object, rows: int) -> str:
    return (
        f"column {f!r} is constant ({shown(value)} in all {rows} rows); leave it out with --exclude"
    )


def plan_columns(
    frame: pd.DataFrame, features: list[str], problems: list[str], train: np.ndarray
) -> ColumnPlan:
    """Checks the feature columns of ``frame``; ``train [N]`` marks the rows the model is
    trained on. Problems are appended to ``problems`` (one sentence each)."""
    plan = ColumnPlan()
    for f in features:
        col = frame[f]
        kind = column_kind(col)
        missing = col.isna().to_numpy()
        if missing.any():
            problems.append(f"column {f!r} has missing values in {_rows(missing)}; fill or "
                            "drop them, or leave the column out with --exclude")  # fmt: skip
            continue
        if kind in (Kind.TIME, Kind.OTHER):
            fix = ", or add number columns made from it (e.g. days since a start, day of year)"
            problems.append(f"column {f!r} holds {describe_kind(col, kind)}, which are not "
                            f"inputs; leave it out with --exclude"
                            f"{fix if kind is Kind.TIME else ''}")  # fmt: skip
            continue
        if kind is Kind.NUMBER:
            values = numbers(col)
            big = ~(np.abs(values) <= FLOAT32_MAX)
            if big.any():
                problems.append(f"column {f!r} has numbers beyond the float32 range in "
                                f"{_rows(big)}")  # fmt: skip
                continue
            distinct, in_train, raw = np.unique(values), np.unique(values[train]), col
        else:
            text = category_text(col)
            if kind is Kind.CATEGORY and not _declared(col):
                bad = np.isnan(numbers(col))
                if bad.mean() < 0.5:  # mostly numbers: the others are typos, not categories
                    value = col.iloc[int(np.flatnonzero(bad)[0])]
                    problems.append(f"column {f!r} has non-numeric values in {_rows(bad)} "
                                    f"(e.g. {shown(value)}) among numbers")  # fmt: skip
                    continue
            distinct = np.array(sorted(text.unique().tolist()), dtype=object)
            in_train, raw = text[train].unique(), text
            if len(distinct) > MAX_CATEGORIES:
                problems.append(f"column {f!r} is text with {len(distinct)} distinct values "
                                f"(more than {MAX_CATEGORIES} to one-hot encode); leave it out "
                                "with --exclude")  # fmt: skip
                continue
        if len(distinct) == 1:
            problems.append(_constant(f, raw.iloc[0], len(col)))
            continue
        if len(in_train) == 1:
            first = raw.iloc[int(np.flatnonzero(train)[0])]
            plan.notes.append(f"column {f!r} is constant in the training rows ({shown(first)} "
                              f"in all {int(train.sum())}) though not in the table: left out of "
                              "the features (the model could learn nothing from it)")  # fmt: skip
            continue
        plan.features.append(f)
        if kind is Kind.NUMBER:
            if not _numeric_dtype(col):
                plan.notes.append(f"column {f!r} holds numbers stored as text: read as numbers")
            continue
        plan.categories[f] = distinct.tolist()
        k = len(distinct)
        plan.notes.append(f"column {f!r} is {describe_kind(col, kind)}: {k} categories -> "
                          f"{k} one-hot inputs")  # fmt: skip
    return plan


def _declared(col: pd.Series) -> bool:
    import pandas as pd

    return isinstance(col.dtype, pd.CategoricalDtype)


def _numeric_dtype(col: pd.Series) -> bool:
    import pandas as pd

    return bool(pd.api.types.is_numeric_dtype(col.dtype))


def check_target_numbers(y: np.ndarray, target: str, problems: list[str]) -> None:
    """Regression targets ``y [N]`` (float64): finite, within :data:`TARGET_MAX`, and varying
    by no less than :data:`TARGET_MIN_SPREAD` (or not at all)."""
    inf = np.isinf(y)
    if inf.any():
        problems.append(f"target {target!r} has infinite values in {_rows(inf)}")
    big = ~inf & (np.abs(y) > TARGET_MAX)
    if big.any():
        problems.append(f"target {target!r} has values beyond ±{TARGET_MAX:g} in {_rows(big)}: "
                        "predictive variances, in its units squared, would pass the float32 "
                        "range; rescale the column (e.g. to thousands or millions)")  # fmt: skip
    finite = y[np.isfinite(y)]
    spread = float(finite.std()) if len(finite) else 0.0
    if 0 < spread < TARGET_MIN_SPREAD:
        problems.append(f"target {target!r} varies by only {spread:.3g} (its standard "
                        "deviation): predictive variances, in its units squared, would fall "
                        "below the float32 range; rescale the column (e.g. multiply it by "
                        "1e6 or 1e9)")  # fmt: skip


def number_bounds(
    prep: Preprocessing, x_train: np.ndarray, seen: list[np.ndarray]
) -> dict[str, list[float]]:
    """``{feature: [low, high]}`` for the number features: the extremes of the encoded training
    rows ``x_train [N, F_enc]`` widened by ``RANGE_MARGIN`` of their standard deviations, and
    wide enough for every value in ``seen`` (the user's own tables, encoded the same way)."""
    out: dict[str, list[float]] = {}
    for j, name in enumerate(prep.encoded_names):
        if name in prep.categories or name not in (prep.features or []):
            continue
        v = x_train[:, j]
        margin = RANGE_MARGIN * float(v.std())
        low, high = float(v.min()) - margin, float(v.max()) + margin
        for x in seen:
            if len(x):
                low, high = min(low, float(x[:, j].min())), max(high, float(x[:, j].max()))
        out[name] = [low, high]
    return out


def refuse(path: Path | str, problems: list[str]) -> None:
    """Raise the table's problems as one ``DataError``, if there are any."""
    if problems:
        raise DataError(problems_message(path, problems))
