"""Out-of-distribution scores by name. One convention: **higher = more likely out of
distribution**, per row ``[N]``.

Scores of a classification predictive (samples ``[T, N, C]``), :data:`PREDICTIVE_SCORES`:

* ``max_prob``: 1 − the largest mean class probability (Hendrycks & Gimpel 2017, on the
  Bayesian mean ``p̄ = mean_t p_t``).
* ``max_logit``: minus the largest logit, averaged over samples: ``−mean_t max_c l[t, c]``
  (Hendrycks et al. 2022).
* ``energy``: the free energy at temperature 1, averaged over samples:
  ``mean_t −logsumexp_c l[t, c]`` (Liu et al. 2020, whose energy is lower in distribution).
* ``entropy``: entropy of the mean prediction (total uncertainty), nats.
* ``mutual_information``: entropy minus the mean per-sample entropy (epistemic), nats.

``max_logit`` and ``energy`` need the network's logits; a predictive made from probabilities
(a distilled student's Dirichlet draws, a temperature-scaled predictive) has none, and asking
for them is a one-line ``ValueError``.

Scores of the inputs, which need the method and not only its predictive, :data:`FEATURE_SCORES`
(:func:`bayesify.methods.core.ood.ood_scores`): ``mahalanobis`` (the smallest squared Mahalanobis
distance of the penultimate features to a class mean, Lee et al. 2018; fitted by
``fit_mahalanobis``) and ``density`` (minus the log density of a method's own fitted feature
density, ``density_score``, where the method has one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from bayesify.predictive.core import Predictive

#: scores computed from a classification predictive alone
PREDICTIVE_SCORES = ("max_prob", "max_logit", "energy", "entropy", "mutual_information")
#: scores that need the logits (a predictive made by ``Predictive.from_logits``)
LOGIT_SCORES = ("max_logit", "energy")
#: scores of the inputs' features (they need the method and the inputs)
FEATURE_SCORES = ("mahalanobis", "density")
OOD_SCORES = PREDICTIVE_SCORES + FEATURE_SCORES
"""Every OOD score name, higher = more likely out of distribution: ``max_prob``, ``max_logit``,
``energy``, ``entropy``, ``mutual_information``, ``mahalanobis``, ``density``."""


def check_names(names: str | Sequence[str]) -> tuple[str, ...]:
    """The score names as a tuple without repeats; a ``ValueError`` naming an unknown one."""
    names = (names,) if isinstance(names, str) else tuple(names)
    for n in names:
        if n not in OOD_SCORES:
            raise ValueError(f"unknown OOD score {n!r}; valid: {', '.join(OOD_SCORES)}")
    return tuple(dict.fromkeys(names))


def ood_score(pred: Predictive, name: str) -> Tensor:
    """The score ``name`` of ``pred``'s rows: ``[N]`` float64, higher = more likely OOD."""
    check_names(name)
    if name in FEATURE_SCORES:
        raise ValueError(
            f"{name} scores the inputs' features, not a predictive: use "
            "bayesify.ood_scores(method, x, names)"
        )
    if pred.task.value != "classification":
        raise ValueError(f"OOD scores are defined for classification, this predictive is "
                         f"{pred.task.value}")  # fmt: skip
    samples = pred.samples.detach()
    if name == "max_prob":
        out = 1.0 - samples.mean(0).amax(-1)
    elif name == "entropy":
        out = pred.entropy.detach()
    elif name == "mutual_information":
        out = pred.mutual_information.detach()
    else:
        if pred.max_logits is None:
            raise ValueError(
                f"{name} needs the network's logits; this predictive has none (its samples are "
                "class probabilities)"
            )
        top = pred.max_logits.detach().double()  # [T, N]
        if name == "max_logit":
            out = -top.mean(0)
        else:  # logsumexp_c l = max_c l − log max_c p
            lse = top - samples.amax(-1).double().log()
            out = -lse.mean(0)
    return out.to(torch.float64)
