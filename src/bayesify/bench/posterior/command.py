"""How close each method's predictive is to the true posterior's: an HMC reference (full-batch
NUTS, 4 chains) on small problems, every method fitted on the same data and scored against it,
run job by job into a resumable results store -> benchmarks/posterior.md and a figure of the
1-D toy.

Problems: a 1-D regression toy with a gap between two clusters of inputs, a 2-class 2-D toy
(XOR of four blobs), three Fashion-MNIST classes on five principal components with MNIST digits
as out-of-distribution test inputs (``fashion-pca``) and UCI datasets on Gal's splits, all with
Gal's one-hidden-layer MLP of 50 ReLU units. The reference: prior N(0, 1/5) on every weight and
bias (Izmailov et al. 2021), homoscedastic noise σ fixed at the MAP network's RMSE on the
validation rows (UCI; sampled, σ collapses towards 0 there: the net nearly interpolates them,
and NUTS cannot mix) or sampled with log σ ~ N(0, 1) (toy-1d, whose 40 rows leave σ well
determined and the chains mixing).
Scores on test inputs, first on f(x), the network's output before noise: the per-input 1-D
2-Wasserstein distance between the method's draws of f(x) and HMC's and the ratio of their stds
(the epistemic std ratio); then on the whole predictive: the 2-Wasserstein distance
(regression), agreement of the most probable class and total variation of class probabilities
(classification), the predictive std ratio, test log-likelihood beside HMC's own. Each score has
a floor: the same score between a second HMC reference (another chain seed, the same posterior)
and the first. A reference whose largest split R-hat over test inputs exceeds 1.05 is marked as
not a reference; the page also marks those failing R-hat ≤ 1.01 or bulk ESS ≥ 400.

    bayesify bench posterior --preset quick --store benchmarks/posterior/results.db
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

from bayesify.bench.options import check_choices, option

log = logging.getLogger(__name__)

EXPERIMENT = "posterior"
UCI = ("yacht", "bostonHousing", "energy", "concrete", "wine-quality-red")


@dataclass(frozen=True)
class Preset:
    """Problems and sampler / training settings of a preset (``--preset``)."""

    datasets: tuple[str, ...]
    splits: int  # per UCI dataset and data draws of fashion-pca (toys: one data draw)
    chains: int
    warmup: int
    samples: int
    thin: int
    max_tree_depth: int
    # datasets whose NUTS trajectories need more room: (dataset, depth) pairs overriding
    # max_tree_depth (energy mixes in 150 draws at depth 11, not in 300 at depth 10; its
    # split 2 passes only at depth 12, split 1 not even there; concrete's split 2 at 11)
    deeper: tuple[tuple[str, int], ...]
    # (dataset, kept draws per chain) overriding samples: energy's split 1 mixes slowly even
    # at depth 12 (R-hat 1.069 from 150 draws, 1.029 from 450)
    longer: tuple[tuple[str, int], ...]
    dense_mass: bool  # dense (else diagonal) mass matrix adapted in warm-up
    init_steps: int  # Adam steps on the log posterior from each chain's prior draw
    epochs: int  # toys and fashion-pca; UCI: a fifth of it
    mc_samples: int
    method_seeds: int  # each method's runs per problem and split, against the one reference
    # the prior std of one more reference per toy and fashion-pca split (0: none), scored
    # against the page's reference (prior variance 1/5): how much the prior moves the posterior
    prior_check: float
    # σ of one more reference per UCI split and factor, each a factor on the page's (the
    # validation RMSE; none: no check): how much the σ fixed moves the posterior
    noise_check: tuple[float, ...]


# fmt: off
PRESETS = {
    # toys and one Gal split of each UCI set: timed in one call on 2 free cores
    # (benchmarks/posterior.md)
    "quick": Preset(("toy-1d", "toy-2d", "fashion-pca", *UCI), splits=1, chains=4, warmup=300,
                    samples=150,
                    thin=1, max_tree_depth=10, deeper=(("energy", 12), ("yacht", 11),
                                                         ("concrete", 11)),
                    longer=(("energy", 450),),
                    dense_mass=False, init_steps=1000, epochs=200,
                    mc_samples=100, method_seeds=3, prior_check=1.0, noise_check=(0.5, 2.0)),
    # three splits, longer chains: a real machine
    "full": Preset(("toy-1d", "toy-2d", "fashion-pca", *UCI), splits=3, chains=4, warmup=1000,
                   samples=500,
                   thin=2, max_tree_depth=10, deeper=(("energy", 12), ("yacht", 11),
                                                         ("concrete", 11)),
                   longer=(),
                   dense_mass=False, init_steps=2000, epochs=200,
                   mc_samples=100, method_seeds=3, prior_check=1.0, noise_check=(0.5, 2.0)),
    # a smoke test of the machinery (seconds, not a reference)
    "tiny": Preset(("toy-1d", "toy-2d"), splits=1, chains=2, warmup=10, samples=10, thin=1,
                   max_tree_depth=2, deeper=(), longer=(), dense_mass=False, init_steps=10,
                   epochs=5, mc_samples=10, method_seeds=1, prior_check=0.0,
                   noise_check=()),
}
# fmt: on


@dataclass(frozen=True)
class PosteriorOptions:
    """Options of ``bayesify bench posterior``."""

    command: ClassVar[str] = "posterior"
    preset: str = option(
        "quick",
        "quick (toys, fashion-pca, one split of five UCI sets), full (three splits, longer "
        "chains) or tiny (a smoke test).",
    )
    datasets: tuple[str, ...] = option((), "Problems instead of the preset's, comma-separated.")
    splits: int = option(0, "UCI splits (and fashion-pca draws) per dataset (0: the preset's).")
    seeds: int = option(
        0,
        "Runs of each method per problem and split, seeds 0..N-1, against the "
        "one reference (0: the preset's).",
    )
    prior_check: float = option(
        -1.0,
        "Prior std of one more reference per toy and fashion-pca split, compared with the "
        "page's (prior variance 1/5); 0: none, -1: the preset's.",
    )
    noise_check: tuple[float, ...] = option(
        (),
        "σ of one more reference per UCI split and factor, each a factor on the page's (the "
        "validation RMSE), compared with the page's; 0: none; empty: the preset's.",
    )
    check_splits: int = option(
        0, "The prior and noise checks on the first N splits only (0: every split)."
    )
    methods: tuple[str, ...] = option((), "Methods (default: all of posterior_jobs.METHODS).")
    store: str = option("benchmarks/posterior/results.db", "The results store (sqlite file).")
    references: str = option("benchmarks/posterior/references", "Folder of the HMC draws.")
    page: str = option(
        "benchmarks/posterior.md", "The page (its figure goes in a folder beside it)."
    )
    workers: int = option(1, "Parallel worker processes.")
    cluster: str = option("", "Dask scheduler (tcp://host:8786) whose workers run the jobs.")
    export: str = option("", "Finished rows as JSON Lines (.gz: compressed), imported into "
                         "--store first and rewritten after each stage ('' none; the HMC "
                         "draws stay in --references).")  # fmt: skip

    def __post_init__(self) -> None:
        from bayesify.bench.posterior.jobs import METHODS
        from bayesify.bench.posterior.problems import IMAGES, TOYS

        check_choices("preset", (self.preset,), PRESETS)
        if self.datasets:
            check_choices("datasets", self.datasets, (*TOYS, *IMAGES, *UCI))
        if self.methods:
            check_choices("methods", self.methods, METHODS)
        if self.splits < 0 or self.seeds < 0 or self.check_splits < 0 or self.workers < 1:
            raise ValueError("splits, seeds and check_splits must be >= 0 and workers >= 1")
        if self.prior_check < 0 and self.prior_check != -1:
            raise ValueError(f"prior_check is a prior std, 0 or -1, got {self.prior_check}")
        if any(f < 0 or f == 1 for f in self.noise_check):
            raise ValueError(f"noise_check are factors on σ, > 0 and not 1, or 0 (none); got "
                             f"{self.noise_check}")  # fmt: skip

    def settings(self) -> Preset:
        p = PRESETS[self.preset]
        return replace(
            p,
            datasets=self.datasets or p.datasets,
            splits=self.splits or p.splits,
            method_seeds=self.seeds or p.method_seeds,
            prior_check=p.prior_check if self.prior_check < 0 else self.prior_check,
            noise_check=tuple(f for f in self.noise_check or p.noise_check if f > 0),
        )

    def jobs(self) -> tuple[list, list]:
        """(HMC jobs, method jobs)."""
        from bayesify.bench.posterior.jobs import FLOOR_SEED, HMC, METHODS, SCORES, PosteriorJob

        p = self.settings()
        checked = self.check_splits or p.splits
        hmc, methods = [], []
        for d in p.datasets:
            toy = d.startswith("toy")
            for split in range(1 if toy else p.splits):
                common = dict(references=self.references, chains=p.chains, warmup=p.warmup,
                              samples=dict(p.longer).get(d, p.samples), thin=p.thin,
                              max_tree_depth=dict(p.deeper).get(d, p.max_tree_depth),
                              dense_mass=p.dense_mass, init_steps=p.init_steps,
                              fixed_noise=d != "toy-1d")  # fmt: skip
                short = d in UCI  # Gal trains 40 epochs on a few hundred rows
                fit = dict(epochs=p.epochs // 5 if short else p.epochs, mc_samples=p.mc_samples)
                # the reference, and the floor's second one: another chain seed, the same σ
                hmc += [PosteriorJob(HMC, d, split, seed, epochs=0, mc_samples=0, **common)
                        for seed in (0, FLOOR_SEED)]  # fmt: skip
                check = split < checked
                if check and p.prior_check > 0 and d not in UCI:  # cheap problems: one more prior
                    hmc.append(PosteriorJob(HMC, d, split, 0, epochs=0, mc_samples=0,
                                            prior_std=p.prior_check, **common))  # fmt: skip
                hmc += [
                    PosteriorJob(HMC, d, split, 0, epochs=0, mc_samples=0, noise_scale=f, **common)
                    for f in (p.noise_check if check and d in UCI else ())
                ]  # σ fixed elsewhere
                methods += [PosteriorJob(m, d, split, **common, **fit, scores=SCORES,
                                         method_seed=s)
                            for s in range(p.method_seeds)
                            for m in self.methods or METHODS]  # fmt: skip
        return hmc, methods


def _expected_cost(job: object) -> int:
    """A reference's cost in proportion: training rows × draws × the longest trajectory."""
    from bayesify.bench.posterior.problems import load_problem

    problem = load_problem(job.dataset, job.split)  # type: ignore[attr-defined]
    draws = job.warmup + job.samples  # type: ignore[attr-defined]
    return len(problem.y_train) * draws * 2**job.max_tree_depth  # type: ignore[attr-defined]


