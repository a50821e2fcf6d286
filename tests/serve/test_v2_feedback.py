"""Open Inference Protocol (v2) inferences are recorded for feedback as /v1/predict rows are:
the per-row ``request_id`` outputs (ids the server makes) and the response ``id`` (the
client's, else the server's) name the rows in ``POST /v1/feedback``; a client id another
request reuses names neither row; feedback for a row already scored says so; and the rolling
figures are those of the rows served, checked against an independent computation from the
returned probabilities. A real server process and tritonclient, a client nobody here wrote."""

from __future__ import annotations

import math
import re

import httpx
import numpy as np
import pytest

from .conftest import CLASSES, toy_data

httpclient = pytest.importorskip("tritonclient.http")


def _infer(server, x: np.ndarray, request_id: str = ""):
    client = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
    inp = httpclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x.astype(np.float32), binary_data=True)
    res = client.infer("toy", [inp], request_id=request_id, parameters={"samples": 16})
    ids = [v.decode() if isinstance(v, bytes) else v for v in res.as_numpy("request_id")]
    return res.get_response()["id"], ids, res.as_numpy("probabilities")


def _feedback(server, pairs):
    body = {"outcomes": [{"request_id": r, "outcome": o} for r, o in pairs]}
    return httpx.post(f"{server.url}/v1/feedback", json=body)


def _monitor(server):
    return httpx.get(f"{server.url}/v1/model").json()["monitor"]


def test_oip_ids_name_rows_for_feedback_and_the_rolling_figures_follow(server):
    x, y = toy_data(7, 11)
    x, y = x.numpy(), y.numpy()
    scored: list[tuple[np.ndarray, int]] = []  # (probabilities served, true class)

    # a client-given id comes back as the response id and names the one row; the row id is
    # the server's
    rid, ids, probs = _infer(server, x[:1], request_id="client-7")
    assert rid == "client-7" and len(ids) == 1 and re.fullmatch(r"[0-9a-f]{32}-0", ids[0])
    r = _feedback(server, [("client-7", CLASSES[y[0]])])
    assert r.json() == _answer(accepted=1), r.text
    scored.append((probs[0], y[0]))
    assert _feedback(server, [("client-7", 0)]).json() == _answer(already_received=["client-7"])

    # no id: the server makes one; each row has its own; the bare id of a 6-row request is
    # refused naming the row ids
    rid, ids, probs = _infer(server, x[1:])
    assert re.fullmatch(r"[0-9a-f]{32}", rid) and ids == [f"{rid}-{i}" for i in range(6)]
    r = _feedback(server, [(rid, 0)])
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "request_id", r.text
    assert "6 rows" in r.json()["detail"][0]["msg"] and f"{rid}-5" in r.json()["detail"][0]["msg"]
    r = _feedback(server, [(i, int(t)) for i, t in zip(ids, y[1:], strict=True)])
    assert r.json() == _answer(accepted=6)
    scored += list(zip(probs, y[1:], strict=True))

    # the rolling figures are those of the 7 rows served, computed here from what was returned
    p = np.array([s[0] for s in scored], dtype=np.float64)
    t = np.array([s[1] for s in scored])
    p = p / p.sum(1, keepdims=True)
    mon = _monitor(server)
    assert mon["all"]["n"] == 7
    assert mon["all"]["accuracy"] == pytest.approx(float((p.argmax(1) == t).mean()))
    assert mon["all"]["nll"] == pytest.approx(float(-np.log(p[np.arange(7), t]).mean()), rel=1e-6)
    text = httpx.get(f"{server.url}/metrics").text
    pattern = r'bayesify_rolling\{figure="nll",model="toy",part="all",version="1"\} (\S+)'
    assert float(re.search(pattern, text).group(1)) == pytest.approx(mon["all"]["nll"])


def _answer(accepted=0, unknown=(), already_received=(), flagged=()):
    return {"accepted": accepted, "unknown": list(unknown),
            "already_received": list(already_received), "flagged": list(flagged)}  # fmt: skip


def _added_nll(before: dict, after: dict) -> float:
    """The -log p of the one row scored between two monitor snapshots."""
    n = before["n"]
    return after["nll"] * (n + 1) - before["nll"] * n


