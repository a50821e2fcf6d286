"""Choosing MCBN's batch size on validation data (Mukhoti et al. 2020).

The batch size b sets how much the batch-norm statistics vary between samples, i.e. the width of
MCBN's approximate posterior: it is a variational parameter. Here it is chosen after training,
without retraining, by maximising the mean predictive log-likelihood of validation data over a
grid. With the Gaussian statistics model each grid point costs one prediction and no training
data; with the bank model each (integer) b refills the bank from ``train`` first. For regression
the noise variance τ⁻¹ is refitted on the validation data at every b, so each b is scored with
its own best τ (a τ fitted at one b favours that b), and the chosen b keeps its τ.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence, Sized
from typing import Any, Protocol, cast

import numpy as np
import torch

from bayesify.predictive import Predictive, Task
from bayesify.train import Data, as_dataset


class Tunable(Protocol):
    """What the search needs of :class:`~bayesify.methods.mcbn.mcbn.MCBN`: its statistics model,
    the two ways to set b, the noise fit and its predictive."""

    config: Any

    @property
    def layers(self) -> Sequence[Any]: ...  # MCBatchNorm layers, with their ``spatial_size``

    @property
    def gaussian(self) -> bool: ...

    def set_effective_batch_size(self, b: float) -> None: ...

    def fill_bank(self, train: Data, *, batch_size: int, seed: int) -> Any: ...

    def fit_noise(self, val: Data, *, seed: int) -> Any: ...

    def _tensors(self, data: Data) -> tuple[torch.Tensor, torch.Tensor]: ...

    def sample(self, x: torch.Tensor, samples: int, *, seed: int) -> torch.Tensor: ...

    def to_predictive(self, out: torch.Tensor) -> Predictive: ...


log = logging.getLogger(__name__)

DEFAULT_GRID = tuple(float(b) for b in np.geomspace(2, 4096, 12))


def validation_log_likelihood(
    method: Tunable, x: torch.Tensor, y: torch.Tensor, *, samples: int, seed: int
) -> float:
    """Mean log predictive density/probability of ``y`` under ``samples`` MC samples (network
    units: a bundle's preprocessing is not applied)."""
    pred = method.to_predictive(method.sample(x, samples, seed=seed))
    return float(pred.log_prob(y).mean())


def tune_effective_batch_size(
    method: Tunable,
    val: Data,
    grid: Iterable[float] | None = None,
    *,
    train: Data | None = None,
    samples: int = 32,
    seed: int = 0,
) -> dict[float, float]:
    """Set ``method``'s batch size to the grid value with the highest validation log-likelihood.

    Gaussian model: sets ``effective_batch_size`` (continuous values allowed). Bank model: needs
    ``train`` and refills the bank with mini-batches of each (integer) b. The same ``seed`` is
    used at every grid point (common random numbers); bank grid points with more rows than
    ``train`` holds are skipped. Regression: τ⁻¹ is refitted at every b (module docstring).
    Returns ``{b: mean log-likelihood}``.
    """
    grid = sorted({float(b) for b in (DEFAULT_GRID if grid is None else grid)})
    if not grid or any(not b > 0 or not math.isfinite(b) for b in grid):
        raise ValueError(f"grid must hold finite positive batch sizes, got {grid}")
    if not method.gaussian and train is None:
        raise ValueError(
            "tuning the bank model needs the training data (train=...); or use "
            'statistics="gaussian", which needs none'
        )
    xv, yv = method._tensors(val)
    # (torch's Dataset declares no __len__; a Dataset without one fails here as before)
    rows = None if train is None or method.gaussian else len(cast(Sized, as_dataset(train)))
    regression = method.config.task is Task.REGRESSION

    def use(b: float) -> None:
        if method.gaussian:
            method.set_effective_batch_size(b)
        else:
            assert train is not None  # the bank model needs it (checked above)
            method.fill_bank(train, batch_size=max(2, round(b)), seed=seed)
        if regression:
            method.fit_noise((xv, yv), seed=seed)

    scores: dict[float, float] = {}
    for b in grid:
        if method.gaussian and b * min(int(lay.spatial_size) or 1 for lay in method.layers) <= 1:
            log.info("skipping b=%g: effective sample size n <= 1", b)
            continue
        if rows is not None and max(2, round(b)) > rows:
            log.info("skipping b=%g: more than the %d training rows", b, rows)
            continue
        use(b)
        scores[b] = validation_log_likelihood(method, xv, yv, samples=samples, seed=seed)
        log.info("MCBN batch size %g: validation log-likelihood %.4f", b, scores[b])
    if not scores:
        raise ValueError(
            "no grid value gives an effective sample size n > 1"
            + ("" if rows is None else f" with at most {rows} training rows per batch")
        )
    best = max(scores, key=scores.__getitem__)
    use(best)
    log.info("MCBN batch size chosen on validation data: %g", best)
    return scores
