"""Progress bars for long work: drawn on a terminal, silent elsewhere.

A bar redrawn into a log file or a CI console floods it with carriage-return lines; long runs
log their own milestones (``logging``) instead. ``progress=False`` silences the bar everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tqdm.auto import tqdm


def progress_bar(
    iterable: Iterable[Any] | None = None, *, progress: bool = True, **kwargs: Any
) -> tqdm:
    """``tqdm(iterable, **kwargs)`` shown only when ``progress`` and its stream is a terminal."""
    return tqdm(iterable, disable=None if progress else True, **kwargs)
