"""Preprocessing carried in bundles: raw user inputs -> network inputs, outputs -> user units.

Stored as plain JSON in a bundle's ``config.json`` under ``"preprocessing"`` (never pickle), so a
loaded bundle predicts in the units of the user's data:

* ``features``: raw feature names in the order the network reads them (tables; ``None`` for
  arrays and images, whose inputs are taken as they come);
* ``categories``: one-hot encoded columns (text, true/false, ``category``), ``{name: [category,
  ...]}`` in column order, each value named as :func:`~bayesify.data.columns.category_text`
  writes it;
* ``input_shape``: the network's input shape after encoding (``[F]``, ``[1, 28, 28]``);
* ``x_mean`` / ``x_std``: network input = (encoded raw input - x_mean) / x_std, one number per
  encoded column or a single number for every input value (images: pixel scaling);
* ``y_mean`` / ``y_std``: regression, user target = y_mean + y_std * network output;
* ``target``, ``class_names``: the target column and, for classification, the class names in the
  network's output order (text);
* ``label_type``: the type the class labels had in the training table (``"int"``, ``"float"``,
  ``"bool"`` or ``"str"``; ``None``, from older bundles, reads as ``"str"``): predicted labels
  are handed back in that type, so ``label == y`` holds for integer classes;
* ``bounds``: ``{feature: [low, high]}`` for number features, the raw values the model accepts:
  the training rows' smallest and largest value widened by :data:`RANGE_MARGIN` training
  standard deviations on each side. A value outside (a sentinel such as ``1e30``, a unit mix-up
  by orders of magnitude), or beyond the float32 range for any bundle, makes its row unusable
  with an error naming the row, the column and the bound, in Python, ``bayesify predict`` and
  the server alike.

Encoded columns: each numeric feature is one column, each categorical feature one 0/1 column per
category (``name=category``), in ``features`` order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from bayesify.options import shown

from .columns import category_text, numbers
from .errors import DataError
from .row_errors import (
    FLOAT32_MAX,
    RANGE_MARGIN,
    RowErrors,
    bound_message,
    describe_row_errors,
    overflow_message,
)

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from bayesify.predictive import Predictive

__all__ = ["FLOAT32_MAX", "RANGE_MARGIN", "Preprocessing", "RowErrors", "describe_row_errors"]

#: class label types a bundle records, and how a class name (text) becomes a label of the type
LABEL_TYPES: dict[str, Callable[[str], Any]] = {
    "int": int,
    "float": float,
    "bool": lambda s: s == "True",
    "str": str,
}


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
    label_type: str | None = None
    bounds: dict[str, list[float]] | None = None

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
        if self.label_type is not None and self.label_type not in LABEL_TYPES:
            raise ValueError(f"preprocessing: label_type must be one of {', '.join(LABEL_TYPES)}, "
                             f"got {self.label_type!r}")  # fmt: skip
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
        """JSON fields; ``label_type`` and ``bounds`` only when set (older readers lack them)."""
        out: dict[str, Any] = {
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
        if self.label_type is not None:
            out["label_type"] = self.label_type
        if self.bounds is not None:
            out["bounds"] = self.bounds
        return out

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

    @property
    def class_labels(self) -> list[Any] | None:
        """The class names as labels of the type the training table had (``"2"`` -> ``2``)."""
        if self.class_names is None:
            return None
        typed = LABEL_TYPES[self.label_type or "str"]
        return [typed(c) for c in self.class_names]

    def encode(self, frame: pd.DataFrame, first_row: int = 0) -> tuple[np.ndarray, RowErrors]:
        """Raw table rows -> encoded, unscaled float64 ``[N, F_enc]`` and the rows that cannot be
        used (``{row: reason}``, rows numbered from ``first_row``, every problem of the row in
        its reason; their values are zeros).

        Missing feature columns raise a ``DataError`` that also lists the problems of the rows
        in the columns present; extra columns are ignored.
        """
        if self.features is None:
            raise ValueError("this preprocessing has no feature names; pass an array")
        missing = [f for f in self.features if f not in frame.columns]
        n = len(frame)
        parts: list[np.ndarray] = []
        bad: RowErrors = {}

        def flag(mask: np.ndarray, why: Any) -> None:
            for i in np.flatnonzero(mask):
                text = why(int(i)) if callable(why) else why
                row = first_row + int(i)
                bad[row] = f"{bad[row]} and {text}" if row in bad else text

        for f in self.features:
            if f in missing:
                continue
            cats = self.categories.get(f)
            parts.append(self._encode_column(frame[f], f, cats, flag))
        if missing:
            also = f"; also {describe_row_errors(bad)}" if bad else ""
            raise DataError(
                f"input has no column(s) {missing}; the model reads {self.features}{also}"
            )
        return np.concatenate(parts, axis=1) if parts else np.zeros((n, 0)), bad

    def _encode_column(
        self, col: pd.Series, f: str, cats: list[str] | None, flag: Any
    ) -> np.ndarray:
        """One raw column -> its encoded columns ``[N, 1]`` or ``[N, K]``; problems flagged."""
        import pandas as pd

        if cats is None:
            values = numbers(col)
            finite = np.isfinite(values)
            if not finite.all():
                missing_v = col.isna().to_numpy()
                flag(~finite & missing_v, f"column {f!r}: missing value")
                text = np.isnan(values) & ~missing_v
                flag(text, lambda i: f"column {f!r}: {shown(col.iloc[i])} is not a number")
                flag(~finite & ~missing_v & ~text, f"column {f!r}: not a finite number")
            big = finite & (np.abs(values) > FLOAT32_MAX)
            flag(big, lambda i: f"column {f!r}: {overflow_message(float(values[i]))}")
            out = np.zeros_like(big)
            if self.bounds and f in self.bounds:
                low, high = self.bounds[f]
                out = finite & ~big & ((values < low) | (values > high))
                flag(out, lambda i: f"column {f!r}: {bound_message(float(values[i]), low, high)}")
            unusable = ~finite | big | out
            if unusable.any():
                values = np.where(unusable, 0.0, values)
            return values[:, None]
        codes = pd.Index(cats).get_indexer(category_text(col))
        unknown = codes < 0

        def why(i: int) -> str:
            v = col.iloc[i]
            if pd.isna(v):
                return f"column {f!r}: missing value"
            v = v.item() if isinstance(v, np.generic) else v
            return f"column {f!r}: unknown category {v!r} (known: {cats})"

        flag(unknown, why)
        onehot = np.zeros((len(col), len(cats)), dtype=np.float64)
        ok = np.flatnonzero(~unknown)
        onehot[ok, codes[ok]] = 1.0
        return onehot

    def check_encoded(self, arr: np.ndarray, first_row: int = 0) -> RowErrors:
        """The unusable rows of an already encoded float array ``[N, ...]`` (what
        :meth:`rows_to_array` returns, e.g. a client's one-hot columns): values that are not
        finite or beyond float32, number columns outside ``bounds``, and one-hot groups that
        are not exactly one 1 among 0s."""
        bad: RowErrors = {}
        flat = arr.reshape(len(arr), -1)

        def flag(rows: np.ndarray, why: Any) -> None:
            for i in rows:
                row = first_row + int(i)
                text = why(int(i))
                bad[row] = f"{bad[row]} and {text}" if row in bad else text

        finite = np.isfinite(flat)
        flag(np.flatnonzero(~finite.all(1)), lambda i: "missing or non-finite value")
        big = finite & (np.abs(flat) > FLOAT32_MAX)
        flag(np.flatnonzero(big.any(1)),
             lambda i: overflow_message(flat[i][big[i]][0]))  # fmt: skip
        if self.features is None or flat.shape[1] != len(self.encoded_names):
            return bad
        ok = finite & ~big
        col = 0
        for f in self.features:
            cats = self.categories.get(f)
            if cats is None:
                v = flat[:, col]
                if self.bounds and f in self.bounds:
                    low, high = self.bounds[f]
                    out = ok[:, col] & ((v < low) | (v > high))
                    flag(np.flatnonzero(out),
                         lambda i, v=v, f=f, lo=low, hi=high:
                         f"column {f!r}: {bound_message(v[i], lo, hi)}")  # fmt: skip
                col += 1
                continue
            group = flat[:, col : col + len(cats)]
            names = ", ".join(f"{f}={c}" for c in cats)
            binary = ((group == 0) | (group == 1)).all(1)
            flag(np.flatnonzero(ok[:, col : col + len(cats)].all(1) & ~binary),
                 lambda i, g=group, f=f, names=names: f"columns of category {f!r} ({names}): "
                 f"{float(g[i][(g[i] != 0) & (g[i] != 1)][0]):g} is not 0 or 1")  # fmt: skip
            ones = (group == 1).sum(1)
            flag(np.flatnonzero(binary & (ones != 1)),
                 lambda i, ones=ones, f=f, names=names: f"columns of category {f!r} ({names}) "
                 f"hold {int(ones[i])} ones; one-hot columns hold exactly one 1")  # fmt: skip
            col += len(cats)
        return bad

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
            bad = self.check_encoded(arr, first_row)
            if bad:
                arr = np.where(np.isfinite(arr) & (np.abs(arr) <= FLOAT32_MAX), arr, 0.0)
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
            bad = self.check_encoded(x.detach().cpu().double().numpy())  # numeric, feature order
            if bad:
                raise DataError(describe_row_errors(bad))
            return self.scale(x.to(dtype))
        arr, bad = self.rows_to_array(x)
        if bad:
            raise DataError(describe_row_errors(bad))
        return self.scale(torch.as_tensor(arr, dtype=dtype))

    # ------------------------------------------------------------------ outputs
    def outputs(self, pred: Predictive) -> Predictive:
        """A regression predictive in network units -> user target units (affine map of the
        samples; noise variance times y_std²). Classification is returned as it is."""
        if self.y_mean is None or self.y_std is None or pred.task.value != "regression":
            return pred
        return pred.affine(self.y_mean, self.y_std)


def _to_numpy(x: Any) -> np.ndarray:
    if isinstance(x, Tensor):
        return np.asarray(x.detach().cpu().numpy())
    try:
        import pandas as pd

        if isinstance(x, pd.DataFrame):
            return np.asarray(x.to_numpy())
    except ImportError:  # pragma: no cover
        pass
    return np.asarray(x)
