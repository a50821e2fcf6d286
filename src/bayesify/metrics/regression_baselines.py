"""Reference points for regression uncertainty: Teye et al. (2018, §4.2).

A model's PLL or CRPS mixes the quality of its mean with the quality of its uncertainty. To
isolate the uncertainty, Teye et al. place the score between two Gaussian baselines that share the
model's predictive mean:

* **constant uncertainty** (CUBN / CUDO): one σ for every point, fitted on validation data
  (:func:`fit_constant_std`) — scored with :func:`~bayesify.metrics.gaussian_log_prob` /
  :func:`~bayesify.metrics.crps_gaussian` at that σ;
* **optimal uncertainty**: the best σ chosen per point with knowledge of the target
  (:func:`optimal_pll`, :func:`optimal_crps`) — an upper bound no honest model reaches.

:func:`normalized_pll` / :func:`normalized_crps` map the model onto this scale: 0 = constant, 100 =
optimal.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from bayesify.metrics._validate import as_float, check_nonempty, out_dtype, reduce
from bayesify.metrics.regression import _point_inputs
from bayesify.options import NoiseObjective, parse_option

__all__ = [
    "ERROR_FLOOR",
    "OPTIMAL_CRPS_FACTOR",
    "ConstantStdObjective",
    "fit_constant_std",
    "normalized_crps",
    "normalized_pll",
    "optimal_crps",
    "optimal_pll",
]

logger = logging.getLogger(__name__)

#: Floor on |y - mean| (in the targets' units) wherever a zero error would make the optimal σ
#: zero and the log likelihood infinite.
ERROR_FLOOR = 1e-12

# Derivation of the per-point CRPS optimum. With e = y - mean and z = e / σ,
#   CRPS(σ) = σ h(z),  h(z) = z (2Φ(z) - 1) + 2φ(z) - 1/√π,  h'(z) = 2Φ(z) - 1,
#   dCRPS/dσ = h(z) - z h'(z) = 2φ(z) - 1/√π.
# The derivative is negative for |z| > √(ln 2) and positive below, so the unique minimiser is
# σ* = |e| / √(ln 2). There 2φ(z*) = 1/√π exactly, so the last two terms of h cancel and
#   min_σ CRPS = |e| (2Φ(√(ln 2)) - 1) = |e| · erf(√(ln 2 / 2)) ≈ 0.5953 |e|.
_Z_STAR = math.sqrt(math.log(2.0))
#: min over σ of CRPS(N(mean, σ²), y) equals ``OPTIMAL_CRPS_FACTOR * |y - mean|``.
OPTIMAL_CRPS_FACTOR = math.erf(math.sqrt(math.log(2.0) / 2.0))
_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)


#: the former name of :class:`~bayesify.options.NoiseObjective`, kept for existing imports
ConstantStdObjective = NoiseObjective


def _mean_crps_constant(abs_err: np.ndarray, sigma: float) -> float:
    from scipy.special import ndtr  # scipy on first use: a server starts without it

    z = abs_err / sigma
    phi = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return float(np.mean(sigma * (z * (2.0 * ndtr(z) - 1.0) + 2.0 * phi - _INV_SQRT_PI)))


def _mean_crps_slope(abs_err: np.ndarray, sigma: float) -> float:
    """d/dσ of the mean CRPS; increasing in σ, so its sign brackets the minimiser."""
    z = abs_err / sigma
    return float(np.mean(2.0 * np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi) - _INV_SQRT_PI))


def _fit_crps_std(abs_err: np.ndarray) -> float:
    nonzero = abs_err[abs_err > 0]
    if nonzero.size == 0:
        logger.warning("all residuals are zero; returning the floor std %g", ERROR_FLOOR)
        return ERROR_FLOOR
    # Each point alone is minimised at |e_i| / z*, and the slope of the mean is increasing in σ,
    # so the minimiser lies below max |e_i| / z*; exact zeros can pull it below min |e_i| / z*.
    hi = float(nonzero.max()) / _Z_STAR
    lo = float(nonzero.min()) / _Z_STAR
    while _mean_crps_slope(abs_err, lo) > 0:
        if lo <= ERROR_FLOOR:
            logger.warning("CRPS is minimised as std -> 0; returning the floor std %g", lo)
            return ERROR_FLOOR
        lo = max(lo / 16.0, ERROR_FLOOR)
    if hi <= lo * (1.0 + 1e-12):
        return hi
    from scipy.optimize import minimize_scalar

    res = minimize_scalar(
        lambda log_s: _mean_crps_constant(abs_err, math.exp(log_s)),
        bounds=(math.log(lo), math.log(hi)),
        method="bounded",
        options={"xatol": 1e-10},
    )
    return float(math.exp(res.x))


def fit_constant_std(
    mean: Any,
    y: Any,
    objective: NoiseObjective | str = NoiseObjective.PLL,
    *,
    bounds: tuple[float, float] | None = None,
) -> float:
    """The single σ that best scores ``N(mean_i, σ²)`` over the given (validation) points.

    The constant-uncertainty baseline (CUBN / CUDO) of Teye et al. (2018, §4.2).

    * ``objective="pll"``: maximises the mean Gaussian log likelihood; closed form
      ``σ² = mean_i (y_i - mean_i)²``.
    * ``objective="crps"``: minimises the mean Gaussian CRPS by bounded Brent search on log σ
      (the mean CRPS is unimodal in σ; the bracket comes from the residuals, see source).

    If the optimum is σ -> 0 (e.g. all residuals zero) the floor ``ERROR_FLOOR`` (1e-12) is
    returned and a warning logged.

    ``bounds`` (min, max) restricts the **variance** σ² (Teye et al.'s code searches CUBN's
    variance inside the same per-dataset range as τ⁻¹). Both objectives are unimodal in σ, so the
    constrained optimum is the unconstrained one clipped to the bounds.

    Args:
        mean: predictive mean ``[N]``.
        y: targets ``[N]``.
        objective: ``"pll"`` (default, as everywhere a noise level is fitted) or ``"crps"``
            (Teye et al.'s choice); see :class:`~bayesify.options.NoiseObjective`.
        bounds: optional (min, max) on σ², both > 0.

    Returns:
        σ as a Python float.
    """
    obj = parse_option(NoiseObjective, objective, option="objective")
    if bounds is not None and not 0 < bounds[0] <= bounds[1]:
        raise ValueError(f"bounds must be 0 < min <= max (variances), got {bounds}")
    m, t = _point_inputs(mean, y)
    err = (t.to(torch.float64) - m.to(torch.float64)).cpu().numpy()
    if obj is NoiseObjective.PLL:
        sigma = math.sqrt(float(np.mean(err * err)))
        if sigma == 0.0 and bounds is None:
            logger.warning("all residuals are zero; returning the floor std %g", ERROR_FLOOR)
        sigma = max(sigma, ERROR_FLOOR)
    else:
        sigma = _fit_crps_std(np.abs(err))
    if bounds is not None:
        sigma = min(max(sigma, math.sqrt(bounds[0])), math.sqrt(bounds[1]))
    return sigma


def optimal_pll(mean: Any, y: Any, *, reduction: str = "mean") -> Tensor:
    """Per-point best achievable Gaussian log likelihood (Teye et al. 2018, §4.2).

    For each point the variance is set to its maximiser ``σ_i² = e_i²`` (``e_i = y_i - mean_i``),
    giving ``-1/2 log(2π e_i²) - 1/2``. ``|e_i|`` is floored at ``ERROR_FLOOR`` (1e-12, in the
    targets' units) so an exact prediction gives a large finite value instead of +inf.

    Args:
        mean: predictive mean ``[N]``.
        y: targets ``[N]``.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` (``[N]``).
    """
    m, t = _point_inputs(mean, y)
    dtype = out_dtype(m, t)
    err2 = (t.to(torch.float64) - m.to(torch.float64)).square().clamp_min(ERROR_FLOOR**2)
    pll = -0.5 * torch.log(2.0 * math.pi * err2) - 0.5  # [N]
    return reduce(pll, reduction, dtype)


def optimal_crps(mean: Any, y: Any, *, reduction: str = "mean") -> Tensor:
    """Per-point best achievable Gaussian CRPS (Teye et al. 2018, §4.2).

    CRPS is scale-equivariant, ``CRPS(σ) = σ h(e/σ)``, and its minimiser over σ is
    ``σ_i = |e_i| / sqrt(ln 2)``, where the minimum is
    ``OPTIMAL_CRPS_FACTOR * |e_i| = erf(sqrt(ln 2 / 2)) |e_i| ≈ 0.5953 |e_i|``
    (derivation in the module source). No floor is needed: ``e_i = 0`` gives 0.

    Args:
        mean: predictive mean ``[N]``.
        y: targets ``[N]``.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` (``[N]``).
    """
    m, t = _point_inputs(mean, y)
    dtype = out_dtype(m, t)
    crps = OPTIMAL_CRPS_FACTOR * (t.to(torch.float64) - m.to(torch.float64)).abs()  # [N]
    return reduce(crps, reduction, dtype)


def _mean_value(x: Any, name: str) -> float:
    t = as_float(x, name)
    check_nonempty(t, name)
    return float(t.to(torch.float64).mean())


def _normalized(score: Any, constant: Any, optimal: Any, names: tuple[str, str, str]) -> float:
    s = _mean_value(score, names[0])
    c = _mean_value(constant, names[1])
    o = _mean_value(optimal, names[2])
    if o == c:
        raise ValueError(
            f"{names[2]} and {names[1]} have the same mean ({o:.6g}); "
            "the normalised score is undefined"
        )
    return 100.0 * (s - c) / (o - c)


def normalized_pll(pll: Any, pll_constant: Any, pll_optimal: Any) -> float:
    """PLL on Teye's normalised scale: ``100 (M - M_CU) / (M_opt - M_CU)``.

    Each argument is a per-point ``[N]`` tensor or an already averaged number; the formula is
    applied to the **means over points** (the ratio of means, not the mean of per-point ratios,
    which is undefined wherever a point's baseline equals its optimum). 0 = the constant-σ
    baseline, 100 = the per-point optimum; negative means worse than constant uncertainty.
    The optimum is the best *Gaussian* per point, so a mixture predictive's PLL (e.g. MC samples
    in two tight modes) can exceed it: the score is not bounded by 100.

    Args:
        pll: the model's PLL, ``[N]`` or a number.
        pll_constant: PLL of the constant-σ baseline (:func:`fit_constant_std`), ``[N]`` or number.
        pll_optimal: :func:`optimal_pll` with ``reduction="none"`` or its mean.
    """
    return _normalized(pll, pll_constant, pll_optimal, ("pll", "pll_constant", "pll_optimal"))


def normalized_crps(crps: Any, crps_constant: Any, crps_optimal: Any) -> float:
    """CRPS on Teye's normalised scale: ``100 (M - M_CU) / (M_opt - M_CU)``.

    Same convention as :func:`normalized_pll` (ratio of means over points). CRPS is lower-is-better
    and ``M_opt < M_CU``, so the sign works out the same: 0 = constant σ, 100 = per-point optimum.
    """
    return _normalized(crps, crps_constant, crps_optimal, ("crps", "crps_constant", "crps_optimal"))
