"""Bayes by Backprop (Blundell et al. 2015): a mean-field Gaussian posterior over weights.

The network's ``nn.Linear``/``nn.Conv2d`` layers (or only the last ``last_k``) become
:class:`~bayesify.nn.bayes_layers.BayesLinear` / ``BayesConv2d`` with posterior means initialised
from the current weights. Training minimises the per-datapoint negative ELBO

    mean NLL of the mini-batch + β(progress) · kl_weight · KL(q || p) / N_data

with a KL annealing schedule β: constant 1, linear or cosine warm-up over the first
``kl_warmup`` of training, or cyclic (Fu et al. 2019: ``kl_cycles`` cycles, each ramping
linearly over its first ``kl_warmup`` fraction, then 1).

Regression likelihood (our choice): a Gaussian with a *learned homoscedastic* noise variance,
a log-variance parameter ``bbb_log_noise`` registered on the network and trained with the
ELBO. Without it the KL/N balance would depend on an arbitrary fixed noise scale. After
training it becomes ``noise_variance``; when validation data is given, τ⁻¹ is then refitted on
it exactly as for every other method (``noise_objective``), so comparisons share one protocol.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from bayesify.methods.core.base import Method, MethodConfig
from bayesify.nn.bayes_layers import BayesLayer, bayesianize
from bayesify.nn.gaussian_posterior import Prior
from bayesify.options import ConvEstimator, KLSchedule, PriorKind, parse_option
from bayesify.predictive import Task
from bayesify.train import Data

LOG_NOISE = "bbb_log_noise"


def kl_weight(
    schedule: KLSchedule | str, progress: float, warmup: float = 0.5, cycles: int = 4
) -> float:
    """β in [0, 1] at ``progress`` (fraction of training done) for ``schedule``."""
    schedule = parse_option(KLSchedule, schedule, option="kl_schedule")
    if schedule is KLSchedule.CONSTANT:
        return 1.0
    if schedule is KLSchedule.CYCLIC:
        progress = (progress * cycles) % 1.0
    ramp = min(1.0, progress / warmup) if warmup > 0 else 1.0
    if schedule is KLSchedule.COSINE:
        return 0.5 * (1.0 - math.cos(math.pi * ramp))
    return ramp


@dataclass(frozen=True)
class BBBConfig(MethodConfig):
    """Prior (``gaussian``: N(0, prior_sigma²); ``mixture``: Blundell's scale mixture),
    posterior σ initialisation ``softplus(init_rho)``, hybrid ``last_k``, KL annealing, the
    learned regression noise's initial variance, and the convolutions' training noise
    ``conv_estimator`` (``shared``: one weight sample per mini-batch, one convolution, as in
    Blundell et al.; ``flipout``: per-row noise, lower-variance gradients, two convolutions)."""

    prior: PriorKind = PriorKind.GAUSSIAN
    prior_sigma: float = 1.0
    mixture_pi: float = 0.5
    mixture_sigma1: float = 1.0
    mixture_sigma2: float = math.exp(-6)
    init_rho: float = -5.0
    last_k: int | None = None
    kl_schedule: KLSchedule = KLSchedule.CONSTANT
    kl_warmup: float = 0.5
    kl_cycles: int = 4
    kl_weight: float = 1.0
    init_noise_variance: float = 0.1
    conv_estimator: ConvEstimator = ConvEstimator.SHARED

    def __post_init__(self) -> None:
        super().__post_init__()  # checks and converts every field by its type
        if not 0.0 <= self.kl_warmup <= 1.0 or self.kl_cycles < 1 or self.kl_weight < 0:
            raise ValueError("need kl_warmup in [0, 1], kl_cycles >= 1 and kl_weight >= 0")
        if self.init_noise_variance <= 0:
            raise ValueError(f"init_noise_variance must be > 0, got {self.init_noise_variance}")
        self.weight_prior()  # validates the scales

    def weight_prior(self) -> Prior:
        return Prior(
            self.prior, self.prior_sigma, self.mixture_pi, self.mixture_sigma1, self.mixture_sigma2
        )


class BayesByBackprop(Method):
    """Bayes by Backprop: wraps any network with Linear/Conv2d layers (converted in place).

    ``from_pretrained(net)`` converts a trained network (posterior means = its weights); with
    ``train`` and ``epochs > 0`` it also fine-tunes the posterior (see
    :meth:`Method.from_pretrained`)."""

    name = "bbb"
    Config = BBBConfig
    config: BBBConfig

    def _prepare(self, net: nn.Module) -> None:
        cfg = self.config
        self.layers: list[BayesLayer] = bayesianize(
            net,
            last_k=cfg.last_k,
            prior=cfg.weight_prior(),
            init_rho=cfg.init_rho,
            conv_estimator=cfg.conv_estimator,
        )
        if self._learns_noise and not hasattr(net, LOG_NOISE):
            ref = self.layers[-1].weight_mu
            init = torch.tensor(math.log(cfg.init_noise_variance), dtype=ref.dtype)
            net.register_parameter(LOG_NOISE, nn.Parameter(init.to(ref.device)))
        # the parameter itself: during training self.net may be a wrapper (e.g. DDP)
        self.log_noise: nn.Parameter | None = getattr(net, LOG_NOISE, None)
        if self._learns_noise:
            assert self.log_noise is not None  # registered above
            if not self.log_noise.is_meta:  # meta: a bundle's check (load)
                self.noise_variance = float(self.log_noise.detach().exp())

    @property
    def _learns_noise(self) -> bool:
        """Whether the homoscedastic noise parameter is learned (not for a heteroscedastic net)."""
        return self.config.task is Task.REGRESSION and not self.config.heteroscedastic

    def kl(self) -> Tensor:
        """KL(q || p) summed over all Bayesian layers (0-dim)."""
        first, *rest = self.layers  # bayesianize returns at least one layer
        total = first.kl()
        for layer in rest:
            total = total + layer.kl()
        return total

    def nll(self, out: Tensor, y: Tensor) -> Tensor:
        """Cross-entropy, or the Gaussian NLL with the learned noise variance (regression)."""
        if not self._learns_noise:  # cross-entropy or the heteroscedastic Gaussian NLL
            return super().nll(out, y)
        log_var = self.log_noise
        assert log_var is not None  # set in _prepare whenever the noise is learned
        sq = (out.reshape(y.shape) - y) ** 2
        return 0.5 * (math.log(2 * math.pi) + log_var + sq * torch.exp(-log_var)).mean()

    def objective(self, x: Tensor, y: Tensor, progress: float, n_data: int) -> Tensor:
        cfg = self.config
        beta = kl_weight(cfg.kl_schedule, progress, cfg.kl_warmup, cfg.kl_cycles)
        loss = self.nll(self.net(x), y)
        kl = sum(layer.take_kl() for layer in self.layers)  # recorded by that forward
        if beta * cfg.kl_weight > 0:
            loss = loss + beta * cfg.kl_weight * kl / n_data
        return loss

    def param_groups(self, lr: float, weight_decay: float) -> list[dict[str, Any]]:
        """Variational parameters (and the noise) without weight decay; the rest with it."""
        variational = [p for layer in self.layers for p in layer.parameters()]
        if hasattr(self.net, LOG_NOISE):
            variational.append(getattr(self.net, LOG_NOISE))
        return self._own_and_rest(variational, weight_decay)

    def _after_fit(self, train: Data, batch_size: int, seed: int) -> None:
        if self._learns_noise:
            self.noise_variance = float(getattr(self.net, LOG_NOISE).detach().exp())
