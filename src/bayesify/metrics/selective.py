"""Selective prediction: the risk-coverage trade-off of a reject option.

A model that may abstain keeps the points it is most certain about. Sorting by uncertainty and
keeping the most certain fraction gives, for each coverage, the risk (mean loss) on what is kept
(Geifman & El-Yaniv 2017; the error-coverage curves of Shekhovtsov & Flach). The loss is
per point: 0/1 error for classification, e.g. squared error for regression.
Shapes: ``uncertainty [N]``, ``loss [N]``; computation in float64, results in the inputs' dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bayesify.metrics._validate import (
    as_float,
    check_finite,
    check_ndim,
    check_nonempty,
    check_same_shape,
    out_dtype,
)

__all__ = ["RiskCoverageCurve", "aurc", "risk_coverage_curve"]


@dataclass(frozen=True)
class RiskCoverageCurve:
    """Risk of the retained points as a function of coverage.

    Attributes:
        coverage: fractions kept ``k / N`` for ``k = 1..N`` ``[N]``.
        risk: mean loss of the ``k`` most certain points ``[N]``.
    """

    coverage: Tensor
    risk: Tensor


def _risks(uncertainty: Any, loss: Any) -> tuple[Tensor, torch.dtype]:
    """Risk at coverage k/N, k = 1..N, ``[N]`` float64."""
    u = as_float(uncertainty, "uncertainty", allow_nonfinite=True)
    ell = as_float(loss, "loss").to(u.device)
    check_ndim(u, 1, "uncertainty", "[N]")
    check_ndim(ell, 1, "loss", "[N]")
    check_same_shape(u, ell, "uncertainty", "loss")
    check_nonempty(u, "uncertainty")
    if torch.isnan(u).any():
        raise ValueError("uncertainty contains NaN")
    check_finite(ell, "loss")
    dtype = out_dtype(u, ell)
    u, ell = u.to(torch.float64), ell.to(torch.float64)
    # Points with tied uncertainty cannot be ordered; each gets the mean loss of its tie group,
    # which is the expected curve over a uniformly random tie-break.
    _, group, counts = torch.unique(u, sorted=True, return_inverse=True, return_counts=True)
    group_sum = ell.new_zeros(counts.numel()).index_add_(0, group, ell)
    group_mean = group_sum / counts.to(torch.float64)
    kept_loss = group_mean[group][torch.argsort(u, stable=True)]  # [N], most certain first
    k = torch.arange(1, u.numel() + 1, dtype=torch.float64, device=u.device)
    return torch.cumsum(kept_loss, 0) / k, dtype


def risk_coverage_curve(uncertainty: Any, loss: Any) -> RiskCoverageCurve:
    """Risk-coverage curve: keep the most certain fraction, report the mean loss of what is kept.

    Points are sorted by increasing ``uncertainty``; at coverage ``k/N`` the risk is the mean loss
    of the first ``k``. Ties in uncertainty are resolved in expectation (tied points share their
    group's mean loss), so the curve does not depend on the input order.

    Args:
        uncertainty: per-point uncertainty ``[N]`` (higher = less certain; ±inf allowed, no NaN).
        loss: per-point loss ``[N]`` (e.g. 0/1 error, squared error).

    Returns:
        :class:`RiskCoverageCurve` with ``coverage [N]`` and ``risk [N]``.
    """
    risk, dtype = _risks(uncertainty, loss)
    n = risk.numel()
    coverage = torch.arange(1, n + 1, dtype=torch.float64, device=risk.device) / n
    return RiskCoverageCurve(coverage=coverage.to(dtype), risk=risk.to(dtype))


def aurc(uncertainty: Any, loss: Any) -> Tensor:
    """Area under the risk-coverage curve: the mean of the risks at coverages ``k/N``, 0-dim.

    Lower is better. An uninformative uncertainty (all values tied) gives the mean loss at every
    coverage, so the AURC equals the mean loss.

    Args:
        uncertainty: per-point uncertainty ``[N]``.
        loss: per-point loss ``[N]``.
    """
    risk, dtype = _risks(uncertainty, loss)
    return risk.mean().to(dtype)
