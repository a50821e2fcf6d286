"""The Dirichlet a distilled classifier outputs per row: its likelihood, its fit to sampled class
probabilities, and the predictive summaries it implies in closed form.

With concentrations ``alpha [N, C]`` (``alpha0 = alpha.sum(-1)``), for p ~ Dir(alpha):

- mean class probabilities ``E[p] = alpha / alpha0``;
- per-class variance ``Var[p_c] = m_c (1 - m_c) / (alpha0 + 1)`` (epistemic), and
  ``E[p_c (1 - p_c)] = m_c (1 - m_c) alpha0 / (alpha0 + 1)`` (aleatoric), m = E[p];
- expected entropy ``E[H(p)] = psi(alpha0 + 1) - sum_c m_c psi(alpha_c + 1)``;
- mutual information = H(E[p]) - E[H(p)] (Malinin & Gales 2018, eq. 12).

These are what the Monte Carlo estimates of a :class:`~bayesify.predictive.Predictive` built
from draws of the Dirichlet converge to.
"""

from __future__ import annotations

import torch
from torch import Tensor


def dirichlet_nll(log_alpha: Tensor, mean_log_p: Tensor) -> Tensor:
    """Mean over rows of the negative log density of T probability vectors under Dir(alpha),
    averaged over the T: ``log_alpha [N, C]``, ``mean_log_p [N, C]`` (the mean over samples of
    log p, the Dirichlet's sufficient statistic) -> scalar."""
    alpha = log_alpha.exp()
    per_row = (
        torch.lgamma(alpha).sum(-1)
        - torch.lgamma(alpha.sum(-1))
        - ((alpha - 1) * mean_log_p).sum(-1)
    )
    return per_row.mean()


def fit_dirichlet(probs: Tensor, *, steps: int = 500, tol: float = 1e-10) -> Tensor:
    """Maximum-likelihood concentrations of a Dirichlet per row from probability vectors
    ``[T, N, C]`` -> ``alpha [N, C]`` (Minka's fixed point on the digamma equation, started at
    the moment estimate; float64)."""
    if probs.dim() != 3:
        raise ValueError(f"probs must have shape [T, N, C], got {tuple(probs.shape)}")
    p = probs.double().clamp_min(1e-300)
    mean_log = p.log().mean(0)  # [N, C]
    m = p.mean(0)
    var = p.var(0, unbiased=False).clamp_min(1e-300)
    # moment estimate of alpha0 from the first class's mean and variance
    a0 = ((m * (1 - m) / var) - 1).clamp_min(1e-3).median(-1).values  # [N]
    alpha = (m * a0.unsqueeze(-1)).clamp_min(1e-6)
    for _ in range(steps):
        target = torch.digamma(alpha.sum(-1, keepdim=True)) + mean_log  # [N, C]
        new = _inverse_digamma(target)
        if (new - alpha).abs().max() < tol * alpha.max():
            return new
        alpha = new
    return alpha


def _inverse_digamma(y: Tensor, iterations: int = 8) -> Tensor:
    """x with digamma(x) = y (Minka's initialisation and Newton steps)."""
    x = torch.where(y >= -2.22, y.exp() + 0.5, -1 / (y + 0.5772156649015329))
    for _ in range(iterations):
        x = x - (torch.digamma(x) - y) / torch.polygamma(1, x)
    return x


def dirichlet_summaries(alpha: Tensor) -> dict[str, Tensor]:
    """Closed-form summaries of Dir(alpha), ``alpha [N, C]``: ``mean [N, C]``,
    ``epistemic_variance [N, C]``, ``aleatoric_variance [N, C]``, ``entropy``,
    ``expected_entropy`` and ``mutual_information`` ``[N]`` (nats)."""
    a0 = alpha.sum(-1, keepdim=True)
    m = alpha / a0
    spread = m * (1 - m)
    entropy = -(m * m.clamp_min(torch.finfo(m.dtype).tiny).log()).sum(-1)
    expected = torch.digamma(a0.squeeze(-1) + 1) - (m * torch.digamma(alpha + 1)).sum(-1)
    return {
        "mean": m,
        "epistemic_variance": spread / (a0 + 1),
        "aleatoric_variance": spread * a0 / (a0 + 1),
        "entropy": entropy,
        "expected_entropy": expected,
        "mutual_information": (entropy - expected).clamp_min(0),
    }


def sample_dirichlet(
    alpha: Tensor, samples: int, generator: torch.Generator | None = None
) -> Tensor:
    """``samples`` draws of p ~ Dir(alpha) per row: ``alpha [N, C]`` -> ``[T, N, C]`` (gamma
    draws normalised; a row whose draws all underflow to 0 gets its mean)."""
    a = alpha.double().unsqueeze(0).expand(samples, *alpha.shape).contiguous()
    g = torch._standard_gamma(a, generator=generator)
    total = g.sum(-1, keepdim=True)
    mean = (alpha.double() / alpha.double().sum(-1, keepdim=True)).expand_as(g)
    p = torch.where(total > 0, g / total.clamp_min(1e-300), mean)
    return p.to(alpha.dtype)
