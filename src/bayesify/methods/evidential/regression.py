"""Deep evidential regression (Amini, Schwarting, Soleimany & Rus, NeurIPS 2020).

The network's last ``nn.Linear`` (one output) becomes a Normal-Inverse-Gamma head with four
outputs ``[gamma, nu, alpha, beta]`` (``nu = softplus``, ``alpha = softplus + 1``, ``beta =
softplus``; the mean's row keeps the layer's weights, so a trained network starts from its own
mean). Training minimises the NIG's negative log marginal likelihood (a Student-t) plus
``coeff * |y - gamma| * (2 nu + alpha)`` (:mod:`.losses`).

``predict(x, samples=T)`` runs the network once and draws T pairs ``(mu_t, sigma²_t)`` from each
row's NIG (:func:`~bayesify.predictive.nig.sample_nig`): a
:class:`~bayesify.predictive.Predictive` whose mixture of ``N(mu_t, sigma²_t)`` estimates the
Student-t predictive, epistemic variance ``Var[mu] = beta / (nu (alpha - 1))`` and aleatoric
``E[sigma²] = beta / (alpha - 1)``; :meth:`~.one_pass.OnePassMethod.summaries` gives them in
closed form. The noise is the head's, so no τ⁻¹ is fitted; validation data fits the
constant-uncertainty baseline only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bayesify.methods.core.base import MethodConfig
from bayesify.methods.core.inputs import regression_targets
from bayesify.methods.evidential.losses import evidential_regression_loss
from bayesify.methods.evidential.one_pass import OnePassMethod
from bayesify.metrics import fit_constant_std
from bayesify.nn.sampled_linear import last_linear
from bayesify.options import Task
from bayesify.predictive import Predictive
from bayesify.predictive.nig import nig_summaries, sample_nig
from bayesify.train import Data

#: the smallest nu, alpha - 1 and beta (keeps the NIG proper and its variances finite)
FLOOR = 1e-6


@dataclass(frozen=True)
class EvidentialRegressionConfig(MethodConfig):
    """``coeff``: λ, the weight of the evidence regulariser ``|y - gamma| (2 nu + alpha)``."""

    coeff: float = 0.01

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require(("coeff",), lambda v: v >= 0, ">= 0")
        if self.task is not Task.REGRESSION:
            raise ValueError("evidential-regression is for regression; for class labels use "
                             "evidential-classification")  # fmt: skip
        if self.heteroscedastic:
            raise ValueError("evidential regression learns its noise per row already (the NIG "
                             "head); leave likelihood at its default")  # fmt: skip


class EvidentialRegression(OnePassMethod):
    """Deep evidential regression: a Normal-Inverse-Gamma head trained on its Student-t marginal
    likelihood and an evidence regulariser, predicted in one pass (Amini et al. 2020)."""

    name = "evidential-regression"
    Config = EvidentialRegressionConfig
    config: EvidentialRegressionConfig
    head_width = 4
    spread_hint = (
        "the NIG's nu is large everywhere (epistemic share 1 / (1 + nu)); raise coeff so that "
        "evidence costs more where the fit is poor"
    )

    def _prepare(self, net: nn.Module) -> None:
        try:
            parent, attr, layer = last_linear(net)
        except ValueError:
            raise ValueError("evidential regression puts its NIG head on the network's last "
                             "nn.Linear layer; this network has none") from None  # fmt: skip
        if layer.out_features != 1:
            raise ValueError(
                f"evidential regression needs a network with one output per row, got a last "
                f"nn.Linear with {layer.out_features}"
            )
        head = nn.Linear(layer.in_features, 4, bias=layer.bias is not None)
        head.to(device=layer.weight.device, dtype=layer.weight.dtype)
        with torch.no_grad():  # the mean's row: the network's own output
            head.weight[0] = layer.weight[0]
            if head.bias is not None and layer.bias is not None:
                head.bias[0] = layer.bias[0]
        setattr(parent, attr, head)
        self.noise_fitted = True  # the noise is the head's, not a fitted τ⁻¹

    def nig(self, out: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Raw outputs ``[N, 4]`` -> ``gamma, nu, alpha, beta`` ``[N]`` (constrained)."""
        gamma, nu, alpha, beta = out.unbind(-1)
        return (
            gamma,
            F.softplus(nu) + FLOOR,
            F.softplus(alpha) + 1 + FLOOR,
            F.softplus(beta) + FLOOR,
        )

    def nll(self, out: Tensor, y: Tensor) -> Tensor:
        """The mean NIG negative log marginal likelihood (the validation loss)."""
        return self._loss(out, y, 0.0)

    def objective(self, x: Tensor, y: Tensor, progress: float, n_data: int) -> Tensor:
        """NIG NLL + ``coeff`` × the evidence regulariser, mean over the mini-batch."""
        return self._loss(self.net(x), y, self.config.coeff)

    def _loss(self, out: Tensor, y: Tensor, coeff: float) -> Tensor:
        if out.dim() != 2 or out.shape[-1] != 4:
            raise ValueError(f"the NIG head must output [N, 4], got {list(out.shape)}")
        return evidential_regression_loss(y.reshape(-1), *self.nig(out), coeff).mean()

    def _draws(self, out: Tensor, samples: int, generator: torch.Generator | None) -> Tensor:
        """``[T, N, 2]``: draws of the mean and the noise variance from each row's NIG."""
        mu, var = sample_nig(*self.nig(out), samples, generator)
        return torch.stack([mu, var], -1).to(out.device)

    def to_predictive(self, out: Tensor) -> Predictive:
        """Draws ``[T, N, 2]`` -> the mixture of ``N(mu_t, sigma²_t)``."""
        return Predictive.regression(out[..., 0], out[..., 1])

    def closed_forms(self, out: Tensor) -> dict[str, Tensor]:
        """``mean``, ``epistemic_variance``, ``aleatoric_variance``, ``variance`` and the
        Student-t's ``df``, ``loc``, ``scale`` per row ``[N]``, plus the NIG's ``nu``,
        ``alpha`` and ``beta``."""
        gamma, nu, alpha, beta = (p.double() for p in self.nig(out))
        return {**nig_summaries(gamma, nu, alpha, beta), "nu": nu, "alpha": alpha, "beta": beta}

    def fit_noise(self, val: Data, *, seed: int = 0) -> float:
        """The noise is the head's: only the constant-uncertainty baseline is fitted on
        ``val``; returns 1.0 (no τ⁻¹)."""
        xv, yv = self._tensors(val)
        out = self.sample(xv, self.config.noise_samples, seed=seed)
        std = fit_constant_std(out[..., 0].mean(0), regression_targets(yv),
                               self.config.noise_objective.value)  # fmt: skip
        self.constant_variance = float(std) ** 2
        return 1.0
