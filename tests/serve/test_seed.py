"""Requests may carry a seed: the same rows with the same seed get the same answer from a real
server process, however the micro-batcher groups them with other requests (v1 ``seed``, v2
``parameters.seed``)."""

from __future__ import annotations

import concurrent.futures

import httpx
import numpy as np
import pytest

from .conftest import start_server, stop_server, toy_data

ROWS = toy_data(5, 3)[0].tolist()
OTHERS = [toy_data(3, 10 + i)[0].tolist() for i in range(4)]


@pytest.fixture(scope="module")
def server(toy_bundle, tmp_path_factory):
    """The toy server gathering requests for up to 300 ms, so concurrent ones share passes."""
    srv = start_server(toy_bundle, tmp_path_factory.mktemp("log") / "server.log",
                       "--samples", "16", "--batch-wait-ms", "300")  # fmt: skip
    yield srv
    stop_server(srv)


def _v1(server, rows, **extra):
    r = httpx.post(f"{server.url}/v1/predict", json={"inputs": rows, "samples": 16, **extra})
    assert r.status_code == 200, r.text
    return [{k: v for k, v in p.items() if k != "request_id"} for p in r.json()["predictions"]]


def _crowd(server, **extra):
    """The seeded request sent together with others, some with the same seed (the same pass
    key), some without (they share the gathering)."""
    with concurrent.futures.ThreadPoolExecutor(9) as pool:
        mine = pool.submit(_v1, server, ROWS, **extra)
        rest = [pool.submit(_v1, server, rows, **kw) for rows in OTHERS for kw in ({}, extra)]
        [f.result() for f in rest]
        return mine.result()


def test_seeded_v1_requests_are_reproducible(server):
    alone = _v1(server, ROWS, seed=7)
    assert _crowd(server, seed=7) == alone
    assert _v1(server, ROWS, seed=7) == alone
    other = _v1(server, ROWS, seed=8)
    assert [p["probabilities"] for p in other] != [p["probabilities"] for p in alone]
    bad = httpx.post(f"{server.url}/v1/predict", json={"inputs": ROWS, "seed": -1})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "seed"]


def _v2(server, seed):
    tensor = {"name": "input", "shape": [len(ROWS), 4], "datatype": "FP32",
              "data": np.asarray(ROWS).ravel().tolist()}  # fmt: skip
    body = {"inputs": [tensor], "parameters": {"samples": 16, "seed": seed}}
    r = httpx.post(f"{server.url}/v2/models/toy/infer", json=body)
    return r.status_code, r.json()


def test_seeded_v2_requests_are_reproducible_and_match_v1(server):
    code, first = _v2(server, 7)
    assert code == 200, first
    _, again = _v2(server, 7)
    outputs = {o["name"]: o["data"] for o in first["outputs"] if o["name"] != "request_id"}
    assert outputs == {o["name"]: o["data"] for o in again["outputs"] if o["name"] != "request_id"}
    v1 = _v1(server, ROWS, seed=7)  # the same rows and seed through the other door
    np.testing.assert_allclose(np.reshape(outputs["probabilities"], (len(ROWS), -1)),
                               [p["probabilities"] for p in v1], rtol=1e-6)  # fmt: skip
    code, body = _v2(server, "seven")
    assert code == 422 and "parameters.seed" in body["error"]
