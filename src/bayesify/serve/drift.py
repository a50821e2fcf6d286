"""Drift of a model's rolling figures from their baselines: a test at a stated false-alarm rate.

Each figure with a baseline (the deferral policy's validation figures: error, NLL, ECE on all
and on accepted rows; for interval coverage, the nominal level served) is tested against it,
accounting for the sampling noise of both the window (``n`` rows) and the baseline (``m``
validation rows):

* **0/1 error** (classification): Fisher's exact test, one-sided (window worse), on the error
  counts; a baseline of 0 errors is a count like any other.
* **RMSE, mean absolute error, NLL**: a one-sided two-sample t test on the per-row terms
  (squared error, absolute error, -log p), with the variance pooled over the window's and the
  baseline's rows (the baseline's from ``validation["moments"]``) and ``n + m - 2`` degrees of
  freedom. RMSE is tested as its square, the mean squared error (the same hypothesis).
* **ECE** (not a mean of per-row terms, biased upward on few rows): the difference ``ECE_window -
  ECE_baseline`` against its null distribution by a bootstrap of the window's per-row bin terms
  (``BOOTSTRAP`` draws of ``n`` and of ``m`` rows, fixed seed), read off a normal fitted to the
  draws.
* **Interval coverage**: a two-sided pooled test of two proportions, the window's coverage
  against the nominal level taken as a coverage measured on ``m`` rows (an interval is calibrated
  on validation-sized data, so its level carries that noise).

**What the level controls.** ``level`` (``bayesify serve --drift-level``, default 0.01) is the
false-alarm probability of one model at one check (a check is the recomputation after a feedback
request) on an unshifted stream: the figures of a model are one family and each is tested at
``level / k`` (Bonferroni over the model's ``k`` drift rows), so the chance that *any* of its
figures reads "drifting" at a given check is at most ``level`` (up to the tests' approximations).
It is not a rate over time: checks repeat, and over a long unshifted stream the chance of at
least one alarm at some check is higher (``benchmarks/monitoring.md`` measures both).

A figure drifts only if, on at least ``min_count`` rows, its test rejects both over the whole
window and with the rows of any one feedback request left out (the figures are sums of per-row
terms, :mod:`.figures`, so every leave-one-request-out window is one subtraction away), and the
live figure is past the baseline by more than ``tolerance`` times its size (coverage: off the
level by more than ``tolerance · (1 - level)``): a change must be both real and large enough.
Both extra conditions only remove alarms, so the level still bounds the false-alarm rate.

**Baselines without moments.** Bundles calibrated before ``moments`` were recorded carry the
validation row count ``n`` (and the accepted fraction ``coverage``): the test then takes the
baseline's per-row variance to be the window's (equal under no drift) and says so in the row's
``basis``. A validation dict without any row count is taken as ``ASSUMED_ROWS`` rows, as is the
coverage baseline of a model served without a deferral policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from bayesify.serve.figures import clean, leave_one_out

#: default false-alarm probability of one model at one check
LEVEL = 0.01
#: validation rows assumed where a baseline records none
ASSUMED_ROWS = 100
#: bootstrap draws of the ECE test
BOOTSTRAP = 1000
MOMENTS, POOLED, ASSUMED = (
    "validation moments",
    "validation row count; its variance taken from the window (bundle without moments)",
    f"no validation row count: {ASSUMED_ROWS} rows assumed",
)


@dataclass(frozen=True)
class WindowPart:
    """Scored rows of the window (all or accepted): classification ``rows`` are the served
    probabilities ``[N, C]`` and ``labels [N]``, regression ``rows`` the row scores; ``terms``
    per figure (:mod:`.figures`) and ``groups [N]`` the feedback request of each row."""

    rows: Any
    labels: np.ndarray | None
    terms: dict[str, np.ndarray]
    groups: np.ndarray


@dataclass(frozen=True)
class Baseline:
    """What a test needs of a baseline: its value (RMSE as the mean squared error), ``m`` rows,
    the variance of its per-row terms (None: take the window's) and how these were known."""

    value: float
    m: int
    var: float | None
    basis: str


def drift_rows(
    figures: dict[str, Any],
    parts: dict[str, WindowPart],
    validation: dict[str, Any],
    task: str,
    error_metric: str,
    min_count: int,
    tolerance: float = 0.0,
    level: float = LEVEL,
) -> list[dict[str, Any]]:
    """Per figure with a baseline and part (``all``, ``accepted``): ``{figure, part, live,
    validation, n, drifting, p_value, level, test, basis}``; ``p_value`` is the largest over the
    whole window and the leave-one-request-out windows (None below ``min_count`` rows),
    ``level`` the row's share of the model's ``level``."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"the drift level must be in (0, 1), got {level!r}")
    checks = []
    for part in ("all", "accepted"):
        fig = figures[part]
        for name in ("error", "nll", "ece"):
            ref = clean(_number(validation.get(f"{name}_{part}")))
            if ref is not None and not (name == "ece" and task != "classification"):
                checks.append((name, part, ref))
        if fig.get("interval_coverage") is not None:
            checks.append(("interval_coverage", part, fig["interval_level"]))
    share = level / max(len(checks), 1)
    rows = []
    for name, part, ref in checks:
        fig, wp = figures[part], parts[part]
        p, test, basis = None, _test(name, task), ""
        if fig["n"] >= min_count and name in wp.terms:
            base = _baseline(name, part, ref, validation, task, error_metric)
            basis = base.basis
            p = _p_value(name, test, wp.terms[name], wp.groups, base, min_count)
        live = fig.get(name)
        past = _past(name, live, ref, tolerance)
        rows.append({"figure": name, "part": part, "live": live, "validation": ref,
                     "n": fig["n"], "drifting": bool(p is not None and p <= share and past),
                     "p_value": clean(p), "level": share, "test": test,
                     "basis": basis})  # fmt: skip
    return rows


def _test(name: str, task: str) -> str:
    if name == "interval_coverage":
        return "proportions"
    if task == "classification" and name != "nll":
        return "fisher" if name == "error" else "bootstrap"
    return "t"


def _past(name: str, live: float | None, ref: float, tolerance: float) -> bool:
    """Whether the live figure is past the baseline by more than the tolerance."""
    if live is None:
        return False
    if name == "interval_coverage":
        return abs(live - ref) > tolerance * (1 - ref)
    return live > ref + tolerance * abs(ref)


def _baseline(name: str, part: str, ref: float, validation: dict[str, Any], task: str,
              error_metric: str) -> Baseline:  # fmt: skip
    """The baseline's value, rows and per-row variance for ``name`` on ``part``."""
    value = ref * ref if name == "error" and task == "regression" and error_metric != "mae" else ref
    moments = validation.get("moments")
    got = moments.get(part) if isinstance(moments, dict) else None
    if isinstance(got, dict) and _number(got.get("n")):
        mv = got.get(name) if name != "interval_coverage" else None
        var = _number(mv[1]) if isinstance(mv, list) and len(mv) == 2 else None
        if isinstance(mv, list) and _number(mv[0]) is not None:
            value = float(mv[0])
        return Baseline(value, int(got["n"]), var, MOMENTS)
    n, cov = _number(validation.get("n")), _number(validation.get("coverage"))
    if n:
        m = n if part == "all" or name == "interval_coverage" or cov is None else n * cov
        return Baseline(value, max(int(round(m)), 1), None, POOLED)
    return Baseline(value, ASSUMED_ROWS, None, ASSUMED)


def _p_value(name: str, test: str, terms: np.ndarray, groups: np.ndarray, base: Baseline,
             min_count: int) -> float | None:  # fmt: skip
    """The largest p-value over the whole window and every leave-one-request-out window (None
    when one of them has fewer than ``min_count`` rows)."""
    if test == "bootstrap":
        sums, counts = leave_one_out(terms, groups)
        if np.any(counts < min_count):
            return None
        live = np.abs(sums).sum(1) / counts
        return float(_ece_p(terms, live, base).max())
    from scipy import stats  # on the first drift row: a server starts without scipy

    t = terms[:, :1]
    sums, counts = leave_one_out(np.hstack([t, t * t, terms[:, 1:]]), groups)
    if np.any(counts < min_count):
        return None
    m = base.m
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = sums[:, 0] / counts
        if test == "fisher":
            k_b = int(round(base.value * m))
            k_w = np.rint(sums[:, 0]).astype(np.int64)
            p = stats.hypergeom.sf(k_w - 1, counts + m, k_w + k_b, counts)
        elif test == "proportions":
            lvl = sums[:, 2] / counts
            pooled = (sums[:, 0] + lvl * m) / (counts + m)
            se = np.sqrt(pooled * (1 - pooled) * (1 / counts + 1 / m))
            p = np.where(se > 0, 2 * stats.norm.sf(np.abs(mean - lvl) / se),
                         np.where(mean == lvl, 1.0, 0.0))  # fmt: skip
        else:
            var_w = np.maximum(sums[:, 1] - counts * mean * mean, 0) / np.maximum(counts - 1, 1)
            var_b = var_w if base.var is None else base.var
            pooled = ((counts - 1) * var_w + (m - 1) * var_b) / np.maximum(counts + m - 2, 1)
            se = np.sqrt(pooled * (1 / counts + 1 / m))
            diff = mean - base.value
            p = np.where(se > 0, stats.t.sf(diff / se, counts + m - 2),
                         np.where(diff > 0, 0.0, 1.0))  # fmt: skip
    return float(np.max(p))


def _ece_p(terms: np.ndarray, live: np.ndarray, base: Baseline) -> np.ndarray:
    """One-sided p-values of ``live - baseline`` for ECEs ``live [W]``, against the bootstrap
    distribution of ``ECE(n rows) - ECE(m rows)`` drawn from the window's rows ``terms [n, B]``
    (per-row bin terms: the window's distribution is the baseline's under no drift)."""
    from scipy import stats

    n, m, bins = len(terms), base.m, terms.shape[1]
    rng = np.random.default_rng(0)
    where, gap = np.argmax(terms != 0, 1), terms.sum(1)  # a row's bin (any, at a gap of 0)

    def ece(rows: int) -> np.ndarray:
        pick = rng.integers(0, n, (BOOTSTRAP, rows))
        at = (where[pick] + bins * np.arange(BOOTSTRAP)[:, None]).ravel()
        sums = np.bincount(at, gap[pick].ravel(), BOOTSTRAP * bins).reshape(BOOTSTRAP, bins)
        return np.abs(sums).sum(1) / rows

    null = ece(n) - ece(m)
    sd = null.std(ddof=1)
    diff = live - base.value
    if sd == 0:
        return np.where(diff > null.mean(), 0.0, 1.0)
    return stats.norm.sf((diff - null.mean()) / sd)


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None
