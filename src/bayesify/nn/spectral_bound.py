"""A soft bound on a layer's spectral norm (Miyato et al. 2018 as DDU uses it): the weight is
divided by ``max(1, σ̂/c)``, σ̂ the largest singular value estimated by power iteration, so the
layer's Lipschitz constant stays at most about ``c`` while layers already below it are left as
they are.

:class:`SpectralBound` is a ``torch.nn.utils.parametrize`` parametrization: in training mode each
forward runs ``iterations`` power-iteration steps on the stored vectors ``u``, ``v`` (buffers,
saved with the network); in eval mode it uses them unchanged, so predictions are deterministic.
A convolution's kernel ``[out, in, k, k]`` is bounded as the matrix ``[out, in·k·k]``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils import parametrize


class SpectralBound(nn.Module):
    """``W / max(1, σ̂(W)/c)``, σ̂ by power iteration on the weight as a matrix ``[out, -1]``."""

    _u: Tensor
    _v: Tensor

    def __init__(
        self, weight: Tensor, coefficient: float, iterations: int, generator: torch.Generator
    ) -> None:
        super().__init__()
        self.coefficient = float(coefficient)
        self.iterations = int(iterations)
        rows, cols = weight.shape[0], weight[0].numel()
        u = F.normalize(torch.randn(rows, generator=generator), dim=0)
        v = F.normalize(torch.randn(cols, generator=generator), dim=0)
        self.register_buffer("_u", u.to(weight))
        self.register_buffer("_v", v.to(weight))
        if weight.device.type != "meta":  # start near the top singular vectors, as torch does
            self._power_iteration(weight.detach().flatten(1), 15)

    @torch.no_grad()
    def _power_iteration(self, mat: Tensor, steps: int) -> None:
        for _ in range(steps):
            self._v.copy_(F.normalize(mat.mT @ self._u, dim=0, eps=1e-12))
            self._u.copy_(F.normalize(mat @ self._v, dim=0, eps=1e-12))

    def sigma(self, weight: Tensor) -> Tensor:
        """σ̂ = uᵀ W v with the stored vectors (a scalar that carries W's gradient)."""
        mat = weight.flatten(1)
        u, v = self._u, self._v
        if self.training:  # the vectors were updated in place: autograd needs the values used
            u, v = u.clone(), v.clone()
        return u @ (mat @ v)

    def forward(self, weight: Tensor) -> Tensor:
        if self.training and self.iterations > 0:
            self._power_iteration(weight.detach().flatten(1), self.iterations)
        return weight / torch.clamp(self.sigma(weight) / self.coefficient, min=1.0)


def bound_spectral_norms(
    layers: Sequence[nn.Module], coefficient: float, iterations: int, seed: int = 0
) -> None:
    """Put a :class:`SpectralBound` on the ``weight`` of every module of ``layers`` (in place;
    the power-iteration starts drawn from ``seed``)."""
    generator = torch.Generator().manual_seed(seed)
    for layer in layers:
        weight = layer.weight
        assert isinstance(weight, Tensor)
        bound = SpectralBound(weight, coefficient, iterations, generator)
        parametrize.register_parametrization(layer, "weight", bound)


def spectral_bounds(net: nn.Module) -> list[SpectralBound]:
    """The :class:`SpectralBound` parametrizations of ``net``, in module order."""
    return [m for m in net.modules() if isinstance(m, SpectralBound)]
