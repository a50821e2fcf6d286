"""A Dask scheduler killed while a ``--cluster`` run waits on it: the run ends with one line
naming the scheduler's address (an error, not a clean exit), the rows in flight stay
``running`` (none is written as failed), the workers stop by themselves, and the next run, on a
new scheduler, reruns the rows that were not done."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import pytest
from cluster_jobs import SlowJob, slow_square
from conftest import start_local_dask

from bayesify.bench.engines import ClusterError
from bayesify.bench.runner import run_jobs
from bayesify.bench.store import ResultsStore

pytest.importorskip("distributed")


def _statuses(path) -> dict[int, str]:
    with ResultsStore(path) as db:
        return {r["split"]: r["status"] for r in db.records("e", status=None)}


def test_a_lost_scheduler_ends_the_run_with_one_line_and_leaves_its_rows_running(tmp_path):
    markers = tmp_path / "started"
    markers.mkdir()
    jobs = [SlowJob("sq", "toy", s, markers=str(markers)) for s in range(8)]
    cluster = start_local_dask(tmp_path / "dask")
    scheduler = cluster.processes[0]

    def kill_the_scheduler_once_a_job_runs() -> None:
        deadline = time.time() + 60
        while time.time() < deadline and not any(markers.iterdir()):
            time.sleep(0.02)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(scheduler.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_the_scheduler_once_a_job_runs, daemon=True)
    killer.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(ClusterError) as lost:
            run_jobs("e", jobs, slow_square, tmp_path / "r.db", progress=False,
                     worker_threads=None, cluster=cluster.address)  # fmt: skip
        seconds = time.perf_counter() - t0
        deadline = time.time() + 30  # workers that lose the scheduler stop by themselves
        while time.time() < deadline and any(p.poll() is None for p in cluster.processes[1:]):
            time.sleep(0.1)
        assert all(p.poll() is not None for p in cluster.processes[1:]), cluster.output()
    finally:
        killer.join(5)
        cluster.stop()
    message = str(lost.value)
    assert "\n" not in message and f"lost the Dask scheduler at {cluster.address!r}" in message
    assert seconds < 50, f"the run took {seconds:.0f} s to notice"
    statuses = _statuses(tmp_path / "r.db")
    assert "failed" not in statuses.values(), statuses
    assert sorted(statuses) == list(range(8)) and "running" in statuses.values()

    again = start_local_dask(tmp_path / "dask2")  # a new scheduler: the rest run, once each
    try:
        summary = run_jobs("e", jobs, slow_square, tmp_path / "r.db", progress=False,
                           worker_threads=None, cluster=again.address)  # fmt: skip
    finally:
        again.stop()
    done_before = sorted(s for s, st in statuses.items() if st == "done")
    assert sorted(k.split for k in summary.skipped) == done_before and not summary.failed
    assert sorted(k.split for k in summary.finished + summary.skipped) == list(range(8))
    assert set(_statuses(tmp_path / "r.db").values()) == {"done"}
