"""The UCI part of ``bayesify bench distill``: one job per dataset, teacher kind and run, into
the same resumable store as the image jobs, and the page's section from the store's rows.

Run i trains on Gal's split i with seed ``seed + i``, so the runs differ in data split and in
weights, batches, transfer set and draws, and are independent of each other: every cell of the
section is the mean ± standard error over the runs. A teacher (MC dropout, p 0.05; or a deep
ensemble) is an MLP with one hidden layer of 50; the student is distilled on the training rows
plus the transfer copies. Figures are in normalised units (the split's training statistics).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bayesify.bench.distill.page import cell, teacher_label
from bayesify.metrics.posterior import rank_correlation

EXPERIMENT = "distill-uci"
METHODS = ("mc-dropout", "ensemble")
#: per model, the metrics in the page's column order: (key, column header, digits, scale)
COLUMNS = (("rmse", "RMSE", 4, 1.0), ("nll", "NLL", 4, 1.0),
           ("coverage90", "90 % interval coverage (%)", 1, 100.0))  # fmt: skip


@dataclass(frozen=True)
class UCIDistillJob:
    """One row of the store: a teacher of one kind and its student on one split and seed."""

    method: str  # mc-dropout or ensemble
    dataset: str  # a UCI name, e.g. bostonHousing
    split: int  # Gal's split
    seed: int  # weights, batches, transfer set, draws
    epochs: int = 100
    members: int = 5
    samples: int = 30
    augment: str = "outliers"
    copies: int = 2
    noise: float = 1.0
    dropout: float = 0.05


def uci_jobs(opts: Any) -> list[UCIDistillJob]:
    """Per dataset of ``opts.uci``, run i = 0 … ``opts.seeds`` − 1 (split i, seed
    ``opts.seed + i``) and teacher kind (the ensemble only where ``opts.uci_members`` > 0)."""
    kinds = ["mc-dropout"] + (["ensemble"] if opts.uci_members else [])
    return [UCIDistillJob(method=kind, dataset=name, split=i, seed=opts.seed + i,
                          epochs=opts.uci_epochs,
                          members=opts.uci_members if kind == "ensemble" else 0,
                          samples=opts.samples, augment=opts.augment, copies=opts.copies,
                          noise=opts.noise)
            for name in opts.uci for i in range(opts.seeds) for kind in kinds]  # fmt: skip


def _teacher(job: UCIDistillJob, d: int) -> Any:
    import bayesify
    from bayesify.models import mlp
    from bayesify.seeding import seeded

    if job.method not in METHODS:
        raise ValueError(f"unknown teacher {job.method!r}; valid: {', '.join(METHODS)}")
    with seeded(job.seed):
        if job.method == "mc-dropout":
            return bayesify.MCDropout(mlp(d, 1, (50,), norm=None, dropout=job.dropout))
        return bayesify.DeepEnsemble(mlp(d, 1, (50,), norm=None), members=job.members,
                                     init_seed=job.seed)  # fmt: skip


def score_uci_job(job: UCIDistillJob) -> dict[str, Any]:
    """Train the teacher, distil it, score both on the split's test rows (the runner's job
    function): per model (``teacher``, ``student``) RMSE, NLL and the share of test targets
    inside the central 90 % interval; for the student also ``spearman``, the rank correlation
    of its epistemic variance with the teacher's per test row."""
    import bayesify
    from bayesify.data import load_uci

    s = load_uci(job.dataset, job.split, protocol="gal")
    teacher = _teacher(job, s.x_train.shape[1])
    t0 = time.perf_counter()
    teacher.fit((s.x_train, s.y_train), val=(s.x_val, s.y_val), epochs=job.epochs, batch_size=32,
                lr=1e-3, seed=job.seed, progress=False)  # fmt: skip
    trained = time.perf_counter() - t0
    student = bayesify.distill(teacher, s.x_train, samples=job.samples, epochs=job.epochs,
                               batch_size=32, seed=job.seed, augment=job.augment,
                               copies=job.copies, noise=job.noise, progress=False)  # fmt: skip
    preds = {"teacher": teacher.predict(s.x_test, job.samples, seed=1),
             "student": student.predict(s.x_test, job.samples, seed=1)}  # fmt: skip
    out: dict[str, Any] = {}
    for who, p in preds.items():
        lo, hi = p.interval(0.9)
        inside = (s.y_test >= lo) & (s.y_test <= hi)
        out[who] = {"rmse": float((p.mean - s.y_test).pow(2).mean().sqrt()),
                    "nll": float(-p.log_prob(s.y_test).mean()),
                    "coverage90": float(inside.double().mean())}  # fmt: skip
    out["student"]["spearman"] = rank_correlation(
        preds["teacher"].epistemic_variance, preds["student"].epistemic_variance
    )
    out["seconds"] = {"teacher": trained, "student": student.distillation["seconds"]}
    out["n"] = {"train": len(s.y_train), "test": len(s.y_test)}
    return out


def uci_section(rows: Sequence[dict[str, Any]], opts: Any, copy: str) -> list[str]:
    """The section's markdown lines from the store's ``rows`` of this run's UCI jobs."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: (r["dataset"], r["split"])):
        if r.get("status", "done") == "done" and r.get("metrics"):
            groups[(r["dataset"], r["method"])].append({**r["metrics"], "split": r["split"]})
    lines = [
        "## UCI regression (Gal's splits, normalised units)", "",
        f"MLP with one hidden layer of 50; teachers and students {opts.uci_epochs} epochs; "
        f"T = {opts.samples}; the transfer set is the training rows plus: {copy}. Run i trains "
        f"on Gal's split i with seed {opts.seed} + i (runs: how many finished); every cell is "
        "the mean ± standard error over the runs (one value alone for one run). Spearman: rank "
        "correlation of the student's and the teacher's epistemic variance per test row.", "",
        "| dataset | teacher | model | runs | "
        + " | ".join(h for _, h, _, _ in COLUMNS) + " | Spearman epistemic |",
        "|---|---|---|---:|" + "---:|" * (len(COLUMNS) + 1),
    ]  # fmt: skip
    times = []
    for name in opts.uci:
        for kind in METHODS:
            runs = groups.get((name, kind))
            if not runs:
                continue
            label = teacher_label(kind, opts.uci_members)
            for who in ("teacher", "student"):
                cells = [cell([r[who][k] for r in runs], dg, sc) for k, _, dg, sc in COLUMNS]
                rho = cell([r["student"]["spearman"] for r in runs], 3) if who == "student" else "–"
                lines.append(f"| {name} | {label} | {who} | {len(runs)} | "
                             + " | ".join(cells) + f" | {rho} |")  # fmt: skip
            times.append(
                f"- {name}, {label}: teacher trained in "
                f"{cell([r['seconds']['teacher'] for r in runs], 0)} s, student distilled in "
                f"{cell([r['seconds']['student'] for r in runs], 0)} s, per run"
            )
    failed = [r for r in rows if r.get("status") == "failed"]
    if failed:
        times.append(f"- {len(failed)} job(s) failed: " + "; ".join(
            f"{r['dataset']} {r['method']} split {r['split']}" for r in failed))  # fmt: skip
    return [*lines, "", *times, ""]
