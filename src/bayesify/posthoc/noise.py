"""Fitting the aleatoric noise variance τ⁻¹ of a regression predictive on validation data."""

from __future__ import annotations

import math

import torch
from scipy.optimize import minimize_scalar
from torch import Tensor

from bayesify.metrics import regression as reg_metrics
from bayesify.options import NoiseObjective, parse_option


def fit_noise_variance(
    means: Tensor, y: Tensor, objective: NoiseObjective | str = NoiseObjective.PLL
) -> float:
    """The τ⁻¹ that gives the best validation score for MC sample means ``[T, N]``.

    The predictive is the sample mixture with noise variance τ⁻¹ added to every sample; CRPS is
    scored on its moment-matched Gaussian (mean, Var_t + τ⁻¹), PLL on the mixture itself.
    ``objective`` defaults to PLL, as everywhere (:class:`~bayesify.options.NoiseObjective`).
    """
    objective = parse_option(NoiseObjective, objective, option="objective")
    means = torch.as_tensor(means, dtype=torch.float64)
    y = torch.as_tensor(y, dtype=torch.float64).reshape(-1)
    if means.dim() != 2 or means.shape[1] != len(y):
        raise ValueError(f"means must be [T, N] with N = {len(y)}, got {tuple(means.shape)}")
    if len(y) == 0:
        raise ValueError("fitting the noise variance needs at least one validation point")
    mean = means.mean(0)
    epistemic = means.var(0, unbiased=False)
    scale = float(((mean - y) ** 2).mean()) + 1e-12

    def loss(log_var: float) -> float:
        nv = math.exp(log_var)
        if objective is NoiseObjective.CRPS:
            return float(reg_metrics.crps_gaussian(mean, (epistemic + nv).sqrt(), y))
        return -float(reg_metrics.mixture_log_prob(means, torch.tensor(nv, dtype=means.dtype), y))

    lo, hi = math.log(scale) - 20.0, math.log(scale) + 3.0
    res = minimize_scalar(loss, bounds=(lo, hi), method="bounded", options={"xatol": 1e-4})
    return math.exp(res.x)
