"""Training jobs on the user's own table (CSV, Parquet, ``.npz``): checks, task, split, scaling.

The columns are checked before any training (missing values, non-numeric values, constant
columns: every problem of the table in one line, naming the columns and rows); columns that
look like row ids (:func:`id_like`) are left out of the features with a note; string feature
columns are one-hot encoded with their categories kept in the bundle's preprocessing; inputs
(and regression targets) are standardised with statistics of the training rows only; the
bundle records the class labels' type and the range of values each number feature accepts
(``Preprocessing.bounds``).
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from bayesify.app.jobs import Job, default_dropout, hidden_sizes
from bayesify.data.errors import DataError
from bayesify.data.preprocessing import (
    FLOAT32_MAX,
    RANGE_MARGIN,
    Preprocessing,
    describe_row_errors,
)
from bayesify.data.tables import read_table
from bayesify.methods import get_method, resolve_method_names
from bayesify.models import mlp
from bayesify.options import shown
from bayesify.predictive import Task
from bayesify.seeding import seeded

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: an integer target with at most this many distinct values is taken as class labels
MAX_AUTO_CLASSES = 20
#: a string feature column with more distinct values than this is refused, not one-hot encoded
MAX_CATEGORIES = 50
VAL_FRACTION = 0.2
#: name parts that mark a row id (``house_id``, ``sample id``, ``Index``, ``rowKey``, ...)
ID_WORDS = {"id", "ids", "key", "index", "idx", "uuid", "guid", "pk", "rowid", "identifier"}


class TaskChoice(StrEnum):
    """``--task``: what the target is."""

    AUTO = "auto"
    REGRESSION = "regression"
    CLASSIFICATION = "classification"


def _rows(mask: np.ndarray) -> str:
    idx = np.flatnonzero(mask)
    first = ", ".join(str(i) for i in idx[:3])
    return f"{len(idx)} row(s) (first: row {first})"


def _is_text(col: pd.Series) -> bool:
    import pandas as pd

    return bool(
        pd.api.types.is_object_dtype(col)
        or pd.api.types.is_string_dtype(col)
        or isinstance(col.dtype, pd.CategoricalDtype)
        or pd.api.types.is_bool_dtype(col)
    )


def decide_task(y: pd.Series, name: str, task: TaskChoice | str) -> tuple[Task, str]:
    """The task for target column ``y`` and a sentence saying why."""
    try:
        task = TaskChoice(task)
    except ValueError:
        valid = ", ".join(t.value for t in TaskChoice)
        raise ValueError(f"unknown --task {task!r}; valid: {valid}") from None
    n_distinct = int(y.nunique())
    if task is not TaskChoice.AUTO:
        return Task(task.value), f"target {name!r}: {task.value} (as asked)"
    if _is_text(y):
        return (
            Task.CLASSIFICATION,
            f"target {name!r} has {n_distinct} string values → classification",
        )
    values = y.to_numpy(np.float64)
    whole = np.all(values == np.round(values))
    if whole and n_distinct <= MAX_AUTO_CLASSES:
        return (
            Task.CLASSIFICATION,
            f"target {name!r} has {n_distinct} whole-number values (at most "
            f"{MAX_AUTO_CLASSES}) → classification; pass --task regression to treat it as a number",
        )
    return (
        Task.REGRESSION,
        f"target {name!r} has {n_distinct} distinct numeric values → regression",
    )


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
    if _is_text(col):
        return "a different text in every row and an id-like name" if named else None
    values = col.to_numpy(np.float64)
    if not np.all(values == np.round(values)):
        return None
    if named:
        return "a different whole number in every row and an id-like name"
    if values.max() - values.min() == n - 1:
        return "the consecutive whole numbers of a row index"
    return None


def label_type(y: pd.Series) -> str:
    """The type class labels are handed back in: ``"int"`` for whole numbers (3.0 included),
    ``"float"``, ``"bool"`` or ``"str"``."""
    import pandas as pd

    if pd.api.types.is_bool_dtype(y):
        return "bool"
    if _is_text(y):
        return "str"
    values = y.to_numpy(np.float64)
    return "int" if np.all(values == np.round(values)) else "float"


def label_strings(y: pd.Series) -> list[str]:
    """Class labels as text: whole numbers without a decimal point (3.0 -> "3")."""
    if not _is_text(y):
        values = y.to_numpy(np.float64)
        if np.all(values == np.round(values)):
            return [str(v) for v in values.astype(np.int64)]
    return y.astype(str).tolist()


def _sorted_classes(labels: list[str], y: pd.Series) -> list[str]:
    """Class names in output order: numeric labels by value, text labels alphabetically."""
    uniq = set(labels)
    if not _is_text(y):
        return sorted(uniq, key=float)
    return sorted(uniq)


def check_columns(
    frame: pd.DataFrame, features: list[str], path: Path, problems: list[str] | None = None
) -> dict[str, list[str]]:
    """Checks the feature columns; returns the categorical columns (strings) with their sorted
    categories. Every problem found is appended to ``problems`` (one sentence each); without
    ``problems`` they raise one ``DataError`` listing them all."""
    import pandas as pd

    found: list[str] = [] if problems is None else problems
    start = len(found)
    categories: dict[str, list[str]] = {}
    for f in features:
        col = frame[f]
        missing = col.isna().to_numpy()
        if missing.any():
            found.append(
                f"column {f!r} has missing values in {_rows(missing)}; "
                "fill or drop them, or leave the column out with --exclude"
            )
            continue
        if _is_text(col):
            numbers = pd.to_numeric(col, errors="coerce")
            bad = numbers.isna().to_numpy()
            if bad.mean() < 0.5:  # mostly numbers: the others are typos, not categories
                value = col.iloc[int(np.flatnonzero(bad)[0])]
                found.append(
                    f"column {f!r} has non-numeric values in {_rows(bad)} "
                    f"(e.g. {shown(value)}) among numbers"
                )
                continue
            cats = sorted(col.astype(str).unique().tolist())
            if len(cats) > MAX_CATEGORIES:
                found.append(
                    f"column {f!r} is text with {len(cats)} distinct values "
                    f"(more than {MAX_CATEGORIES} to one-hot encode); leave it out "
                    "with --exclude"
                )
            elif len(cats) == 1:
                found.append(
                    f"column {f!r} is constant ({cats[0]!r} in all "
                    f"{len(col)} rows); leave it out with --exclude"
                )
            else:
                categories[f] = cats
        elif (big := np.abs(col.to_numpy(np.float64)) > FLOAT32_MAX).any():
            found.append(f"column {f!r} has numbers beyond the float32 range in {_rows(big)}")
        elif col.nunique() == 1:
            found.append(
                f"column {f!r} is constant ({shown(col.iloc[0])} in all "
                f"{len(col)} rows); leave it out with --exclude"
            )
    if problems is None and len(found) > start:
        raise DataError(problems_message(path, found))
    return categories


def problems_message(path: Path | str, problems: list[str]) -> str:
    """All of a table's problems in one line: ``t.csv: <problem>`` or
    ``t.csv: 3 problems: (1) ...; (2) ...; (3) ...``."""
    if len(problems) == 1:
        return f"{path}: {problems[0]}"
    listed = "; ".join(f"({i}) {p}" for i, p in enumerate(problems, 1))
    return f"{path}: {len(problems)} problems: {listed}"


def number_bounds(prep: Preprocessing, x: np.ndarray) -> dict[str, list[float]]:
    """``{feature: [low, high]}`` for the number features of the encoded training rows
    ``x [N, F_enc]``: their extremes widened by ``RANGE_MARGIN`` standard deviations."""
    out: dict[str, list[float]] = {}
    for j, name in enumerate(prep.encoded_names):
        if name in prep.categories or name not in (prep.features or []):
            continue
        v = x[:, j]
        margin = RANGE_MARGIN * float(v.std())
        out[name] = [float(v.min()) - margin, float(v.max()) + margin]
    return out


def choose_features(
    frame: pd.DataFrame,
    path: Path,
    target: str,
    features: str | None,
    exclude: str | None,
    notes: list[str],
) -> list[str]:
    """The feature columns: ``features`` (comma-separated) as given, else every column but the
    target, the ``exclude`` ones and the ones that look like row ids (a note says which)."""

    def names(text: str | None) -> list[str]:
        return [f.strip() for f in (text or "").split(",") if f.strip()]

    asked, dropped = names(features), names(exclude)
    unknown = [f for f in [*asked, *dropped] if f not in frame.columns]
    if unknown:
        raise DataError(f"{path}: no column(s) {unknown}; columns: {list(frame.columns)}")
    if target in asked:
        raise ValueError(f"--features lists the target {target!r}")
    if asked:
        return [f for f in asked if f not in dropped]
    feats = [c for c in frame.columns if c != target and c not in dropped]
    kept = []
    for c in feats:
        why = id_like(frame[c], c)
        if why is None:
            kept.append(c)
        else:
            notes.append(f"column {c!r} looks like a row id ({why}): left out of the features; "
                         "to use it, list it with the other features in --features")  # fmt: skip
    return kept


def _split(n: int, labels: np.ndarray | None, fraction: float, seed: int) -> np.ndarray:
    """A boolean validation mask: a seeded ``fraction`` of rows (per class when ``labels``)."""
    rng = np.random.default_rng(seed)
    val = np.zeros(n, dtype=bool)
    groups = (
        [np.arange(n)]
        if labels is None
        else [np.flatnonzero(labels == c) for c in np.unique(labels)]
    )
    for idx in groups:
        k = int(round(fraction * len(idx)))
        if len(idx) >= 2:
            k = min(max(k, 1), len(idx) - 1)
        val[rng.permutation(idx)[:k]] = True
    return val


def build_table_training(
    method: str,
    path: str | Path,
    target: str | None,
    *,
    features: str | None = None,
    exclude: str | None = None,
    val: str | Path | None = None,
    val_fraction: float = VAL_FRACTION,
    task: TaskChoice | str = TaskChoice.AUTO,
    hidden: str = "50,50",
    norm: str = "batch",
    dropout: float | None = None,
    seed: int = 0,
    options: dict[str, Any] | None = None,
) -> tuple[Job, list[str]]:
    """A fresh method on the table at ``path`` and notes for the user (task decided, columns
    left out as row ids, split). ``features``/``exclude``: comma-separated column names.

    The job's "test" set is the validation rows (the table has no test split); its
    preprocessing maps raw rows to network inputs and outputs back to target units.
    """
    path = Path(path)
    cls = get_method(method)
    options = resolve_method_names(cls.Config, options or {})  # e.g. a TTA's member method
    if not target:
        raise ValueError("--target COLUMN is required when --data is a file")
    if not 0 < val_fraction < 1:
        raise ValueError(f"--val-fraction must be in (0, 1), got {val_fraction}")
    frame = read_table(path)
    if target not in frame.columns:
        raise DataError(f"{path}: no target column {target!r}; columns: {list(frame.columns)}")
    id_notes: list[str] = []
    feats = choose_features(frame, path, target, features, exclude, id_notes)
    if not feats:
        raise DataError(f"{path}: no feature columns besides the target {target!r}")
    problems: list[str] = []
    y_col = frame[target]
    missing = y_col.isna().to_numpy()
    if missing.any():
        problems.append(f"target {target!r} has missing values in {_rows(missing)}")
        kind, why = Task.REGRESSION, ""
    else:
        kind, why = decide_task(y_col, target, task)
    if kind is Task.REGRESSION and not missing.any():
        import pandas as pd

        bad_y = pd.to_numeric(y_col, errors="coerce").isna().to_numpy()
        if bad_y.any():
            problems.append(f"target {target!r} has non-numeric values in {_rows(bad_y)}; "
                            "pass --task classification for labels")  # fmt: skip
    categories = check_columns(frame, feats, path, problems)
    if problems:
        raise DataError(problems_message(path, problems))
    prep = Preprocessing(features=feats, categories=categories, target=target)
    x_all, bad = prep.encode(frame)
    if bad:  # numbers beyond float32
        raise DataError(f"{path}: {describe_row_errors(bad)}")
    class_names: list[str] | None = None
    if kind is Task.CLASSIFICATION:
        labels = label_strings(y_col)
        class_names = _sorted_classes(labels, y_col)
        if len(class_names) < 2:
            raise DataError(f"{path}: target {target!r} has one class; nothing to classify")
        code = {c: i for i, c in enumerate(class_names)}
        y_all = np.asarray([code[v] for v in labels], dtype=np.int64)  # [N] label codes
    else:
        import pandas as pd

        y_all = pd.to_numeric(y_col, errors="coerce").to_numpy(np.float64)
    notes = [why, *id_notes]
    if val is not None:
        vframe = read_table(val)
        x_val, vbad = prep.encode(vframe)
        if vbad:
            raise DataError(f"{val}: {describe_row_errors(vbad)}")
        if target not in vframe.columns:
            raise DataError(f"{val}: no target column {target!r}")
        if class_names is not None:
            vlabels = label_strings(vframe[target])
            unknown = sorted(set(vlabels) - set(class_names))
            if unknown:
                raise DataError(
                    f"{val}: target {target!r} has classes {unknown[:5]} that the "
                    "training table does not have"
                )
            y_val = np.asarray([class_names.index(v) for v in vlabels], dtype=np.int64)
        else:
            y_val = vframe[target].to_numpy(np.float64)
        x_tr, y_tr = x_all, y_all
        notes.append(
            f"{len(x_tr)} training rows from {path}, {len(x_val)} validation rows from {val}"
        )
    else:
        mask = _split(len(x_all), y_all if class_names else None, val_fraction, seed)
        x_tr, y_tr, x_val, y_val = x_all[~mask], y_all[~mask], x_all[mask], y_all[mask]
        strat = ", stratified by class" if class_names else ""
        notes.append(
            f"{len(x_tr)} training rows, {len(x_val)} validation rows (seeded "
            f"{val_fraction:.0%} split, seed {seed}{strat})"
        )
    # scaling from the training rows; one-hot columns stay 0/1
    onehot = np.array(["=" in n and n.split("=", 1)[0] in categories for n in prep.encoded_names])
    x_mean = np.where(onehot, 0.0, x_tr.mean(0))
    x_std = x_tr.std(0)
    x_std = np.where(onehot | (x_std == 0), 1.0, x_std)
    y_mean = y_std = None
    if kind is Task.REGRESSION:
        y_mean, y_std = float(y_tr.mean()), float(y_tr.std()) or 1.0
    bounds = number_bounds(prep, x_tr)
    prep = Preprocessing(
        features=feats,
        categories=categories,
        input_shape=[x_tr.shape[1]],
        x_mean=x_mean.tolist(),
        x_std=x_std.tolist(),
        y_mean=y_mean,
        y_std=y_std,
        target=target,
        class_names=class_names,
        label_type=label_type(y_col) if class_names else None,
        bounds=bounds,
    )

    def tensors(x: np.ndarray, y: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        xt = prep.scale(torch.as_tensor(x, dtype=torch.float32))
        if kind is Task.REGRESSION:
            return xt, torch.as_tensor((y - y_mean) / y_std, dtype=torch.float32)
        return xt, torch.as_tensor(y, dtype=torch.int64)

    if dropout is None:
        dropout = default_dropout(cls, options)
    out = 1 if kind is Task.REGRESSION else len(class_names or [])
    with seeded(seed):  # the network's initial weights
        net = mlp(x_tr.shape[1], out, hidden_sizes(hidden), norm=norm, dropout=dropout)
        meth = cls(net, task=kind.value, **(options or {}))
    val_t = tensors(x_val, y_val)
    meta = {"table": str(path), "target": target, "task_reason": why}
    if kind is Task.REGRESSION:  # the server flags feedback far outside it (serve/monitor.py)
        meta["target_range"] = [float(y_tr.min()), float(y_tr.max())]
    job = Job(meth, val_t, tensors(x_tr, y_tr), val_t, y_mean or 0.0, y_std or 1.0, meta, prep)
    return job, notes
