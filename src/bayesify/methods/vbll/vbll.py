"""VBLL (Harrison, Willes & Snoek, ICLR 2024): a deterministic body and a variational Bayesian
last layer, trained with a closed-form lower bound.

The network's last ``nn.Linear`` becomes a :class:`~bayesify.nn.vbll.VBLLLinear`: a Gaussian
``q(w_k) = N(w̄_k, S_k)`` over each output's weights (bias included; ``S_k`` dense, diagonal or
low rank) and a learned diagonal noise variance Σ. Training maximises, per mini-batch,

    mean bound of the rows + kl_weight · (Wishart(Σ⁻¹) − KL(q ‖ N(0, prior_scale·I))) / N_data

with the bounds of :mod:`.bounds` (regression: the exact expected Gaussian log-likelihood;
classification: the discriminative Jensen bound). Body and last layer are trained together.

Prediction draws T weight matrices of the last layer from q (the body runs once per row):
regression samples are ``w_tᵀφ̃`` with the noise variance σ² added by the predictive (its
variance tends to the closed form ``φ̃ᵀSφ̃ + σ²`` as T grows); classification samples are the
logits ``W_t φ̃``, so the mutual information is the weights' disagreement.

``from_pretrained(net, train)``: the trained network's last layer becomes the posterior mean and
only the VBLL layer (mean, covariance, noise) is fitted on ``train`` for ``epochs`` epochs, the
body frozen in eval mode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from bayesify.methods.core.base import Method, MethodConfig
from bayesify.methods.vbll.bounds import jensen_bound, regression_bound, wishart_term
from bayesify.nn import check_sample_bytes
from bayesify.nn.folding import deterministic_prefix
from bayesify.nn.vbll import VBLLLinear, vbll_last_layer
from bayesify.options import Task, VBLLCovariance
from bayesify.train import Data

#: numbers one product of the features with the T weight draws may hold (32 MiB in float64)
PRODUCT_NUMBERS = 2**22


@dataclass(frozen=True)
class VBLLConfig(MethodConfig):
    """``covariance``: the covariance of each output's weights (dense, diagonal, or lowrank: a
    diagonal plus ``rank`` directions); ``rank``: the low-rank covariance's directions;
    ``prior_scale``: the prior variance of every last-layer weight; ``wishart_scale``: the scale
    of the Wishart prior on the noise precision; ``dof``: the Wishart prior's degrees of
    freedom; ``kl_weight``: multiplies the regularisers' 1/N_data; ``init_std``: the weights'
    initial posterior std (None: 1/√D); ``init_noise_variance``: the noise variance Σ starts
    at; ``refit_noise``: whether validation data refits the regression σ² for
    ``noise_objective`` as for every method (False: the σ² the bound learned is kept)."""

    covariance: VBLLCovariance = VBLLCovariance.DENSE
    rank: int = 2
    prior_scale: float = 1.0
    wishart_scale: float = 1.0
    dof: float = 1.0
    kl_weight: float = 1.0
    init_std: float | None = None
    init_noise_variance: float = 1.0
    refit_noise: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require(("rank",), lambda v: v >= 1, ">= 1")
        self._require(("prior_scale", "init_noise_variance"), lambda v: v > 0, "> 0")
        self._require(("wishart_scale", "dof", "kl_weight"), lambda v: v >= 0, ">= 0")
        self._require(("init_std",), lambda v: v is None or v > 0, "> 0 or None")
        if self.heteroscedastic:
            raise ValueError(
                "VBLL learns one noise variance in its last layer; likelihood='heteroscedastic' "
                "does not apply"
            )


class VBLL(Method):
    """Variational Bayesian last layer: the last ``nn.Linear`` gets a Gaussian posterior,
    trained with VBLL's closed-form bound; predictions draw the last layer's weights."""

    name = "vbll"
    Config = VBLLConfig
    config: VBLLConfig
    spread_hint = (
        "raise prior_scale (the weights' prior variance) or kl_weight, or use "
        "covariance='dense'; a long training on much data shrinks the posterior legitimately"
    )

    def _prepare(self, net: nn.Module) -> None:
        cfg = self.config
        self.layer: VBLLLinear = vbll_last_layer(
            net,
            covariance=cfg.covariance.value,
            rank=cfg.rank,
            init_std=cfg.init_std,
            init_noise_variance=cfg.init_noise_variance,
        )
        if cfg.task is Task.REGRESSION and self.layer.out_features != 1:
            raise ValueError(
                f"a VBLL regression net must end in nn.Linear(·, 1), got "
                f"{self.layer.out_features} outputs; for class scores pass task='classification'"
            )
        self.body_frozen = False
        if cfg.task is Task.REGRESSION and not self.layer.noise_log_var.is_meta:
            # the starting σ², not yet fitted: predicting before training warns
            self._noise_variance = float(self.layer.noise_variance().detach())

    def bound(self, x: Tensor, y: Tensor) -> Tensor:
        """Mean over the rows of the expected log-likelihood bound (0-dim)."""
        self.layer.capture = True
        try:
            self.net(x)
            phi = self.layer.features
        finally:
            self.layer.capture, self.layer.features = False, None
        assert phi is not None
        if self.config.task is Task.CLASSIFICATION:
            return jensen_bound(self.layer, phi, y)
        return regression_bound(self.layer, phi, y)

    def regulariser(self) -> Tensor:
        """``Wishart(Σ⁻¹) − KL(q ‖ p)`` (0-dim), before the 1/N_data weight."""
        cfg = self.config
        return wishart_term(self.layer, cfg.wishart_scale, cfg.dof) - self.layer.kl(cfg.prior_scale)

    def objective(self, x: Tensor, y: Tensor, progress: float, n_data: int) -> Tensor:
        """The negative of VBLL's per-datapoint bound on the mini-batch."""
        if self.body_frozen:  # only the last layer learns: the body's features as trained
            self.net.eval()
        loss = -self.bound(x, y)
        if self.config.kl_weight > 0:
            loss = loss - self.config.kl_weight * self.regulariser() / n_data
        return loss

    def nll(self, out: Tensor, y: Tensor) -> Tensor:
        """Cross-entropy at the mean, or the Gaussian NLL at the mean with the learned noise
        variance (regression; the validation loss behind early stopping)."""
        if self.config.task is Task.CLASSIFICATION:
            return super().nll(out, y)
        log_var = self.layer.noise_log_var
        sq = (out.reshape(y.shape) - y) ** 2
        return 0.5 * (math.log(2 * math.pi) + log_var + sq * torch.exp(-log_var)).mean()

    def param_groups(self, lr: float, weight_decay: float) -> list[dict[str, Any]]:
        """The VBLL layer (regularised by its KL and Wishart terms) without weight decay; the
        body with it."""
        return self._own_and_rest(self.layer.parameters(), weight_decay)

    def _after_fit(self, train: Data, batch_size: int, seed: int) -> None:
        if self.config.task is Task.REGRESSION:
            self.noise_variance = float(self.layer.noise_variance().detach())

    def fit_noise(self, val: Data, *, seed: int = 0) -> float:
        """σ² refitted on ``val`` as for every method, or (``refit_noise=False``) the learned σ²
        kept; the constant baseline is fitted on ``val`` either way."""
        learned = float(self.layer.noise_variance().detach())
        fitted = super().fit_noise(val, seed=seed)
        if self.config.refit_noise:
            return fitted
        self.noise_variance = learned
        return learned

    def _draw_samples(
        self,
        x: Tensor,
        samples: int,
        generator: torch.Generator | None,
        max_rows: int | None,
        start: int = 0,
        max_bytes: int | None = None,
    ) -> Tensor:
        """``[T, N, out]``. Where the VBLL layer ends an ``nn.Sequential`` whose other layers
        draw nothing, the body runs once per row (``max_rows`` rows a forward) and the T weight
        draws are one product ``φ̃ [n, D] @ [D, T·out]`` (float64, as the layer computes),
        instead of the body's output repeated T times; otherwise the shared chunked pass."""
        net, k = self.net, len(self.net) - 1 if isinstance(self.net, nn.Sequential) else -1
        if (
            k < 0
            or net[k] is not self.layer
            or start not in (0, k)
            or (deterministic_prefix(net) != k)
        ):
            return super()._draw_samples(x, samples, generator, max_rows, start, max_bytes)
        layer, rows = self.layer, max_rows or len(x) or 1
        n_out = layer.out_features
        product_rows = max(1, min(rows, PRODUCT_NUMBERS // (samples * n_out)))
        out: Tensor | None = None
        with self.sampling(samples, generator):
            w, b = layer.draws()  # [T, out, in], [T, out] or None
            wt = w.double().permute(2, 0, 1).reshape(layer.in_features, samples * n_out)
            bias = None if b is None else b.double().reshape(samples * n_out)
            for i in range(0, len(x), rows):
                h = x[i : i + rows] if start else net[:k](x[i : i + rows])
                for j in range(0, len(h), product_rows):
                    c = h[j : j + product_rows].double()
                    y = c @ wt if bias is None else torch.addmm(bias, c, wt)
                    y = y.reshape(len(c), samples, n_out).transpose(0, 1).to(h.dtype)
                    if out is None:
                        check_sample_bytes(samples, len(x), n_out, y.element_size(), 0, max_bytes)
                        out = y.new_empty((samples, len(x), n_out))
                    out[:, i + j : i + j + len(c)] = y
        assert out is not None
        return out

    def _from_pretrained(
        self,
        train: Data | None,
        val: Data | None,
        *,
        batch_size: int | None,
        seed: int,
        progress: bool,
        epochs: int = 10,
        lr: float = 1e-3,
    ) -> None:
        """Fit only the VBLL layer (mean, covariance, noise) on ``train`` for ``epochs`` epochs
        at ``lr``, the body frozen in eval mode (``epochs=0``: the covariance and noise stay at
        their initial values); τ on ``val``."""
        own = {id(p) for p in self.layer.parameters()}
        body = [p for p in self.net.parameters() if id(p) not in own and p.requires_grad]
        for p in body:
            p.requires_grad_(False)
        self.body_frozen = True
        try:
            super()._from_pretrained(
                train, val, batch_size=batch_size, seed=seed, progress=progress, epochs=epochs,
                lr=lr,
            )  # fmt: skip
        finally:
            self.body_frozen = False
            for p in body:
                p.requires_grad_(True)
