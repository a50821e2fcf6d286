"""Training jobs on the user's own table (CSV, Parquet, ``.npz``): checks, task, split, scaling.

The columns are checked before any training by their kind (:mod:`bayesify.app.table_columns`:
every problem of the table in one line, naming the columns and rows); columns that look like
row ids (:func:`id_like`) are left out of the features with a note; true/false and text
feature columns are one-hot encoded with their categories kept in the bundle's preprocessing;
inputs (and regression targets) are standardised with statistics of the training rows only;
the bundle records the class labels' type and the range of values each number feature accepts
(``Preprocessing.bounds``: the training rows' range, widened, and never narrower than the
user's own tables).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from bayesify.app.jobs import Job, default_dropout, hidden_sizes
from bayesify.app.table_columns import (
    _rows,
    check_target_numbers,
    id_like,
    number_bounds,
    plan_columns,
    problems_message,
    refuse,
)
from bayesify.data.columns import Kind, column_kind, describe_kind, numbers
from bayesify.data.errors import DataError
from bayesify.data.preprocessing import Preprocessing, describe_row_errors
from bayesify.data.tables import read_table
from bayesify.methods import get_method, resolve_method_names
from bayesify.models import mlp
from bayesify.predictive import Task
from bayesify.seeding import seeded

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = [
    "TaskChoice",
    "_rows",
    "build_table_training",
    "decide_task",
    "id_like",
    "label_strings",
    "label_type",
    "problems_message",
]

#: an integer target with at most this many distinct values is taken as class labels
MAX_AUTO_CLASSES = 20
VAL_FRACTION = 0.2


class TaskChoice(StrEnum):
    """``--task``: what the target is."""

    AUTO = "auto"
    REGRESSION = "regression"
    CLASSIFICATION = "classification"


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
    """Class labels as text: whole numbers without a decimal point (3.0 and "3.0" -> "3")."""
    numeric_text = _is_text(y) and column_kind(y) is Kind.NUMBER
    if not _is_text(y) or numeric_text:
        values = numbers(y)
        if np.all(values == np.round(values)):
            return [str(v) for v in values.astype(np.int64)]
    return y.astype(str).tolist()


def _sorted_classes(labels: list[str], y: pd.Series) -> list[str]:
    """Class names in output order: numeric labels by value, text labels alphabetically."""
    uniq = set(labels)
    if not _is_text(y):
        return sorted(uniq, key=float)
    return sorted(uniq)


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


def _target(
    col: pd.Series, name: str, task: TaskChoice | str, problems: list[str]
) -> tuple[Task, str, pd.Series | None]:
    """The task, why, and the target column as trained on (digits stored as text read as
    numbers); None for the column when it cannot be used (its problems appended)."""
    import pandas as pd

    missing = col.isna().to_numpy()
    if missing.any():
        problems.append(f"target {name!r} has missing values in {_rows(missing)}")
        return Task.REGRESSION, "", None
    kind = column_kind(col)
    if kind in (Kind.TIME, Kind.OTHER):
        problems.append(f"target {name!r} holds {describe_kind(col, kind)}; a target holds "
                        "numbers (regression) or class labels (classification)")  # fmt: skip
        return Task.REGRESSION, "", None
    if kind is Kind.NUMBER and not pd.api.types.is_numeric_dtype(col.dtype):
        col = pd.to_numeric(col)
    task_kind, why = decide_task(col, name, task)
    if task_kind is Task.REGRESSION:
        y = numbers(col)
        bad = np.isnan(y)
        if bad.any():
            problems.append(f"target {name!r} has non-numeric values in {_rows(bad)}; "
                            "pass --task classification for labels")  # fmt: skip
            return task_kind, why, None
        check_target_numbers(y, name, problems)
    return task_kind, why, col


def _limited(train: np.ndarray, limit: int | None, seed: int) -> np.ndarray:
    """``train [N]`` narrowed to a seeded sample of ``limit`` of its rows (``--limit``)."""
    if limit is None or limit >= train.sum():
        return train
    keep = np.random.default_rng(seed).permutation(np.flatnonzero(train))[:limit]
    out = np.zeros_like(train)
    out[keep] = True
    return out


def _val_targets(vframe: pd.DataFrame, val: str | Path, target: str,
                 class_names: list[str] | None) -> np.ndarray:  # fmt: skip
    """The targets of the ``--val`` table: class codes in ``class_names`` order, or numbers."""
    if target not in vframe.columns:
        raise DataError(f"{val}: no target column {target!r}")
    if class_names is not None:
        vlabels = label_strings(vframe[target])
        unknown = sorted(set(vlabels) - set(class_names))
        if unknown:
            raise DataError(f"{val}: target {target!r} has classes {unknown[:5]} that the "
                            "training table does not have")  # fmt: skip
        return np.asarray([class_names.index(v) for v in vlabels], dtype=np.int64)
    problems: list[str] = []
    y = numbers(vframe[target])
    if np.isnan(y).any():
        problems.append(f"target {target!r} has missing or non-numeric values in "
                        f"{_rows(np.isnan(y))}")  # fmt: skip
    check_target_numbers(y, target, problems)
    refuse(val, problems)
    return y


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
    limit: int | None = None,
    options: dict[str, Any] | None = None,
) -> tuple[Job, list[str]]:
    """A fresh method on the table at ``path`` and notes for the user (task decided, columns
    left out or one-hot encoded, split). ``features``/``exclude``: comma-separated column
    names; ``limit``: train on a seeded sample of this many of the training rows (the
    validation rows stay as they are).

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
    if limit is not None and limit < 1:
        raise ValueError(f"--limit must be >= 1, got {limit}")
    frame = read_table(path)
    if target not in frame.columns:
        raise DataError(f"{path}: no target column {target!r}; columns: {list(frame.columns)}")
    id_notes: list[str] = []
    feats = choose_features(frame, path, target, features, exclude, id_notes)
    if not feats:
        raise DataError(f"{path}: no feature columns besides the target {target!r}")
    problems: list[str] = []
    kind, why, y_col = _target(frame[target], target, task, problems)
    class_names: list[str] | None = None
    y_all = np.zeros(len(frame))
    if y_col is not None and kind is Task.CLASSIFICATION:
        labels = label_strings(y_col)
        class_names = _sorted_classes(labels, y_col)
        if len(class_names) < 2:
            raise DataError(f"{path}: target {target!r} has one class; nothing to classify")
        code = {c: i for i, c in enumerate(class_names)}
        y_all = np.asarray([code[v] for v in labels], dtype=np.int64)  # [N] label codes
    elif y_col is not None:
        y_all = numbers(y_col)
    if val is None:
        mask = _split(len(frame), y_all if class_names else None, val_fraction, seed)
        if class_names and not mask.any():  # one row per class: the split by class keeps all
            raise DataError(f"{path}: no validation rows: each of the {len(class_names)} "
                            f"classes of target {target!r} has one row, so the split by class "
                            "leaves none to validate on; pass a --val table, or --task "
                            "regression if the target is a quantity")  # fmt: skip
    else:
        mask = np.zeros(len(frame), dtype=bool)
    train = _limited(~mask, limit, seed)
    plan = plan_columns(frame, feats, problems, train)
    refuse(path, problems)
    if not plan.features:
        raise DataError(f"{path}: no feature columns left to train on ({'; '.join(plan.notes)})")
    prep = Preprocessing(features=plan.features, categories=plan.categories, target=target)
    x_all, bad = prep.encode(frame)
    if bad:
        raise DataError(f"{path}: {describe_row_errors(bad)}")
    notes = [why, *id_notes, *plan.notes]
    x_tr, y_tr = x_all[train], y_all[train]
    seen = [x_all]
    if val is not None:
        vframe = read_table(val)
        x_val, vbad = prep.encode(vframe)
        if vbad:
            raise DataError(f"{val}: {describe_row_errors(vbad)}")
        y_val = _val_targets(vframe, val, target, class_names)
        seen.append(x_val)
        notes.append(f"{len(x_tr)} training rows from {path}, {len(x_val)} validation rows "
                     f"from {val}")  # fmt: skip
    else:
        x_val, y_val = x_all[mask], y_all[mask]
        strat = ", stratified by class" if class_names else ""
        notes.append(f"{int((~mask).sum())} training rows, {len(x_val)} validation rows "
                     f"(seeded {val_fraction:.0%} split, seed {seed}{strat})")  # fmt: skip
    if len(x_tr) < (~mask).sum():
        notes.append(f"--limit {limit}: trained on a seeded sample of {len(x_tr)} of the "
                     f"{int((~mask).sum())} training rows (seed {seed})")  # fmt: skip
    # scaling from the training rows; one-hot columns stay 0/1
    onehot = np.array(["=" in n and n.split("=", 1)[0] in plan.categories
                       for n in prep.encoded_names])  # fmt: skip
    x_mean = np.where(onehot, 0.0, x_tr.mean(0))
    x_std = x_tr.std(0)
    x_std = np.where(onehot | (x_std == 0), 1.0, x_std)
    y_mean = y_std = None
    if kind is Task.REGRESSION:
        y_mean, y_std = float(y_tr.mean()), float(y_tr.std()) or 1.0
    prep = Preprocessing(
        features=plan.features,
        categories=plan.categories,
        input_shape=[x_tr.shape[1]],
        x_mean=x_mean.tolist(),
        x_std=x_std.tolist(),
        y_mean=y_mean,
        y_std=y_std,
        target=target,
        class_names=class_names,
        label_type=label_type(y_col) if class_names and y_col is not None else None,
        bounds=number_bounds(prep, x_tr, seen),
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
    meta: dict[str, Any] = {"table": str(path), "target": target, "task_reason": why}
    if limit is not None:
        meta["limit"] = limit
    if kind is Task.REGRESSION:  # the server flags feedback far outside it (serve/monitor.py)
        meta["target_range"] = [float(y_tr.min()), float(y_tr.max())]
    job = Job(meth, val_t, tensors(x_tr, y_tr), val_t, y_mean or 0.0, y_std or 1.0, meta, prep)
    return job, notes
