"""SWAG's stochastic network: the trained network and SWAG's posterior as buffers; each
sample group runs with its own drawn weights (:class:`SwagNet`, behind :mod:`.swag`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from bayesify.methods.swag.moments import draw_weights, parameter_layout, unflatten
from bayesify.nn.stacked import batchnorm_layers, batchnorm_statistics, stacked_call
from bayesify.nn.stochastic import SamplingPlan, StochasticModule
from bayesify.options import SwagBatchNorm

#: bytes of drawn weights one stacked forward holds (groups beyond run in further ranges)
WEIGHT_BYTES = 2**27
#: rows (groups × ``bn_rows``) of one stacked pass that recomputes batch-norm statistics
STATISTICS_ROWS = 2048


@dataclass(frozen=True, eq=False)
class SwagDraw:
    """One sampling block's draws: a seed ``[T]`` and a member ``[T]`` per sample group."""

    seeds: Tensor
    members: Tensor


class SwagNet(StochasticModule):
    """The trained network (``base``, holding member 0's SWA mean) and SWAG's posterior as
    buffers: ``mean``/``sq_mean [M, P]``, ``deviations [M, K, P]``, ``counts [M]`` and the
    training rows ``bn_inputs [R, ...]`` batch norm is recomputed on. Outside sampling it is
    ``base``; inside, group g of its rows runs with the weights its :class:`SwagDraw` gives."""

    mean: Tensor
    sq_mean: Tensor
    deviations: Tensor
    bn_inputs: Tensor
    counts: Tensor

    def __init__(self, base: nn.Module, scale: float, batch_norm: SwagBatchNorm) -> None:
        super().__init__()
        self.base = base
        self.scale = scale
        self.batch_norm = batch_norm
        for name in ("mean", "sq_mean", "deviations", "bn_inputs"):
            self.register_buffer(name, torch.zeros(0))  # sized when collected or loaded
        self.register_buffer("counts", torch.zeros(0, dtype=torch.long))
        self._draw: SwagDraw | None = None
        self._range = (0, 0)
        self._weights: tuple[dict[str, Tensor], dict[str, Tensor], int | None] | None = None
        self._swa_key: tuple[int, ...] | None = None
        self._swa_stats: dict[str, Tensor] = {}

    @property
    def collected(self) -> bool:
        return self.mean.dim() == 2 and len(self.mean) > 0

    def begin_sampling(self, plan: SamplingPlan) -> None:
        super().begin_sampling(plan)
        draw = plan.draw_for(self)
        if not isinstance(draw, SwagDraw):
            raise RuntimeError("SwagNet needs a SwagDraw in the sampling block (SWAG gives one)")
        if not self.collected:
            raise RuntimeError("SWAG has collected no moments: call fit() or from_pretrained()")
        self._draw, self._range, self._weights = draw, (0, plan.samples), None

    def select_groups(self, start: int, stop: int) -> None:
        super().select_groups(start, stop)
        self._range, self._weights = (start, stop), None

    def end_sampling(self) -> None:
        super().end_sampling()
        self._draw, self._weights = None, None

    def group_bytes(self) -> int:
        """A seed and a member index per group (the weights are rebuilt range by range)."""
        return 16

    def forward(self, x: Tensor) -> Tensor:
        if not self.stochastic or self._draw is None:
            y: Tensor = self.base(x)
            return y
        if self._weights is None:
            self._weights = self.group_weights(*self._range)
        params, buffers, buffer_dim = self._weights
        g = self.groups
        xs = x.reshape(g, len(x) // g, *x.shape[1:])  # [G, n, ...]
        out = stacked_call(self.base, params, buffers, xs, x_dim=0, buffer_dim=buffer_dim)
        return out.reshape(len(x), *out.shape[2:])

    def group_weights(
        self, start: int, stop: int
    ) -> tuple[dict[str, Tensor], dict[str, Tensor], int | None]:
        """Parameters ``{name: [G, ...]}`` of groups ``start .. stop-1``, the buffers to run
        them with and their stacking axis (0: per group, None: shared)."""
        assert self._draw is not None
        seeds, members = self._draw.seeds[start:stop], self._draw.members[start:stop]
        theta = self.draw(seeds, members)
        params = unflatten(theta, parameter_layout(self.base))
        buffers = dict(self.base.named_buffers())
        if not batchnorm_layers(self.base) or len(self.bn_inputs) == 0:
            return params, buffers, None
        if self.batch_norm is SwagBatchNorm.SWA:
            stats = {k: v[members.to(v.device)] for k, v in self.swa_statistics().items()}
        else:
            stats = self.statistics(params)
        g = len(seeds)
        stacked = {k: v.expand(g, *v.shape) for k, v in buffers.items()}
        return params, {**stacked, **stats}, 0

    def draw(self, seeds: Tensor, members: Tensor) -> Tensor:
        """Flat weights ``[G, P]`` for the groups with ``seeds`` and ``members``."""
        return draw_weights(self.mean, self.sq_mean, self.deviations, self.counts, seeds,
                            members.to(self.mean.device), self.scale)  # fmt: skip

    def statistics(self, params: dict[str, Tensor]) -> dict[str, Tensor]:
        """Batch-norm running statistics ``[G, C]`` per weight setting ``params [G, ...]`` on
        ``bn_inputs``, in ranges of at most :data:`STATISTICS_ROWS` rows per pass."""
        g = len(next(iter(params.values())))
        per = max(1, STATISTICS_ROWS // len(self.bn_inputs))
        buffers = dict(self.base.named_buffers())
        parts = [
            batchnorm_statistics(
                self.base, {k: v[a : a + per] for k, v in params.items()}, buffers, self.bn_inputs
            )  # fmt: skip
            for a in range(0, g, per)
        ]
        return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}

    def swa_statistics(self) -> dict[str, Tensor]:
        """Each member's SWA-mean statistics ``[M, C]`` (computed once per posterior)."""
        key = (self.mean.data_ptr(), self.mean._version, self.bn_inputs.data_ptr(),
               self.bn_inputs._version)  # fmt: skip
        if key != self._swa_key:
            self._swa_stats = self.statistics(unflatten(self.mean, parameter_layout(self.base)))
            self._swa_key = key
        return self._swa_stats
