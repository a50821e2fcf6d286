"""UCI regression under Gal's or Teye et al.'s protocol, every method, job by job into a
resumable results store -> benchmarks/uci.md with the published figures beside ours, a CSV of
every row and uncertainty–error plots.

Protocols: ``gal`` (the standard 90/10 splits, 20 per dataset and 5 for protein; MC dropout, deep
ensemble, Bayes by Backprop, IBNN, StochasticNorm and MCBN, homoscedastic and heteroscedastic;
hyper-parameters chosen by validation log-likelihood on the last 20% of each training split),
``teye`` (5 seeded 80/20 splits; MCBN with CUBN, MC dropout with CUDO; Teye's search by validation
RMSE and τ protocol) and ``gal2018`` (MC dropout exactly as Gal's 2018 code runs it,
:mod:`gal2018_protocol`; its page is ``benchmarks/uci_gal2018.md``). One store row per (method,
dataset, split, likelihood, configuration); run the same command again after an interruption and
finished rows are kept. ``--report-only`` rewrites the page from the stores (``--store`` and
``--read``) without training. ``--seed-from`` imports finished rows into the store first (the
committed export ``benchmarks/uci/store.jsonl.gz``, another store, or a page's ``rows.csv``), so a
run on a new machine resumes where the last stopped; ``--export`` rewrites that file from the store.
Presets: ``quick`` (small datasets, 3 splits, small grids) and ``paper`` (all datasets and splits,
the papers' grids and epochs).

    bayesify bench uci --protocol gal --methods ensemble --datasets all --splits 0
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from bayesify.bench.options import check_choices, command_line, option
from bayesify.bench.preamble import check_preamble, read_preamble
from bayesify.bench.search import SearchJob, SearchSettings
from bayesify.bench.uci.jobs import (
    GAL_METHODS,
    PROTOCOLS,
    SMALL,
    TEYE_METHODS,
    gal_jobs,
    teye_jobs,
)
from bayesify.data.uci import TEYE_N_SPLITS, UCI_DATASETS, uci_n_splits
from bayesify.methods.core.likelihood import Likelihood
from bayesify.options import NoiseProtocol

PRESETS = ("quick", "paper")
#: MC dropout exactly as Gal's 2018 code runs it (:mod:`gal2018_protocol`): its own rows and page
GAL2018 = "gal2018"
GAL2018_PAGE = "benchmarks/uci_gal2018.md"
#: metrics exported with fewer digits: the uncertainty–error bins are only plotted
EXPORT_DIGITS = {"ue_std": 6, "ue_rmse": 6}


@dataclass(frozen=True)
class UCIBenchOptions:
    """Options of ``bayesify bench uci``."""

    command: ClassVar[str] = "uci"
    protocol: str = option(
        "gal", "gal (Gal's 90/10 splits), teye (Teye et al.'s 80/20) or gal2018 (Gal's 2018 code)."
    )
    preset: str = option("quick", "quick (minutes) or paper (the papers' grids and epochs).")
    methods: tuple[str, ...] = option(
        ("all",),
        f"Methods: gal: {', '.join(GAL_METHODS)}; teye: {', '.join(TEYE_METHODS)} ('all').",
    )
    datasets: tuple[str, ...] = option(
        ("preset",), "Datasets ('preset': quick's five small ones or paper's nine; 'all')."
    )
    splits: int = option(-1, "First splits per dataset (0: all; -1: the preset's, quick 3).")
    likelihoods: tuple[str, ...] = option(
        ("default",), "homoscedastic, heteroscedastic ('default': both; ensembles hetero)."
    )
    epochs: int = option(0, "Training epochs of every job (0: the preset's).")
    noise_protocol: str = option(
        "teye", "teye protocol: teye (Teye's CRPS-fitted τ) or bayesify (τ per metric)."
    )
    batch_sizes: tuple[int, ...] = option((), "teye protocol: MCBN batch-size grid.")
    weight_decays: tuple[float, ...] = option((), "teye protocol: weight-decay grid (Teye's λ).")
    dropout_rates: tuple[float, ...] = option((), "teye protocol: MC dropout rate grid.")
    cv_samples: int = option(-1, "teye protocol: T of the CV RMSE checks (0: deterministic).")
    samples: int = option(0, "teye protocol: MC samples T (quick 200, paper 500).")
    test_seeds: int = option(0, "teye protocol: trainings per split (quick 1, paper 5).")
    store: str = option("benchmarks/uci/results.db", "The results store written (sqlite).")
    read: tuple[str, ...] = option((), "More stores read for the page (never written).")
    seed_from: tuple[str, ...] = option(
        (), "Finished rows imported into --store first: exports (.jsonl[.gz]), stores, rows.csv."
    )
    rerun_from: tuple[str, ...] = option(
        (), "Rows of a rerun of stored jobs, imported after --seed-from: they replace them."
    )
    export: str = option("", "JSON Lines file rewritten with --store's rows (.gz: compressed).")
    out: str = option(
        "benchmarks/uci.md",
        f"The markdown page; CSV and figures beside it (gal2018: {GAL2018_PAGE}).",
    )
    workers: int = option(0, "Parallel worker processes (0: one per CPU core).")
    sampler: str = option(
        "grid", "Hyper-parameter search: grid (the paper's full grid) or tpe (a trial budget)."
    )
    trials: int = option(0, "Trial budget of the tpe sampler (0 with grid: the whole grid).")
    prune: bool = option(False, "Stop configurations behind the median (may change the pick).")
    search_storage: str = option(
        "", "Optuna journal of the searches (resumable; '': beside the store; 'none': memory)."
    )
    trial_workers: int = option(1, "Processes per job running its search's trials.")
    cluster: str = option("", "Dask scheduler (tcp://host:8786) whose workers run the jobs.")
    report_only: bool = option(False, "Write the page from the stores; train nothing.")
    preamble: str = option("", "A markdown file put under the page's title (e.g. the runs).")

    def __post_init__(self) -> None:
        check_choices("protocol", (self.protocol,), (*PROTOCOLS, GAL2018))
        check_choices("preset", (self.preset,), PRESETS)
        check_choices("noise protocol", (self.noise_protocol,), [p.value for p in NoiseProtocol])
        SearchSettings(self.sampler, self.trials, self.prune, workers=self.trial_workers)
        if self.cluster and self.trial_workers > 1:  # Dask's worker processes are daemons
            raise ValueError("--trial-workers above 1 starts processes inside a job, which a "
                             "Dask worker cannot; on a cluster its workers run jobs side by "
                             "side: use --trial-workers 1")  # fmt: skip
        if self.methods != ("all",):
            check_choices("methods", self.methods, self.valid_methods())
        if self.datasets not in (("preset",), ("all",)):
            check_choices("datasets", self.datasets, UCI_DATASETS)
        if self.likelihoods != ("default",):
            check_choices("likelihoods", self.likelihoods, [k.value for k in Likelihood])
        if self.protocol == "teye" and self.splits > TEYE_N_SPLITS:
            raise ValueError(
                f"Teye et al.'s protocol has {TEYE_N_SPLITS} splits, got {self.splits}"
            )
        missing = [p for p in (*self.seed_from, *self.rerun_from) if not Path(p).is_file()]
        if missing:
            raise ValueError(f"no rows to import at {', '.join(missing)}")
        check_preamble(self.preamble)
        if self.batch_sizes and min(self.batch_sizes) < 2:
            raise ValueError(f"batch sizes must be >= 2, got {self.batch_sizes}")
        if min(self.samples, self.test_seeds) < 0:
            raise ValueError("samples and test seeds must be >= 0 (0: the preset's)")
        if self.splits < -1 or self.epochs < 0 or self.workers < 0:
            raise ValueError(
                f"need splits >= -1, epochs >= 0 and workers >= 0, got splits={self.splits}, "
                f"epochs={self.epochs}, workers={self.workers}"
            )

    def valid_methods(self) -> tuple[str, ...]:
        if self.protocol == GAL2018:
            return ("mc-dropout",)
        return GAL_METHODS if self.protocol == "gal" else TEYE_METHODS

    def method_list(self) -> tuple[str, ...]:
        return self.valid_methods() if self.methods == ("all",) else self.methods

    def dataset_list(self) -> tuple[str, ...]:
        if self.datasets == ("all",) or (self.datasets == ("preset",) and self.preset == "paper"):
            return UCI_DATASETS
        return SMALL if self.datasets == ("preset",) else self.datasets

    def split_count(self) -> int:
        """Splits per dataset (0: every split of the protocol)."""
        if self.splits >= 0:
            return self.splits
        return 3 if self.preset == "quick" else 0

    def search_fields(self) -> dict[str, Any]:
        """The jobs' search settings; the journal beside the store unless given."""
        storage = self.search_storage or str(Path(self.store).with_suffix(".search.journal"))
        return {"sampler": self.sampler, "trials": self.trials, "prune": self.prune,
                "search_storage": "" if storage == "none" else storage,
                "trial_workers": self.trial_workers}  # fmt: skip

    def jobs(self) -> list[tuple[str, Any]]:
        """(experiment, job) of every row this command describes, with the search settings."""
        return [
            (e, replace(j, **self.search_fields()) if isinstance(j, SearchJob) else j)
            for e, j in self._jobs()
        ]

    def _jobs(self) -> list[tuple[str, Any]]:
        methods, datasets = self.method_list(), self.dataset_list()
        if self.protocol == GAL2018:
            from bayesify.bench.uci.gal2018_protocol import gal2018_jobs

            return gal2018_jobs(datasets, self.split_count(), self.epochs)
        if self.protocol == "teye":
            return teye_jobs(
                methods, datasets, self.split_count(), self.preset, epochs=self.epochs,
                noise_protocol=self.noise_protocol, batch_sizes=self.batch_sizes,
                weight_decays=self.weight_decays, dropout_rates=self.dropout_rates,
                cv_samples=self.cv_samples, samples=self.samples, test_seeds=self.test_seeds,
            )  # fmt: skip
        liks = None if self.likelihoods == ("default",) else self.likelihoods
        return gal_jobs(methods, datasets, self.split_count(), liks, self.preset, self.epochs)


