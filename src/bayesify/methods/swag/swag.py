"""SWAG and MultiSWAG (Maddox et al. 2019; Wilson & Izmailov 2020) on a trained network.

``SWAG.from_pretrained(net, train, epochs=..., lr=..., schedule="constant"|"cyclic")`` runs SGD
from the trained weights (of a copy), collects the moments of its trajectory and the last
``rank`` deviation columns (:mod:`.swag_moments`), and predicts with weights drawn from the
Gaussian they define. ``fit`` trains the network first, then collects the same way, by
default with the optimiser and at the (constant) rate it trained with: Maddox et al. collect at
a high constant rate comparable to the training rate, so the iterates keep exploring the basin
(a rate far below it collapses the Gaussian to a point; docs/fidelity.md).
MultiSWAG (``members`` = M > 1, or :class:`MultiSWAG`) runs M trajectories from the same
trained weights, or from M trained networks (``MultiSWAG.from_pretrained([net1, net2, ...],
train)``: trajectory m from network m), trajectory m with its own data order and dropout masks
(seed + m), and mixes them with equal weights: sample ``k*M + m`` is member m's k-th (T
rounded up to a multiple of M).

Prediction: the T weight samples run as stacked groups, ``functional_call`` under ``vmap``
(:mod:`bayesify.nn.stacked`, as ensembles run their members; :class:`~.swag_net.SwagNet`),
in ranges of groups whose weights fit in :data:`~.swag_net.WEIGHT_BYTES` (every draw is
rebuilt from its own seed, so ranges and chunks give the same samples as one pass). Batch
norm: each sample's statistics are those of the training rows the bundle keeps (``bn_rows``),
recomputed under that sample's weights (``batch_norm="recompute"``, T·bn_rows extra rows per
call) or those of its member's SWA mean (``"swa"``, computed once).
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Iterator, Sized
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, cast

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader

from bayesify.methods.core.base import Method, MethodConfig
from bayesify.methods.core.inputs import given_members
from bayesify.methods.swag.moments import (
    Moments,
    Trajectory,
    collect,
    collecting_rate,
    flat_parameters,
    parameter_layout,
    unflatten,
)
from bayesify.methods.swag.net import WEIGHT_BYTES, SwagDraw, SwagNet
from bayesify.nn import chunk_plan, forward_in_chunks, generator_device, sampling
from bayesify.nn.stacked import batchnorm_layers
from bayesify.options import OptimizerName, SwagBatchNorm, SwagSchedule
from bayesify.train import Data, as_dataset, as_loader, loader_batch_size

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SWAGConfig(MethodConfig):
    """``rank``: K, the deviation columns kept; ``members``: SWAG trajectories mixed with
    equal weights (MultiSWAG when > 1); ``scale``: the draw's covariance factor (1/2 in Maddox
    et al.); ``schedule``: constant | cyclic; ``swag_epochs``: epochs while collecting;
    ``swag_lr``: the collecting (cyclic: largest) rate (None: the rate ``fit`` trained with,
    else 0.01); ``swag_optimizer``: sgd | adam | adamw while collecting (None: ``fit``'s
    optimiser, else sgd); ``swag_lr_min``: the cyclic schedule's smallest rate;
    ``swag_momentum``: SGD momentum; ``swag_weight_decay``: weight decay;
    ``collect_every``: steps between snapshots (0: one per epoch); ``batch_norm``: recompute
    | swa; ``bn_rows``: training rows kept to recompute batch-norm statistics."""

    rank: int = 20
    members: int = 1
    scale: float = 0.5
    schedule: SwagSchedule = SwagSchedule.CONSTANT
    swag_epochs: int = 20
    swag_lr: float | None = None
    swag_optimizer: OptimizerName | None = None
    swag_lr_min: float = 0.001
    swag_momentum: float = 0.9
    swag_weight_decay: float = 0.0
    collect_every: int = 0
    batch_norm: SwagBatchNorm = SwagBatchNorm.RECOMPUTE
    bn_rows: int = 64

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require(("rank", "members", "swag_epochs", "bn_rows"), lambda v: v >= 1, ">= 1")
        self._require(("collect_every",), lambda v: v >= 0, ">= 0")
        self._require(("scale", "swag_lr"), lambda v: v is None or v > 0, "> 0")
        self._require(("swag_lr_min", "swag_weight_decay"), lambda v: v >= 0, ">= 0")
        self._require(("swag_momentum",), lambda v: 0 <= v < 1, "in [0, 1)")


class SWAG(Method):
    """SWAG: a Gaussian over the weights from the moments of an SGD trajectory (low-rank plus
    diagonal covariance)."""

    name = "swag"
    Config = SWAGConfig
    config: SWAGConfig
    net: SwagNet  # the wrapper _prepare builds around the network

    def _prepare(self, net: nn.Module) -> None:
        spec = getattr(net, "bayesify_spec", None)
        self.net = SwagNet(net, self.config.scale, self.config.batch_norm)
        self.net.bayesify_spec = spec

    @property
    def spread_hint(self) -> str:  # type: ignore[override]
        lr, opt = getattr(self, "collected_with", (self.config.swag_lr or "?", "sgd"))
        return f"raise swag_lr toward the training rate (collected with {opt} at {lr})"

    def extra_state(self) -> dict[str, Any]:
        lr, opt = getattr(self, "collected_with", (None, None))
        return {} if lr is None else {"collected_lr": lr, "collected_optimizer": opt}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        if state.get("collected_lr") is not None:
            self.collected_with = (float(state["collected_lr"]), str(state["collected_optimizer"]))

    @property
    def members(self) -> int:
        return self.config.members

    def sample_count(self, samples: int) -> int:
        """T rounded up to a multiple of M: every member gives T/M samples."""
        return self.members * math.ceil(samples / self.members)

    @contextmanager
    def sampling(self, samples: int, generator: torch.Generator | None) -> Iterator[None]:
        """One seed per sample group drawn from ``generator``; group t from member t mod M."""
        if not self.net.collected:
            raise ValueError("SWAG has collected no moments: call fit() or from_pretrained()")
        dev = generator_device(generator)
        seeds = torch.randint(0, 2**62, (samples,), generator=generator, device=dev).cpu()
        draw = SwagDraw(seeds, torch.arange(samples) % self.members)
        with sampling(self.net, samples, generator, {self.net: draw}):
            yield

    def _draw_samples(
        self,
        x: Tensor,
        samples: int,
        generator: torch.Generator | None,
        max_rows: int | None,
        start: int = 0,
        max_bytes: int | None = None,
    ) -> Tensor:
        """The one pass, its group ranges also bounded by :data:`WEIGHT_BYTES` of weights."""
        ranges, per_chunk = chunk_plan(samples, len(x), max_rows)
        width = max(1, WEIGHT_BYTES // max(1, self.net.mean.shape[-1] * self.net.mean.itemsize))
        ranges = [(a, min(a + width, b)) for r0, b in ranges for a in range(r0, b, width)]
        with self.sampling(samples, generator):
            return forward_in_chunks(self.net, x, ranges, per_chunk, self.net, 0,
                                     max_bytes=max_bytes)  # fmt: skip

    def sample_weights(self, samples: int, *, generator: torch.Generator | None = None) -> Tensor:
        """Flat weights ``[T, P]`` as :meth:`predict` draws them with ``generator``."""
        with torch.no_grad(), self.sampling(samples, generator):
            draw = self.net._draw
            assert draw is not None
            return self.net.draw(draw.seeds, draw.members)

    # ------------------------------------------------------------------ collecting
    def _from_pretrained(
        self,
        train: Data | None,
        val: Data | None,
        *,
        batch_size: int | None,
        seed: int,
        progress: bool,
        epochs: int | None = None,
        lr: float | None = None,
    ) -> None:
        """SGD from the trained weights on ``train`` (``epochs``/``lr``: the config's
        ``swag_epochs``/``swag_lr``), collecting the moments; τ on ``val``."""
        if train is None:
            raise ValueError(
                "SWAG.from_pretrained needs the training data (train=...): SWAG's posterior is "
                "the trajectory of SGD on it"
            )
        given: dict[str, Any] = {"swag_epochs": epochs, "swag_lr": lr}
        self.config = replace(self.config, **{k: v for k, v in given.items() if v is not None})
        if batch_size is None and not hasattr(train, "batch_sampler"):
            batch_size = 128
        self.collect(train, batch_size=batch_size, seed=seed, progress=progress)
        self._fit_noise_on(val, seed)
        if val is not None:
            self.check_spread_on(val, seed=seed)

    def _after_fit(self, train: Data, batch_size: int, seed: int) -> None:
        self.collect(train, batch_size=batch_size, seed=seed)

    def collect(
        self, train: Data, *, batch_size: int | None, seed: int = 0, progress: bool = False
    ) -> None:
        """Run the M trajectories from the network's current weights and keep their moments;
        ``base`` then holds member 0's SWA mean and its batch-norm statistics."""
        cfg, base = self.config, self.net.base
        loader_bs = loader_batch_size(train) if isinstance(train, DataLoader) else None
        bs = loader_bs or batch_size or 128
        trained = getattr(self, "_trained_with", None)  # (rate, optimiser) of fit, if it ran
        lr, opt = collecting_rate(cfg.swag_lr, cfg.swag_optimizer, trained)
        self.collected_with = (lr, opt.value)
        trajectory = Trajectory(cfg.swag_epochs, lr, cfg.swag_lr_min, cfg.schedule,
                                cfg.swag_momentum, cfg.swag_weight_decay, cfg.collect_every,
                                opt)  # fmt: skip
        start = copy.deepcopy(base.state_dict())
        starts = self._trajectory_starts(start)
        runs: list[Moments] = []
        for m in range(cfg.members):
            base.load_state_dict(starts[m])
            loader = as_loader(train, bs, shuffle=True, seed=seed + m)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed + m)
                moments = collect(base, lambda x, y: self.nll(base(x), y), loader, trajectory,
                                  cfg.rank, self.param_groups, progress=progress)  # fmt: skip
            if moments.count < 2:
                raise ValueError(
                    f"SWAG took {moments.count} snapshot(s) and needs at least 2: raise "
                    f"swag_epochs (now {cfg.swag_epochs}) or lower collect_every"
                )
            runs.append(moments)
            log.info("SWAG member %d: %d snapshots (%s at %g)", m, moments.count, opt.value, lr)
        base.load_state_dict(starts[0])
        self._keep(runs, train, seed)

    def _trajectory_starts(self, start: dict[str, Tensor]) -> list[dict[str, Tensor]]:
        """The weights each of the M trajectories starts from: the network's own (``start``)."""
        return [start] * self.config.members

    def _keep(self, runs: list[Moments], train: Data, seed: int) -> None:
        """Write the trajectories' moments into the buffers, keep ``bn_rows`` training rows
        (networks with batch norm) and set ``base`` to member 0's SWA mean."""
        net = self.net
        means = [r.means() for r in runs]  # every run took at least 2 snapshots
        net.mean = torch.stack([mean for mean, _ in means])
        net.sq_mean = torch.stack([sq_mean for _, sq_mean in means])
        net.deviations = torch.stack([r.deviations() for r in runs])
        net.counts = torch.tensor([r.count for r in runs], device=net.mean.device)
        if batchnorm_layers(net.base):
            ds = as_dataset(train)
            g = torch.Generator().manual_seed(seed)
            n = len(cast(Sized, ds))  # torch's Dataset declares no __len__
            rows = torch.randperm(n, generator=g)[: self.config.bn_rows]
            net.bn_inputs = torch.stack([torch.as_tensor(ds[int(i)][0]) for i in rows]).to(
                net.mean.device, net.mean.dtype
            )
        with torch.no_grad():
            for name, value in unflatten(net.mean[:1], parameter_layout(net.base)).items():
                net.base.get_parameter(name).copy_(value[0])
            if len(net.bn_inputs):
                for key, value in net.swa_statistics().items():
                    net.base.get_buffer(key).copy_(value[0])


