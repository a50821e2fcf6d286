"""Fitting the aleatoric noise variance τ⁻¹ of a regression predictive on validation data.

Two protocols (:class:`NoiseProtocol`) say how τ and the constant-uncertainty baseline are fitted:

* ``"teye"`` — Teye et al. (2018, §4.2–4.3) as their code runs it: **one** τ per model, chosen by
  the mean CRPS of the moment-matched Gaussian (mean, Var_t + τ⁻¹) and used for both PLL and
  CRPS; the baseline's constant variance (CUBN / CUDO) is also chosen by CRPS and used for both.
  τ is searched only inside the authors' per-dataset range (:data:`TEYE_TAU_RANGE`, precision τ in
  ORIGINAL target units — their code scores de-standardised predictions — from their
  ``setup.yml``); :func:`teye_tau_range` gives it, or the union of their ranges for a dataset
  they did not use; :func:`variance_bounds` converts it to bounds on τ⁻¹ in model units.
* ``"bayesify"`` — our default elsewhere: a separate τ for each metric (τ for PLL maximises the
  mixture PLL), the baseline's variance fitted per metric (σ² = MSE for PLL), and a wide search
  range, e⁻²⁰…e³ × MSE. It scores each metric at its own best, at the price of comparing a
  different τ in each column.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from bayesify.metrics import regression as reg_metrics
from bayesify.options import NoiseObjective, parse_option

#: Teye et al.'s search range for the precision τ per UCI dataset, in original target units (their
#: models de-standardise predictions before τ is applied), from the ``tau_range`` of the authors'
#: code (github.com/icml-mcbn/mcbn, ``code/mcbn/setup.yml``); the paper's text names no range.
#: The noise variance τ⁻¹ lies in [1/τ_max, 1/τ_min] (original units²).
TEYE_TAU_RANGE: dict[str, tuple[float, float]] = {
    "bostonHousing": (0.01, 10.0),
    "concrete": (0.001, 10.0),
    "energy": (0.01, 100.0),
    "kin8nm": (10.0, 1000.0),
    "power-plant": (0.01, 10.0),
    "protein-tertiary-structure": (0.01, 10.0),
    "wine-quality-red": (0.01, 10.0),
    "yacht": (0.01, 100.0),
}
#: For other data: the union of the authors' ranges.
TEYE_TAU_RANGE_DEFAULT = (0.001, 1000.0)


def teye_tau_range(dataset: str | None) -> tuple[float, float]:
    """The authors' τ range for ``dataset`` (:data:`TEYE_TAU_RANGE`), else the union of them."""
    return TEYE_TAU_RANGE.get(dataset or "", TEYE_TAU_RANGE_DEFAULT)


def variance_bounds(tau_range: tuple[float, float], y_scale: float = 1.0) -> tuple[float, float]:
    """A precision range (τ_min, τ_max) in original target units as bounds on the variance τ⁻¹
    in model units: (1/τ_max, 1/τ_min) / y_scale², where targets were standardised by dividing
    by ``y_scale`` (1: the model predicts in original units)."""
    lo, hi = (float(t) for t in tau_range)
    if not 0 < lo <= hi or not math.isfinite(hi):
        raise ValueError(f"tau_range must be 0 < min <= max < inf, got {tau_range}")
    if not (y_scale > 0 and math.isfinite(y_scale)):
        raise ValueError(f"y_scale must be a positive number, got {y_scale}")
    return 1.0 / (hi * y_scale**2), 1.0 / (lo * y_scale**2)


def _bounded_log_search(loss, lo: float, hi: float, grid: int = 64) -> float:
    """Minimiser of ``loss(log_var)`` on [lo, hi]: the best of a log-spaced grid, refined by
    bounded Brent search between its neighbours (robust to a non-unimodal objective)."""
    if hi - lo < 1e-12:
        return lo
    xs = np.linspace(lo, hi, grid)
    values = [loss(float(x)) for x in xs]
    i = int(np.argmin(values))
    a, b = float(xs[max(i - 1, 0)]), float(xs[min(i + 1, grid - 1)])
    from scipy.optimize import minimize_scalar  # on first use: serving never imports scipy

    res = minimize_scalar(loss, bounds=(a, b), method="bounded", options={"xatol": 1e-6})
    return float(res.x) if res.fun <= values[i] else float(xs[i])


def noise_loss(
    means: Tensor, y: Tensor, noise_variance: float, objective: NoiseObjective | str
) -> float:
    """The validation loss of the sample mixture of means ``[T, N]`` with ``noise_variance``
    added to every sample, against ``y [N]``: minus its mean log density (PLL) or the CRPS of
    its moment-matched Gaussian (mean, Var_t + τ⁻¹)."""
    objective = parse_option(NoiseObjective, objective, option="objective")
    means = torch.as_tensor(means, dtype=torch.float64)
    y = torch.as_tensor(y, dtype=torch.float64).reshape(-1)
    if objective is NoiseObjective.CRPS:
        sd = (means.var(0, unbiased=False) + noise_variance).sqrt()
        return float(reg_metrics.crps_gaussian(means.mean(0), sd, y))
    nv = torch.tensor(noise_variance, dtype=means.dtype)
    return -float(reg_metrics.mixture_log_prob(means, nv, y))


def fit_noise_variance(
    means: Tensor,
    y: Tensor,
    objective: NoiseObjective | str = NoiseObjective.PLL,
    *,
    bounds: tuple[float, float] | None = None,
) -> float:
    """The τ⁻¹ that gives the best validation score for MC sample means ``[T, N]``.

    The predictive is the sample mixture with noise variance τ⁻¹ added to every sample; CRPS is
    scored on its moment-matched Gaussian (mean, Var_t + τ⁻¹), PLL on the mixture itself.
    ``objective`` defaults to PLL, as everywhere (:class:`~bayesify.options.NoiseObjective`).
    ``bounds`` (min, max) on τ⁻¹ (e.g. :func:`variance_bounds` of Teye's τ range); default the
    wide range e⁻²⁰…e³ × the mean squared error of the sample mean.
    """
    objective = parse_option(NoiseObjective, objective, option="objective")
    means = torch.as_tensor(means, dtype=torch.float64)
    y = torch.as_tensor(y, dtype=torch.float64).reshape(-1)
    if means.dim() != 2 or means.shape[1] != len(y):
        raise ValueError(f"means must be [T, N] with N = {len(y)}, got {tuple(means.shape)}")
    if len(y) == 0:
        raise ValueError("fitting the noise variance needs at least one validation point")
    mean = means.mean(0)

    def loss(log_var: float) -> float:
        return noise_loss(means, y, math.exp(log_var), objective)

    if bounds is None:
        from scipy.optimize import minimize_scalar

        scale = float(((mean - y) ** 2).mean()) + 1e-12
        lo, hi = math.log(scale) - 20.0, math.log(scale) + 3.0
        res = minimize_scalar(loss, bounds=(lo, hi), method="bounded", options={"xatol": 1e-4})
        return math.exp(res.x)
    if not 0 < bounds[0] <= bounds[1]:
        raise ValueError(f"bounds must be 0 < min <= max, got {bounds}")
    return math.exp(_bounded_log_search(loss, math.log(bounds[0]), math.log(bounds[1])))
