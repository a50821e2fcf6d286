"""The record on its own (no server): one row scored exactly once when two monitors on one
store (threads with their own connections, processes, PostgreSQL) receive its outcome at the
same time; figures that follow every scored row and survive a reopened store; retention by
rows and by age; the schema's migration from version 1 and the refusal of a newer one."""

from __future__ import annotations

import math
import multiprocessing
import sqlite3
import threading
import time

import numpy as np
import pytest

from bayesify.serve.folders import scan
from bayesify.serve.monitor import ACCEPTED, ALREADY, UNKNOWN, Monitor
from bayesify.serve.record import DEFAULT_NAME, Record, Retention
from bayesify.serve.record_schema import MIGRATIONS, SCHEMA_VERSION, NewerSchema, statements

from .postgres import fresh_database, running_postgres

CLASSES = ["a", "b", "c"]


def _monitor(store: Record, **kw) -> Monitor:
    kw = {"min_count": 20, "max_feedback_rows": 10, "window": 100, **kw}
    return Monitor("classification", CLASSES, {"error_all": 0.1}, name="m", version="1",
                   store=store, **kw)  # fmt: skip


def _rows(n: int, seed: int) -> tuple[list[dict], list[int]]:
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.ones(3), n)
    return [{"probabilities": p.tolist(), "defer": bool(p.max() < 0.5)} for p in probs], list(
        rng.integers(0, 3, n)
    )


def _send_all(mon: Monitor, ids: list[str], labels: list[int], out: list) -> None:
    for start in range(0, len(ids), 10):  # feedback requests of 10 outcomes
        for i, y in zip(ids[start:start + 10], labels[start:start + 10], strict=True):  # fmt: skip
            out.append((i, mon.feedback(i, float(y))[0]))
        mon.refresh()


def _figures(mon: Monitor) -> dict:
    f = mon.figures()
    return {k: f[k] for k in ("served", "feedback", "scored", "all", "accepted", "reliability")}


def test_two_monitors_on_one_file_score_each_row_once_and_agree(tmp_path):
    path = tmp_path / "record.sqlite3"
    a, b = _monitor(Record.open(path)), _monitor(Record.open(path))  # two connections
    recs, labels = _rows(60, 0)
    _, ids = a.record_request(recs)
    results: list[list] = [[], []]
    threads = [threading.Thread(target=_send_all, args=(m, ids, labels, out))
               for m, out in zip((a, b), results, strict=True)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses = [s for out in results for _, s in out]
    assert statuses.count(ACCEPTED) == 60 and statuses.count(ALREADY) == 60
    accepted = [i for out in results for i, s in out if s == ACCEPTED]
    assert sorted(accepted) == sorted(ids)  # every row once, by one of them
    assert a.accepted == b.accepted == 60 and a.served == b.served == 60
    # both see every scored row, as one monitor fed the same outcomes does
    ref = _monitor(Record.memory())
    _, ref_ids = ref.record_request(recs)
    _send_all(ref, ref_ids, labels, [])
    assert _figures(a) == _figures(b)
    for part in ("all", "accepted"):
        for k, v in _figures(ref)[part].items():
            assert _figures(a)[part][k] == pytest.approx(v, rel=1e-12), (part, k)


def _process_feedback(path: str, ids: list[str], labels: list[int], queue) -> None:
    out: list = []
    _send_all(_monitor(Record.open(path)), ids, labels, out)
    queue.put(out)


def test_two_processes_score_each_row_once(tmp_path):
    path = str(tmp_path / "record.sqlite3")
    mon = _monitor(Record.open(path))
    recs, labels = _rows(80, 1)
    _, ids = mon.record_request(recs)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_process_feedback, args=(path, ids, labels, queue))
             for _ in range(2)]  # fmt: skip
    for p in procs:
        p.start()
    outs = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
    statuses = [s for out in outs for _, s in out]
    assert statuses.count(ACCEPTED) == 80 and statuses.count(ALREADY) == 80
    assert mon.accepted == 80 and mon.figures()["scored"] == 80


def test_postgres_scores_each_row_once_across_connections():
    with running_postgres() as url:
        store = fresh_database(url, "once")
        a, b = _monitor(Record.open(store)), _monitor(Record.open(store))
        recs, labels = _rows(40, 2)
        _, ids = b.record_request(recs)
        results: list[list] = [[], []]
        threads = [threading.Thread(target=_send_all, args=(m, ids, labels, out))
                   for m, out in zip((a, b), results, strict=True)]  # fmt: skip
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        statuses = [s for out in results for _, s in out]
        assert statuses.count(ACCEPTED) == 40 and statuses.count(ALREADY) == 40
        assert _figures(a) == _figures(b) and a.figures()["scored"] == 40
        import psycopg  # the database server ends every connection (as on its restart)

        with psycopg.connect(store, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> "
                          "pg_backend_pid() AND datname = current_database()")  # fmt: skip
        with pytest.raises(psycopg.OperationalError):
            a.figures()
        assert a.figures()["scored"] == 40  # the next call connects again


