"""A Predictive -> the per-row output fields of a prediction record (one array per field)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from bayesify.posthoc.conformal import Conformal
from bayesify.predictive import Predictive, Task
from bayesify.predictor.result import label_array

#: rows per block of the mixture-quantile root finding (its temporaries are [2, T, rows] float64)
INTERVAL_ROWS = 2048


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().double().numpy()


def output_columns(
    pred: Predictive,
    level: float,
    conformal: Conformal | None = None,
    class_labels: list[Any] | None = None,
    generator: torch.Generator | None = None,
) -> dict[str, np.ndarray]:
    """The output fields of ``pred``'s N rows, each an array with first axis N.

    Intervals and prediction sets are ``conformal``'s when given, else the predictive's own
    (equal-tailed mixture interval; smallest set of classes whose mean probability reaches
    ``level``). Regression ``samples`` is ``[N, T]``, classification ``[N, T, C]``; labels
    are ``class_labels`` by index when given, else class indices.
    """
    if pred.task is Task.REGRESSION:
        return _regression(pred, level, conformal)
    probs = pred.mean  # [N, C]
    idx = probs.argmax(-1).cpu().numpy()
    names = class_labels
    cols = {
        "label": label_array([names[i] for i in idx]) if names else idx,
        "probabilities": _np(probs),
        "entropy": _np(pred.entropy),
        "mutual_information": _np(pred.mutual_information),
        "expected_entropy": _np(pred.expected_entropy),
    }
    if conformal is not None:
        members = conformal.prediction_set(pred, level, generator=generator)
    else:
        members = pred.prediction_set(level)  # [N, C] bool
    members = members.cpu().numpy()
    cols["prediction_set"] = np.empty(len(members), dtype=object)
    cols["prediction_set"][:] = [
        [names[j] if names else int(j) for j in np.flatnonzero(r)] for r in members
    ]
    cols["samples"] = _np(pred.samples.transpose(0, 1))  # [N, T, C]
    return cols


def _regression(
    pred: Predictive, level: float, conformal: Conformal | None
) -> dict[str, np.ndarray]:
    cols = {
        "mean": _np(pred.mean),
        "std": _np(pred.std),
        "epistemic_variance": _np(pred.epistemic_variance),
        "aleatoric_variance": _np(pred.aleatoric_variance),
    }
    if conformal is not None:
        conformal.check_rows_for(level)
        lower, upper = conformal.interval(pred, level)
    else:  # root finding over [K, T, rows] at a time: blocks bound memory and time
        parts = [pred[a : a + INTERVAL_ROWS].interval(level)
                 for a in range(0, len(pred), INTERVAL_ROWS)]  # fmt: skip
        lower = torch.cat([lo for lo, _ in parts])
        upper = torch.cat([hi for _, hi in parts])
    cols["lower"], cols["upper"] = _np(lower), _np(upper)
    cols["samples"] = _np(pred.samples.T)  # [N, T]
    return cols
