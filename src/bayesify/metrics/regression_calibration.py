"""Calibration of Gaussian regression forecasts: central-interval coverage.

A forecast ``N(mean_i, std_i²)`` is calibrated when its central p-interval
``mean ± Φ⁻¹((1 + p) / 2) · std`` contains the target a fraction p of the time, for every p
(Kuleshov et al. 2018). Shapes: ``mean [N]``, ``std`` scalar or ``[N]``, ``y [N]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bayesify.metrics._validate import (
    as_float,
    check_fraction,
    check_ndim,
    check_nonempty,
    out_dtype,
    reduce,
)
from bayesify.metrics.regression import _point_inputs, _scale

__all__ = [
    "RegressionCalibrationCurve",
    "interval_coverage",
    "miscalibration_area",
    "regression_calibration_curve",
]

_DEFAULT_LEVELS = 101  # 0.00, 0.01, ..., 1.00


@dataclass(frozen=True)
class RegressionCalibrationCurve:
    """Expected vs observed coverage of central prediction intervals.

    Attributes:
        expected: nominal coverage levels ``[L]``, increasing, in [0, 1].
        observed: fraction of targets inside the central interval at each level ``[L]``.
    """

    expected: Tensor
    observed: Tensor


def _inside(mean: Any, std: Any, y: Any, levels: Tensor) -> tuple[Tensor, torch.dtype]:
    """Indicator ``[L, N]`` that y lies in the central interval at each level (float64)."""
    m, t = _point_inputs(mean, y)
    s, s_raw = _scale(std, "std", t, "a scalar or [N]", allow_zero=False)
    dtype = out_dtype(m, t, s_raw)
    m, t, s = (x.to(torch.float64) for x in (m, t, s))
    half_width = torch.special.ndtri((1.0 + levels.to(t.device)) / 2.0)  # [L]; inf at level 1
    z = ((t - m).abs() / s)[None, :]  # [1, N]
    return (z <= half_width[:, None]).to(torch.float64), dtype


def _levels(levels: Sequence[float] | Tensor | None) -> Tensor:
    if levels is None:
        return torch.linspace(0.0, 1.0, _DEFAULT_LEVELS, dtype=torch.float64)
    lv = as_float(levels, "levels").to(torch.float64)
    check_ndim(lv, 1, "levels", "[L]")
    check_nonempty(lv, "levels")
    if (lv < 0).any() or (lv > 1).any():
        raise ValueError(
            f"levels must lie in [0, 1], got range [{lv.min().item():.6g}, {lv.max().item():.6g}]"
        )
    return torch.sort(lv).values


def interval_coverage(
    mean: Any, std: Any, y: Any, level: float = 0.95, *, reduction: str = "mean"
) -> Tensor:
    """Whether each target lies in the central ``level`` interval ``mean ± Φ⁻¹((1+level)/2) std``.

    Args:
        mean: predictive mean ``[N]``.
        std: predictive standard deviation, a scalar or ``[N]``, > 0.
        y: targets ``[N]``.
        level: nominal coverage in [0, 1].
        reduction: ``"mean"`` (default; the empirical coverage), ``"sum"`` (the count) or
            ``"none"`` (``[N]`` of 0./1.).
    """
    lv = check_fraction(level, "level")
    inside, dtype = _inside(mean, std, y, torch.tensor([lv], dtype=torch.float64))
    return reduce(inside[0], reduction, dtype)


def regression_calibration_curve(
    mean: Any, std: Any, y: Any, levels: Sequence[float] | Tensor | None = None
) -> RegressionCalibrationCurve:
    """Observed vs expected coverage of central intervals of a Gaussian forecast.

    Args:
        mean: predictive mean ``[N]``.
        std: predictive standard deviation, a scalar or ``[N]``, > 0.
        y: targets ``[N]``.
        levels: nominal levels ``[L]`` in [0, 1] (sorted on the way in); default
            ``0, 0.01, ..., 1``.

    Returns:
        :class:`RegressionCalibrationCurve` with ``expected [L]`` and ``observed [L]``.
    """
    lv = _levels(levels)
    inside, dtype = _inside(mean, std, y, lv)
    return RegressionCalibrationCurve(expected=lv.to(dtype), observed=inside.mean(1).to(dtype))


def miscalibration_area(
    mean: Any, std: Any, y: Any, levels: Sequence[float] | Tensor | None = None
) -> Tensor:
    """Area between the calibration curve and the diagonal (0 = calibrated, at most 0.5).

    ``∫ |observed(p) - p| dp`` by the trapezoidal rule over ``levels`` (default 101 levels
    spanning [0, 1]; a custom grid integrates over its own span only). A single level gives 0.

    Args:
        mean: predictive mean ``[N]``.
        std: predictive standard deviation, a scalar or ``[N]``, > 0.
        y: targets ``[N]``.
        levels: nominal levels ``[L]`` in [0, 1].
    """
    lv = _levels(levels)
    inside, dtype = _inside(mean, std, y, lv)
    gap = (inside.mean(1) - lv).abs()  # [L]
    return torch.trapezoid(gap, lv).to(dtype)
