"""One snapshot of a model version's monitoring, as the record's history keeps it.

A snapshot is the dict the status page's time series read (its keys are a contract)::

    {"time": unix seconds, "served": rows served so far, "scored": rows in the window,
     "deferral_rate": float or None (None: the model has no deferral policy),
     "latency_p50_ms": float or None, "latency_p99_ms": float or None,
     "all": {figure: value}, "accepted": {figure: value}, "baseline": {figure: value},
     "drifting": ["error_all", ...]}

Figures are those the rolling window computes (classification: accuracy, error, nll, ece;
regression: error, nll, interval_coverage), None where undefined (an empty window, a figure
without a value). ``baseline`` holds the validation figures of all rows the deferral policy
was fitted on (``accuracy`` is one minus its error) and, for interval coverage, the nominal
level served; None where there is none.
"""

from __future__ import annotations

import math
from typing import Any

FIGURES = {"classification": ("accuracy", "error", "nll", "ece"),
           "regression": ("error", "nll", "interval_coverage")}  # fmt: skip


def _value(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)


def snapshot(now: float, figures: dict[str, Any], task: str, has_policy: bool,
             drifting: list[str]) -> dict[str, Any]:  # fmt: skip
    """The snapshot of ``figures`` (``Monitor.figures()``) at unix time ``now``."""
    names = FIGURES["classification" if task == "classification" else "regression"]
    validation = figures.get("validation") or {}
    baseline: dict[str, float | None] = {}
    for name in names:
        if name == "accuracy":
            error = _value(validation.get("error_all"))
            baseline[name] = None if error is None else 1.0 - error
        elif name == "interval_coverage":
            baseline[name] = _value(figures["all"].get("interval_level"))
        else:
            baseline[name] = _value(validation.get(f"{name}_all"))
    latency = figures.get("latency_ms", {})
    return {
        "time": float(now),
        "served": int(figures["served"]),
        "scored": int(figures["scored"]),
        "deferral_rate": _value(figures.get("deferral_rate")) if has_policy else None,
        "latency_p50_ms": _value(latency.get("p50")),
        "latency_p99_ms": _value(latency.get("p99")),
        "all": {n: _value(figures["all"].get(n)) for n in names},
        "accepted": {n: _value(figures["accepted"].get(n)) for n in names},
        "baseline": baseline,
        "drifting": sorted(drifting),
    }
