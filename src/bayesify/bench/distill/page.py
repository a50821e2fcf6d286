"""The images section of ``bayesify bench distill``'s page, from the store's rows: per teacher
and model, mean ± standard error over seeds of error, NLL, ECE, the OOD AUROC of mutual
information on MNIST and on scikit-learn's digits and the rank correlation of the student's MI
with the teacher's; the student/teacher AUROC ratio per OOD set; and every seed's AUROCs."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from bayesify.bench.distill.jobs import METHODS, OOD_SETS
from bayesify.bench.summary import mean_se

#: the target of the issue: a student's AUROC at least this share of its teacher's
TARGET_RATIO = 0.9
_MODEL_LABELS = {"teacher": "teacher", "student": "student (closed form)"}


def teacher_label(method: str, members: int) -> str:
    """``mc-dropout`` -> "MC dropout", ``ensemble`` -> "ensemble of 3"."""
    return "MC dropout" if method == "mc-dropout" else f"ensemble of {members}"


def cell(values: Sequence[float], digits: int, scale: float = 1.0) -> str:
    """``mean ± standard error`` of ``values`` (times ``scale``), or the one value alone."""
    m, se = mean_se([scale * v for v in values])
    if len(values) < 2:
        return f"{m:.{digits}f}"
    return f"{m:.{digits}f} ± {se:.{digits}f}"


def by_teacher(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Done rows' metrics per teacher kind (in :data:`METHODS` order), sorted by seed; each
    metrics dict gets its ``seed``."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: r["seed"]):
        if r.get("status", "done") == "done" and r.get("metrics"):
            groups[r["method"]].append({**r["metrics"], "seed": r["seed"]})
    return {m: groups[m] for m in METHODS if groups.get(m)}


def ratios(runs: Sequence[dict[str, Any]], ood: str, model: str = "student") -> list[float]:
    """Per seed: the student's AUROC on ``ood`` over its teacher's."""
    return [r[model][f"auroc_{ood}"] / r["teacher"][f"auroc_{ood}"] for r in runs]


def _model_table(
    groups: dict[str, list[dict[str, Any]]], labels: dict[str, str], t: int
) -> list[str]:
    sets = [name for _, name in OOD_SETS]
    lines = [
        "| teacher | model | seeds | error (%) | NLL | ECE | "
        + " | ".join(f"AUROC {s}" for s in sets)
        + " | Spearman MI, test rows | " + " | ".join(f"Spearman MI, {s} rows" for s in sets)
        + " |",
        "|---|---|---:|" + "---:|" * (3 + 2 * len(sets) + 1),
    ]  # fmt: skip
    names = {**_MODEL_LABELS, "student_draws": f"student (T = {t} draws)"}
    for method, runs in groups.items():
        for model, name in names.items():
            ms = [r[model] for r in runs]
            cells = [cell([m["error"] for m in ms], 2, 100.0), cell([m["nll"] for m in ms], 4),
                     cell([m["ece"] for m in ms], 4),
                     *[cell([m[f"auroc_{k}"] for m in ms], 4) for k, _ in OOD_SETS]]  # fmt: skip
            for where in ("in", *[k for k, _ in OOD_SETS]):
                cells.append(
                    "–" if model == "teacher" else cell([m[f"spearman_{where}"] for m in ms], 3)
                )
            lines.append(f"| {labels[method]} | {name} | {len(ms)} | " + " | ".join(cells) + " |")
    return lines


def _ratio_table(groups: dict[str, list[dict[str, Any]]], labels: dict[str, str]) -> list[str]:
    lines = [
        "| teacher | OOD set | seeds | teacher AUROC | student AUROC | student / teacher | "
        f"seeds with the student ≥ {TARGET_RATIO:g}× its teacher | lowest ratio |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for method, runs in groups.items():
        for key, name in OOD_SETS:
            r = ratios(runs, key)
            met = sum(v >= TARGET_RATIO for v in r)
            lines.append(
                f"| {labels[method]} | {name} | {len(runs)} | "
                f"{cell([x['teacher'][f'auroc_{key}'] for x in runs], 4)} | "
                f"{cell([x['student'][f'auroc_{key}'] for x in runs], 4)} | {cell(r, 3)} | "
                f"{met} of {len(r)} | {min(r):.3f} |"
            )
    return lines


def _seed_table(groups: dict[str, list[dict[str, Any]]], labels: dict[str, str]) -> list[str]:
    lines = ["| teacher | seed | " + " | ".join(
        f"teacher, {n} | student, {n} | ratio, {n}" for _, n in OOD_SETS) + " | epoch kept |",
        "|---|---:|" + "---:|" * (3 * len(OOD_SETS) + 1)]  # fmt: skip
    for method, runs in groups.items():
        for r in runs:
            cells = []
            for key, _ in OOD_SETS:
                te, st = r["teacher"][f"auroc_{key}"], r["student"][f"auroc_{key}"]
                cells += [f"{te:.4f}", f"{st:.4f}", f"{st / te:.3f}"]
            lines.append(f"| {labels[method]} | {r['seed']} | " + " | ".join(cells)
                         + f" | {r['chosen_epoch']} |")  # fmt: skip
    return lines


def images_section(rows: Sequence[dict[str, Any]], opts: Any, copy: str) -> list[str]:
    """The section's markdown lines from the store's ``rows`` of this run's jobs."""
    groups = by_teacher(rows)
    labels = {m: teacher_label(m, opts.members) for m in METHODS}
    seeds = sorted({r["seed"] for runs in groups.values() for r in runs})
    n = next(iter(groups.values()))[0]["n"] if groups else {}
    times = [
        f"{labels[m]}: teacher trained in {cell([r['seconds']['teacher'] for r in runs], 0)} s, "
        f"student distilled in {cell([r['seconds']['student'] for r in runs], 0)} s "
        "(teacher samples and training), per seed"
        for m, runs in groups.items()
    ]
    failed = [r for r in rows if r.get("status") == "failed"]
    return [
        "## Fashion-MNIST LeNet, MNIST and scikit-learn's digits as out-of-distribution",
        "",
        f"{opts.limit} training images per seed (drawn with the seed; also the transfer set, "
        f"plus: {copy}), {n.get('in', '?')} test images, {n.get('mnist', '?')} MNIST test images, "
        f"{n.get('digits', '?')} digits (scikit-learn's 8×8 digits upsampled into MNIST's 20×20 "
        "box; the test and OOD images are the same for every seed); teachers trained "
        f"{opts.epochs} epochs (Adam, lr 1e-3, batch 128), students {opts.student_epochs}; "
        f"T = {opts.samples}. Seeds {', '.join(map(str, seeds)) or 'none'} (N = {len(seeds)}): "
        "each draws the training images, the teacher's weights and batches, the transfer set "
        "and the student's training. Every cell is the mean ± standard error over the N seeds "
        "(sample standard deviation / √N; one value alone when N = 1). AUROC: mutual "
        "information separating the OOD set from Fashion-MNIST test images (the teacher's from "
        "its T samples; the student's own: the closed form of its Dirichlet, and the estimate "
        f"from T = {opts.samples} of its draws). Spearman: rank correlation of the student's "
        "and the teacher's mutual information per image, on the test rows and on each OOD "
        "set's rows apart. MNIST was used in designing the default transfer set (its "
        "transforms were chosen by how close the teacher's MI on them comes to its MI on "
        "MNIST); the digits were not: their AUROC is the test on an OOD set unused in design.",
        "",
        *_model_table(groups, labels, opts.samples),
        "",
        f"Student against teacher, per OOD set (the ratio is the mean ± standard error of the "
        f"per-seed ratios; the target is ≥ {TARGET_RATIO:g}×):",
        "",
        *_ratio_table(groups, labels),
        "",
        "Every seed (AUROC of mutual information; the student's closed form):",
        "",
        *_seed_table(groups, labels),
        "",
        *[f"- {t}" for t in times],
        *(
            [
                f"- {len(failed)} job(s) failed: "
                + "; ".join(f"{r['method']} seed {r['seed']}" for r in failed)
            ]
            if failed
            else []
        ),  # fmt: skip
        "",
    ]