def test_a_reopened_store_keeps_pending_rows_and_the_window(tmp_path):
    path = tmp_path / "record.sqlite3"
    recs, labels = _rows(30, 3)
    first = _monitor(Record.open(path))
    _, ids = first.record_request(recs)
    _send_all(first, ids[:20], labels[:20], [])
    again = _monitor(Record.open(path))  # as a restarted server does
    assert again.figures()["all"] == first.figures()["all"]
    out: list = []
    _send_all(again, ids[20:], labels[20:], out)
    assert [s for _, s in out] == [ACCEPTED] * 10
    assert again.feedback(ids[0], 0.0)[0] == ALREADY
    ref = _monitor(Record.memory())
    _, ref_ids = ref.record_request(recs)
    _send_all(ref, ref_ids, labels, [])
    assert _figures(again) == _figures(ref)


def test_retention_by_rows_and_by_age(tmp_path):
    store = Record.open(tmp_path / "r.sqlite3", retention=Retention(max_age_s=3600,
                                                                    history_rows=3))  # fmt: skip
    mon = _monitor(store, max_pending=5)
    recs, _ = _rows(8, 4)
    _, ids = mon.record_request(recs)
    assert [mon.feedback(i, 0.0)[0] for i in ids] == [UNKNOWN] * 3 + [ACCEPTED] * 5
    for _ in range(5):
        mon.refresh()
    assert len(mon.history()) == 3  # the newest three snapshots
    _, ids = mon.record_request(recs[:2])
    mon._ledger.expire(now=time.time() + 3601)  # an hour later
    assert [mon.feedback(i, 0.0)[0] for i in ids] == [UNKNOWN] * 2
    assert mon.history() == []
    assert mon.figures()["scored"] == 5  # the window is bounded by its rows, not by age
    with sqlite3.connect(tmp_path / "r.sqlite3") as conn:
        assert conn.execute("SELECT count(*) FROM pending").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM received").fetchone()[0] == 0


def test_the_window_is_bounded_and_pending_values_as_before(tmp_path):
    mon = _monitor(Record.open(tmp_path / "r.sqlite3"), window=30)
    recs, labels = _rows(50, 5)
    _, ids = mon.record_request(recs)
    _send_all(mon, ids, labels, [])
    assert mon.figures()["scored"] == 30
    with sqlite3.connect(tmp_path / "r.sqlite3") as conn:
        assert conn.execute("SELECT count(*) FROM scored").fetchone()[0] == 30


def test_a_version_1_store_is_migrated(tmp_path):
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as conn:  # a store as version 1 wrote it, one row pending
        conn.execute("CREATE TABLE record_schema (version BIGINT NOT NULL)")
        conn.execute("INSERT INTO record_schema VALUES (1)")
        for s in statements(MIGRATIONS[0], "INTEGER PRIMARY KEY AUTOINCREMENT", "BLOB"):
            conn.execute(s)
        conn.execute("INSERT INTO counters (model, version, task, served, pending_rows, "
                     "pending_values, request_rows) VALUES ('m', '1', 'classification', 1, 1, "
                     "3, 1)")  # fmt: skip
        conn.execute("INSERT INTO requests (model, version, request_id, n_rows, time) VALUES "
                     "('m', '1', 'r0', 1, ?)", (time.time(),))  # fmt: skip
        probs = np.array([0.2, 0.7, 0.1], dtype="<f8").tobytes()
        conn.execute("INSERT INTO pending (model, version, row_id, time, defer, size, probs) "
                     "VALUES ('m', '1', 'r0-0', ?, 0, 3, ?)", (time.time(), probs))  # fmt: skip
    mon = _monitor(Record.open(path))
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version FROM record_schema").fetchall() == [(SCHEMA_VERSION,)]
    assert mon.served == 1
    assert mon.feedback("r0", 1.0) == (ACCEPTED, None)  # the request's id names its one row
    mon.refresh()
    f = mon.figures()["all"]
    assert f["accuracy"] == 1.0 and f["nll"] == pytest.approx(-math.log(0.7))
    assert mon.history()[-1]["all"]["accuracy"] == 1.0


