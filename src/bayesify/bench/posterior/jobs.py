"""The jobs of ``bayesify bench posterior``: one HMC reference per (problem, split), stored as a
bundle of draws; then every method fitted on the same training rows and scored against it.

The methods are :data:`METHODS`, one line each (network options for the one-hidden-layer MLP,
then the method's own options); a method registered in ``bayesify.methods`` is added here by one
line. A method row never reruns HMC: it reads the reference's bundle, and the second
reference's (seed :data:`FLOOR_SEED`) for the floor: the same scores between two HMC runs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from bayesify.bench.jobs import key_field
from bayesify.bench.posterior.distances import distances, floor_key, subsample
from bayesify.bench.posterior.problems import Problem, load_problem, log_scale
from bayesify.options import Task
from bayesify.reference.hmc import IZMAILOV_PRIOR_STD

log = logging.getLogger(__name__)

HMC = "hmc"
#: method -> (mlp options, method options): the methods scored against the reference
METHODS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "mc-dropout": ({"dropout": 0.05}, {}),
    "mcbn": ({"norm": "batch"}, {"bank_size": 64}),
    "bbb": ({}, {"init_rho": -5.0, "kl_schedule": "linear", "kl_warmup": 0.3}),
    "ensemble": ({}, {"members": 5}),
    "ibnn": ({}, {}),
    "stochastic-norm": ({}, {}),
    # last-layer KFAC Laplace of the trained net, δ and σ² by marglik (named: the regression
    # defaults became all layers and σ² on validation after these rows were written, and the
    # row keys omit the options; the rows before also refitted the predictive's noise on
    # validation, which moves the whole predictive, not f(x))
    "laplace": ({}, {"subset": "last-layer", "noise_fit": "marglik"}),
    "swag": ({}, {"swag_epochs": 20}),  # 20 epochs of SGD after training, a snapshot each
    "flow": ({}, {}),  # a neural spline flow over the last layer, fitted by the ELBO
}
HIDDEN = 50
FLOOR_SEED = 1  # the second reference's seed: another chain seed, the same posterior (same σ)
# the method rows' scores: 1, the whole predictive only; 2, f(x) and the floor too; 3, also
# classification agreement and TV apart for inputs in the data and in the gap
SCORES = 3


@dataclass(frozen=True)
class PosteriorJob:
    """One row: the HMC reference (``method="hmc"``) or a method, on one problem and split.

    The HMC settings are part of every row's configuration, so a method row belongs to the
    reference it was scored against; ``references`` is the folder of the reference bundles.
    ``epochs`` and ``mc_samples`` are the methods' (0 in a reference's row: HMC uses neither, so
    its key does not change with them). ``scores`` names what a method row computes (1: the
    whole predictive only, the rows written before f(x) was scored; :data:`SCORES`: f(x)
    distances and the floor too), so rows of each kind keep apart in the store. ``method_seed``
    is the method's own seed (its initialisation, batches and draws), run several times against
    the one reference (``seed``) of a split."""

    method: str
    dataset: str
    split: int
    seed: int = 0
    references: str = "benchmarks/posterior/references"
    chains: int = 4
    warmup: int = 200
    samples: int = 200
    thin: int = 1
    max_tree_depth: int = 8
    dense_mass: bool = False
    init_steps: int = 300
    fixed_noise: bool = True  # regression: σ fixed at validation_noise (else sampled)
    epochs: int = 200
    mc_samples: int = 100
    scores: int = key_field(1)
    method_seed: int = key_field(0)
    prior_std: float = key_field(IZMAILOV_PRIOR_STD)  # a reference under another prior: a check
    noise_scale: float = key_field(1.0)  # σ fixed at this × the validation RMSE: a check

    def reference_path(self) -> Path:
        tag = f"c{self.chains}-w{self.warmup}-s{self.samples}-t{self.thin}-d{self.max_tree_depth}"
        tag += f"-i{self.init_steps}" + ("-dense" if self.dense_mass else "")
        tag += "-fixed" if self.fixed_noise else ""
        tag += "" if self.prior_std == IZMAILOV_PRIOR_STD else f"-prior{self.prior_std:g}"
        tag += "" if self.noise_scale == 1.0 else f"-noise{self.noise_scale:g}"
        return Path(self.references) / f"{self.dataset}-{self.split}-seed{self.seed}-{tag}"


def _net(problem: Problem, **options: Any) -> torch.nn.Sequential:
    from bayesify.models import mlp

    opts = {"norm": None, **options}
    return mlp(problem.n_features, problem.n_outputs, (HIDDEN,), **opts)


def validation_noise(problem: Problem, seed: int, steps: int = 2000) -> float:
    """The noise σ the reference fixes (standardised units): the RMSE on the validation rows of
    the MAP network, fitted by ``steps`` full-batch Adam steps on the training rows with σ
    profiled out (minimising ``N/2 log MSE + |w|²/(2·prior_std²)``, the prior the reference
    samples under)."""
    from bayesify.reference.hmc import IZMAILOV_PRIOR_STD
    from bayesify.seeding import seeded

    with seeded(seed):
        net = _net(problem)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    x, y, n = problem.x_train, problem.y_train, len(problem.y_train)
    for _ in range(steps):
        opt.zero_grad()
        mse = (net(x)[:, 0] - y).square().mean()
        prior = sum(p.square().sum() for p in net.parameters()) / (2 * IZMAILOV_PRIOR_STD**2)
        (0.5 * n * mse.log() + prior).backward()
        opt.step()
    with torch.no_grad():
        return float((net(problem.x_val)[:, 0] - problem.y_val).square().mean().sqrt())


def _test_scores(pred: Any, problem: Problem) -> dict[str, Any]:
    """Test LL (original units for UCI) and RMSE or accuracy on the inputs in the data."""
    m = problem.in_data
    sub, y = pred[m], problem.y_test[m]
    ll = float(sub.log_prob(y).mean()) - log_scale(problem)
    if problem.task is Task.CLASSIFICATION:
        return {"ll": ll, "accuracy": float((sub.predicted_class == y).double().mean())}
    return {"ll": ll, "rmse": float((sub.mean - y).square().mean().sqrt()) * problem.y_scale}


def _band(pred: Any, problem: Problem) -> dict[str, Any]:
    """The 1-D toy's predictive mean and std on its grid, for the figure."""
    if problem.name != "toy-1d":
        return {}
    return {"grid_mean": [round(float(v), 4) for v in pred.mean],
            "grid_std": [round(float(v), 4) for v in pred.std]}  # fmt: skip


