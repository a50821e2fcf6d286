"""``bayesify serve --workers 2``: real server processes on a free loopback port. Two workers
on one store answer seeded requests as one process does, score feedback sent to the worker that
did not serve the row once and report one process's figures; both serve, ``/metrics`` from
either counts for both, a killed worker is replaced, SIGTERM drains both, and a worker stops
when its parent is killed.

Which worker holds a keep-alive connection is read from the metrics on that connection: two
scrapes on it, and the second counts the first in ``bayesify_worker_requests{worker}``."""

from __future__ import annotations

import concurrent.futures
import os
import re
import signal
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import start_server, stop_server, toy_data
from .test_record_server import (
    REQUESTS,
    _same_figures,
    _traffic,
    uninterrupted,  # noqa: F401 - a fixture: the same traffic through one process
)
from .test_record_server import ROWS as RECORD_ROWS

ROWS = toy_data(6, 3)[0].tolist()
READY = r"worker (\d+) ready \(pid (\d+)\)"


def wait_log(server, pattern: str, timeout: float = 180) -> list[re.Match]:
    """Every match of ``pattern`` in the server's log, once there is one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = list(re.finditer(pattern, server.output()))
        if found:
            return found
        assert server.process.poll() is None, server.output()
        time.sleep(0.2)
    raise AssertionError(f"{pattern!r} not in the log after {timeout} s:\n{server.output()}")


def start_workers(bundle, log, *args: str):
    srv = start_server(bundle, log, "--workers", "2", "--keep-alive", "120", *args)
    wait_log(srv, r"2 workers serving on")
    return srv


def ready_pids(server) -> dict[str, int]:
    """Worker index -> pid of its latest ready process, from the parent's log."""
    return {m[1]: int(m[2]) for m in re.finditer(READY, server.output())}


def samples(text: str, name: str) -> dict[tuple, float]:
    """The values of one sample name in Prometheus text, by their labels."""
    return {tuple(sorted(s.labels.items())): s.value
            for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == name}  # fmt: skip


def per_worker(client: httpx.Client) -> dict[str, float]:
    counts = samples(client.get("/metrics").text, "bayesify_worker_requests_total")
    return {dict(k)["worker"]: v for k, v in counts.items()}


def worker_of(client: httpx.Client) -> str:
    """The worker holding ``client``'s connection (no other traffic meanwhile)."""
    before, after = per_worker(client), per_worker(client)
    moved = [w for w in after if after[w] != before.get(w, 0.0)]
    assert len(moved) == 1, (before, after)
    return moved[0]


def clients_on_each_worker(url: str, workers: int = 2, tries: int = 40) -> dict[str, httpx.Client]:
    """One keep-alive client per worker: new connections until each worker holds one."""
    found: dict[str, httpx.Client] = {}
    for _ in range(tries):
        client = httpx.Client(base_url=url, timeout=60)
        w = worker_of(client)
        if w in found:
            client.close()
        else:
            found[w] = client
        if len(found) == workers:
            return found
    raise AssertionError(f"{tries} connections all went to workers {sorted(found)}")


