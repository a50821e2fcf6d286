"""Mean ± standard error: :func:`mean_se`, the one every benchmark page uses, and markdown
tables of it per (dataset, method) over splits."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, Literal

#: which values :func:`mean_se` leaves out before it counts: none of them, the Nones, or the
#: Nones, NaNs and infinities
Drop = Literal["nothing", "none", "non-finite"]


def mean_se(
    values: Iterable[float | None], *, drop: Drop = "nothing", single: float = math.nan
) -> tuple[float, float]:
    """``(mean, standard error)`` of ``values``: the sample standard deviation (n − 1) over √n,
    as ``scipy.stats.sem``.

    ``drop`` says which values are left out first: ``"nothing"`` (a None raises TypeError, a
    NaN or ±inf counts and makes the mean NaN or ±inf), ``"none"`` (the Nones; a NaN still
    counts) or ``"non-finite"`` (the Nones, NaNs and ±inf). With no value left: ``(nan, nan)``.
    With one: its value and ``single``, the standard error shown for one value (NaN, as
    scipy's, or 0.0). Squares are products, so a spread beyond the float range gives ``inf``,
    never OverflowError.
    """
    kept = [v for v in values if not _dropped(v, drop)]
    if any(v is None for v in kept):
        raise TypeError("mean_se: a value is None (drop='none' leaves the Nones out)")
    vals = [float(v) for v in kept if v is not None]
    n = len(vals)
    if n == 0:
        return math.nan, math.nan
    mean = sum(vals) / n
    if n == 1:
        return mean, single
    return mean, math.sqrt(sum((v - mean) * (v - mean) for v in vals) / (n - 1) / n)


def _dropped(value: float | None, drop: Drop) -> bool:
    if drop == "nothing":
        return False
    return value is None or (drop == "non-finite" and not math.isfinite(value))


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
            if vals:
                stats[k] = (*mean_se(vals, single=0.0), len(vals))
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
        cells = [_cell(*stats[k]) if k in stats else "" for k in keys]
        lines.append(f"| {dataset} | {method} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(mean: float, se: float, n: int) -> str:
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
