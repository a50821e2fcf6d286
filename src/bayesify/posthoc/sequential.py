"""A sequential test for threshold decisions on a Monte Carlo score (stable deferral).

A score such as the mutual information is estimated from T samples, so a row whose score is
near a threshold lands on either side depending on the draw (the seed). The sequential decision
draws ``start`` samples, estimates the score and its Monte Carlo standard error (a jackknife
over ``groups`` groups of the samples), and stops for the rows whose score is more than ``z``
standard errors from the threshold; the others get as many samples again, until they are on
one side or have ``max_samples``. Rows that reach ``max_samples`` are decided by their score
there (``confident`` False). A row's answer then depends on the seed only within about one
standard error at ``max_samples`` of the threshold; far rows cost ``start`` samples.

``draw(rows, have, more)`` returns a :class:`~bayesify.predictive.Predictive` of ``more`` fresh
samples for ``rows`` (int64 ``[n]``, indices into the N rows), the row already holding
``have``. :class:`CachedDraw` replays the same draws when a threshold is fitted by repeating
the procedure.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bayesify.predictive import Predictive

Draw = Callable[[Tensor, int, int], Predictive]
ScoreFn = Callable[[Predictive], Tensor]


@dataclass(frozen=True)
class SequentialDecision:
    """Settings of the sequential decision; see the module docstring."""

    start: int = 32
    max_samples: int = 8192
    z: float = 3.0
    groups: int = 16

    def __post_init__(self) -> None:
        for name in ("start", "max_samples", "groups"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 2:
                raise ValueError(f"{name} must be an integer >= 2, got {v!r}")
        if self.max_samples < self.start:
            raise ValueError(f"max_samples ({self.max_samples}) must be >= start ({self.start})")
        z = self.z
        if isinstance(z, bool) or not isinstance(z, int | float) or not 0 < z < math.inf:
            raise ValueError(f"z must be a positive number, got {z!r}")

    @property
    def confidence(self) -> float:
        """Two-sided confidence of one look: ``P(|N(0, 1)| <= z)``."""
        return math.erf(self.z / math.sqrt(2))

    def to_dict(self) -> dict[str, Any]:
        return {"mode": "sequential", "start": self.start, "max_samples": self.max_samples,
                "z": self.z, "groups": self.groups}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SequentialDecision:
        if not isinstance(d, dict) or d.get("mode") != "sequential":
            raise ValueError(f"not a sequential decision: {d!r:.80}")
        return cls(d.get("start", 32), d.get("max_samples", 8192), d.get("z", 3.0),
                   d.get("groups", 16))  # fmt: skip


@dataclass
class SequentialResult:
    """Per row ``[N]``: the final score, its standard error, samples used and whether the
    score was more than ``z`` standard errors from the threshold when the row stopped."""

    score: Tensor
    se: Tensor
    used: Tensor
    confident: Tensor


def sample_subset(pred: Predictive, idx: Tensor) -> Predictive:
    """The predictive of the samples ``idx`` (sample axis), every row."""
    nv = pred._noise_variance
    if nv is not None and nv.dim() == 2:
        nv = nv[idx]
    top = None if pred.max_logits is None else pred.max_logits[idx]
    return Predictive(pred.samples[idx], pred.task, nv, top)


def _cat(a: Predictive, b: Predictive, dim: int) -> Predictive:
    """Samples of ``a`` and ``b`` joined on the sample axis (dim 0) or the row axis (dim 1)."""
    na, nb = a._noise_variance, b._noise_variance
    nv = na
    if na is not None and nb is not None:
        if na.dim() == 2 or nb.dim() == 2:  # per-sample noise [T, N]
            t = (a.samples.shape[0], a.samples.shape[1])
            u = (b.samples.shape[0], b.samples.shape[1])
            nv = torch.cat([na.expand(t), nb.expand(u)], dim)
        elif na.dim() == 1 and dim == 1:
            nv = torch.cat([na, nb])
        elif na.dim() == 0 and dim == 1 and not torch.equal(na, nb):
            nv = torch.cat([na.expand(a.samples.shape[1]), nb.expand(b.samples.shape[1])])
    top = None  # the logits' maxima [T, N] where both have them
    if a.max_logits is not None and b.max_logits is not None:
        top = torch.cat([a.max_logits, b.max_logits], dim)
    return Predictive(torch.cat([a.samples, b.samples], dim), a.task, nv, top)


def score_and_error(pred: Predictive, score_fn: ScoreFn, groups: int) -> tuple[Tensor, Tensor]:
    """``(score [N], standard error [N])``: the score of all T samples and the delete-a-group
    jackknife estimate of its Monte Carlo standard error (``groups`` groups of samples)."""
    s = score_fn(pred)
    t = pred.num_samples
    k = min(groups, t)
    if k < 2:
        return s, torch.full_like(s, math.inf)
    parts = torch.tensor_split(torch.arange(t), k)
    loo = torch.stack(
        [
            score_fn(sample_subset(pred, torch.cat([p for j, p in enumerate(parts) if j != i])))
            for i in range(k)
        ]
    )  # [k, N]
    se = ((k - 1) / k * ((loo - loo.mean(0)) ** 2).sum(0)).sqrt()
    return s, se


def run_sequential(
    draw: Draw,
    n: int,
    score_fn: ScoreFn,
    threshold: float,
    decision: SequentialDecision,
    first: Predictive | None = None,
) -> SequentialResult:
    """The sequential decision for ``n`` rows (``first``: their first ``start`` samples, if
    already drawn); the row is deferred when ``result.score > threshold``."""
    rows = torch.arange(n)
    pred = first if first is not None else draw(rows, 0, decision.start)
    score = torch.empty(n, dtype=torch.float64)
    se = torch.empty(n, dtype=torch.float64)
    used = torch.zeros(n, dtype=torch.long)
    confident = torch.zeros(n, dtype=torch.bool)
    while True:
        t = pred.num_samples
        s, e = score_and_error(pred, score_fn, decision.groups)
        sure = (s - threshold).abs() > decision.z * e
        done = sure | (t >= decision.max_samples) | ~torch.isfinite(s)  # NaN: no more draws
        score[rows[done]], se[rows[done]] = s[done], e[done]
        used[rows[done]], confident[rows[done]] = t, sure[done]
        if done.all():
            return SequentialResult(score, se, used, confident)
        keep = torch.nonzero(~done).flatten()
        rows, pred = rows[keep], pred[keep.to(pred.samples.device)]
        more = draw(rows, t, min(t, decision.max_samples - t))
        pred = _cat(pred, more, 0)


class CachedDraw:
    """``draw`` that remembers what it drew for each row and ``have``: repeating the procedure
    (e.g. for another threshold) replays the same samples and draws only new ones."""

    def __init__(self, draw: Draw, n: int) -> None:
        self.draw, self.n = draw, n
        self._store: dict[int, tuple[Tensor, Predictive]] = {}
        self.drawn = 0  # samples drawn, summed over rows

    def __call__(self, rows: Tensor, have: int, more: int) -> Predictive:
        pos, pred = self._store.get(have, (torch.full((self.n,), -1, dtype=torch.long), None))
        missing = rows[pos[rows] < 0]
        if len(missing):
            new = self.draw(missing, have, more)
            self.drawn += new.num_samples * len(missing)
            pos = pos.clone()
            pos[missing] = torch.arange(len(missing)) + (0 if pred is None else len(pred))
            pred = new if pred is None else _cat(pred, new, 1)
            self._store[have] = (pos, pred)
        assert pred is not None
        return pred[pos[rows].to(pred.samples.device)]
