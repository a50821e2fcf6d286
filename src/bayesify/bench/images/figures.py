"""Figures (small PNGs) and the corruption table of ``bayesify bench images``, drawn from stored
rows: ``methods`` maps a method name to its rows' metrics (one dict per seed)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from bayesify.bench.images.scores import COVERAGE_GRID

KINDS = {"gaussian": "Gaussian mixing γ", "salt_pepper": "salt-and-pepper p"}
DPI = 70
#: coverage panels per figure row (20 methods in one row were too small to read)
PANELS_PER_ROW = 5
#: the corruption figure's line styles, one per group of 10 methods (matplotlib's default colour
#: cycle repeats after 10, so a colour alone would name two methods)
LINE_STYLES = ("o-", "s--", "^:")


def _avg(rows: list[list[dict[str, float]]], key: str) -> list[float]:
    """The mean over seeds of ``key`` at each level."""
    return [sum(r[i][key] for r in rows) / len(rows) for i in range(len(rows[0]))]


def corruption_figure(methods: dict[str, list], path: Path) -> None:
    """Trinh et al. Fig. 8: epistemic (top) and aleatoric (bottom) mean entropy against the
    corruption level, one line per method, Gaussian mixing (left) and salt-and-pepper (right)."""
    from bayesify.plots import new_figure, save_figure

    fig, axes = new_figure(nrows=2, ncols=2, figsize=(7, 4.6), sharex="col", squeeze=False)
    for col, (kind, label) in enumerate(KINDS.items()):
        for i, (method, ms) in enumerate(methods.items()):
            sweeps = [m["corruption"][kind] for m in ms]
            levels = [s["level"] for s in sweeps[0]]
            style = LINE_STYLES[(i // 10) % len(LINE_STYLES)]
            for row, part in enumerate(("epistemic", "aleatoric")):
                axes[row, col].plot(levels, _avg(sweeps, part), style, ms=3, label=method)
        axes[0, col].set_title(label, fontsize=9)
        axes[1, col].set_xlabel(label, fontsize=8)
    axes[0, 0].set_ylabel("epistemic (MI, nats)", fontsize=8)
    axes[1, 0].set_ylabel("aleatoric (exp. entropy)", fontsize=8)
    # beside the panels: with 20 methods a legend inside one would cover its lines
    axes[0, 1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    for ax in axes.flat:
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=DPI)


def corruption_table(methods: dict[str, list]) -> list[str]:
    """Per method and corruption: total / aleatoric / epistemic mean entropy and error at the
    clean level and the strongest one, mean ± standard error over the method's seeds."""
    from bayesify.bench.images.report_summary import cell

    lines = ["| method | seeds | corruption | level | entropy | aleatoric | epistemic | error |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for method, ms in methods.items():
        for kind, label in KINDS.items():
            sweeps = [m["corruption"][kind] for m in ms]
            for i in (0, len(sweeps[0]) - 1):
                cells = [cell([s[i][k] for s in sweeps], 3)
                         for k in ("entropy", "aleatoric", "epistemic", "error")]  # fmt: skip
                level = f"{sweeps[0][i]['level']:g}"
                head = f"| {method} | {len(sweeps)} | {label.split()[0]} | {level}"
                lines.append(head + " | " + " | ".join(cells) + " |")
    return lines


def coverage_figure(methods: dict[str, list], path: Path) -> Any:
    """Error on the retained rows against coverage, one panel per method (PANELS_PER_ROW to a
    row), a line per score; the deterministic network's max-probability curve in grey on every
    panel. Returns the (saved) figure."""
    from bayesify.plots import new_figure, save_figure

    names = [m for m in methods if m != "deterministic"] or list(methods)
    ncols = min(PANELS_PER_ROW, len(names))
    nrows = math.ceil(len(names) / ncols)
    fig, axes = new_figure(nrows=nrows, ncols=ncols, figsize=(2.6 * ncols, 2.6 * nrows),
                           squeeze=False, sharey=True)  # fmt: skip
    for ax in axes.flat[len(names) :]:
        ax.set_visible(False)
    base = methods.get("deterministic")
    for ax, method in zip(axes.flat, names, strict=False):
        if base:
            ax.plot(COVERAGE_GRID, _mean_curve(base, "max_prob"), color="grey", lw=2,
                    label="det. 1 − max p")  # fmt: skip
        for score, style in (("entropy", "-"), ("mi", "--"), ("max_prob", ":")):
            if method in ("deterministic", "ddu") and score == "mi":  # 0 on every row
                continue
            ax.plot(COVERAGE_GRID, _mean_curve(methods[method], score), style, label=score)
        ax.set_title(method, fontsize=9)
        ax.set_xlabel("fraction retained", fontsize=8)
        ax.tick_params(labelsize=7)
    for row in axes:
        row[0].set_ylabel("error on retained", fontsize=8)
    axes[0, 0].legend(fontsize=6)
    fig.tight_layout()
    save_figure(fig, path, dpi=DPI)
    return fig


def _mean_curve(ms: list[dict[str, Any]], score: str) -> list[float]:
    curves = [m["coverage"][score]["error"] for m in ms]
    return [sum(c[i] for c in curves) / len(curves) for i in range(len(COVERAGE_GRID))]


def reliability_figure(methods: dict[str, list], path: Path) -> None:
    """Reliability diagrams of every method (its first row: the lowest seed)."""
    from bayesify.plots.calibration import reliability_curves_diagram

    curves = {m: reliability_curve_of(ms[0]["reliability"]) for m, ms in methods.items()}
    reliability_curves_diagram(curves, path=path, dpi=45)


def mcbn_sweep_figure(sweeps: list[list[dict[str, float]]], path: Path) -> None:
    """Mukhoti et al. Fig. 1: mean MI in/out and OOD AUROC against the MCBN batch size."""
    from bayesify.plots import new_figure, save_figure

    bs = [s["b"] for s in sweeps[0]]
    fig, ax = new_figure(nrows=1, ncols=2, figsize=(6.4, 2.6))
    ax[0].plot(bs, _avg(sweeps, "mi_in"), "o-", label="Fashion-MNIST (in)")
    ax[0].plot(bs, _avg(sweeps, "mi_out"), "o-", label="MNIST (OOD)")
    ax[0].set(xscale="log", yscale="log", xlabel="MCBN batch size b", ylabel="mean MI (nats)")
    ax[0].legend(fontsize=7)
    ax[1].plot(bs, _avg(sweeps, "auroc"), "o-")
    ax[1].set(xscale="log", xlabel="MCBN batch size b", ylabel="OOD AUROC (MI)")
    for a in ax:
        a.tick_params(labelsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=DPI)


def reliability_curve_of(stored: dict[str, list]) -> Any:
    """A :class:`~bayesify.metrics.ReliabilityCurve` from its stored lists (null -> NaN)."""
    from bayesify.metrics import ReliabilityCurve

    def t(v: list) -> torch.Tensor:
        return torch.tensor([math.nan if x is None else x for x in v], dtype=torch.float64)

    return ReliabilityCurve(bin_edges=t(stored["bin_edges"]), confidence=t(stored["confidence"]),
                            accuracy=t(stored["accuracy"]),
                            counts=torch.tensor(stored["counts"], dtype=torch.int64))  # fmt: skip
