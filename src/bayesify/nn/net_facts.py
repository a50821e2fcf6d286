"""What every prediction asks of a network, found once per network layout instead of once per
call: its modules, its stochastic layers, its deterministic prefix, the widest activation per
input row shape, and the parameter that gives its device and dtype.

Walking a small network with ``nn.Module.modules()`` costs tens of microseconds and one call
of ``Method.predict`` used to walk it about ten times (eval mode, stochastic layers, prefix,
widest activation, device, dtype, per-group bytes): on one image that was a third of the
call. :class:`NetFacts` walks the module tree once per call through ``_modules`` (a few
microseconds) and rebuilds the facts only when the walk finds other modules than last time
(a layer added, removed or swapped anywhere), so changes to the network are always seen.
Device and dtype are read from the first parameter found by that walk on every call (``.to``
moves parameters in place).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from bayesify.nn.stochastic import StochasticModule


def _walk(net: nn.Module) -> list[nn.Module]:
    """``net`` and its descendants, breadth first (repeats kept): a loop, not a recursion."""
    out = [net]
    for module in out:  # the list grows while it is read: every level in turn
        for child in module._modules.values():
            if child is not None:
                out.append(child)
    return out


@dataclass
class Facts:
    """One layout's facts. ``modules``: every module once, in ``net.modules()`` order;
    ``stochastic``: its :class:`StochasticModule` layers, in that order; ``prefix``: the
    leading children of an ``nn.Sequential`` that hold no stochastic layer (0 otherwise)."""

    walk: list[nn.Module]  # what :func:`_walk` found (kept alive: their ids stay unique)
    ids: list[int]  # their ids: the layout's signature
    modules: tuple[nn.Module, ...]
    stochastic: tuple[StochasticModule, ...]
    prefix: int
    widest: dict[tuple[int, ...], int] = field(default_factory=dict)


def _facts(net: nn.Module, walk: list[nn.Module], ids: list[int]) -> Facts:
    modules = tuple(net.modules())
    stochastic = tuple(m for m in modules if isinstance(m, StochasticModule))
    prefix = 0
    if isinstance(net, nn.Sequential):
        prefix = len(net)
        for i, child in enumerate(net):
            if any(isinstance(m, StochasticModule) for m in child.modules()):
                prefix = i
                break
    return Facts(walk, ids, modules, stochastic, prefix)


class NetFacts:
    """The cache of one network's :class:`Facts` (see the module docstring)."""

    def __init__(self) -> None:
        self._facts: Facts | None = None
        self.first_param: Tensor | None = None

    def of(self, net: nn.Module) -> Facts:
        """The facts of ``net`` as it is now (rebuilt if its modules changed); also sets
        :attr:`first_param` (None for a network without parameters)."""
        walk = _walk(net)
        facts = self._facts
        ids = list(map(id, walk))  # the cached facts hold the modules: no id is reused
        if facts is None or facts.ids != ids:
            facts = self._facts = _facts(net, walk, ids)
        self.first_param = None
        for m in facts.modules:
            for p in m._parameters.values():
                if p is not None:
                    self.first_param = p
                    return facts
        return facts

    @property
    def last(self) -> Facts | None:
        """The facts the latest :meth:`of` returned, without a new walk (None before any):
        for the steps of one call after the call has walked the modules once."""
        return self._facts

    @property
    def device(self) -> torch.device:
        """The device of the network's parameters (CPU without parameters), after :meth:`of`."""
        p = self.first_param
        return torch.device("cpu") if p is None else p.device

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the network's parameters (torch's default without), after :meth:`of`."""
        p = self.first_param
        return torch.get_default_dtype() if p is None else p.dtype


def prefix_of(net: nn.Module, facts: Facts) -> int:
    """:func:`~bayesify.nn.folding.deterministic_prefix` from the cached facts: 0 while the
    Sequential has forward hooks of its own (the split would bypass them)."""
    if net._forward_hooks or net._forward_pre_hooks:
        return 0
    return facts.prefix
