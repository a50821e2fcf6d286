"""Spectral normalisation with a bound (Miyato et al. 2018; SNGP's form, Liu et al. 2020).

A :class:`SpectralNormLayer` wraps an ``nn.Linear`` or ``nn.Conv2d`` and uses the weight
``W / max(1, σ̂ / bound)``, where σ̂ is the largest singular value of W (a convolution's
weight reshaped to ``[out, in·kh·kw]``, as Miyato et al.) estimated by power iteration: each
forward in training mode runs ``iterations`` steps from the last singular vectors ``u``, ``v``
(buffers, saved with the network); in eval mode the stored vectors are used and nothing changes,
so a prediction is deterministic. σ̂ is differentiated through W with ``u``, ``v`` held fixed.
A weight whose norm is already below the bound is used unchanged (SNGP's ``c``, unlike
Miyato's division by σ̂ always).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class SpectralNormLayer(nn.Module):
    """``layer`` (``nn.Linear`` or ``nn.Conv2d``) with its weight's spectral norm held at most
    ``bound`` by ``iterations`` power-iteration steps per training forward."""

    u: Tensor
    v: Tensor
    bound: Tensor

    def __init__(
        self,
        layer: nn.Linear | nn.Conv2d,
        bound: float,
        iterations: int = 1,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(layer, nn.Linear | nn.Conv2d):
            raise TypeError(f"SpectralNormLayer wraps nn.Linear or nn.Conv2d, got {layer}")
        if bound <= 0:
            raise ValueError(f"the spectral norm bound must be > 0, got {bound}")
        self.layer = layer
        self.iterations = iterations
        w = self._matrix(layer.weight.detach())  # [out, in']
        u = torch.randn(w.shape[0], generator=generator).to(w)
        v = torch.randn(w.shape[1], generator=generator).to(w)
        self.register_buffer("u", F.normalize(u, dim=0, eps=1e-12))
        self.register_buffer("v", F.normalize(v, dim=0, eps=1e-12))
        self.register_buffer("bound", torch.tensor(float(bound), dtype=w.dtype))
        self.power_iteration(20)  # σ̂ near σ from the start (e.g. a trained weight, in eval)

    @staticmethod
    def _matrix(weight: Tensor) -> Tensor:
        return weight.reshape(weight.shape[0], -1)

    @torch.no_grad()
    def power_iteration(self, steps: int) -> None:
        """``steps`` steps of power iteration on W, updating ``u`` and ``v`` in place."""
        w = self._matrix(self.layer.weight)
        u, v = self.u, self.v
        for _ in range(steps):
            v = F.normalize(w.t() @ u, dim=0, eps=1e-12)
            u = F.normalize(w @ v, dim=0, eps=1e-12)
        self.u.copy_(u)
        self.v.copy_(v)

    def sigma(self) -> Tensor:
        """σ̂ = uᵀ W v with the stored vectors (differentiable in W)."""
        return self.u @ self._matrix(self.layer.weight) @ self.v

    def weight(self) -> Tensor:
        """The normalised weight ``W / max(1, σ̂ / bound)`` (W's shape)."""
        if self.training and self.iterations:
            self.power_iteration(self.iterations)
        w = self.layer.weight
        return w / torch.clamp(self.sigma() / self.bound, min=1.0)

    def forward(self, x: Tensor) -> Tensor:
        w, layer = self.weight(), self.layer
        if isinstance(layer, nn.Linear):
            return F.linear(x, w, layer.bias)
        out: Tensor = layer._conv_forward(x, w, layer.bias)
        return out


def spectral_normalize(
    net: nn.Module,
    bound: float,
    iterations: int,
    skip: nn.Module | None,
    conv: bool = True,
    seed: int = 0,
) -> list[SpectralNormLayer]:
    """Wrap every ``nn.Linear`` (and ``nn.Conv2d`` when ``conv``) of ``net`` but ``skip`` in a
    :class:`SpectralNormLayer`, in place; returns the new layers."""
    kinds = (nn.Linear, nn.Conv2d) if conv else (nn.Linear,)
    swaps = [(parent, name, child)
             for parent in net.modules() if not isinstance(parent, SpectralNormLayer)
             for name, child in parent.named_children()
             if type(child) in kinds and child is not skip]  # fmt: skip
    generator = torch.Generator().manual_seed(seed)
    layers = []
    for parent, name, child in swaps:
        assert isinstance(child, nn.Linear | nn.Conv2d)
        layer = SpectralNormLayer(child, bound, iterations, generator)
        setattr(parent, name, layer)
        layers.append(layer)
    return layers
