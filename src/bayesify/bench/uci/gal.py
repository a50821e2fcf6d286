"""Gal & Ghahramani's UCI protocol for MC dropout, homoscedastic and heteroscedastic: the job
(one per dataset, split and likelihood), its scoring, and the published figures that
``bayesify bench uci`` (:mod:`bayesify.bench.uci.command`) puts beside ours.

Protocol: the standard 90/10 splits (20 per dataset, 5 for protein); the last 20% of each
training split is a validation part used for every choice (dropout rate from a grid by validation
log-likelihood, the best epoch, τ for the homoscedastic net); the test split is only scored.
One hidden layer of 50 ReLU units (100 for protein), dropout on the inputs and the hidden layer.
RMSE and test log-likelihood in original target units.

Presets: ``quick`` (2 rates, 40 epochs, batch size 32) and ``paper`` (Gal's rate grid {0.005,
0.01, 0.05, 0.1}, batch size 128, up to 400 epochs). Where we differ from Gal's published code:
τ is fitted on the validation part after training (for the homoscedastic net) instead of chosen
from a grid, no weight decay from a prior length-scale, the best validation epoch is kept, and the
chosen net is not retrained on the full training split. :class:`GalUCIJob`'s fields and their
values are the row keys of stores written since the first version of this protocol: keep them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from bayesify.bench.search import Dimension, SearchJob, run_search
from bayesify.data.uci import UCI_DATASETS
from bayesify.methods.core.likelihood import Likelihood

log = logging.getLogger(__name__)

EXPERIMENT = "gal-uci"
#: Gal & Ghahramani (2016) Table 1, MC dropout: RMSE, its ±, test log-likelihood, its ±. The ±
#: printed in the ICML 2016 table are standard deviations over splits (the later arXiv version
#: prints standard errors), and that run chose one τ for all splits by Bayesian optimisation
#: scored on the test splits; Gal's 2018 rerun (:mod:`gal_2018`) is the clean reference
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


#: Gal's 2018 rerun (:mod:`bayesify.bench.uci.gal2018_results`): settings our rows' configs
#: are compared with on the page (its epochs are read with its results)
GAL_2018_SETTINGS: dict[str, Any] = {
    "batch_size": 128, "dropout_rates": (0.005, 0.01, 0.05, 0.1), "samples": 10_000,
}  # fmt: skip
#: where this protocol differs from the 2018 rerun beyond those settings and the epochs
DIFFERENCES_FROM_GAL_2018 = (
    "the chosen net is not retrained on the whole training split (Gal retrains the chosen "
    "configuration on it)",
    "no weight decay from a prior length-scale (Gal: λ = l²(1 − p)/(2Nτ) with l = 10⁻²)",
    "the homoscedastic net's τ is fitted on the validation part after training instead of "
    "chosen with the rate from Gal's τ grid (Gal has no heteroscedastic net: both of ours are "
    "compared with his homoscedastic one)",
)


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
class GalUCIJob(SearchJob):
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


def _rate_trial(job: GalUCIJob, data: Any, params: dict[str, Any], report: Any) -> tuple:
    """One dropout rate: (validation log-likelihood, the trained method)."""
    p = float(params["dropout"])
    method = _train(job, data, p)
    val = method.predict(data.x_val, samples=job.samples, seed=job.seed)
    val_ll = float(val.log_prob(data.y_val).mean())  # standardised units: only compared
    log.debug("%s split %d p=%g: validation LL %.3f", job.dataset, job.split, p, val_ll)
    return val_ll, method


def score_job(job: GalUCIJob) -> dict[str, Any]:
    """Choose the dropout rate on the validation part (the job's search, by default the full
    grid), score the chosen net on the test split."""
    from bayesify.bench.uci.gal_methods import score_predictive
    from bayesify.data import load_uci

    if not job.dropout_rates:
        raise ValueError("dropout_rates is empty: give at least one rate")
    data = load_uci(job.dataset, job.split, protocol="gal", val_fraction=job.val_fraction)
    space = [Dimension("dropout", tuple(job.dropout_rates), log=min(job.dropout_rates) > 0)]
    found = run_search(partial(_rate_trial, job, data), space, job.search_settings(),
                       direction="maximize")  # fmt: skip
    val_ll, p, method = found.value, found.params["dropout"], found.artefact
    pred = method.predict(data.x_test, samples=job.samples, seed=job.seed)
    # rmse, ll, crps (original units), CUDO's (cu_*), normalised scores, uncertainty–error bins
    return {
        **score_predictive(method, pred, data),
        "dropout": p,
        "val_ll_standardised": val_ll,
        "epochs_kept": method.history.best_epoch + 1 if method.history else None,
    }
