"""Learned versus fitted noise on a 1-D toy whose noise grows with |x|: each method with the
homoscedastic likelihood (one τ⁻¹ fitted on validation data) and the heteroscedastic one (a
variance output per input), several seeds, run job by job into a resumable results store.

y = sin(x) + ε·(0.05 + 0.3|x|), x ~ U(-3, 3). Per job: test RMSE, mean test log-likelihood and
CRPS, and how well the predicted aleatoric std tracks the true one on a grid (correlation, ratio
of means). Killing the command and running it again resumes where it stopped.

Under MC dropout the variance head also absorbs the spread that dropout adds to the mean while
training, so near x = 0, where the true noise is smallest, the learned noise stays high.

    bayesify bench noise-toy --store benchmarks/noise_toy/results.db --out benchmarks/noise_toy
"""

from __future__ import annotations

import logging
import math
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from bayesify.bench.options import check_choices, command_line, option, write_report
from bayesify.bench.runner import run_jobs, stored_rows
from bayesify.bench.store import RowKey
from bayesify.bench.summary import mean_se
from bayesify.options import Likelihood

log = logging.getLogger(__name__)

EXPERIMENT = "noise-toy"
DATASET = "sin-growing-noise"
#: member options per method (the network is an MLP; MCBN's has batch norm)
METHOD_OPTIONS: dict[str, dict[str, Any]] = {
    "deterministic": {},
    "mc-dropout": {"p": 0.05},
    "mcbn": {"bank_size": 64},
    "bbb": {},
    "ibnn": {"components": 2},
    "stochastic-norm": {},
    "ensemble": {"members": 3},
}
GRID = (-2.8, 2.8, 57)


def true_std(x: torch.Tensor) -> torch.Tensor:
    """The toy's noise std at ``x``."""
    return 0.05 + 0.3 * x.abs()


