"""Distilled students against their teachers: Fashion-MNIST LeNet (MNIST and scikit-learn's
digits as OOD), over seeds, and UCI.

Each teacher (MC dropout; a deep ensemble) is trained here, a :class:`Distilled` student is
distilled from it on the training inputs plus augmented copies (``bayesify.distill``; by
default a copy with Gaussian noise of σ = 1 in network input units and, on images, an outlier
copy: patch and pixel shuffles, rotations, inversions, zooms), and both are
scored on the test set: error, NLL, ECE (images) or RMSE, NLL, 90 % interval coverage (UCI); the
OOD AUROC of the teacher's mutual information against the student's own (the closed form of its
Dirichlet) on MNIST, which was used in designing the transfer set, and on the digits, which
were not; and Spearman's rank correlation of the teacher's and the student's epistemic score
per input. On images one job per teacher and seed (``--seeds``), on UCI one per dataset,
teacher and run (run i on Gal's split i with seed + i; ``uci.py``), run into one resumable
results store (``--store``; ``jobs.py``) and the page shows mean ± standard error over seeds or
runs (``page.py``). ``--bundles`` keeps the first seed's Fashion-MNIST MC dropout teacher and
student bundles for ``bayesify bench serve --bundle TEACHER --student STUDENT``.

    bayesify bench distill --seeds 3 --bundles runs/distill
"""

from __future__ import annotations

import logging
import os
import platform
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from bayesify.bench.distill.jobs import DistillJob, score_job
from bayesify.bench.distill.page import images_section
from bayesify.bench.distill.uci import EXPERIMENT as UCI_EXPERIMENT
from bayesify.bench.distill.uci import score_uci_job, uci_jobs, uci_section
from bayesify.bench.options import command_line, option, write_report
from bayesify.bench.runner import run_jobs, stored_rows

log = logging.getLogger(__name__)
EXPERIMENT = "distill-images"


@dataclass(frozen=True)
class DistillOptions:
    """Options of ``bayesify bench distill``."""

    command: ClassVar[str] = "distill"
    limit: int = option(10000, "Fashion-MNIST training images (teachers and transfer set).")
    epochs: int = option(3, "Teacher epochs (Fashion-MNIST).")
    dropout: float = option(0.5, "MC dropout rate before the LeNet's last linear layer.")
    members: int = option(3, "Ensemble members (Fashion-MNIST); 0: no ensemble teacher.")
    student_epochs: int = option(5, "Student epochs (Fashion-MNIST).")
    samples: int = option(30, "Teacher samples T, for distillation and for scoring.")
    augment: str = option("outliers", "Transfer copies of the inputs: outliers, noise, mixup "
                          "or none.")  # fmt: skip
    copies: int = option(2, "Transfer copies (outliers: the noise copy, then outlier copies).")
    noise: float = option(1.0, "The noise copy's standard deviation (network units).")
    n_test: int = option(10000, "Fashion-MNIST test images (0: all).")
    n_ood: int = option(2000, "MNIST test images (OOD).")
    n_digits: int = option(0, "scikit-learn digits (OOD, unused in designing the transfer "
                           "set; 0: all 1,797).")  # fmt: skip
    images: bool = option(True, "Run the Fashion-MNIST jobs (--no-images: UCI alone).")
    uci: tuple[str, ...] = option(("bostonHousing", "concrete"), "UCI datasets.")
    uci_epochs: int = option(100, "Teacher and student epochs on UCI.")
    uci_members: int = option(5, "Ensemble members on UCI.")
    bundles: str = option("", "Folder to keep the Fashion-MNIST MC dropout teacher and its "
                          "student in (empty: not kept).")  # fmt: skip
    seed: int = option(0, "First seed of training images, weights, transfer set and draws.")
    seeds: int = option(1, "Seeds per teacher (images: seed, seed + 1, ...; UCI: run i on "
                        "Gal's split i with seed + i).")  # fmt: skip
    store: str = option("benchmarks/distill/results.db", "The results store of the image and "
                        "UCI jobs (sqlite file): a run resumes from its done rows.")  # fmt: skip
    workers: int = option(1, "Parallel worker processes for the jobs.")
    out: str = option("benchmarks/distill.md", "Markdown report.")

    def __post_init__(self) -> None:
        if min(self.seeds, self.workers, self.limit, self.samples) < 1:
            raise ValueError("seeds, workers, limit and samples must be >= 1")
        if min(self.members, self.n_digits, self.n_test) < 0:
            raise ValueError("members, n-digits and n-test must be >= 0")


def _copy(opts: DistillOptions) -> str:
    """The transfer copy in words."""
    noise = f"Gaussian noise, σ = {opts.noise:g} in network input units"
    if opts.augment == "noise":
        return f"{opts.copies} × {noise}"
    if opts.augment == "outliers":
        return (
            f"{noise}, then {opts.copies - 1} outlier cop(ies) on images (patch and pixel "
            "shuffles, rotations, inversions, zooms, noise; tables: the noise copy alone)"
        )
    return f"{opts.copies} × {opts.augment}"


def image_jobs(opts: DistillOptions) -> list[DistillJob]:
    """One job per teacher kind and seed (``seed``, ``seed + 1``, ...); the first seed's MC
    dropout job keeps its bundles when ``--bundles`` is given."""
    kinds = ["mc-dropout"] + (["ensemble"] if opts.members else [])
    return [DistillJob(method=kind, dataset="fashion-mnist", split=0, seed=opts.seed + i,
                       limit=opts.limit, epochs=opts.epochs, dropout=opts.dropout,
                       members=opts.members if kind == "ensemble" else 0,
                       student_epochs=opts.student_epochs, samples=opts.samples,
                       augment=opts.augment, copies=opts.copies, noise=opts.noise,
                       n_test=opts.n_test, n_ood=opts.n_ood, n_digits=opts.n_digits,
                       bundles=opts.bundles if i == 0 else "")
            for i in range(opts.seeds) for kind in kinds]  # fmt: skip


def _section(experiment: str, jobs: list[Any], score: Any, section: Any, opts: DistillOptions,
             lines: list[str]) -> None:  # fmt: skip
    """Run ``jobs`` not yet in the store, then append ``section``'s lines from their rows."""
    summary = run_jobs(experiment, jobs, score, opts.store, workers=opts.workers, progress=False)
    lines += section(stored_rows(opts.store, experiment, jobs), opts, _copy(opts))
    lines += [f"Jobs: {summary} (store `{opts.store}`).", ""]


def run(opts: DistillOptions) -> str:
    """Train the teachers, distil them, score both; write the report and return it."""
    began = time.time()
    load_avg = os.getloadavg()
    torch.manual_seed(opts.seed)
    lines = [
        "# Distilled students against their teachers", "",
        f"Command: `{command_line(opts)}`  ",
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs, torch {torch.__version__}; "
        f"load average at start {load_avg[0]:.1f}.  ", "",
    ]  # fmt: skip
    if opts.images:
        _section(EXPERIMENT, image_jobs(opts), score_job, images_section, opts, lines)
    if opts.uci:
        _section(UCI_EXPERIMENT, uci_jobs(opts), score_uci_job, uci_section, opts, lines)
    lines.append(f"Run took {time.time() - began:.0f} s.")
    return write_report(opts.out, "\n".join(lines))
