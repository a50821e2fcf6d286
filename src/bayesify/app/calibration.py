"""Fitting a bundle's deferral policy on its validation data (``bayesify calibrate``).

For bundles trained on a built-in dataset the validation split is rebuilt from the bundle's
metadata exactly as training made it (same rows, same seed), and the policy is checked on the
test split. Any bundle can instead be calibrated on a table file of the user's rows (CSV,
Parquet, ``.npz``; ``data=``) holding the features in raw units and the target column, read
through the one table reader and the bundle's own preprocessing (:class:`~bayesify.predictor.
Predictor`), and checked on a second table (``test=``). Predictives are in the units the
predictor reports (regression: original target units), so the stored threshold reads the same
as the served ``defer_score``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from bayesify.app.table_jobs import _rows, label_strings
from bayesify.data import UCI_DATASETS, load_fashion_mnist, load_uci
from bayesify.data.errors import DataError
from bayesify.data.tables import read_table
from bayesify.methods import Method
from bayesify.posthoc.deferral import DeferralPolicy
from bayesify.predictive import Predictive, Task
from bayesify.predictor import Predictor


@dataclass
class Split:
    """Inputs in network units, targets in original units, and the map to original units."""

    x: Tensor
    y: Tensor
    loc: float = 0.0
    scale: float = 1.0


def bundle_splits(method: Method) -> tuple[Split, Split]:
    """``(validation, test)`` of the built-in dataset a bundle was trained on."""
    meta = method.metadata
    data = meta.get("data")
    if data is None:
        raise ValueError("this bundle records no built-in dataset; pass --data with a table file")
    if data in UCI_DATASETS:
        s = load_uci(data, meta.get("split", 0), protocol=meta.get("protocol", "teye"))
        loc, scale = s.scaler.y_mean, s.scaler.y_std
        return (Split(s.x_val, loc + scale * s.y_val.double(), loc, scale),
                Split(s.x_test, loc + scale * s.y_test.double(), loc, scale))  # fmt: skip
    if data != "fashion-mnist":
        raise ValueError(f"unknown dataset {data!r} in the bundle's metadata")
    train = load_fashion_mnist("train")
    limit = meta.get("limit")
    if limit is not None:
        train = train.subset(limit, seed=meta.get("seed", 0))
    n_val = max(1, len(train) // 10)  # the rows build_training held out for validation
    test = load_fashion_mnist("test")
    return Split(train.x[:n_val], train.y[:n_val]), Split(test.x, test.y)


def predictive(method: Method, split: Split, samples: int, seed: int) -> Predictive:
    """The predictive on ``split`` (network-unit inputs), in original target units."""
    pred = method.to_predictive(method.sample(split.x, samples, seed=seed))
    if method.config.task is Task.REGRESSION and (split.loc, split.scale) != (0.0, 1.0):
        pred = pred.affine(split.loc, split.scale)
    return pred


@dataclass
class TableRows:
    """Rows of a table file for a bundle: inputs in raw units (a DataFrame for bundles with
    feature names, else an array ``[N, F]`` of the columns besides the target) and targets
    ``[N]`` (original units; classification: indices in the bundle's class order)."""

    path: Path
    inputs: Any
    y: Tensor

    def head(self, n: int | None) -> TableRows:
        if n is None:
            return self
        return TableRows(self.path, self.inputs[:n], self.y[:n])


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
    unknown = sorted(set(labels) - set(names), key=str)
    numbered = not any(c.isdigit() for c in names)  # indices cannot be mistaken for names
    if unknown and numbered and all(v.isdigit() and int(v) < len(names) for v in labels):
        return torch.as_tensor([int(v) for v in labels])  # class indices, in names' order
    if unknown:
        raise DataError(f"{path}: target {target!r} has classes {unknown[:5]} the model does "
                        f"not know; its classes: {names}")  # fmt: skip
    index = {c: i for i, c in enumerate(names)}
    return torch.as_tensor([index[v] for v in labels])


def table_rows(predictor: Predictor, path: str | Path, target: str | None = None) -> TableRows:
    """Read a table file of rows for ``predictor``'s bundle: its feature columns in raw units
    and the target column (``target``, default the one the bundle was trained on). Missing
    columns, unusable values and unknown classes are one-line ``DataError``s naming the file."""
    import pandas as pd

    path = Path(path)
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
    return TableRows(path, inputs, _table_targets(predictor, frame[target], path, target))


def table_predictive(predictor: Predictor, rows: TableRows, samples: int, seed: int) -> Predictive:
    """The predictive of a table's rows, in the units the predictor reports; a row that cannot
    be used is a ``DataError`` naming the file and the row (0-based, header excluded)."""
    try:
        pred = predictor.predictive(rows.inputs, samples, seed=seed)
    except DataError as e:
        raise DataError(f"{rows.path}: {e}") from None
    n_classes = pred.mean.shape[-1] if pred.task is Task.CLASSIFICATION else None
    if n_classes is not None and int(rows.y.max()) >= n_classes:
        raise DataError(f"{rows.path}: class index {int(rows.y.max())} is out of range for "
                        f"{n_classes} classes")  # fmt: skip
    return pred


@dataclass
class CalibrationResult:
    policy: DeferralPolicy
    test: dict[str, Any] | None  # the policy's figures on held-out test rows


def calibrate_bundle(
    method: Method,
    *,
    score: str,
    coverage: float | None = None,
    error: float | None = None,
    error_metric: str | None = None,
    samples: int = 32,
    seed: int = 0,
    test_limit: int | None = None,
    data: str | Path | None = None,
    target: str | None = None,
    test: str | Path | None = None,
) -> CalibrationResult:
    """Fit a deferral policy, store it in ``method.metadata`` and score it on the first
    ``test_limit`` held-out rows (0: no test check).

    The policy is fitted on ``data`` (a table file with the ``target`` column; see
    :func:`table_rows`) or, without it, on the validation split of the built-in dataset the
    bundle was trained on. Held-out figures come from the ``test`` table, else the built-in
    test split (a table-calibrated bundle without ``test`` gets none).
    """
    predictor = Predictor(method)
    test_rows = table_rows(predictor, test, target) if test is not None else None
    if data is not None:
        rows = table_rows(predictor, data, target)
        pred, y = table_predictive(predictor, rows, samples, seed), rows.y
        split = None
    else:
        val, split = bundle_splits(method)
        pred, y = predictive(method, val, samples, seed), val.y
    policy = DeferralPolicy.fit(pred, y, score=score, target_coverage=coverage,
                                target_error=error, error_metric=error_metric)  # fmt: skip
    policy.validation["samples"] = samples
    where = f"{method.metadata.get('data')} validation split"
    policy.validation["data"] = str(data) if data is not None else where
    policy.store(method.metadata)
    figures = None
    if test_limit != 0:
        if test_rows is not None:
            held_rows = test_rows.head(test_limit)
            figures = policy.evaluate(table_predictive(predictor, held_rows, samples, seed + 1),
                                      held_rows.y)  # fmt: skip
        elif split is not None:
            if test_limit is not None:
                split = Split(split.x[:test_limit], split.y[:test_limit], split.loc, split.scale)
            figures = policy.evaluate(predictive(method, split, samples, seed + 1), split.y)
    return CalibrationResult(policy, figures)


def training_table_note(metadata: dict[str, Any], data: str | Path | None) -> str | None:
    """A warning when ``data`` is the table the bundle was trained on (its rows trained or
    stopped the network, so a policy fitted on them trusts the model too much)."""
    table = metadata.get("table")
    if data is None or table is None:
        return None
    try:
        same = Path(table).resolve() == Path(data).resolve()
    except OSError:  # pragma: no cover - unresolvable paths are simply not the same
        same = False
    if not same:
        return None
    return (f"{data} is the table this bundle was trained on: its rows trained the network or "
            "stopped its training, so the policy will accept too much; calibrate on rows the "
            "model has not seen")  # fmt: skip


def dataset_seed_note(metadata: dict[str, Any]) -> str | None:
    """A warning when a limited Fashion-MNIST bundle does not record its subset seed."""
    if metadata.get("data") == "fashion-mnist" and metadata.get("limit") and "seed" not in metadata:
        return (
            "the bundle does not record the seed of its training subset; assuming 0 "
            "(validation rows may overlap training rows if it was trained with another)"
        )
    return None
