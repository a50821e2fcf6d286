"""The flow posterior against the exact posterior of 2-parameter models where mean-field fails.

Two regression models with two weights and a N(0, I) prior, whose exact posterior is computed on
a grid: ``banana``: y = (w1 + w2²)·x + ε, a curved ridge; ``two-modes``: y = w1·w2·x + ε, two
mirror-image modes. Each approximation q is fitted by the same ELBO code
(:func:`bayesify.nn.weight_flow.fit_elbo`, the flow posterior's): a mean-field Gaussian (what
Bayes by Backprop fits), RealNVP and a neural spline flow. Scored against the grid posterior by
the 2-Wasserstein distance between q's draws and as many exact draws (exact optimal transport
between the two samples, with the distance between two exact samples of that size as the
floor) and by KL(q ‖ p) (the ELBO's gap: E_q[log q − log p̃] + log Z, Z from the grid).

    bayesify bench flow-banana --out benchmarks/flow_posterior
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor

from bayesify.bench.machine import machine_description
from bayesify.bench.options import command_line, option, write_report
from bayesify.nn.weight_flow import WeightFlow, fit_elbo, gaussian_log_prior

log = logging.getLogger(__name__)

#: problem -> (model mean of y given w [S, 2] and x [N], the true w, grid box (lo1, hi1, lo2, hi2))
PROBLEMS: dict[str, tuple[Callable[[Tensor, Tensor], Tensor], tuple[float, float], tuple]] = {
    "banana": (lambda w, x: (w[:, :1] + w[:, 1:] ** 2) * x, (0.0, 1.0), (-3.5, 2.0, -2.5, 2.5)),
    "two-modes": (lambda w, x: (w[:, :1] * w[:, 1:]) * x, (1.0, 1.0), (-3.0, 3.0, -3.0, 3.0)),
}
KINDS = ("mean-field", "realnvp", "nsf")


@dataclass(frozen=True)
class FlowBananaOptions:
    """Options of ``bayesify bench flow-banana``."""

    command: ClassVar[str] = "flow-banana"
    out: str = option("benchmarks/flow_posterior", "Folder for the figure (flow_posterior.png).")
    page: str = option("benchmarks/flow_posterior.md", "The markdown page written.")
    problems: tuple[str, ...] = option(("banana", "two-modes"), "Problems, comma-separated.")
    kinds: tuple[str, ...] = option(KINDS, "Posteriors q, comma-separated.")
    rows: int = option(20, "Data points of each problem.")
    noise: float = option(0.5, "Noise standard deviation of the data.")
    steps: int = option(3000, "ELBO steps per fit.")
    samples: int = option(64, "Draws per ELBO step.")
    lr: float = option(1e-2, "Adam learning rate of the ELBO.")
    draws: int = option(2000, "Draws of q and of the exact posterior for the distances.")
    grid: int = option(400, "Grid points per axis for the exact posterior.")
    seed: int = option(0, "Seed of the data, the fits and the draws.")
    uci: tuple[str, ...] = option(("yacht",), "UCI datasets for the last-layer table ('' none).")
    uci_steps: int = option(2000, "ELBO steps of FlowPosterior on a UCI last layer.")


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
class Fit:
    problem: str
    kind: str
    w2: float
    kl: float
    seconds: float
    draws: Tensor


def fit_one(problem: Problem, kind: str, opts: FlowBananaOptions) -> tuple[WeightFlow, float]:
    """q of ``kind`` fitted by the ELBO (float32, as the method fits); returns it and seconds."""
    q = WeightFlow(torch.zeros(2), kind=kind, transforms=3, hidden=32, init_scale=1.0,
                   seed=opts.seed)  # fmt: skip
    t = time.perf_counter()
    fit_elbo(q, lambda w: problem.log_joint(w.double()).float(), steps=opts.steps, lr=opts.lr,
             samples=opts.samples, seed=opts.seed)  # fmt: skip
    return q, time.perf_counter() - t


def run_problem(name: str, opts: FlowBananaOptions) -> tuple[Problem, dict, list[Fit]]:
    """Every q of ``opts.kinds`` on problem ``name``, scored against the grid posterior."""
    problem = make_problem(name, opts.rows, opts.noise, opts.seed)
    w, lp, axes, area = problem.grid(opts.grid)
    log_z = float(torch.logsumexp(lp, 0)) + math.log(area)
    exact = exact_draws(w, lp, axes, opts.draws, opts.seed + 1)
    floor = wasserstein2(exact, exact_draws(w, lp, axes, opts.draws, opts.seed + 2))
    fits = []
    for kind in opts.kinds:
        q, seconds = fit_one(problem, kind, opts)
        draws = q.sample(opts.draws, torch.Generator().manual_seed(opts.seed + 3)).double()
        kl = reverse_kl(q, problem, log_z, 20000, opts.seed + 4)
        fits.append(Fit(name, kind, wasserstein2(draws, exact), kl, seconds, draws))
        log.info("%s %s: W2 %.3f, KL %.3f, %.0f s", name, kind, fits[-1].w2, fits[-1].kl, seconds)
    grid = {"w": w, "lp": lp, "axes": axes, "floor": floor, "exact": exact}
    return problem, grid, fits


def gaussian_kl(m0: Tensor, s0: Tensor, m1: Tensor, s1: Tensor) -> float:
    """KL(N(m0, s0) ‖ N(m1, s1)) of full-covariance Gaussians (closed form)."""
    inv, d = torch.linalg.inv(s1), m1 - m0
    return float(0.5 * (torch.trace(inv @ s0) + d @ inv @ d - len(m0)
                        + torch.logdet(s1) - torch.logdet(s0)))  # fmt: skip


@dataclass(frozen=True)
class LastLayerRow:
    dataset: str
    kind: str
    kl: float
    std_ratio: float  # median over weights of q's std / the exact std
    test_ll: float
    exact_test_ll: float
    seconds: float


def uci_last_layer(name: str, opts: FlowBananaOptions) -> list[LastLayerRow]:
    """``FlowPosterior`` on the last layer of a 50-unit MLP trained on UCI ``name`` (Gal's split
    0): given the body and the learned noise, the exact last-layer posterior is Gaussian; each q
    is scored by KL(its moment-matched Gaussian ‖ exact), its spread, and test LL beside the exact
    posterior's (same noise, as many draws)."""
    import bayesify
    from bayesify.data import load_uci
    from bayesify.models import mlp
    from bayesify.predictive import Predictive

    split = load_uci(name, 0)
    train = (split.x_train, split.y_train)
    torch.manual_seed(opts.seed)
    net = bayesify.Deterministic(mlp(split.x_train.shape[1], hidden=(50,), norm=None))
    net.fit(train, epochs=200, batch_size=32, lr=1e-2, progress=False, seed=opts.seed)
    rows = []
    for kind in opts.kinds:
        t = time.perf_counter()
        method = bayesify.FlowPosterior.from_pretrained(
            net.net, train, flow=kind, elbo_steps=opts.uci_steps, elbo_samples=16,
            init_scale=0.05, seed=opts.seed,
        )  # fmt: skip
        seconds = time.perf_counter() - t
        h, y = method.features(train)
        a = torch.cat([h, torch.ones(len(h), 1)], 1).double()
        noise = method.noise_variance
        cov = torch.linalg.inv(
            a.T @ a / noise + torch.eye(a.shape[1]) / method.config.prior_sigma**2
        )
        mean = cov @ a.T @ y.double() / noise
        g = torch.Generator().manual_seed(opts.seed + 5)
        draws = method.posterior.sample(20000, g).double()
        kl = gaussian_kl(draws.mean(0), draws.T.cov(), mean, cov)
        ratio = float((draws.std(0) / cov.diagonal().sqrt()).median())
        pred = method.predict(split.x_test, samples=1000, seed=opts.seed)
        exact_w = torch.distributions.MultivariateNormal(mean, cov).sample((1000,))
        ht, _ = method.features((split.x_test, split.y_test))
        at = torch.cat([ht, torch.ones(len(ht), 1)], 1).double()
        exact = Predictive.regression((exact_w @ at.T).float(), noise)
        ll = float(pred.log_prob(split.y_test).mean())
        rows.append(LastLayerRow(name, kind, kl, ratio, ll,
                                 float(exact.log_prob(split.y_test).mean()), seconds))  # fmt: skip
        log.info("%s %s: KL %.3f, std ratio %.2f, test LL %.3f", name, kind, kl, ratio, ll)
    return rows


