"""Seeded blocks for code that draws from torch's global RNG and takes no generator.

torch's layer initialisers (``nn.Linear(...)``, ``reset_parameters``) draw from the global RNG.
:func:`seeded` runs such a block from a given seed and restores the caller's RNG state after it,
so library code never leaves the global RNG seeded; everything that can take a
``torch.Generator`` or a ``seed=`` gets one passed explicitly instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["seeded"]


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Inside the block torch's global CPU RNG starts from ``seed``; afterwards the caller's
    RNG state is back as it was (``torch.random.fork_rng``).

        with seeded(0):
            net = mlp(13)  # the same initial weights on every run
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield
