"""Classification metrics and uncertainty scores.

Shapes: predictive (mean) class probabilities ``probs [N, C]``; per-sample probabilities
``sample_probs [T, N, C]`` (sample axis first); integer labels ``labels [N]`` in ``[0, C)``.
Probabilities must lie in [0, 1] and sum to 1 over the class axis. Computation is in float64;
results come back in the probabilities' float dtype. Entropies are in nats.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bayesify.metrics._validate import (
    as_float,
    as_labels,
    check_int,
    check_ndim,
    check_nonempty,
    check_probs,
    reduce,
)

__all__ = [
    "PROB_FLOOR",
    "ReliabilityCurve",
    "brier_score",
    "calibration_error_of_curve",
    "entropy",
    "error_rate",
    "expected_calibration_error",
    "expected_entropy",
    "mutual_information",
    "nll",
    "reliability_curve",
]

#: Probabilities are clamped to at least this before taking logs in :func:`nll`, so a confident
#: wrong prediction costs at most ``-log(1e-12) ≈ 27.6`` nats instead of inf.
PROB_FLOOR = 1e-12


@dataclass(frozen=True)
class ReliabilityCurve:
    """Per-bin statistics of top-label confidence, for a reliability diagram.

    Attributes:
        bin_edges: ``[B + 1]`` edges ``0, 1/B, ..., 1``; bin b is ``(edges[b], edges[b+1]]``.
        confidence: mean top-label confidence per bin ``[B]`` (NaN for empty bins).
        accuracy: fraction of correct top-label predictions per bin ``[B]`` (NaN for empty bins).
        counts: number of points per bin ``[B]`` (int64).
    """

    bin_edges: Tensor
    confidence: Tensor
    accuracy: Tensor
    counts: Tensor


def _probs(probs: Any, name: str, ndim: int, hint: str) -> Tensor:
    p = as_float(probs, name)
    check_ndim(p, ndim, name, hint)
    check_nonempty(p, name)
    check_probs(p, name)
    return p


def _probs_labels(probs: Any, labels: Any) -> tuple[Tensor, Tensor]:
    """``probs [N, C]`` and int64 ``labels [N]``, checked against each other."""
    p = _probs(probs, "probs", 2, "[N, C]")
    lab = as_labels(labels, p.shape[1], "labels").to(p.device)
    if lab.shape[0] != p.shape[0]:
        raise ValueError(
            f"probs [N, C] and labels [N] disagree on N: probs has shape {tuple(p.shape)}, "
            f"labels has shape {tuple(lab.shape)}"
        )
    return p, lab


def nll(probs: Any, labels: Any, *, reduction: str = "mean") -> Tensor:
    """Negative log likelihood ``-log probs[i, labels[i]]`` (nats).

    The probability is clamped to at least ``PROB_FLOOR`` (1e-12) before the log.

    Args:
        probs: predictive class probabilities ``[N, C]``.
        labels: true classes ``[N]``.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` (``[N]``).
    """
    p, lab = _probs_labels(probs, labels)
    picked = p.to(torch.float64).gather(1, lab[:, None])[:, 0]  # [N]
    return reduce(-torch.log(picked.clamp_min(PROB_FLOOR)), reduction, p.dtype)


def error_rate(probs: Any, labels: Any, *, reduction: str = "mean") -> Tensor:
    """0/1 error of the arg-max prediction (ties go to the lowest class index).

    Args:
        probs: predictive class probabilities ``[N, C]``.
        labels: true classes ``[N]``.
        reduction: ``"mean"`` (default; the error rate), ``"sum"`` or ``"none"`` (``[N]``).
    """
    p, lab = _probs_labels(probs, labels)
    wrong = (p.argmax(dim=1) != lab).to(torch.float64)  # [N]
    return reduce(wrong, reduction, p.dtype)


def brier_score(probs: Any, labels: Any, *, reduction: str = "mean") -> Tensor:
    """Multiclass Brier score ``sum_c (probs[i, c] - onehot(labels[i])_c)²`` per point.

    Ranges over [0, 2] per point (Brier 1950 original definition; no factor 1/2).

    Args:
        probs: predictive class probabilities ``[N, C]``.
        labels: true classes ``[N]``.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` (``[N]``).
    """
    p, lab = _probs_labels(probs, labels)
    p64 = p.to(torch.float64)
    onehot = torch.nn.functional.one_hot(lab, p.shape[1]).to(torch.float64)  # [N, C]
    return reduce((p64 - onehot).square().sum(1), reduction, p.dtype)


def _binned(p: Tensor, lab: Tensor, n_bins: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Bin edges ``[B+1]`` and per-bin confidence sum, correct count and count ``[B]``."""
    conf, pred = p.to(torch.float64).max(dim=1)  # [N], [N]
    correct = (pred == lab).to(torch.float64)
    edges = torch.linspace(0.0, 1.0, n_bins + 1, dtype=torch.float64, device=p.device)
    # bucketize (right=False) gives i with edges[i-1] < conf <= edges[i]: bins are (lower, upper].
    # A confidence of exactly 0 would fall left of bin 0; it cannot occur for valid
    # probabilities (the top label has probability >= 1/C), but is put in bin 0 regardless.
    idx = (torch.bucketize(conf, edges) - 1).clamp_min(0)  # [N]
    conf_sum = torch.zeros_like(edges[1:]).index_add_(0, idx, conf)
    correct_sum = torch.zeros_like(edges[1:]).index_add_(0, idx, correct)
    counts = torch.bincount(idx, minlength=n_bins)
    return edges, conf_sum, correct_sum, counts


