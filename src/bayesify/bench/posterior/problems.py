"""The small problems of ``bayesify bench posterior``: train / validation / test data, which test
inputs lie in the data and which in a gap between clusters of inputs.

* ``toy-1d``: y = sin(2x) + N(0, 0.1²), 40 training inputs in two clusters, [-2.5, -1] and
  [1, 2.5]; the test inputs are a grid over [-3.5, 3.5] (in the data: 1 ≤ |x| ≤ 2.5; gap:
  |x| < 0.8).
* ``toy-2d``: two classes in an XOR of four Gaussian blobs (std 0.4) centred at (±1.5, ±1.5),
  80 training points; test: 200 points from the blobs (in the data) and 100 on the cross
  between them, farther than 1 from every centre (gap; their labels are not scored).
* a UCI dataset on Gal & Ghahramani's split ``split`` (standardised units; the last 20% of the
  training rows are the methods' validation rows, HMC sees the first 80% as they do).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from bayesify.options import Task

TOYS = ("toy-1d", "toy-2d")


@dataclass(frozen=True)
class Problem:
    """One problem's data (``x [N, D]``, ``y [N]``) and where its test inputs lie."""

    name: str
    task: Task
    x_train: Tensor
    y_train: Tensor
    x_val: Tensor
    y_val: Tensor
    x_test: Tensor
    y_test: Tensor
    in_data: Tensor  # [N_test] bool: scored for test LL; std ratio "in the data"
    gap: Tensor  # [N_test] bool: std ratio "in the gap" (none for UCI)
    y_scale: float = 1.0  # original target units per standardised unit (UCI)

    @property
    def n_features(self) -> int:
        return int(self.x_train.shape[1])

    @property
    def n_outputs(self) -> int:
        return 2 if self.task is Task.CLASSIFICATION else 1


def _toy_1d(seed: int) -> Problem:
    g = torch.Generator().manual_seed(seed)

    def draw(n: int) -> tuple[Tensor, Tensor]:
        side = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
        x = side * (1.0 + 1.5 * torch.rand(n, generator=g))
        return x[:, None], torch.sin(2 * x) + 0.1 * torch.randn(n, generator=g)

    x, y = draw(40)
    xv, yv = draw(20)
    xt = torch.linspace(-3.5, 3.5, 141)[:, None]
    yt = torch.sin(2 * xt[:, 0]) + 0.1 * torch.randn(141, generator=g)
    a = xt[:, 0].abs()
    return Problem("toy-1d", Task.REGRESSION, x, y, xv, yv, xt, yt,
                   (a >= 1.0) & (a <= 2.5), a < 0.8)  # fmt: skip


_CENTRES = torch.tensor([[1.5, 1.5], [-1.5, -1.5], [1.5, -1.5], [-1.5, 1.5]])


def _toy_2d(seed: int) -> Problem:
    g = torch.Generator().manual_seed(seed)

    def draw(n: int) -> tuple[Tensor, Tensor]:
        blob = torch.randint(4, (n,), generator=g)
        x = _CENTRES[blob] + 0.4 * torch.randn(n, 2, generator=g)
        return x, (blob >= 2).long()  # blobs 0, 1 on one diagonal: class 0

    x, y = draw(80)
    xv, yv = draw(40)
    xd, yd = draw(200)
    t = torch.rand(100, generator=g) * 5 - 2.5
    axis = torch.rand(100, generator=g) < 0.5
    xg = torch.stack([torch.where(axis, t, 0.0 * t), torch.where(axis, 0.0 * t, t)], 1)
    xg = xg[torch.cdist(xg, _CENTRES).min(1).values > 1.0]
    xt = torch.cat([xd, xg])
    yt = torch.cat([yd, torch.zeros(len(xg), dtype=torch.long)])
    gap = torch.arange(len(xt)) >= len(xd)
    return Problem("toy-2d", Task.CLASSIFICATION, x, y, xv, yv, xt, yt, ~gap, gap)


def _uci(name: str, split: int) -> Problem:
    from bayesify.data import load_uci

    d = load_uci(name, split, protocol="gal", val_fraction=0.2)
    n = len(d.x_test)
    return Problem(name, Task.REGRESSION, d.x_train, d.y_train, d.x_val, d.y_val, d.x_test,
                   d.y_test, torch.ones(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool),
                   float(d.scaler.y_std))  # fmt: skip


def load_problem(name: str, split: int) -> Problem:
    """Problem ``name`` (a toy or a UCI dataset) on split / data draw ``split``."""
    if name == "toy-1d":
        return _toy_1d(1000 + split)
    if name == "toy-2d":
        return _toy_2d(2000 + split)
    return _uci(name, split)


def log_scale(problem: Problem) -> float:
    """What to subtract from a standardised log-likelihood to get it in original units."""
    return math.log(problem.y_scale)
