"""The conformity scores of :mod:`bayesify.posthoc.conformal`: which score (``ConformalMethod``),
every class's APS / RAPS / LAC score, the normalized regression score's parts, and the checks of
a level and of class labels."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import torch
from torch import Tensor

from bayesify.posthoc.conformal_lac import lac_scores
from bayesify.predictive import Predictive


class ConformalMethod(StrEnum):
    """Which conformity score is used (``auto``: normalized for regression, aps otherwise)."""

    AUTO = "auto"
    NORMALIZED = "normalized"
    APS = "aps"
    RAPS = "raps"
    LAC = "lac"  # split conformal's score 1 - p_y (Sadinle et al. 2019; conformal_lac.py)


REGRESSION_KINDS = (ConformalMethod.NORMALIZED,)
CLASSIFICATION_KINDS = (ConformalMethod.APS, ConformalMethod.RAPS, ConformalMethod.LAC)


def check_level(level: float) -> float:
    if isinstance(level, bool) or not isinstance(level, int | float) or not 0 < level < 1:
        raise ValueError(f"level must be a float strictly between 0 and 1, got {level!r}")
    return float(level)


def class_labels(pred: Predictive, y: Tensor) -> Tensor:
    y = pred._targets(y)
    classes = pred.samples.shape[-1]
    labels = y.long()
    bad = (labels != y) | (labels < 0) | (labels >= classes)
    if bad.any():
        raise ValueError(
            f"class labels must be whole numbers in 0..{classes - 1}, got {y[bad][:5].tolist()}"
        )
    return labels


def regression_parts(pred: Predictive) -> tuple[Tensor, Tensor]:
    mean, std = pred.mean.to(torch.float64), pred.std.to(torch.float64)
    if (std <= 0).any():
        raise ValueError(
            f"normalized conformal scores need a positive predictive std; {int((std <= 0).sum())}"
            " row(s) have std 0 (fit the noise variance, or use more samples)"
        )
    return mean, std


def class_scores(
    probs: Tensor,
    randomized: bool = False,
    k_reg: int = 0,
    lam: float = 0.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Every class's APS / RAPS score for class probabilities ``[N, C]``: ``[N, C]`` float64.

    The probability mass of the classes ranked above it (ties: lower index first), plus
    ``U ·`` its own probability when ``randomized`` (U ~ U(0, 1), one per row shared by its
    classes), plus ``lam · max(0, rank − k_reg)`` with ranks from 1. The set ``{score ≤ q̂}``
    of the non-randomized score is the smallest top set whose mass reaches q̂: never empty.
    """
    probs = probs.to(torch.float64)
    ranked, order = probs.sort(dim=-1, descending=True, stable=True)  # [N, C]
    score = torch.cat([torch.zeros_like(ranked[:, :1]), ranked.cumsum(-1)[:, :-1]], -1)
    if randomized:
        u = torch.rand((len(probs), 1), generator=generator, dtype=torch.float64)
        score = score + u.to(probs.device) * ranked
    rank = torch.arange(1, probs.shape[-1] + 1, device=probs.device, dtype=torch.float64)
    score = score + lam * (rank - k_reg).clamp_min(0)
    return torch.empty_like(score).scatter(-1, order, score)


def kind_scores(kind: ConformalMethod, probs: Tensor, *options: Any) -> Tensor:
    """Every class's score ``[N, C]`` under ``kind`` (lac, else APS / RAPS's options)."""
    return lac_scores(probs) if kind is ConformalMethod.LAC else class_scores(probs, *options)
