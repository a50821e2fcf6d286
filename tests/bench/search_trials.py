"""Module-level search objectives for tests/bench/test_search.py: spawned worker processes and
a killed subprocess import them by name, so this module imports nothing heavy."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


def bowl(params: dict[str, Any]) -> float:
    """A value with ties: (a - 2)² + |b - 1| rounded down, several points share the minimum."""
    return float(int((params["a"] - 2) ** 2 + abs(params["b"] - 1) // 2))


def logged(path: str, meet: int, hang_at: int, params: dict[str, Any], report: Any):
    """``bowl``, appending (pid, params) to ``path`` first; the ``hang_at``-th call (1-based,
    counted by the file's lines) sleeps for a minute (to be killed there); with ``meet`` > 1,
    waits (up to a minute) until ``meet`` processes have written to ``path``."""
    with open(path, "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "params": params}) + "\n")
    lines = Path(path).read_text().splitlines()
    if len(lines) == hang_at:
        time.sleep(60)
    deadline = time.time() + 60
    while meet > 1 and time.time() < deadline:
        pids = {json.loads(line)["pid"] for line in Path(path).read_text().splitlines()}
        if len(pids) >= meet:
            break
        time.sleep(0.05)
    return bowl(params), ("trained", params["a"], params["b"])


def main(path: str, storage: str) -> None:
    """A search that hangs at its third trial (for the kill test)."""
    from functools import partial

    from bayesify.bench.search import Dimension, SearchSettings, run_search

    space = [Dimension("a", (0, 1, 2, 3)), Dimension("b", (0, 1, 2))]
    run_search(partial(logged, path, 1, 3), space, SearchSettings(storage=storage, study="k"))


if __name__ == "__main__":
    import sys

    main(sys.argv[1], sys.argv[2])