@dataclass(frozen=True)
class MultiSWAGConfig(SWAGConfig):
    """``members``: SWAG trajectories mixed with equal weights (3 by default); the other
    options are SWAG's."""

    members: int = 3


class MultiSWAG(SWAG):
    """MultiSWAG: several SWAG trajectories, mixed with equal weights, from one trained
    network or from M independently trained ones (Wilson & Izmailov 2020's recipe: member m's
    trajectory starts from network m)."""

    name = "multiswag"
    Config = MultiSWAGConfig
    config: MultiSWAGConfig

    def __init__(
        self,
        net: nn.Module | list[nn.Module] | tuple[nn.Module, ...],
        config: MultiSWAGConfig | None = None,
        *,
        inplace: bool = False,
        **options: Any,
    ) -> None:
        """``net``: one trained network (every trajectory starts from it, each with its own
        data order) or a list of M trained networks of one architecture (trajectory m starts
        from network m's weights; ``members`` is M). Their weights are read, never changed;
        the first is the one wrapped (a copy unless ``inplace=True``)."""
        starts = None
        nets = given_members(net, config, options, "MultiSWAG")
        if nets is not None:
            starts = [{k: v.detach().clone() for k, v in n.state_dict().items()} for n in nets]
            net = nets[0]
        # one network now (a list or tuple gave nets); Method's constructor checks its type
        super().__init__(cast(nn.Module, net), config, inplace=inplace, **options)
        self._member_starts = starts

    def _trajectory_starts(self, start: dict[str, Tensor]) -> list[dict[str, Tensor]]:
        """Network m's weights for trajectory m when M networks were given, else ``start``."""
        return self._member_starts or super()._trajectory_starts(start)

    def fit(self, *args: Any, **kwargs: Any) -> MultiSWAG:
        if self._member_starts is not None:
            raise ValueError(
                "this MultiSWAG holds several trained networks: fit() would train only the "
                "first; collect their trajectories with MultiSWAG.from_pretrained(nets, train) "
                "or .collect(train)"
            )
        return super().fit(*args, **kwargs)


__all__ = ["MultiSWAG", "MultiSWAGConfig", "SWAG", "SWAGConfig", "SwagNet", "flat_parameters"]
