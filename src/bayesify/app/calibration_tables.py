"""Table files of rows to calibrate a bundle on (``bayesify calibrate --data FILE --test FILE``).

A table holds the bundle's feature columns in raw units and a target column; it is read through
the one table reader and the bundle's own preprocessing (:class:`~bayesify.predictor.Predictor`).
With ``on_error="skip"`` rows whose features or target cannot be used are left out and reported
by row number (0-based, header excluded), as ``bayesify predict --on-error skip`` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from bayesify.app.table_jobs import _rows, label_strings
from bayesify.data.errors import DataError
from bayesify.data.preprocessing import RowErrors, describe_row_errors
from bayesify.data.tables import read_table
from bayesify.options import shown
from bayesify.predictive import Predictive, Task
from bayesify.predictor import OnError, Predictor


@dataclass
class TableRows:
    """Rows of a table file for a bundle: inputs in raw units (a DataFrame for bundles with
    feature names, else an array ``[N, F]`` of the columns besides the target) and targets
    ``[N]`` (original units; classification: indices in the bundle's class order); the rows
    left out (``on_error="skip"``) in ``skipped``."""

    path: Path
    inputs: Any
    y: Tensor
    skipped: RowErrors = field(default_factory=dict)

    def head(self, n: int | None) -> TableRows:
        if n is None:
            return self
        return TableRows(self.path, self.inputs[:n], self.y[:n], self.skipped)


def _table_targets(predictor: Predictor, col: Any, path: Path, target: str) -> Tensor:
    """The target column as a tensor ``[N]``: numbers (regression) or class indices."""
    import pandas as pd

    missing = col.isna().to_numpy()
    if missing.any():
        raise DataError(f"{path}: target {target!r} has missing values in {_rows(missing)}")
    if predictor.task is Task.REGRESSION:
        y = pd.to_numeric(col, errors="coerce")
        bad = y.isna().to_numpy()
        if bad.any():
            value = col.iloc[int(np.flatnonzero(bad)[0])]
            raise DataError(f"{path}: target {target!r} has non-numeric values in {_rows(bad)} "
                            f"(e.g. {value!r}); this bundle is a regression")  # fmt: skip
        return torch.tensor(y.to_numpy(np.float64))
    labels = label_strings(col)
    names = predictor.class_names
    if names is None:  # a bundle without class names reads class indices 0..C-1
        ok = np.array([v.isdigit() for v in labels])
        if not ok.all():
            raise DataError(f"{path}: target {target!r} has values that are not class indices "
                            f"in {_rows(~ok)}; this bundle names no classes")  # fmt: skip
        return torch.as_tensor([int(v) for v in labels])
    if _as_indices(labels, names):
        return torch.as_tensor([int(v) for v in labels])  # class indices, in names' order
    unknown = sorted(set(labels) - set(names), key=str)
    if unknown:
        raise DataError(f"{path}: target {target!r} has classes {unknown[:5]} the model does "
                        f"not know; its classes: {names}")  # fmt: skip
    index = {c: i for i, c in enumerate(names)}
    return torch.as_tensor([index[v] for v in labels])


def _as_indices(labels: list[str], names: list[str]) -> bool:
    """Whether labels are class indices in ``names``' order (names that cannot be mistaken for
    indices, every label a whole number below their count, some label not a name)."""
    numbered = not any(c.isdigit() for c in names)
    unknown = set(labels) - set(names)
    return bool(unknown) and numbered and all(v.isdigit() and int(v) < len(names) for v in labels)


def _target_problems(predictor: Predictor, col: Any, target: str) -> RowErrors:
    """Per row, why its target cannot be used (missing, not a number, an unknown class)."""
    import pandas as pd

    bad: RowErrors = {}
    missing = col.isna().to_numpy()
    for i in np.flatnonzero(missing):
        bad[int(i)] = f"target {target!r}: missing value"
    present = np.flatnonzero(~missing)
    if predictor.task is Task.REGRESSION:
        y = pd.to_numeric(col, errors="coerce").to_numpy()
        for i in present[np.isnan(y[present].astype(np.float64))]:
            bad[int(i)] = f"target {target!r}: {shown(col.iloc[int(i)])} is not a number"
        return bad
    labels = label_strings(col.iloc[present])
    names = predictor.class_names
    if names is not None and _as_indices(labels, names):
        return bad
    for i, v in zip(present, labels, strict=True):
        if names is None and not v.isdigit():
            bad[int(i)] = f"target {target!r}: {v!r} is not a class index"
        elif names is not None and v not in names:
            bad[int(i)] = f"target {target!r}: unknown class {v!r} (known: {names})"
    return bad


def table_rows(
    predictor: Predictor,
    path: str | Path,
    target: str | None = None,
    on_error: OnError | str = OnError.FAIL,
) -> TableRows:
    """Read a table file of rows for ``predictor``'s bundle: its feature columns in raw units
    and the target column (``target``, default the one the bundle was trained on). Missing
    columns are one-line ``DataError``s naming the file; so are unusable values and unknown
    classes, unless ``on_error="skip"`` leaves their rows out (listed in ``skipped``)."""
    import pandas as pd

    path, on_error = Path(path), OnError(on_error)
    prep = predictor.preprocessing
    target = target or (prep.target if prep is not None else None)
    if not target:
        raise ValueError("--target COLUMN is required: the bundle records no target column")
    frame = read_table(path)
    if target not in frame.columns:
        raise DataError(f"{path}: no target column {target!r}; columns: {list(frame.columns)}")
    names = predictor.feature_names
    if names is None:  # a bundle that reads unnamed rows: the other columns, in file order
        inputs: Any = frame.drop(columns=[target])
        shape = predictor.input_shape
        if shape is not None and inputs.shape[1] != int(np.prod(shape)):
            raise DataError(f"{path}: {inputs.shape[1]} columns besides the target {target!r}; "
                            f"the model reads {int(np.prod(shape))} numbers per row "
                            f"(shape {list(shape)})")  # fmt: skip
        text = [c for c in inputs.columns if not pd.api.types.is_numeric_dtype(inputs[c])]
        if text:
            raise DataError(f"{path}: column(s) {text[:5]} are not numbers; this bundle reads "
                            "numeric rows")  # fmt: skip
        inputs = inputs.to_numpy(np.float64, copy=True)
    else:
        if target in names:
            raise ValueError(f"--target {target!r} is one of the model's features {names}")
        missing = [f for f in names if f not in frame.columns]
        if missing:
            raise DataError(f"{path}: no column(s) {missing}; the model reads {names}")
        inputs = frame
    col = frame[target]
    _, bad = predictor.encode(inputs)
    if on_error is OnError.FAIL:
        if bad:
            raise DataError(f"{path}: {describe_row_errors(bad)}; use --on-error skip to leave "
                            "such rows out")  # fmt: skip
        return TableRows(path, inputs, _table_targets(predictor, col, path, target))
    for row, why in _target_problems(predictor, col, target).items():
        bad[row] = f"{bad[row]} and {why}" if row in bad else why
    keep = np.ones(len(frame), dtype=bool)
    keep[list(bad)] = False
    if not keep.any():
        return TableRows(path, inputs[:0], torch.zeros(0), bad)
    kept = inputs[keep] if isinstance(inputs, np.ndarray) else inputs.iloc[keep]
    y = _table_targets(predictor, col.iloc[keep], path, target)
    return TableRows(path, kept, y, bad)


def rows_of(predictor: Predictor, table: str | Path | TableRows | None,
            target: str | None = None) -> TableRows | None:  # fmt: skip
    """``table`` read by :func:`table_rows` (a path), or as given (rows already read, None)."""
    if table is None or isinstance(table, TableRows):
        return table
    return table_rows(predictor, table, target)


def table_predictive(predictor: Predictor, rows: TableRows, samples: int, seed: int) -> Predictive:
    """The predictive of a table's rows, in the units the predictor reports; a row that cannot
    be used is a ``DataError`` naming the file and the row (0-based, header excluded)."""
    try:
        pred = predictor.predictive(rows.inputs, samples, seed=seed)
    except DataError as e:
        raise DataError(f"{rows.path}: {e}") from None
    check_classes(pred, rows.y, rows.path)
    return pred


def check_classes(pred: Predictive, y: Tensor, where: Any) -> None:
    """A one-line ``DataError`` when a class index of ``y`` is beyond the predictive's classes."""
    if pred.task is Task.CLASSIFICATION and int(y.max()) >= pred.mean.shape[-1]:
        raise DataError(f"{where}: class index {int(y.max())} is out of range for "
                        f"{pred.mean.shape[-1]} classes")  # fmt: skip


@dataclass
class CalibrationTables:
    """The tables of one ``calibrate`` run, each read once: ``data`` (validation rows) and
    ``test`` (held-out rows), None where not given."""

    data: TableRows | None = None
    test: TableRows | None = None

    @property
    def skipped(self) -> list[tuple[Path, RowErrors]]:
        """``(file, rows left out)`` of each table that left rows out."""
        return [(t.path, t.skipped) for t in (self.data, self.test) if t is not None and t.skipped]

    def empty(self) -> TableRows | None:
        """The first table of which no row is left."""
        return next((t for t in (self.data, self.test) if t is not None and len(t.y) == 0), None)


def read_tables(
    predictor: Predictor,
    data: str | Path | None,
    test: str | Path | None,
    target: str | None = None,
    on_error: OnError | str = OnError.FAIL,
) -> CalibrationTables:
    """Read ``data`` and ``test`` (table files, or None) for ``predictor``'s bundle."""
    return CalibrationTables(
        table_rows(predictor, data, target, on_error) if data is not None else None,
        table_rows(predictor, test, target, on_error) if test is not None else None,
    )
