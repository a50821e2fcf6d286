"""``--cluster``: benchmark jobs on a real Dask cluster (scheduler and two workers as processes
on the loopback address) write the same rows as the local process pool, each exactly once, even
when a worker is killed mid-job; without the extra, or without a scheduler, one line says why."""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from cluster_jobs import SlowJob, slow_square
from typer.testing import CliRunner

from bayesify.bench import engines
from bayesify.bench.runner import job_config, job_key, run_jobs
from bayesify.bench.store import ResultsStore
from bayesify.bench.uci.command import UCIBenchOptions, score_function
from bayesify.cli import app
from bayesify.data import DataError, data_root

pytest.importorskip("distributed")


def _rows(path: Path) -> list[tuple]:
    """Every row of the store file as (method, dataset, split, config_hash, status, metrics)."""
    with sqlite3.connect(path) as conn:
        return conn.execute(
            "SELECT method, dataset, split, config_hash, status, metrics FROM runs "
            "ORDER BY method, dataset, split, config_hash"
        ).fetchall()


def test_a_uci_selection_on_the_cluster_equals_the_local_pool(tmp_path, local_dask):
    try:
        (data_root() / "uci" / "yacht").resolve(strict=True)
    except (DataError, FileNotFoundError) as e:
        pytest.skip(f"shared UCI data not found: {e}")
    options = UCIBenchOptions(methods=("mc-dropout",), datasets=("yacht",), splits=2, epochs=2,
                              likelihoods=("homoscedastic",))  # fmt: skip
    [(experiment, _), *_] = jobs = options.jobs()
    assert {e for e, _ in jobs} == {experiment} and len(jobs) == 2
    fn, todo = score_function(experiment), [j for _, j in jobs]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in a cluster job (and a local pool's worker processes)
    try:
        local = run_jobs(experiment, todo, fn, tmp_path / "local.db", progress=False)
    finally:
        torch.set_num_threads(threads)
    remote = run_jobs(experiment, todo, fn, tmp_path / "cluster.db", progress=False,
                      cluster=local_dask.address)  # fmt: skip
    assert len(local.finished) == len(remote.finished) == 2 and not remote.failed
    rows = _rows(tmp_path / "cluster.db")
    assert rows == _rows(tmp_path / "local.db")  # keys, status and every metric's value
    assert {r[4] for r in rows} == {"done"} and "rmse" in rows[0][5]
    with ResultsStore(tmp_path / "cluster.db") as db:  # claimed and written by this process
        assert {(r["host"], r["pid"], r["attempts"]) for r in db.records(experiment)} == {
            (os.uname().nodename, os.getpid(), 1)
        }
    again = run_jobs(experiment, todo, fn, tmp_path / "cluster.db", progress=False,
                     cluster=local_dask.address)  # fmt: skip
    assert len(again.skipped) == 2 and not again.finished


def test_a_worker_killed_mid_job_still_gives_every_row_once(tmp_path, local_dask):
    markers = tmp_path / "started"
    markers.mkdir()
    jobs = [SlowJob("sq", "toy", s, markers=str(markers)) for s in range(6)]
    killed: list[int] = []

    def kill_the_first_worker_of_split_0() -> None:
        deadline = time.time() + 60
        while time.time() < deadline:
            started = sorted(markers.glob("0-*"))
            if started:
                pid = int(started[0].name.split("-")[1])
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_the_first_worker_of_split_0, daemon=True)
    killer.start()
    summary = run_jobs("e", jobs, slow_square, tmp_path / "r.db", progress=False,
                       worker_threads=None, cluster=local_dask.address)  # fmt: skip
    killer.join(5)
    assert killed, "split 0 never started"
    # split 0 ran twice (killed, then on another worker); every row is done, written once
    ran = sorted(p.name for p in markers.glob("0-*"))
    assert len(ran) == 2 and f"0-{killed[0]}" in ran
    assert sorted(k.split for k in summary.finished) == list(range(6)) and not summary.failed
    rows = _rows(tmp_path / "r.db")
    assert len(rows) == 6 and {r[4] for r in rows} == {"done"}
    assert [r[5] for r in rows] == [f'{{"value": {s**2:.1f}}}' for s in range(6)]
    with ResultsStore(tmp_path / "r.db") as db:
        assert {r["attempts"] for r in db.records("e")} == {1}


def test_cluster_errors_are_one_line(tmp_path, monkeypatch):
    runner = CliRunner()
    args = ["bench", "uci", "--methods", "mc-dropout", "--datasets", "yacht", "--splits", "1",
            "--store", str(tmp_path / "r.db"), "--out", str(tmp_path / "uci.md")]  # fmt: skip
    free = f"tcp://127.0.0.1:{_free_port()}"
    monkeypatch.setattr(engines, "CONNECT_TIMEOUT", 1.0)  # dask retries until then
    result = runner.invoke(app, [*args, "--cluster", free])
    assert result.exit_code == 2, result.output
    [line] = result.output.strip().splitlines()
    assert f"no Dask scheduler reachable at '{free}'" in line and "dask scheduler" in line
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if the extra were not installed
    result = runner.invoke(app, [*args, "--cluster", free])
    assert result.exit_code == 2
    assert result.output.strip() == (
        "error: --cluster needs Dask distributed: pip install 'bayesify[cluster]'"
    )


def _free_port() -> int:
    from bayesify.bench.process import free_port

    return free_port()


def test_a_rerun_after_a_killed_client_skips_done_rows_and_reruns_claimed_ones(
    tmp_path, local_dask
):
    markers = tmp_path / "started"
    markers.mkdir()
    jobs = [SlowJob("sq", "toy", s, markers=str(markers)) for s in (1, 2, 3)]
    with ResultsStore(tmp_path / "r.db") as db:  # what a client killed mid-run leaves behind
        for job in jobs[:2]:
            db.claim(job_key("e", job), job_config(job))
        db.finish(job_key("e", jobs[1]), {"value": -1.0}, 0.1, job_config(jobs[1]))
    summary = run_jobs("e", jobs, slow_square, tmp_path / "r.db", progress=False,
                       worker_threads=None, cluster=local_dask.address)  # fmt: skip
    assert [k.split for k in summary.skipped] == [2]
    assert sorted(k.split for k in summary.finished) == [1, 3] and not summary.failed
    assert sorted(p.name.split("-")[0] for p in markers.iterdir()) == ["1", "3"]
    with ResultsStore(tmp_path / "r.db") as db:
        rows = {r["split"]: (r["metrics"], r["attempts"]) for r in db.records("e")}
    assert rows == {1: ({"value": 1.0}, 2), 2: ({"value": -1.0}, 1), 3: ({"value": 9.0}, 1)}