def reliability_curve(probs: Any, labels: Any, n_bins: int = 15) -> ReliabilityCurve:
    """Reliability diagram data: per-bin mean confidence and accuracy of the top label.

    Equal-width confidence bins ``(lower, upper]`` over [0, 1], as in torchmetrics'
    ``calibration_error``; confidences are compared to the edges in float64.

    Args:
        probs: predictive class probabilities ``[N, C]``.
        labels: true classes ``[N]``.
        n_bins: number of bins B >= 1.

    Returns:
        :class:`ReliabilityCurve` (empty bins have NaN confidence and accuracy).
    """
    n_bins = check_int(n_bins, "n_bins", 1)
    p, lab = _probs_labels(probs, labels)
    edges, conf_sum, correct_sum, counts = _binned(p, lab, n_bins)
    denom = counts.to(torch.float64)
    nan = torch.full_like(denom, float("nan"))
    conf = torch.where(counts > 0, conf_sum / denom.clamp_min(1), nan)
    acc = torch.where(counts > 0, correct_sum / denom.clamp_min(1), nan)
    return ReliabilityCurve(
        bin_edges=edges.to(p.dtype),
        confidence=conf.to(p.dtype),
        accuracy=acc.to(p.dtype),
        counts=counts,
    )


def expected_calibration_error(probs: Any, labels: Any, n_bins: int = 15) -> Tensor:
    """Expected calibration error of the top label (Guo et al. 2017), 0-dim.

    ``ECE = sum_b (n_b / N) |acc_b - conf_b|`` over equal-width confidence bins ``(lower, upper]``
    (the torchmetrics convention; see :func:`reliability_curve`). Empty bins contribute 0.

    Args:
        probs: predictive class probabilities ``[N, C]``.
        labels: true classes ``[N]``.
        n_bins: number of bins B >= 1.
    """
    n_bins = check_int(n_bins, "n_bins", 1)
    p, lab = _probs_labels(probs, labels)
    _, conf_sum, correct_sum, _ = _binned(p, lab, n_bins)
    # (n_b / N) |acc_b - conf_b| = |correct_b - conf_sum_b| / N
    return ((correct_sum - conf_sum).abs().sum() / p.shape[0]).to(p.dtype)


def calibration_error_of_curve(curve: ReliabilityCurve) -> Tensor:
    """The ECE of a :class:`ReliabilityCurve` (e.g. one read back from a results store): the
    count-weighted mean of ``|acc_b - conf_b|`` over the non-empty bins, 0-dim float64. Equals
    :func:`expected_calibration_error` on the data the curve was made from."""
    counts = curve.counts.to(torch.float64)
    full = counts > 0
    gap = (curve.accuracy.to(torch.float64) - curve.confidence.to(torch.float64)).abs()
    return (counts[full] * gap[full]).sum() / counts.sum()


def _entropy64(p: Tensor) -> Tensor:
    p64 = p.to(torch.float64)
    return -torch.special.xlogy(p64, p64).sum(-1)  # xlogy(0, 0) = 0


def entropy(probs: Any) -> Tensor:
    """Shannon entropy (nats) over the last axis: ``[..., C] -> [...]``, with ``0 log 0 = 0``.

    Per-point uncertainty score (no reduction). On mean predictive probabilities it is the total
    predictive uncertainty.
    """
    p = as_float(probs, "probs")
    check_probs(p, "probs")
    return _entropy64(p).to(p.dtype)


def _sample_probs(sample_probs: Any) -> Tensor:
    return _probs(sample_probs, "sample_probs", 3, "[T, N, C]")


def expected_entropy(sample_probs: Any) -> Tensor:
    """Mean over samples of the per-sample entropy, ``[T, N, C] -> [N]`` (aleatoric part; nats)."""
    p = _sample_probs(sample_probs)
    return _entropy64(p).mean(0).to(p.dtype)


def mutual_information(sample_probs: Any) -> Tensor:
    """Mutual information between label and model sample (BALD; epistemic part), ``[N]`` nats.

    ``H[mean_t p_t] - mean_t H[p_t]`` from ``sample_probs [T, N, C]``, clamped at 0 against
    round-off (it is 0 exactly when all samples agree).
    """
    p = _sample_probs(sample_probs)
    p64 = p.to(torch.float64)
    mi = _entropy64(p64.mean(0)) - _entropy64(p64).mean(0)  # [N]
    return mi.clamp_min(0.0).to(p.dtype)
