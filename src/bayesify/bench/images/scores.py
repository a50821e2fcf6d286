"""What ``bayesify bench images`` measures on one trained method: every score as JSON-able values
for one store row, computed from :class:`~bayesify.predictive.Predictive` objects with the
functions of :mod:`bayesify.metrics` (nothing is re-implemented here).

Uncertainty scores of the error–coverage curves (higher = less certain): ``entropy`` (total,
of the mean prediction), ``mi`` (mutual information: epistemic), ``expected_entropy``
(aleatoric) and ``max_prob`` (one minus the largest mean class probability, the classic softmax
baseline). OOD detection scores every OOD score a method answers, by its name in
:mod:`bayesify.predictive.ood` (the logit scores where its outputs are logits; ``mahalanobis``
and ``density`` passed in as computed per row by the job).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from bayesify import metrics
from bayesify.predictive import Predictive
from bayesify.predictive.ood import PREDICTIVE_SCORES

#: coverage fractions at which error–coverage curves are stored (the full curve has N points)
COVERAGE_GRID = tuple(round(0.05 * k, 2) for k in range(2, 21))
#: the scores every OOD / coverage table shows; the deterministic net has no ``mi``
SCORES = ("entropy", "mi", "max_prob")


def uncertainty_scores(pred: Predictive) -> dict[str, Tensor]:
    """Per-row scores ``[N]`` of a classification predictive (samples ``[T, N, C]``)."""
    return {
        "entropy": pred.ood_score("entropy"),
        "mi": pred.ood_score("mutual_information"),
        "expected_entropy": pred.expected_entropy,
        "max_prob": pred.ood_score("max_prob"),
    }


#: reference rows whose predictive is closed-form class probabilities, handed on as T equal
#: samples: their mutual information is zero, so they are read by the predictive entropy
CLOSED_FORM = frozenset({"laplace-torch"})


def default_score(method: str, names: list[str] | tuple[str, ...]) -> str:
    """The score a method is read by unless told otherwise: its own feature density where it
    has one, the mutual information (epistemic) where it draws samples, the entropy where its
    samples are all equal (:data:`CLOSED_FORM`), else the maximum softmax probability (the
    deterministic network's baseline)."""
    if "density" in names:
        return "density"
    if method in CLOSED_FORM:
        return "entropy"
    return "max_prob" if method == "deterministic" else "mutual_information"


def predictive_ood_values(pred: Predictive) -> dict[str, Tensor]:
    """Every OOD score ``[N]`` of ``pred`` by name (the logit scores where it has logits)."""
    names = [n for n in PREDICTIVE_SCORES
             if pred.max_logits is not None or n not in ("max_logit", "energy")]  # fmt: skip
    return {n: pred.ood_score(n) for n in names}


def accuracy_scores(pred: Predictive, y: Tensor) -> dict[str, float]:
    """Error, NLL, ECE (15 bins) and Brier score of the mean prediction ``[N, C]`` on ``y [N]``."""
    p = pred.mean
    return {
        "error": float(metrics.error_rate(p, y)),
        "nll": float(metrics.nll(p, y)),
        "ece": float(metrics.expected_calibration_error(p, y)),
        "brier": float(metrics.brier_score(p, y)),
    }


def ood_scores(
    pred_in: Predictive,
    pred_out: Predictive,
    features_in: dict[str, Tensor] | None = None,
    features_out: dict[str, Tensor] | None = None,
) -> dict[str, dict[str, float]]:
    """Per OOD score (every one ``pred_in`` answers, and the feature scores ``features_in`` /
    ``features_out`` by name, ``[N]`` each): AUROC, AUPR and FPR at 95% TPR with OOD the
    positive class, and the mean score in and out."""
    s_in = {**predictive_ood_values(pred_in), **(features_in or {})}
    s_out = {**predictive_ood_values(pred_out), **(features_out or {})}
    return {
        name: {
            "auroc": float(metrics.auroc(s_in[name], s_out[name])),
            "aupr": float(metrics.aupr(s_in[name], s_out[name])),
            "fpr95": float(metrics.fpr_at_tpr(s_in[name], s_out[name], 0.95)),
            "mean_in": float(s_in[name].double().mean()),
            "mean_out": float(s_out[name].double().mean()),
        }
        for name in s_in
        if name in s_out
    }


def mean_uncertainty(pred: Predictive) -> dict[str, float]:
    """Mean total entropy, aleatoric part (expected entropy) and epistemic part (MI)."""
    return {
        "entropy": float(pred.entropy.mean()),
        "aleatoric": float(pred.expected_entropy.mean()),
        "epistemic": float(pred.mutual_information.mean()),
    }


def coverage_scores(
    pred: Predictive, y: Tensor, extra: dict[str, Tensor] | None = None
) -> dict[str, dict[str, object]]:
    """Per score: the error on the retained rows at :data:`COVERAGE_GRID` (most certain kept
    first; Shekhovtsov & Flach Fig. A.3) and the area under the whole curve (AURC). ``extra``:
    more per-row scores ``[N]`` (higher = less certain), e.g. a method's feature density."""
    wrong = (pred.mean.argmax(-1) != y).to(torch.float64)  # [N] 0/1 loss
    n = len(y)
    out: dict[str, dict[str, object]] = {}
    for name, u in {**uncertainty_scores(pred), **(extra or {})}.items():
        u = u.to(torch.float64)
        curve = metrics.risk_coverage_curve(u, wrong)
        at = [float(curve.risk[max(1, round(c * n)) - 1]) for c in COVERAGE_GRID]
        out[name] = {"error": at, "aurc": float(metrics.aurc(u, wrong))}
    return out


def reliability(pred: Predictive, y: Tensor, n_bins: int = 15) -> dict[str, list]:
    """The reliability curve as lists (NaN bins become null in the store)."""
    curve = metrics.reliability_curve(pred.mean, y, n_bins=n_bins)
    return {
        "bin_edges": curve.bin_edges.tolist(),
        "confidence": curve.confidence.tolist(),
        "accuracy": curve.accuracy.tolist(),
        "counts": curve.counts.tolist(),
    }


def corruption_sweep(
    predict: Callable[[Tensor], Predictive],
    x: Tensor,
    y: Tensor,
    levels: tuple[float, ...],
    corrupt: Callable[[Tensor, float, torch.Generator], Tensor],
    seed: int,
) -> list[dict[str, float]]:
    """Per corruption level: mean entropy split into aleatoric and epistemic parts, and the error
    on the corrupted images (Trinh et al. Fig. 8). The corruption of level ``l`` draws its noise
    from ``seed`` so every method sees the same corrupted images."""
    rows = []
    for level in levels:
        xc = corrupt(x, level, torch.Generator().manual_seed(seed))
        pred = predict(xc)
        rows.append({"level": float(level), **mean_uncertainty(pred),
                     "error": float(metrics.error_rate(pred.mean, y))})  # fmt: skip
    return rows
