"""The results store and the job runner: durable rows, skip-what-is-done, failures recorded."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

import pytest

from bayesify.bench.runner import config_hash, job_config, job_key, run_job, run_jobs
from bayesify.bench.store import ResultsStore, RowDoneError, RowKey

CALLS: list[tuple[str, int]] = []


@dataclass(frozen=True)
class Job:
    method: str
    dataset: str
    split: int
    seed: int = 0
    scale: float = 1.0


def square(job: Job) -> dict[str, float]:
    CALLS.append((job.method, job.split))
    if job.method == "broken":
        raise ZeroDivisionError("this job always fails")
    return {"value": job.split**2 * job.scale}


def test_wal_mode_and_schema(tmp_path):
    path = tmp_path / "r.db"
    ResultsStore(path).close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    cols = [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
    assert {"experiment", "method", "dataset", "split", "seed", "config_hash"} <= set(cols)


def test_cell_api_replaces_and_reads_back(tmp_path):
    store = ResultsStore(tmp_path / "r.db")
    store.add("e", "boston", 0, "MCBN", {"rmse": 3.0}, {"epochs": 5})
    store.add("e", "boston", 0, "MCBN", {"rmse": 2.5}, {"epochs": 6})
    store.add("e", "boston", 1, "MCBN", {"rmse": 4.0})
    assert store.rows("e") == [
        {"dataset": "boston", "split": 0, "method": "MCBN", "rmse": 2.5},
        {"dataset": "boston", "split": 1, "method": "MCBN", "rmse": 4.0},
    ]
    # another connection (another process) sees the committed rows
    assert len(ResultsStore(tmp_path / "r.db").rows("e")) == 2


def test_legacy_results_table_is_carried_over(tmp_path):
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE results (experiment TEXT, dataset TEXT, split INTEGER, method TEXT, "
        "metrics TEXT, settings TEXT, created REAL)"
    )
    conn.execute("INSERT INTO results VALUES ('e', 'yacht', 2, 'CUBN', '{\"pll\": -1.5}', '{}', 1)")
    conn.commit()
    conn.close()
    assert ResultsStore(path).rows("e") == [
        {"dataset": "yacht", "split": 2, "method": "CUBN", "pll": -1.5}
    ]


def test_done_row_is_never_overwritten(tmp_path):
    store = ResultsStore(tmp_path / "r.db")
    key = RowKey("e", "m", "d", 0, 0, "abc")
    assert store.claim(key, {})
    store.finish(key, {"v": 1.0}, 0.1, {})
    assert not store.claim(key, {})
    with pytest.raises(RowDoneError, match="already done"):
        store.finish(key, {"v": 2.0}, 0.1, {})
    assert store.records("e")[0]["metrics"] == {"v": 1.0}


def test_key_depends_on_configuration_not_on_identity_order():
    a, b = Job("m", "d", 1, scale=1.0), Job("m", "d", 1, scale=2.0)
    assert job_config(a) == {"scale": 1.0}
    assert job_key("e", a) != job_key("e", b)
    assert job_key("e", a) == job_key("e", Job("m", "d", 1, 0, 1.0))
    assert config_hash({"x": 1, "y": 2}) == config_hash({"y": 2, "x": 1})
    with pytest.raises(TypeError, match="frozen dataclass"):
        job_key("e", {"method": "m"})


def test_runner_skips_done_jobs_and_records_failures(tmp_path):
    path = tmp_path / "r.db"
    jobs = [Job("sq", "d", s) for s in range(3)] + [Job("broken", "d", 0)]
    CALLS.clear()
    first = run_jobs("e", jobs, square, path, progress=False)
    assert len(first.finished) == 3 and len(first.failed) == 1
    assert "ZeroDivisionError" in next(iter(first.failed.values()))
    store = ResultsStore(path)
    failed = store.records("e", status="failed")
    assert len(failed) == 1 and "this job always fails" in failed[0]["error"]
    created = {r["split"]: r["created"] for r in store.records("e")}
    assert [r["metrics"]["value"] for r in store.records("e")] == [0.0, 1.0, 4.0]

    CALLS.clear()
    second = run_jobs("e", jobs + [Job("sq", "d", 3)], square, path, progress=False)
    # only the new job and the failed one (retried) ran
    assert sorted(CALLS) == [("broken", 0), ("sq", 3)]
    assert len(second.skipped) == 3 and len(second.finished) == 1 and len(second.failed) == 1
    again = {r["split"]: r["created"] for r in ResultsStore(path).records("e") if r["split"] < 3}
    assert again == created
    assert ResultsStore(path).records("e", status="failed")[0]["attempts"] == 2


def test_runner_rejects_bad_workers(tmp_path):
    with pytest.raises(ValueError, match="workers"):
        run_jobs("e", [], square, tmp_path / "r.db", workers=0)


def test_a_job_finished_meanwhile_by_another_run_keeps_the_first_row(tmp_path):
    path = tmp_path / "r.db"
    job = Job("sq", "d", 2)
    other = ResultsStore(path)

    def finished_elsewhere_first(job: Job) -> dict[str, float]:
        key = job_key("e", job)
        other.claim(key, job_config(job))
        other.finish(key, {"value": -1.0}, 0.0, job_config(job))
        return square(job)

    status, _ = run_job(ResultsStore(path), "e", job, finished_elsewhere_first)
    assert status == "skipped"
    assert [r["metrics"] for r in other.records("e")] == [{"value": -1.0}]
