"""Run benchmark jobs into a results store: finished jobs are skipped, the rest run and each
writes its row the moment it is done.

A job is a frozen dataclass with the fields ``method``, ``dataset``, ``split`` and ``seed``; its
other fields are its configuration, hashed (canonical JSON, SHA-256) into the row key, so
changing any setting makes a new row instead of reusing an old one. ``fn(job)`` computes the
job's metrics (a JSON-able dict)::

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
``workers`` spawned processes, each with its own store connection; ``fn`` must then be a
module-level function (it is pickled by name). A job that raises is recorded as ``failed`` with
its traceback and does not stop the run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import multiprocessing
import os
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.contrib.logging import logging_redirect_tqdm

from bayesify.bench.store import DONE, FAILED, ResultsStore, RowDoneError, RowKey
from bayesify.progress import progress_bar

log = logging.getLogger(__name__)

IDENTITY_FIELDS = ("method", "dataset", "split", "seed")
ROW_KEY = "row_key"  # field metadata: when a job field is part of its row key (key_field)
JobFn = Callable[[Any], dict[str, Any]]


def job_config(job: Any) -> dict[str, Any]:
    """A job's configuration: its fields other than method, dataset, split and seed, less
    those :func:`key_field` leaves out."""
    if not dataclasses.is_dataclass(job) or isinstance(job, type):
        raise TypeError(f"a job is a frozen dataclass instance, got {type(job).__name__}")
    missing = [f for f in IDENTITY_FIELDS if not hasattr(job, f)]
    if missing:
        raise ValueError(
            f"job {type(job).__name__} lacks the field(s) {missing}; a job needs "
            f"{', '.join(IDENTITY_FIELDS)}"
        )
    out = {k: v for k, v in dataclasses.asdict(job).items() if k not in IDENTITY_FIELDS}
    for f in dataclasses.fields(job):  # fields added later keep the rows written before them
        rule = f.metadata.get(ROW_KEY)
        if rule == "never" or (rule == "if-set" and getattr(job, f.name) == f.default):
            out.pop(f.name, None)
    return out


def key_field(default: Any, rule: str = "if-set") -> Any:
    """A job field outside the row key (``rule`` "never": how a job runs, not what it
    computes) or in it only when not ``default`` ("if-set": a setting added after rows were
    written, whose default is what those rows did)."""
    if rule not in ("never", "if-set"):
        raise ValueError(f"rule must be never or if-set, got {rule!r}")
    return dataclasses.field(default=default, metadata={ROW_KEY: rule})


def config_hash(config: dict[str, Any]) -> str:
    """16 hex digits of SHA-256 over the configuration's canonical JSON (sorted keys)."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def job_key(experiment: str, job: Any) -> RowKey:
    """The store row of ``job`` in ``experiment``."""
    config = job_config(job)  # checks the job first
    return RowKey(experiment, str(job.method), str(job.dataset), int(job.split), int(job.seed),
                  config_hash(config))  # fmt: skip


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


def run_job(store: ResultsStore, experiment: str, job: Any, fn: JobFn) -> tuple[str, str]:
    """Run one job into ``store`` unless it is done: ``(status, message)`` with status
    ``skipped``, ``done`` or ``failed``."""
    key, config = job_key(experiment, job), job_config(job)
    if not store.claim(key, config):
        return "skipped", ""
    t0 = time.perf_counter()
    try:
        metrics = fn(job)
        if not isinstance(metrics, dict):
            raise TypeError(f"a job function returns a dict of metrics, got {type(metrics)}")
    except Exception as e:  # noqa: BLE001 - a failed job is recorded, the run goes on
        seconds = time.perf_counter() - t0
        store.fail(key, traceback.format_exc(), seconds, config)
        return FAILED, f"{type(e).__name__}: {e}"
    seconds = time.perf_counter() - t0
    try:
        store.finish(key, metrics, seconds, config)
    except RowDoneError:  # a concurrent run of the same jobs finished it first: keep its row
        return "skipped", ""
    return DONE, f"{seconds:.1f} s"


_worker_store: ResultsStore | None = None


def _exit_with_parent(parent: int, every: float = 1.0) -> None:
    """Stop this worker once the process that started it is gone (killed with SIGTERM or
    SIGKILL, which do not reach the workers): an orphan would go on training jobs nobody
    waits for. The row in progress stays ``running`` and is rerun by the next run."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _init_worker(path: str, threads: int | None, parent: int | None = None) -> None:
    global _worker_store
    if parent is not None:
        _exit_with_parent(parent)
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    _worker_store = ResultsStore(path)


def _run_in_worker(experiment: str, job: Any, fn: JobFn) -> tuple[str, str]:
    if _worker_store is None:
        raise RuntimeError("the worker process was not initialised with a store")
    return run_job(_worker_store, experiment, job, fn)


def run_jobs(
    experiment: str,
    jobs: Sequence[Any],
    fn: JobFn,
    store: str | Path,
    *,
    workers: int = 1,
    worker_threads: int | None = 1,
    progress: bool = True,
    start_method: str = "spawn",
) -> RunSummary:
    """Run every job of ``jobs`` not yet done in the store file ``store``; returns a summary.

    ``workers``: processes (1: this process; never more than the jobs left to run).
    ``worker_threads``: torch threads per worker process (None: torch's default).
    ``start_method``: ``spawn`` or ``forkserver``.
    """
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    if start_method not in ("spawn", "forkserver"):
        raise ValueError(f"start_method must be spawn or forkserver, got {start_method!r}")
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

    workers = min(workers, max(1, len(todo)))  # no idle processes for the last few jobs
    bar = progress_bar(total=len(todo), desc=experiment, unit="job", progress=progress)
    with logging_redirect_tqdm(), bar:
        if workers == 1:
            with ResultsStore(path) as db:
                for key, job in todo.items():
                    bar.set_postfix_str(str(key), refresh=False)
                    record(key, *run_job(db, experiment, job, fn))
                    bar.update()
        else:
            context = multiprocessing.get_context(start_method)
            initargs = (path, worker_threads, os.getpid())
            with ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker,
                                     initargs=initargs) as pool:  # fmt: skip
                futures: dict[Future, RowKey] = {
                    pool.submit(_run_in_worker, experiment, job, fn): key
                    for key, job in todo.items()
                }
                for future in as_completed(futures):
                    key = futures[future]
                    try:
                        record(key, *future.result())
                    except BrokenProcessPool as e:  # a worker died (killed, out of memory)
                        _record_lost(path, key, todo[key], e)
                        record(key, FAILED, f"worker process died: {e}")
                    bar.update()
    summary.seconds = time.perf_counter() - t0
    log.info("%s: %s", experiment, summary)
    return summary


def _record_lost(path: str, key: RowKey, job: Any, error: BaseException) -> None:
    """Mark a job whose worker died as failed (if it had started and is not done)."""
    with ResultsStore(path) as db:
        if db.status(key) not in (None, DONE):
            db.fail(key, f"worker process died: {error}", 0.0, job_config(job))
