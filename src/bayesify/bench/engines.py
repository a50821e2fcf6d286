"""Where a run's jobs execute: :class:`LocalPool` (this machine: this process or a pool of
processes, the default) or :class:`DaskCluster` (the workers of a Dask distributed
scheduler, ``--cluster tcp://host:8786``).

Both get the jobs not yet done and call ``record(key, status, message)`` once per job as it
ends. In the local pool each process claims and writes its own rows (every process opens the
store file). On a cluster the workers only compute (:func:`~bayesify.bench.jobs.compute`: the
metrics, or the error's traceback) and this process claims each row before submitting its job
and writes it when the result arrives, so the workers need no access to the store file and each
row is written once. A worker lost mid-job (killed, its machine gone) has its job rerun by the
scheduler on another worker; only one result comes back. A job whose workers die repeatedly
(Dask's ``distributed.scheduler.allowed-failures``, 3 by default) is recorded as failed and
rerun by the next run. A lost scheduler ends the run with one :class:`ClusterError` line naming
its address; the rows in flight stay ``running`` and the next run reruns them. A
:class:`~bayesify.bench.store.StoreError` a job raises (a damaged search journal) stops either
engine, its rows left to run.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Protocol

from bayesify.bench.jobs import (
    SKIPPED,
    JobFn,
    Outcome,
    compute,
    job_config,
    run_job,
    write_outcome,
)
from bayesify.bench.pool import exit_with_run, start_method_of, worker_context
from bayesify.bench.store import DONE, FAILED, ResultsStore, RowKey, StoreError

log = logging.getLogger(__name__)

CLUSTER_EXTRA = "--cluster needs Dask distributed: pip install 'bayesify[cluster]'"
#: seconds a run waits for the scheduler to answer
CONNECT_TIMEOUT = 30.0


class Record(Protocol):
    def __call__(self, key: RowKey, status: str, message: str) -> None: ...


class Engine(Protocol):
    """Runs ``todo`` (row key -> job, none done yet) of ``experiment`` into the store file
    ``path``, calling ``record`` once per job as it ends."""

    def run(self, experiment: str, todo: dict[RowKey, Any], fn: JobFn, path: str,
            record: Record) -> None: ...  # fmt: skip


class ClusterError(RuntimeError):
    """The cluster given cannot be used (no scheduler answers at the address): one line."""


# --------------------------------------------------------------------------- local pool
_worker_store: ResultsStore | None = None


def _init_worker(path: str, threads: int | None, parent: int | None = None) -> None:
    global _worker_store
    if parent is not None:
        exit_with_run(parent)
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    _worker_store = ResultsStore(path)


def _run_in_worker(experiment: str, job: Any, fn: JobFn) -> tuple[str, str]:
    if _worker_store is None:
        raise RuntimeError("the worker process was not initialised with a store")
    return run_job(_worker_store, experiment, job, fn)


def _record_lost(path: str, key: RowKey, job: Any, error: BaseException) -> None:
    """Mark a job whose worker died as failed (if it had started and is not done)."""
    with ResultsStore(path) as db:
        if db.status(key) not in (None, DONE):
            db.fail(key, f"worker process died: {error}", 0.0, job_config(job))


@dataclass(frozen=True)
class LocalPool:
    """``workers`` processes on this machine (1: this process), started by ``start_method``
    (``forkserver`` or ``spawn``; ``""``: forkserver where the platform has it, see
    :mod:`bayesify.bench.pool`), each with ``worker_threads`` torch threads (None: torch's
    default); ``fn`` must be a module-level function (it is pickled by name)."""

    workers: int = 1
    worker_threads: int | None = 1
    start_method: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.workers, int) or self.workers < 1:
            raise ValueError(f"workers must be a positive integer, got {self.workers!r}")
        start_method_of(self.start_method)

    def run(self, experiment: str, todo: dict[RowKey, Any], fn: JobFn, path: str,
            record: Record) -> None:  # fmt: skip
        workers = min(self.workers, max(1, len(todo)))  # no idle processes for the last jobs
        if workers == 1:
            with ResultsStore(path) as db:
                for key, job in todo.items():
                    record(key, *run_job(db, experiment, job, fn))
            return
        context = worker_context(self.start_method)
        initargs = (path, self.worker_threads, os.getpid())
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker,
                                 initargs=initargs) as pool:  # fmt: skip
            futures: dict[Future, RowKey] = {
                pool.submit(_run_in_worker, experiment, job, fn): key for key, job in todo.items()
            }
            for future in as_completed(futures):
                key = futures[future]
                try:
                    record(key, *future.result())
                except BrokenProcessPool as e:  # a worker died (killed, out of memory)
                    _record_lost(path, key, todo[key], e)
                    record(key, FAILED, f"worker process died: {e}")
                except BaseException:  # a damaged store or journal: the jobs not begun wait
                    pool.shutdown(wait=True, cancel_futures=True)
                    raise


# --------------------------------------------------------------------------- Dask cluster
def _distributed() -> Any:
    """The ``distributed`` package; if absent, one line naming the extra."""
    from bayesify.extras import MissingExtra

    try:
        import distributed
    except ImportError:
        raise MissingExtra(CLUSTER_EXTRA) from None
    return distributed


def _task_error(future: Any) -> str:
    """One line saying why a Dask task gave no result."""
    try:
        error = future.exception()
    except BaseException as e:  # noqa: BLE001 - a cancelled future raises here
        error = e
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


@dataclass(frozen=True)
class DaskCluster:
    """The workers of the Dask scheduler at ``address`` (``tcp://host:8786``), each job with
    ``worker_threads`` torch threads (None: torch's default; start workers with ``--nthreads
    1``). ``fn`` and the jobs travel pickled by reference: the workers need bayesify (and the
    data the jobs read) installed as on this machine. ``timeout``: seconds to reach the
    scheduler."""

    address: str
    worker_threads: int | None = 1
    timeout: float = CONNECT_TIMEOUT

    def connect(self) -> Any:
        """A client of the scheduler; a one-line :class:`ClusterError` if none answers."""
        distributed = _distributed()

        async def probe() -> None:  # a Client that fails to start leaves a noisy finaliser
            comm = await distributed.comm.connect(self.address, timeout=self.timeout)
            await comm.close()

        try:
            asyncio.run(probe())
        except (OSError, TimeoutError, ValueError) as e:
            reason = " ".join(str(e).split()) or type(e).__name__
            raise ClusterError(
                f"no Dask scheduler reachable at {self.address!r} ({reason}); start one with "
                "'dask scheduler' and give its address, tcp://host:8786"
            ) from None
        client = distributed.Client(self.address, timeout=self.timeout, set_as_default=False)
        workers = len(client.nthreads())
        if not workers:
            log.warning("the scheduler at %s has no workers yet; jobs wait for one", self.address)
        else:
            log.info("cluster %s: %d worker(s)", self.address, workers)
        return client

    def run(self, experiment: str, todo: dict[RowKey, Any], fn: JobFn, path: str,
            record: Record) -> None:  # fmt: skip
        distributed = _distributed()
        client = self.connect()
        run_id = uuid.uuid4().hex[:8]
        try:
            with client.as_current(), ResultsStore(path) as db:
                futures: dict[Any, RowKey] = {}
                for key, job in todo.items():
                    if not db.claim(key, job_config(job)):  # done meanwhile by another run
                        record(key, SKIPPED, "")
                        continue
                    future = client.submit(compute, fn, job, self.worker_threads,
                                           key=f"bayesify-job-{run_id}-{len(futures)}",
                                           pure=False)  # fmt: skip
                    futures[future] = key
                for future in distributed.as_completed(futures):
                    key = futures.pop(future)
                    if future.status == "finished":
                        outcome = future.result()
                    elif future.status == "cancelled":  # the scheduler is gone: stop here
                        raise self._lost(future, len(futures) + 1)
                    else:  # fn cannot be unpickled there, its workers kept dying
                        _raise_store_error(future)
                        message = _task_error(future)
                        outcome = Outcome(None, message, message, 0.0)
                    record(key, *write_outcome(db, key, todo[key], outcome))
                    future.release()
        finally:
            client.close()

    def _lost(self, future: Any, in_flight: int) -> ClusterError:
        """The one line of a run whose scheduler went away (its futures were cancelled)."""
        try:
            future.result(timeout=0)
            reason = "cancelled"
        except BaseException as e:  # noqa: BLE001 - FutureCancelledError names the reason
            reason = str(getattr(e, "reason", "") or type(e).__name__)
        return ClusterError(
            f"lost the Dask scheduler at {self.address!r} ({reason}); the {in_flight} row(s) in "
            "flight are left running and the next run reruns them"
        )


def _raise_store_error(future: Any) -> None:
    """Raise a task's :class:`StoreError` (a damaged store or search journal stops the run)."""
    try:
        error = future.exception(timeout=0)
    except BaseException:  # noqa: BLE001 - no exception to look at
        return
    if isinstance(error, StoreError):
        raise error


def engine(workers: int = 1, cluster: str = "", **local: Any) -> Engine:
    """The engine of a run: the Dask cluster at ``cluster`` if given, else the local pool of
    ``workers`` processes (``local``: :class:`LocalPool`'s other settings)."""
    if cluster:
        threads = local.get("worker_threads", 1)
        return DaskCluster(cluster, worker_threads=threads, timeout=CONNECT_TIMEOUT)
    return LocalPool(workers, **local)