def test_a_newer_schema_is_refused_in_one_line(tmp_path):
    path = tmp_path / "new.sqlite3"
    Record.open(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE record_schema SET version = ?", (SCHEMA_VERSION + 1,))
    with pytest.raises(NewerSchema) as e:
        Record.open(path)
    assert str(e.value).count("\n") == 0
    assert f"schema version {SCHEMA_VERSION + 1}" in str(e.value) and "upgrade" in str(e.value)


def test_history_snapshots_have_the_status_pages_keys(tmp_path):
    mon = _monitor(Record.open(tmp_path / "r.sqlite3"), history_every=3600)
    recs, labels = _rows(20, 6)
    for r in recs:  # many requests within the hour: one snapshot
        mon.record_request([r])
    assert len(mon.history()) == 1
    mon.latency(0.004)
    _, ids = mon.record_request(recs)
    _send_all(mon, ids, labels, [])  # two feedback requests: a snapshot each
    snaps = mon.history()
    assert len(snaps) == 3 and snaps[0]["time"] <= snaps[1]["time"] <= snaps[2]["time"]
    last = snaps[-1]
    assert set(last) == {"time", "served", "scored", "deferral_rate", "latency_p50_ms",
                         "latency_p99_ms", "all", "accepted", "baseline", "drifting"}  # fmt: skip
    assert last["served"] == 40 and last["scored"] == 20
    assert set(last["all"]) == {"accuracy", "error", "nll", "ece"}
    assert last["all"]["accuracy"] == pytest.approx(mon.figures()["all"]["accuracy"])
    assert last["baseline"] == {"accuracy": pytest.approx(0.9), "error": 0.1, "nll": None,
                                "ece": None}  # fmt: skip
    assert last["latency_p50_ms"] == pytest.approx(4.0) and last["drifting"] == []
    deferred = sum(r["defer"] for r in recs) * 2
    assert last["deferral_rate"] == pytest.approx(deferred / 40)
    plain = Monitor("regression", store=Record.memory())  # no deferral policy
    plain.refresh()
    assert plain.history()[-1]["deferral_rate"] is None
    assert set(plain.history()[-1]["all"]) == {"error", "nll", "interval_coverage"}


def test_the_record_file_is_not_a_model_folder(tmp_path):
    from .conftest import make_bundle

    make_bundle(tmp_path / "models" / "toy")
    path = Record.default_path(tmp_path / "models")
    assert path == tmp_path / "models" / DEFAULT_NAME
    mon = _monitor(Record.open(path))
    mon.record_request(_rows(2, 7)[0])  # the file and its -wal, -shm beside it
    found = scan(tmp_path / "models")
    assert list(found.found) == ["toy"] and found.problems == {}
    assert Record.default_path(tmp_path / "models" / "toy") == path  # one bundle: beside it


def test_postgres_without_its_extra_is_one_line_naming_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if not installed
    with pytest.raises(ValueError, match=r'pip install -e "\.\[postgres\]"') as e:
        Record.open("postgresql://someone@127.0.0.1:1/db")
    assert "\n" not in str(e.value)


def test_durability_sets_the_databases_sync_level(tmp_path):
    for level, sync in (("full", 2), ("normal", 1)):  # SQLite's FULL and NORMAL
        store = Record.open(tmp_path / f"{level}.sqlite3", level)
        with store.backend.transaction(write=False) as cur:
            assert cur.execute("PRAGMA journal_mode").fetchone() == ("wal",)
            assert cur.execute("PRAGMA synchronous").fetchone() == (sync,)
    with running_postgres() as url:
        for level, setting in (("full", "on"), ("normal", "off")):
            store = Record.open(fresh_database(url, level), level)
            with store.backend.transaction(write=False) as cur:
                assert cur.execute("SHOW synchronous_commit").fetchone() == (setting,)


def test_one_snapshot_per_interval_whichever_monitor_serves(tmp_path):
    path = tmp_path / "r.sqlite3"
    a, b = (_monitor(Record.open(path), history_every=3600) for _ in range(2))
    for r in _rows(6, 8)[0]:  # both serve within the hour
        a.record_request([r])
        b.record_request([r])
    assert len(a.history()) == 1 and a.history() == b.history()
    assert a.history()[0]["served"] == 1  # taken at the first request


def test_history_read_in_parts_is_the_history_read_at_once(tmp_path):
    path = tmp_path / "r.sqlite3"
    store = Record.open(path, retention=Retention(history_rows=6))
    mon = _monitor(store)

    def fresh() -> list[dict]:  # another process's first read of the store
        return _monitor(Record.open(path)).history()

    for refreshes, limit in ((3, 500), (4, 500), (1, 2), (5, 2), (2, 500)):
        for _ in range(refreshes):  # beyond 6 snapshots the oldest go
            mon.refresh()
        assert mon.history(limit) == fresh()[-limit:]
    assert len(mon.history()) == 6
