"""Run benchmark jobs into a results store: finished jobs are skipped, the rest run and each
writes its row the moment it is done.

A job is a frozen dataclass with the fields ``method``, ``dataset``, ``split`` and ``seed``; its
other fields are its configuration, hashed (canonical JSON, SHA-256) into the row key, so
changing any setting makes a new row instead of reusing an old one (:mod:`bayesify.bench.jobs`).
``fn(job)`` computes the job's metrics (a JSON-able dict)::

    @dataclass(frozen=True)
    class Job:
        method: str
        dataset: str
        split: int
        seed: int = 0
        epochs: int = 40

    summary = run_jobs("my-experiment", jobs, score_job, "results.db", workers=2)

Kill the run at any moment and run the same call again: it skips the done rows and redoes
only the jobs that were in progress (or had failed); two runs of the same jobs at once may both
run a job, and the first result written is kept. With ``workers > 1`` the jobs run in
``workers`` spawned processes, each with its own store connection; with ``cluster="tcp://host:8786"``
they run on the workers of that Dask scheduler and this process writes the rows
(:mod:`bayesify.bench.engines`). ``fn`` must then be a module-level function (it is pickled by
name). A job that raises is recorded as ``failed`` with its traceback and does not stop the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.contrib.logging import logging_redirect_tqdm

from bayesify.bench.engines import engine as make_engine
from bayesify.bench.jobs import (  # noqa: F401 - the job helpers' older home
    IDENTITY_FIELDS,
    JobFn,
    config_hash,
    job_config,
    job_key,
    run_job,
)
from bayesify.bench.store import DONE, FAILED, ResultsStore, RowKey
from bayesify.progress import progress_bar

log = logging.getLogger(__name__)


@dataclass
class RunSummary:
    """What a call of :func:`run_jobs` did: keys skipped (already done), finished, failed
    (with the last line of each error)."""

    skipped: list[RowKey] = field(default_factory=list)
    finished: list[RowKey] = field(default_factory=list)
    failed: dict[RowKey, str] = field(default_factory=dict)
    seconds: float = 0.0

    def __str__(self) -> str:
        return (f"{len(self.finished)} finished, {len(self.skipped)} skipped (already done), "
                f"{len(self.failed)} failed in {self.seconds:.1f} s")  # fmt: skip


def run_jobs(
    experiment: str,
    jobs: Sequence[Any],
    fn: JobFn,
    store: str | Path,
    *,
    workers: int = 1,
    worker_threads: int | None = 1,
    progress: bool = True,
    start_method: str = "",
    cluster: str = "",
) -> RunSummary:
    """Run every job of ``jobs`` not yet done in the store file ``store``; returns a summary.

    ``workers``: processes (1: this process; never more than the jobs left to run).
    ``worker_threads``: torch threads per worker process or job (None: torch's default).
    ``start_method``: ``forkserver`` or ``spawn`` (``""``: forkserver where the platform has
    it; see :mod:`bayesify.bench.pool`).
    ``cluster``: the address of a Dask scheduler (``tcp://host:8786``) whose workers run the
    jobs instead of local processes (``workers`` and ``start_method`` then unused).
    """
    engine = make_engine(workers, cluster, worker_threads=worker_threads,
                         start_method=start_method)  # fmt: skip
    t0 = time.perf_counter()
    summary = RunSummary()
    unique: dict[RowKey, Any] = {}
    for job in jobs:
        unique.setdefault(job_key(experiment, job), job)
    if len(unique) < len(jobs):
        log.warning("%d duplicate job(s) dropped", len(jobs) - len(unique))
    path = str(store)
    with ResultsStore(path) as db:
        done = db.done_keys(experiment)
    todo = {k: j for k, j in unique.items() if k not in done}
    for key in unique:
        if key in done:
            summary.skipped.append(key)
            log.info("skipped %s (done)", key)
    log.info(
        "%s: %d job(s) to run, %d already done", experiment, len(todo), len(done & set(unique))
    )

    bar = progress_bar(total=len(todo), desc=experiment, unit="job", progress=progress)

    def record(key: RowKey, status: str, message: str) -> None:
        if status == DONE:
            summary.finished.append(key)
            log.info("finished %s in %s", key, message)
        elif status == FAILED:
            summary.failed[key] = message
            log.warning("failed %s: %s", key, message)
        else:
            summary.skipped.append(key)
            log.info("skipped %s (done by another run)", key)
        bar.set_postfix_str(str(key), refresh=False)
        bar.update()

    with logging_redirect_tqdm(), bar:
        if todo:
            engine.run(experiment, todo, fn, path, record)
    summary.seconds = time.perf_counter() - t0
    log.info("%s: %s", experiment, summary)
    return summary


def stored_rows(store: str | Path, experiment: str, jobs: Sequence[Any]) -> list[dict[str, Any]]:
    """The rows of ``jobs`` in the store file ``store`` (any status), in the store's order: what a
    page is written from after :func:`run_jobs`."""
    keys = {job_key(experiment, j) for j in jobs}
    with ResultsStore(store) as db:
        return [r for r in db.records(experiment) if RowKey.of(r) in keys]
