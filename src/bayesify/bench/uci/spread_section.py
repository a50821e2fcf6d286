"""The page's table of cells whose weight-driven spread is negligible by bayesify's own rule:
the (method, likelihood, dataset) cells of a protocol whose mean epistemic share over splits is
below :data:`~bayesify.methods.core.spread.NEGLIGIBLE_SHARE`, or where at least half of the
splits are, each with its normalised PLL (what the predictive adds over one constant variance)
and the best normalised PLL on that dataset with the same likelihood, so a reader sees every
cell the rule flags, not only the one a note names."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bayesify.bench.uci.rows import Cell, mean_se, pm
from bayesify.data.uci import UCI_DATASETS
from bayesify.methods.core.spread import NEGLIGIBLE_SHARE


def _values(rows: Sequence[dict[str, Any]], key: str) -> list[float]:
    """The rows' ``key`` metric, rows scored without it left out."""
    return [r[key] for r in rows if r.get(key) is not None]


def flagged(rows: Sequence[dict[str, Any]]) -> tuple[float, int, int] | None:
    """(mean share, splits below the threshold, splits with a share) of a cell whose mean share
    is below :data:`NEGLIGIBLE_SHARE` or with at least half its splits below it; else None."""
    shares = _values(rows, "epistemic_share")
    if not shares:
        return None
    mean = sum(shares) / len(shares)
    below = sum(s < NEGLIGIBLE_SHARE for s in shares)
    return (
        (mean, below, len(shares)) if mean < NEGLIGIBLE_SHARE or 2 * below >= len(shares) else None
    )


def _pll(rows: Sequence[dict[str, Any]]) -> float | None:
    vals = _values(rows, "pll_norm")
    return sum(vals) / len(vals) if vals else None


def negligible_spread_section(table: dict[Cell, list], protocol: str,
                              variants: Sequence[tuple[str, str]]) -> list[str]:  # fmt: skip
    """The page's table (empty when no cell is flagged): per flagged cell its share (mean ±
    standard error over splits, range), splits below the threshold, its normalised PLL and the
    highest of any method on the dataset with the same likelihood; then the datasets flagged
    per method."""
    lines, per_method = [], {}
    for d in UCI_DATASETS:
        plls = {v: p for v in variants if (p := _pll(table.get((protocol, *v, d), []))) is not None}
        for m, lik in variants:
            rows = table.get((protocol, m, lik, d), [])
            hit = flagged(rows)
            if hit is None:
                continue
            shares = [100 * s for s in _values(rows, "epistemic_share")]
            own = plls.get((m, lik))
            same = [v for v in plls if v[1] == lik]
            best = max(same, key=plls.__getitem__) if same else None
            top = "–" if best is None else f"{plls[best]:.1f} ({best[0]})"
            lines.append(
                f"| {d} | {m} | {lik} | {pm(*mean_se(shares), 2)}% | "
                f"{min(shares):.2f}–{max(shares):.2f}% | {hit[1]} of {hit[2]} | "
                f"{'–' if own is None else f'{own:.1f}'} | {top} |"
            )
            per_method.setdefault(m, set()).add(d)
    if not lines:
        return []
    counts = "; ".join(f"{m}: {len(ds)} ({', '.join(sorted(ds))})" for m, ds in per_method.items())
    return [
        f"Negligible spread: the cells whose weight-driven spread bayesify's own rule calls "
        f"negligible (a mean epistemic share over splits below {NEGLIGIBLE_SHARE:.0%}, or at "
        "least half the splits below it; the share as in the table above, per test point and "
        "averaged; the warning a method raises pools over rows, Σ Var_t[μ_t] / Σ total). "
        "Norm. PLL as above: what the predictive's varying variance adds over one constant "
        "variance with the same means; beside it the highest mean norm. PLL of any method on "
        "the dataset with the same likelihood. Computed from the rows shown; every cell is "
        "listed, whatever its method.",
        "",
        "| dataset | method | likelihood | epistemic share | range over splits | splits below "
        f"{NEGLIGIBLE_SHARE:.0%} | norm. PLL | best norm. PLL, same likelihood |",
        "| --- | --- | --- | ---: | --- | ---: | ---: | --- |",
        *lines,
        "",
        f"Datasets flagged per method: {counts}.",
    ]
