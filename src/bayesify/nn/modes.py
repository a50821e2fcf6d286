"""Train/eval flags of a caller's network, kept as they were found."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
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


@contextmanager
def eval_mode(module: nn.Module, modules: Sequence[nn.Module] | None = None) -> Iterator[None]:
    """``module.eval()`` inside the block, every submodule's flag as it was after it.

    A network already in eval mode is left untouched: ``.eval()`` and the restore write an
    attribute on every submodule through ``nn.Module.__setattr__``, about a millisecond per
    call on a small network, which a server pays on every pass. ``modules``: ``module``'s
    ``modules()`` when the caller keeps them (a walk saved)."""
    modes = [(m, m.training) for m in (module.modules() if modules is None else modules)]
    if any(training for _, training in modes):
        module.eval()
    try:
        yield
    finally:
        for m, training in modes:
            if m.training != training:
                m.training = training
