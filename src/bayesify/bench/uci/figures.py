"""Uncertainty–error plots of ``bayesify bench uci``: per dataset, one panel per method and
likelihood, the test points binned by predicted standard deviation (deciles, stored with each
row), each bin's RMSE against its mean predicted std, averaged over splits. A calibrated
predictive lies near the diagonal (Teye et al. 2018, Fig. 3, binned)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def mean_curve(rows: Sequence[dict[str, Any]]) -> tuple[list[float], list[float]] | None:
    """The bins' mean std and RMSE averaged over the rows that stored them (None: no row did)."""
    curves = [(r["ue_std"], r["ue_rmse"]) for r in rows if r.get("ue_std") and r.get("ue_rmse")]
    if not curves:
        return None
    n = min(len(s) for s, _ in curves)
    std = [sum(s[i] for s, _ in curves) / len(curves) for i in range(n)]
    err = [sum(e[i] for _, e in curves) / len(curves) for i in range(n)]
    return std, err


def uncertainty_error_figure(
    dataset: str, panels: dict[str, Sequence[dict[str, Any]]], path: str | Path
) -> Path | None:
    """One small PNG for ``dataset``: a panel per ``label -> rows``; None if no row has bins.
    A panel whose rows do not all have bins (rows recovered without them) is titled with the
    rows it averages, e.g. ``mcbn homo (3/20)``."""
    from bayesify.plots import new_figure, save_figure

    curves = {}
    for label, rows in panels.items():
        if (curve := mean_curve(rows)) is not None:
            binned = sum(1 for r in rows if r.get("ue_std") and r.get("ue_rmse"))
            curves[label if binned == len(rows) else f"{label} ({binned}/{len(rows)})"] = curve
    if not curves:
        return None
    fig, axes = new_figure(figsize=(1.9 * len(curves), 2.0), ncols=len(curves), squeeze=False)
    for ax, (label, (std, err)) in zip(axes.flat, curves.items(), strict=True):
        top = max(max(std), max(err)) * 1.05
        ax.plot([0, top], [0, top], color="grey", lw=0.8, ls="--")
        ax.plot(std, err, "o-", ms=3, lw=1)
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        ax.set_title(label, fontsize=7)
        ax.tick_params(labelsize=6)
        ax.set_xlabel("predicted std", fontsize=6)
    axes.flat[0].set_ylabel(f"{dataset}\nRMSE in bin", fontsize=6)
    save_figure(fig, path, dpi=70)
    return Path(path)
