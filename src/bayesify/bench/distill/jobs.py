"""One job of ``bayesify bench distill`` on images: a teacher (MC dropout or a deep ensemble of
LeNets) trained on Fashion-MNIST with one seed, its student distilled with the same seed, both
scored on Fashion-MNIST test images and on two OOD sets, MNIST and scikit-learn's digits.

The seed draws the training images (which are also the transfer set's inputs), the teacher's
weights and batches, the transfer set's copies and the student's training; the test, MNIST and
digits images are the same for every seed (drawn with seed 0), so the seeds differ in the
models alone. The row key is (method, seed) and the configuration, so a killed run resumes.

MNIST was used in designing the default transfer set (its transforms were chosen by how close
the teacher's MI on them comes to its MI on MNIST); the digits were not.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bayesify.bench.jobs import key_field
from bayesify.metrics.posterior import rank_correlation

METHODS = ("mc-dropout", "ensemble")
#: the OOD sets, in page order: (key in the metrics, name on the page)
OOD_SETS = (("mnist", "MNIST"), ("digits", "digits"))
#: the models scored per job, in page order
MODELS = ("teacher", "student", "student_draws")


@dataclass(frozen=True)
class DistillJob:
    """One row of the store: a teacher of one kind and its student, from one seed."""

    method: str  # mc-dropout or ensemble
    dataset: str  # fashion-mnist
    split: int  # unused (0): the test and OOD images are the same for every seed
    seed: int  # training images, weights, transfer set, draws
    limit: int = 10000
    epochs: int = 3
    dropout: float = 0.5
    members: int = 3
    student_epochs: int = 5
    samples: int = 30
    augment: str = "outliers"
    copies: int = 2
    noise: float = 1.0
    n_test: int = 10000
    n_ood: int = 2000
    n_digits: int = 0  # 0: all 1,797
    bundles: str = key_field("", "never")  # folder to keep the MC dropout teacher and student


def image_data(job: DistillJob) -> dict[str, Any]:
    """The job's images: ``train`` (x, y) drawn with its seed, ``test`` (x, y), ``mnist`` and
    ``digits`` inputs ``[N, 1, 28, 28]``, the same for every seed."""
    from bayesify.data import load_fashion_mnist, load_mnist
    from bayesify.data.digits import load_digits_ood

    train = load_fashion_mnist("train").subset(job.limit, seed=job.seed)
    test = load_fashion_mnist("test")
    test = test.subset(job.n_test, seed=0) if job.n_test else test
    return {"train": (train.x, train.y), "test": (test.x, test.y),
            "mnist": load_mnist("test").subset(job.n_ood, seed=0).x,
            "digits": load_digits_ood(job.n_digits, seed=0)}  # fmt: skip


def _teacher(job: DistillJob) -> Any:
    import bayesify
    from bayesify.models import lenet
    from bayesify.seeding import seeded

    if job.method == "ensemble":
        return bayesify.DeepEnsemble(lenet(norm="batch"), members=job.members,
                                     task="classification", init_seed=job.seed)  # fmt: skip
    if job.method != "mc-dropout":
        raise ValueError(f"unknown teacher {job.method!r}; valid: {', '.join(METHODS)}")
    with seeded(job.seed):
        return bayesify.MCDropout(lenet(norm="batch"), task="classification",
                                  dropout=job.dropout, where="before-last-linear")  # fmt: skip


def _scores(mean: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    from bayesify.metrics import error_rate, expected_calibration_error, nll

    return {"error": float(error_rate(mean, y)), "nll": float(nll(mean, y)),
            "ece": float(expected_calibration_error(mean, y))}  # fmt: skip


def score_job(job: DistillJob) -> dict[str, Any]:
    """Train the teacher, distil it, score both (the runner's job function). Per model
    (``teacher``, ``student``: the closed form of its Dirichlet, ``student_draws``: T of its
    draws): error, NLL, ECE on the test images, ``auroc_<set>`` of its mutual information per
    OOD set; for the students also ``spearman_<rows>``, the rank correlation of their MI with
    the teacher's on the test rows (``in``) and on each OOD set's rows."""
    import bayesify
    from bayesify.metrics.ood import auroc

    data = image_data(job)
    t0 = time.perf_counter()
    teacher = _teacher(job)
    teacher.fit(data["train"], epochs=job.epochs, batch_size=128, lr=1e-3, seed=job.seed,
                progress=False)  # fmt: skip
    trained = time.perf_counter() - t0
    student = bayesify.distill(teacher, data["train"][0], samples=job.samples,
                               epochs=job.student_epochs, seed=job.seed, augment=job.augment,
                               copies=job.copies, noise=job.noise, progress=False)  # fmt: skip
    t, y = job.samples, data["test"][1]
    rows = {"in": data["test"][0], **{k: data[k] for k, _ in OOD_SETS}}
    mi: dict[str, dict[str, torch.Tensor]] = {m: {} for m in MODELS}
    means: dict[str, torch.Tensor] = {}
    for i, (where, x) in enumerate(rows.items()):
        tp, sp = teacher.predict(x, t, seed=i + 1), student.predict(x, t, seed=i + 1)
        closed = student.summaries(x)
        mi["teacher"][where] = tp.mutual_information
        mi["student_draws"][where] = sp.mutual_information
        mi["student"][where] = closed["mutual_information"]
        if where == "in":
            means = {"teacher": tp.mean, "student": closed["mean"].float(),
                     "student_draws": sp.mean}  # fmt: skip
    out: dict[str, Any] = {}
    for model in MODELS:
        m = _scores(means[model], y)
        m.update({f"auroc_{k}": float(auroc(mi[model]["in"], mi[model][k])) for k, _ in OOD_SETS})
        if model != "teacher":
            m.update({f"spearman_{w}": rank_correlation(mi["teacher"][w], mi[model][w])
                      for w in rows})  # fmt: skip
        out[model] = m
    out["seconds"] = {"teacher": trained, "student": student.distillation["seconds"]}
    out["chosen_epoch"] = student.distillation["chosen_epoch"]
    out["n"] = {"train": len(data["train"][1]), **{k: len(v) for k, v in rows.items()}}
    if job.bundles and job.method == "mc-dropout":
        folder = Path(job.bundles)
        teacher.save(folder / "fmnist-mc-dropout", overwrite=True)
        student.save(folder / "fmnist-mc-dropout-student", overwrite=True)
    return out
