"""Fashion-MNIST with MNIST and scikit-learn digits as out-of-distribution sets: accuracy,
calibration, OOD detection, predict time, corruption sweeps, error–coverage curves and MCBN's
batch-size sweep per method,
run job by job (one per method, model and seed) into a resumable results store.

The training images are split into training and validation parts (the validation part stops
training early and fits the temperature). Each job trains its method (or loads the network from
the checkpoint folder), predicts the Fashion-MNIST test set, MNIST test images and
scikit-learn's digits (the two OOD sets) and corrupted test images with T samples, times its
predict beside the deterministic network's, and writes one row. MCBN is the deterministic
batch-norm network sampled with mini-batch statistics (Teye et al.), so the two share one
trained network; the deep ensemble's first member is that network too (member m is trained with
seed s + 1000·m). BatchEnsemble and Packed-Ensembles have as many members as the ensemble.

    bayesify bench images --preset quick
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, replace
from typing import ClassVar

import torch

from bayesify.bench.images.jobs import (
    DATASET,
    EXPERIMENT,
    METHODS,
    MODELS,
    PRESETS,
    UNSUPPORTED,
    ImagesJob,
    Preset,
    score_job,
)
from bayesify.bench.options import check_choices, option
from bayesify.bench.preamble import check_preamble
from bayesify.bench.runner import run_jobs


# ---------------------------------------------------------------------------------- options
@dataclass(frozen=True)
class ImagesOptions:
    """Options of ``bayesify bench images``; 0 or an empty list means the preset's value."""

    command: ClassVar[str] = "images"
    preset: str = option("quick", "quick (LeNet, 4 methods, minutes) or paper (LeNet + ResNet, "
                         "every method, to convergence).")  # fmt: skip
    store: str = option("benchmarks/images/results.db", "The results store (sqlite file).")
    out: str = option("benchmarks/images.md", "Markdown report; figures go to its folder's "
                      "sub-folder named after it (benchmarks/images/).")  # fmt: skip
    checkpoints: str = option("benchmarks/images/nets", "Trained networks shared between jobs "
                              "(empty: train every job's own).")  # fmt: skip
    models: tuple[str, ...] = option((), f"Models, from {', '.join(MODELS)}.")
    methods: tuple[str, ...] = option((), f"Methods, from {', '.join(METHODS)}.")
    seeds: int = option(0, "Seeds per method and model.")
    epochs: int = option(0, "Maximum training epochs (early stopping on validation loss).")
    patience: int = option(0, "Epochs without a better validation loss before training stops.")
    members: int = option(0, "Networks in the deep ensemble.")
    samples: int = option(0, "MC samples T.")
    n_val: int = option(5000, "Validation images split off the training images.")
    n_train: int = option(0, "Training images (0: all the others).")
    n_test: int = option(0, "Fashion-MNIST test images (0: all 10,000).")
    n_ood: int = option(0, "MNIST test images, and scikit-learn digits, as OOD sets (0: the "
                        "preset's).")  # fmt: skip
    n_corrupt: int = option(0, "Test images corrupted at every level (0: the preset's).")
    workers: int = option(1, "Parallel worker processes.")
    cluster: str = option("", "Dask scheduler (tcp://host:8786) whose workers run the jobs.")
    export: str = option("", "Finished rows as JSON Lines (.gz: compressed), imported into "
                         "--store first and rewritten after the run ('' none).")  # fmt: skip
    preamble: str = option("", "A markdown file put under the page's title (e.g. the runs).")

    def __post_init__(self) -> None:
        check_choices("preset", (self.preset,), PRESETS)
        if self.models:
            check_choices("models", self.models, MODELS)
        if self.methods:
            check_choices("methods", self.methods, METHODS)
        if self.n_val < 1:
            raise ValueError(f"--n-val must be >= 1, got {self.n_val}")
        for name in ("seeds", "epochs", "patience", "members", "samples", "n_train", "n_test",
                     "n_ood", "n_corrupt"):  # fmt: skip
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0, got "
                                 f"{getattr(self, name)}")  # fmt: skip
        if self.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {self.workers}")
        check_preamble(self.preamble)

    def settings(self) -> Preset:
        """The preset with this command's overrides; deterministic is always run (the baseline
        of every table)."""
        pre = PRESETS[self.preset]
        methods = self.methods or pre.methods
        if "deterministic" not in methods:
            methods = ("deterministic", *methods)
        return replace(pre, models=self.models or pre.models, methods=methods,
                       seeds=self.seeds or pre.seeds, epochs=self.epochs or pre.epochs,
                       patience=self.patience or pre.patience,
                       members=self.members or pre.members,
                       samples=self.samples or pre.samples, n_ood=self.n_ood or pre.n_ood,
                       n_corrupt=self.n_corrupt or pre.n_corrupt)  # fmt: skip

    def jobs(self) -> list[ImagesJob]:
        """One job per model, seed and method (the pairs in UNSUPPORTED left out)."""
        p = self.settings()
        common = {"epochs": p.epochs, "patience": p.patience, "samples": p.samples,
                  "n_calib": p.n_calib, "n_ood": p.n_ood, "n_corrupt": p.n_corrupt,
                  "gammas": p.gammas, "ps": p.ps, "bank_batches": p.bank_batches,
                  "members": p.members, "bank_size": p.bank_size, "n_val": self.n_val,
                  "n_train": self.n_train, "n_test": self.n_test}  # fmt: skip
        return [ImagesJob(method, DATASET, 0, seed, model=model, **common)
                for model in p.models for seed in range(p.seeds)
                for method in p.methods if (model, method) not in UNSUPPORTED]  # fmt: skip


def run(opts: ImagesOptions) -> str:
    """Import ``--export``'s rows, run the jobs not yet in the store, rewrite the export, then
    write the report from the store."""
    from bayesify.bench.images.report import write_images_report
    from bayesify.bench.store_io import import_export, rewrite_export

    torch.set_num_threads(1)
    t0 = time.time()
    jobs = opts.jobs()
    import_export(opts.store, opts.export)
    fn = functools.partial(score_job, cache=opts.checkpoints or None)
    summary = run_jobs(EXPERIMENT, jobs, fn, opts.store, workers=opts.workers, cluster=opts.cluster)
    rewrite_export(opts.store, opts.export)  # about 1 KB per row: no rounding
    return write_images_report(opts, jobs, summary, time.time() - t0)
