"""What the monitor reports, as pure functions of rows served and scored against outcomes.

A served regression row is the predictive the predictor answered with: the equal-weight
Gaussian mixture ``(1/T) Σ_t N(m_t, s_t²)`` of its T sample means ``m_t`` and noise ``s_t``
(in the user's target units), its ``mean``, ``std`` and interval ``[lower, upper]`` at the
``level`` served. :func:`score_regression` turns it and an outcome ``y`` into the per-row
figures the window keeps: the squared and absolute error, ``log p(y)`` under the mixture, the
probability integral transform ``PIT = F(y)`` (the mixture CDF: uniform on [0, 1] when the
predictive is calibrated) and whether ``y`` fell in the interval. :func:`regression_figures`
and :func:`classification_figures` summarise a window of such rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bayesify import metrics
from bayesify.metrics.classification import PROB_FLOOR
from bayesify.metrics.regression import mixture_log_prob
from bayesify.predictive.mixture import mixture_cdf

#: bins of the PIT histogram over [0, 1]
PIT_BINS = 10


def clean(v: float | None) -> float | None:
    """A float for JSON (None for NaN or infinity)."""
    return None if v is None or not math.isfinite(v) else float(v)


@dataclass(frozen=True)
class Mixture:
    """One served regression row: ``mean`` plus ``offsets [T]`` are the sample means, ``noise
    [T]`` or ``[1]`` their noise standard deviations (float32: offsets keep the precision of
    the spread, the mean is float64)."""

    mean: float
    std: float
    offsets: np.ndarray  # [T] float32
    noise: np.ndarray  # [T] or [1] float32

    @property
    def size(self) -> int:
        return len(self.offsets) + len(self.noise)


@dataclass(frozen=True)
class RegressionScore:
    """A regression row scored against its outcome (what the rolling window keeps)."""

    defer: bool
    sq_error: float
    abs_error: float
    log_prob: float | None  # None where a component has no noise (a point mass)
    pit: float
    covered: bool
    level: float


def score_regression(
    mix: Mixture, y: float, lower: float, upper: float, level: float, defer: bool
) -> RegressionScore:
    """Score one served regression row against the outcome ``y`` (float64 throughout)."""
    means = torch.as_tensor(mix.mean + mix.offsets.astype(np.float64))[:, None]  # [T, 1]
    noise = torch.as_tensor(mix.noise.astype(np.float64))[:, None].expand_as(means)  # [T, 1]
    target = torch.tensor([y], dtype=torch.float64)
    pit = float(mixture_cdf(means, noise, target)[0])
    logp = None
    if bool((noise > 0).all()):
        logp = float(mixture_log_prob(means, noise.square(), target, reduction="none")[0])
    err = y - mix.mean
    return RegressionScore(defer, err * err, abs(err), logp, pit, lower <= y <= upper, level)


def regression_figures(rows: list[RegressionScore], error_metric: str = "rmse") -> dict[str, Any]:
    """Over ``rows``: ``error`` (RMSE, or mean absolute error with ``error_metric="mae"``),
    ``nll`` (mean -log p(y) under each row's mixture), ``interval_coverage`` (fraction of
    outcomes inside the served interval) beside ``interval_level`` (the mean nominal level
    served: what a calibrated interval covers) and the PIT histogram (``PIT_BINS`` counts)."""
    if not rows:
        return {"n": 0}
    n = len(rows)
    if error_metric == "mae":
        error = sum(r.abs_error for r in rows) / n
    else:
        error = math.sqrt(sum(r.sq_error for r in rows) / n)
    logps = [r.log_prob for r in rows]
    nll = None if any(lp is None for lp in logps) else -sum(logps) / n  # type: ignore[arg-type]
    pit = np.asarray([r.pit for r in rows], dtype=np.float64)
    counts = np.bincount(np.minimum((pit * PIT_BINS).astype(np.int64), PIT_BINS - 1),
                         minlength=PIT_BINS)  # fmt: skip
    return {
        "n": n,
        "error": clean(error),
        "nll": clean(nll),
        "interval_coverage": sum(r.covered for r in rows) / n,
        "interval_level": sum(r.level for r in rows) / n,
        "pit_counts": counts.tolist(),
    }


def classification_figures(terms: dict[str, np.ndarray]) -> dict[str, Any]:
    """Accuracy, error, NLL and ECE of served rows from their :func:`classification_terms`
    (the figures :mod:`bayesify.metrics` gives: a tested identity)."""
    if not terms:
        return {"n": 0}
    n = len(terms["error"])
    error = float(terms["error"].mean())
    return {
        "n": n,
        "accuracy": 1.0 - error,
        "error": error,
        "nll": clean(float(terms["nll"].mean())),
        "ece": clean(float(np.abs(terms["ece"].sum(0)).sum() / n)),
    }


def reliability(probs: np.ndarray, labels: np.ndarray) -> dict[str, list] | None:
    """The classification reliability curve (10 confidence bins) of served rows."""
    if len(labels) == 0:
        return None
    p = torch.as_tensor(probs, dtype=torch.float64)
    y = torch.as_tensor(labels, dtype=torch.long)
    curve = metrics.reliability_curve(p / p.sum(-1, keepdim=True), y, n_bins=10)
    return {"confidence": [clean(v) for v in curve.confidence.tolist()],
            "accuracy": [clean(v) for v in curve.accuracy.tolist()],
            "counts": curve.counts.tolist()}  # fmt: skip


# ---------------------------------------------------------------------- drift, request by request
#: confidence bins of the ECE (as :func:`bayesify.metrics.expected_calibration_error`'s default)
ECE_BINS = 15


def classification_terms(probs: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    """Per-row additive terms ``[N, k]`` whose column sums give each figure: ``error`` and
    ``nll`` (means of the terms), ``ece`` (``Σ_bins |Σ (correct - confidence)| / N``, the bins
    of :func:`bayesify.metrics.expected_calibration_error`)."""
    p = probs / probs.sum(-1, keepdims=True)
    conf, pred = p.max(1), p.argmax(1)
    correct = (pred == labels).astype(np.float64)
    picked = p[np.arange(len(labels)), labels]
    edges = np.linspace(0.0, 1.0, ECE_BINS + 1)
    idx = np.maximum(np.searchsorted(edges, conf, side="left") - 1, 0)  # bins (lower, upper]
    ece = np.zeros((len(labels), ECE_BINS))
    ece[np.arange(len(labels)), idx] = correct - conf
    return {"error": (1 - correct)[:, None],
            "nll": -np.log(np.maximum(picked, PROB_FLOOR))[:, None],
            "ece": ece}  # fmt: skip


def regression_terms(rows: list[RegressionScore], error_metric: str) -> dict[str, np.ndarray]:
    """Per-row additive terms: ``error`` (squared or absolute error), ``nll`` (left out where a
    row has no log density) and ``interval_coverage`` (covered, nominal level)."""
    err = [r.abs_error if error_metric == "mae" else r.sq_error for r in rows]
    out = {"error": np.asarray(err, dtype=np.float64)[:, None],
           "interval_coverage": np.asarray([[r.covered, r.level] for r in rows],
                                           dtype=np.float64).reshape(-1, 2)}  # fmt: skip
    if all(r.log_prob is not None for r in rows):
        out["nll"] = -np.asarray([r.log_prob for r in rows], dtype=np.float64)[:, None]
    return out


def leave_one_out(terms: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column sums of ``terms [N, k]`` over all rows (entry 0) and over the rows outside each
    group (entries 1..G, ``groups [N]`` labels the rows): ``sums [1+G, k]``, ``counts [1+G]``."""
    _, inv = np.unique(groups, return_inverse=True)
    per = np.zeros((inv.max() + 1 if len(inv) else 0, terms.shape[1]))
    np.add.at(per, inv, terms)
    total = terms.sum(0, keepdims=True)
    counts = np.concatenate([[len(terms)], len(terms) - np.bincount(inv)])
    return np.concatenate([total, total - per]), counts
