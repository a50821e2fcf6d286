"""Input corruptions for robustness sweeps (Trinh et al. §3.5): Gaussian mixing, salt-and-pepper.

Both take images ``x [N, ...]`` and return a corrupted copy (``x`` is never changed); randomness
comes from an explicit ``torch.Generator``.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["gaussian_mix", "salt_and_pepper"]


def _check_level(value: float, name: str) -> float:
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")
    return value


def gaussian_mix(x: Tensor, gamma: float, *, generator: torch.Generator | None = None) -> Tensor:
    """``x̂ = (1 − γ) x + γ ε`` with ``ε ~ N(0, I)`` of ``x``'s shape: ``γ = 0`` is the clean
    image, ``γ = 1`` pure standard-normal noise (Trinh et al., eq. 28)."""
    gamma = _check_level(gamma, "gamma")
    eps = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)
    return (1.0 - gamma) * x + gamma * eps


def salt_and_pepper(
    x: Tensor,
    p: float,
    *,
    low: float = 0.0,
    high: float = 1.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Each element of ``x`` becomes ``low`` or ``high`` (equally likely) with probability ``p``
    and stays as it is otherwise. ``low``/``high``: black and white in ``x``'s units (0 and 1
    for pixels in [0, 1]; the normalised values for standardised images)."""
    p = _check_level(p, "p")
    u = torch.rand(x.shape, generator=generator, device=x.device)
    salt = torch.rand(x.shape, generator=generator, device=x.device) < 0.5
    noise = torch.where(salt, torch.full_like(x, high), torch.full_like(x, low))
    return torch.where(u < p, noise, x)
