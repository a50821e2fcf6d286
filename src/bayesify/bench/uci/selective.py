"""Selective prediction on the UCI page: risk–coverage curves and their area (AURC) per method.

A regression predictive ranks its test points by predicted standard deviation; keeping the
most certain fraction c of them (coverage) and deferring the rest, the risk at c is the RMSE of
the kept points. Each stored row holds its test points in 10 equal-count bins by predicted std
(:func:`~bayesify.bench.uci.gal_methods.uncertainty_error_bins`), so the curve here is read at
c = 0.1, 0.2, ..., 1.0: the risk at k/10 is the root of the mean squared error of the k most
certain bins (equal counts, so their mean square is the kept points' mean square, up to one
point per bin). AURC is the mean of the ten risks (a right Riemann sum over coverage); the
relative AURC divides it by the full test RMSE (the risk at c = 1), so 1 is a ranking no better
than chance in expectation and lower is better. Ten coverage points are coarse: two methods
whose relative AURCs differ by less than a standard error are not told apart here.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bayesify.bench.uci.rows import Cell, mean_se, pm
from bayesify.data.uci import UCI_DATASETS


def risk_coverage(bin_rmse: Sequence[float]) -> list[float]:
    """RMSE of the k most certain bins for k = 1..B, from per-bin RMSEs ``[B]`` sorted by
    ascending predicted std (equal-count bins)."""
    total, out = 0.0, []
    for k, r in enumerate(bin_rmse, start=1):
        total += r * r
        out.append(math.sqrt(total / k))
    return out


def aurc(bin_rmse: Sequence[float]) -> float:
    """The area under the risk–coverage curve: the mean risk over the B coverage points."""
    curve = risk_coverage(bin_rmse)
    return sum(curve) / len(curve)


def row_figures(row: dict[str, Any]) -> dict[str, float] | None:
    """One stored row's AURC, relative AURC, relative risk at half coverage and std-bin ratio
    (largest-std bin's mean std over the smallest's); None if the row has no bins."""
    err, std = row.get("ue_rmse"), row.get("ue_std")
    if not err or not std:
        return None
    curve = risk_coverage(err)
    full = curve[-1]
    return {
        "aurc": sum(curve) / len(curve),
        "relative": sum(curve) / len(curve) / full if full > 0 else math.nan,
        "half": curve[len(curve) // 2 - 1] / full if full > 0 else math.nan,
        "ratio": std[-1] / std[0] if std[0] > 0 else math.nan,
    }


def mean_relative_curve(rows: Sequence[dict[str, Any]]) -> list[float] | None:
    """Risk over full-test RMSE at each coverage point, averaged over the rows with bins."""
    curves = []
    for r in rows:
        if r.get("ue_rmse") and r.get("ue_std"):
            c = risk_coverage(r["ue_rmse"])
            if c[-1] > 0:
                curves.append([v / c[-1] for v in c])
    if not curves:
        return None
    n = min(len(c) for c in curves)
    return [sum(c[i] for c in curves) / len(curves) for i in range(n)]


def selective_section(
    table: dict[Cell, list],
    protocol: str,
    variants: Sequence[tuple[str, str]],
    short: dict[str, str],
    figure: Path,
    page_dir: Path,
) -> list[str]:
    """The page's risk–coverage table (every dataset, method and likelihood with bins) and one
    figure of the mean relative curves, a panel per dataset."""
    lines = [
        "### Selective prediction: risk–coverage and AURC",
        "",
        "Keeping the test points with the smallest predicted std and deferring the rest: the "
        "risk at coverage c is the RMSE of the kept points, read at c = 0.1, …, 1.0 from each "
        "row's 10 equal-count std bins (so a coarse curve). AURC: the mean risk over the ten "
        "points, original units; relative AURC: AURC / full test RMSE (1: the std ranks errors "
        "no better than chance; lower is better); risk at 50%: the RMSE of the more certain "
        "half over the full RMSE. Mean ± standard error over splits (the splits column); "
        "std-bin ratio: the largest-std bin's mean std over the smallest's, median over splits "
        "(near 1: every point gets about the same std, so deferral by it is blind).",
        "",
        "| dataset | method | likelihood | splits | AURC | relative AURC | risk at 50% "
        "| std-bin ratio |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    panels: dict[str, dict[str, list[float]]] = {}
    for d in UCI_DATASETS:
        for m, lik in variants:
            rows = table.get((protocol, m, lik, d)) or []
            figs = [f for f in map(row_figures, rows) if f is not None]
            if not figs:
                continue
            cols = [pm(*mean_se([f[k] for f in figs]), digits=3) for k in ("aurc", "relative",
                                                                            "half")]  # fmt: skip
            ratio = statistics.median(f["ratio"] for f in figs)
            label = f"{m} {short.get(lik, lik)}"
            lines.append(f"| {d} | {m} | {lik} | {len(figs)} | " + " | ".join(cols)
                         + f" | {ratio:.2f} |")  # fmt: skip
            curve = mean_relative_curve(rows)
            if curve is not None:
                panels.setdefault(d, {})[label] = curve
    if not any(line.startswith(f"| {d} |") for d in UCI_DATASETS for line in lines):
        return []  # no row had bins
    path = risk_coverage_figure(panels, figure)
    return [*lines, "", f"![risk–coverage]({path.relative_to(page_dir).as_posix()})", ""]


def risk_coverage_figure(panels: dict[str, dict[str, list[float]]], path: Path) -> Path:
    """One PNG: a panel per dataset, a line per method and likelihood (relative risk against
    coverage, mean over splits); a flat line at 1 is a std that ranks nothing."""
    from bayesify.plots import new_figure, save_figure

    cols = 3
    nrows = math.ceil(len(panels) / cols)
    fig, axes = new_figure(figsize=(3.2 * cols, 2.4 * nrows), nrows=nrows, ncols=cols,
                           squeeze=False)  # fmt: skip
    methods = sorted({label.rsplit(" ", 1)[0] for c in panels.values() for label in c})
    colours = {m: f"C{i % 10}" for i, m in enumerate(methods)}
    for ax, (dataset, curves) in zip(axes.flat, panels.items(), strict=False):
        for label, curve in curves.items():
            method, likelihood = label.rsplit(" ", 1)
            cover = [(i + 1) / len(curve) for i in range(len(curve))]
            ax.plot(cover, curve, "o-" if likelihood == "homo" else "s--", ms=2, lw=1,
                    color=colours[method], label=label)  # fmt: skip
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_title(dataset, fontsize=8)
        ax.set_xlabel("coverage", fontsize=7)
        ax.set_ylabel("RMSE kept / RMSE all", fontsize=7)
        ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    legend: dict[str, Any] = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    fig.legend(list(legend.values()), list(legend), loc="lower center", ncol=6, fontsize=6,
               frameon=False)  # fmt: skip
    fig.subplots_adjust(bottom=0.12, hspace=0.6, wspace=0.35)
    save_figure(fig, path, dpi=80)
    return path
