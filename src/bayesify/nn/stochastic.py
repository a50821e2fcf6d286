"""Stochastic layers that know the sample axis, and the one switch that turns them on.

A prediction with T samples is one forward pass over ``T*N`` rows: the input ``[N, ...]`` is
repeated to ``[T*N, ...]`` (group t = rows ``t*N .. t*N+N-1``), every stochastic layer draws its
randomness per group, and the output is folded back to ``[T, N, ...]`` (:mod:`bayesify.nn.folding`).

A contiguous range of groups can run alone: ``select_groups(model, start, stop)`` makes every
stochastic layer behave as groups ``start .. stop-1`` of the current sampling block (the same
draws those groups get in the full pass). The reference loop of T passes uses the range
``(t, t + 1)`` in pass t (:func:`reference_loop`); prediction chunks over T with it when T alone
exceeds the row budget.

Stochastic mode is a declared switch, independent of ``.train()`` / ``.eval()``: ``.eval()`` never
turns sampling off, and turning sampling on never puts other layers in training mode.

What a layer needs from its caller for one block (the number of groups, the generator, and
per-layer draws such as MCBN's bank rows) is handed to it as a :class:`SamplingPlan` argument of
:meth:`StochasticModule.begin_sampling`; no method writes settings on a layer for it to read back.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor, nn


@dataclass(frozen=True, eq=False)
class SamplingPlan:
    """What one sampling block hands every stochastic layer: ``samples`` groups, the
    ``generator`` to draw from, and ``draws``, per layer, what that layer is to use instead of
    (or to steer) its own draws (e.g. MCBN's bank rows or statistics model; the layer's class
    says what it accepts). Layers without an entry draw on their own."""

    samples: int
    generator: torch.Generator | None = None
    draws: Mapping[nn.Module, Any] = field(default_factory=dict)

    def draw_for(self, layer: nn.Module) -> Any:
        """This layer's entry of ``draws``, or None."""
        return self.draws.get(layer)


class StochasticModule(nn.Module):
    """Base for layers whose randomness is drawn per sample group.

    Subclasses read ``self.stochastic`` and ``self.groups`` (the groups in the current pass) in
    ``forward``, draw what they need per group in :meth:`begin_sampling`, which :func:`sampling`
    calls before the pass, and restrict those draws to a range in :meth:`select_groups`.
    """

    #: attributes that are never parameters, buffers or modules: set without
    #: ``nn.Module.__setattr__``'s checks (several per layer on every call)
    _plain_attrs: ClassVar[frozenset[str]] = frozenset({"stochastic", "groups", "block_samples"})

    def __init__(self) -> None:
        super().__init__()
        self.stochastic = False
        self.groups = 1
        self.block_samples = 0  # groups of the current sampling block (0: none)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._plain_attrs:
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    def begin_sampling(self, plan: SamplingPlan) -> None:
        """Prepare randomness for ``plan.samples`` groups (override when draws are per group)."""
        self.groups = plan.samples
        self.block_samples = plan.samples

    def select_groups(self, start: int, stop: int) -> None:
        """Behave as groups ``start .. stop-1`` of the current sampling block, alone (override
        to slice per-group draws, calling this too)."""
        if not 0 <= start < stop <= self.block_samples:
            raise ValueError(
                f"group range [{start}, {stop}) is not inside the {self.block_samples} groups "
                "of the current sampling block"
            )
        self.groups = stop - start

    def end_sampling(self) -> None:
        """Forget per-pass state."""
        self.groups = 1
        self.block_samples = 0

    def group_bytes(self) -> int:
        """Bytes :meth:`begin_sampling` holds (or briefly needs) per sample group: what a
        sampling block of T groups costs before any forward, for the limit on one call."""
        return 0


def generator_device(generator: torch.Generator | None) -> torch.device:
    """Where draws from ``generator`` must be made (torch ties a generator to one device); the
    default generator draws on CPU. Per-group draws are made there and then moved."""
    return torch.device("cpu") if generator is None else generator.device


def stochastic_modules(model: nn.Module) -> list[StochasticModule]:
    """All stochastic layers of ``model`` in registration order."""
    return [m for m in model.modules() if isinstance(m, StochasticModule)]


def group_bytes(model: nn.Module, layers: Sequence[StochasticModule] | None = None) -> int:
    """Bytes per sample group that the stochastic layers of ``model`` draw when a sampling
    block begins (see :meth:`StochasticModule.group_bytes`). ``layers``: those layers when the
    caller keeps them (a walk saved)."""
    if layers is None:
        layers = stochastic_modules(model)
    return sum(m.group_bytes() for m in layers)


def set_stochastic(model: nn.Module, enabled: bool) -> None:
    """Turn every stochastic layer of ``model`` on or off at once."""
    for m in stochastic_modules(model):
        m.stochastic = enabled


@contextmanager
def sampling(
    model: nn.Module,
    samples: int,
    generator: torch.Generator | None = None,
    draws: Mapping[nn.Module, Any] | None = None,
    layers: Sequence[StochasticModule] | None = None,
) -> Iterator[None]:
    """Within the block, forward passes over ``samples * N`` rows draw per-group randomness.

    ``draws``: per stochastic layer, what it is handed for this block (see
    :class:`SamplingPlan`); the layers begin in registration order, drawing from ``generator``.
    ``layers``: :func:`stochastic_modules` of ``model`` when the caller keeps them.
    """
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    plan = SamplingPlan(samples, generator, draws or {})
    if layers is None:
        layers = stochastic_modules(model)
    previous = [m.stochastic for m in layers]
    try:
        for m in layers:
            m.stochastic = True
            m.begin_sampling(plan)
        yield
    finally:  # also when a layer refuses its plan: every layer is left as it was
        for m, was in zip(layers, previous, strict=True):
            m.end_sampling()
            m.stochastic = was


def select_groups(model: nn.Module, start: int, stop: int) -> None:
    """Inside :func:`sampling`, make every stochastic layer of ``model`` behave as groups
    ``start .. stop-1`` alone: a pass over ``(stop - start) * n`` rows then gets exactly the
    draws of those groups in the full pass (row counts restart at data row 0)."""
    for m in stochastic_modules(model):
        m.select_groups(start, stop)


def reference_loop(
    model: nn.Module, x: Tensor, samples: int, generator: torch.Generator | None
) -> Tensor:
    """The plain loop of T passes over ``x [N, ...]`` with the draws a one-pass
    ``sampling(model, T, generator)`` would make: group t alone in pass t. ``[T, N, ...]``."""
    outs = []
    with sampling(model, samples, generator):
        for t in range(samples):
            select_groups(model, t, t + 1)
            outs.append(model(x))
    return torch.stack(outs)
