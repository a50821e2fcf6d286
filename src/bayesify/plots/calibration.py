"""Calibration figures: reliability diagrams (classification) and regression calibration curves.

Matplotlib with the Agg backend (no display needed). Every function returns the Figure and, with
``path``, also saves it as a PNG. Inputs are :class:`~bayesify.predictive.Predictive` objects.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from matplotlib.figure import Figure
from torch import Tensor

from bayesify.metrics import (
    ReliabilityCurve,
    calibration_error_of_curve,
    miscalibration_area,
    regression_calibration_curve,
    reliability_curve,
)
from bayesify.plots._figure import new_figure, save_figure
from bayesify.predictive import Predictive, Task

#: reliability panels side by side before the figure wraps to a new row
PANELS_PER_ROW = 5


def reliability_diagram(
    preds: dict[str, Predictive] | Predictive,
    labels: Tensor,
    *,
    n_bins: int = 15,
    path: str | Path | None = None,
    dpi: int = 80,
) -> Figure:
    """One panel per predictive: accuracy vs confidence per bin, the gap to the diagonal, the
    ECE in the title and per-bin counts (bar labels and a histogram below)."""
    if isinstance(preds, Predictive):
        preds = {"": preds}
    curves = {}
    for name, pred in preds.items():
        if pred.task is not Task.CLASSIFICATION:
            raise ValueError(f"reliability_diagram needs classification predictives ({name!r})")
        curves[name] = reliability_curve(pred.mean, labels, n_bins=n_bins)
    return reliability_curves_diagram(curves, path=path, dpi=dpi)


def reliability_curves_diagram(
    curves: dict[str, ReliabilityCurve], *, path: str | Path | None = None, dpi: int = 80
) -> Figure:
    """:func:`reliability_diagram` from curves already computed (e.g. read back from a results
    store): one panel per curve, at most :data:`PANELS_PER_ROW` to a row."""
    ncols = max(1, min(len(curves), PANELS_PER_ROW))
    rows = max(1, math.ceil(len(curves) / ncols))
    fig, axes = new_figure(
        nrows=2 * rows,
        ncols=ncols,
        figsize=(3.2 * ncols, 4.2 * rows),
        gridspec_kw={"height_ratios": [3, 1] * rows},
        squeeze=False,
        sharex=True,
    )
    for extra in range(len(curves), rows * ncols):  # the last row's empty places
        axes[2 * (extra // ncols), extra % ncols].axis("off")
        axes[2 * (extra // ncols) + 1, extra % ncols].axis("off")
    for i, (name, curve) in enumerate(curves.items()):
        row, col = 2 * (i // ncols), i % ncols
        ece = float(calibration_error_of_curve(curve))
        edges = curve.bin_edges.double()
        centres, width = ((edges[1:] + edges[:-1]) / 2).numpy(), float(edges[1] - edges[0])
        acc = torch.nan_to_num(curve.accuracy.double(), nan=0.0).numpy()
        conf = torch.nan_to_num(curve.confidence.double(), nan=0.0).numpy()
        counts = curve.counts.numpy()
        ax, hist = axes[row, col], axes[row + 1, col]
        ax.bar(centres, acc, width=width, edgecolor="k", color="tab:blue", label="accuracy")
        ax.bar(
            centres, conf - acc, bottom=acc, width=width, color="tab:red", alpha=0.3, label="gap"
        )
        ax.plot([0, 1], [0, 1], "k--", lw=1)
        ax.set_ylim(0, 1)
        ax.set_title(f"{name} ECE={ece:.3f}".strip(), fontsize=9)
        if col == 0:
            ax.set_ylabel("accuracy")
        if i == 0:
            ax.legend(fontsize=7, loc="upper left")
        hist.bar(centres, counts, width=width, color="gray", edgecolor="k")
        for c, n in zip(centres, counts, strict=True):
            if n:
                hist.text(c, n, str(int(n)), ha="center", va="bottom", fontsize=5, rotation=90)
        hist.set_xlabel("confidence")
        if col == 0:
            hist.set_ylabel("count")
    fig.tight_layout()
    return save_figure(fig, path, dpi)


def regression_calibration_plot(
    preds: dict[str, Predictive] | Predictive,
    y: Tensor,
    *,
    path: str | Path | None = None,
    dpi: int = 80,
) -> Figure:
    """Observed vs expected coverage of central intervals of the moment-matched Gaussian
    (mean, total std) of each predictive, with its miscalibration area in the legend."""
    if isinstance(preds, Predictive):
        preds = {"": preds}
    fig, ax = new_figure(figsize=(3.6, 3.4))
    ax.plot([0, 1], [0, 1], "k--", lw=1)
    for name, pred in preds.items():
        if pred.task is not Task.REGRESSION:
            raise ValueError(f"regression_calibration_plot needs regression predictives ({name!r})")
        curve = regression_calibration_curve(pred.mean, pred.std, y)
        area = float(miscalibration_area(pred.mean, pred.std, y))
        ax.plot(curve.expected.numpy(), curve.observed.numpy(), label=f"{name} area={area:.3f}")
    ax.set_xlabel("expected coverage")
    ax.set_ylabel("observed coverage")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path, dpi)
