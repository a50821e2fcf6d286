"""What a prediction call returns: :class:`PredictionResult` (columns, records, a table for
files) and the helpers that shape its columns."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import numpy as np

from bayesify.data.preprocessing import RowErrors
from bayesify.predictive import Predictive

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


class OnError(StrEnum):
    """What to do with an input row that cannot be used (missing, non-numeric, unknown category)."""

    FAIL = "fail"  # a DataError naming the first bad row
    SKIP = "skip"  # leave the row out; ``PredictionResult.skipped`` says why


@dataclass
class PredictionResult:
    """Predictions for the kept rows of one call.

    ``columns`` holds one array per output field, first axis N (kept rows); ``rows`` their row
    numbers in the input (offset by ``first_row``); ``skipped`` maps skipped rows to reasons.
    """

    predictive: Predictive | None
    columns: dict[str, np.ndarray]
    rows: np.ndarray
    skipped: RowErrors = field(default_factory=dict)
    class_names: list[str] | None = None
    #: guarantees this answer does not carry (e.g. conformal calibrated under another policy)
    warnings: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows)

    def records(self, samples: bool = True) -> list[dict[str, Any]]:
        """One JSON-able dict per kept row (``samples=False`` leaves the samples out)."""
        cols = {k: v.tolist() for k, v in self.columns.items() if samples or k != "samples"}
        return [{k: v[i] for k, v in cols.items()} for i in range(len(self.rows))]

    def frame(self, samples: bool = False, row: bool = True) -> pd.DataFrame:
        """A table for files: ``row`` number first, ``probabilities`` expanded into one
        ``p_<class>`` column per class, lists (prediction sets, samples) as JSON text."""
        import pandas as pd

        out: dict[str, Any] = {"row": self.rows} if row else {}
        for k, v in self.columns.items():
            if k == "samples" and not samples:
                continue
            if k == "probabilities":
                names = self.class_names or [str(c) for c in range(v.shape[1])]
                out.update({f"p_{c}": v[:, j] for j, c in enumerate(names)})
            elif v.ndim > 1 or (v.dtype == object and len(v) and isinstance(v[0], list)):
                out[k] = [json.dumps(a.tolist() if hasattr(a, "tolist") else a) for a in v]
            else:
                out[k] = v
        return pd.DataFrame(out)


def finite_rows(columns: dict[str, np.ndarray], n: int) -> np.ndarray:
    """``[N]`` bool: every float figure of the row is finite."""
    ok = np.ones(n, dtype=bool)
    for v in columns.values():
        if isinstance(v, np.ndarray) and v.dtype.kind == "f":
            ok &= np.isfinite(v.reshape(n, -1)).all(axis=1)
    return ok


def label_array(labels: list[Any]) -> np.ndarray:
    """Labels ``[N]`` as numbers where they are numbers (int64, float64, bool), else text."""
    kinds = {type(v) for v in labels}
    if kinds in ({int}, {float}, {bool}):
        return np.asarray(labels)
    out = np.empty(len(labels), dtype=object)
    out[:] = labels
    return out