def figure(results: list[tuple[Problem, dict, list[Fit]]], path: Path) -> None:
    """One row per problem: the exact density's contours, and q's draws on them per column."""
    from bayesify.plots import new_figure, save_figure

    cols = max(len(f) for _, _, f in results) + 1
    fig, axes = new_figure(figsize=(3.2 * cols, 3.0 * len(results)), nrows=len(results),
                           ncols=cols, squeeze=False)  # fmt: skip
    for r, (problem, grid, fits) in enumerate(results):
        a, b = grid["axes"]
        dens = torch.softmax(grid["lp"], 0).reshape(len(a), len(b)).T.numpy()
        levels = np.quantile(dens[dens > dens.max() * 1e-4], [0.5, 0.8, 0.95, 0.99])
        for c in range(cols):
            ax = axes[r, c]
            ax.contour(a.numpy(), b.numpy(), dens, levels=np.unique(levels), colors="k",
                       linewidths=0.8)  # fmt: skip
            pts, title = grid["exact"], f"{problem.name}: exact (grid)"
            if c > 0:
                fit = fits[c - 1]
                pts, title = fit.draws, f"{fit.kind}: W2 {fit.w2:.2f}, KL {fit.kl:.2f}"
            ax.scatter(pts[:600, 0], pts[:600, 1], s=2, alpha=0.4, color="C0" if c else "C2")
            ax.set_xlim(problem.box[0], problem.box[1])
            ax.set_ylim(problem.box[2], problem.box[3])
            ax.set_title(title, fontsize=8)
            ax.set_xlabel("w1", fontsize=8)
            ax.set_ylabel("w2", fontsize=8)
            ax.tick_params(labelsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=90)


