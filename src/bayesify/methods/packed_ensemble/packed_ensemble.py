"""Packed-Ensembles (Laurent, Lafage, Tartaglione, Daniel, Martinez, Bursuc & Franchi, ICLR
2023): an ensemble of M independent members in one network of grouped layers.

The caller's ``nn.Sequential`` of Linear/Conv2d/batch norm/pooling/activation layers is rebuilt
by :func:`~bayesify.nn.packed.pack_network`: every layer ``alpha`` times wider, cut into M
members of ``gamma`` groups each, so that no weight connects two members; the first layer reads
the shared input, the last gives each member the original outputs. The M members run in one
forward pass over the N rows. Their weights are drawn afresh (seed ``init_seed``): the method
is trained from scratch, and ``from_pretrained`` does not apply (a trained network's weights
have neither the packed widths nor independent members).

Training: the mean of the M members' losses on the same mini-batch, in one pass (their sum
scaled by 1/M, as every member's own loss).

Prediction: the members are the samples, T = M (:class:`~bayesify.methods.core.members.
MembersInOnePass`, as BatchEnsemble).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Self

import torch
from torch import Tensor, nn

from bayesify.methods.core.base import MethodConfig
from bayesify.methods.core.members import MembersInOnePass
from bayesify.nn.packed import Packing, member_network, members_first, pack_network
from bayesify.seeding import seeded


@dataclass(frozen=True)
class PackedEnsembleConfig(MethodConfig):
    """``members``: M; ``alpha``: every layer's width factor (the members share it: each is
    ``alpha / M`` of the original width); ``gamma``: groups per member in the hidden layers
    (fewer weights); ``init_seed``: the seed of the packed network's initial weights."""

    members: int = 4
    alpha: float = 2.0
    gamma: int = 1
    init_seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require(("members",), lambda v: v >= 2, ">= 2")
        self._require(("alpha",), lambda v: 0 < v < math.inf, "> 0")
        self._require(("gamma",), lambda v: v >= 1, ">= 1")


class PackedEnsemble(MembersInOnePass):
    """Packed-Ensembles: M independent members packed into one network of grouped layers,
    ``alpha`` times wider, trained together and predicted in one pass (the members are the
    samples, T = M)."""

    name = "packed-ensemble"
    Config = PackedEnsembleConfig
    config: PackedEnsembleConfig
    spread_hint = "the members agree: raise members, or lower alpha (smaller members vary more)"

    def _prepare(self, net: nn.Module) -> None:
        cfg = self.config
        with seeded(cfg.init_seed):
            self.packing: Packing = pack_network(net, cfg.members, cfg.alpha, cfg.gamma)

    def nll(self, out: Tensor, y: Tensor) -> Tensor:
        """The mean of the members' data terms: ``out [N, M*out]`` read as M members' outputs
        on the same N rows (the training objective and the validation loss)."""
        m = self.members
        each = members_first(out, m).flatten(0, 1)  # [M*N, out, ...]
        return super().nll(each, y.repeat(m, *(1,) * (y.dim() - 1)))

    def _members_forward(self, chunk: Tensor) -> Tensor:
        """One forward of the packed network over ``chunk [n, ...]``: ``[M, n, ...]``."""
        return members_first(self.net(chunk), self.members)

    def member(self, m: int) -> nn.Sequential:
        """Member ``m`` as a plain network with its exact weights (copies; eval mode)."""
        if not isinstance(m, int) or not 0 <= m < self.members:
            raise ValueError(f"member must be an int in [0, {self.members}), got {m!r}")
        return member_network(self.net, m, self.members).eval()

    def reference_samples(
        self, x: Tensor, samples: int, generator: torch.Generator | None = None
    ) -> Tensor:
        """The M members cut out as plain networks and run one after the other:
        ``[M, N, ...]`` (what the one packed pass must equal)."""
        x, _ = self._sample_inputs(x, samples, None, None)
        with torch.no_grad():
            return torch.stack([self.member(m)(x) for m in range(self.members)])

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any) -> Self:
        """Not for Packed-Ensembles: a one-line ``ValueError`` (see the module docstring)."""
        raise ValueError(
            "PackedEnsemble is trained from scratch: a trained network has neither the packed "
            "widths nor independent members; build PackedEnsemble(net) and call fit()"
        )
