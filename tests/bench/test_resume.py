"""A real benchmark run killed with SIGKILL part-way resumes without losing or redoing rows, and
parallel workers write the same rows as one process."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
import torch

from bayesify.bench.pool import START_METHODS
from bayesify.bench.runner import run_jobs
from bayesify.bench.store import ResultsStore
from bayesify.bench.toys import noise_toy

CLI = [sys.executable, "-c", "from bayesify.cli import main; main()"]


def _bench(store, out, *extra: str) -> list[str]:
    return [*CLI, "bench", "noise-toy", "--store", str(store), "--out", str(out), "--methods",
            "deterministic,mc-dropout", "--likelihoods", "heteroscedastic", "--splits", "4",
            "--n-train", "400", "--epochs", "25", "--samples", "10", *extra]  # fmt: skip


def _done(store) -> dict[tuple, tuple[float, int]]:
    """(method, split, config_hash) -> (created, attempts) of every done row, read with a plain
    sqlite3 connection (read-only: it never creates the file, which the run refuses empty)."""
    try:
        conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    except sqlite3.OperationalError:  # the run has not made its store yet
        return {}
    try:
        rows = conn.execute(
            "SELECT method, split, config_hash, created, attempts FROM runs WHERE status='done'"
        ).fetchall()
    except sqlite3.OperationalError:  # table not created yet
        return {}
    finally:
        conn.close()
    return {(m, s, h): (c, a) for m, s, h, c, a in rows}


def _keys_logged(text: str, what: str) -> set[tuple]:
    pattern = rf"{what} noise-toy/([\w-]+)/sin-growing-noise/(\d+)/\d+/(\w+)"
    return {(m, int(s), h) for m, s, h in re.findall(pattern, text)}


@pytest.mark.slow
def test_sigkill_then_rerun_resumes_without_recomputing(tmp_path):
    store, out = tmp_path / "results.db", tmp_path / "report"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(tmp_path / "first.log", "w") as log:
        proc = subprocess.Popen(_bench(store, out), stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 300
        while not _done(store) and proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    before = _done(store)
    assert 1 <= len(before) < 8, (
        f"{len(before)} rows done when killed: the test needs a partial run"
    )

    second = subprocess.run(
        _bench(store, out), capture_output=True, text=True, env=env, timeout=600
    )
    assert second.returncode == 0, second.stderr[-2000:]
    after = _done(store)
    # every job's row is there exactly once
    conn = sqlite3.connect(store)
    counts = conn.execute(
        "SELECT method, split, COUNT(*) FROM runs GROUP BY method, split, config_hash"
    ).fetchall()
    assert sorted((m, s) for m, s, _ in counts) == [
        (m, s) for m in ("deterministic", "mc-dropout") for s in range(4)
    ]
    assert all(c == 1 for *_, c in counts)
    assert len(after) == 8
    # rows finished before the kill were not recomputed: same timestamps, one attempt, and the
    # second run's own log says it skipped them and finished only the others
    for key, (created, attempts) in before.items():
        assert after[key] == (created, attempts) and attempts == 1
    log2 = second.stderr
    assert _keys_logged(log2, "skipped") == set(before)
    assert _keys_logged(log2, "finished") == set(after) - set(before)
    assert "8 finished" not in log2
    # the first run's log has no job that the second one ran again
    first_finished = _keys_logged((tmp_path / "first.log").read_text(), "finished")
    assert first_finished <= set(before)
    assert not first_finished & _keys_logged(log2, "finished")
    assert (out / "README.md").read_text().count("| heteroscedastic |") == 2


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the workers
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
def test_two_workers_write_the_same_rows_as_one(tmp_path, one_thread):
    jobs = [
        noise_toy.NoiseToyJob(
            m, noise_toy.DATASET, s, seed=s, likelihood=lik, n_train=100, epochs=3, samples=5
        )  # fmt: skip
        for m in ("deterministic", "mc-dropout")
        for lik in ("homoscedastic", "heteroscedastic")
        for s in range(2)
    ]
    one = run_jobs("e", jobs, noise_toy.score_job, tmp_path / "one.db", progress=False)
    assert len(one.finished) == 8 and not one.failed
    a, pids_a = _rows(tmp_path / "one.db")
    assert pids_a == {os.getpid()}
    for method in START_METHODS:  # workers forked from the fork server, or fresh interpreters
        two = run_jobs("e", jobs, noise_toy.score_job, tmp_path / f"{method}.db", workers=2,
                       progress=False, start_method=method)  # fmt: skip
        assert len(two.finished) == 8 and not two.failed
        b, pids_b = _rows(tmp_path / f"{method}.db")
        assert os.getpid() not in pids_b and len(pids_b) == 2
        _same_rows(a, b)


def _rows(path):
    with ResultsStore(path) as store:
        recs = store.records("e")
    pids = {r["pid"] for r in recs}
    keyed = {(r["method"], r["split"], r["config_hash"]): r["metrics"] for r in recs}
    return keyed, pids


def _same_rows(a, b) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].keys() == b[key].keys()
        for name, value in a[key].items():
            if value is None:  # the correlation of a constant std
                assert b[key][name] is None
            else:
                assert b[key][name] == pytest.approx(value, rel=1e-6, abs=1e-9), (key, name)


def _proc(pid: int | str, name: str) -> str:
    with open(f"/proc/{pid}/{name}") as f:
        return f.read()


def _children(pid: int) -> list[int]:
    """Live child processes of ``pid``, from /proc."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                fields = _proc(d, "stat").rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(d))
    return out