def reading(results: list[tuple[Problem, dict, list[Fit]]]) -> list[str]:
    """A sentence per problem: the best flow's distances beside mean-field's."""
    out = []
    for problem, grid, fits in results:
        by = {f.kind: f for f in fits}
        mf = by.get("mean-field")
        flows = [f for f in fits if f.kind != "mean-field"]
        if mf is None or not flows:
            continue
        best = min(flows, key=lambda f: f.w2)
        verdict = "closer to" if best.w2 < mf.w2 else "not closer to"
        if abs(mf.w2 - best.w2) < grid["floor"]:  # two exact samples differ as much
            verdict = "no closer (within the floor) to"
        ties = [f.kind for f in flows if f is not best and f.w2 - best.w2 < grid["floor"]]
        tie = f"; {', '.join(ties)} within the floor of it" if ties else ""
        out.append(
            f"- {problem.name}: the flow with the lowest W2 ({best.kind}{tie}) is {verdict} the "
            f"exact posterior than mean-field by W2 ({best.w2:.3f} against {mf.w2:.3f}; two exact "
            f"samples: {grid['floor']:.3f}), and its KL(q ‖ p) is {best.kl:.3f} against "
            f"{mf.kl:.3f} (one seed: one fit each)."
        )
        if problem.name == "two-modes" and abs(best.kl - math.log(2)) < 0.15:
            out.append(
                f"  A KL(q ‖ p) near log 2 = {math.log(2):.3f} is the mark of one of the two "
                "mirror-image modes fitted well and the other missed: the reverse KL the ELBO "
                "minimises is mode-seeking, and W2 is then dominated by the half of the mass q "
                "misses. A flow fitted by the ELBO does not cure this (a tempered ELBO or a "
                "mixture of flows might; not tried here)."
            )
    return out


