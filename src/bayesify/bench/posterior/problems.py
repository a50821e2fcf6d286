"""The small problems of ``bayesify bench posterior``: train / validation / test data, which test
inputs lie in the data and which in a gap between clusters of inputs.

* ``toy-1d``: y = sin(2x) + N(0, 0.1²), 40 training inputs in two clusters, [-2.5, -1] and
  [1, 2.5]; the test inputs are a grid over [-3.5, 3.5] (in the data: 1 ≤ |x| ≤ 2.5; gap:
  |x| < 0.8).
* ``toy-2d``: two classes in an XOR of four Gaussian blobs (std 0.4) centred at (±1.5, ±1.5),
  80 training points; test: 200 points from the blobs (in the data) and 100 on the cross
  between them, farther than 1 from every centre (gap; their labels are not scored).
* ``fashion-pca``: three Fashion-MNIST classes (T-shirt/top, pullover, shirt) on the first 5
  principal components of the training images, standardised; 300 training and 200 validation
  images drawn from the training set per split, 300 test images of the three classes (in the
  data) and 300 MNIST digits projected the same way (the "gap": out of distribution, their
  labels not scored).
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
IMAGES = ("fashion-pca",)  # classification beyond the toys: splits are data draws, as UCI's
FASHION_CLASSES = (0, 2, 6)  # T-shirt/top, pullover, shirt: the three most confused upper garments
PCA_FEATURES = 5


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
    classes: int = 2  # classification

    @property
    def n_features(self) -> int:
        return int(self.x_train.shape[1])

    @property
    def n_outputs(self) -> int:
        return self.classes if self.task is Task.CLASSIFICATION else 1


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


def _fashion_pca(split: int) -> Problem:
    from bayesify.data import load_fashion_mnist, load_mnist

    g = torch.Generator().manual_seed(3000 + split)

    def pick(x: Tensor, y: Tensor, n: int, keep: bool = True) -> tuple[Tensor, Tensor]:
        rows = torch.isin(y, torch.tensor(FASHION_CLASSES)).nonzero()[:, 0] if keep else (
            torch.arange(len(y)))  # fmt: skip
        rows = rows[torch.randperm(len(rows), generator=g)[:n]]
        return x[rows].flatten(1).double(), y[rows]

    train, test = load_fashion_mnist("train"), load_fashion_mnist("test")
    x, y = pick(train.x, train.y, 500)
    xt, yt = pick(test.x, test.y, 300)
    digits = load_mnist("test")
    xo, _ = pick(digits.x, digits.y, 300, keep=False)
    mean = x[:300].mean(0)
    components = torch.linalg.svd(x[:300] - mean, full_matrices=False).Vh[:PCA_FEATURES].T
    z = (x - mean) @ components
    centre, scale = z[:300].mean(0), z[:300].std(0)

    def features(v: Tensor) -> Tensor:
        return (((v - mean) @ components - centre) / scale).float()

    label = {c: i for i, c in enumerate(FASHION_CLASSES)}
    y = torch.tensor([label[int(c)] for c in y])
    yt = torch.tensor([label[int(c)] for c in yt])
    x_test = torch.cat([features(xt), features(xo)])
    y_test = torch.cat([yt, torch.zeros(len(xo), dtype=torch.long)])
    gap = torch.arange(len(x_test)) >= len(xt)
    return Problem("fashion-pca", Task.CLASSIFICATION, features(x[:300]), y[:300],
                   features(x[300:]), y[300:], x_test, y_test, ~gap, gap,
                   classes=len(FASHION_CLASSES))  # fmt: skip


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
    if name == "fashion-pca":
        return _fashion_pca(split)
    return _uci(name, split)


def log_scale(problem: Problem) -> float:
    """What to subtract from a standardised log-likelihood to get it in original units."""
    return math.log(problem.y_scale)
