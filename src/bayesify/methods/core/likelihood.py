"""Regression likelihoods: homoscedastic (one noise variance τ⁻¹, fitted on validation data) or
heteroscedastic (the network predicts a variance per input, Kendall & Gal 2017; Lakshminarayanan
et al. 2017).

A heteroscedastic network outputs two numbers per row, ``[N, 2]``: the mean and an unconstrained
value mapped to the variance by ``softplus(v) + VARIANCE_FLOOR`` (the deep-ensembles paper's
positivity map; the floor keeps the NLL finite). It is trained with the Gaussian negative
log-likelihood, and each Monte Carlo sample brings its own variance into the predictive mixture,
so aleatoric uncertainty varies with the input.
"""

from __future__ import annotations

import math

import torch.nn.functional as F
from torch import Tensor

from bayesify.options import Likelihood

__all__ = [
    "VARIANCE_FLOOR",
    "Likelihood",
    "gaussian_nll",
    "regression_means",
    "split_heteroscedastic",
]

#: smallest predicted variance (training-target units: standardised targets give 1e-6 of the
#: targets' variance)
VARIANCE_FLOOR = 1e-6
_LOG_2PI = math.log(2 * math.pi)


def split_heteroscedastic(out: Tensor) -> tuple[Tensor, Tensor]:
    """A heteroscedastic net's outputs ``[..., N, 2]`` -> mean and variance ``[..., N]``."""
    if out.dim() < 2 or out.shape[-1] != 2:
        raise ValueError(
            "a heteroscedastic regression net must output [N, 2] (mean, unconstrained variance), "
            f"got {list(out.shape)}; build it with 2 outputs, e.g. mlp(in_features, 2)"
        )
    return out[..., 0], F.softplus(out[..., 1]) + VARIANCE_FLOOR


def gaussian_nll(mean: Tensor, variance: Tensor, y: Tensor) -> Tensor:
    """Mean over rows of −log N(y; mean, variance); ``mean``, ``variance`` ``[N]``, ``y`` [N] or
    [N, 1]."""
    y = y.reshape(mean.shape)
    return 0.5 * (_LOG_2PI + variance.log() + (y - mean) ** 2 / variance).mean()


def regression_means(out: Tensor) -> Tensor:
    """A homoscedastic regression net's samples ``[T, N]`` from its outputs ``[T, N]`` or
    ``[T, N, 1]``."""
    if out.dim() == 3 and out.shape[-1] != 1:
        raise ValueError(f"a regression net must output [N] or [N, 1], got [N, {out.shape[-1]}]")
    return out.reshape(out.shape[0], out.shape[1])
