"""The Normal-Inverse-Gamma an evidential regression network outputs per row: its marginal
likelihood, draws and the predictive summaries it implies in closed form (Amini et al. 2020).

With ``(gamma, nu, alpha, beta)`` per row (``nu > 0``, ``alpha > 1``, ``beta > 0``), the prior
over the Gaussian's mean and variance is ``sigma² ~ InvGamma(alpha, beta)``,
``mu | sigma² ~ N(gamma, sigma² / nu)``. Then:

- aleatoric ``E[sigma²] = beta / (alpha - 1)``, epistemic ``Var[mu] = beta / (nu (alpha - 1))``;
- the marginal of y is a Student-t with ``2 alpha`` degrees of freedom, location ``gamma`` and
  squared scale ``beta (1 + nu) / (nu alpha)``, whose variance (``alpha > 1``) is their sum.

A :class:`~bayesify.predictive.Predictive` holds this as T draws ``(mu_t, sigma²_t)`` from the
NIG: the mixture of ``N(mu_t, sigma²_t)`` is a Monte Carlo estimate of the Student-t, its
epistemic variance (the variance of the ``mu_t``) estimates ``Var[mu]`` and its aleatoric
variance (the mean of the ``sigma²_t``) ``E[sigma²]``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def nig_nll(y: Tensor, gamma: Tensor, nu: Tensor, alpha: Tensor, beta: Tensor) -> Tensor:
    """``-log St(y; 2 alpha, gamma, beta (1 + nu) / (nu alpha))`` per row, all ``[N]``: the
    negative log marginal likelihood of the NIG (Amini et al. 2020, eq. 8)."""
    omega = 2 * beta * (1 + nu)
    return (
        0.5 * (math.log(math.pi) - nu.log())
        - alpha * omega.log()
        + (alpha + 0.5) * ((y - gamma) ** 2 * nu + omega).log()
        + torch.lgamma(alpha)
        - torch.lgamma(alpha + 0.5)
    )


def nig_summaries(gamma: Tensor, nu: Tensor, alpha: Tensor, beta: Tensor) -> dict[str, Tensor]:
    """Closed forms per row, all ``[N]``: ``mean``, ``epistemic_variance`` (``Var[mu]``),
    ``aleatoric_variance`` (``E[sigma²]``), ``variance`` (their sum, the Student-t's), and the
    Student-t's ``df``, ``loc`` and ``scale``."""
    aleatoric = beta / (alpha - 1)
    epistemic = aleatoric / nu
    return {
        "mean": gamma,
        "epistemic_variance": epistemic,
        "aleatoric_variance": aleatoric,
        "variance": epistemic + aleatoric,
        "df": 2 * alpha,
        "loc": gamma,
        "scale": (beta * (1 + nu) / (nu * alpha)).sqrt(),
    }


def sample_nig(
    gamma: Tensor,
    nu: Tensor,
    alpha: Tensor,
    beta: Tensor,
    samples: int,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """T draws of ``(mu, sigma²)`` per row: parameters ``[N]`` -> means and variances
    ``[T, N]`` (``sigma² = beta / g``, ``g ~ Gamma(alpha, 1)``; ``mu = gamma + sqrt(sigma² /
    nu) z``). Drawn in float64 on the generator's device (the CPU without one), returned in
    ``gamma``'s dtype and device."""
    device = generator.device if generator is not None else torch.device("cpu")
    a = alpha.detach().double().to(device).expand(samples, len(alpha)).contiguous()
    g = torch._standard_gamma(a, generator=generator).clamp_min(1e-300)
    z = torch.randn(a.shape, generator=generator, dtype=a.dtype, device=device)
    var = beta.double().to(device) / g
    mu = gamma.double().to(device) + (var / nu.double().to(device)).sqrt() * z
    return mu.to(gamma), var.to(gamma)
