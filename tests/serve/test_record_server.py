"""The record in real server processes: a server killed with ``kill -9`` during traffic while
rows await their outcomes (its record then holds whole requests, every answered one among
them), restarted on the same SQLite store, scores those outcomes and reports the window figures
an uninterrupted server reports for the same requests and outcomes; two replicas on two ports
sharing a real PostgreSQL server score feedback sent to the replica that did not answer, each
row once, and both report one process's figures."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import Counter

import httpx
import numpy as np
import pytest

from .conftest import start_server, stop_server, toy_data
from .postgres import fresh_database, running_postgres

#: four requests of 30 rows, each with its own seed (the same answers on every server)
REQUESTS = 4
ROWS = 30
ARGS = ("--samples", "16", "--batch-wait-ms", "0")


def _traffic() -> tuple[np.ndarray, np.ndarray]:
    x, y = toy_data(REQUESTS * ROWS, 21)
    return x.numpy(), y.numpy()


def _predict(srv, k: int) -> tuple[list[str], list[list[float]]]:
    """Request ``k`` of the traffic: its row ids and the probabilities served."""
    x, _ = _traffic()
    body = {"inputs": x[k * ROWS:(k + 1) * ROWS].tolist(), "seed": 100 + k}  # fmt: skip
    r = httpx.post(f"{srv.url}/v1/predict", json=body, timeout=60)
    assert r.status_code == 200, r.text
    preds = r.json()["predictions"]
    return [p["request_id"] for p in preds], [p["probabilities"] for p in preds]


def _feedback(srv, ids: list[str], k: int) -> dict:
    """The outcomes of request ``k``'s rows, as one feedback request."""
    outcomes = _traffic()[1][k * ROWS:(k + 1) * ROWS]  # fmt: skip
    body = {"outcomes": [{"request_id": i, "outcome": int(v)}
                         for i, v in zip(ids, outcomes, strict=True)]}  # fmt: skip
    r = httpx.post(f"{srv.url}/v1/feedback", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def _window(srv) -> dict:
    """The monitor's figures that do not depend on the process (not its latency)."""
    mon = httpx.get(f"{srv.url}/v1/status", timeout=30).json()["monitor"]
    drift = [{k: d[k] for k in ("figure", "part", "live", "n", "drifting")} for d in mon["drift"]]
    keep = ("served", "deferral_rate", "feedback", "scored", "all", "accepted", "reliability")
    return {**{k: mon[k] for k in keep}, "drift": drift}


@pytest.fixture(scope="module")
def uninterrupted(toy_bundle, tmp_path_factory) -> tuple[dict, list]:
    """One server, its own store, the four requests and their outcomes request by request:
    its window figures and the probabilities it served."""
    srv = start_server(toy_bundle, tmp_path_factory.mktemp("log") / "one.log", *ARGS)
    try:
        served = [_predict(srv, k) for k in range(REQUESTS)]
        for k, (ids, _) in enumerate(served):
            assert _feedback(srv, ids, k)["accepted"] == ROWS
        return _window(srv), [p for _, p in served]
    finally:
        stop_server(srv)


def _same_figures(got, want, where: str = "monitor") -> None:
    """Figure by figure (floats to the last few bits: sums over the same rows)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), where
        for key, value in want.items():
            _same_figures(got[key], value, f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _same_figures(g, w, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(want, bool):
        assert got == pytest.approx(want, rel=1e-12, abs=1e-15), where
    else:
        assert got == want, where


def _traffic_until_refused(srv, answered: list[str], stop: threading.Event) -> None:
    """Five-row requests one after the other until the server stops answering: the request
    ids of those answered."""
    x, _ = _traffic()
    with httpx.Client(base_url=srv.url, timeout=30) as client:
        while not stop.is_set():
            try:
                r = client.post("/v1/predict", json={"inputs": x[:5].tolist()})
            except httpx.HTTPError:
                return
            answered.append(r.json()["request_id"])


def test_a_killed_server_restarted_on_its_store_reports_the_uninterrupted_figures(
    toy_bundle, tmp_path, uninterrupted
):
    want, probs = uninterrupted
    store = tmp_path / "record.sqlite3"
    srv = start_server(toy_bundle, tmp_path / "first.log", *ARGS, "--store", str(store))
    answered: list[str] = []
    stop = threading.Event()
    traffic = threading.Thread(target=_traffic_until_refused, args=(srv, answered, stop))
    try:
        served = [_predict(srv, k) for k in range(REQUESTS)]
        assert [p for _, p in served] == probs  # the same answers as the other server's
        for k in (0, 1):
            assert _feedback(srv, served[k][0], k)["accepted"] == ROWS
        traffic.start()  # more requests, in flight when the server is killed
        deadline = time.monotonic() + 60
        while len(answered) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        srv.process.kill()  # kill -9 during traffic: no shutdown, no flush
        srv.process.wait()
        stop.set()
        traffic.join(60)
    assert len(answered) >= 5
    with sqlite3.connect(store) as conn:  # whole requests only, every answered one among them
        held = dict(conn.execute("SELECT request_id, n_rows FROM requests").fetchall())
        rows = conn.execute("SELECT row_id FROM pending").fetchall()
        (served_count,) = conn.execute("SELECT served FROM counters").fetchone()
    per_request = Counter(r.rsplit("-", 1)[0] for (r,) in rows)
    ours = [ids[0].rsplit("-", 1)[0] for ids, _ in served]
    assert set(answered) <= set(held) and set(ours) <= set(held)
    for rid, n in held.items():  # a request's rows are all in the record, or (scored) none
        assert per_request[rid] == (0 if rid in ours[:2] else n), rid
    background = sum(n for rid, n in held.items() if rid not in ours)
    assert served_count == REQUESTS * ROWS + background
    again = start_server(toy_bundle, tmp_path / "second.log", *ARGS, "--store", str(store))
    try:
        for k in (2, 3):  # outcomes of rows the killed server served
            answer = _feedback(again, served[k][0], k)
            assert answer["accepted"] == ROWS and answer["unknown"] == [], answer
        again_answer = _feedback(again, served[0][0], 0)
        assert again_answer["already_received"] == served[0][0]  # scored before the kill
        got = _window(again)
        assert got.pop("served") == REQUESTS * ROWS + background
        got.pop("deferral_rate")  # the background rows count too
        _same_figures(got, {k: v for k, v in want.items()
                            if k not in ("served", "deferral_rate")})  # fmt: skip
    finally:
        stop_server(again)


@pytest.fixture(scope="module")
def postgres_url():
    with running_postgres() as url:
        yield url


def test_two_replicas_on_postgres_score_feedback_sent_to_the_other_once(
    toy_bundle, tmp_path, uninterrupted, postgres_url
):
    want, probs = uninterrupted
    store = fresh_database(postgres_url, "replicas")
    replicas = [start_server(toy_bundle, tmp_path / f"replica{i}.log", *ARGS, "--store", store)
                for i in range(2)]  # fmt: skip
    try:
        answered = [k % 2 for k in range(REQUESTS)]  # requests alternate between replicas
        served = [_predict(replicas[r], k) for k, r in enumerate(answered)]
        assert [p for _, p in served] == probs
        for k, r in enumerate(answered):  # each row's outcome to the replica that did not answer
            answer = _feedback(replicas[1 - r], served[k][0], k)
            assert answer["accepted"] == ROWS and answer["unknown"] == [], answer
        for k, r in enumerate(answered):  # and again, to the one that did
            answer = _feedback(replicas[r], served[k][0], k)
            assert answer["accepted"] == 0 and answer["already_received"] == served[k][0]
        figures = [_window(srv) for srv in replicas]
        for got in figures:
            _same_figures(got, want)
        assert figures[0]["feedback"] == {"accepted": REQUESTS * ROWS, "flagged": 0}
    finally:
        for srv in replicas:
            stop_server(srv)
