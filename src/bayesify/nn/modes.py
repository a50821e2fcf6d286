"""Train/eval flags of a caller's network, kept as they were found."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn


@contextmanager
def kept_modes(module: nn.Module) -> Iterator[None]:
    """Restore every submodule's train/eval flag on leaving the block."""
    modes = [(m, m.training) for m in module.modules()]
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training
