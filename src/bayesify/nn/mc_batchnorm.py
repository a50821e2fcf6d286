"""Monte Carlo batch normalisation (Teye et al. 2018) as a drop-in for ``BatchNorm1d/2d/3d``.

Outside sampling the layer is an ordinary batch norm (batch statistics in ``.train()``, running
statistics in ``.eval()``). Inside :func:`bayesify.nn.sampling` each sample group t is normalised
with the statistics of one training mini-batch: row ``rows[t]`` of a statistics bank
``[T_bank, C]`` recorded once by :meth:`MCBatchNorm.recording`.

With :attr:`Statistics.GAUSSIAN` the per-group statistics are drawn instead from their
large-sample law given the population statistics (Teye et al. appendix; Shekhovtsov & Flach
§3.1; Mukhoti et al.): mean ~ N(μ, σ²/n), variance ~ σ²·χ²(n−1)/n (the biased variance batch
norm normalises with, as in the bank), with μ, σ² the running statistics and
n = effective batch size × spatial size (the values per channel a batch averages over). No
training data is needed at prediction; n is a continuous knob.

Which of the two, the bank rows and the effective batch size are handed to the layer per
sampling block as its entry of the block's :class:`~bayesify.nn.stochastic.SamplingPlan`: a
:class:`StatisticsPlan`, or :class:`GroupStatistics` to normalise with given statistics. Either
way the per-group statistics ``[T, C]`` are chosen once per sampling block (in
``begin_sampling``); ``select_groups(start, stop)`` uses rows ``start .. stop-1`` of them, so a
range of groups run alone is normalised exactly as in the full pass.

A bank plan with ``row_draw`` (a :class:`~bayesify.nn.bank_draw.BankRowDraw`) instead gives every
(sample group, data row) its own bank row: the layer counts the data rows it has seen since the
groups were selected, as the row-noise layers do, so chunking and ranges of groups replay it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from bayesify.nn.bank_draw import BankRowDraw
from bayesify.nn.stochastic import SamplingPlan, StochasticModule, generator_device
from bayesify.options import Statistics, parse_option


@dataclass(frozen=True, eq=False)
class StatisticsPlan:
    """How :class:`MCBatchNorm` layers choose their per-group statistics in one sampling block:
    bank rows ``rows [T]`` shared by every data row, or ``row_draw``, bank rows per data row
    (``BANK``; the same rows for every layer, as in Teye et al.'s Algorithm 1), or draws from
    the Gaussian model with effective batch size ``effective_batch_size`` (``GAUSSIAN``; each
    layer draws from the block's generator)."""

    statistics: Statistics = Statistics.BANK
    rows: Tensor | None = None
    effective_batch_size: float | None = None
    row_draw: BankRowDraw | None = None

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "statistics", parse_option(Statistics, self.statistics, option="statistics")
        )


@dataclass(frozen=True, eq=False)
class GroupStatistics:
    """Given per-group statistics for one :class:`MCBatchNorm` layer: mean and biased variance,
    ``[T, C]`` each."""

    mean: Tensor
    var: Tensor


class MCBatchNorm(StochasticModule):
    """Batch norm whose statistics are drawn per sample group from a bank of mini-batch stats."""

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        min_dims: int = 2,
    ) -> None:
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.min_dims = min_dims
        if affine:
            self.weight = nn.Parameter(torch.ones(num_features))
            self.bias = nn.Parameter(torch.zeros(num_features))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        # values per channel per input row (H*W for 2-d maps), seen in the last ordinary forward
        self.register_buffer("spatial_size", torch.tensor(0, dtype=torch.long))
        # the statistics bank: biased batch mean / variance of T_bank training mini-batches
        self.register_buffer("bank_mean", torch.zeros(0, num_features))
        self.register_buffer("bank_var", torch.zeros(0, num_features))
        self._recorded: list[tuple[Tensor, Tensor]] | None = None
        self._block_draw: tuple[Tensor, Tensor] | None = None  # ([T, C] mean, [T, C] var)
        self._draw: tuple[Tensor, Tensor] | None = None  # the groups now in use ([G, C] each)
        self._row_draw: BankRowDraw | None = None  # per-row bank rows of this block
        self._row_affine: tuple[Tensor, Tensor] | None = None  # per bank row: scale, shift [B, C]
        self._range = (0, 0)  # groups now in use (per-row draws)
        self._offset = 0  # data rows seen since the groups were selected (per-row draws)

    @classmethod
    def from_batchnorm(cls, bn: _BatchNorm) -> MCBatchNorm:
        """A copy of ``bn`` (parameters, running statistics, device and dtype) as MCBatchNorm."""
        if not bn.track_running_stats:
            raise ValueError("MCBN needs batch-norm layers that track running statistics")
        min_dims = {nn.BatchNorm1d: 2, nn.BatchNorm2d: 4, nn.BatchNorm3d: 5}.get(type(bn), 2)
        new = cls(bn.num_features, bn.eps, bn.momentum, bn.affine, min_dims)
        new.load_state_dict(bn.state_dict(), strict=False)
        ref = bn.running_mean
        new.to(device=ref.device, dtype=ref.dtype)
        new.train(bn.training)
        return new

    @property
    def bank_size(self) -> int:
        return self.bank_mean.shape[0]

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, bank={self.bank_size}"

    # ------------------------------------------------------------------ bank
    @contextmanager
    def recording(self) -> Iterator[None]:
        """Within the block, every forward normalises with its own batch statistics and records
        them; parameters and running statistics are left untouched."""
        self._recorded = []
        try:
            yield
        finally:
            recorded, self._recorded = self._recorded, None
            if recorded:
                self.bank_mean = torch.stack([m for m, _ in recorded])
                self.bank_var = torch.stack([v for _, v in recorded])

    def set_bank(self, mean: Tensor, var: Tensor) -> None:
        """Replace the bank with given statistics ``[T_bank, C]``."""
        if mean.shape != var.shape or mean.dim() != 2 or mean.shape[1] != self.num_features:
            raise ValueError(
                f"bank statistics must both be [T_bank, {self.num_features}], "
                f"got {tuple(mean.shape)} and {tuple(var.shape)}"
            )
        self.bank_mean, self.bank_var = mean.to(self.running_mean), var.to(self.running_var)

    # ------------------------------------------------------------------ sampling
    def draw_statistics(
        self, samples: int, generator: torch.Generator | None, plan: StatisticsPlan
    ) -> tuple[Tensor, Tensor]:
        """Per-group statistics ``([T, C], [T, C])`` as ``plan`` says: bank rows
        ``plan.rows``, or draws from the Gaussian model."""
        if plan.statistics is Statistics.GAUSSIAN:
            if plan.effective_batch_size is None:
                raise RuntimeError("the Gaussian MCBN model needs an effective_batch_size")
            return self.draw_gaussian_statistics(samples, generator, plan.effective_batch_size)
        if self.bank_size == 0:
            raise RuntimeError("the MCBN statistics bank is empty: fit the method or fill_bank()")
        if plan.rows is None or len(plan.rows) != samples:
            raise RuntimeError("MCBatchNorm needs bank rows chosen for every sample group")
        rows = plan.rows.to(self.bank_mean.device)
        return self.bank_mean[rows], self.bank_var[rows]

    def effective_n(self, effective_batch_size: float) -> float:
        """n = effective batch size × spatial size."""
        if int(self.spatial_size) == 0:
            raise RuntimeError(
                "the spatial size of this batch-norm layer is unknown: forward one batch first"
            )
        return float(effective_batch_size) * int(self.spatial_size)

    def draw_gaussian_statistics(
        self, samples: int, generator: torch.Generator | None, effective_batch_size: float
    ) -> tuple[Tensor, Tensor]:
        """``samples`` draws ``([T, C], [T, C])`` of a batch's mean and (biased) variance given
        the running statistics: N(μ, σ²/n) and σ²·χ²(n−1)/n with n = ``effective_batch_size``
        × spatial size (numpy's exact χ², seeded from ``generator``). Batch norm normalises a
        mini-batch with its biased variance, whose mean is σ²(n−1)/n; so do the bank and Teye
        et al.'s Algorithm 1."""
        n = self.effective_n(effective_batch_size)
        if n <= 1:
            raise ValueError(f"the effective sample size n must be > 1, got {n}")
        seed = int(
            torch.randint(0, 2**62, (1,), generator=generator, device=generator_device(generator))
        )
        rng = np.random.default_rng(seed)
        c = self.num_features
        z = torch.from_numpy(rng.standard_normal((samples, c)))
        chi2 = torch.from_numpy(rng.chisquare(n - 1, size=(samples, c)))
        mu, var = self.running_mean.double().cpu(), self.running_var.double().cpu()
        mean = mu + (var / n).sqrt() * z
        svar = var * chi2 / n
        ref = self.running_mean
        return mean.to(ref), svar.to(ref)

    def begin_sampling(self, plan: SamplingPlan) -> None:
        """Choose the block's per-group statistics as this layer's entry of ``plan`` says (a
        :class:`StatisticsPlan` or :class:`GroupStatistics`)."""
        super().begin_sampling(plan)
        draw = plan.draw_for(self)
        if isinstance(draw, StatisticsPlan) and draw.row_draw is not None:
            if draw.statistics is not Statistics.BANK or draw.rows is not None:
                raise ValueError("per-row bank draws go with the bank model and no shared rows")
            if draw.row_draw.bank_size != self.bank_size:
                raise ValueError(
                    f"per-row draws over {draw.row_draw.bank_size} bank rows; this layer's bank "
                    f"has {self.bank_size}"
                )
            self._row_draw, self._range, self._offset = draw.row_draw, (0, plan.samples), 0
            self._row_affine = self._bank_affine()
            return
        if isinstance(draw, GroupStatistics):
            if len(draw.mean) != plan.samples or len(draw.var) != plan.samples:
                raise ValueError(
                    f"given statistics for {len(draw.mean)} groups, the block has {plan.samples}"
                )
            stats = (draw.mean, draw.var)
        elif isinstance(draw, StatisticsPlan):
            stats = self.draw_statistics(plan.samples, plan.generator, draw)
        else:
            raise RuntimeError(
                "MCBatchNorm needs a StatisticsPlan or GroupStatistics in the sampling block's "
                "draws (MCBN.sampling hands it one)"
            )
        self._block_draw = self._draw = stats

    def select_groups(self, start: int, stop: int) -> None:
        """Normalise the next passes with the statistics of groups ``start .. stop-1``."""
        if self._block_draw is None and self._row_draw is None:
            raise RuntimeError("select_groups needs an active sampling block")
        super().select_groups(start, stop)
        if self._row_draw is not None:
            self._range, self._offset = (start, stop), 0
            return
        mean, var = self._block_draw
        self._draw = (mean[start:stop], var[start:stop])

    def end_sampling(self) -> None:
        super().end_sampling()
        self._block_draw = self._draw = self._row_draw = self._row_affine = None
        self._range, self._offset = (0, 0), 0

    def group_bytes(self) -> int:
        """A mean and a variance ``[C]`` per group, drawn through float64 temporaries (the
        Gaussian model's normal and χ² draws): about 48 bytes per channel."""
        return 48 * self.num_features + super().group_bytes()

    # ------------------------------------------------------------------ forward
    def _check_input(self, x: Tensor) -> None:
        if x.dim() < 2 or x.shape[1] != self.num_features:
            raise ValueError(
                f"MCBatchNorm expected input [N, {self.num_features}, ...], got {tuple(x.shape)}"
            )

    def forward(self, x: Tensor) -> Tensor:
        self._check_input(x)
        reduce_dims = [0, *range(2, x.dim())]
        shape = [1, -1] + [1] * (x.dim() - 2)  # broadcast [C] over [N, C, ...]
        if self._recorded is not None:
            mean = x.mean(reduce_dims)
            var = x.var(reduce_dims, unbiased=False)
            self._recorded.append((mean.detach(), var.detach()))
            self.spatial_size.fill_(x[0, 0].numel())
            return self._affine((x - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps))
        if self.stochastic and self._row_draw is not None:
            return self._forward_per_row(x, self._row_draw, self._row_affine)
        if self.stochastic and self._draw is not None:
            mean, var = self._draw  # [T, C]
            t = self.groups
            xs = x.reshape(t, x.shape[0] // t, *x.shape[1:])  # [T, N, C, ...]
            gshape = [t, 1, -1] + [1] * (x.dim() - 2)
            out = (xs - mean.view(gshape)) * torch.rsqrt(var.view(gshape) + self.eps)
            return self._affine(out.reshape(x.shape))
        self.spatial_size.fill_(x[0, 0].numel())
        factor = 0.0
        if self.training:
            self.num_batches_tracked.add_(1)
            factor = (
                self.momentum
                if self.momentum is not None
                else 1.0 / float(self.num_batches_tracked)
            )
        return F.batch_norm(
            x,
            self.running_mean,
            self.running_var,
            self.weight,
            self.bias,
            self.training,
            factor,
            self.eps,
        )

    def _bank_affine(self) -> tuple[Tensor, Tensor]:
        """Per bank row, batch norm and the affine transform as one scale and shift ``[B, C]``."""
        scale = torch.rsqrt(self.bank_var + self.eps)
        shift = -self.bank_mean * scale
        if self.weight is not None:
            scale = scale * self.weight
            shift = shift * self.weight + self.bias
        return scale, shift

    def _forward_per_row(
        self, x: Tensor, draw: BankRowDraw, affine: tuple[Tensor, Tensor] | None
    ) -> Tensor:
        """``x [G*n, C, ...]`` normalised row by row: (group t, row i) with bank row
        ``draw.rows(...)[t, i]``."""
        g = self.groups
        n = x.shape[0] // g
        rows = draw.rows(*self._range, self._offset, n).to(self.bank_mean.device)  # [G, n]
        self._offset += n
        scale, shift = affine if affine is not None else self._bank_affine()
        shape = [g * n, -1] + [1] * (x.dim() - 2)
        flat = rows.reshape(-1)
        return torch.addcmul(
            shift.index_select(0, flat).view(shape), x, scale.index_select(0, flat).view(shape)
        )

    def _affine(self, x: Tensor) -> Tensor:
        if self.weight is None:
            return x
        shape = [1, -1] + [1] * (x.dim() - 2)
        return x * self.weight.view(shape) + self.bias.view(shape)


def convert_batchnorm(model: nn.Module) -> list[MCBatchNorm]:
    """Replace every ``BatchNorm1d/2d/3d`` in ``model`` (in place) by :class:`MCBatchNorm`.

    Returns the new layers in order; raises ``ValueError`` when the network has no batch norm.
    """
    replaced: list[MCBatchNorm] = []
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, _BatchNorm):
                new = MCBatchNorm.from_batchnorm(child)
                setattr(parent, name, new)
                replaced.append(new)
    layers = [m for m in model.modules() if isinstance(m, MCBatchNorm)]
    if not layers:
        raise ValueError(
            f"MCBN needs a network with BatchNorm1d/2d/3d layers; {type(model).__name__} has none"
        )
    return layers
