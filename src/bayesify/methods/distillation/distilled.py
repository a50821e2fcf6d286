"""A distilled student: one deterministic pass over N rows gives the predictive's summaries.

The student is the teacher's own network (rebuilt from its architecture, outside any sampling:
dropout off, mean weights) with its last ``nn.Linear`` widened for the extra heads (Malinin et
al. 2020, ensemble distribution distillation; :func:`bayesify.methods.distillation.distill.distill`
trains it):

- classification, C classes -> C + 1 outputs ``[z, s]``: a Dirichlet with concentrations
  ``alpha = exp(s) * softmax(z)`` (mean class probabilities ``softmax(z)``, precision
  ``alpha0 = exp(s)``);
- regression -> 3 outputs ``[mu, log v_e, log v_a]``: predictive mean, epistemic variance
  (the variance of the teacher's per-sample means) and aleatoric variance, in the network's
  target units.

``predict(x, samples=T)`` runs the network once over the N rows and then draws T samples from
that per-row distribution, so the result is an ordinary :class:`~bayesify.predictive.Predictive`
that conformal prediction, deferral, ``bayesify predict`` and the server use as they use any:

- classification: T draws ``p_t ~ Dir(alpha)`` (``[T, N, C]``); their mean, entropy, expected
  entropy and mutual information are Monte Carlo estimates of the Dirichlet's closed forms
  (:func:`~bayesify.predictive.dirichlet.dirichlet_summaries`, what :meth:`summaries` returns);
- regression: ``mu + sqrt(v_e) * z_t`` with z standardised over the T draws of each row (mean
  0, variance 1), and noise variance ``v_a`` per row, so the Predictive's ``mean``,
  ``epistemic_variance`` and ``aleatoric_variance`` equal the heads exactly for T >= 2 (T = 1:
  the mean alone, epistemic variance 0).

The draws are cheap (no network pass), so T costs next to nothing; the network never sees the
sample axis. Bundles record the teacher (method, config and weights digests) and the transfer
set in ``distillation``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from bayesify.methods.core.base import MethodConfig
from bayesify.methods.core.one_pass import OnePassMethod
from bayesify.nn.dropout import MCDropout as MCDropoutLayer
from bayesify.nn.modes import eval_mode
from bayesify.options import Task
from bayesify.predictive import Predictive
from bayesify.predictive.dirichlet import dirichlet_summaries, sample_dirichlet

log = logging.getLogger(__name__)

#: log-precision and log-variance outputs are clamped to this range before ``exp``
LOG_CLAMP = 30.0
#: the error of ``Distilled.fit``: a student is trained by distillation, not on targets
FIT_REFUSED = (
    "a distilled student is trained on a teacher's predictive, not fitted on targets: use "
    "bayesify.distill(teacher, x) or bayesify distill BUNDLE --data FILE --out STUDENT"
)


@dataclass(frozen=True)
class DistilledConfig(MethodConfig):
    """``outputs``: the teacher network's outputs per row (C classes; 1, or 2 for a
    heteroscedastic regression teacher); 0: read from the network's last linear layer."""

    outputs: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.outputs < 0:
            raise ValueError(f"outputs must be >= 0, got {self.outputs}")
        if self.heteroscedastic:
            raise ValueError("a distilled student learns its noise variance per row already; "
                             "leave likelihood at its default")  # fmt: skip


def last_linear(net: nn.Module) -> tuple[nn.Module, str, nn.Linear]:
    """The network's last ``nn.Linear`` in registration order: (parent, attribute, layer)."""
    found = None
    for parent in net.modules():
        for name, child in parent.named_children():
            if isinstance(child, nn.Linear):
                found = (parent, name, child)
    if found is None:
        raise ValueError("a distilled student widens the network's last nn.Linear layer; "
                         "this network has none")  # fmt: skip
    return found


