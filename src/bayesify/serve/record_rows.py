"""The rows the record keeps, as the monitor uses them and as table columns.

A served row awaiting its outcome is a :class:`ServedRow`: its class probabilities
(classification) or its predictive mixture, interval and level (regression), and whether it
was deferred. A scored row is a :class:`ClassScore` or a
:class:`~bayesify.serve.figures.RegressionScore`. Arrays are stored as little-endian bytes of
their dtype (float64 probabilities, float32 offsets and noise: what the monitor computes with),
never pickled, so a row read back scores exactly as the row kept in memory would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from bayesify.serve.figures import Mixture, RegressionScore

#: feedback statuses per outcome
ACCEPTED, FLAGGED, ALREADY, UNKNOWN = "accepted", "flagged", "already_received", "unknown"
#: a row's outcome refused (a class index beyond its classes); nothing of it was written
INVALID = "invalid"


class AmbiguousId(ValueError):
    """Feedback named a request of several rows, or a client id several requests carried."""


@dataclass
class ServedRow:
    """A served row awaiting its outcome."""

    defer: bool
    probs: np.ndarray | None = None  # [C] float64, classification
    mix: Mixture | None = None  # regression
    lower: float = math.nan
    upper: float = math.nan
    level: float = math.nan

    @property
    def size(self) -> int:
        """The numbers it holds (what ``max_pending_values`` counts)."""
        return len(self.probs) if self.probs is not None else self.mix.size  # type: ignore[union-attr]


@dataclass(frozen=True)
class ClassScore:
    """A classification row scored against its outcome."""

    defer: bool
    probs: np.ndarray  # [C]
    label: int


Score = ClassScore | RegressionScore

#: the ``pending`` table's columns after its key, in the order of :func:`served_values`
SERVED_COLUMNS = ("defer", "size", "probs", "mean", "std", "offsets", "noise", "lower_end",
                  "upper_end", "level")  # fmt: skip
#: the ``scored`` table's columns after its key, in the order of :func:`score_values`
SCORE_COLUMNS = ("batch", "defer", "label", "probs", "sq_error", "abs_error", "log_prob", "pit",
                 "covered", "level")  # fmt: skip


def _bytes(a: np.ndarray, dtype: str) -> bytes:
    return np.ascontiguousarray(a, dtype=dtype).tobytes()


def _array(b: Any, dtype: str) -> np.ndarray:
    return np.frombuffer(bytes(b), dtype=dtype).copy()


def _real(v: float) -> float | None:
    """A float as a column value (SQLite stores NaN as NULL; both read back as NaN)."""
    return None if math.isnan(v) else float(v)


def _float(v: Any) -> float:
    return math.nan if v is None else float(v)


def served_values(row: ServedRow) -> tuple:
    """``row`` as the values of :data:`SERVED_COLUMNS`."""
    if row.probs is not None:
        return (int(row.defer), row.size, _bytes(row.probs, "<f8"), None, None, None, None,
                None, None, None)  # fmt: skip
    mix = row.mix
    assert mix is not None
    return (int(row.defer), row.size, None, float(mix.mean), float(mix.std),
            _bytes(mix.offsets, "<f4"), _bytes(mix.noise, "<f4"), _real(row.lower),
            _real(row.upper), _real(row.level))  # fmt: skip


def served_row(values: tuple) -> ServedRow:
    """The :class:`ServedRow` of :data:`SERVED_COLUMNS` values."""
    defer, _, probs, mean, std, offsets, noise, lower, upper, level = values
    if probs is not None:
        return ServedRow(bool(defer), probs=_array(probs, "<f8"))
    mix = Mixture(float(mean), float(std), _array(offsets, "<f4"), _array(noise, "<f4"))
    return ServedRow(bool(defer), mix=mix, lower=_float(lower), upper=_float(upper),
                     level=_float(level))  # fmt: skip


def score_values(batch: int, score: Score) -> tuple:
    """A scored row of feedback request ``batch`` as the values of :data:`SCORE_COLUMNS`."""
    if isinstance(score, ClassScore):
        return (batch, int(score.defer), int(score.label), _bytes(score.probs, "<f8"), None,
                None, None, None, None, None)  # fmt: skip
    s = score
    return (batch, int(s.defer), None, None, s.sq_error, s.abs_error, s.log_prob, s.pit,
            int(s.covered), s.level)  # fmt: skip


def score_row(values: tuple) -> tuple[int, Score]:
    """``(batch, score)`` of :data:`SCORE_COLUMNS` values."""
    batch, defer, label, probs, sq, ab, logp, pit, covered, level = values
    if probs is not None:
        return int(batch), ClassScore(bool(defer), _array(probs, "<f8"), int(label))
    score = RegressionScore(bool(defer), float(sq), float(ab),
                            None if logp is None else float(logp), _float(pit), bool(covered),
                            _float(level))  # fmt: skip
    return int(batch), score


def target_range(metadata: dict[str, Any]) -> tuple[float, float] | None:
    """The training targets' ``(min, max)`` a bundle records (``metadata["target_range"]``:
    ``[min, max]`` in target units), or None."""
    r = metadata.get("target_range")
    try:
        lo, hi = float(r[0]), float(r[1])  # type: ignore[index]
    except (TypeError, ValueError, IndexError, KeyError):
        return None
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) and lo <= hi else None
