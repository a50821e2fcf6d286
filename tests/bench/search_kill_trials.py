"""A small grid search run in a subprocess that the kill tests (test_search_kill.py) SIGKILL at
a random moment; it imports nothing heavy before the search starts."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPACE_VALUES = {"a": (1, 2), "b": (0, 1)}


def value(params: dict[str, Any]) -> float:
    """A bowl with its one minimum at a=2, b=1 (the pick does not depend on the order)."""
    return float((params["a"] - 2) ** 2 + (params["b"] - 1) ** 2)


def objective(pause: float, params: dict[str, Any], report: Any) -> tuple[float, Any]:
    """``value`` after ``pause`` seconds (a trial that takes a while, to be killed in)."""
    time.sleep(pause)
    return value(params), ("trained", params["a"], params["b"])


def space() -> list:
    from bayesify.bench.search import Dimension

    return [Dimension(name, values) for name, values in SPACE_VALUES.items()]


def main(storage: str, ready: str, pause: float) -> None:
    """Run the search on the journal ``storage``, touching ``ready`` just before it starts."""
    from functools import partial

    from bayesify.bench.search import SearchSettings, run_search

    dims = space()
    settings = SearchSettings(storage=storage, study="kill")
    Path(ready).write_text("")
    run_search(partial(objective, pause), dims, settings)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))


@dataclass(frozen=True)
class SearchJob:
    """A benchmark job whose work is a grid search on the journal ``storage``."""

    method: str
    dataset: str
    split: int
    seed: int = 0
    storage: str = ""


def search_job(job: SearchJob) -> dict[str, float]:
    """The job's search (study named by its split): the best value found."""
    from functools import partial

    from bayesify.bench.search import SearchSettings, run_search

    found = run_search(partial(objective, 0.0), space(),
                       SearchSettings(storage=job.storage, study=f"job{job.split}"))  # fmt: skip
    return {"value": found.value}
