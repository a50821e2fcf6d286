"""Continual learning: accuracy on every earlier task after each new one (one panel per task)."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from bayesify.plots._figure import new_figure, save_figure

__all__ = ["task_accuracy_plot"]


def task_accuracy_plot(
    accuracies: dict[str, list[list[float]]],
    *,
    title: str = "",
    path: str | Path | None = None,
    dpi: int = 80,
) -> Figure:
    """``accuracies[method][t][j]``: test accuracy on task j after training on task t (j <= t).

    Panel j shows task j's accuracy against the number of tasks seen, one line per method, and
    a last panel the average over the tasks seen so far."""
    if not accuracies:
        raise ValueError("task_accuracy_plot needs at least one method's accuracies")
    tasks = max(len(rows) for rows in accuracies.values())
    fig, axes = new_figure(figsize=(1.9 * (tasks + 1), 2.2), nrows=1, ncols=tasks + 1,
                           squeeze=False, sharey=True)  # fmt: skip
    for i, (name, rows) in enumerate(accuracies.items()):
        style = {"color": f"C{i}", "marker": "o", "ms": 2.5, "lw": 1}
        for j in range(tasks):
            pts = [(t + 1, rows[t][j]) for t in range(j, len(rows)) if j < len(rows[t])]
            if pts:
                axes[0, j].plot(*zip(*pts, strict=True), label=name, **style)
        avg = [(t + 1, sum(r) / len(r)) for t, r in enumerate(rows) if r]
        axes[0, tasks].plot(*zip(*avg, strict=True), label=name, **style)
    for j in range(tasks + 1):
        ax = axes[0, j]
        ax.set_title("average" if j == tasks else f"task {j + 1}", fontsize=8)
        ax.set_xlim(0.5, tasks + 0.5)
        ax.set_xticks(range(1, tasks + 1))
        ax.tick_params(labelsize=6)
    axes[0, 0].set_ylabel("test accuracy", fontsize=8)
    axes[0, tasks].legend(fontsize=6, loc="lower left")
    fig.supxlabel("tasks trained on", fontsize=8, y=-0.1)
    if title:
        fig.suptitle(title, fontsize=9, y=1.04)
    return save_figure(fig, path, dpi=dpi)