def test_a_reused_client_id_cannot_take_over_another_clients_row(server):
    x = toy_data(2, 12)[0].numpy()
    _, ids_a, probs_a = _infer(server, x[:1], request_id="again")  # client A
    _, ids_b, probs_b = _infer(server, x[1:], request_id="again")  # client B reuses A's id
    assert ids_a != ids_b  # B's row did not replace A's
    # the shared id names neither row now; the row ids still name each client's own
    r = _feedback(server, [("again", 2)])
    assert r.status_code == 422 and "2 requests" in r.json()["detail"][0]["msg"], r.text
    before = _monitor(server)["all"]
    assert _feedback(server, [(ids_a[0], 2)]).json() == _answer(accepted=1)
    after = _monitor(server)["all"]
    p = probs_a[0] / probs_a[0].sum()  # A's outcome scored A's prediction
    assert _added_nll(before, after) == pytest.approx(-math.log(p[2]), rel=1e-6)
    assert _feedback(server, [(ids_b[0], 0)]).json() == _answer(accepted=1)
    q = probs_b[0] / probs_b[0].sum()
    assert _added_nll(after, _monitor(server)["all"]) == pytest.approx(-math.log(q[0]), rel=1e-6)


def test_repeated_feedback_says_already_received_and_counts_once(server):
    x = toy_data(2, 15)[0].numpy()
    _, ids, _ = _infer(server, x)
    assert _feedback(server, [(ids[0], 1)]).json() == _answer(accepted=1)
    before = _monitor(server)["all"]
    # again, and twice in one request: each says already received, nothing is counted
    r = _feedback(server, [(ids[0], 2), (ids[1], 0), (ids[1], 2), ("never-served", 1)])
    assert r.json() == _answer(accepted=1, already_received=[ids[0], ids[1]],
                               unknown=["never-served"]), r.text  # fmt: skip
    after = _monitor(server)["all"]
    assert after["n"] == before["n"] + 1


def test_v1_one_row_request_id_names_its_row(server):
    body = {"inputs": toy_data(1, 13)[0].tolist(), "samples": 8}
    answer = httpx.post(f"{server.url}/v1/predict", json=body).json()
    assert answer["predictions"][0]["request_id"] == f"{answer['request_id']}-0"
    assert _feedback(server, [(answer["request_id"], "low")]).json()["accepted"] == 1


def test_bad_ids_are_a_422(server):
    tensor = {"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [0, 0, 0, 0]}
    r = httpx.post(f"{server.url}/v2/models/toy/infer", json={"id": "x" * 129, "inputs": [tensor]})
    assert r.status_code == 422 and "at most 128" in r.json()["error"], r.text
    r = httpx.post(f"{server.url}/v2/models/toy/infer", json={"id": 5, "inputs": [tensor]})
    assert r.status_code == 422 and r.json()["error"].startswith("id"), r.text


def test_model_metadata_lists_exactly_the_outputs_served(server):
    meta = httpx.get(f"{server.url}/v2/models/toy").json()
    listed = {o["name"]: o["datatype"] for o in meta["outputs"]}
    tensor = {"name": "x", "shape": [2, 4], "datatype": "FP32", "data": [0.0] * 8}
    body = httpx.post(f"{server.url}/v2/models/toy/infer", json={"inputs": [tensor]}).json()
    served = {o["name"]: o["datatype"] for o in body["outputs"]}
    assert listed == served


def test_a_bad_outcome_leaves_the_figures_as_they_were(server):
    x = toy_data(2, 14)[0].numpy()
    _, ids, _ = _infer(server, x)
    before = _monitor(server)["all"]
    r = _feedback(server, [(ids[0], 1), (ids[1], "no-such-class")])
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "outcomes", 1,
                                                                       "outcome"]  # fmt: skip
    assert _monitor(server)["all"] == before  # the first, valid outcome was not used either
    assert _feedback(server, [(ids[0], 1), (ids[1], 0)]).json()["accepted"] == 2


def test_one_feedback_request_is_limited_to_a_tenth_of_the_window(server):
    r = _feedback(server, [(f"row-{i}", 0) for i in range(101)])
    assert r.status_code == 422 and "at most 100 per request" in r.json()["detail"][0]["msg"]
