"""The node-noise mixture posterior's training arithmetic (IBNN, Trinh et al.), as single
autograd nodes with their gradients written out.

On a small network a training step is bound by per-operation overhead, not arithmetic: the
plain autograd expressions of the noisy input ``x ∘ (μ_k + σ_k ε)`` (two row gathers and their
scatter-adds in the backward) and of the KL of every layer (a dozen operations per layer, each
with its backward) cost several times the deterministic network's step on a UCI-sized MLP.
Here the training draw of one layer is one node of a few operations, and the KL of all layers
is one node over their concatenated parameters.

Both are checked against autograd of the plain expressions (``tests/nn/test_mixture_posterior.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor


def _spatial(t: Tensor, dims: int) -> Tensor:
    """``[R, F]`` -> ``[R, F, 1, ...]`` with ``dims`` trailing singleton axes."""
    return t.view(*t.shape, *([1] * dims))


class _BlockNoiseInput(torch.autograd.Function):
    """``x ∘ z`` with ``z = μ_k + softplus(ρ_k) ε`` for rows laid out as ``[S, K, n]`` (repeat s,
    component k, row i: the mini-batch of ``K·n`` rows split evenly into contiguous blocks).

    Shapes: ``x [S·K·n, F, ...]``, ``mu``/``rho`` ``[K, F]``, ``eps [S·K·n, F]``.
    """

    @staticmethod
    def forward(ctx, x: Tensor, mu: Tensor, rho: Tensor, eps: Tensor, repeats: int) -> Tensor:  # noqa: ANN001
        k, f = mu.shape
        rows = eps.shape[0]
        sigma = F.softplus(rho)
        e = eps.view(repeats, k, rows // (repeats * k), f)
        z = torch.addcmul(mu.unsqueeze(1), sigma.unsqueeze(1), e).view(rows, f)  # [R, F]
        ctx.save_for_backward(x, rho, sigma, eps, z)
        ctx.repeats = repeats
        return x * _spatial(z, x.dim() - 2)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, ...]:  # noqa: ANN001
        x, rho, sigma, eps, z = ctx.saved_tensors
        k, f = rho.shape
        spatial = x.dim() - 2
        grad_x = grad * _spatial(z, spatial) if ctx.needs_input_grad[0] else None
        grad_mu = grad_rho = None
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            gz = grad * x
            if spatial:
                gz = gz.sum(tuple(range(2, x.dim())))  # [R, F]
            blocks = (ctx.repeats, k, gz.shape[0] // (ctx.repeats * k), f)
            if ctx.needs_input_grad[1]:
                grad_mu = gz.view(blocks).sum((0, 2))
            if ctx.needs_input_grad[2]:
                grad_sigma = (gz * eps).view(blocks).sum((0, 2))
                grad_rho = grad_sigma.mul_(torch.sigmoid(rho))
        return grad_x, grad_mu, grad_rho, None, None


def block_noise_input(x: Tensor, mu: Tensor, rho: Tensor, eps: Tensor, repeats: int) -> Tensor:
    """Noisy input ``x ∘ z`` for training rows in ``repeats`` copies of a mini-batch split evenly
    over the K components (row i of ``K·n`` uses component ``i // n``): one autograd node.

    ``x [R, F, ...]``, ``mu``/``rho`` ``[K, F]``, ``eps [R, F]`` standard normal;
    ``R = repeats · K · n``. Returns ``[R, F, ...]``.
    """
    k = mu.shape[0]
    if eps.shape[0] % (repeats * k):
        raise ValueError(f"{eps.shape[0]} rows do not split into {repeats} x {k} equal blocks")
    return _BlockNoiseInput.apply(x, mu, rho, eps, repeats)


class _MixtureMeanKL(torch.autograd.Function):
    """Σ_ℓ KL(N(m_ℓ, v_ℓ) ‖ N(1, s²)) over the columns of the concatenated ``mu``/``rho``
    ``[K, ΣF]`` of all layers, with ``m = mean_k μ_k`` and ``v = Σ_k σ_k² / K²``."""

    @staticmethod
    def forward(ctx, prior_std: float, *params: Tensor) -> Tensor:  # noqa: ANN001
        mus, rhos = params[0::2], params[1::2]
        mu, rho = torch.cat(mus, 1), torch.cat(rhos, 1)  # [K, ΣF]
        k = mu.shape[0]
        sigma = F.softplus(rho)
        mean_dev = mu.mean(0).sub_(1.0)  # m - 1, [ΣF]
        var = sigma.square().sum(0).div_(k * k)  # [ΣF]
        s2 = prior_std**2
        const = mu.shape[1] * (math.log(s2) - 1.0)
        kl = 0.5 * (const - var.log().sum() + (var.sum() + mean_dev.dot(mean_dev)) / s2)
        ctx.save_for_backward(rho, sigma, mean_dev, var)
        ctx.s2, ctx.widths = s2, [m.shape[1] for m in mus]
        return kl

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, ...]:  # noqa: ANN001
        rho, sigma, mean_dev, var = ctx.saved_tensors
        k = rho.shape[0]
        # ∂KL/∂μ_k = (m - 1) / (s² K);  ∂KL/∂ρ_k = (1/s² - 1/v) σ_k sigmoid(ρ_k) / K²
        grad_mu = (mean_dev * (grad / (ctx.s2 * k))).expand(k, -1)
        dv = var.reciprocal().neg_().add_(1.0 / ctx.s2).mul_(grad / (k * k))
        grad_rho = torch.sigmoid(rho).mul_(sigma).mul_(dv)
        out: list[Tensor | None] = [None]
        for gm, gr in zip(grad_mu.split(ctx.widths, 1), grad_rho.split(ctx.widths, 1), strict=True):
            out += [gm.contiguous(), gr.contiguous()]
        return tuple(out)


def mixture_mean_kl(pairs: Sequence[tuple[Tensor, Tensor]], prior_std: float) -> Tensor:
    """Σ over layers of KL(q̂_ℓ ‖ N(1, s²)) for ``(mu, rho)`` pairs ``[K, F_ℓ]`` with one K
    (Trinh et al. eq. 22–24: q̂ the Gaussian with the mixture's mean and variance): one
    autograd node. A scalar."""
    if not pairs:
        raise ValueError("mixture_mean_kl needs at least one (mu, rho) pair")
    if len({mu.shape[0] for mu, _ in pairs}) != 1:
        raise ValueError("mixture_mean_kl needs the same number of components in every layer")
    return _MixtureMeanKL.apply(prior_std, *(t for pair in pairs for t in pair))
