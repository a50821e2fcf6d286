"""Where a warning points: the caller's line outside bayesify, however deep inside bayesify it
was raised (``warnings.warn``'s ``skip_file_prefixes`` from Python 3.12 does the same)."""

from __future__ import annotations

import sys
from pathlib import Path

#: every file of the package lies under this folder
PACKAGE_DIR = str(Path(__file__).resolve().parent)


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a ``warnings.warn`` in the calling function name the first
    frame outside the package (the user's code, or the CLI's framework)."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(
        PACKAGE_DIR
    ):
        frame, level = frame.f_back, level + 1
    return level