def run(opts: PosteriorOptions) -> str:
    """Run the references, then the methods, not yet in the store; write the page from it."""
    import torch

    from bayesify.bench.posterior.jobs import score_job
    from bayesify.bench.posterior.report import report
    from bayesify.bench.runner import run_jobs
    from bayesify.bench.store_io import import_export, rewrite_export
    from bayesify.reference.hmc import require_extra

    require_extra()  # one line naming the extra before any job starts (jax loads when needed)
    torch.set_num_threads(1)
    t0 = time.time()
    hmc, methods = opts.jobs()
    import_export(opts.store, opts.export)
    # the longest references first, so that neither worker idles while the last one runs
    longest = sorted(hmc, key=_expected_cost, reverse=True)
    first = run_jobs(
        EXPERIMENT, longest, score_job, opts.store, workers=opts.workers, cluster=opts.cluster
    )
    rewrite_export(opts.store, opts.export)
    second = run_jobs(
        EXPERIMENT, methods, score_job, opts.store, workers=opts.workers, cluster=opts.cluster
    )
    rewrite_export(opts.store, opts.export)
    wall = time.time() - t0
    return report(opts, hmc + methods, f"references: {first}; methods: {second}", wall,
                  Path(opts.page), ran=bool(first.finished or second.finished))  # fmt: skip
