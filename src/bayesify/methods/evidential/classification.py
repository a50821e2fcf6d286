"""Evidential classification (Sensoy, Kaplan & Kandemir, NeurIPS 2018).

The network's C outputs are turned into evidence ``e >= 0`` (``evidence``: ReLU, the paper's,
softplus or exp) and a Dirichlet ``alpha = e + 1`` per row. Training minimises a data term under
p ~ Dir(alpha) (``loss``: the expected squared error, the paper's, the Bayes risk of
cross-entropy or the log marginal likelihood) plus ``min(1, progress / kl_warmup)`` times the
KL divergence from the uniform Dirichlet of the misleading evidence (:mod:`.losses`).

``predict(x, samples=T)`` runs the network once and draws T class-probability vectors from
each row's Dirichlet (:func:`~bayesify.predictive.dirichlet.sample_dirichlet`), so the
:class:`~bayesify.predictive.Predictive`'s mutual information estimates the Dirichlet's
(epistemic) and its mean ``alpha / S``; :meth:`~.one_pass.OnePassMethod.summaries` gives the
closed forms and the paper's uncertainty mass ``u = C / S`` (``vacuity``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bayesify.methods.core.base import MethodConfig
from bayesify.methods.core.inputs import class_labels
from bayesify.methods.evidential.losses import dirichlet_data_loss, misleading_kl
from bayesify.methods.evidential.one_pass import OnePassMethod
from bayesify.nn.sampled_linear import last_linear
from bayesify.options import Evidence, EvidentialLoss, Task
from bayesify.predictive import Predictive
from bayesify.predictive.dirichlet import dirichlet_summaries, sample_dirichlet

#: logits are clamped to this before ``exp`` evidence
EXP_CLAMP = 30.0


@dataclass(frozen=True)
class EvidentialClassifierConfig(MethodConfig):
    """``evidence``: logits -> evidence (relu, softplus, exp); ``loss``: the data term (mse,
    digamma, log); ``kl_warmup``: the fraction of training over which the KL term's weight
    rises from 0 to 1 (0: full weight from the start); ``kl_weight``: its weight after."""

    task: Task = Task.CLASSIFICATION
    evidence: Evidence = Evidence.SOFTPLUS
    loss: EvidentialLoss = EvidentialLoss.MSE
    kl_warmup: float = 0.1
    kl_weight: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require(("kl_warmup",), lambda v: 0 <= v <= 1, "in [0, 1]")
        self._require(("kl_weight",), lambda v: v >= 0, ">= 0")
        if self.task is not Task.CLASSIFICATION:
            raise ValueError("evidential-classification is for class labels; for real targets "
                             "use evidential-regression")  # fmt: skip


class EvidentialClassifier(OnePassMethod):
    """Evidential classification: a Dirichlet over class probabilities from non-negative
    evidence, trained on its expected loss with a KL penalty on misleading evidence, predicted
    in one pass (Sensoy et al. 2018)."""

    name = "evidential-classification"
    Config = EvidentialClassifierConfig
    config: EvidentialClassifierConfig

    def _prepare(self, net: nn.Module) -> None:
        try:
            _, _, layer = last_linear(net)
        except ValueError:
            raise ValueError("an evidential classifier reads its classes from the network's "
                             "last nn.Linear layer; this network has none") from None  # fmt: skip
        if layer.out_features < 2:
            raise ValueError(f"an evidential classifier needs C >= 2 class outputs, got "
                             f"{layer.out_features}")  # fmt: skip
        self.head_width = layer.out_features

    def concentrations(self, out: Tensor) -> Tensor:
        """Logits ``[N, C]`` -> Dirichlet concentrations ``alpha = evidence + 1`` ``[N, C]``."""
        kind = self.config.evidence
        if kind is Evidence.RELU:
            e = F.relu(out)
        elif kind is Evidence.SOFTPLUS:
            e = F.softplus(out)
        else:
            e = out.clamp(max=EXP_CLAMP).exp()
        return e + 1

    def nll(self, out: Tensor, y: Tensor) -> Tensor:
        """The mean data term (the validation loss)."""
        alpha = self.concentrations(out)
        onehot = F.one_hot(class_labels(y, out.shape[-1]), out.shape[-1]).to(alpha)
        return dirichlet_data_loss(alpha, onehot, self.config.loss).mean()

    def objective(self, x: Tensor, y: Tensor, progress: float, n_data: int) -> Tensor:
        """Data term + the annealed KL of the misleading evidence, mean over the mini-batch."""
        out = self.net(x)
        alpha = self.concentrations(out)
        onehot = F.one_hot(class_labels(y, out.shape[-1]), out.shape[-1]).to(alpha)
        loss = dirichlet_data_loss(alpha, onehot, self.config.loss)
        weight = self.kl_coefficient(progress)
        if weight > 0:
            loss = loss + weight * misleading_kl(alpha, onehot)
        return loss.mean()

    def kl_coefficient(self, progress: float) -> float:
        """The KL term's weight at ``progress`` in [0, 1) through training."""
        cfg = self.config
        ramp = 1.0 if cfg.kl_warmup == 0 else min(1.0, progress / cfg.kl_warmup)
        return cfg.kl_weight * ramp

    def _draws(self, out: Tensor, samples: int, generator: torch.Generator | None) -> Tensor:
        """``[T, N, C]``: log class probabilities drawn from each row's Dirichlet."""
        alpha = self.concentrations(out)
        device = generator.device if generator is not None else torch.device("cpu")
        p = sample_dirichlet(alpha.to(device), samples, generator).to(out.device)
        return p.clamp_min(torch.finfo(p.dtype).tiny).log()

    def to_predictive(self, out: Tensor) -> Predictive:
        return Predictive.from_logits(out)

    def closed_forms(self, out: Tensor) -> dict[str, Tensor]:
        """The Dirichlet's summaries (``mean [N, C]``, ``entropy``, ``expected_entropy``,
        ``mutual_information`` ``[N]``, ...) plus ``vacuity`` ``u = C / S`` and ``alpha``."""
        alpha = self.concentrations(out).double()
        vacuity = alpha.shape[-1] / alpha.sum(-1)
        return {**dirichlet_summaries(alpha), "vacuity": vacuity, "alpha": alpha}
