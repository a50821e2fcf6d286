"""Trinh et al. Fig. 1 style toy: y = x³ + N(0, 3²), 30 points on [-4, 4], ReLU MLPs of depth
1…5 with 256 units per layer, IBNN vs Bayes by Backprop. Their claim: BBB's epistemic
uncertainty collapses as depth grows, IBNN's does not.

Targets are divided by 3·√2 so that the mean squared error IBNN minimises is the Gaussian NLL
with the true noise σ = 3 (up to a constant); BBB learns its noise variance (started at that
value). Epistemic spread = std over MC samples of the predicted mean.

    bayesify bench toy-depth --out benchmarks/toy_depth
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch

import bayesify
from bayesify.bench.machine import machine_description
from bayesify.bench.options import command_line, option, write_report
from bayesify.data import toy_cubic, toy_grid
from bayesify.models import mlp
from bayesify.seeding import seeded

log = logging.getLogger(__name__)

SCALE = 3.0 * math.sqrt(2.0)


@dataclass(frozen=True)
class ToyDepthOptions:
    """Options of ``bayesify bench toy-depth``."""

    command: ClassVar[str] = "toy-depth"
    out: str = option("benchmarks/toy_depth", "Folder for README.md and the figure.")
    max_depth: int = option(5, "Hidden layers 1 … max-depth.")
    width: int = option(256, "Units per hidden layer.")
    epochs: int = option(1500, "Full-batch Adam steps.")
    lr: float = option(1e-2, "Adam learning rate.")
    components: int = option(2, "IBNN mixture components K.")
    samples: int = option(100, "MC samples T on the grid.")
    seed: int = option(0, "Seed for data, weights and sampling.")


def make(kind: str, depth: int, opts: ToyDepthOptions) -> bayesify.Method:
    """A fresh ``kind`` model of ``depth`` hidden layers, its weights drawn from ``opts.seed``."""
    with seeded(opts.seed):
        return _make(kind, depth, opts)


def _make(kind: str, depth: int, opts: ToyDepthOptions) -> bayesify.Method:
    net = mlp(1, 1, (opts.width,) * depth, norm=None)
    if kind == "IBNN":
        method = bayesify.IBNN(
            net,
            components=opts.components,
            train_samples=4,
            prior_std=0.3,
            mu_init_std=0.1,
            sigma_init=0.05,
            variational_lr=1e-2,
            kl_anneal=0.3,
        )
        method.noise_variance = 0.5  # the true noise, 3², in units of the scaled targets
        return method
    from bayesify.methods.bbb.bayes_by_backprop import BayesByBackprop

    return BayesByBackprop(net, init_noise_variance=0.5, kl_schedule="linear", kl_warmup=0.3)


def run(opts: ToyDepthOptions) -> str:
    """Fit every depth, plot, write ``out/README.md``; returns its markdown."""
    torch.set_num_threads(1)
    x, y = toy_cubic(30, seed=opts.seed)
    grid = toy_grid(-6.0, 6.0, 241)  # [G, 1]
    inside = grid.squeeze(1).abs() <= 4
    results: dict[tuple[str, int], tuple[torch.Tensor, float]] = {}
    for depth in range(1, opts.max_depth + 1):
        for kind in ("IBNN", "BBB"):
            t0 = time.time()
            method = make(kind, depth, opts)
            method.fit(
                (x, y / SCALE),
                epochs=opts.epochs,
                batch_size=30,
                lr=opts.lr,
                seed=opts.seed,
                progress=False,
            )
            samples = method.predict(grid, samples=opts.samples, seed=opts.seed).samples * SCALE
            results[(kind, depth)] = (samples, time.time() - t0)
            log.info("%s depth %d: %.0fs", kind, depth, time.time() - t0)
    Path(opts.out).mkdir(parents=True, exist_ok=True)
    _plot(x, y, grid, results, opts, Path(opts.out) / "toy_depth.png")

    lines = [
        "# Toy y = x³: IBNN vs Bayes by Backprop with depth (Trinh et al. Fig. 1 style)",
        "",
        f"Command: `{command_line(opts)}`  ",
        f"Machine: {machine_description()}.  ",
        f"Setup: 30 points y = x³ + N(0, 3²), x ~ U[-4, 4]; ReLU MLP, {opts.width} units per "
        f"layer; full batch, {opts.epochs} Adam steps, lr {opts.lr}; T = {opts.samples}. "
        f"IBNN: K = {opts.components}, S = 4, prior N(1, 0.3²), μ ~ N(1, 0.1²), σ₀ = 0.05, "
        "variational lr 1e-2, β annealed over the first 30 %. BBB: Gaussian N(0, 1) prior, "
        "learned noise, linear KL warm-up over 30 %. Epistemic std = std over samples of the "
        "predicted mean, averaged over the grid inside [-4, 4] and outside (4 < |x| ≤ 6).",
        "",
        "| depth | IBNN std in | IBNN std out | IBNN RMSE to x³ in | BBB std in | BBB std out "
        "| BBB RMSE to x³ in |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    truth = grid.squeeze(1) ** 3
    for depth in range(1, opts.max_depth + 1):
        cells = []
        for kind in ("IBNN", "BBB"):
            s, _ = results[(kind, depth)]
            std = s.std(0)
            rmse = (s.mean(0) - truth)[inside].pow(2).mean().sqrt()
            cells += [
                f"{std[inside].mean():.2f}",
                f"{std[~inside].mean():.2f}",
                f"{rmse:.2f}",
            ]
        lines.append(f"| {depth} | " + " | ".join(cells) + " |")
    lines += ["", "![toy fits](toy_depth.png)", ""]
    return write_report(Path(opts.out) / "README.md", "\n".join(lines))


def _plot(x, y, grid, results, opts, path: Path) -> None:
    from bayesify.plots import new_figure, save_figure

    d = opts.max_depth
    fig, axes = new_figure(
        nrows=2, ncols=d, figsize=(2.4 * d, 4.4), sharex=True, sharey=True, squeeze=False
    )
    g = grid.squeeze(1)
    for row, kind in enumerate(("IBNN", "BBB")):
        for col in range(d):
            ax = axes[row, col]
            s, _ = results[(kind, col + 1)]
            m, sd = s.mean(0), s.std(0)
            ax.fill_between(g, m - 2 * sd, m + 2 * sd, alpha=0.3)
            ax.plot(g, m, lw=1)
            ax.plot(g, g**3, "k--", lw=0.6)
            ax.scatter(x.squeeze(1), y, s=5, c="r")
            ax.set_ylim(-150, 150)
            ax.set_title(f"{kind}, depth {col + 1}", fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=80)
