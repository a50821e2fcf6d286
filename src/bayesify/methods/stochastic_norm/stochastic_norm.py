"""Stochastic normalisation with Bayesian learning (Shekhovtsov & Flach 2018).

Every Linear/Conv layer except the output becomes weight-normalised with a stochastic
per-channel scale S ~ N(s, σ²) (see :mod:`bayesify.nn.stochastic_scale`). After every optimiser
step each weight vector is projected back onto ‖w‖ = 1; those weights get no weight decay, nor do
the parameters the prior's KL already regularises (s, σ and a stochastic bias, mode ``learned``).
Loss per datum: mean NLL + Σ KL(q(S) ‖ N(1, prior_std²)) / n_data (mode ``learned``), the NLL as
IBNN's (:meth:`Method.nll`; for regression the squared error: a fixed noise variance of ½).
``noise="bn"`` trains with fixed BN-like noise levels instead, ``noise="none"`` is plain weight
normalisation with projection (the noise-free baseline). Use a network without batch norm.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from bayesify.methods.core.base import Method, MethodConfig
from bayesify.nn import noisy_training
from bayesify.nn.stochastic_scale import StochasticScale, add_stochastic_scale, data_dependent_init
from bayesify.options import ScaleNoise, SigmaPer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StochasticNormConfig(MethodConfig):
    """``noise``: learned | bn | none; ``sigma_per``: channel | layer; ``sigma_init`` initial σ;
    ``stochastic_bias`` also learns a Gaussian bias; ``prior_std`` of the N(1, ·²) prior on S;
    ``bn_mult_std`` / ``bn_add_std`` the fixed levels of ``noise="bn"``, or ``bn_levels`` one
    (σ_U, σ_V) pair per normalised layer, e.g. measured in a BN network with
    :func:`bayesify.bench.toys.bn_noise.measure_bn_noise` (the paper's "noise like BN");
    ``skip_last`` leaves the output layer plain (the paper normalises it too); ``data_init``
    initialises s and b on the first training batch so that every layer's output has zero mean
    and unit variance (:func:`~bayesify.nn.stochastic_scale.data_dependent_init`)."""

    noise: ScaleNoise = ScaleNoise.LEARNED
    sigma_per: SigmaPer = SigmaPer.CHANNEL
    sigma_init: float = 0.1
    stochastic_bias: bool = False
    prior_std: float = 10.0
    bn_mult_std: float = 0.05
    bn_add_std: float = 0.05
    skip_last: bool = True
    data_init: bool = False
    bn_levels: tuple[tuple[float, float], ...] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()  # checks and converts every field by its type
        if self.bn_levels is not None:
            levels = tuple((float(u), float(v)) for u, v in self.bn_levels)
            if any(u < 0 or v < 0 for u, v in levels):
                raise ValueError(f"bn_levels must be (σ_U, σ_V) pairs >= 0, got {levels}")
            object.__setattr__(self, "bn_levels", levels)
        self._require(("sigma_init", "prior_std"), lambda v: v > 0, "> 0")
        self._require(("bn_mult_std", "bn_add_std"), lambda v: v >= 0, ">= 0")


class StochasticNorm(Method):
    """Weight normalisation + projection + stochastic per-channel scale."""

    name = "stochastic-norm"
    Config = StochasticNormConfig
    config: StochasticNormConfig

    def _prepare(self, net: nn.Module) -> None:
        c = self.config
        if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in net.modules()):
            log.warning("StochasticNorm replaces batch norm's role; this network also has BN")
        self.layers: list[StochasticScale] = add_stochastic_scale(
            net,
            skip_last=c.skip_last,
            noise=c.noise,
            sigma_per=c.sigma_per,
            sigma_init=c.sigma_init,
            stochastic_bias=c.stochastic_bias,
            bn_mult_std=c.bn_mult_std,
            bn_add_std=c.bn_add_std,
        )
        if c.bn_levels is not None:
            if len(c.bn_levels) != len(self.layers):
                raise ValueError(
                    f"bn_levels has {len(c.bn_levels)} (σ_U, σ_V) pairs but the network has "
                    f"{len(self.layers)} normalised layers"
                )
            for layer, (mult, add) in zip(self.layers, c.bn_levels, strict=True):
                layer.bn_mult_std, layer.bn_add_std = mult, add
        self.initialised = not c.data_init  # data_init waits for the first training batch

    def param_groups(self, lr: float, weight_decay: float) -> list[dict[str, Any]]:
        """Unit-norm directions and KL-regularised scale parameters without weight decay."""
        free = [layer.layer.weight for layer in self.layers]
        free += [p for layer in self.layers for p in layer.prior_parameters()]
        return self._own_and_rest(free, weight_decay)

    def after_step(self) -> None:
        for layer in self.layers:
            layer.project()

    def kl(self) -> Tensor:
        """Σ over layers and channels of KL(q(S) ‖ N(1, prior_std²)), a scalar."""
        first, *rest = self.layers  # add_stochastic_scale returns at least one layer
        total = first.kl(self.config.prior_std)
        for layer in rest:
            total = total + layer.kl(self.config.prior_std)
        return total

    def objective(self, x: Tensor, y: Tensor, progress: float, n_data: int) -> Tensor:
        if not self.initialised:
            data_dependent_init(self.net, self.layers, x)
            self.initialised = True
        with noisy_training(self.net, self.layers):
            nll = self.nll(self.net(x), y)
        return nll + self.kl() / n_data

    def extra_state(self) -> dict[str, Any]:
        return {"initialised": self.initialised}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.initialised = bool(state.get("initialised", True))

    def noise_levels(self) -> dict[str, Any]:
        """Learned σ per layer (mean over channels), for reports."""
        return {f"layer{i}": float(layer.sigma.mean()) for i, layer in enumerate(self.layers)}
