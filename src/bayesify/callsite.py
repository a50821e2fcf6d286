"""Where a warning points: the caller's line outside bayesify, however deep inside bayesify it
was raised (``warnings.warn``'s ``skip_file_prefixes`` from Python 3.12 does the same)."""

from __future__ import annotations

import functools
import os
import sys

#: every file of the package lies under this folder
PACKAGE_DIR = os.path.dirname(os.path.realpath(__file__)) + os.sep


@functools.lru_cache(maxsize=1024)
def _inside(filename: str) -> bool:
    return os.path.realpath(filename).startswith(PACKAGE_DIR)


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a ``warnings.warn`` in the calling function name the first
    frame outside the package (the user's code, or the CLI's framework). Cheap: a walk up the
    stack with one cached path check per file."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and _inside(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level
