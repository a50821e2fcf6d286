"""The flow posterior against the exact posterior of 2-parameter models where mean-field fails.

Two regression models with two weights and a N(0, I) prior, whose exact posterior is computed on
a grid: ``banana``: y = (w1 + w2²)·x + ε, a curved ridge; ``two-modes``: y = w1·w2·x + ε, two
mirror-image modes. Each approximation q is fitted by the same ELBO code
(:func:`bayesify.nn.weight_flow.fit_elbo`, the flow posterior's): a mean-field Gaussian (what
Bayes by Backprop fits), RealNVP and a neural spline flow. Scored against the grid posterior by
the 2-Wasserstein distance between q's draws and as many exact draws (exact optimal transport
between the two samples, with the distance between two exact samples of that size as the
floor) and by KL(q ‖ p) (the ELBO's gap: E_q[log q − log p̃] + log Z, Z from the grid).

Each seed draws its own data, fits and draws; each (seed, problem, q) fit and each (seed,
dataset, q) last-layer fit is one job of a resumable results store (:mod:`bayesify.bench.runner`),
exported to JSON Lines after each seed, and the page (mean ± standard error over the seeds) is
written from the stored rows (:mod:`bayesify.bench.posterior.flow_banana_page`).

    bayesify bench flow-banana --seeds 0,1,2
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from bayesify.bench.options import check_choices, option
from bayesify.bench.posterior.flow_banana_fits import KINDS, PROBLEMS, BananaJob, score_banana_job
from bayesify.bench.posterior.flow_last_layer import LastLayerJob

EXPERIMENT, LAST_LAYER = "flow-banana", "flow-last-layer"


@dataclass(frozen=True)
class FlowBananaOptions:
    """Options of ``bayesify bench flow-banana``."""

    command: ClassVar[str] = "flow-banana"
    out: str = option("benchmarks/flow_posterior", "Folder for the figure (flow_posterior.png).")
    page: str = option("benchmarks/flow_posterior.md", "The markdown page written.")
    store: str = option("benchmarks/flow_posterior/results.db", "The results store (sqlite file).")
    export: str = option(
        "benchmarks/flow_posterior/results.jsonl",
        "Finished rows as JSON Lines, rewritten after each seed and imported first ('' none).",
    )
    problems: tuple[str, ...] = option(("banana", "two-modes"), "Problems, comma-separated.")
    kinds: tuple[str, ...] = option(KINDS, "Posteriors q, comma-separated.")
    rows: int = option(20, "Data points of each problem.")
    noise: float = option(0.5, "Noise standard deviation of the data.")
    steps: int = option(3000, "ELBO steps per fit.")
    samples: int = option(64, "Draws per ELBO step.")
    lr: float = option(1e-2, "Adam learning rate of the ELBO.")
    draws: int = option(2000, "Draws of q and of the exact posterior for the distances.")
    grid: int = option(400, "Grid points per axis for the exact posterior.")
    seeds: tuple[int, ...] = option((0, 1, 2), "Seeds (each: the data, the fits, the draws).")
    seed: int = option(-1, "One seed instead of --seeds (-1: use --seeds).")
    uci: tuple[str, ...] = option(("yacht",), "UCI datasets for the last-layer table ('' none).")
    uci_steps: int = option(2000, "ELBO steps of FlowPosterior on a UCI last layer.")

    def __post_init__(self) -> None:
        check_choices("problems", self.problems, PROBLEMS)
        check_choices("posteriors q", self.kinds, KINDS)
        if not self.seed_list() or min(self.seed_list()) < 0:
            raise ValueError("seeds must be given and >= 0")

    def seed_list(self) -> tuple[int, ...]:
        """The seeds run: ``--seed`` alone when given, else ``--seeds`` (duplicates dropped)."""
        return (self.seed,) if self.seed >= 0 else tuple(dict.fromkeys(self.seeds))

    def banana_jobs(self, seed: int) -> list[BananaJob]:
        return [BananaJob(kind, name, 0, seed, rows=self.rows, noise=self.noise,
                          steps=self.steps, samples=self.samples, lr=self.lr, draws=self.draws,
                          grid=self.grid)
                for name in self.problems for kind in self.kinds]  # fmt: skip

    def last_layer_jobs(self, seed: int) -> list[LastLayerJob]:
        return [LastLayerJob(kind, name, 0, seed, uci_steps=self.uci_steps)
                for name in self.uci if name for kind in self.kinds]  # fmt: skip


def _export(opts: FlowBananaOptions) -> None:
    from bayesify.bench.store_io import rewrite_export

    rewrite_export(opts.store, opts.export, digits={"draws": 4})


def run(opts: FlowBananaOptions) -> str:
    """Import ``--export``'s rows, run the jobs not yet in the store seed by seed (exporting
    after each), then write the page from the stored rows."""
    from bayesify.bench.posterior.flow_banana_page import write_page
    from bayesify.bench.posterior.flow_last_layer import score_last_layer_job
    from bayesify.bench.runner import run_jobs, stored_rows
    from bayesify.bench.store_io import import_export

    torch.set_num_threads(1)
    import_export(opts.store, opts.export)
    banana, last, ran = [], [], False
    for seed in opts.seed_list():
        banana += opts.banana_jobs(seed)
        last += opts.last_layer_jobs(seed)
        done = run_jobs(EXPERIMENT, opts.banana_jobs(seed), score_banana_job, opts.store,
                        progress=False)  # fmt: skip
        ran |= bool(done.finished)
        if opts.last_layer_jobs(seed):
            done = run_jobs(LAST_LAYER, opts.last_layer_jobs(seed), score_last_layer_job,
                            opts.store, progress=False)  # fmt: skip
            ran |= bool(done.finished)
        _export(opts)
    rows = stored_rows(opts.store, EXPERIMENT, banana)
    last_rows = stored_rows(opts.store, LAST_LAYER, last) if last else []
    return write_page(opts, rows, last_rows, __doc__.split("\n\n")[1], ran)