def score_reference(job: PosteriorJob) -> dict[str, Any]:
    """Run NUTS on the problem's training rows, store the draws, check convergence on the
    test predictive and score it."""
    from bayesify.reference import HMCConfig, predictive_diagnostics, sample_posterior
    from bayesify.seeding import seeded

    problem = load_problem(job.dataset, job.split)
    with seeded(job.seed):
        net = _net(problem)
    fixed = job.fixed_noise and problem.task is Task.REGRESSION
    # σ depends on the split alone: the floor's second reference samples the same posterior
    noise = job.noise_scale * validation_noise(problem, job.split) if fixed else None
    cfg = HMCConfig(noise_std=noise, prior_std=job.prior_std, chains=job.chains,
                    warmup=job.warmup, samples=job.samples, thin=job.thin,
                    max_tree_depth=job.max_tree_depth, dense_mass=job.dense_mass,
                    init_steps=job.init_steps, seed=job.seed + 100 * job.split)  # fmt: skip
    draws = sample_posterior(net, problem.x_train, problem.y_train, problem.task, cfg)
    draws.save(job.reference_path(), extra={"dataset": job.dataset, "split": job.split})
    out = draws.outputs(net, problem.x_test)  # [C, S, N, out]
    values = out.softmax(-1) if problem.task is Task.CLASSIFICATION else out[..., 0]
    diag = predictive_diagnostics(values)
    pred = draws.predictive(net, problem.x_test, outputs=out)
    chains = draws.stats["chains"]
    metrics = {
        **diag,
        **_test_scores(pred, problem),
        "divergences": sum(c["divergences"] for c in chains),
        "accept": sum(c["accept"] for c in chains) / len(chains),
        "step_size": sum(c["step_size"] for c in chains) / len(chains),
        "steps": sum(c["steps"] for c in chains) / len(chains),
        "hmc_seconds": draws.stats["seconds"],
        **_band(pred, problem),
    }
    if draws.log_noise is not None:  # sampled: the posterior mean; fixed: the σ fixed
        metrics["noise_std"] = float(draws.log_noise.exp().mean()) * problem.y_scale
    return metrics


def score_method(job: PosteriorJob) -> dict[str, Any]:
    """Fit ``job.method`` on the problem's training rows (validation rows for early stopping and
    τ) and score its test predictive against the stored reference; beside each score, the floor:
    the same score of the second reference (subsampled to the method's draws) when it is
    stored."""
    from bayesify.methods import get_method
    from bayesify.reference import HMCSamples
    from bayesify.seeding import seeded

    problem = load_problem(job.dataset, job.split)
    path = job.reference_path()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no HMC reference at {path}: its row has not finished, or was "
                                "imported (an export holds rows, not draws: run the reference "
                                "again in a store without its row)")  # fmt: skip
    draws = HMCSamples.load(path)
    net_options, options = METHODS[job.method]
    own = job.seed + 1000 * job.method_seed  # method seed 0: as rows before method seeds
    with seeded(own + job.split):
        ref_net = _net(problem)
        net = _net(problem, **net_options)
        method = get_method(job.method)(net, task=problem.task, **options)
    ref = draws.predictive(ref_net, problem.x_test)
    method.fit((problem.x_train, problem.y_train), val=(problem.x_val, problem.y_val),
               epochs=job.epochs, batch_size=32, lr=1e-2, seed=own + job.split,
               progress=False)  # fmt: skip
    pred = method.predict(problem.x_test, samples=job.mc_samples, seed=own)
    metrics: dict[str, Any] = {
        **_test_scores(pred, problem),
        **distances(pred, ref, problem, own),
        "draws": int(pred.samples.shape[0]),
        **_band(pred, problem),
    }
    second = replace(job, seed=FLOOR_SEED).reference_path()
    if job.scores >= 2 and (second / "config.json").is_file():
        other = HMCSamples.load(second)
        floor = subsample(other, other.outputs(ref_net, problem.x_test), len(pred.samples),
                          seed=job.seed)  # fmt: skip
        metrics |= {floor_key(k): v for k, v in distances(floor, ref, problem, job.seed).items()}
    return metrics


def score_job(job: PosteriorJob) -> dict[str, Any]:
    """The runner's job function: the reference or a method."""
    return score_reference(job) if job.method == HMC else score_method(job)
