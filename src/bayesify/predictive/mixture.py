"""Questions to an equal-weight Gaussian mixture per data row: CDF, exact quantiles, draws.

A regression predictive from T Monte Carlo samples is, for every row n, the mixture
``(1/T) Σ_t N(means[t, n], std[t, n]²)``. These functions work on all rows at once; shapes are
``means, std [T, N]``. A component with ``std == 0`` is a point mass (its CDF a step), so a
mixture without noise is the empirical distribution of the sample means. Arithmetic is float64.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

#: quantile root finding stops when the last step is below this fraction of the row's bracket
QUANTILE_RTOL = 1e-12
QUANTILE_MAX_ITER = 200
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _components(means: Tensor, std: Tensor) -> tuple[Tensor, Tensor]:
    return means.to(torch.float64), torch.broadcast_to(std, means.shape).to(torch.float64)


def _cdf_pdf(m: Tensor, s: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
    """Mixture CDF and density at ``x [K, N]`` for components ``m, s [T, N]``: ``[K, N]`` each.

    Point masses (``s == 0``) add a step to the CDF and nothing to the density.
    """
    d = x[:, None, :] - m[None]  # [K, T, N]
    pos = s > 0
    safe = torch.where(pos, s, torch.ones_like(s))
    z = d / safe
    cdf = torch.where(pos, torch.special.ndtr(z), (d >= 0).to(d.dtype))
    pdf = torch.where(pos, torch.exp(-0.5 * z * z) * _INV_SQRT_2PI / safe, torch.zeros_like(z))
    return cdf.mean(1), pdf.mean(1)


def mixture_cdf(means: Tensor, std: Tensor, y: Tensor) -> Tensor:
    """P(Y ≤ y) under each row's mixture: ``y`` of shape ``[N]`` or ``[K, N]`` -> the same shape
    (float64)."""
    m, s = _components(means, std)
    y = torch.as_tensor(y, dtype=torch.float64, device=m.device)
    flat = torch.broadcast_to(y, (m.shape[1],)) if y.dim() <= 1 else y
    return _cdf_pdf(m, s, flat.reshape(-1, m.shape[1]))[0].reshape(flat.shape)


def mixture_quantile(means: Tensor, std: Tensor, q: Tensor) -> Tensor:
    """Exact mixture quantiles ``inf{x : F(x) ≥ q}`` for levels ``q [K]`` in (0, 1): ``[K, N]``.

    Root finding on the mixture CDF over all rows and levels at once: Newton steps kept inside a
    bracket, bisection where a step would leave it (or the density is zero, as at point masses).
    The bracket is exact: the mixture CDF averages its components', so the quantile lies between
    the smallest and largest component quantile ``means + std · Φ⁻¹(q)``. Iteration stops when
    every row's last step is below ``QUANTILE_RTOL`` times its initial bracket width (at most
    ``QUANTILE_MAX_ITER`` steps; bisection alone would need about 40 for that tolerance); a row
    whose components all agree is answered exactly without iterating.
    """
    m, s = _components(means, std)
    q = torch.as_tensor(q, dtype=torch.float64, device=m.device).reshape(-1, 1)  # [K, 1]
    comp = m[None] + s[None] * torch.special.ndtri(q)[:, :, None]  # [K, T, N]
    lo, hi = comp.min(1).values, comp.max(1).values  # F(lo) ≤ q ≤ F(hi); [K, N]
    tol = QUANTILE_RTOL * (hi - lo)
    x = comp.mean(1)  # start at the mean of the component quantiles
    for _ in range(QUANTILE_MAX_ITER):
        cdf, pdf = _cdf_pdf(m, s, x)
        below = cdf < q
        lo = torch.where(below, x, lo)
        hi = torch.where(below, hi, x)
        newton = x - (cdf - q) / pdf
        inside = torch.isfinite(newton) & (newton > lo) & (newton < hi)
        nxt = torch.where(inside, newton, 0.5 * (lo + hi))
        done = bool(((nxt - x).abs() <= tol).all())
        x = nxt
        if done:
            break
    return x


def mixture_sample(
    means: Tensor, std: Tensor, n: int, generator: torch.Generator | None = None
) -> Tensor:
    """``n`` independent draws from every row's mixture: ``[n, N]`` (dtype of ``means``).

    Each draw picks a component uniformly, then adds its Gaussian noise.
    """
    t, rows = means.shape
    std = torch.broadcast_to(std, means.shape)
    pick = torch.randint(t, (n, rows), generator=generator, device=means.device)  # [n, N]
    noise = torch.randn((n, rows), generator=generator, device=means.device, dtype=means.dtype)
    return means.gather(0, pick) + std.gather(0, pick) * noise
