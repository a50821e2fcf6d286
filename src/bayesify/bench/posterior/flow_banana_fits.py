"""The 2-parameter problems of ``bayesify bench flow-banana``: data, the exact grid posterior,
one ELBO fit of q per job and its scores (W2 to exact draws beside the two-exact-samples floor,
KL(q ‖ p)).

    score_banana_job(BananaJob("nsf", "banana", 0, seed))  # {"w2", "kl", "floor", ...}
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor

from bayesify.nn.weight_flow import WeightFlow, fit_elbo, gaussian_log_prior

log = logging.getLogger(__name__)

#: problem -> (model mean of y given w [S, 2] and x [N], the true w, grid box (lo1, hi1, lo2, hi2))
PROBLEMS: dict[str, tuple[Callable[[Tensor, Tensor], Tensor], tuple[float, float], tuple]] = {
    "banana": (lambda w, x: (w[:, :1] + w[:, 1:] ** 2) * x, (0.0, 1.0), (-3.5, 2.0, -2.5, 2.5)),
    "two-modes": (lambda w, x: (w[:, :1] * w[:, 1:]) * x, (1.0, 1.0), (-3.0, 3.0, -3.0, 3.0)),
}
KINDS = ("mean-field", "realnvp", "nsf")
FIGURE_DRAWS = 600  # q's draws kept per row for the figure


@dataclass(frozen=True)
class Problem:
    """A 2-weight regression problem: data, unnormalised log posterior, its grid."""

    name: str
    x: Tensor
    y: Tensor
    noise: float
    mean: Callable[[Tensor, Tensor], Tensor]
    box: tuple[float, float, float, float]

    def log_joint(self, w: Tensor) -> Tensor:
        """log p(y | w) + log p(w): ``w [S, 2] -> [S]``."""
        r = self.y - self.mean(w, self.x)  # [S, N]
        lik = -0.5 * (r * r).sum(-1) / self.noise**2 - len(self.x) * math.log(
            self.noise * math.sqrt(2 * math.pi)
        )
        return lik + gaussian_log_prior(w, 1.0)

    def grid(self, size: int) -> tuple[Tensor, Tensor, Tensor, float]:
        """Cell centres ``[size², 2]``, log posterior at them (normalised over the grid), the
        axes, and the cell area."""
        lo1, hi1, lo2, hi2 = self.box
        a, b = (
            torch.linspace(lo1, hi1, size, dtype=torch.float64),
            torch.linspace(lo2, hi2, size, dtype=torch.float64),
        )
        w = torch.stack(torch.meshgrid(a, b, indexing="ij"), -1).reshape(-1, 2)
        lp = torch.cat([self.log_joint(part) for part in w.split(8192)])
        area = float((a[1] - a[0]) * (b[1] - b[0]))
        return w, lp, torch.stack([a, b]), area


def make_problem(name: str, rows: int, noise: float, seed: int) -> Problem:
    mean, true, box = PROBLEMS[name]
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, generator=g, dtype=torch.float64)
    w = torch.tensor([true], dtype=torch.float64)
    y = mean(w, x)[0] + noise * torch.randn(rows, generator=g, dtype=torch.float64)
    return Problem(name, x, y, noise, mean, box)


def exact_draws(w: Tensor, lp: Tensor, axes: Tensor, n: int, seed: int) -> Tensor:
    """``n`` draws of the grid posterior: a cell by its probability, uniform within it."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.multinomial(torch.softmax(lp, 0), n, replacement=True, generator=g)
    step = torch.stack([axes[0, 1] - axes[0, 0], axes[1, 1] - axes[1, 0]])
    return w[idx] + (torch.rand(n, 2, generator=g, dtype=w.dtype) - 0.5) * step


def wasserstein2(a: Tensor, b: Tensor) -> float:
    """The 2-Wasserstein distance between two equal-size samples ``[n, 2]`` (exact optimal
    transport: the assignment minimising the summed squared distances)."""
    cost = torch.cdist(a.double(), b.double()).pow(2).numpy()
    rows, cols = linear_sum_assignment(cost)
    return float(np.sqrt(cost[rows, cols].mean()))


def reverse_kl(q: WeightFlow, problem: Problem, log_z: float, n: int, seed: int) -> float:
    """KL(q ‖ p) = E_q[log q(w) − log p̃(w)] + log Z by ``n`` draws of q."""
    with torch.no_grad():
        w, log_q = q.rsample_and_log_prob(n, torch.Generator().manual_seed(seed))
        return float((log_q.double() - problem.log_joint(w.double())).mean()) + log_z


@dataclass(frozen=True)
class BananaJob:
    """One row of the store: q of kind ``method`` fitted on problem ``dataset`` drawn with
    ``seed`` (its data, the fit, the draws); ``split`` is unused (0)."""

    method: str
    dataset: str
    split: int
    seed: int
    rows: int = 20
    noise: float = 0.5
    steps: int = 3000
    samples: int = 64
    lr: float = 1e-2
    draws: int = 2000
    grid: int = 400


def fit_one(problem: Problem, kind: str, job: BananaJob) -> tuple[WeightFlow, float]:
    """q of ``kind`` fitted by the ELBO (float32, as the method fits); returns it and seconds."""
    q = WeightFlow(torch.zeros(2), kind=kind, transforms=3, hidden=32, init_scale=1.0,
                   seed=job.seed)  # fmt: skip
    t = time.perf_counter()
    fit_elbo(q, lambda w: problem.log_joint(w.double()).float(), steps=job.steps, lr=job.lr,
             samples=job.samples, seed=job.seed)  # fmt: skip
    return q, time.perf_counter() - t


def exact_posterior(job: BananaJob) -> tuple[Problem, dict[str, Any], float]:
    """The job's problem, its grid (``w``, ``lp``, ``axes``, ``exact`` draws, ``floor``: W2
    between two exact samples of ``job.draws``) and log Z."""
    problem = make_problem(job.dataset, job.rows, job.noise, job.seed)
    w, lp, axes, area = problem.grid(job.grid)
    log_z = float(torch.logsumexp(lp, 0)) + math.log(area)
    exact = exact_draws(w, lp, axes, job.draws, job.seed + 1)
    floor = wasserstein2(exact, exact_draws(w, lp, axes, job.draws, job.seed + 2))
    return problem, {"w": w, "lp": lp, "axes": axes, "floor": floor, "exact": exact}, log_z


def score_banana_job(job: BananaJob) -> dict[str, Any]:
    """Fit the job's q and score it against the grid posterior (the runner's job function):
    ``w2``, ``kl``, ``floor``, ``fit_seconds`` and the first :data:`FIGURE_DRAWS` of q's draws
    (for the figure)."""
    problem, grid, log_z = exact_posterior(job)
    q, seconds = fit_one(problem, job.method, job)
    draws = q.sample(job.draws, torch.Generator().manual_seed(job.seed + 3)).double()
    kl = reverse_kl(q, problem, log_z, 20000, job.seed + 4)
    w2 = wasserstein2(draws, grid["exact"])
    log.info("%s %s seed %d: W2 %.3f, KL %.3f, %.0f s", job.dataset, job.method, job.seed, w2,
             kl, seconds)  # fmt: skip
    return {"w2": w2, "kl": kl, "floor": grid["floor"], "fit_seconds": seconds,
            "draws": draws[:FIGURE_DRAWS].tolist()}  # fmt: skip
