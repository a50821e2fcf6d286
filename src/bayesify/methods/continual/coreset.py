"""Choosing a task's coreset for variational continual learning (Nguyen et al. 2018, §4).

Two ways, as in the paper: a uniformly random subset, or greedy k-center in input space (start
from a random row; add, one at a time, the row whose distance to its nearest chosen row is
largest). Both are seeded and return row indices into the task's training inputs.
"""

from __future__ import annotations

import torch
from torch import Tensor

from bayesify.options import CoresetKind, parse_option

__all__ = ["select_coreset"]


def select_coreset(x: Tensor, size: int, kind: CoresetKind | str, seed: int = 0) -> Tensor:
    """Indices ``[min(size, N)]`` (int64, in selection order) of the coreset of ``x [N, ...]``."""
    kind = parse_option(CoresetKind, kind, option="coreset")
    n = len(x)
    size = min(int(size), n)
    if kind is CoresetKind.NONE or size <= 0:
        return torch.zeros(0, dtype=torch.long)
    gen = torch.Generator().manual_seed(int(seed))
    if kind is CoresetKind.RANDOM:
        return torch.randperm(n, generator=gen)[:size]
    return _k_center(x.reshape(n, -1).double(), size, gen)


def _k_center(x: Tensor, size: int, gen: torch.Generator) -> Tensor:
    """Greedy k-center on rows of ``x [N, D]``: the 2-approximation of the k-center problem."""
    first = int(torch.randint(len(x), (1,), generator=gen))
    chosen = [first]
    sq = (x * x).sum(1)  # [N]
    # squared distance of every row to its nearest chosen row
    nearest = (sq + sq[first] - 2.0 * (x @ x[first])).clamp_min_(0.0)
    nearest[first] = -1.0
    for _ in range(size - 1):
        i = int(nearest.argmax())
        chosen.append(i)
        d = (sq + sq[i] - 2.0 * (x @ x[i])).clamp_min_(0.0)
        torch.minimum(nearest, d, out=nearest)
        nearest[chosen] = -1.0
    return torch.tensor(chosen, dtype=torch.long)
