"""A linear layer whose weights are drawn per sample group from a pluggable distribution.

:class:`SampledLinear` is an ``nn.Linear`` (same ``weight [out, in]`` and ``bias [out]``) that,
inside :func:`~bayesify.nn.sampling`, applies its own weights to each sample group: at the
start of a block it asks its ``posterior`` for T weight matrices and biases, and a forward over
``[T*n, in]`` rows is one batched matrix product ``[T, n, in] @ [T, in, out]``. Outside sampling
it is the plain layer with the stored (e.g. MAP) weights.

The distribution is any ``nn.Module`` with

    draw(groups, generator) -> (weights [G, out, in], biases [G, out] or None)

(see :class:`WeightPosterior`); its tensors are buffers or parameters of that module, so they
travel in the network's ``state_dict`` and in bundles. Laplace's Gaussians (full, Kronecker
factored, diagonal) are such modules; so could be a normalising flow over the last layer.

Put as a network's last layer, the body before it holds no stochastic layer, so the chunked
pass runs the body once per data row (:func:`~bayesify.nn.folding.deterministic_prefix`) and
only the last layer sees the T groups.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bayesify.nn.stochastic import SamplingPlan, StochasticModule, generator_device


@runtime_checkable
class WeightPosterior(Protocol):
    """What :class:`SampledLinear` asks its distribution for."""

    def draw(self, groups: int, generator: torch.Generator | None) -> tuple[Tensor, Tensor | None]:
        """``groups`` weight matrices ``[G, out, in]`` and biases ``[G, out]`` (or None for a
        layer without bias), drawn from ``generator`` (on its device)."""
        ...


class SampledLinear(StochasticModule):
    """``nn.Linear`` with per-group weights from ``posterior`` while sampling:
    ``[N, in]`` -> ``[N, out]`` (``[T*n, in]`` -> ``[T*n, out]`` in a block of T groups)."""

    _plain_attrs = StochasticModule._plain_attrs | {"_block", "_draw"}

    def __init__(self, linear: nn.Linear, posterior: nn.Module | None = None) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = nn.Parameter(linear.weight.detach().clone())
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone())
        self.posterior = posterior
        self._block: tuple[Tensor, Tensor | None] | None = None  # the block's T draws
        self._draw: tuple[Tensor, Tensor | None] | None = None  # the selected groups' draws

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, bias={self.bias is not None}"

    def begin_sampling(self, plan: SamplingPlan) -> None:
        """Draw T weights from ``plan``'s entry for this layer (a ``(weights, biases)`` pair)
        or, without one, from ``posterior`` with the plan's generator."""
        super().begin_sampling(plan)
        given = plan.draw_for(self)
        if given is None:
            if self.posterior is None:
                raise RuntimeError("SampledLinear has no posterior to draw its weights from")
            given = self.posterior.draw(plan.samples, plan.generator)
        w, b = given
        if w.shape != (plan.samples, self.out_features, self.in_features):
            raise ValueError(
                f"SampledLinear needs weights [{plan.samples}, {self.out_features}, "
                f"{self.in_features}], got {list(w.shape)}"
            )
        w = w.to(self.weight)
        b = None if b is None else b.to(self.weight)
        self._block = self._draw = (w, b)

    def select_groups(self, start: int, stop: int) -> None:
        """The next passes use the draws of groups ``start .. stop-1``."""
        if self._block is None:
            raise RuntimeError("select_groups needs an active sampling block")
        super().select_groups(start, stop)
        w, b = self._block
        self._draw = (w[start:stop], None if b is None else b[start:stop])

    def end_sampling(self) -> None:
        super().end_sampling()
        self._block = self._draw = None

    def group_bytes(self) -> int:
        """One weight matrix and bias per group (float64 temporaries of a draw included)."""
        numel = self.out_features * (self.in_features + 1)
        return 2 * 8 * numel + super().group_bytes()

    def forward(self, x: Tensor) -> Tensor:
        if not self.stochastic or self._draw is None:
            return F.linear(x, self.weight, self.bias)
        w, b = self._draw  # [G, out, in], [G, out]
        groups = w.shape[0]
        if x.shape[0] % groups:
            raise ValueError(f"{x.shape[0]} rows do not split into {groups} sample groups")
        # float64 products: the result does not depend on how many groups and rows one call
        # holds (float32 kernels sum in an order that does), so chunking leaves it unchanged
        rows = x.reshape(groups, -1, self.in_features).double()  # [G, n*, in]
        wt = w.double().transpose(1, 2)
        bias = None if b is None else b.double().unsqueeze(1)
        out = torch.bmm(rows, wt) if bias is None else torch.baddbmm(bias, rows, wt)
        return out.to(x.dtype).reshape(*x.shape[:-1], self.out_features)


def last_linear(net: nn.Module) -> tuple[nn.Module, str, nn.Linear]:
    """The last ``nn.Linear`` of ``net`` in registration order, as ``(parent, name, layer)``;
    a ``ValueError`` when there is none."""
    found = [(parent, name, child)
             for parent in net.modules()
             for name, child in parent.named_children()
             if isinstance(child, nn.Linear)]  # fmt: skip
    if not found:
        raise ValueError("the network has no nn.Linear layer to make the sampled last layer of")
    return found[-1]


def sample_last_linear(net: nn.Module, posterior: nn.Module | None = None) -> SampledLinear:
    """Replace the last ``nn.Linear`` of ``net`` (in place) by a :class:`SampledLinear` with the
    same weights drawing from ``posterior``; returns the new layer."""
    parent, name, layer = last_linear(net)
    new = SampledLinear(layer, posterior).to(layer.weight.device).train(layer.training)
    setattr(parent, name, new)
    return new


def draw_on(generator: torch.Generator | None, shape: tuple[int, ...]) -> Tensor:
    """Standard normal draws of ``shape`` from ``generator`` on its device (CPU for the global
    one), as float64: the one way laplace-style posteriors draw their ``z``. Drawn in float32
    (torch's vectorised sampler; its float64 normal costs about 70 times more on CPU)."""
    dev = generator_device(generator)
    return torch.randn(shape, generator=generator, device=dev, dtype=torch.float32).double()
