"""Figures a person would rather look at: uncertainty–error plots and 1-D toy predictives."""

from __future__ import annotations

from pathlib import Path

import torch
from matplotlib.figure import Figure
from torch import Tensor

from bayesify.plots._figure import new_figure, save_figure
from bayesify.predictive import Predictive, Task


def uncertainty_error_plot(
    pred: Predictive,
    y: Tensor,
    *,
    title: str = "",
    window: int | None = None,
    path: str | Path | None = None,
) -> Figure:
    """Teye et al. Fig. 2: test points sorted by predicted std; errors y − ŷ as dots,
    50% and 95% Gaussian bands (±0.674σ, ±1.96σ) around zero, running mean of |error|.

    A good uncertainty estimate shows the errors fanning out with the bands.
    """
    if pred.task is not Task.REGRESSION:
        raise ValueError("the uncertainty-error plot is for regression predictives")
    y = torch.as_tensor(y, dtype=pred.samples.dtype).reshape(-1)
    std, order = pred.std.sort()
    err = (y - pred.mean)[order]
    idx = torch.arange(len(std))
    window = window or max(3, len(std) // 10)
    # centred running mean of |error|, averaging only over points inside the window at the ends
    c = torch.cat([torch.zeros(1, dtype=err.dtype), err.abs().cumsum(0)])
    lo = (idx - window // 2).clamp(min=0)
    hi = (idx + window // 2 + 1).clamp(max=len(err))
    running = (c[hi] - c[lo]) / (hi - lo)
    fig, ax = new_figure(figsize=(6.5, 3.6))
    ax.fill_between(idx, -1.96 * std, 1.96 * std, color="tab:blue", alpha=0.18, label="95% CI")
    ax.fill_between(idx, -0.674 * std, 0.674 * std, color="tab:blue", alpha=0.35, label="50% CI")
    ax.scatter(idx, err, s=9, color="tab:red", label="error y − ŷ", zorder=3)
    ax.plot(idx, running, color="black", lw=1.2, label=f"running mean |error| (w={window})")
    ax.axhline(0, color="grey", lw=0.6)
    ax.set_xlabel("test points, sorted by predicted standard deviation")
    ax.set_ylabel("error (target units)")
    ax.set_title(title or "uncertainty vs error")
    ax.legend(fontsize=7, loc="upper left")
    return save_figure(fig, path)


def toy_regression_plot(
    x_train: Tensor,
    y_train: Tensor,
    x_grid: Tensor,
    pred: Predictive,
    *,
    baseline_std: float | None = None,
    truth: Tensor | None = None,
    title: str = "",
    path: str | Path | None = None,
) -> Figure:
    """Teye et al. Fig. 1: training data, predictive mean, ±1σ and ±2σ shading on a 1-D grid;
    the constant-uncertainty baseline's ±2σ band dashed when ``baseline_std`` is given."""
    xg = torch.as_tensor(x_grid).reshape(-1)
    mean, std = pred.mean, pred.std
    fig, ax = new_figure(figsize=(6.5, 3.6))
    for k, a in ((2, 0.18), (1, 0.3)):
        ax.fill_between(xg, mean - k * std, mean + k * std, color="tab:blue", alpha=a,
                        label=f"±{k}σ predictive")  # fmt: skip
    ax.plot(xg, mean, color="tab:blue", lw=1.5, label="predictive mean")
    if baseline_std is not None:
        for sign in (-1, 1):
            ax.plot(xg, mean + sign * 2 * baseline_std, "k--", lw=1,
                    label="constant uncertainty ±2σ" if sign < 0 else None)  # fmt: skip
    if truth is not None:
        ax.plot(xg, torch.as_tensor(truth).reshape(-1), color="grey", lw=1, label="truth")
    ax.scatter(torch.as_tensor(x_train).reshape(-1), y_train, s=10, color="black", zorder=3,
               label="training data")  # fmt: skip
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="lower center", ncol=3)
    return save_figure(fig, path)
