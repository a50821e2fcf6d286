"""Gal & Ghahramani's UCI protocol for MC dropout, homoscedastic and heteroscedastic, run job by
job (one per dataset, split and likelihood) into a resumable results store, with their
published figures beside ours.

Protocol: the standard 90/10 splits (20 per dataset, 5 for protein); the last 20% of each
training split is a validation part used for every choice (dropout rate from a grid by validation
log-likelihood, the best epoch, τ for the homoscedastic net); the test split is only scored.
One hidden layer of 50 ReLU units (100 for protein), dropout on the inputs and the hidden layer.
RMSE and test log-likelihood in original target units, mean ± standard error over splits.

Presets: ``quick`` (5 small datasets, 3 splits, 2 rates, 40 epochs: minutes) and ``paper`` (all
nine datasets, all splits, Gal's rate grid {0.005, 0.01, 0.05, 0.1}, batch size 128, up to 400
epochs: hours on a CPU; run it with ``--workers`` on a many-core machine, and again after any
interruption: finished jobs are kept). Where we differ from Gal's published code: τ is fitted on
the validation part after training (for the homoscedastic net) instead of chosen from a grid, no
weight decay from a prior length-scale, the best validation epoch is kept, and the chosen net is
not retrained on the full training split.

    bayesify bench gal-uci --preset quick --workers 2
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
from bayesify.bench.runner import job_key, run_jobs
from bayesify.bench.store import RowKey
from bayesify.data.uci import UCI_DATASETS
from bayesify.methods.likelihood import Likelihood

log = logging.getLogger(__name__)

EXPERIMENT = "gal-uci"
#: Gal & Ghahramani (2016) Table 1, MC dropout: RMSE, its ±, test log-likelihood, its ± (the
#: paper's "average test ... and std. errors" over splits)
GAL_2016: dict[str, tuple[float, float, float, float]] = {
    "bostonHousing": (2.97, 0.85, -2.46, 0.25),
    "concrete": (5.23, 0.53, -3.04, 0.09),
    "energy": (1.66, 0.19, -1.99, 0.09),
    "kin8nm": (0.10, 0.00, 0.95, 0.03),
    "naval-propulsion-plant": (0.01, 0.00, 3.80, 0.05),
    "power-plant": (4.02, 0.18, -2.80, 0.05),
    "protein-tertiary-structure": (4.36, 0.04, -2.89, 0.01),
    "wine-quality-red": (0.62, 0.04, -0.93, 0.06),
    "yacht": (1.11, 0.38, -1.55, 0.12),
}
#: Lakshminarayanan et al. (2017), deep ensembles of 5 heteroscedastic nets: test log-likelihood.
ENSEMBLE_2017 = {
    "bostonHousing": -2.41, "concrete": -3.06, "energy": -1.38, "kin8nm": 1.20,
    "naval-propulsion-plant": 5.63, "power-plant": -2.79, "protein-tertiary-structure": -2.83,
    "wine-quality-red": -0.94, "yacht": -1.18,
}  # fmt: skip


@dataclass(frozen=True)
class Preset:
    datasets: tuple[str, ...]
    splits: int | None  # None: every standard split
    dropout_rates: tuple[float, ...]
    epochs: int
    batch_size: int
    lr: float
    samples: int


PRESETS = {
    "quick": Preset(("bostonHousing", "concrete", "energy", "wine-quality-red", "yacht"), 3,
                    (0.01, 0.05), 40, 32, 1e-2, 100),
    "paper": Preset(UCI_DATASETS, None, (0.005, 0.01, 0.05, 0.1), 400, 128, 1e-3, 1000),
}  # fmt: skip


@dataclass(frozen=True)
class GalUCIJob:
    """One row: MC dropout on one Gal split with one likelihood, the rate chosen on validation."""

    method: str
    dataset: str
    split: int
    seed: int = 0
    likelihood: str = Likelihood.HOMOSCEDASTIC.value
    dropout_rates: tuple[float, ...] = (0.01, 0.05)
    hidden: int = 50
    epochs: int = 40
    batch_size: int = 32
    lr: float = 1e-2
    samples: int = 100
    val_fraction: float = 0.2


def _train(job: GalUCIJob, data: Any, p: float) -> Any:
    from bayesify.methods import MCDropout
    from bayesify.models import mlp

    outputs = 2 if job.likelihood == Likelihood.HETEROSCEDASTIC.value else 1
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(job.seed + job.split)
        net = mlp(data.n_features, outputs, (job.hidden,), norm=None, dropout=p)
        method = MCDropout(net, likelihood=job.likelihood, noise_objective="pll")
    method.fit((data.x_train, data.y_train), val=(data.x_val, data.y_val), epochs=job.epochs,
               batch_size=job.batch_size, lr=job.lr, seed=job.seed + job.split,
               progress=False)  # fmt: skip
    return method


def score_job(job: GalUCIJob) -> dict[str, Any]:
    """Choose the dropout rate on the validation part, score the chosen net on the test split."""
    from bayesify.data import load_uci

    data = load_uci(job.dataset, job.split, protocol="gal", val_fraction=job.val_fraction)
    best: tuple[float, float, Any] | None = None
    for p in job.dropout_rates:
        method = _train(job, data, p)
        val = method.predict(data.x_val, samples=job.samples, seed=job.seed)
        val_ll = float(val.log_prob(data.y_val).mean())  # standardised units: only compared
        log.debug("%s split %d p=%g: validation LL %.3f", job.dataset, job.split, p, val_ll)
        if best is None or val_ll > best[0]:
            best = (val_ll, p, method)
    if best is None:
        raise ValueError("dropout_rates is empty: give at least one rate")
    val_ll, p, method = best
    pred = method.predict(data.x_test, samples=job.samples, seed=job.seed)
    pred = pred.affine(data.scaler.y_mean, data.scaler.y_std)
    y = data.y_test_original.to(pred.samples.dtype)
    return {
        "rmse": float((pred.mean - y).square().mean().sqrt()),
        "ll": float(pred.log_prob(y).mean()),
        "crps": float(pred.crps(y).mean()),
        "dropout": p,
        "val_ll_standardised": val_ll,
        "epochs_kept": method.history.best_epoch + 1 if method.history else None,
    }


@dataclass(frozen=True)
class GalUCIOptions:
    """Options of ``bayesify bench gal-uci``."""

    command: ClassVar[str] = "gal-uci"
    preset: str = option("quick", "quick or paper (datasets, splits, grid, epochs, samples).")
    datasets: tuple[str, ...] = option(("preset",), "Datasets, comma-separated ('preset': its).")
    splits: int = option(0, "First splits per dataset [default 0: the preset's].")
    epochs: int = option(0, "Training epochs [default 0: the preset's].")
    likelihoods: tuple[str, ...] = option(
        ("homoscedastic", "heteroscedastic"), "Likelihoods, comma-separated."
    )
    store: str = option("benchmarks/gal_uci/results.db", "The results store (sqlite file).")
    out: str = option("benchmarks/gal_uci", "Folder for README.md and the figure.")
    workers: int = option(1, "Parallel worker processes.")

    def __post_init__(self) -> None:
        check_choices("preset", (self.preset,), PRESETS)
        if self.datasets != ("preset",):
            check_choices("datasets", self.datasets, UCI_DATASETS)
        check_choices("likelihoods", self.likelihoods, [k.value for k in Likelihood])
        if min(self.splits, self.epochs) < 0 or self.workers < 1:
            raise ValueError("splits and epochs must be >= 0, workers >= 1")

    def jobs(self) -> list[GalUCIJob]:
        from bayesify.data.uci import uci_n_splits

        pre = PRESETS[self.preset]
        jobs = []
        for name in pre.datasets if self.datasets == ("preset",) else self.datasets:
            n = uci_n_splits(name, "gal")
            n = min(n, self.splits or pre.splits or n)
            for lik in self.likelihoods:
                jobs += [
                    GalUCIJob(
                        "mc-dropout",
                        name,
                        s,
                        likelihood=lik,
                        dropout_rates=pre.dropout_rates,
                        hidden=100 if name == "protein-tertiary-structure" else 50,
                        epochs=self.epochs or pre.epochs,
                        batch_size=pre.batch_size,
                        lr=pre.lr,
                        samples=pre.samples,
                    )  # fmt: skip
                    for s in range(n)
                ]
        return jobs


def _mean_se(values: list[float]) -> tuple[float, float]:
    m = sum(values) / len(values)
    if len(values) < 2:
        return m, float("nan")
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1) / len(values))


def _pm(mean: float, se: float) -> str:
    return f"{mean:.2f}" if math.isnan(se) else f"{mean:.2f} ± {se:.2f}"


def run(opts: GalUCIOptions) -> str:
    """Run the jobs not yet in the store, then write ``out/README.md`` and a figure from it."""
    from bayesify.bench.store import ResultsStore

    torch.set_num_threads(1)
    t0 = time.time()
    jobs = opts.jobs()
    summary = run_jobs(EXPERIMENT, jobs, score_job, opts.store, workers=opts.workers)
    wall = time.time() - t0
    keys = {job_key(EXPERIMENT, j): j for j in jobs}
    with ResultsStore(opts.store) as store:
        rows = [r for r in store.records(EXPERIMENT) if RowKey.of(r) in keys]
    cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault((r["dataset"], keys[RowKey.of(r)].likelihood), []).append(r)
    datasets = list(dict.fromkeys(j.dataset for j in jobs))
    pre = PRESETS[opts.preset]
    lines = [
        "# Gal & Ghahramani's UCI protocol: MC dropout, homoscedastic and heteroscedastic",
        "",
        f"Command: `{command_line(opts)}`  ",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores shared with other work, torch "
        f"{torch.__version__}, 1 thread per process; this call: {summary}, {wall:.0f} s wall; "
        f"job time in the store: {sum(r['seconds'] or 0.0 for r in rows):.0f} s.  ",
        f"Preset `{opts.preset}` as run: datasets {', '.join(datasets)}; splits "
        f"{max((j.split for j in jobs), default=-1) + 1} (of 20, 5 for protein); dropout rates "
        f"{jobs[0].dropout_rates if jobs else pre.dropout_rates}; epochs "
        f"{jobs[0].epochs if jobs else pre.epochs} (best on validation kept); batch size "
        f"{pre.batch_size}; Adam lr {pre.lr}; T = {pre.samples} MC samples.",
        "",
        "Standard 90/10 splits; the last 20% of each training split is validation (dropout rate "
        "from the grid by validation log-likelihood, best epoch, τ for the homoscedastic net); "
        "the test split is only scored. RMSE / test log-likelihood in original units, mean ± "
        "standard error over our splits. Gal & Ghahramani 2016 (MC dropout, 20 splits, 40 "
        "epochs) as published (± their standard error over splits); deep ensembles (5 "
        "heteroscedastic nets, Lakshminarayanan et al. 2017) test LL for reference. ✓: our "
        "mean test LL is above Gal's minus their standard error.",
        "",
        "| dataset | splits | homoscedastic RMSE | homoscedastic LL | heteroscedastic RMSE "
        "| heteroscedastic LL | Gal 2016 RMSE | Gal 2016 LL | ensembles 2017 LL |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in datasets:
        g = GAL_2016[name]
        out = [name]
        n = max((len(cells.get((name, lik), [])) for lik in opts.likelihoods), default=0)
        out.append(str(n))
        for lik in ("homoscedastic", "heteroscedastic"):
            runs = cells.get((name, lik), [])
            if not runs:
                out += ["–", "–"]
                continue
            rm, rse = _mean_se([r["metrics"]["rmse"] for r in runs])
            lm, lse = _mean_se([r["metrics"]["ll"] for r in runs])
            mark = " ✓" if lm >= g[2] - g[3] else ""
            out += [_pm(rm, rse), _pm(lm, lse) + mark]
        out += [
            f"{g[0]:.2f} ± {g[1]:.2f}",
            f"{g[2]:.2f} ± {g[3]:.2f}",
            f"{ENSEMBLE_2017[name]:.2f}",
        ]
        lines.append("| " + " | ".join(out) + " |")
    figure = Path(opts.out) / "gal_uci_ll.png"
    _plot(datasets, cells, figure)
    lines += ["", f"![test log-likelihood per dataset]({figure.name})", ""]
    return write_report(Path(opts.out) / "README.md", "\n".join(lines))


def _plot(datasets: list[str], cells: dict[tuple[str, str], list[dict]], path: Path) -> None:
    """Test log-likelihood per dataset: ours (homo-, heteroscedastic) against Gal's and the
    ensembles' published values."""
    from bayesify.plots import new_figure, save_figure

    fig, axes = new_figure(figsize=(2.3 * len(datasets), 2.6), ncols=len(datasets), squeeze=False)
    for ax, name in zip(axes.flat, datasets, strict=True):
        for i, lik in enumerate(("homoscedastic", "heteroscedastic")):
            runs = cells.get((name, lik), [])
            if runs:
                m, se = _mean_se([r["metrics"]["ll"] for r in runs])
                ax.errorbar(i, m, yerr=0 if math.isnan(se) else se, fmt="o", color=f"C{i}",
                            capsize=3)  # fmt: skip
        g = GAL_2016[name]
        ax.errorbar(2, g[2], yerr=g[3], fmt="s", color="black", capsize=3)
        ax.plot(3, ENSEMBLE_2017[name], "D", color="grey")
        ax.set_xticks(range(4))
        ax.set_xticklabels(["homo", "hetero", "Gal", "ens."], fontsize=7, rotation=45)
        ax.set_title(name, fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(axis="y", alpha=0.3)
    axes.flat[0].set_ylabel("test log-likelihood", fontsize=8)
    save_figure(fig, path, dpi=80)