def toy_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` rows ``x [n, 1]``, ``y [n]`` drawn with ``seed``."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, generator=g) * 6 - 3
    return x, torch.sin(x[:, 0]) + torch.randn(n, generator=g) * true_std(x[:, 0])


@dataclass(frozen=True)
class NoiseToyJob:
    """One row of the store: a method and likelihood trained on one draw of the toy."""

    method: str
    dataset: str
    split: int  # the data draw
    seed: int  # weights and sampling
    likelihood: str = Likelihood.HOMOSCEDASTIC.value
    n_train: int = 500
    epochs: int = 60
    hidden: tuple[int, ...] = (64, 64)
    lr: float = 3e-3
    samples: int = 50


def score_job(job: NoiseToyJob) -> dict[str, Any]:
    """Train ``job``'s method on its data draw and score it (the runner's job function)."""
    from bayesify.methods import get_method
    from bayesify.models import mlp

    x, y = toy_data(job.n_train, seed=1000 + job.split)
    xv, yv = toy_data(max(100, job.n_train // 4), seed=2000 + job.split)
    xt, yt = toy_data(1000, seed=3000 + job.split)
    outputs = 2 if job.likelihood == Likelihood.HETEROSCEDASTIC.value else 1
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(job.seed)
        net = mlp(1, outputs, job.hidden, norm="batch" if job.method == "mcbn" else None,
                  dropout=0.05 if job.method == "mc-dropout" else 0.0)  # fmt: skip
        method = get_method(job.method)(net, likelihood=job.likelihood,
                                        **METHOD_OPTIONS[job.method])  # fmt: skip
    method.fit((x, y), val=(xv, yv), epochs=job.epochs, batch_size=64, lr=job.lr,
               seed=job.seed, progress=False)  # fmt: skip
    pred = method.predict(xt, samples=job.samples, seed=job.seed)
    grid = torch.linspace(*GRID)[:, None]
    learned = method.predict(grid, samples=job.samples, seed=job.seed).aleatoric_variance.sqrt()
    truth = true_std(grid[:, 0])
    constant = bool(learned.std() <= 1e-6 * learned.mean())  # homoscedastic: no correlation
    return {
        "rmse": float((pred.mean - yt).square().mean().sqrt()),
        "pll": float(pred.log_prob(yt).mean()),
        "crps": float(pred.crps(yt).mean()),
        "noise_corr": None
        if constant
        else float(torch.corrcoef(torch.stack([learned, truth]))[0, 1]),
        "noise_ratio": float(learned.mean() / truth.mean()),
        "grid_std": [round(float(v), 5) for v in learned],
    }


@dataclass(frozen=True)
class NoiseToyOptions:
    """Options of ``bayesify bench noise-toy``."""

    command: ClassVar[str] = "noise-toy"
    store: str = option("benchmarks/noise_toy/results.db", "The results store (sqlite file).")
    out: str = option("benchmarks/noise_toy", "Folder for README.md and the figure.")
    methods: tuple[str, ...] = option(("mc-dropout", "ensemble"), "Methods, comma-separated.")
    likelihoods: tuple[str, ...] = option(
        ("homoscedastic", "heteroscedastic"), "Likelihoods, comma-separated."
    )
    splits: int = option(3, "Data draws (one job per draw, method and likelihood).")
    n_train: int = option(500, "Training rows.")
    epochs: int = option(60, "Training epochs.")
    samples: int = option(50, "MC samples T.")
    workers: int = option(1, "Parallel worker processes.")
    cluster: str = option("", "Dask scheduler (tcp://host:8786) whose workers run the jobs.")

    def __post_init__(self) -> None:
        check_choices("methods", self.methods, METHOD_OPTIONS)
        check_choices("likelihoods", self.likelihoods, [k.value for k in Likelihood])
        if min(self.splits, self.n_train, self.epochs, self.samples, self.workers) < 1:
            raise ValueError("splits, n-train, epochs, samples and workers must be >= 1")

    def jobs(self) -> list[NoiseToyJob]:
        return [
            NoiseToyJob(
                m,
                DATASET,
                s,
                seed=s,
                likelihood=lik,
                n_train=self.n_train,
                epochs=self.epochs,
                samples=self.samples,
            )  # fmt: skip
            for m in self.methods
            for lik in self.likelihoods
            for s in range(self.splits)
        ]


def _mean_se(values: list[float]) -> str:
    if not values:
        return "–"
    m, se = mean_se(values)
    return f"{m:.3f}" if len(values) < 2 else f"{m:.3f} ± {se:.3f}"


def run(opts: NoiseToyOptions) -> str:
    """Run the jobs not yet in the store, then write ``out/README.md`` from the store."""
    from bayesify.bench.runner import job_key

    torch.set_num_threads(1)
    t0 = time.time()
    jobs = opts.jobs()
    summary = run_jobs(
        EXPERIMENT, jobs, score_job, opts.store, workers=opts.workers, cluster=opts.cluster
    )
    keys = {job_key(EXPERIMENT, j): j for j in jobs}
    rows = stored_rows(opts.store, EXPERIMENT, jobs)
    job_seconds = sum(r["seconds"] or 0.0 for r in rows)
    lines = [
        "# Learned versus fitted noise on a toy whose noise grows with |x|",
        "",
        f"`{command_line(opts)}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"1 thread per process; this call: {summary} "
        f"({time.time() - t0:.0f} s wall).",
        "",
        f"Job time in the store (sum over these rows): {job_seconds:.0f} s.",
        "",
        "Mean ± standard error over data draws. noise corr / ratio: correlation and ratio of means "
        "of the predicted aleatoric std and the true one on a grid over [-2.8, 2.8].",
        "",
        "| method | likelihood | RMSE | test LL | CRPS | noise corr | noise ratio | runs |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for m in opts.methods:
        for lik in opts.likelihoods:
            cell = [
                r["metrics"]
                for r in rows
                if r["method"] == m and keys[RowKey.of(r)].likelihood == lik
            ]
            vals = [_mean_se([c[k] for c in cell if c.get(k) is not None])
                    for k in ("rmse", "pll", "crps", "noise_corr", "noise_ratio")]  # fmt: skip
            lines.append(f"| {m} | {lik} | {' | '.join(vals)} | {len(cell)} |")
    figure = Path(opts.out) / "noise_toy.png"
    _plot(rows, keys, figure)
    lines += ["", f"![predicted aleatoric std]({figure.name})", ""]
    return write_report(Path(opts.out) / "README.md", "\n".join(lines))


def _plot(rows: list[dict[str, Any]], keys: dict[Any, NoiseToyJob], path: Path) -> None:
    """One panel per method: predicted aleatoric std on the grid, every run, against the truth."""
    from bayesify.plots import new_figure, save_figure

    grid = torch.linspace(*GRID)
    methods = list(dict.fromkeys(keys[RowKey.of(r)].method for r in rows))
    cols = min(4, len(methods)) or 1
    nrows = max(1, math.ceil(len(methods) / cols))
    fig, axes = new_figure(figsize=(2.6 * cols, 2.2 * nrows), nrows=nrows, ncols=cols,
                           squeeze=False, sharex=True, sharey=True)  # fmt: skip
    styles = {Likelihood.HOMOSCEDASTIC.value: ("C0", "--"),
              Likelihood.HETEROSCEDASTIC.value: ("C3", "-")}  # fmt: skip
    for ax, method in zip(axes.flat, methods, strict=False):
        ax.plot(grid, true_std(grid), color="black", lw=2, label="truth")
        seen = set()
        for r in rows:
            job = keys[RowKey.of(r)]
            if job.method != method:
                continue
            colour, line = styles[job.likelihood]
            label = None if job.likelihood in seen else job.likelihood[:6] + "."
            seen.add(job.likelihood)
            ax.plot(grid, r["metrics"]["grid_std"], color=colour, ls=line, lw=1, label=label)
        ax.set_title(method, fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in axes.flat[len(methods) :]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=6)
    fig.supxlabel("x", fontsize=8)
    fig.supylabel("predicted aleatoric std", fontsize=8)
    save_figure(fig, path, dpi=80)
