"""glibc's malloc set once for chunked passes: many same-sized temporaries per forward.

By default glibc raises its mmap threshold to the size of the last freed large block and
returns free memory at the top of the heap above twice that; a chunked pass frees its
temporaries (a few MB) after every forward, so the heap was trimmed and touched again thousands
of times: about 1.8 million page faults and as much system time as compute for 600 rows at
T = 500 (benchmarks/memory.md). :func:`tune_allocator` fixes the two thresholds instead (blocks
up to 32 MiB from the heap, up to 128 MiB of free heap kept), once per process, on glibc only,
and not where the user set glibc's own ``MALLOC_*_`` variables or ``BAYESIFY_MALLOPT=0``.
"""

from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)
TRIM_THRESHOLD, MMAP_THRESHOLD = 128 * 2**20, 32 * 2**20
_USER_SETTINGS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_",
                  "MALLOC_MMAP_MAX_")  # fmt: skip
_state: dict[str, bool] = {}


def tune_allocator() -> bool:
    """Set glibc's trim and mmap thresholds (see the module docstring) the first time it is
    called; whether they are set. Elsewhere (macOS, Windows, musl) it does nothing."""
    if "tuned" not in _state:
        _state["tuned"] = _mallopt()
    return _state["tuned"]


def _mallopt() -> bool:
    if os.environ.get("BAYESIFY_MALLOPT") == "0" or any(v in os.environ for v in _USER_SETTINGS):
        return False
    try:
        libc = ctypes.CDLL(None)
        if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
            return False
        return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
            libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
        )
    except (OSError, AttributeError):
        return False
