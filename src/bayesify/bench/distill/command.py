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
per input. On images one job per teacher and seed (``--seeds``) runs into a resumable results
store (``--store``; ``jobs.py``) and the page shows mean ± standard error over seeds
(``page.py``). ``--bundles`` keeps the first seed's Fashion-MNIST MC dropout teacher and student
bundles for ``bayesify bench serve --bundle TEACHER --student STUDENT``.

    bayesify bench distill --seeds 3 --bundles runs/distill
"""

from __future__ import annotations

import logging
import os
import platform
import time
from dataclasses import dataclass
from typing import ClassVar

import torch

from bayesify.bench.distill.jobs import DistillJob, score_job
from bayesify.bench.distill.page import images_section
from bayesify.bench.options import command_line, option, write_report
from bayesify.bench.runner import run_jobs, stored_rows
from bayesify.metrics.posterior import rank_correlation

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
    uci: tuple[str, ...] = option(("bostonHousing", "concrete"), "UCI datasets.")
    uci_epochs: int = option(100, "Teacher and student epochs on UCI.")
    uci_members: int = option(5, "Ensemble members on UCI.")
    bundles: str = option("", "Folder to keep the Fashion-MNIST MC dropout teacher and its "
                          "student in (empty: not kept).")  # fmt: skip
    seed: int = option(0, "First seed of training images, weights, transfer set and draws.")
    seeds: int = option(1, "Seeds per teacher on images (seed, seed + 1, ...).")
    store: str = option("benchmarks/distill/results.db", "The results store of the image "
                        "jobs (sqlite file): a run resumes from its done rows.")  # fmt: skip
    workers: int = option(1, "Parallel worker processes for the image jobs.")
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


def _images(opts: DistillOptions, lines: list[str]) -> None:
    jobs = image_jobs(opts)
    summary = run_jobs(EXPERIMENT, jobs, score_job, opts.store, workers=opts.workers,
                       progress=False)  # fmt: skip
    lines += images_section(stored_rows(opts.store, EXPERIMENT, jobs), opts, _copy(opts))
    lines += [f"Jobs: {summary} (store `{opts.store}`).", ""]


def _uci_rows(name: str, opts: DistillOptions) -> tuple[list[str], list[str]]:
    import bayesify
    from bayesify.data import load_uci
    from bayesify.models import mlp
    from bayesify.seeding import seeded

    s = load_uci(name, 0, protocol="gal")
    d = s.x_train.shape[1]
    fit = dict(epochs=opts.uci_epochs, batch_size=32, lr=1e-3, seed=opts.seed, progress=False)
    with seeded(opts.seed):
        mcd = bayesify.MCDropout(mlp(d, 1, (50,), norm=None, dropout=0.05))
        ens = bayesify.DeepEnsemble(mlp(d, 1, (50,), norm=None), members=opts.uci_members,
                                    init_seed=opts.seed)  # fmt: skip
    rows, notes = [], []
    for label, teacher in (("MC dropout", mcd), (f"ensemble of {opts.uci_members}", ens)):
        teacher.fit((s.x_train, s.y_train), val=(s.x_val, s.y_val), **fit)
        student = bayesify.distill(teacher, s.x_train, samples=opts.samples,
                                   epochs=opts.uci_epochs, batch_size=32, seed=opts.seed,
                                   augment=opts.augment, copies=opts.copies, noise=opts.noise,
                                   progress=False)  # fmt: skip
        tp = teacher.predict(s.x_test, opts.samples, seed=1)
        sp = student.predict(s.x_test, opts.samples, seed=1)
        for who, p in (("teacher", tp), ("student", sp)):
            lo, hi = p.interval(0.9)
            cover = ((s.y_test >= lo) & (s.y_test <= hi)).double().mean()
            rmse = (p.mean - s.y_test).pow(2).mean().sqrt()
            rho = "–" if who == "teacher" else (
                f"{rank_correlation(tp.epistemic_variance, p.epistemic_variance):.3f}")  # fmt: skip
            rows.append(f"| {name} | {label} | {who} | {float(rmse):.4f} | "
                        f"{float(-p.log_prob(s.y_test).mean()):.4f} | {100 * float(cover):.1f} | "
                        f"{rho} |")  # fmt: skip
        log.info("%s, %s: distilled and scored", name, label)
        notes.append(
            f"{name}, {label}: student distilled in {student.distillation['seconds']:.0f} s"
        )
    return rows, notes


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
    _images(opts, lines)
    rows, notes = [], []
    for name in opts.uci:
        r, n = _uci_rows(name, opts)
        rows, notes = rows + r, notes + n
    if rows:
        lines += [
            "## UCI regression (split 0 of Gal's splits, normalised units)", "",
            f"MLP with one hidden layer of 50; teachers and students {opts.uci_epochs} epochs; "
            f"T = {opts.samples}; the transfer set is the training rows plus: "
            f"{_copy(opts)}. "
            "Spearman: rank correlation of the student's and the teacher's epistemic variance "
            "per test row.", "",
            "| dataset | teacher | model | RMSE | NLL | 90 % interval coverage (%) | "
            "Spearman epistemic |", "|---|---|---|---:|---:|---:|---:|", *rows, "",
            *[f"- {n}" for n in notes], "",
        ]  # fmt: skip
    lines.append(f"Run took {time.time() - began:.0f} s.")
    return write_report(opts.out, "\n".join(lines))
