"""Preprocessing carried in bundles: raw user inputs -> network inputs, outputs -> user units.

Stored as plain JSON in a bundle's ``config.json`` under ``"preprocessing"`` (never pickle), so a
loaded bundle predicts in the units of the user's data:

* ``features``: raw feature names in the order the network reads them (tables; ``None`` for
  arrays and images, whose inputs are taken as they come);
* ``categories``: one-hot encoded string columns, ``{name: [category, ...]}`` in column order;
* ``input_shape``: the network's input shape after encoding (``[F]``, ``[1, 28, 28]``);
* ``x_mean`` / ``x_std``: network input = (encoded raw input - x_mean) / x_std, one number per
  encoded column or a single number for every input value (images: pixel scaling);
* ``y_mean`` / ``y_std``: regression, user target = y_mean + y_std * network output;
* ``target``, ``class_names``: the target column and, for classification, the class names in the
  network's output order.

Encoded columns: each numeric feature is one column, each categorical feature one 0/1 column per
category (``name=category``), in ``features`` order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from .errors import DataError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from bayesify.predictive import Predictive

__all__ = ["Preprocessing", "RowErrors"]

#: row index (0-based, within the inputs handed in) -> why the row cannot be used
RowErrors = dict[int, str]


def _floats(v: Any) -> list[float] | float | None:
    if v is None:
        return None
    if isinstance(v, int | float):
        return float(v)
    return [float(a) for a in np.asarray(v, dtype=np.float64).reshape(-1)]


@dataclass(frozen=True)
class Preprocessing:
    """How raw inputs become network inputs, and network outputs user units (JSON-able)."""

    features: list[str] | None = None
    categories: dict[str, list[str]] = field(default_factory=dict)
    input_shape: list[int] | None = None
    x_mean: list[float] | float | None = None
    x_std: list[float] | float | None = None
    y_mean: float | None = None
    y_std: float | None = None
    target: str | None = None
    class_names: list[str] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "x_mean", _floats(self.x_mean))
        object.__setattr__(self, "x_std", _floats(self.x_std))
        if (self.x_mean is None) != (self.x_std is None):
            raise ValueError("preprocessing: give both x_mean and x_std, or neither")
        if self.x_std is not None and min(np.atleast_1d(self.x_std)) <= 0:
            raise ValueError("preprocessing: x_std must be > 0")
        if (self.y_mean is None) != (self.y_std is None):
            raise ValueError("preprocessing: give both y_mean and y_std, or neither")
        if self.y_std is not None and not (math.isfinite(self.y_std) and self.y_std > 0):
            raise ValueError(f"preprocessing: y_std must be finite and > 0, got {self.y_std}")
        if self.features is not None:
            unknown = set(self.categories) - set(self.features)
            if unknown:
                raise ValueError(
                    f"preprocessing: categorical columns {sorted(unknown)} not in features"
                )
            width = len(self.encoded_names)
            if isinstance(self.x_mean, list) and len(self.x_mean) != width:
                raise ValueError(
                    f"preprocessing: {len(self.x_mean)} scaling values for {width} encoded columns"
                )

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        return {
            "features": self.features,
            "categories": self.categories,
            "input_shape": self.input_shape,
            "x_mean": self.x_mean,
            "x_std": self.x_std,
            "y_mean": self.y_mean,
            "y_std": self.y_std,
            "target": self.target,
            "class_names": self.class_names,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Preprocessing:
        known = set(cls.__dataclass_fields__)
        unknown = set(d) - known
        if unknown:
            raise ValueError(
                f"unknown preprocessing field(s) {sorted(unknown)}; valid: {sorted(known)}"
            )
        return cls(**d)

    # ------------------------------------------------------------------ columns
    @property
    def encoded_names(self) -> list[str]:
        """Names of the network's input columns (tables): ``name`` or ``name=category``."""
        if self.features is None:
            return []
        out: list[str] = []
        for f in self.features:
            cats = self.categories.get(f)
            out.extend([f"{f}={c}" for c in cats] if cats is not None else [f])
        return out

    def encode(self, frame: pd.DataFrame, first_row: int = 0) -> tuple[np.ndarray, RowErrors]:
        """Raw table rows -> encoded, unscaled float64 ``[N, F_enc]`` and the rows that cannot be
        used (``{row: reason}``, rows numbered from ``first_row``; their values are zeros).

        Missing feature columns raise a ``DataError``; extra columns are ignored.
        """
        import pandas as pd

        if self.features is None:
            raise ValueError("this preprocessing has no feature names; pass an array")
        missing = [f for f in self.features if f not in frame.columns]
        if missing:
            raise DataError(f"input has no column(s) {missing}; the model reads {self.features}")
        n = len(frame)
        parts: list[np.ndarray] = []
        bad: RowErrors = {}

        def flag(mask: np.ndarray, why: str) -> None:
            for i in np.flatnonzero(mask):
                bad.setdefault(first_row + int(i), why)

        for f in self.features:
            col = frame[f]
            cats = self.categories.get(f)
            if cats is None:
                values = pd.to_numeric(col, errors="coerce").to_numpy(np.float64, na_value=np.nan)
                nonfinite = ~np.isfinite(values)
                if nonfinite.any():
                    missing_v = col.isna().to_numpy()
                    flag(nonfinite & missing_v, f"column {f!r}: missing value")
                    flag(nonfinite & ~missing_v, f"column {f!r}: not a finite number")
                    values = np.where(nonfinite, 0.0, values)
                parts.append(values[:, None])
            else:
                codes = pd.Index(cats).get_indexer(col.astype("string"))
                unknown = codes < 0
                if unknown.any():
                    for i in np.flatnonzero(unknown):
                        v = col.iloc[int(i)]
                        why = (
                            f"column {f!r}: missing value"
                            if pd.isna(v)
                            else f"column {f!r}: unknown category {v!r} (known: {cats})"
                        )
                        bad.setdefault(first_row + int(i), why)
                onehot = np.zeros((n, len(cats)), dtype=np.float64)
                ok = np.flatnonzero(~unknown)
                onehot[ok, codes[ok]] = 1.0
                parts.append(onehot)
        return np.concatenate(parts, axis=1) if parts else np.zeros((n, 0)), bad

    # ------------------------------------------------------------------ inputs
    def rows_to_array(self, inputs: Any, first_row: int = 0) -> tuple[np.ndarray, RowErrors]:
        """Raw inputs (DataFrame, list of ``{feature: value}`` dicts, list of rows, numpy array
        or tensor) -> encoded, unscaled float64 array ``[N, ...]`` and the unusable rows."""
        if self.features is not None:
            return self.encode(self.as_frame(inputs), first_row)
        arr = _to_numpy(inputs)
        if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
            try:
                arr = arr.astype(np.float64)
            except (TypeError, ValueError):
                raise DataError("inputs must be numbers") from None
        arr = arr.astype(np.float64, copy=False)
        if arr.ndim >= 1 and self.input_shape is not None:
            shape = tuple(self.input_shape)
            if arr.shape[1:] != shape and arr.ndim == 2 and arr.shape[1] == math.prod(shape):
                arr = arr.reshape(len(arr), *shape)  # flat image rows from a table
            if arr.shape[1:] != shape:
                raise DataError(
                    f"inputs must have shape [N, {', '.join(map(str, shape))}], "
                    f"got {list(arr.shape)}"
                )
        bad: RowErrors = {}
        if arr.ndim >= 1 and len(arr):
            nonfinite = ~np.isfinite(arr.reshape(len(arr), -1)).all(axis=1)
            for i in np.flatnonzero(nonfinite):
                bad[first_row + int(i)] = "missing or non-finite value"
            if nonfinite.any():
                arr = np.where(np.isfinite(arr), arr, 0.0)
        return arr, bad

    def as_frame(self, inputs: Any) -> pd.DataFrame:
        """Table inputs as a DataFrame with the feature columns (rows as lists are in
        ``features`` order)."""
        import pandas as pd

        if isinstance(inputs, pd.DataFrame):
            return inputs
        if isinstance(inputs, dict):
            raise DataError("inputs are a list of rows, not one dict; wrap the row in a list")
        rows = list(inputs.tolist() if isinstance(inputs, np.ndarray | Tensor) else inputs)
        if rows and all(isinstance(r, dict) for r in rows):
            return pd.DataFrame.from_records(rows)
        assert self.features is not None
        width = len(self.features)
        for i, r in enumerate(rows):
            if isinstance(r, dict) or not isinstance(r, Sequence) or isinstance(r, str):
                raise DataError(
                    f"row {i}: expected a list of {width} values or a dict of "
                    f"features, got {type(r).__name__}"
                )
            if len(r) != width:
                raise DataError(
                    f"row {i} has {len(r)} values; the model reads {width} features {self.features}"
                )
        return pd.DataFrame(rows, columns=self.features)

    def scale(self, x: Tensor) -> Tensor:
        """Encoded raw inputs ``[N, ...]`` -> network inputs (x - x_mean) / x_std."""
        if self.x_mean is None:
            return x
        mean = torch.as_tensor(self.x_mean, dtype=x.dtype, device=x.device)
        std = torch.as_tensor(self.x_std, dtype=x.dtype, device=x.device)
        if mean.dim() == 1 and x.dim() > 2:  # per-channel image scaling
            mean = mean.reshape(-1, *([1] * (x.dim() - 2)))
            std = std.reshape(-1, *([1] * (x.dim() - 2)))
        return (x - mean) / std

    def inputs(self, x: Any, dtype: torch.dtype = torch.float32) -> Tensor:
        """Raw inputs -> network inputs; a row that cannot be used is a ``DataError`` naming it."""
        if isinstance(x, Tensor) and self.features is not None and not self.categories:
            return self.scale(x.to(dtype))  # numeric table already in feature order
        arr, bad = self.rows_to_array(x)
        if bad:
            first = min(bad)
            more = f" (and {len(bad) - 1} more row(s))" if len(bad) > 1 else ""
            raise DataError(f"row {first}: {bad[first]}{more}")
        return self.scale(torch.as_tensor(arr, dtype=dtype))

    # ------------------------------------------------------------------ outputs
    def outputs(self, pred: Predictive) -> Predictive:
        """A regression predictive in network units -> user target units (affine map of the
        samples; noise variance times y_std²). Classification is returned as it is."""
        if self.y_mean is None or pred.task.value != "regression":
            return pred
        return pred.affine(self.y_mean, self.y_std)


def _to_numpy(x: Any) -> np.ndarray:
    if isinstance(x, Tensor):
        return x.detach().cpu().numpy()
    try:
        import pandas as pd

        if isinstance(x, pd.DataFrame):
            return x.to_numpy()
    except ImportError:  # pragma: no cover
        pass
    return np.asarray(x)
