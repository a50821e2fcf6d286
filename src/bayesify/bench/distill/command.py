"""Distilled students against their teachers: Fashion-MNIST LeNet (MNIST as OOD) and UCI.

Each teacher (MC dropout; a deep ensemble) is trained here, a :class:`Distilled` student is
distilled from it on the training inputs plus augmented copies (``bayesify.distill``; by
default a copy with Gaussian noise of σ = 1 in network input units and, on images, an outlier
copy: patch and pixel shuffles, rotations, inversions, zooms), and both are
scored on the test set: error, NLL, ECE (images) or RMSE, NLL, 90 % interval coverage (UCI); the
OOD AUROC of the teacher's mutual information against the student's own (the closed form of its
Dirichlet); and Spearman's rank correlation of the teacher's and the student's epistemic score
per test input. ``--bundles`` keeps the Fashion-MNIST teacher and student bundles for
``bayesify bench serve --bundle TEACHER --student STUDENT``.

    bayesify bench distill --bundles runs/distill
"""

from __future__ import annotations

import logging
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from bayesify.bench.options import command_line, option, write_report
from bayesify.metrics.posterior import rank_correlation

log = logging.getLogger(__name__)


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
    uci: tuple[str, ...] = option(("bostonHousing", "concrete"), "UCI datasets.")
    uci_epochs: int = option(100, "Teacher and student epochs on UCI.")
    uci_members: int = option(5, "Ensemble members on UCI.")
    bundles: str = option("", "Folder to keep the Fashion-MNIST MC dropout teacher and its "
                          "student in (empty: not kept).")  # fmt: skip
    seed: int = option(0, "Seed of weights, transfer set and draws.")
    out: str = option("benchmarks/distill.md", "Markdown report.")


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


def _image_rows(label: str, teacher: Any, student: Any, data: dict, t: int) -> list[str]:
    from bayesify.metrics import error_rate, expected_calibration_error, nll
    from bayesify.metrics.ood import auroc

    xt, yt, xo = data["test"][0], data["test"][1], data["ood"]
    tp, to = teacher.predict(xt, t, seed=1), teacher.predict(xo, t, seed=2)
    ss, so = student.summaries(xt), student.summaries(xo)
    sp = student.predict(xt, t, seed=1)
    spo = student.predict(xo, t, seed=2)
    rows = []
    for who, mean, mi_in, mi_out in (
        ("teacher", tp.mean, tp.mutual_information, to.mutual_information),
        ("student (closed form)", ss["mean"].float(), ss["mutual_information"],
         so["mutual_information"]),
        (f"student (T = {t} draws)", sp.mean, sp.mutual_information, spo.mutual_information),
    ):  # fmt: skip
        rho = "–" if who == "teacher" else f"{rank_correlation(tp.mutual_information, mi_in):.3f}"
        rows.append(f"| {label} | {who} | {100 * float(error_rate(mean, yt)):.2f} | "
                    f"{float(nll(mean, yt)):.4f} | "
                    f"{float(expected_calibration_error(mean, yt)):.4f} | "
                    f"{float(auroc(mi_in, mi_out)):.4f} | {rho} |")  # fmt: skip
    return rows


def _images(opts: DistillOptions, lines: list[str]) -> None:
    import bayesify
    from bayesify.data import load_fashion_mnist, load_mnist
    from bayesify.models import lenet
    from bayesify.seeding import seeded

    train = load_fashion_mnist("train").subset(opts.limit, seed=opts.seed)
    test = load_fashion_mnist("test")
    test = test.subset(opts.n_test, seed=opts.seed) if opts.n_test else test
    data = {"test": (test.x, test.y), "ood": load_mnist("test").subset(opts.n_ood, seed=0).x}
    fit = dict(epochs=opts.epochs, batch_size=128, lr=1e-3, seed=opts.seed, progress=False)
    teachers = []
    t0 = time.perf_counter()
    with seeded(opts.seed):
        mcd = bayesify.MCDropout(lenet(norm="batch"), task="classification",
                                 dropout=opts.dropout, where="before-last-linear")  # fmt: skip
    mcd.fit((train.x, train.y), **fit)
    log.info("MC dropout teacher trained in %.0f s", time.perf_counter() - t0)
    teachers.append(("MC dropout", mcd, time.perf_counter() - t0))
    if opts.members:
        t0 = time.perf_counter()
        ens = bayesify.DeepEnsemble(lenet(norm="batch"), members=opts.members,
                                    task="classification", init_seed=opts.seed)  # fmt: skip
        ens.fit((train.x, train.y), **fit)
        log.info("ensemble teacher trained in %.0f s", time.perf_counter() - t0)
        teachers.append((f"ensemble of {opts.members}", ens, time.perf_counter() - t0))
    rows, notes = [], []
    for label, teacher, seconds in teachers:
        student = bayesify.distill(teacher, train.x, samples=opts.samples,
                                   epochs=opts.student_epochs, seed=opts.seed,
                                   augment=opts.augment, copies=opts.copies, noise=opts.noise,
                                   progress=False)  # fmt: skip
        notes.append(
            f"{label}: teacher trained in {seconds:.0f} s, student distilled in "
            f"{student.distillation['seconds']:.0f} s (teacher samples and training)"
        )
        log.info("%s: student distilled in %.0f s", label, student.distillation["seconds"])
        rows += _image_rows(label, teacher, student, data, opts.samples)
        log.info("%s: scored", label)
        if opts.bundles and teacher is mcd:
            folder = Path(opts.bundles)
            mcd.save(folder / "fmnist-mc-dropout", overwrite=True)
            student.save(folder / "fmnist-mc-dropout-student", overwrite=True)
    lines += [
        "## Fashion-MNIST LeNet, MNIST as out-of-distribution", "",
        f"{opts.limit} training images (also the transfer set, plus: {_copy(opts)}), "
        f"{len(test.x)} test images, {opts.n_ood} MNIST test images; teachers trained "
        f"{opts.epochs} epochs (Adam, lr 1e-3, batch 128), students {opts.student_epochs}; "
        f"T = {opts.samples}. AUROC: mutual information separating MNIST from Fashion-MNIST "
        "(the teacher's from its T samples; the student's own: the closed form of its "
        f"Dirichlet, and the estimate from T = {opts.samples} of its draws). Spearman: rank "
        "correlation of the student's and the teacher's mutual information per test image. "
        "One seed per row, without error bars. MNIST, this AUROC's OOD set, was used in "
        "designing the default transfer set (its transforms were chosen by how close the "
        "teacher's MI on them comes to its MI on MNIST), so the student's AUROC here is not a "
        "test on data unseen in design; none is run yet.", "",
        "| teacher | model | error (%) | NLL | ECE | OOD AUROC (MI) | Spearman MI |",
        "|---|---|---:|---:|---:|---:|---:|", *rows, "", *[f"- {n}" for n in notes], "",
    ]  # fmt: skip


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
