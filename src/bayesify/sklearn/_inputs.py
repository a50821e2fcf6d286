"""Inputs of the estimators: X as a table with named columns, its preprocessing fitted as
``bayesify train --data`` fits a table's (one-hot text columns, inputs standardised with the
training rows' statistics, number ranges recorded), and a seeded validation split."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from bayesify.data.columns import Kind, column_kind
from bayesify.data.preprocessing import RANGE_MARGIN, Preprocessing, describe_row_errors


def _one_hot(col: pd.Series) -> bool:
    """Whether ``bayesify train`` one-hot encodes ``col`` (true/false, text, categories; digits
    stored as text are numbers), by the same column kinds (:func:`column_kind`)."""
    return column_kind(col) in (Kind.BOOL, Kind.CATEGORY)


def as_frame(X: Any) -> pd.DataFrame:
    """A DataFrame with string column names: a DataFrame's own, ``x0 .. x{F-1}`` for arrays."""
    if isinstance(X, pd.DataFrame):
        return X.set_axis([str(c) for c in X.columns], axis=1)
    arr = np.asarray(X)
    return pd.DataFrame(arr, columns=[f"x{j}" for j in range(arr.shape[1])])


def fit_preprocessing(
    frame: pd.DataFrame, train: np.ndarray, y_train: np.ndarray | None
) -> Preprocessing:
    """The preprocessing of ``frame``'s columns fitted on the rows ``train [N]`` (bool):
    text, category and true/false columns one-hot (categories from every row), numbers
    standardised (a constant column keeps scale 1); ``y_train``: regression targets,
    standardised the same way (None: classification)."""
    features = list(frame.columns)
    categories = {
        f: sorted(frame[f].dropna().astype(str).unique().tolist())
        for f in features
        if _one_hot(frame[f])
    }
    bare = Preprocessing(features=features, categories=categories)
    x, bad = bare.encode(frame)
    if bad:
        raise ValueError(describe_row_errors(bad))
    x_tr = x[train]
    onehot = np.array(["=" in n and n.split("=", 1)[0] in categories for n in bare.encoded_names])
    x_mean = np.where(onehot, 0.0, x_tr.mean(0))
    x_std = x_tr.std(0)
    x_std = np.where(onehot | ~(x_std > 0), 1.0, x_std)
    y_mean = y_std = None
    if y_train is not None:
        y_mean, y_std = float(y_train.mean()), float(y_train.std()) or 1.0
    return Preprocessing(
        features=features,
        categories=categories,
        input_shape=[x.shape[1]],
        x_mean=x_mean.tolist(),
        x_std=x_std.tolist(),
        y_mean=y_mean,
        y_std=y_std,
        bounds=_bounds(bare, x_tr),
    )


def _bounds(prep: Preprocessing, x_train: np.ndarray) -> dict[str, list[float]]:
    """What a table bundle records: each number feature's training extremes widened by
    ``RANGE_MARGIN`` standard deviations (a row far outside is refused, not extrapolated;
    a column constant in training: its magnitude, at least 1, stands in for the deviation)."""
    out: dict[str, list[float]] = {}
    for j, name in enumerate(prep.encoded_names):
        if name not in prep.categories and name in (prep.features or []):
            v = x_train[:, j]
            spread = float(v.std()) or max(1.0, float(np.abs(v).max()))  # a constant column
            margin = RANGE_MARGIN * spread
            out[name] = [float(v.min()) - margin, float(v.max()) + margin]
    return out


def validation_rows(
    n: int, fraction: float, seed: int, labels: np.ndarray | None = None
) -> np.ndarray:
    """A bool mask ``[n]`` of a seeded ``fraction`` of the rows held out for validation
    (stratified by ``labels``; at least one row of each group of two or more, and never all);
    none when ``fraction`` is 0 or fewer than 4 rows."""
    val = np.zeros(n, dtype=bool)
    if fraction <= 0 or n < 4:
        return val
    rng = np.random.default_rng(seed)
    groups = [np.arange(n)] if labels is None else [np.flatnonzero(labels == c)
                                                     for c in np.unique(labels)]  # fmt: skip
    for idx in groups:
        if len(idx) < 2:
            continue
        k = min(max(int(round(fraction * len(idx))), 1), len(idx) - 1)
        val[rng.permutation(idx)[:k]] = True
    return val
