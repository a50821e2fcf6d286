"""Every method on Gal & Ghahramani's UCI splits, one store row per (method, dataset, split,
likelihood): deep ensembles, Bayes by Backprop, IBNN, StochasticNorm and MCBN (MC dropout keeps
its own job, :class:`~bayesify.bench.uci.gal.GalUCIJob`).

Each job trains on the first 80% of the training split, chooses its one hyper-parameter from
``grid`` by the validation part's log-likelihood (with the best validation epoch kept), and
only then scores the test split: RMSE, test log-likelihood and CRPS in original units, the
constant-uncertainty baseline's (CUBN / CUDO-style: the same mean, one variance fitted on
validation) and the normalised scores against it, and a 10-bin uncertainty–error curve.

The grid's meaning per method (:data:`GRID_NAMES`): the prior σ of Bayes by Backprop, the prior
std of IBNN's node noise, StochasticNorm's initial scale σ, MCBN's training batch size, SWAG's
collecting rate as a multiple of the training rate (after the net is trained as the others
are, SWAG continues with the same optimiser, Adam, at that constant rate for ``swag_epochs``,
as many epochs as it trained: Maddox et al. 2019 collect at a rate comparable to the training
rate; their UCI runs use the training rate itself for the last 500 of 1,000 epochs, their
CIFAR runs 0.1–0.5 of it), VBLL's prior variance of the last layer's weights,
evidential regression's evidence regulariser λ, SNGP's RBF length-scale ℓ of its random
features (:data:`HOMOSCEDASTIC_ONLY`: the methods that run homoscedastic only); the deep
ensemble (Lakshminarayanan et al. 2017: 5 members, each a heteroscedastic net trained by its NLL
from its own initialisation) has no grid, nor has Laplace (last layer or all layers, KFAC, around
the trained net; its prior precision by the marginal likelihood at each σ², σ² chosen on the
validation part, in its posterior and its noise: ``noise_fit``), nor have Packed-Ensembles and
BatchEnsemble (their defaults: M = 4 members trained together, predicted in one pass).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor

from bayesify.bench.jobs import key_field
from bayesify.bench.method_defaults import KEY, defaults_record
from bayesify.bench.search import Dimension, SearchJob, run_search
from bayesify.methods.core.likelihood import Likelihood

log = logging.getLogger(__name__)

#: methods run by :func:`score_method_job`, and what their ``grid`` values are
GRID_NAMES = {
    "ensemble": None,
    "bbb": "prior_sigma",
    "ibnn": "prior_std",
    "stochastic-norm": "sigma_init",
    "mcbn": "batch_size",
    "laplace": None,  # last-layer KFAC Laplace of the trained net, δ by marglik
    "laplace-all": None,  # all-layer KFAC Laplace (GLM predictive), δ by marglik
    "swag": "swag_lr_ratio",  # the collecting rate over the training rate
    "evidential-regression": "coeff",  # the evidence regulariser's weight λ
    "vbll": "prior_scale",  # the last layer's prior variance (its noise is learned)
    "packed-ensemble": None,  # its defaults: M = 4 members, alpha = 2
    "batch-ensemble": None,  # its defaults: M = 4, fast weights N(1, 0.5²) at fast_lr 0.5
    "sngp": "lengthscale",  # the RBF length-scale of its random Fourier features
}
#: methods run in the homoscedastic setting only, whatever likelihoods are asked for, and why
HOMOSCEDASTIC_ONLY = {
    "vbll": "its last layer learns the one noise variance",
    "evidential-regression": "its Normal-Inverse-Gamma head is its own noise model (its rows "
    "are stored as homoscedastic)",
    "sngp": "its GP output layer has one output, the noise τ⁻¹ fitted on validation",
}
UE_BINS = 10  # bins of the uncertainty–error curve


@dataclass(frozen=True)
class UCIMethodJob(SearchJob):
    """One row: ``method`` on one Gal split with one likelihood, ``grid`` chosen on validation."""

    method: str
    dataset: str
    split: int
    seed: int = 0
    likelihood: str = Likelihood.HETEROSCEDASTIC.value
    grid: tuple[float, ...] = ()
    hidden: int = 50
    epochs: int = 100
    batch_size: int = 32
    lr: float = 1e-2
    samples: int = 100
    members: int = 5
    val_fraction: float = 0.2
    # Laplace's σ², which scales its posterior: "validation" or "marglik" (LaplaceNoise); ""
    # marks the rows of the Laplace before the option, whose posterior kept the marginal
    # likelihood's σ² while its predictive's noise was refitted on validation
    noise_fit: str = key_field("")
    # SWAG's collecting epochs after training; 20 for the rows written before it was a setting
    swag_epochs: int = key_field(20)

    def __post_init__(self) -> None:
        if self.method not in GRID_NAMES:
            raise ValueError(f"unknown method {self.method!r}; valid: {', '.join(GRID_NAMES)}")
        if GRID_NAMES[self.method] is not None and not self.grid:
            raise ValueError(f"{self.method} needs a grid of {GRID_NAMES[self.method]} values")
        if self.method in HOMOSCEDASTIC_ONLY and self.likelihood != Likelihood.HOMOSCEDASTIC.value:
            raise ValueError(f"{self.method} runs homoscedastic only, got {self.likelihood}")


def build(job: UCIMethodJob, n_features: int, value: float | None) -> Any:
    """A fresh method of ``job`` on Gal's one-hidden-layer net (batch norm for MCBN), with the
    grid ``value``; seeded by the split so a job is reproducible."""
    import bayesify
    from bayesify.models import mlp

    out = 2 if job.likelihood == Likelihood.HETEROSCEDASTIC.value else 1
    common = {"likelihood": job.likelihood, "noise_objective": "pll"}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(job.seed + job.split)
        norm = "batch" if job.method == "mcbn" else None
        net = mlp(n_features, out, (job.hidden,), norm=norm)
        if job.method == "ensemble":
            return bayesify.DeepEnsemble(net, members=job.members, init_seed=job.seed + job.split,
                                         **common)  # fmt: skip
        if job.method == "bbb":
            return bayesify.BayesByBackprop(
                net, prior_sigma=value, init_rho=-5.0, kl_schedule="linear", kl_warmup=0.3,
                **common,
            )  # fmt: skip
        if job.method == "ibnn":
            return bayesify.IBNN(net, prior_std=value, init_seed=job.seed + job.split, **common)
        if job.method == "stochastic-norm":
            return bayesify.StochasticNorm(net, sigma_init=value, **common)
        if job.method.startswith("laplace"):  # fit() trains the MAP, then fits the posterior
            if not job.noise_fit and job.likelihood == Likelihood.HOMOSCEDASTIC.value:
                raise ValueError("a Laplace job names its noise_fit (rows without one were made "
                                 "by an earlier Laplace, which cannot be rerun)")  # fmt: skip
            subset = "all" if job.method == "laplace-all" else "last-layer"
            noise = {"noise_fit": job.noise_fit} if job.noise_fit else {}
            return bayesify.Laplace(net, subset=subset, hessian="kfac", **noise, **common)
        if job.method == "swag":  # collects after training (its optimiser), a snapshot an epoch
            return bayesify.SWAG(net, swag_lr=value * job.lr, swag_epochs=job.swag_epochs,
                                 **common)  # fmt: skip
        if job.method == "evidential-regression":  # its NIG head is its noise model
            net = mlp(n_features, 1, (job.hidden,), norm=None)
            return bayesify.EvidentialRegression(net, coeff=value, noise_objective="pll")
        if job.method == "vbll":  # homoscedastic only: its last layer learns the noise
            return bayesify.VBLL(net, prior_scale=value, **common)
        if job.method == "sngp":  # homoscedastic only: the GP layer's draws of f plus τ⁻¹
            return bayesify.SNGP(net, lengthscale=value, seed=job.seed + job.split, **common)
        if job.method == "packed-ensemble":
            return bayesify.PackedEnsemble(net, init_seed=job.seed + job.split, **common)
        if job.method == "batch-ensemble":
            return bayesify.BatchEnsemble(net, init_seed=job.seed + job.split, **common)
        return bayesify.MCBN(net, bank_size=128, **common)


def uncertainty_error_bins(std: Tensor, error: Tensor, bins: int = UE_BINS) -> dict[str, list]:
    """Test points sorted by predictive std ``[N]`` into ``bins`` equal parts: each part's mean
    std and RMSE of ``error`` ``[N]`` (Teye et al.'s uncertainty–error plot, binned)."""
    order = std.argsort()
    parts = [p for p in order.tensor_split(bins) if len(p)]
    return {
        "ue_std": [float(std[p].mean()) for p in parts],
        "ue_rmse": [float(error[p].square().mean().sqrt()) for p in parts],
    }


def score_predictive(method: Any, pred: Any, data: Any) -> dict[str, Any]:
    """Test scores in original units of a fitted ``method``'s test predictive ``pred`` (model
    units): RMSE, LL, CRPS, the epistemic share of the predictive variance, the constant
    baseline's LL and CRPS, normalised scores (×100) and the uncertainty–error bins."""
    from bayesify import metrics

    loc, scale = data.scaler.y_mean, data.scaler.y_std
    mc = pred.affine(loc, scale)
    y = data.y_test_original.to(mc.samples.dtype)
    ll, crps = float(mc.log_prob(y).mean()), float(mc.crps(y).mean())
    out: dict[str, Any] = {
        "rmse": float((mc.mean - y).square().mean().sqrt()),
        "ll": ll,
        "crps": crps,
        "mean_std": float(mc.std.mean()),
        # the weights' part of the predictive variance, per test point, averaged
        "epistemic_share": float((mc.epistemic_variance / mc.variance).mean()),
    }
    if method.constant_variance is not None:
        cu = method.constant_baseline(pred).affine(loc, scale)
        cu_ll, cu_crps = float(cu.log_prob(y).mean()), float(cu.crps(y).mean())
        out.update(
            cu_ll=cu_ll,
            cu_crps=cu_crps,
            pll_norm=metrics.normalized_pll(ll, cu_ll, metrics.optimal_pll(mc.mean, y)),
            crps_norm=metrics.normalized_crps(crps, cu_crps, metrics.optimal_crps(mc.mean, y)),
        )
    out.update(uncertainty_error_bins(mc.std, mc.mean - y))
    return out


def _grid_trial(job: UCIMethodJob, data: Any, params: dict[str, Any], report: Any) -> tuple:
    """One grid value (none for a method without a grid): (validation LL, fitted method)."""
    name = GRID_NAMES[job.method]
    value = None if name is None else float(params[name])
    method = build(job, data.n_features, value)
    batch = int(value) if job.method == "mcbn" and value is not None else job.batch_size
    method.fit((data.x_train, data.y_train), val=(data.x_val, data.y_val), epochs=job.epochs,
               batch_size=batch, lr=job.lr, seed=job.seed + job.split,
               progress=False)  # fmt: skip
    val = method.predict(data.x_val, samples=job.samples, seed=job.seed)
    val_ll = float(val.log_prob(data.y_val).mean())  # standardised units: only compared
    log.debug("%s %s split %d %s: validation LL %.3f", job.method, job.dataset, job.split,
              value, val_ll)  # fmt: skip
    return val_ll, method


def score_method_job(job: UCIMethodJob) -> dict[str, Any]:
    """Train each grid value (the job's search, by default the full grid), keep the best by
    validation log-likelihood, score it on test; then time its predict per 1,000 rows beside
    the deterministic network's (:mod:`~bayesify.bench.uci.predict_time`)."""
    from bayesify.bench.uci.predict_time import predict_times
    from bayesify.data import load_uci

    data = load_uci(job.dataset, job.split, protocol="gal", val_fraction=job.val_fraction)
    name = GRID_NAMES[job.method]
    space = [] if name is None else [
        Dimension(name, tuple(job.grid), log=min(job.grid) > 0, integer=job.method == "mcbn")
    ]  # fmt: skip
    found = run_search(partial(_grid_trial, job, data), space, job.search_settings(),
                       direction="maximize")  # fmt: skip
    val_ll, method = found.value, found.artefact
    pred = method.predict(data.x_test, samples=job.samples, seed=job.seed)
    out = score_predictive(method, pred, data)
    out.update(
        chosen=found.params.get(name) if name is not None else None,
        val_ll_standardised=val_ll,
        epochs_kept=method.history.best_epoch + 1 if method.history else None,
    )
    out[KEY] = defaults_record(method)
    out.update(predict_times(method, job, data.x_test))  # beside the deterministic network
    return out