def predictions(client: httpx.Client | None, url: str, **body) -> list[dict]:
    """A v1 prediction (``client`` None: on a connection of its own), request ids left out."""
    post = client.post if client is not None else httpx.post
    r = post(f"{url}/v1/predict", json={"inputs": ROWS, "samples": 16, **body}, timeout=60)
    assert r.status_code == 200, r.text
    return [{k: v for k, v in p.items() if k != "request_id"} for p in r.json()["predictions"]]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def workers(toy_bundle, tmp_path_factory):
    """Two workers on one SQLite store (``start_server`` gives each server a new one). A
    request of all 6 ``ROWS`` fills a pass at once; a smaller one waits 1.5 s for company (so
    it is in flight when SIGTERM comes). Before any other traffic, the record run of
    ``test_record_server``: request k served by worker k % 2, its outcomes sent to the other
    worker, then again to the one that served it."""
    srv = start_workers(toy_bundle, tmp_path_factory.mktemp("log") / "workers.log",
                        "--samples", "16", "--batch-rows", str(len(ROWS)),
                        "--batch-wait-ms", "1500")  # fmt: skip
    x, y = _traffic()
    clients = clients_on_each_worker(srv.url)
    srv.record = {"served": [], "feedback": [], "again": []}
    for k in range(REQUESTS):
        rows = slice(k * RECORD_ROWS, (k + 1) * RECORD_ROWS)
        r = clients[str(k % 2)].post("/v1/predict", json={"inputs": x[rows].tolist(),
                                                           "seed": 100 + k})  # fmt: skip
        assert r.status_code == 200, r.text
        srv.record["served"].append(r.json()["predictions"])
    for k, preds in enumerate(srv.record["served"]):
        outcomes = y[k * RECORD_ROWS:(k + 1) * RECORD_ROWS]  # fmt: skip
        body = {"outcomes": [{"request_id": p["request_id"], "outcome": int(v)}
                             for p, v in zip(preds, outcomes, strict=True)]}  # fmt: skip
        for key, worker in (("feedback", str(1 - k % 2)), ("again", str(k % 2))):
            r = clients[worker].post("/v1/feedback", json=body)
            assert r.status_code == 200, r.text
            srv.record[key].append(r.json())
    srv.record["windows"] = {w: _window_on(c) for w, c in clients.items()}
    for client in clients.values():
        client.close()
    yield srv
    stop_server(srv)


def _window_on(client: httpx.Client) -> dict:
    """The figures ``test_record_server._window`` compares, from the worker holding
    ``client``'s connection."""
    mon = client.get("/v1/status").json()["monitor"]
    drift = [{k: d[k] for k in ("figure", "part", "live", "n", "drifting")} for d in mon["drift"]]
    keep = ("served", "deferral_rate", "feedback", "scored", "all", "accepted", "reliability")
    return {**{k: mon[k] for k in keep}, "drift": drift}


def test_feedback_to_the_other_worker_is_scored_once_as_one_process_scores_it(
    workers,
    uninterrupted,  # noqa: F811 - the fixture imported above
):
    want, probs = uninterrupted
    served = workers.record["served"]
    assert [[p["probabilities"] for p in preds] for preds in served] == probs
    for preds, first, again in zip(served, workers.record["feedback"], workers.record["again"],
                                   strict=True):  # fmt: skip
        ids = [p["request_id"] for p in preds]
        assert first["accepted"] == RECORD_ROWS and first["unknown"] == [], first
        assert again["accepted"] == 0 and again["already_received"] == ids, again
    for window in workers.record["windows"].values():
        _same_figures(window, want)
    assert window["feedback"] == {"accepted": REQUESTS * RECORD_ROWS, "flagged": 0}


def test_both_workers_serve_seeded_requests_alike(workers):
    pids = ready_pids(workers)
    assert set(pids) == {"0", "1"} and len(set(pids.values())) == 2
    assert all(alive(p) for p in pids.values())
    clients = clients_on_each_worker(workers.url)
    one = predictions(clients["0"], workers.url, seed=7)
    assert predictions(clients["1"], workers.url, seed=7) == one
    for client in clients.values():
        client.close()
    for _ in range(4):  # fresh connections, wherever the kernel hands them
        assert predictions(None, workers.url, seed=7) == one
    unseeded = predictions(None, workers.url)
    assert [p["probabilities"] for p in unseeded] != [p["probabilities"] for p in one]


def test_models_are_not_loaded_or_unloaded_in_one_worker(workers):
    for action in ("unload", "load"):
        r = httpx.post(f"{workers.url}/v2/repository/models/toy/{action}", json={})
        assert r.status_code == 409 and "--workers" in r.json()["error"], r.text
    assert len(predictions(None, workers.url)) == len(ROWS)