def score_function(experiment: str) -> Any:
    """The module-level function that scores a job of ``experiment``."""
    from bayesify.bench.uci import gal as gal_uci
    from bayesify.bench.uci import gal2018_protocol
    from bayesify.bench.uci import gal_methods as uci_gal_methods
    from bayesify.bench.uci import jobs as uci_jobs

    return {
        gal2018_protocol.EXPERIMENT: gal2018_protocol.score_job,
        uci_jobs.GAL_EXPERIMENT: gal_uci.score_job,
        uci_jobs.METHODS_EXPERIMENT: uci_gal_methods.score_method_job,
        uci_jobs.TEYE_EXPERIMENT: uci_jobs.score_teye_job,
    }[experiment]


def _export(opts: UCIBenchOptions) -> None:
    """Rewrite ``--export`` from the store (after each experiment, so a long run keeps it
    current)."""
    from bayesify.bench.store_io import rewrite_export

    rewrite_export(opts.store, opts.export, EXPORT_DIGITS)


def run(opts: UCIBenchOptions) -> str:
    """Run the jobs not yet in the store (unless ``report_only``), then write the page."""
    import torch

    from bayesify.bench.runner import run_jobs
    from bayesify.bench.uci.page import write_page
    from bayesify.bench.uci.recover import seed_store

    torch.set_num_threads(1)
    t0 = time.time()
    summaries: list[Any] = []
    if opts.seed_from:
        summaries.append(f"imported {seed_store(opts.store, opts.seed_from)}")
    if opts.rerun_from:
        summaries.append(f"rerun imported {seed_store(opts.store, opts.rerun_from, rerun=True)}")
    if not opts.report_only:
        for name in opts.dataset_list():
            uci_n_splits(name, "gal")  # a missing dataset folder is a one-line error, up front
        jobs = opts.jobs()
        for experiment in dict.fromkeys(e for e, _ in jobs):
            todo = [j for e, j in jobs if e == experiment]
            workers = opts.workers or os.cpu_count() or 1
            summaries.append(
                run_jobs(
                    experiment,
                    todo,
                    score_function(experiment),
                    opts.store,
                    workers=workers,
                    cluster=opts.cluster,
                )
            )
            _export(opts)
    _export(opts)
    note = "; ".join(str(s) for s in summaries) or "report only"
    ran = any(getattr(s, "finished", None) for s in summaries)
    if opts.protocol == GAL2018:
        from bayesify.bench.uci.gal2018_page import write_gal2018_page

        out = GAL2018_PAGE if opts.out == "benchmarks/uci.md" else opts.out
        preamble = read_preamble(opts.preamble, out)
        return write_gal2018_page(out, (opts.store, *opts.read), command_line(opts),
                                  f"{note}, {time.time() - t0:.0f} s wall", preamble,
                                  ran=ran)  # fmt: skip
    return write_page(
        opts.out,
        stores=(opts.store, *opts.read),
        command=command_line(opts),
        run_note=f"{note}, {time.time() - t0:.0f} s wall",
        preamble=read_preamble(opts.preamble, opts.out),
        ran=ran,
    )
