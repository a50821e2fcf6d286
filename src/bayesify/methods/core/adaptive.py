"""Adaptive sampling: more Monte Carlo samples only for the rows that need them.

``method.predict(x, samples="adaptive", tol=0.01, start=8, max_samples=32)`` draws ``start``
samples for every row, then doubles the samples of each row whose Monte Carlo standard error is
above ``tol``, until it is at most ``tol`` or the row has ``max_samples`` (``start · 2^k``). The
standard error is that of the returned figures, the predictive mean: ``std_t / sqrt(T)`` of the
class probabilities (largest over classes) or of the regression sample means, **in the units of
the returned predictive**: probabilities, or the regression target in the units the caller sees
(``outputs`` maps the network's outputs there: a bundle trained on standardised targets reports,
and reads ``tol`` in, the user's original target units; ``std`` and ``mean`` of the result are in
the same units, so ``tol`` is comparable with them).

The result is one :class:`~bayesify.predictive.Predictive` ``[max_samples, N, ...]``: a row that
stopped at ``T_r`` samples holds them tiled ``max_samples / T_r`` times. An equal-weight mixture
repeated is the same mixture, so every figure of the row (mean, entropy, mutual information,
variances, log-likelihood) is exactly that of its ``T_r`` samples. ``samples_used [N]`` says how
many distinct samples each row got. Mixtures whose parts must weigh the same (an ensemble's M
members, IBNN's K components) round ``start`` up to a multiple of their parts first, and
``max_samples`` with it (M = 3, 8 to 32: 9, 18 or 36 samples). A method with finitely many
distinct samples (``distinct_samples()``: the members of an ensemble of deterministic networks)
stops once it has drawn them all, its mixture then exact, and ``samples_used`` counts at most
that many; where its first draw already holds them all (such ensembles draw T = M), that draw is
the result, untiled. Each round is one vectorised pass over the rows still active.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import Tensor

from bayesify.methods.core.inputs import input_rows
from bayesify.options import shown
from bayesify.predictive import Predictive, Task


class Sampler(Protocol):
    """What adaptive sampling needs of a method (:class:`~bayesify.methods.core.base.Method`
    has it): raw draws ``[T, N, ...]`` for rows, and their predictive."""

    def sample(
        self, x: Tensor, samples: int, *, generator: torch.Generator | None, max_rows: Any
    ) -> Tensor: ...

    def to_predictive(self, out: Tensor) -> Predictive: ...

    def _prefix_sampler(
        self, x: Tensor, generator: torch.Generator | None, max_rows: Any
    ) -> Callable[[Tensor, int], Tensor] | None: ...

    def distinct_samples(self) -> int | None: ...


class AdaptivePredictive(Predictive):
    """A :class:`Predictive` that also says how many distinct samples each row used:
    ``samples_used [N]`` (int64)."""

    samples_used: Tensor

    @property
    def mean_samples_used(self) -> float:
        return float(self.samples_used.double().mean())


def check_options(tol: Any, start: Any, max_samples: Any) -> int:
    """Validate the options; returns the number of doubling rounds after the first."""
    if tol is None:
        raise ValueError('samples="adaptive" needs tol, the largest Monte Carlo standard error')
    if not isinstance(tol, int | float) or isinstance(tol, bool) or not 0 <= tol < math.inf:
        raise ValueError(f"tol must be a finite number >= 0, got {shown(tol)}")
    for name, v in (("start", start), ("max_samples", max_samples)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 2:
            raise ValueError(f"{name} must be an integer >= 2, got {shown(v)}")
    rounds = math.log2(max_samples / start) if max_samples >= start else -1.0
    if rounds < 0 or rounds != int(rounds):
        raise ValueError(
            f"max_samples must be start times a power of two (start={start}: "
            f"{', '.join(str(start * 2**k) for k in range(4))}, ...), got {max_samples}"
        )
    return int(rounds)


def standard_error(pred: Predictive) -> Tensor:
    """Monte Carlo standard error ``[N]`` (float64) of the predictive mean, in ``pred``'s units:
    ``std_t / sqrt(T)`` (unbiased) of the class probabilities ``[T, N, C]`` (largest over
    classes) or of the regression sample means ``[T, N]``."""
    s = pred.samples.detach().double()
    vals = s if pred.task is Task.CLASSIFICATION else s.unsqueeze(-1)
    return (vals.std(0, unbiased=True) / math.sqrt(s.shape[0])).amax(-1)


def predict_adaptive(
    method: Sampler,
    x: Any,
    samples: int | str = "adaptive",
    *,
    tol: float | None = None,
    start: int = 8,
    max_samples: int = 32,
    generator: torch.Generator | None = None,
    seed: int | None = None,
    max_rows: Any = "auto",
    outputs: Callable[[Predictive], Predictive] | None = None,
) -> AdaptivePredictive:
    """The predictive at ``x [N, ...]`` with per-row sample counts; see the module docstring.

    ``outputs`` maps the method's predictive to the units returned to the caller (a bundle's
    :meth:`~bayesify.data.preprocessing.Preprocessing.outputs`); ``tol`` is read in those units.
    """
    if samples != "adaptive":
        raise ValueError(
            f'tol, start and max_samples go with samples="adaptive", got {shown(samples)}'
        )
    rounds = check_options(tol, start, max_samples)
    if seed is not None:
        if generator is not None:
            raise ValueError("give either generator or seed, not both")
        generator = torch.Generator().manual_seed(seed)

    def returned(draws: Tensor) -> Predictive:  # raw outputs [T, n, ...] -> the caller's units
        pred = method.to_predictive(draws)
        return outputs(pred) if outputs is not None else pred

    x = torch.as_tensor(input_rows(x))  # a Dataset or DataLoader: its inputs, in order
    # the net's deterministic prefix runs once, not again in every round (same draws either way)
    prefixed = method._prefix_sampler(x, generator, max_rows)

    def draw(rows: Tensor | None, samples: int) -> Tensor:  # [T, rows, ...]
        if prefixed is not None:
            return prefixed(torch.arange(len(x)) if rows is None else rows, samples)
        rows_x = x if rows is None else x[rows]
        return method.sample(rows_x, samples, generator=generator, max_rows=max_rows)

    first = draw(None, start)  # [T0, N, ...]
    # a mixture draws T0 rounded up to a multiple of its parts (ensemble members, IBNN
    # components), so every round doubles what was drawn: the parts weigh the same in each row
    start = first.shape[0]
    distinct = method.distinct_samples()  # finitely many: stop once all are drawn
    if distinct is not None and start >= distinct:
        rounds = 0  # the first draw holds them all: the mixture is exact, nothing to add
    max_samples = start * 2**rounds
    n = first.shape[1]
    draws = first.new_empty((max_samples, *first.shape[1:]))
    draws[:start] = first
    used = torch.full((n,), start, dtype=torch.long)
    active = torch.nonzero(standard_error(returned(first)).cpu() > tol).flatten()
    have = start
    for _ in range(rounds):
        if len(active) == 0 or (distinct is not None and have >= distinct):
            break
        idx = active.to(draws.device)
        more = draw(active, have)
        draws[have : 2 * have, idx] = more
        have *= 2
        used[active] = have
        se = standard_error(returned(draws[:have, idx])).cpu()
        active = active[se > tol]
    for t_r in used.unique().tolist():
        if t_r < max_samples:
            rows = torch.nonzero(used == t_r).flatten().to(draws.device)
            draws[:, rows] = draws[:t_r, rows].repeat(
                max_samples // t_r, *([1] * (draws.dim() - 1))
            )
    pred = returned(draws)  # e.g. a bundle's map back to the user's target units
    if pred.task is Task.CLASSIFICATION:
        out = AdaptivePredictive.classification(pred.samples)
        out.max_logits = pred.max_logits
    else:
        out = AdaptivePredictive.regression(pred.samples, pred.noise_variance)
    out.samples_used = used if distinct is None else used.clamp(max=distinct)
    return out
