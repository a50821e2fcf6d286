"""Laplace's hyperparameters chosen on validation data: the prior precision δ by a grid
(``prior_fit="grid"``) and the homoscedastic noise σ² (``noise_fit="validation"``), which
scales the posterior too (``s = 1/σ²``), so every σ² tried is a different posterior."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from torch import Tensor

from bayesify.methods.core.likelihood import regression_means
from bayesify.methods.laplace.prior import Evidence, best_prior_precision, log_marglik, prior_grid
from bayesify.options import PriorFit
from bayesify.posthoc.noise import noise_loss

if TYPE_CHECKING:
    from bayesify.methods.laplace.laplace import Laplace

#: rounds of (grid δ at σ², then σ² at δ) after the first σ² search with the grid
GRID_ROUNDS = 2


def grid_prior(la: Laplace, xv: Tensor, yv: Tensor, seed: int) -> float:
    """The δ of :func:`prior_grid` with the lowest validation NLL at the current σ²
    (``noise_samples`` samples per prediction, the same seed for every δ)."""
    best, best_nll = None, float("inf")
    for d in prior_grid():
        for _, block in la.blocks:
            block.prior_precision.fill_(d)
        pred = la.to_predictive(la.sample(xv, la.config.noise_samples, seed=seed))
        nll = float(-pred.log_prob(yv).mean())
        if nll < best_nll:
            best, best_nll = d, nll
    if best is None:
        raise ValueError("no prior precision of the grid gives a finite validation NLL")
    return best


def fit_noise(la: Laplace, xv: Tensor, yv: Tensor, seed: int) -> Tensor:
    """Set the σ² whose posterior and noise give the best validation loss (bounded search on
    log σ², the same draws' seed for every σ²), with δ by ``prior_fit`` at each σ²: the
    marginal likelihood's in closed form, or the grid's (δ and σ² in turn until δ stays, at
    most ``GRID_ROUNDS`` more rounds); a fixed ``prior_precision`` stays. Returns the
    validation draws' means ``[T, N]`` under the chosen σ²."""
    term, eig, sq = la._term, la.eigenvalues(), la._sq_norm()
    cfg, prior = la.config, la.prior_precision
    marglik_prior = cfg.prior_precision is None and cfg.prior_fit is PriorFit.MARGLIK
    grid = cfg.prior_precision is None and cfg.prior_fit is PriorFit.GRID

    def draws(log_var: float) -> Tensor:
        var = math.exp(log_var)
        la._set(best_prior_precision(eig, sq, 1 / var) if marglik_prior else prior, var)
        return regression_means(la.sample(xv, cfg.noise_samples, seed=seed))

    def loss(log_var: float) -> float:
        return noise_loss(draws(log_var), yv, math.exp(log_var), cfg.noise_objective)

    from scipy.optimize import minimize_scalar  # scipy's import is slow: only when fitting

    centre = math.log(max(term.sse / max(term.n_data, 1), 1e-12))

    def search() -> float:
        res = minimize_scalar(loss, bounds=(centre - 9.0, centre + 5.0), method="bounded",
                              options={"xatol": 1e-2})  # fmt: skip
        return float(res.x)

    log_var = search()
    for _ in range(GRID_ROUNDS if grid else 0):
        la._set(prior, math.exp(log_var))  # the grid scores δ at this σ²
        d = grid_prior(la, xv, yv, seed)
        if math.isclose(d, prior, rel_tol=1e-6):  # ``prior`` may come from a float32 buffer
            break
        prior = d  # before the search, whose draws read it
        log_var = search()
    means = draws(log_var)
    var, d = la.noise_variance, la.prior_precision
    la.evidence = Evidence(d, var, log_marglik(term, eig, sq, d, var))
    return means
