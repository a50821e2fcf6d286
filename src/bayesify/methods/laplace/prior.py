"""Laplace's prior precision δ (and, for homoscedastic regression, the noise σ²) by the
marginal likelihood, in closed form given the eigenvalues λ of the GGN.

    log p(D) ≈ log p(D | θ*) − ½ [ Σ_i log(s λ_i + δ) − P log δ + δ ||θ*||² ]

(MacKay 1992; Immer et al. 2021; laplace-torch's ``log_marginal_likelihood`` with a scalar
prior: log-det ratio plus scatter), ``s = 1/σ²`` for homoscedastic regression and 1 otherwise.
Its derivative in δ vanishes where ``Σ_i δ / (s λ_i + δ) + δ ||θ*||² = P``; the left side grows
with δ, so the maximiser is found by bisection on log δ (to float64 precision, no learning rate
or step count). σ² is found by golden-section search on log σ² around the residual variance,
with the best δ for each σ².
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from bayesify.methods.laplace.curvature import DataTerm

#: the bracket of the searches for δ (log10)
LOG10_DELTA_RANGE = (-8.0, 8.0)


@dataclass(frozen=True)
class Evidence:
    """The fitted prior precision δ, noise variance σ² (None: no Gaussian noise) and the log
    marginal likelihood there."""

    prior_precision: float
    noise_variance: float | None
    log_marglik: float


def log_likelihood(term: DataTerm, noise_variance: float | None) -> float:
    """``log p(D | θ*)``; for homoscedastic regression with noise ``noise_variance``."""
    if noise_variance is None:
        return term.log_likelihood
    n = term.n_data
    return -0.5 * n * math.log(2 * math.pi * noise_variance) - term.sse / (2 * noise_variance)


def log_marglik(
    term: DataTerm,
    eigenvalues: Tensor,
    sq_norm: float,
    prior_precision: float,
    noise_variance: float | None = None,
) -> float:
    """The Laplace log marginal likelihood at δ = ``prior_precision`` (and σ²)."""
    s = 1.0 if noise_variance is None else 1.0 / noise_variance
    d = prior_precision
    lam = eigenvalues.double()
    log_det_ratio = float(torch.log(s * lam + d).sum()) - lam.numel() * math.log(d)
    return log_likelihood(term, noise_variance) - 0.5 * (log_det_ratio + d * sq_norm)


def best_prior_precision(eigenvalues: Tensor, sq_norm: float, scale: float = 1.0) -> float:
    """The δ maximising the marginal likelihood for fixed ``scale`` s (bisection on log δ)."""
    lam = eigenvalues.double() * scale
    p = lam.numel()

    def excess(log_d: float) -> float:
        d = math.exp(log_d)
        return float((d / (lam + d)).sum()) + d * sq_norm - p

    lo, hi = (v * math.log(10) for v in LOG10_DELTA_RANGE)
    if excess(lo) >= 0:
        return math.exp(lo)
    if excess(hi) <= 0:
        return math.exp(hi)
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if excess(mid) < 0:
            lo = mid
        else:
            hi = mid
    return math.exp(0.5 * (lo + hi))


def fit_evidence(
    term: DataTerm, eigenvalues: Tensor, sq_norm: float, gaussian_noise: bool
) -> Evidence:
    """δ (and σ² where ``gaussian_noise``) maximising the marginal likelihood."""
    if not gaussian_noise:
        d = best_prior_precision(eigenvalues, sq_norm)
        return Evidence(d, None, log_marglik(term, eigenvalues, sq_norm, d))

    def profile(log_var: float) -> tuple[float, float]:
        var = math.exp(log_var)
        d = best_prior_precision(eigenvalues, sq_norm, 1.0 / var)
        return log_marglik(term, eigenvalues, sq_norm, d, var), d

    centre = math.log(max(term.sse / max(term.n_data, 1), 1e-12))
    lo, hi = centre - 12.0, centre + 6.0
    ratio = (math.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = profile(a)[0], profile(b)[0]
    for _ in range(80):
        if fa > fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = profile(a)[0]
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = profile(b)[0]
    log_var = 0.5 * (lo + hi)
    value, d = profile(log_var)
    return Evidence(d, math.exp(log_var), value)


def prior_grid(points: int = 21) -> list[float]:
    """The validation grid of δ: ``points`` values, log-spaced over 1e-4 .. 1e4."""
    lo, hi = -4.0, 4.0
    return [10 ** (lo + (hi - lo) * i / (points - 1)) for i in range(points)]
