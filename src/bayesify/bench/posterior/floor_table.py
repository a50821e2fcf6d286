"""The page's tables of scores beside their HMC-against-HMC floor: f(x) first (the primary
table), then the whole predictive. A row's floor is the same score between the problem's second
HMC reference, subsampled to the method's draws, and the first (``floor_*`` in its metrics).

A method's cell is the mean ± standard error over its runs. With one split the runs are the
method seeds; with several, each split's runs are first averaged (they share the split's data
and reference, so they are not independent draws of the study) and the standard error is over
the split means. It is left out for one value. "Within the floor" counts the runs where the method's
distance is at or below the floor's (agreement: at or above); a distance without a floor (no
second reference) is never within it.
"""

from __future__ import annotations

import math
from typing import Any

from bayesify.bench.posterior.distances import floor_key
from bayesify.bench.summary import mean_se


def fmt(v: Any, digits: int = 3) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else (
        f"{v:.{digits}f}")  # fmt: skip


def mean(values: list[Any]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def within(rows: list[dict[str, Any]], key: str, larger: bool = False) -> str:
    """``k/n``: the runs whose ``key`` is at or below its floor (``larger``: at or above it,
    for agreement, which ties the floor's wherever both agree everywhere)."""
    hits = 0
    for m in rows:
        v, floor = m.get(key), m.get(floor_key(key))
        if v is not None and floor is not None and (v >= floor if larger else v <= floor):
            hits += 1
    return f"{hits}/{len(rows)}"


def split_means(rows: list[dict[str, Any]], key: str) -> list[float]:
    """``key`` per run, or with several splits each split's mean over its runs."""
    by_split: dict[Any, list[float]] = {}
    for r in rows:
        if r["metrics"].get(key) is not None:
            by_split.setdefault(r.get("split"), []).append(r["metrics"][key])
    if len(by_split) == 1:
        return next(iter(by_split.values()))
    return [sum(v) / len(v) for v in by_split.values()]


def _avg(rows: list[dict[str, Any]], key: str) -> str:
    """``mean ± standard error`` of ``key`` over ``rows`` (:func:`split_means`; the mean alone
    for one value)."""
    vals = split_means(rows, key)
    if len(vals) < 2:
        return fmt(mean(vals))
    m, se = mean_se(vals)
    return f"{fmt(m)} ± {fmt(se)}"


def _floor(rows: list[dict[str, Any]], key: str) -> str:
    """The floor of ``key``: its mean over the runs (one value per split: a split's method
    seeds share it), without a standard error."""
    return fmt(mean([m.get(floor_key(key)) for m in rows]))


def _line(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def fx_table(dataset: str, rows: list[dict[str, Any]], methods: list[str], gap: bool) -> list[str]:
    """The f(x) table of one problem: per method, W2 on f(x) and the epistemic std ratio, each
    beside its floor (means ± standard errors: :func:`split_means`)."""
    head = ["method", "draws", "W2 f(x)", "floor", "within floor"]
    head += ["W2 f(x) (gap)", "floor"] if gap else []
    head += ["std ratio f(x) (data)", "floor"]
    head += ["std ratio f(x) (gap)", "floor"] if gap else []
    lines = [f"### {dataset}", "", _line(head), _line(["---"] * len(head))]
    for method in methods:
        runs = [r for r in rows if r["method"] == method]
        mine = [r["metrics"] for r in runs]
        if not mine:
            continue
        draws = sorted({str(m.get("draws", "–")) for m in mine})
        cells = [method, "/".join(draws), _avg(runs, "w2_f"), _floor(mine, "w2_f"),
                 within(mine, "w2_f")]  # fmt: skip
        for key, shown in (("w2_f_gap", gap), ("std_ratio_f_data", True),
                           ("std_ratio_f_gap", gap)):  # fmt: skip
            if shown:
                cells += [_avg(runs, key), _floor(mine, key)]
        lines.append(_line(cells))
    return [*lines, ""]


def predictive_table(
    dataset: str,
    refs: list[dict[str, Any]],
    rows: list[dict[str, Any]],
    methods: list[str],
    gal: dict[str, float],
) -> list[str]:
    """The whole-predictive table of one problem (secondary): W2 (regression) or agreement and
    TV (classification) beside their floors, the predictive std ratios, test LL."""
    classification = any("accuracy" in r["metrics"] for r in refs)
    gap = any(r["metrics"].get("std_ratio_gap") is not None for r in rows)
    apart = classification and any("agreement_data" in r["metrics"] for r in rows)
    if apart:  # in the data and in the gap apart: the data points are easy, the gap is not
        keys = ["agreement_data", "agreement_gap", "tv_data", "tv_gap"]
        dist = [(k, k.startswith("agreement")) for k in keys
                if any(k in r["metrics"] for r in rows)]  # fmt: skip
    else:
        dist = [("agreement", True), ("tv", False)] if classification else [("w2", False)]
    if gap and not classification:
        dist.append(("w2_gap", False))
    head = ["method"]
    for key, _ in dist:
        base, _, part = key.partition("_")
        name = {"agreement": "agreement", "tv": "TV", "w2": "W2"}[base]
        head += [name + (f" ({part})" if part else ""), "floor", "within floor"]
    head += ["std ratio (data)", *(["std ratio (gap)"] if gap else []), "test LL"]
    head += [*(["LL in uci.md"] if gal else []), "runs"]
    lines = [f"### {dataset}", "", _line(head), _line(["---"] * len(head))]
    hmc = ["**HMC**"] + ["–"] * (3 * len(dist)) + ["1", *(["1"] if gap else [])]
    hmc += [fmt(mean([r["metrics"]["ll"] for r in refs])), *(["–"] if gal else [])]
    lines.append(_line([*hmc, str(len(refs))]))
    for method in methods:
        runs = [r for r in rows if r["method"] == method]
        mine = [r["metrics"] for r in runs]
        if not mine:
            continue
        cells = [method]
        for key, larger in dist:
            cells += [_avg(runs, key), _floor(mine, key), within(mine, key, larger)]
        cells += [_avg(runs, "std_ratio_data"), *([_avg(runs, "std_ratio_gap")] if gap else [])]
        cells += [_avg(runs, "ll"), *([fmt(gal.get(method))] if gal else []), str(len(mine))]
        lines.append(_line(cells))
    return [*lines, ""]
