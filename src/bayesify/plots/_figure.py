"""The one way figures are made and saved: matplotlib's object API, no pyplot state, no backend.

``Figure`` objects that never touch pyplot need no GUI backend and no ``matplotlib.use``; they are
freed when the last reference goes, so nothing has to be closed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from bayesify.atomic import atomic_path


def new_figure(*, figsize: tuple[float, float], **subplots: Any) -> tuple[Figure, Any]:
    """A figure and its axes (``Figure.subplots`` keywords: ``nrows``, ``ncols``, ``sharex``...)."""
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(**subplots)


def save_figure(fig: Figure, path: str | Path | None, dpi: int = 110) -> Figure:
    """Save ``fig`` as ``path`` (folders created) when a path is given; returns ``fig``."""
    if path is not None:
        with atomic_path(path) as tmp:  # the suffix of tmp is path's: it picks the format
            fig.savefig(tmp, dpi=dpi, bbox_inches="tight")
    return fig
