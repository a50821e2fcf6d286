"""A mean-field Gaussian prior per weight, for variational continual learning (Nguyen et al. 2018).

The Bayes-by-Backprop layers' own prior is one ``N(0, σ_p²)`` for every weight. Continual
learning needs a prior that is the previous task's posterior ``N(μ_prev, σ_prev²)``, one mean
and one scale per weight. Here it is kept as buffers on each Bayesian layer
(``prior_weight_mu``, ``prior_weight_sigma``, ``prior_bias_mu``, ``prior_bias_sigma``; saved in
bundles with the weights), copied from the layer's posterior and frozen by
:func:`freeze_posterior`.
:func:`prior_kl` is the closed form ``KL(q || p)`` of two mean-field Gaussians summed over the
layers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from bayesify.nn.bayes_layers import BayesLayer

__all__ = [
    "PRIOR_BUFFERS",
    "add_posterior_prior",
    "freeze_posterior",
    "gaussian_kl_between",
    "prior_kl",
    "start_from_prior",
]

#: (posterior mean parameter, posterior ρ parameter, prior mean buffer, prior σ buffer)
PRIOR_BUFFERS = (
    ("weight_mu", "weight_rho", "prior_weight_mu", "prior_weight_sigma"),
    ("bias_mu", "bias_rho", "prior_bias_mu", "prior_bias_sigma"),
)


def gaussian_kl_between(mu: Tensor, sigma: Tensor, prior_mu: Tensor, prior_sigma: Tensor) -> Tensor:
    """``KL(N(mu, sigma²) || N(prior_mu, prior_sigma²))`` summed over elements (0-dim):
    ``Σ log(σ_p/σ) + (σ² + (μ − μ_p)²) / 2σ_p² − ½``."""
    var_ratio = (sigma / prior_sigma) ** 2
    t = ((mu - prior_mu) / prior_sigma) ** 2
    return 0.5 * (var_ratio + t - 1.0 - torch.log(var_ratio)).sum()


def _pairs(layer: BayesLayer) -> list[tuple[str, str, str, str]]:
    return [p for p in PRIOR_BUFFERS if getattr(layer, p[0]) is not None]


def add_posterior_prior(layers: list[BayesLayer], sigma: float) -> None:
    """Give each layer prior buffers ``N(0, sigma²)`` per weight (the first task's prior)."""
    for layer in layers:
        for mu_name, _, pm, ps in _pairs(layer):
            mu = getattr(layer, mu_name)
            layer.register_buffer(pm, torch.zeros_like(mu.detach()))
            layer.register_buffer(ps, torch.full_like(mu.detach(), float(sigma)))


def prior_kl(layers: list[BayesLayer]) -> Tensor:
    """``KL(q || p)`` of the layers' posteriors to their prior buffers, summed (0-dim)."""
    total = None
    for layer in layers:
        for mu_name, rho_name, pm, ps in _pairs(layer):
            sigma = F.softplus(getattr(layer, rho_name))
            kl = gaussian_kl_between(
                getattr(layer, mu_name), sigma, getattr(layer, pm), getattr(layer, ps)
            )
            total = kl if total is None else total + kl
    if total is None:
        raise ValueError("no Bayesian layers to take the KL of")
    return total


@torch.no_grad()
def freeze_posterior(layers: list[BayesLayer]) -> None:
    """Copy each layer's posterior mean and σ into its prior buffers (the next task's prior)."""
    for layer in layers:
        for mu_name, rho_name, pm, ps in _pairs(layer):
            getattr(layer, pm).copy_(getattr(layer, mu_name))
            getattr(layer, ps).copy_(F.softplus(getattr(layer, rho_name)))


@torch.no_grad()
def start_from_prior(layers: list[BayesLayer]) -> None:
    """Set each layer's posterior to its prior buffers (μ = μ_p, ρ = softplus⁻¹(σ_p))."""
    for layer in layers:
        for mu_name, rho_name, pm, ps in _pairs(layer):
            getattr(layer, mu_name).copy_(getattr(layer, pm))
            sigma = getattr(layer, ps)
            getattr(layer, rho_name).copy_(sigma + torch.log(-torch.expm1(-sigma)))
