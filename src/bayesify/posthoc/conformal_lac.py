"""Split conformal's least ambiguous set-valued classifier (Sadinle, Lei & Wasserman 2019).

The conformity score of class ``y`` is ``1 - p̂_y``, one minus its mean predicted probability;
the set at level ``1 - α`` holds every class with ``1 - p̂_y ≤ q̂``, i.e. ``p̂_y ≥ 1 - q̂``.
Among sets with the coverage guarantee these have the smallest expected size when ``p̂`` is the
true conditional law; their coverage is not adaptive to how hard a row is (APS's is), and a row
whose every class is unlikely gets an empty set.
"""

from __future__ import annotations

import torch
from torch import Tensor


def lac_scores(probs: Tensor) -> Tensor:
    """Every class's score ``1 - p`` for class probabilities ``[N, C]``: ``[N, C]`` float64."""
    return 1.0 - probs.to(torch.float64)
