"""A bound on a layer's spectral norm: Miyato et al. (2018)'s spectral normalisation with a bound
``c``, as SNGP (Liu et al. 2020) and DDU (Mukhoti et al. 2023) use it. The weight W is used as
``W / max(1, σ̂/c)``, σ̂ its largest singular value estimated by power iteration, so the layer's
Lipschitz constant stays at most about ``c`` while a weight already below it is used unchanged.

:class:`SpectralBound` is a ``torch.nn.utils.parametrize`` parametrization of a layer's
``weight`` (the layer keeps its type: an ``nn.Linear`` stays one). Its buffers, saved with the
network: the power iteration's vectors ``_u``, ``_v`` and the layer's own bound ``bound`` (c,
unless :func:`raise_bounds_to_norms` raised it to the trained weight's norm). In training mode
each use of the weight runs ``iterations`` power-iteration steps from the stored vectors; in eval
mode they are used unchanged, so a prediction is deterministic. σ̂ = uᵀWv is differentiated
through W with ``u``, ``v`` held fixed. A kernel ``[out, in, k, k]`` (any weight of more than two
dimensions) is bounded as the matrix ``[out, in·k·k]``, as Miyato et al. and torch's
``spectral_norm`` do.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils import parametrize

#: power-iteration steps run when a bound is put on a weight, so σ̂ starts near σ (torch's count)
START_STEPS = 15
#: steps run before a bound is raised to a trained weight's norm
RAISE_STEPS = 50


class SpectralBound(nn.Module):
    """``W / max(1, σ̂(W)/bound)``, σ̂ by power iteration on W as a matrix ``[out, -1]``.

    ``weight``: the weight it will bound (its shape, dtype and device; a meta tensor skips the
    starting steps); ``generator``: the draw of the starting vectors."""

    _u: Tensor
    _v: Tensor
    bound: Tensor

    def __init__(
        self,
        weight: Tensor,
        bound: float,
        iterations: int = 1,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if weight.dim() < 2:
            raise ValueError(f"a spectral bound needs a weight of 2 or more dimensions, got "
                             f"shape {list(weight.shape)}")  # fmt: skip
        if not bound > 0:
            raise ValueError(f"the spectral norm bound must be > 0, got {bound}")
        if iterations < 0:
            raise ValueError(f"power iterations must be >= 0, got {iterations}")
        self.iterations = int(iterations)
        rows, cols = weight.shape[0], weight[0].numel()
        u = F.normalize(torch.randn(rows, generator=generator), dim=0, eps=1e-12)
        v = F.normalize(torch.randn(cols, generator=generator), dim=0, eps=1e-12)
        self.register_buffer("_u", u.to(weight))
        self.register_buffer("_v", v.to(weight))
        self.register_buffer("bound", torch.tensor(float(bound)).to(weight))
        if weight.device.type != "meta":
            self.power_iteration(weight, START_STEPS)

    @torch.no_grad()
    def power_iteration(self, weight: Tensor, steps: int) -> None:
        """``steps`` steps on ``weight`` (W's shape), updating ``_u`` and ``_v`` in place."""
        mat = weight.detach().flatten(1)
        for _ in range(steps):
            self._v.copy_(F.normalize(mat.mT @ self._u, dim=0, eps=1e-12))
            self._u.copy_(F.normalize(mat @ self._v, dim=0, eps=1e-12))

    def sigma(self, weight: Tensor) -> Tensor:
        """σ̂ = uᵀWv with the stored vectors: a scalar that carries W's gradient."""
        u, v = self._u, self._v
        if self.training:  # the next training use updates them in place: keep these values
            u, v = u.clone(), v.clone()
        return u @ (weight.flatten(1) @ v)

    def forward(self, weight: Tensor) -> Tensor:
        if self.training and self.iterations > 0:
            self.power_iteration(weight, self.iterations)
        return weight / torch.clamp(self.sigma(weight) / self.bound, min=1.0)

    @torch.no_grad()
    def raise_bound(self, weight: Tensor, steps: int = RAISE_STEPS) -> None:
        """Raise ``bound`` to σ̂ of ``weight`` (after ``steps`` steps) where σ̂ is above it, so
        the weight is used unscaled."""
        self.power_iteration(weight, steps)
        self.bound.copy_(torch.maximum(self.bound, self.sigma(weight) * (1 + 1e-6)))


def bound_spectral_norms(
    layers: Sequence[nn.Module], bound: float, iterations: int, seed: int = 0
) -> list[SpectralBound]:
    """Put a :class:`SpectralBound` on the ``weight`` of every module of ``layers`` (in place;
    the starting vectors drawn from ``seed``, layer after layer); returns them in that order."""
    generator = torch.Generator().manual_seed(seed)
    bounds = []
    for layer in layers:
        weight = getattr(layer, "weight", None)
        if not isinstance(weight, Tensor):
            raise TypeError(f"a spectral bound goes on a layer's weight; {layer} has none")
        spectral = SpectralBound(weight.detach(), bound, iterations, generator)
        parametrize.register_parametrization(layer, "weight", spectral)
        bounds.append(spectral)
    return bounds


def spectral_bounds(net: nn.Module) -> list[SpectralBound]:
    """The :class:`SpectralBound` parametrizations of ``net``, in module order."""
    return [m for m in net.modules() if isinstance(m, SpectralBound)]


def raise_bounds_to_norms(net: nn.Module, steps: int = RAISE_STEPS) -> None:
    """Raise every bound of ``net`` to its layer's weight's norm where that is above it
    (:meth:`SpectralBound.raise_bound`): a trained network's weights are then used as trained."""
    for module in net.modules():
        if not parametrize.is_parametrized(module, "weight"):
            continue
        chains = module.parametrizations
        assert isinstance(chains, nn.ModuleDict)
        chain = chains["weight"]
        assert isinstance(chain, parametrize.ParametrizationList)
        weight = chain.original
        with torch.no_grad():
            for step in chain:
                if isinstance(step, SpectralBound):
                    step.raise_bound(weight, steps)
                weight = step(weight)