class Distilled(OnePassMethod):
    """A student network trained on a teacher's predictive: the summaries in one pass."""

    name = "distilled"
    Config = DistilledConfig
    config: DistilledConfig

    def _prepare(self, net: nn.Module) -> None:
        for m in net.modules():  # a deterministic student: dropout off in training as well
            if isinstance(m, nn.modules.dropout._DropoutNd | MCDropoutLayer):
                m.p = 0.0
        parent, attr, layer = last_linear(net)
        classify = self.config.task is Task.CLASSIFICATION
        k = self.config.outputs or layer.out_features
        if classify and k < 2:
            raise ValueError(f"a classification teacher outputs C >= 2 classes, got {k}")
        self.outputs = k
        width = k + 1 if classify else 3
        wide = nn.Linear(layer.in_features, width, bias=layer.bias is not None)
        wide.to(device=layer.weight.device, dtype=layer.weight.dtype)
        with torch.no_grad():  # the extra heads start at zero (set by distill from the data)
            wide.weight.zero_()
            if wide.bias is not None:
                wide.bias.zero_()
        setattr(parent, attr, wide)
        self.head_width = width
        self.noise_fitted = True  # the aleatoric variance is a head, not a fitted τ⁻¹
        # what the student was distilled from and on (teacher digests, transfer set)
        self.distillation: dict[str, Any] = {}

    def fit(self, *args: Any, **kwargs: Any) -> Distilled:
        """Refused: a student learns from a teacher's predictive, not from targets."""
        raise ValueError(FIT_REFUSED)

    # ------------------------------------------------------------------ the one pass
    def concentrations(self, out: Tensor) -> Tensor:
        """Classification heads ``[N, C + 1]`` -> Dirichlet concentrations ``alpha [N, C]``."""
        z, s = out[:, :-1], out[:, -1:]
        return (torch.log_softmax(z, -1) + s.clamp(-LOG_CLAMP, LOG_CLAMP)).exp()

    def moments(self, out: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Regression heads ``[N, 3]`` -> mean, epistemic and aleatoric variance ``[N]``."""
        logs = out[:, 1:].clamp(-LOG_CLAMP, LOG_CLAMP).exp()
        return out[:, 0], logs[:, 0], logs[:, 1]

    def _draws(self, out: Tensor, samples: int, generator: torch.Generator | None) -> Tensor:
        if self.config.task is Task.CLASSIFICATION:
            p = sample_dirichlet(self.concentrations(out), samples, generator)
            return p.clamp_min(torch.finfo(p.dtype).tiny).log()
        mu, ve, va = self.moments(out)
        z = torch.randn(samples, len(mu), generator=generator, dtype=mu.dtype).to(mu.device)
        if samples > 1:  # standardised over the draws: exact mean and variance per row
            z = (z - z.mean(0)) / z.std(0, unbiased=False).clamp_min(1e-12)
        else:
            z = torch.zeros_like(z)
        means = mu + ve.sqrt() * z  # [T, N]
        return torch.stack([means, va.expand_as(means)], -1)

    def to_predictive(self, out: Tensor) -> Predictive:
        """Draws ``[T, N, C]`` (log probabilities) or ``[T, N, 2]`` (means, noise variance)."""
        if self.config.task is Task.CLASSIFICATION:  # Dirichlet draws: log probabilities
            return Predictive.from_logits(out, keep_logits=False)
        return Predictive.regression(out[..., 0], out[..., 1])

    # ------------------------------------------------------------------ closed forms
    def summaries(self, x: Any) -> dict[str, Tensor]:
        """The student's summaries in closed form at raw inputs ``x`` (as :meth:`predict` takes
        them), what the Monte Carlo estimates of ``predict`` converge to. Classification:
        ``mean [N, C]``, ``epistemic_variance``/``aleatoric_variance [N, C]``, ``entropy``,
        ``expected_entropy``, ``mutual_information [N]``; regression (the user's target
        units): ``mean``, ``epistemic_variance``, ``aleatoric_variance``, ``variance [N]``."""
        prep = self.preprocessing
        if prep is not None:
            x = prep.inputs(x)
        x = self._check_inputs(x)
        with eval_mode(self.net), torch.no_grad():
            out = self.heads(x, 4096)
        if self.config.task is Task.CLASSIFICATION:
            return dirichlet_summaries(self.concentrations(out).double())
        mu, ve, va = self.moments(out)
        if prep is not None and prep.y_mean is not None and prep.y_std is not None:
            mu, scale = mu * prep.y_std + prep.y_mean, prep.y_std**2
            ve, va = ve * scale, va * scale
        return {"mean": mu, "epistemic_variance": ve, "aleatoric_variance": va,
                "variance": ve + va}  # fmt: skip

    # ------------------------------------------------------------------ bundles
    def extra_state(self) -> dict[str, Any]:
        return {"distillation": self.distillation}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        distillation = state.get("distillation") or {}
        if not isinstance(distillation, dict):
            raise TypeError("distillation must be a JSON object")
        self.distillation = distillation
        self.noise_fitted = True
