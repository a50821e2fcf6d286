"""The Fashion-MNIST sections of ``benchmarks/continual.md``: the setup in words, and per
benchmark the average accuracy after the last task and each task's forgetting, mean ± standard
error over the seeds, with whether fine-tuning forgets."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bayesify.bench.continual.fashion import FASHION
from bayesify.bench.summary import mean_se


def _cell(values: list[float]) -> str:
    mean, se = mean_se([100 * v for v in values])
    return f"{mean:.1f}" if math.isnan(se) else f"{mean:.1f} ± {se:.1f}"


def fashion_intro(jobs: list[Any]) -> list[str]:
    """The Fashion benchmarks' setup in words, from their jobs."""
    lines = []
    for bench in FASHION:
        js = [j for j in jobs if j.dataset == bench]
        if not js:
            continue
        j = js[0]
        rows = f"the first {j.train_rows}" if j.train_rows else "all"
        test = f"the first {j.test_rows}" if j.test_rows else "all"
        batch = f"batches of {j.batch_size}" if j.batch_size else "full-batch steps"
        si = next((x.si_c for x in js if x.method == "si"), j.si_c)
        lam = next((x.ewc_lambda for x in js if x.method == "ewc"), j.ewc_lambda)
        lines += [f"- **{bench}**: {rows} of each task's training rows from Fashion-MNIST's "
                  f"60,000 training images (after a shuffle per seed), {test} of its rows of "
                  f"the 10,000 test images; {j.epochs} epochs per task of {batch}, Adam lr "
                  f"{j.lr}, {j.init} initialisation; EWC λ = {lam:g}, SI c = {si:g}, "
                  f"ξ = {j.si_xi:g}; VCL T = {j.samples} draws per prediction."]  # fmt: skip
    return lines


def fashion_section(
    bench: str, rows: list[dict[str, Any]], methods: tuple[str, ...], out: str
) -> list[str]:
    """One Fashion benchmark's tables, the fine-tuning check and its figure."""
    from bayesify.plots.continual import task_accuracy_plot

    tasks = FASHION[bench]
    head = " | ".join(f"task {j + 1}" for j in range(tasks))
    acc = [f"| method | average | {head} | runs | s/task |", "| --- " * (tasks + 4) + "|"]
    fhead = " | ".join(f"task {j + 1}" for j in range(tasks - 1))
    forget = [f"| method | mean | {fhead} |", "| --- " * (tasks + 1) + "|"]
    curves: dict[str, list[list[float]]] = {}
    means: dict[str, float] = {}
    for m in methods:
        cell = [r["metrics"] for r in rows if r["method"] == m and r["dataset"] == bench]
        if not cell:
            continue
        last = [c["accuracy"][-1] for c in cell]
        fg = [c["forgetting"] for c in cell]
        secs = [s for c in cell for s in c["task_seconds"]]
        acc.append(f"| {m} | {_cell([c['average'] for c in cell])} | "
                   + " | ".join(_cell([a[j] for a in last]) for j in range(tasks))
                   + f" | {len(cell)} | {sum(secs) / len(secs):.0f} |")  # fmt: skip
        forget.append(f"| {m} | {_cell([sum(f) / len(f) for f in fg])} | "
                      + " | ".join(_cell([f[j] for f in fg]) for j in range(tasks - 1))
                      + " |")  # fmt: skip
        curves[m] = [[sum(c["accuracy"][t][j] for c in cell) / len(cell) for j in range(t + 1)]
                     for t in range(tasks)]  # fmt: skip
        means[m] = mean_se([sum(f) / len(f) for f in fg])
    lines = [f"## {bench} ({tasks} tasks)", "",
             "Test accuracy (%) after the last task: the average over the tasks and each "
             "task's; mean ± standard error over the seeds (each seed its own data order, "
             "weights and batch order).", "", *acc, "",
             "Forgetting (points): a task's best test accuracy after any earlier step less its "
             "accuracy after the last task; the mean over tasks 1 to T − 1 and each task's.",
             "", *forget]  # fmt: skip
    if "finetune" in means:
        lines += ["", forgetting_verdict(*means["finetune"])]
    if curves:
        fig = Path(out) / "continual" / f"{bench}.png"
        task_accuracy_plot(curves, title=bench, path=fig)
        lines += ["", f"![{bench}: accuracy on each task after each new one]"
                      f"(continual/{fig.name})"]  # fmt: skip
    return [*lines, ""]


#: forgetting (points) below which fine-tuning cannot separate continual methods
FORGETS_AT = 5.0


def forgetting_verdict(mean: float, se: float) -> str:
    """Whether fine-tuning forgets, from its mean forgetting (a fraction) and the standard error
    over seeds: "forgets" only when the mean less two standard errors is at least
    :data:`FORGETS_AT` points, "barely forgets" when the mean plus two is below it."""
    f, s = 100 * mean, 100 * se
    if not math.isfinite(s):
        verdict = "forgets" if f >= FORGETS_AT else "barely forgets"
        return (f"Fine-tuning {verdict} on one seed here: {f:.1f} points of forgetting (no "
                "standard error).")  # fmt: skip
    if f - 2 * s >= FORGETS_AT:
        verdict = "forgets"
    elif f + 2 * s < FORGETS_AT:
        verdict = "barely forgets, so it cannot separate the methods"
    else:
        verdict = (f"may forget: the seeds are too spread to tell whether it forgets "
                   f"{FORGETS_AT:g} points or more")  # fmt: skip
    return (f"Fine-tuning {verdict} here: {f:.1f} ± {s:.1f} points of forgetting on average "
            "(mean ± standard error over the seeds).")  # fmt: skip
