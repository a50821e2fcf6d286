"""MC dropout, Bayes by Backprop, deep ensembles and MCBN on UCI regression (Gal's splits).

Every method gets the same network size (one hidden layer of ``hidden`` ReLU units, Gal &
Ghahramani's UCI net; batch norm for MCBN), the same training budget (Adam, ``epochs``, best
validation epoch kept), and τ fitted on the validation part of the training split for the
mixture's log-likelihood (``noise_objective="pll"``). RMSE and test log-likelihood are in
original target units, averaged over splits (± standard error).

    bayesify bench uci-methods --splits 5 --out benchmarks/uci_methods.md
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import ClassVar

import torch

from bayesify.bench.machine import machine_description
from bayesify.bench.options import check_choices, command_line, option, write_report
from bayesify.data import load_uci
from bayesify.methods import MCBN, BayesByBackprop, DeepEnsemble, MCDropout, Method
from bayesify.metrics import rmse
from bayesify.models import mlp

log = logging.getLogger(__name__)

DATASETS = ("bostonHousing", "concrete", "energy", "wine-quality-red", "yacht")
METHOD_NAMES = ("mc-dropout", "bbb", "ensemble", "mcbn")
#: Gal & Ghahramani (2016), Table 1, MC dropout: (RMSE, test log-likelihood).
GAL_2016 = {
    "bostonHousing": (2.97, -2.46),
    "concrete": (5.23, -3.04),
    "energy": (1.66, -1.99),
    "wine-quality-red": (0.62, -0.93),
    "yacht": (1.11, -1.55),
}


@dataclass(frozen=True)
class Settings:
    epochs: int = 20
    batch_size: int = 32
    lr: float = 1e-2
    hidden: int = 50
    dropout: float = 0.05
    samples: int = 50
    members: int = 5


@dataclass(frozen=True)
class UCIMethodsOptions:
    """Options of ``bayesify bench uci-methods``."""

    command: ClassVar[str] = "uci-methods"
    splits: int = option(5, "Gal's first splits per dataset.")
    epochs: int = option(Settings.epochs, "Training epochs (best kept).")
    lr: float = option(Settings.lr, "Adam learning rate.")
    datasets: tuple[str, ...] = option(DATASETS, "Comma-separated UCI datasets.")
    methods: tuple[str, ...] = option(
        METHOD_NAMES, f"Comma-separated, from {', '.join(METHOD_NAMES)}."
    )
    out: str = option("benchmarks/uci_methods.md", "Markdown report.")

    def __post_init__(self) -> None:
        check_choices("datasets", self.datasets, GAL_2016)
        check_choices("methods", self.methods, METHOD_NAMES)


def build(method: str, d: int, s: Settings) -> Method:
    """A fresh method on Gal's one-hidden-layer network."""
    opts = {"noise_objective": "pll"}
    if method == "mc-dropout":
        return MCDropout(mlp(d, hidden=(s.hidden,), norm=None, dropout=s.dropout), **opts)
    if method == "bbb":
        net = mlp(d, hidden=(s.hidden,), norm=None)
        return BayesByBackprop(net, init_rho=-5.0, kl_schedule="linear", kl_warmup=0.3, **opts)
    if method == "ensemble":
        return DeepEnsemble(mlp(d, hidden=(s.hidden,), norm=None), members=s.members, **opts)
    if method == "mcbn":
        return MCBN(mlp(d, hidden=(s.hidden,), norm="batch"), bank_size=128, **opts)
    raise ValueError(f"unknown method {method!r}; valid: {', '.join(METHOD_NAMES)}")


def run_split(name: str, split: int, method: str, s: Settings) -> tuple[float, float]:
    """Train on one Gal split; (RMSE, mean test log-likelihood) in original units."""
    data = load_uci(name, split, protocol="gal")
    m = build(method, data.n_features, s)
    m.fit(
        (data.x_train, data.y_train),
        val=(data.x_val, data.y_val),
        epochs=s.epochs,
        batch_size=s.batch_size,
        lr=s.lr,
        seed=split,
        progress=False,
    )
    pred = m.predict(data.x_test, samples=s.samples, seed=split)
    pred = pred.affine(data.scaler.y_mean, data.scaler.y_std)
    y = data.y_test_original.float()
    return float(rmse(pred.mean, y)), float(pred.log_prob(y).mean())


def _mean_se(v: list[float]) -> str:
    t = torch.tensor(v, dtype=torch.float64)
    se = float(t.std() / math.sqrt(len(v))) if len(v) > 1 else 0.0
    return f"{float(t.mean()):.2f} ± {se:.2f}"


def run(opts: UCIMethodsOptions) -> str:
    """Every method on every dataset; rewrites the report after each (dataset, method) so a
    long run shows its progress; returns the final markdown."""
    torch.set_num_threads(1)
    s = Settings(epochs=opts.epochs, lr=opts.lr)
    rows, start = [], time.time()

    def write(rows: list[str], done: str) -> str:
        minutes = (time.time() - start) / 60
        lines = [
            "# UCI regression: MC dropout, Bayes by Backprop, deep ensemble, MCBN",
            "",
            f"Command: `{command_line(opts)}`  ",
            f"Machine: {machine_description()}; {minutes:.1f} min.  ",
            f"Splits: Gal's first {opts.splits} standard 90/10 splits (protocol='gal'); "
            "the last 20% of each training split is validation "
            "(best epoch, and τ fitted for test log-likelihood).",
            f"Settings: {s} — one hidden layer of {s.hidden} units for every method "
            f"(MCBN with batch norm); ensemble of {s.members} plain nets; "
            "BBB with a N(0, 1) prior, linear KL warm-up and learned noise during training.",
            "",
            "RMSE / test log-likelihood (original units, mean ± standard error over splits).",
            "Gal & Ghahramani's column is their published MC dropout result (20 splits, 40 epochs, "
            "τ and dropout rate tuned by grid search), for reference.",
            "",
            "| dataset | " + " | ".join(opts.methods) + " | Gal & Ghahramani 2016 |",
            "| --- | " + " | ".join("---" for _ in opts.methods) + " | --- |",
            *rows,
            "",
        ]
        lines.append(f"Finished: {done}")
        return write_report(opts.out, "\n".join(lines) + "\n")

    for name in opts.datasets:
        cells = []
        for method in opts.methods:
            scores = [run_split(name, i, method, s) for i in range(opts.splits)]
            log.info("%s %s: %s", name, method, scores)
            cells.append(
                f"{_mean_se([r for r, _ in scores])} / {_mean_se([ll for _, ll in scores])}"
            )
            gal = GAL_2016[name]
            pad = ["(not run)"] * (len(opts.methods) - len(cells))
            row = f"| {name} | " + " | ".join(cells + pad) + f" | {gal[0]:.2f} / {gal[1]:.2f} |"
            text = write([*rows, row], f"{name} {method}")
        rows.append(row)
    log.info("wrote %s", opts.out)
    return text
