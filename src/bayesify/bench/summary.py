"""Mean ± standard error over splits, as markdown tables."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any


def summarise(
    rows: Sequence[dict[str, Any]], keys: Sequence[str]
) -> dict[tuple[str, str], dict[str, tuple[float, float, int]]]:
    """Group rows by (dataset, method): metric -> (mean, standard error, number of splits)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["dataset"], r["method"])].append(r)
    out = {}
    for key, rs in groups.items():
        stats = {}
        for k in keys:
            vals = [float(r[k]) for r in rs if k in r]
            n = len(vals)
            if n == 0:
                continue
            mean = sum(vals) / n
            squares = sum((v - mean) * (v - mean) for v in vals)  # overflows to inf
            sd = math.sqrt(squares / (n - 1)) if n > 1 else 0.0
            stats[k] = (mean, sd / math.sqrt(n), n)
        out[key] = stats
    return out


def markdown_table(
    rows: Sequence[dict[str, Any]], keys: Sequence[str], headers: Sequence[str] | None = None
) -> str:
    """A markdown table: one line per (dataset, method), ``mean ± s.e.`` per metric (``mean ±
    –`` from one split: no standard error)."""
    headers = list(headers or keys)
    summary = summarise(rows, keys)
    lines = [
        "| dataset | method | splits | " + " | ".join(headers) + " |",
        "| --- | --- | ---: | " + " | ".join("---:" for _ in keys) + " |",
    ]
    for (dataset, method), stats in summary.items():
        n = max((s[2] for s in stats.values()), default=0)
        cells = [_mean_se(*stats[k]) if k in stats else "" for k in keys]
        lines.append(f"| {dataset} | {method} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _mean_se(mean: float, se: float, n: int) -> str:
    """``mean ± s.e.``; one value has no standard error: ``mean ± –``."""
    return f"{mean:.3f} ± {se:.3f}" if n > 1 else f"{mean:.3f} ± –"


#: p-value thresholds of the significance stars (the usual GraphPad convention)
STARS = ((1e-4, "****"), (1e-3, "***"), (1e-2, "**"), (5e-2, "*"))


def significance(values: Sequence[float]) -> tuple[float, str]:
    """One-sample, one-sided t-test that the mean of ``values`` exceeds 0 (Teye et al.'s test
    that a normalised score beats the constant baseline): ``(p, stars)``, ``"ns"`` for p ≥ 0.05
    and ``"n/a"`` with fewer than two values or no spread."""
    from scipy.stats import ttest_1samp

    vals = [float(v) for v in values]
    if len(vals) < 2 or max(vals) == min(vals):
        return math.nan, "n/a"
    p = float(ttest_1samp(vals, 0.0, alternative="greater").pvalue)
    return p, next((s for bound, s in STARS if p < bound), "ns")
