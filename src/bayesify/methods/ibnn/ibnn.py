"""Implicit / node-based BNN (Trinh, Heinonen, Acerbi & Kaski 2022).

Deterministic weights U and biases; a multiplicative latent z per input node of every
Linear/Conv layer with a K-component Gaussian-mixture posterior and a N(1, s²) prior.

Training (their Algorithm 1): each mini-batch of B rows is split evenly over the K components
(row i uses component ⌊iK/B⌋; the loader shuffles, so the split is random per epoch) and every
row is repeated S times with independent z. The loss per datum is

    mean NLL over the S·B rows + β(progress) · Σ_layers KL(q̂_ℓ ‖ p) / n_data,

with q̂_ℓ the mixture-mean Gaussian of eq. 22–24 and β rising linearly from 0 to 1 over the first
``kl_anneal`` fraction of training. The NLL is :meth:`Method.nll`: cross-entropy, or for
regression the squared error, i.e. the Gaussian NLL with a fixed noise variance of ½ in the
(standardised) target units up to a constant; τ is fitted on validation data after training.
The variational parameters (μ, σ) have their own optimiser group with ``variational_lr`` and no
weight decay.

Prediction: group t uses component t mod K; one pass over T·N rows. Every component weighs the
same: T is rounded up to a multiple of K (:meth:`IBNN.sample_count`; K = 4, T = 50 gives 52).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from bayesify.methods.core.base import Method, MethodConfig
from bayesify.nn import noisy_training, repeat_samples
from bayesify.nn.mixture_posterior import mixture_mean_kl
from bayesify.nn.node_noise import NodeNoise, add_node_noise
from bayesify.train import Data

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IBNNConfig(MethodConfig):
    """``components`` K; ``train_samples`` S noise draws per datum in training (Trinh et al.'s
    experiments use S = 2, which doubles the rows and so roughly the cost of an epoch; the default
    S = 1 keeps an epoch near the deterministic network's); ``prior_std`` s; ``mu_init_std`` σ0
    (μ ~ N(1, σ0²)); ``sigma_init`` initial σ, drawn from N(sigma_init, ``sigma_init_std``²)
    when that is > 0 (Trinh et al.: N(0.05, 0.02²)); ``variational_lr`` the (large) learning rate of
    μ, σ; ``kl_anneal`` fraction of training over which β goes 0 → 1 (0: β = 1 throughout);
    ``init_seed`` seeds μ's initialisation."""

    components: int = 4
    train_samples: int = 1
    prior_std: float = 0.3
    mu_init_std: float = 0.1
    sigma_init: float = 0.05
    sigma_init_std: float = 0.0
    variational_lr: float = 1e-2
    kl_anneal: float = 0.5
    init_seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require(("components", "train_samples"), lambda v: v >= 1, ">= 1")
        self._require(("prior_std", "sigma_init", "variational_lr"), lambda v: v > 0, "> 0")
        self._require(("kl_anneal",), lambda v: 0.0 <= v <= 1.0, "in [0, 1]")
        self._require(("mu_init_std", "sigma_init_std"), lambda v: v >= 0, ">= 0")


class IBNN(Method):
    """Node-based BNN with a mixture posterior over multiplicative node noise."""

    name = "ibnn"
    Config = IBNNConfig
    config: IBNNConfig

    def _prepare(self, net: nn.Module) -> None:
        c = self.config
        self.layers: list[NodeNoise] = add_node_noise(
            net,
            c.components,
            mu_init_std=c.mu_init_std,
            sigma_init=c.sigma_init,
            sigma_init_std=c.sigma_init_std,
            train_repeats=c.train_samples,
            generator=torch.Generator().manual_seed(c.init_seed),
        )
        # learning rate of the deterministic weights: None = fit's lr, 0 = frozen
        self.weight_lr: float | None = None

    def _from_pretrained(
        self,
        train: Data | None,
        val: Data | None,
        *,
        batch_size: int | None,
        seed: int,
        progress: bool,
        epochs: int = 5,
        finetune_lr: float = 0.0,
    ) -> None:
        """Keep a trained deterministic net's weights and learn the node posterior on ``train``
        for ``epochs`` (mini-batches of ``batch_size``, default 32); ``finetune_lr > 0`` also
        fine-tunes the weights at that (small) rate."""
        if train is None:
            raise ValueError(
                "IBNN.from_pretrained needs training data (train=...) to learn the node posterior"
            )
        if finetune_lr < 0:
            raise ValueError(f"finetune_lr must be >= 0, got {finetune_lr}")
        self.weight_lr = finetune_lr
        self.fit(
            train,
            val,
            epochs=epochs,
            batch_size=batch_size or 32,
            lr=finetune_lr or self.config.variational_lr,
            seed=seed,
            progress=progress,
        )

    # ------------------------------------------------------------------ training
    def variational_parameters(self) -> list[nn.Parameter]:
        return [p for layer in self.layers for p in (layer.mu, layer.rho)]

    def param_groups(self, lr: float, weight_decay: float) -> list[dict[str, Any]]:
        var_ids = {id(p) for p in self.variational_parameters()}
        weights = [p for p in self.net.parameters() if p.requires_grad and id(p) not in var_ids]
        groups = [
            {
                "params": self.variational_parameters(),
                "lr": self.config.variational_lr,
                "weight_decay": 0.0,
            }
        ]
        weight_lr = lr if self.weight_lr is None else self.weight_lr
        if weight_lr > 0 and weights:
            groups.append({"params": weights, "lr": weight_lr, "weight_decay": weight_decay})
        return groups

    def kl(self) -> Tensor:
        """Σ over layers of KL(q̂_ℓ ‖ N(1, s²)) (eq. 22–24), a scalar."""
        return mixture_mean_kl([(m.mu, m.rho) for m in self.layers], self.config.prior_std)

    def beta(self, progress: float) -> float:
        """KL weight: linear 0 → 1 over the first ``kl_anneal`` of training."""
        a = self.config.kl_anneal
        return 1.0 if a == 0 else min(1.0, progress / a)

    def objective(self, x: Tensor, y: Tensor, progress: float, n_data: int) -> Tensor:
        s = self.config.train_samples
        if s > 1:  # S copies of the batch; each layer splits every copy evenly over K
            x, y = repeat_samples(x, s), repeat_samples(y, s)  # [S*B, ...]
        with noisy_training(self.net, self.layers):
            nll = self.nll(self.net(x), y)
        return nll + self.beta(progress) * self.kl() / n_data

    # ------------------------------------------------------------------ prediction
    def sample_count(self, samples: int) -> int:
        """T rounded up to a multiple of K, so each component gives the same number of samples."""
        k = self.config.components
        return k * math.ceil(samples / k)

    def extra_state(self) -> dict[str, Any]:
        return {"weight_lr": self.weight_lr}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.weight_lr = state.get("weight_lr")
