"""Drift of a model's rolling figures from their baselines, robust to any one feedback request.

Each figure with a baseline (the deferral policy's validation figure; for interval coverage,
the nominal level served) is compared with it: error, NLL and ECE drift when above the baseline
by ``tolerance`` times its size (plus 1e-3, so a negative NLL baseline is handled as well);
interval coverage when off the level by more than ``tolerance · (1 - level)`` and three
binomial standard errors. A figure drifts only if it does so, on at least ``min_count`` rows,
both over the whole window and with the rows of any one feedback request left out: the
figures are sums of per-row terms (:mod:`.figures`), so every leave-one-request-out value is
one subtraction away.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from bayesify.serve.figures import clean, leave_one_out


@dataclass(frozen=True)
class WindowPart:
    """Scored rows of the window (all or accepted): classification ``rows`` are the served
    probabilities ``[N, C]`` and ``labels [N]``, regression ``rows`` the row scores; ``terms``
    per figure (:mod:`.figures`) and ``groups [N]`` the feedback request of each row."""

    rows: Any
    labels: np.ndarray | None
    terms: dict[str, np.ndarray]
    groups: np.ndarray


def drift_rows(
    figures: dict[str, Any],
    parts: dict[str, WindowPart],
    validation: dict[str, Any],
    task: str,
    error_metric: str,
    min_count: int,
    tolerance: float,
) -> list[dict[str, Any]]:
    """Per figure with a baseline and part (``all``, ``accepted``): ``{figure, part, live,
    validation, n, drifting}``."""
    rows = []
    for part in ("all", "accepted"):
        fig, terms, groups = figures[part], parts[part].terms, parts[part].groups
        n = fig["n"]
        for name in ("error", "nll", "ece"):
            ref = clean(_number(validation.get(f"{name}_{part}")))
            if ref is None or (name == "ece" and task != "classification"):
                continue
            drifting = False
            if n >= min_count and name in terms:
                sums, counts = leave_one_out(terms[name], groups)
                with np.errstate(invalid="ignore", divide="ignore"):
                    if name == "ece":
                        value = np.abs(sums).sum(1) / counts
                    elif name == "error" and task == "regression" and error_metric != "mae":
                        value = np.sqrt(sums[:, 0] / counts)  # RMSE
                    else:
                        value = sums[:, 0] / counts
                bound = ref + tolerance * abs(ref) + 1e-3
                drifting = bool(np.all((counts >= min_count) & (value > bound)))
            rows.append(_row(name, part, fig.get(name), ref, n, drifting))
        if fig.get("interval_coverage") is not None:
            live, level = fig["interval_coverage"], fig["interval_level"]
            sums, counts = leave_one_out(terms["interval_coverage"], groups)
            with np.errstate(invalid="ignore", divide="ignore"):
                cov, lvl = sums[:, 0] / counts, sums[:, 1] / counts
                band = np.maximum(tolerance * (1 - lvl), 3 * np.sqrt(lvl * (1 - lvl) / counts))
            drifting = bool(np.all((counts >= min_count) & (np.abs(cov - lvl) > band)))
            rows.append(_row("interval_coverage", part, live, level, n, drifting))
    return rows


def _row(figure: str, part: str, live: float | None, ref: float, n: int,
         drifting: bool) -> dict[str, Any]:  # fmt: skip
    return {"figure": figure, "part": part, "live": live, "validation": ref, "n": n,
            "drifting": bool(drifting)}  # fmt: skip


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None
