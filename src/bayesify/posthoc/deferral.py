"""Deferral: when not to trust a prediction, fitted on validation data.

A :class:`DeferralPolicy` is one threshold on one uncertainty score of a
:class:`~bayesify.predictive.Predictive`; rows whose score is above it are deferred (to a
person), the rest are accepted. The threshold is fitted on validation data for either

* a target **coverage** (the fraction of rows accepted), or
* a target **error on the accepted rows**: the most rows accepted whose error stays at or below
  the target (classification: error rate; regression: RMSE or mean absolute error).

The policy keeps the validation figures it was fitted on (coverage; error, NLL and, for
classification, ECE on all and on the accepted rows), so a server can compare what it serves with
them, and under ``moments`` what a drift test needs of them: per part (``all``, ``accepted``) the
row count ``n`` and ``[mean, variance]`` of the per-row error terms (0/1, squared or absolute
error) and per-row NLL. It is stored as JSON in ``method.metadata["deferral"]`` (:meth:`to_dict`).

How a row's score is estimated is part of the policy. :meth:`DeferralPolicy.fit` thresholds the
score of one draw of T samples (``decision`` None: the served predictive's score, which flips
between seeds for rows near the threshold). :meth:`DeferralPolicy.fit_sequential` fits the
threshold under a sequential decision (:mod:`bayesify.posthoc.sequential`: more samples until
the score is on one side with a stated confidence), the procedure the predictor then serves, so
the fitted deferral rate holds and a row's answer does not depend on the seed.

A feature score (``density``, ``mahalanobis``: :data:`FEATURE_SCORES`) is computed from the
network's features by the caller and handed in as ``row_scores``; it has no Monte Carlo error,
so it is fitted on one pass and its threshold holds under every sampling policy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from bayesify import metrics
from bayesify.posthoc.deferral_scores import (
    FEATURE_SCORES,
    METRICS_FOR,
    SCORES_FOR,
    DeferralScore,
    ErrorMetric,
    accepted_error,
    checked_targets,
    parse_kind,
    row_loss,
    uncertainty_score,
)
from bayesify.posthoc.sequential import (
    CachedDraw,
    Draw,
    SequentialDecision,
    SequentialResult,
    run_sequential,
)
from bayesify.predictive import Predictive, Task

METADATA_KEY = "deferral"
FORMAT_VERSION = 1


def _json_float(v: float) -> float | None:
    return v if math.isfinite(v) else None


def _moments(terms: Tensor) -> list[float | None]:
    """``[mean, variance]`` (ddof 1) of per-row terms: what a drift test needs of a baseline."""
    t = terms.detach().double().cpu()
    mean = float(t.mean()) if len(t) else math.nan
    var = float(t.var()) if len(t) > 1 else math.nan
    return [_json_float(mean), _json_float(var)]


@dataclass
class DeferralPolicy:
    """Defer rows whose ``score`` is above ``threshold``; see the module docstring.

    ``target`` records what the threshold was fitted for (``{"coverage": c}`` or
    ``{"error": e, "metric": m}``); ``validation`` the figures on the data it was fitted on.
    """

    score: DeferralScore
    threshold: float
    task: Task
    target: dict[str, Any] = field(default_factory=dict)
    validation: dict[str, Any] = field(default_factory=dict)
    #: how a row's score is estimated: None = one draw (the served predictive's score)
    decision: SequentialDecision | None = None

    @classmethod
    def fit(
        cls,
        pred: Predictive,
        y: Any,
        *,
        score: DeferralScore | str = DeferralScore.MI,
        target_coverage: float | None = None,
        target_error: float | None = None,
        error_metric: ErrorMetric | str | None = None,
        row_scores: Tensor | None = None,
    ) -> DeferralPolicy:
        """Fit the threshold on a validation predictive ``pred`` (N rows) and its targets ``y``.

        Give exactly one of ``target_coverage`` (fraction accepted, in (0, 1]) and
        ``target_error`` (error on accepted rows, > 0; ``error_metric``: ``"error"`` for
        classification, ``"rmse"`` (default) or ``"mae"`` for regression). ``row_scores [N]``:
        the rows' feature score, for a ``score`` of :data:`FEATURE_SCORES`.
        """
        if not isinstance(pred, Predictive):
            raise TypeError(f"fit takes a Predictive, got {type(pred).__name__}")
        if (target_coverage is None) == (target_error is None):
            raise ValueError("give exactly one of target_coverage and target_error")
        y = checked_targets(pred, y)
        kind = parse_kind(DeferralScore, score, "score", SCORES_FOR[pred.task])
        s = uncertainty_score(pred, kind, row_scores)
        policy, metric = cls._from_scores(pred, y, s, score, target_coverage, target_error,
                                          error_metric)  # fmt: skip
        policy.validation = policy.evaluate(pred, y, error_metric=metric, row_scores=s)
        return policy

    @classmethod
    def _from_scores(
        cls,
        pred: Predictive,
        y: Tensor,
        s: Tensor,
        score: DeferralScore | str,
        target_coverage: float | None,
        target_error: float | None,
        error_metric: ErrorMetric | str | None,
    ) -> tuple[DeferralPolicy, ErrorMetric]:
        """The policy whose threshold fits the target on the row scores ``s [N]`` (errors of
        the rows from ``pred``), and the error metric."""
        task = pred.task
        kind: DeferralScore = parse_kind(DeferralScore, score, "score", SCORES_FOR[task])
        default_metric = ErrorMetric.ERROR if task is Task.CLASSIFICATION else ErrorMetric.RMSE
        metric = parse_kind(ErrorMetric, error_metric or default_metric, "error_metric",
                        METRICS_FOR[task])  # fmt: skip
        order = torch.argsort(s, stable=True)
        s_sorted = s[order]
        n = len(s)
        if target_coverage is not None:
            c = float(target_coverage)
            if not 0.0 < c <= 1.0:
                raise ValueError(f"target_coverage must be in (0, 1], got {target_coverage!r}")
            k = min(n, max(1, round(c * n)))
            target: dict[str, Any] = {"coverage": c}
        else:
            e = float(target_error)  # type: ignore[arg-type]
            if not (math.isfinite(e) and e > 0):
                raise ValueError(f"target_error must be a positive number, got {target_error!r}")
            loss = row_loss(pred, y, metric)[order]
            k = _largest_accepted(s_sorted, loss, e, metric)
            target = {"error": e, "metric": metric.value}
        # accept score <= threshold: halfway to the next higher score keeps the k rows (ties
        # with the k-th row are accepted with it)
        threshold = float(s_sorted[k - 1])
        if k < n and s_sorted[k] > s_sorted[k - 1]:
            threshold = float((s_sorted[k - 1] + s_sorted[k]) / 2)
        return cls(kind, threshold, task, target), metric

    def _metric(self) -> ErrorMetric:
        default = ErrorMetric.ERROR if self.task is Task.CLASSIFICATION else ErrorMetric.RMSE
        return ErrorMetric(self.target.get("metric") or default)

    @classmethod
    def fit_sequential(
        cls,
        draw: Draw,
        y: Any,
        *,
        score: DeferralScore | str = DeferralScore.MI,
        target_coverage: float | None = None,
        target_error: float | None = None,
        error_metric: ErrorMetric | str | None = None,
        decision: SequentialDecision | None = None,
        max_iterations: int = 12,
    ) -> DeferralPolicy:
        """Fit the threshold under the sequential decision (``decision``, default
        :class:`SequentialDecision()`) on validation rows: ``draw(rows, have, more)`` gives
        fresh samples of them (see :mod:`bayesify.posthoc.sequential`), ``y`` their targets.

        Starting from the one-draw threshold at ``start`` samples, the decision is run and the
        threshold refitted on its final scores until it no longer moves (the rows near it have
        the most samples, so their order is right); draws are replayed, not redrawn. The
        validation figures are those of the sequential decisions at the final threshold, with
        ``mean_samples`` (average samples per row the decision used).
        """
        if parse_kind(DeferralScore, score, "score", tuple(DeferralScore)) in FEATURE_SCORES:
            raise ValueError(f"{score}: a feature score has no Monte Carlo error to decide "
                             "sequentially; fit it on one pass (DeferralPolicy.fit)")  # fmt: skip
        decision = decision or SequentialDecision()
        y_t = torch.as_tensor(y)
        n = len(y_t)
        cache = CachedDraw(draw, n)
        first = cache(torch.arange(n), 0, decision.start)
        y_t = checked_targets(first, y_t)
        policy = cls.fit(first, y_t, score=score, target_coverage=target_coverage,
                         target_error=target_error, error_metric=error_metric)  # fmt: skip
        seen: set[float] = set()
        res = None  # the decisions at policy.threshold, once run
        for _ in range(max_iterations):
            res = policy.run(cache, n, first, decision)
            refit, _ = cls._from_scores(first, y_t, res.score, policy.score, target_coverage,
                                        target_error, error_metric)  # fmt: skip
            if refit.threshold == policy.threshold or refit.threshold in seen:
                break
            seen.add(policy.threshold)
            policy.threshold, res = refit.threshold, None
        policy.decision = decision
        if res is None:
            res = policy.run(cache, n, first, decision)
        metric = ErrorMetric(policy.validation["error_metric"])  # as the one-draw fit chose
        policy.validation = policy.evaluate(first, y_t, error_metric=metric,
                                            defer=res.score > policy.threshold)  # fmt: skip
        policy.validation["mean_samples"] = float(res.used.double().mean())
        policy.validation["confident"] = float(res.confident.double().mean())
        return policy

    def run(
        self, draw: Draw, n: int, first: Predictive | None, decision: SequentialDecision
    ) -> SequentialResult:
        """The sequential decision at this threshold (see :func:`run_sequential`)."""
        if first is not None and first.task is not self.task:
            raise ValueError(f"this policy is for {self.task.value}, got a {first.task.value} "
                             "predictive")  # fmt: skip

        def score_fn(pred: Predictive) -> Tensor:
            return uncertainty_score(pred, self.score)

        return run_sequential(draw, n, score_fn, self.threshold, decision, first)

    def decide_sequential(
        self, draw: Draw, n: int, first: Predictive | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(defer [N] bool, score [N], samples used [N])`` by the policy's sequential
        decision (``first``: the rows' first ``decision.start`` samples, when drawn)."""
        if self.decision is None:
            raise ValueError("this policy decides on one draw: use decide(pred)")
        res = self.run(draw, n, first, self.decision)
        return res.score > self.threshold, res.score, res.used

    @property
    def feature_score(self) -> bool:
        """Whether the score is of the network's features (``decide`` needs ``row_scores``;
        the threshold holds under every sampling policy)."""
        return self.score in FEATURE_SCORES

    def decide(self, pred: Predictive, row_scores: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(defer [N] bool, score [N] float64)`` for a predictive of the same task
        (``row_scores [N]``: the rows' feature score, for a feature-score policy)."""
        if pred.task is not self.task:
            raise ValueError(f"this policy is for {self.task.value}, got a {pred.task.value} "
                             "predictive")  # fmt: skip
        s = uncertainty_score(pred, self.score, row_scores)
        return s > self.threshold, s

    def evaluate(
        self,
        pred: Predictive,
        y: Any,
        *,
        error_metric: ErrorMetric | str | None = None,
        defer: Tensor | None = None,
        row_scores: Tensor | None = None,
    ) -> dict[str, Any]:
        """Coverage and error, NLL (and ECE) on all and on accepted rows of ``pred`` with
        targets ``y``: the figures a policy is fitted on, or checked against on held-out data.
        ``defer [N]``: the decisions (e.g. sequential ones), default ``decide(pred,
        row_scores)``."""
        y = checked_targets(pred, y)
        metric = ErrorMetric(error_metric or self._metric())
        if defer is None:
            defer, _ = self.decide(pred, row_scores)
        defer = torch.as_tensor(defer, dtype=torch.bool).cpu()
        keep = ~defer
        loss = row_loss(pred, y, metric)
        out: dict[str, Any] = {
            "n": len(pred),
            "coverage": float(keep.double().mean()),
            "error_metric": metric.value,
            "error_all": accepted_error(loss, metric),
            "error_accepted": accepted_error(loss[keep], metric),
        }
        moments: dict[str, Any] = {}
        for part, mask in (("all", torch.ones_like(keep)), ("accepted", keep)):
            moments[part] = {"n": int(mask.sum()), "error": _moments(loss[mask])}
            if not mask.any():
                out[f"nll_{part}"] = float("nan")
                continue
            sub = pred[mask.to(pred.samples.device)]
            ys = y[mask]
            row_nll = None
            if self.task is Task.CLASSIFICATION:
                row_nll = metrics.nll(sub.mean, ys, reduction="none")
                out[f"ece_{part}"] = float(metrics.expected_calibration_error(sub.mean, ys))
            elif (sub.noise_variance > 0).all():
                row_nll = -sub.log_prob(ys.to(sub.samples.dtype))
            if row_nll is not None:
                out[f"nll_{part}"] = float(row_nll.double().mean())
                moments[part]["nll"] = _moments(row_nll)
        out = {k: (_json_float(v) if isinstance(v, float) else v) for k, v in out.items()}
        out["moments"] = moments
        return out

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        out = {
            "format": FORMAT_VERSION,
            "score": self.score.value,
            "threshold": self.threshold,
            "task": self.task.value,
            "target": dict(self.target),
            "validation": dict(self.validation),
        }
        if self.decision is not None:
            out["decision"] = self.decision.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DeferralPolicy:
        if not isinstance(d, dict) or d.get("format") != FORMAT_VERSION:
            raise ValueError(f"not a deferral policy (format {FORMAT_VERSION}): {d!r:.80}")
        try:
            task = Task(d["task"])
            score = parse_kind(DeferralScore, d["score"], "score", SCORES_FOR[task])
            threshold = float(d["threshold"])
            decision = d.get("decision")
            decision = SequentialDecision.from_dict(decision) if decision else None
            if decision is not None and score in FEATURE_SCORES:
                raise ValueError(f"{score.value} is decided on one pass, not sequentially")
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"damaged deferral policy: {e}") from None
        return cls(score, threshold, task, dict(d.get("target", {})),
                   dict(d.get("validation", {})), decision)  # fmt: skip

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any]) -> DeferralPolicy | None:
        """The policy stored in a method's ``metadata``, or None."""
        d = metadata.get(METADATA_KEY)
        return None if d is None else cls.from_dict(d)

    def store(self, metadata: dict[str, Any]) -> None:
        """Put the policy into a method's ``metadata`` (saved with the bundle)."""
        metadata[METADATA_KEY] = self.to_dict()


def _largest_accepted(s_sorted: Tensor, loss: Tensor, target: float, metric: ErrorMetric) -> int:
    """The largest k, at a boundary between distinct scores, whose first k rows (most certain
    first) have error <= target."""
    n = len(s_sorted)
    k = torch.arange(1, n + 1, dtype=torch.float64)
    risk = torch.cumsum(loss, 0) / k
    if metric is ErrorMetric.RMSE:
        risk = risk.sqrt()
    boundary = torch.ones(n, dtype=torch.bool)
    boundary[:-1] = s_sorted[1:] > s_sorted[:-1]
    ok = torch.nonzero(boundary & (risk <= target + 1e-12)).flatten()
    if len(ok) == 0:
        best = float(risk[boundary].min())
        raise ValueError(f"no threshold reaches error {target} on the accepted validation rows "
                         f"(the best reachable is {best:.4g}); raise the target")  # fmt: skip
    return int(ok[-1]) + 1