def last_layer_reading(rows: list[LastLayerRow]) -> str:
    """What the last-layer rows show about width: their std ratios, and why test LL hides it."""
    lo, hi = min(r.std_ratio for r in rows), max(r.std_ratio for r in rows)
    narrow = "narrower than" if hi < 1 else "not uniformly narrower than"
    return (
        f"Every q here is {narrow} the exact posterior (median std ratio {lo:.2f}–{hi:.2f}; one "
        "seed, one fit each). Test LL is dominated by the noise term, so a q can match the exact "
        "posterior's test LL while being several times too narrow; for the same reason the flow's "
        "whole-predictive std ratio in `posterior.md` (at or above 1 where its f(x) ratio is below "
        "1) comes from its noise, not from its weights."
    )


def run(opts: FlowBananaOptions) -> str:
    unknown = [p for p in opts.problems if p not in PROBLEMS] + [
        k for k in opts.kinds if k not in KINDS
    ]
    if unknown:
        raise ValueError(f"unknown problem(s) or q(s) {unknown}; valid: {[*PROBLEMS, *KINDS]}")
    results = [run_problem(name, opts) for name in opts.problems]
    out = Path(opts.out)
    figure(results, out / "flow_posterior.png")
    page = Path(opts.page)
    rel = os.path.relpath(out / "flow_posterior.png", page.parent)
    lines = [
        "# The flow posterior against the exact posterior (2-parameter models)",
        "",
        f"Command: `{command_line(opts)}`  ",
        f"Machine: {machine_description()}.",
        "",
        __doc__.split("\n\n")[1].replace("\n", " ").strip(),
        "",
        f"{opts.rows} data points, noise σ = {opts.noise}, prior N(0, I); every q fitted by "
        f"{opts.steps} Adam steps of {opts.samples} reparameterised draws (lr {opts.lr}, cosine "
        f"decay), flows with 3 coupling transforms of 2×32 hidden units; distances from "
        f"{opts.draws} draws; grid {opts.grid}×{opts.grid}. One seed ({opts.seed}): every row "
        "is one fit, without an error bar.",
        "",
        "| problem | q | W2 to exact (floor) | KL(q ‖ p) | fit seconds |",
        "| --- | --- | --- | --- | --- |",
    ]
    for _, grid, fits in results:
        for f in fits:
            lines.append(f"| {f.problem} | {f.kind} | {f.w2:.3f} ({grid['floor']:.3f}) | "
                         f"{f.kl:.3f} | {f.seconds:.0f} |")  # fmt: skip
    lines += ["", f"![exact contours and q's draws]({rel})", "", *reading(results), ""]
    last = [r for name in opts.uci if name for r in uci_last_layer(name, opts)]
    if last:
        lines += [
            "## FlowPosterior on a real last layer",
            "",
            "The method itself (`FlowPosterior.from_pretrained`) on the last layer (51 weights) "
            "of a one-hidden-layer MLP of 50 units trained deterministically (200 epochs, Adam "
            "10⁻², batch 32) on Gal's split 0, standardised units. Given the body and the noise "
            "variance the ELBO learned, the exact last-layer posterior is Gaussian (closed form), "
            "so each q is scored by the KL of its moment-matched Gaussian (20,000 draws) to it, "
            "by the median ratio of its per-weight standard deviations to the exact ones, and by "
            "test log-likelihood (1,000 draws, that noise) beside the exact posterior's. "
            f"{opts.uci_steps} ELBO steps of 16 draws, initial scale 0.05.",
            "",
            "| dataset | q | KL(q ‖ exact) | std ratio | test LL | exact test LL | fit seconds |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        lines += [f"| {r.dataset} | {r.kind} | {r.kl:.3f} | {r.std_ratio:.2f} | {r.test_ll:.3f} "
                  f"| {r.exact_test_ll:.3f} | {r.seconds:.0f} |" for r in last]  # fmt: skip
        lines += ["", last_layer_reading(last), ""]
    return write_report(page, "\n".join(lines))