def _workers(run: int) -> list[int]:
    """The run's pool processes: spawned children, or its fork server and the fork server's
    children (the workers)."""
    out = []
    for child in _children(run):
        cmd = _proc(child, "cmdline")
        if "spawn_main" in cmd:
            out.append(child)
        elif "multiprocessing.forkserver" in cmd:
            out += [child, *_children(child)]
    return out


def _alive(pid: int) -> bool:
    try:
        return _proc(pid, "stat").rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


#: a run of long noise-toy jobs in two workers started by ``sys.argv[2]``, into ``sys.argv[1]``
SPAWN_RUN = """
import sys
from bayesify.bench.runner import run_jobs
from bayesify.bench.toys import noise_toy
jobs = [noise_toy.NoiseToyJob("deterministic", noise_toy.DATASET, s, seed=s, n_train=400,
                              epochs=400, samples=10) for s in range(4)]
run_jobs("e", jobs, noise_toy.score_job, sys.argv[1], workers=2, progress=False,
         start_method=sys.argv[2])
"""


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads processes from /proc")
@pytest.mark.parametrize("method", START_METHODS)
def test_workers_stop_when_the_run_that_started_them_is_killed(tmp_path, method):
    store, out = tmp_path / "results.db", tmp_path / "report"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    command = (_bench(store, out, "--workers", "2", "--epochs", "400") if method == "forkserver"
               else [sys.executable, "-c", SPAWN_RUN, str(store), method])  # fmt: skip
    proc = subprocess.Popen(command, env=env, **quiet)
    # forkserver: the fork server and its two workers; spawn: the two workers
    expected = 3 if method == "forkserver" else 2
    try:
        deadline = time.time() + 120
        workers: list[int] = []
        while len(workers) < expected and time.time() < deadline:
            workers = _workers(proc.pid)
            time.sleep(0.2)
        assert len(workers) == expected, f"the run did not start its two workers: {workers}"
        time.sleep(2)  # the workers are in their jobs
        assert proc.poll() is None, "the run ended before it could be killed"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    deadline = time.time() + 20
    while any(_alive(p) for p in workers) and time.time() < deadline:
        time.sleep(0.2)
    left = [p for p in workers if _alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    assert not left, f"workers {left} went on after their run was killed"
