"""The mean-field Gaussian posterior's arithmetic for Bayes by Backprop: priors, the closed-form
KL, and the fused training nodes of :mod:`bayesify.nn.bayes_layers`.

Weights have posteriors ``N(μ, σ²)`` with ``σ = softplus(ρ)``; priors are ``N(0, σ_p²)``
(closed-form KL) or Blundell et al.'s scale mixture (Monte Carlo KL). The two autograd
functions compute a layer's σ, output and KL as one node each, with the gradients written out,
because on CPU the per-operation overhead and the passes over large weight matrices of the
unfused expressions are most of a training step's extra cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from bayesify.options import PriorKind, parse_option

__all__ = ["Prior", "PriorKind", "gaussian_kl"]


@dataclass(frozen=True)
class Prior:
    """Weight prior: ``N(0, sigma²)`` or ``pi N(0, sigma1²) + (1 - pi) N(0, sigma2²)``."""

    kind: PriorKind = PriorKind.GAUSSIAN
    sigma: float = 1.0
    pi: float = 0.5
    sigma1: float = 1.0
    sigma2: float = math.exp(-6)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", parse_option(PriorKind, self.kind, option="prior kind"))
        if min(self.sigma, self.sigma1, self.sigma2) <= 0 or not 0 < self.pi <= 1:
            raise ValueError(f"prior scales must be > 0 and pi in (0, 1], got {self}")

    def log_prob(self, w: Tensor) -> Tensor:
        """Sum of the prior log density over the elements of ``w`` (0-dim)."""
        if self.kind is PriorKind.GAUSSIAN:
            return torch.distributions.Normal(0.0, self.sigma).log_prob(w).sum()
        a = math.log(self.pi) + torch.distributions.Normal(0.0, self.sigma1).log_prob(w)
        if self.pi == 1:
            return a.sum()
        b = math.log1p(-self.pi) + torch.distributions.Normal(0.0, self.sigma2).log_prob(w)
        return torch.logaddexp(a, b).sum()


def gaussian_kl(mu: Tensor, sigma: Tensor, prior_sigma: float) -> Tensor:
    """``KL(N(mu, sigma²) || N(0, prior_sigma²))`` summed over elements (0-dim):
    ``(Σσ² + Σμ²) / 2p² − Σ log σ + n (log p − ½)``."""
    s, m = sigma.reshape(-1), mu.reshape(-1)
    squares = torch.dot(s, s) + torch.dot(m, m)
    const = mu.numel() * (math.log(prior_sigma) - 0.5)
    return squares / (2.0 * prior_sigma**2) - s.log().sum() + const


class _SoftplusGaussian(torch.autograd.Function):
    """``σ = softplus(ρ)`` and :func:`gaussian_kl` ``(μ, σ, p)`` as one autograd node.

    The backward is written out (``∂KL/∂μ = μ/p²``, ``∂KL/∂σ = σ/p² − 1/σ``,
    ``∂σ/∂ρ = sigmoid(ρ)``) with in-place updates: for a large layer it makes a handful of
    passes over the weights where autograd of the expression makes about twice as many, which
    is most of a Bayes-by-Backprop training step's overhead on CPU.
    """

    @staticmethod
    def forward(ctx, mu: Tensor, rho: Tensor, prior_sigma: float) -> tuple[Tensor, Tensor]:  # noqa: ANN001
        sigma = F.softplus(rho)
        kl = gaussian_kl(mu, sigma, prior_sigma)
        ctx.save_for_backward(mu, rho, sigma)
        ctx.inv_p2 = 1.0 / prior_sigma**2
        ctx.set_materialize_grads(False)
        return sigma, kl

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g_sigma: Tensor | None, g_kl: Tensor | None):  # noqa: ANN001, ANN205
        mu, rho, sigma = ctx.saved_tensors
        g_mu = g_rho = None
        if ctx.needs_input_grad[1]:
            if g_kl is None:
                g_rho = torch.zeros_like(rho) if g_sigma is None else g_sigma.clone()
            else:
                g_rho = torch.reciprocal(sigma).mul_(-g_kl)
                g_rho.addcmul_(sigma, g_kl * ctx.inv_p2)
                if g_sigma is not None:
                    g_rho.add_(g_sigma)
            g_rho.mul_(torch.sigmoid(rho))
        if ctx.needs_input_grad[0] and g_kl is not None:
            g_mu = mu * (g_kl * ctx.inv_p2)
        return g_mu, g_rho, None


class _LocalReparamLinear(torch.autograd.Function):
    """A Gaussian-prior :class:`BayesLinear` training step as one autograd node: the output
    ``x μᵀ + b_μ + sqrt(x² σ²ᵀ + σ_b²) ∘ ε`` for ``x [R, in]``, ``ε [R, out]``, and the layer's
    KL. The backward is written out, so a small layer costs a handful of kernel calls instead of
    a graph of some sixty (on a UCI-sized MLP the per-call overhead, not the arithmetic, is
    most of a training step)."""

    @staticmethod
    def forward(ctx, x, w_mu, w_rho, b_mu, b_rho, eps, prior_sigma):  # noqa: ANN001, ANN205
        w_sig = F.softplus(w_rho)
        w_var = w_sig * w_sig
        xx = x * x
        has_b = b_mu is not None
        b_sig = F.softplus(b_rho) if has_b else None
        mean = torch.addmm(b_mu, x, w_mu.t()) if has_b else x @ w_mu.t()
        var = torch.addmm(b_sig * b_sig, xx, w_var.t()) if has_b else xx @ w_var.t()
        std = var.add_(1e-16).sqrt_()
        out = torch.addcmul(mean, std, eps)
        kl = gaussian_kl(w_mu, w_sig, prior_sigma)
        if has_b:
            kl = kl + gaussian_kl(b_mu, b_sig, prior_sigma)
        ctx.save_for_backward(x, xx, w_mu, w_rho, w_sig, w_var, b_mu, b_rho, b_sig, eps, std)
        ctx.inv_p2 = 1.0 / prior_sigma**2
        ctx.set_materialize_grads(False)
        return out, kl

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g_out, g_kl):  # noqa: ANN001, ANN205
        x, xx, w_mu, w_rho, w_sig, w_var, b_mu, b_rho, b_sig, eps, std = ctx.saved_tensors
        need = ctx.needs_input_grad
        has_b = b_mu is not None
        g_x = g_w_mu = g_w_rho = g_b_mu = g_b_rho = None
        k = None if g_kl is None else g_kl * ctx.inv_p2
        if g_out is not None:
            g_var = (g_out * eps).div_(std).mul_(0.5)  # d out / d var = ε / (2 std)
            if need[0]:
                g_x = (g_var @ w_var).mul_(x).mul_(2.0).addmm_(g_out, w_mu)
            g_w_mu = g_out.t() @ x
            g_w_rho = _rho_grad(g_var.t() @ xx, w_sig, w_rho, g_kl, k)
            if has_b:
                g_b_mu = g_out.sum(0)
                g_b_rho = _rho_grad(g_var.sum(0), b_sig, b_rho, g_kl, k)
        elif g_kl is not None:
            g_w_mu, g_w_rho = torch.zeros_like(w_mu), _rho_grad(None, w_sig, w_rho, g_kl, k)
            if has_b:
                g_b_mu, g_b_rho = torch.zeros_like(b_mu), _rho_grad(None, b_sig, b_rho, g_kl, k)
        if k is not None:  # ∂KL/∂μ = μ/p², in place
            g_w_mu.addcmul_(w_mu, k)
            if has_b:
                g_b_mu.addcmul_(b_mu, k)
        return g_x, g_w_mu, g_w_rho, g_b_mu, g_b_rho, None, None


def _rho_grad(
    g_var: Tensor | None, sigma: Tensor, rho: Tensor, g_kl: Tensor | None, k: Tensor | None
) -> Tensor:
    """∂/∂ρ of ``σ² · g_var`` (summed) plus ``g_kl`` × KL, σ = softplus(ρ), updating ``g_var``
    in place: ``(2σ g_var + g_kl (σ/p² − 1/σ)) sigmoid(ρ)`` with ``k = g_kl / p²``."""
    g = torch.zeros_like(sigma) if g_var is None else g_var.mul_(2.0)
    if g_kl is not None:
        g.add_(k).mul_(sigma).addcdiv_(g_kl.expand_as(sigma), sigma, value=-1.0)
    else:
        g.mul_(sigma)
    return g.mul_(torch.sigmoid(rho))
