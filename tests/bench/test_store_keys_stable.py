"""The committed UCI results still resume after the benchmarks moved into their own folders.

A row's key is its experiment, method, dataset, split, seed and a hash of the job's other fields
(:mod:`bayesify.bench.jobs`), never a module path; so the jobs that the commands of
``benchmarks/uci.md`` describe find their rows in ``benchmarks/uci/store.jsonl.gz`` (exported
before the move) and none runs again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bayesify.bench.runner import run_jobs
from bayesify.bench.uci.command import UCIBenchOptions
from bayesify.bench.uci.recover import seed_store

STORE = Path(__file__).resolve().parents[2] / "benchmarks" / "uci" / "store.jsonl.gz"


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("uci") / "uci.db"
    seed_store(store, (str(STORE),))
    return store


def _never(job: Any) -> dict[str, Any]:
    raise AssertionError(f"{job} ran again")


@pytest.mark.parametrize(
    ("selection", "rows"),
    [  # the runs benchmarks/uci.md lists, as `bayesify bench uci` options
        ({"methods": ("mc-dropout",), "datasets": ("all",), "splits": 20}, 330),
        ({"methods": ("ensemble",), "datasets": ("all",), "splits": 0}, 165),
        ({"methods": ("bbb", "ibnn", "stochastic-norm", "mcbn")}, 120),
        ({"protocol": "teye", "splits": 0}, 50),
    ],
)
def test_an_old_store_resumes_with_no_job_run_again(
    seeded: Path, selection: dict[str, Any], rows: int
) -> None:
    store = seeded  # nothing runs, so nothing is written: every case reads the same store
    opts = UCIBenchOptions(**{"protocol": "gal", **selection, "store": str(store)})
    by_experiment: dict[str, list[Any]] = {}
    for experiment, job in opts.jobs():
        by_experiment.setdefault(experiment, []).append(job)
    skipped = 0
    for experiment, jobs in by_experiment.items():
        summary = run_jobs(experiment, jobs, _never, store, progress=False)
        assert not summary.finished and not summary.failed, summary
        skipped += len(summary.skipped)
    assert skipped == rows
