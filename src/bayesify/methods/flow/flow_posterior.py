"""A flexible last-layer posterior: a normalizing flow over the last linear layer's weights.

The network's last ``nn.Linear`` becomes a :class:`~bayesify.nn.sampled_linear.SampledLinear`
whose posterior is a :class:`~bayesify.nn.weight_flow.WeightFlow` ``q(w)`` over its weights and
bias (a neural spline flow by default; RealNVP; or ``flow="mean-field"``, a diagonal Gaussian
fitted by the same code, the mean-field baseline). The body before it keeps its trained weights
(a point estimate), as in last-layer Laplace.

Fitting (post-hoc): the body's outputs on the training data, ``h = body(x) [N, in]``, are
computed once, then ``q`` maximises the full-batch ELBO

    E_q[Σ_i log p(y_i | h_i, w) + log N(w; 0, prior_sigma² I) − log q(w)]

with ``elbo_samples`` reparameterised draws per step, Adam at ``elbo_lr`` decayed along a half
cosine over ``elbo_steps`` steps. Regression: a Gaussian likelihood whose noise variance is
learned with ``q`` (started at the trained network's mean squared residual); it becomes
``noise_variance``, refitted on validation data when given, as for every method.
``from_pretrained(net, train)`` fits ``q`` around a trained network; ``fit`` trains the network
by its NLL first (the loop every method shares), then fits ``q`` on the trained body.

Prediction: group t's weights are draw t of ``q``; the body runs once per row and the T draws
are applied as one batched matrix product (:func:`~bayesify.nn.folding.deterministic_prefix`
where the net is an ``nn.Sequential``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bayesify.methods.core.base import Method, MethodConfig
from bayesify.nn.modes import eval_mode
from bayesify.nn.sampled_linear import SampledLinear, sample_last_linear
from bayesify.nn.weight_flow import WeightFlow, fit_elbo, gaussian_log_prior
from bayesify.options import FlowKind
from bayesify.predictive import Task
from bayesify.train import Data

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FlowConfig(MethodConfig):
    """``flow``: the distribution over the last layer's weights (``nsf``, ``realnvp`` or
    ``mean-field``); ``transforms``: coupling layers of the flow; ``hidden``: units of each of
    the two hidden layers of their conditioner networks; ``prior_sigma``: σ of the Gaussian
    prior ``N(0, σ²)`` over the last layer's weights and bias; ``init_scale``: the posterior's
    initial spread around the trained weights; ``init_seed``: seeds the flow's initialisation;
    ``elbo_steps``: optimiser steps of the ELBO fit; ``elbo_lr``: its Adam learning rate;
    ``elbo_samples``: reparameterised draws per step."""

    flow: FlowKind = FlowKind.NSF
    transforms: int = 3
    hidden: int = 64
    prior_sigma: float = 1.0
    init_scale: float = 1e-2
    init_seed: int = 0
    elbo_steps: int = 1000
    elbo_lr: float = 1e-2
    elbo_samples: int = 8

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require(("transforms", "hidden", "elbo_steps", "elbo_samples"), lambda v: v >= 1,
                      ">= 1")  # fmt: skip
        self._require(("prior_sigma", "init_scale", "elbo_lr"), lambda v: v > 0, "> 0")
        if self.heteroscedastic:
            raise ValueError(
                "the flow posterior models homoscedastic regression or classification, "
                "not likelihood='heteroscedastic'"
            )


class FlowPosterior(Method):
    """A normalizing-flow posterior over the last linear layer's weights and bias, fitted by the
    ELBO on the trained body's features (see the module docstring)."""

    name = "flow"
    Config = FlowConfig
    config: FlowConfig

    def _prepare(self, net: nn.Module) -> None:
        c = self.config
        layer = sample_last_linear(net)
        layer.posterior = WeightFlow.around_linear(
            layer.weight, layer.bias, kind=c.flow, transforms=c.transforms, hidden=c.hidden,
            init_scale=c.init_scale, seed=c.init_seed,
        )  # fmt: skip
        self.layer: SampledLinear = layer
        self.elbo: float | None = None  # the fitted negative ELBO per training row

    @property
    def posterior(self) -> WeightFlow:
        """``q(w)`` over the last layer's weights and bias."""
        posterior = self.layer.posterior
        assert isinstance(posterior, WeightFlow)  # set by _prepare and fit_posterior
        return posterior

    def param_groups(self, lr: float, weight_decay: float) -> list[dict[str, Any]]:
        """The network's own weights (``fit`` trains them by the NLL); ``q`` is fitted after."""
        flow = {id(p) for p in self.posterior.parameters()}
        params = [p for p in self.net.parameters() if p.requires_grad and id(p) not in flow]
        return [{"params": params, "weight_decay": weight_decay}]

    def _after_fit(self, train: Data, batch_size: int, seed: int) -> None:
        self.fit_posterior(train, batch_size=batch_size, seed=seed)

    def _from_pretrained(
        self,
        train: Data | None,
        val: Data | None,
        *,
        batch_size: int | None,
        seed: int,
        progress: bool,
    ) -> None:
        """Fit ``q`` on ``train`` around the network's trained weights (``batch_size``: rows
        per forward of the body), then τ⁻¹ on ``val`` (regression)."""
        if train is None:
            raise ValueError(
                "FlowPosterior.from_pretrained needs training data (train=...) to fit the flow"
            )
        self.fit_posterior(self._checked_data(train, "training inputs"),
                           batch_size=batch_size or 256, seed=seed)  # fmt: skip
        self._fit_noise_on(val, seed)

    # ------------------------------------------------------------------ the ELBO
    def features(self, data: Data, batch_size: int = 256) -> tuple[Tensor, Tensor]:
        """The last layer's inputs on ``data`` and the targets: ``h [N, in]``, ``y [N]``
        (the body in eval mode, no gradients, ``batch_size`` rows per forward)."""
        x, y = self._tensors(data)
        seen: list[Tensor] = []
        hook = self.layer.register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
        try:
            with eval_mode(self.net), torch.no_grad():
                for a in range(0, len(x), batch_size):
                    self.net(x[a : a + batch_size])
        finally:
            hook.remove()
        return torch.cat(seen).reshape(len(x), -1), y

    def fit_posterior(self, train: Data, *, batch_size: int = 256, seed: int = 0) -> float:
        """Centre ``q`` on the last layer's current weights and fit it by the ELBO on ``train``
        (see the module docstring); returns the negative ELBO per training row."""
        c = self.config
        h, y = self.features(train, batch_size)
        layer = self.layer
        layer.posterior = WeightFlow.around_linear(
            layer.weight, layer.bias, kind=c.flow, transforms=c.transforms, hidden=c.hidden,
            init_scale=c.init_scale, seed=c.init_seed,
        ).to(self.device)  # fmt: skip
        q = self.posterior
        params: list[nn.Parameter] = []
        if self.config.task is Task.CLASSIFICATION:
            labels = y.long()

            def log_lik(out: Tensor) -> Tensor:  # [S, N, C] -> [S]
                return (
                    out.log_softmax(-1)
                    .gather(-1, labels.expand(len(out), -1)[..., None])
                    .sum((-2, -1))
                )
        else:
            with torch.no_grad():
                mse = float(((F.linear(h, layer.weight, layer.bias).reshape(-1) - y) ** 2).mean())
            log_noise = nn.Parameter(torch.tensor(math.log(max(mse, 1e-6)), device=h.device))
            params = [log_noise]

            def log_lik(out: Tensor) -> Tensor:  # [S, N, 1] -> [S]
                sq = (out.reshape(len(out), -1) - y) ** 2
                return -0.5 * (sq * torch.exp(-log_noise) + log_noise + math.log(2 * math.pi)).sum(
                    -1
                )

        def log_joint(w: Tensor) -> Tensor:  # [S, D] -> [S]
            weights, biases = q.split(w)
            out = h @ weights.transpose(1, 2)  # [S, N, out]
            if biases is not None:
                out = out + biases[:, None, :]
            return log_lik(out) + gaussian_log_prior(w, c.prior_sigma)

        losses = fit_elbo(q, log_joint, steps=c.elbo_steps, lr=c.elbo_lr,
                          samples=c.elbo_samples, seed=seed, params=params)  # fmt: skip
        tail = losses[-max(1, len(losses) // 10) :]
        self.elbo = sum(tail) / len(tail) / len(h)
        if params:
            self.noise_variance = float(params[0].detach().exp())
        log.info("flow posterior fitted: negative ELBO %.4f per row", self.elbo)
        return self.elbo

    # ------------------------------------------------------------------ bundles
    def extra_state(self) -> dict[str, Any]:
        return {"elbo": self.elbo}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.elbo = state.get("elbo")
