"""Monte Carlo Batch Normalisation (Teye, Azizpour & Smith 2018).

Train as an ordinary batch-norm network. Afterwards, record a bank of the batch-norm statistics
of ``bank_size`` random training mini-batches of size b (the training batch size). Sample t of
data row i normalises every batch-norm layer with one bank row: the same mini-batch for every
layer, as in Teye et al.'s Algorithm 1, but for all T samples in one forward pass. By default
(``bank_draw="row"``) each data row draws its own T bank rows, so the rows of one call carry
independent Monte Carlo errors; ``bank_draw="call"`` draws T rows once per call, shared by every
data row (all rows then move together with the call's seed; ``benchmarks/deferral.md``).

``statistics="gaussian"`` replaces the bank by the large-sample law of the statistics (see
:mod:`bayesify.nn.mc_batchnorm`) with effective batch size ``effective_batch_size`` (default: the
training batch size): prediction needs no training data, and the batch size becomes a continuous
knob that :meth:`MCBN.tune_batch_size` chooses on validation data (Mukhoti et al. 2020).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sized
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader

from bayesify.methods.core.base import Method, MethodConfig
from bayesify.methods.mcbn.tuning import tune_effective_batch_size
from bayesify.nn import MCBatchNorm, convert_batchnorm, generator_device, sampling
from bayesify.nn.bank_draw import BankRowDraw
from bayesify.nn.mc_batchnorm import StatisticsPlan
from bayesify.nn.modes import eval_mode, kept_modes
from bayesify.options import BankDraw, Statistics, shown
from bayesify.progress import progress_bar
from bayesify.train import Data, Strategy, as_dataset, as_loader, loader_batch_size

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MCBNConfig(MethodConfig):
    """``bank_size``: mini-batches recorded (T_bank); ``bank_batch_size``: their size b
    (defaults to the training batch size, as the posterior was trained with it);
    ``statistics``: bank | gaussian; ``effective_batch_size``: b of the Gaussian model (a float;
    defaults to the training batch size); ``bank_draw``: row | call, bank rows drawn per data row
    or once per call and shared by its rows (the bank model only)."""

    bank_size: int = 256
    bank_batch_size: int | None = None
    statistics: Statistics = Statistics.BANK
    effective_batch_size: float | None = None
    bank_draw: BankDraw = BankDraw.ROW

    def __post_init__(self) -> None:
        super().__post_init__()  # checks and converts every field by its type
        if self.effective_batch_size is not None and not self.effective_batch_size > 0:
            raise ValueError(f"effective_batch_size must be > 0, got {self.effective_batch_size}")
        if self.bank_size < 1:
            raise ValueError(f"bank_size must be >= 1, got {self.bank_size}")
        if self.bank_batch_size is not None and self.bank_batch_size < 2:
            raise ValueError(f"bank_batch_size must be >= 2, got {self.bank_batch_size}")


class MCBN(Method):
    """MC batch norm: wraps any network with ``BatchNorm1d/2d/3d`` layers."""

    name = "mcbn"
    Config = MCBNConfig
    config: MCBNConfig

    def _prepare(self, net: nn.Module) -> None:
        self.layers: list[MCBatchNorm] = convert_batchnorm(net)
        self.bank_batch_size: int | None = self.config.bank_batch_size
        self.effective_batch_size: float | None = self.config.effective_batch_size

    @property
    def gaussian(self) -> bool:
        return self.config.statistics is Statistics.GAUSSIAN

    def _from_pretrained(
        self,
        train: Data | None,
        val: Data | None,
        *,
        batch_size: int | None,
        seed: int,
        progress: bool,
    ) -> None:
        """Fill the bank from ``train`` with mini-batches of b, the size the network was trained
        with (Gaussian model: one forward so every layer knows its spatial size); τ on ``val``.

        b is ``batch_size``, else the ``bank_batch_size`` option, else the batch size of a
        DataLoader given as ``train``; without any of them, or when they disagree, it is an
        error (never a silent default).
        """
        if train is None:
            raise ValueError(
                "MCBN.from_pretrained needs the training data (train=...): the statistics of "
                "its mini-batches are MCBN's posterior samples"
            )
        b = self._bank_batch_size_for(train, batch_size)
        if self.gaussian:
            self._record_spatial_sizes(as_loader(train, b, shuffle=True, seed=seed), b)
        else:
            self.fill_bank(train, batch_size=b, seed=seed, progress=progress)
        self._fit_noise_on(val, seed)

    def _bank_batch_size_for(self, train: Data, batch_size: int | None) -> int:
        """The bank's mini-batch size b: ``batch_size``, ``bank_batch_size`` or the loader's."""
        given = {"batch_size": batch_size, "bank_batch_size": self.config.bank_batch_size}
        if isinstance(train, DataLoader):
            given["the DataLoader's batch_size"] = loader_batch_size(train)
        given = {k: v for k, v in given.items() if v is not None}
        if not given:
            raise ValueError(
                "MCBN needs the mini-batch size the network was trained with: pass "
                "batch_size=... (or train as a DataLoader with that batch size)"
            )
        if len(set(given.values())) > 1:
            said = ", ".join(f"{k}={v}" for k, v in given.items())
            raise ValueError(f"conflicting MCBN batch sizes ({said}); give one")
        b = next(iter(given.values()))
        if isinstance(b, bool) or not isinstance(b, int) or b < 2:
            raise ValueError(f"MCBN's batch size must be an int >= 2, got {shown(b)}")
        return b

    def _after_fit(self, train: Data, batch_size: int, seed: int) -> None:
        if self.gaussian:  # training forwards recorded the spatial sizes; no bank needed
            self.bank_batch_size = self.config.bank_batch_size or batch_size
            if self.effective_batch_size is None:
                self.effective_batch_size = float(self.bank_batch_size)
            return
        self.fill_bank(train, batch_size=self.config.bank_batch_size or batch_size, seed=seed)

    def _check_strategy(self, strategy: Strategy, replica_batch_size: int) -> None:
        if strategy.sync_batch_norm:
            raise ValueError(
                "batch_norm='sync' is not available for MCBN: its posterior is defined by the "
                "statistics of per-replica mini-batches; use batch_norm='replica'"
            )
        if strategy.replicas > 1 and replica_batch_size < 2:
            raise ValueError(
                f"MCBN needs at least 2 rows per replica batch, got {replica_batch_size} "
                f"(over {strategy.replicas} processes)"
            )

    def _record_spatial_sizes(self, loader: Any, batch_size: int) -> None:
        """One ordinary eval forward so every layer knows its spatial size (Gaussian model)."""
        xb, _ = next(iter(loader))
        with eval_mode(self.net), torch.no_grad():
            self.net(xb.to(self.device))
        self.bank_batch_size = batch_size
        if self.effective_batch_size is None:
            self.effective_batch_size = float(batch_size)

    def set_effective_batch_size(self, b: float) -> None:
        """Set the Gaussian model's effective batch size b (n = b × spatial size)."""
        if not b > 0:
            raise ValueError(f"effective batch size must be > 0, got {b}")
        self.effective_batch_size = float(b)

    def tune_batch_size(
        self,
        val: Data,
        grid: Any = None,
        *,
        train: Data | None = None,
        samples: int = 32,
        seed: int = 0,
    ) -> dict[float, float]:
        """Choose the batch size b on ``val`` by maximising the mean predictive log-likelihood
        over ``grid``; sets it and returns {b: log-likelihood}. Gaussian model: the effective
        batch size; bank model: refills the bank from ``train`` (needed) at each integer b.
        See :func:`bayesify.methods.mcbn.tuning.tune_effective_batch_size`."""
        return tune_effective_batch_size(self, val, grid, train=train, samples=samples, seed=seed)

    @property
    def bank_size(self) -> int:
        return self.layers[0].bank_size

    def fill_bank(
        self,
        train: Data,
        *,
        batch_size: int,
        bank_size: int | None = None,
        seed: int = 0,
        progress: bool = False,
    ) -> None:
        """Record every batch-norm layer's (biased) batch mean and variance for ``bank_size``
        random training mini-batches of ``batch_size``; weights and running stats are unchanged.

        A DataLoader's rows are re-batched: MCBN's b is ``batch_size``, and a short last batch
        (whose statistics would be far noisier) is never recorded.
        """
        bank_size = bank_size or self.config.bank_size
        if batch_size < 2:
            raise ValueError(f"MCBN mini-batches need at least 2 rows, got batch_size={batch_size}")
        loader = as_loader(as_dataset(train), batch_size, shuffle=True, seed=seed, drop_last=True)
        if len(loader) == 0:
            rows = len(cast(Sized, loader.dataset))  # torch's Dataset declares no __len__
            raise ValueError(f"{rows} training rows are fewer than one batch of {batch_size}")
        dev = self.device
        done = 0
        with kept_modes(self.net), torch.no_grad(), ExitStack() as stack:
            self.net.eval()  # dropout and other layers stay deterministic while recording
            for layer in self.layers:
                stack.enter_context(layer.recording())
            bar = progress_bar(total=bank_size, desc="MCBN bank", progress=progress, leave=False)
            while done < bank_size:
                for xb, _ in loader:
                    self.net(xb.to(dev))
                    done += 1
                    bar.update()
                    if done == bank_size:
                        break
            bar.close()
        self.bank_batch_size = batch_size
        log.info("MCBN bank: %d mini-batches of %d", bank_size, batch_size)

    def draw_rows(self, samples: int, generator: torch.Generator | None) -> Tensor:
        """Bank rows ``[T]`` of one call shared by all its rows (``bank_draw="call"``): distinct
        rows while T <= bank size, then with replacement."""
        n = self.bank_size
        if n == 0:
            raise RuntimeError("the MCBN statistics bank is empty: call fit() or fill_bank()")
        dev = generator_device(generator)
        if samples <= n:
            return torch.randperm(n, generator=generator, device=dev)[:samples].cpu()
        return torch.randint(n, (samples,), generator=generator, device=dev).cpu()

    def statistics_plan(self, samples: int, generator: torch.Generator | None) -> StatisticsPlan:
        """How every batch-norm layer chooses its statistics for ``samples`` groups: bank rows
        per data row (a key drawn now) or per call (drawn now), the same for every layer, or the
        Gaussian model's batch size."""
        if self.gaussian:
            return StatisticsPlan(
                Statistics.GAUSSIAN, effective_batch_size=self.effective_batch_size
            )
        if self.config.bank_draw is BankDraw.CALL:
            return StatisticsPlan(Statistics.BANK, rows=self.draw_rows(samples, generator))
        if self.bank_size == 0:
            raise RuntimeError("the MCBN statistics bank is empty: call fit() or fill_bank()")
        dev = generator_device(generator)
        key = int(torch.randint(0, 2**32, (1,), generator=generator, device=dev))
        return StatisticsPlan(Statistics.BANK, row_draw=BankRowDraw(self.bank_size, key))

    def bank_rows(self, samples: int, rows: int, generator: torch.Generator | None) -> Tensor:
        """The bank rows ``[T, N]`` that :meth:`sample` with ``generator`` uses for T samples of
        N data rows (each column the same under ``bank_draw="call"``)."""
        plan = self.statistics_plan(samples, generator)
        if plan.row_draw is not None:
            return plan.row_draw.rows(0, samples, 0, rows)
        if plan.rows is None:
            raise RuntimeError("the Gaussian statistics model draws no bank rows")
        return plan.rows.view(-1, 1).expand(samples, rows)

    @contextmanager
    def sampling(self, samples: int, generator: torch.Generator | None) -> Iterator[None]:
        plan = self.statistics_plan(samples, generator)
        with sampling(self.net, samples, generator, {layer: plan for layer in self.layers}):
            yield

    def extra_state(self) -> dict[str, Any]:
        return {
            "bank_batch_size": self.bank_batch_size,
            "effective_batch_size": self.effective_batch_size,
        }

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.bank_batch_size = state.get("bank_batch_size")
        self.effective_batch_size = state.get("effective_batch_size", self.effective_batch_size)
