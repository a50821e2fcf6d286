"""What a deferral policy thresholds and how it measures the error it controls: the uncertainty
scores (:class:`DeferralScore`) and error metrics (:class:`ErrorMetric`) allowed per task, the
per-row score and loss, and the checks of targets."""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Any

import torch
from torch import Tensor

from bayesify.predictive import Predictive, Task


class DeferralScore(StrEnum):
    """The uncertainty score a policy thresholds (higher = less certain)."""

    MI = "mi"  # mutual information (epistemic), classification
    ENTROPY = "entropy"  # predictive entropy (total), classification
    MAX_PROB = "max_prob"  # 1 - the largest mean class probability, classification
    STD = "std"  # predictive standard deviation (total), regression
    EPISTEMIC_VARIANCE = "epistemic_variance"  # variance over samples (summed over classes)
    DENSITY = "density"  # minus the method's feature log density (DDU), classification
    MAHALANOBIS = "mahalanobis"  # Mahalanobis distance of the features (a fit), classification


#: scores of the network's features, not of the predictive: the caller computes them
#: (:func:`bayesify.methods.core.ood.feature_scores`) and hands them in as ``row_scores``. They
#: are deterministic, so a threshold on them holds under every sampling policy.
FEATURE_SCORES = (DeferralScore.DENSITY, DeferralScore.MAHALANOBIS)


class ErrorMetric(StrEnum):
    """How the error on accepted rows is measured for a target error."""

    ERROR = "error"  # 0/1 error rate, classification
    RMSE = "rmse"  # root mean squared error, regression
    MAE = "mae"  # mean absolute error, regression


SCORES_FOR = {
    Task.CLASSIFICATION: (DeferralScore.MI, DeferralScore.ENTROPY, DeferralScore.MAX_PROB,
                          DeferralScore.EPISTEMIC_VARIANCE, *FEATURE_SCORES),
    Task.REGRESSION: (DeferralScore.STD, DeferralScore.EPISTEMIC_VARIANCE),
}  # fmt: skip
METRICS_FOR = {
    Task.CLASSIFICATION: (ErrorMetric.ERROR,),
    Task.REGRESSION: (ErrorMetric.RMSE, ErrorMetric.MAE),
}


def parse_kind(kind: type[StrEnum], value: Any, name: str, allowed: tuple[Any, ...]) -> Any:
    try:
        parsed = kind(value)
    except ValueError:
        parsed = None
    if parsed not in allowed:
        valid = ", ".join(a.value for a in allowed)
        raise ValueError(f"{name} must be one of {valid} for this task, got {value!r}")
    return parsed


#: the classification scores that are OOD scores of :mod:`bayesify.predictive.ood` by that name
_OOD_NAMES = {DeferralScore.MI: "mutual_information", DeferralScore.ENTROPY: "entropy",
              DeferralScore.MAX_PROB: "max_prob"}  # fmt: skip


def uncertainty_score(
    pred: Predictive, score: DeferralScore | str, row_scores: Any = None
) -> Tensor:
    """The per-row score ``[N]`` (float64) a policy thresholds: of the predictive, or for a
    feature score (:data:`FEATURE_SCORES`) ``row_scores [N]``, which it then requires."""
    kind: DeferralScore = parse_kind(DeferralScore, score, "score", SCORES_FOR[pred.task])
    if kind in FEATURE_SCORES:
        if row_scores is None:
            raise ValueError(f"{kind.value} is a score of the network's features, not of the "
                             "predictive: pass its row_scores (bayesify.ood_scores(method, x, "
                             f"[{kind.value!r}]))")  # fmt: skip
        out = torch.as_tensor(row_scores).reshape(-1)
        if len(out) != len(pred):
            raise ValueError(f"row_scores has {len(out)} rows, the predictive {len(pred)}")
    elif kind in _OOD_NAMES:
        out = pred.ood_score(_OOD_NAMES[kind])
    elif kind is DeferralScore.STD:
        out = pred.std
    else:
        ev = pred.epistemic_variance
        out = ev.sum(-1) if pred.task is Task.CLASSIFICATION else ev
    return out.detach().to(torch.float64).cpu()


def row_loss(pred: Predictive, y: Tensor, metric: ErrorMetric) -> Tensor:
    """Per-row loss ``[N]`` whose mean (RMSE: whose root mean) is the error."""
    if metric is ErrorMetric.ERROR:
        return (pred.predicted_class.cpu() != y.long().cpu()).to(torch.float64)
    diff = pred.mean.detach().cpu().double() - y.cpu().double()
    return diff**2 if metric is ErrorMetric.RMSE else diff.abs()


def accepted_error(loss: Tensor, metric: ErrorMetric) -> float:
    if len(loss) == 0:
        return float("nan")
    m = float(loss.mean())
    return math.sqrt(m) if metric is ErrorMetric.RMSE else m


def checked_targets(pred: Predictive, y: Any) -> Tensor:
    out = torch.as_tensor(y)
    if out.dim() == 2 and out.shape[-1] == 1:
        out = out.squeeze(-1)
    if out.shape != (len(pred),):
        raise ValueError(f"y must have shape [N] = [{len(pred)}], got {list(out.shape)}")
    if not torch.isfinite(out.double()).all():
        raise ValueError("y contains non-finite values")
    return out