def test_metrics_of_either_worker_count_both(workers):
    clients = clients_on_each_worker(workers.url)
    predict = (("endpoint", "/v1/predict"),)

    def totals(client: httpx.Client) -> tuple[float, float, float, float]:
        text = client.get("/metrics").text
        requests = sum(v for k, v in samples(text, "bayesify_requests_total").items()
                       if set(predict) <= set(k) and dict(k)["code"] == "200")  # fmt: skip
        rows = sum(samples(text, "bayesify_rows_total").values())
        deferred = sum(samples(text, "bayesify_deferred_rows_total").values())
        (rate,) = samples(text, "bayesify_deferral_rate").values()
        return requests, rows, deferred, rate

    before = totals(clients["0"])
    before_workers = per_worker(clients["0"])
    n, defer, sent = 10, 0, 0
    for client, other in ((clients["0"], clients["1"]), (clients["1"], clients["0"])):
        for i in range(n):
            r = client.post("/v1/predict", json={"inputs": ROWS, "samples": 16})
            assert r.status_code == 200, r.text
            sent += 1
            defer += sum(p["defer"] for p in r.json()["predictions"])
            if i % 3 == 0:  # an answer had is an answer counted, whichever worker is asked
                assert totals(other)[0] - before[0] == sent
    rows = 2 * n * len(ROWS)
    for client in clients.values():  # a scrape of either worker
        requests, total_rows, deferred, rate = totals(client)
        assert requests - before[0] == 2 * n
        assert total_rows - before[1] == rows
        assert deferred - before[2] == defer
        assert rate == pytest.approx(deferred / total_rows)
    after_workers = per_worker(clients["1"])
    for w in ("0", "1"):  # n predictions and a few scrapes each
        assert n <= after_workers[w] - before_workers.get(w, 0.0) <= n + 12
    for client in clients.values():
        client.close()


def test_killed_worker_is_replaced_and_sigterm_drains_both(workers):
    """Last on the module's server: it ends it."""
    srv = workers
    clients = clients_on_each_worker(srv.url)
    rows = sum(samples(clients["0"].get("/metrics").text, "bayesify_rows_total").values())
    first = ready_pids(srv)["1"]
    os.kill(first, signal.SIGKILL)
    wait_log(srv, rf"worker 1 \(pid {first}\) died \(signal SIGKILL\); starting another")
    wait_log(srv, rf"worker 1 ready \(pid (?!{first}\))")
    second = ready_pids(srv)["1"]
    assert second != first and alive(second) and not alive(first)
    # the dead worker's counts stay in the server's
    after = sum(samples(clients["0"].get("/metrics").text, "bayesify_rows_total").values())
    assert after == rows > 0
    clients["1"].close()  # its connection died with the worker
    clients = clients_on_each_worker(srv.url)
    pids = list(ready_pids(srv).values())

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        # one row each: it waits up to 1.5 s for company, so both are in flight at SIGTERM
        pending = [pool.submit(c.post, "/v1/predict", json={"inputs": ROWS[:1], "seed": 1})
                   for c in clients.values()]  # fmt: skip
        time.sleep(0.5)
        srv.process.send_signal(signal.SIGTERM)
        answers = [f.result() for f in pending]
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
    assert srv.process.wait(60) == 0
    assert not any(alive(p) for p in pids)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{srv.url}/v2/health/live", timeout=5)
    assert "killed" not in srv.output()


def test_workers_stop_when_their_parent_is_killed(toy_bundle, tmp_path):
    """The parent killed while its first worker starts: the worker stops by itself. (Its
    metrics folder, which the parent would remove, is given here: made if missing.)"""
    metrics = tmp_path / "metrics"
    srv = start_server(toy_bundle, tmp_path / "server.log", "--workers", "2", wait=False,
                       env={"PROMETHEUS_MULTIPROC_DIR": str(metrics)})  # fmt: skip
    try:
        (started,) = wait_log(srv, r"worker 0 started \(pid (\d+)\)")
        srv.process.kill()
        srv.process.wait()
        pid, deadline = int(started[1]), time.monotonic() + 60
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(pid), srv.output()
        assert metrics.is_dir()
    finally:
        stop_server(srv)
