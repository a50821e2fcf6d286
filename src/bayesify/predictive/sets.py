"""Prediction sets and label draws from class probabilities ``[N, C]``."""

from __future__ import annotations

import torch
from torch import Tensor


def top_mass_set(probs: Tensor, level: float) -> Tensor:
    """The smallest set of classes whose probability reaches ``level``, per row: bool ``[N, C]``.

    Classes join in order of decreasing probability until their total is at least ``level``
    (the class that crosses it is included; ties keep the lower class index first). Sums are
    compared with a slack of a few float epsilons of ``probs``' dtype, so that e.g. 0.5 + 0.4
    reaches 0.9 in float32.
    """
    slack = 8 * torch.finfo(probs.dtype).eps
    ranked, order = probs.sort(dim=-1, descending=True, stable=True)  # [N, C]
    before = ranked.cumsum(-1) - ranked  # mass ranked strictly above each class
    keep_ranked = before < level - slack  # [N, C]; the crossing class has before < level
    keep_ranked[:, 0] = True
    return torch.zeros_like(keep_ranked).scatter(-1, order, keep_ranked)


def sample_labels(probs: Tensor, n: int, generator: torch.Generator | None = None) -> Tensor:
    """``n`` independent labels per row from class probabilities ``[N, C]``: int64 ``[n, N]``."""
    return torch.multinomial(probs, n, replacement=True, generator=generator).T.contiguous()
