"""The load generator of ``bayesify bench serve`` against a real server process: every request
answered once, answers whole (checked against httpx, a client we did not write), errors
counted, and at most C requests in flight."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from bayesify.bench.serve.http_load import closed_loop, post_request, samples_used


def _rows(n: int) -> list[list[float]]:
    return [[0.1 * i, -0.2, 0.3, 0.05 * i] for i in range(n)]


def test_every_request_is_answered_once_with_the_servers_answer(server):
    body = json.dumps({"inputs": _rows(2)}).encode()
    raw = [post_request(server.url, "/v1/predict", body)]
    res = asyncio.run(closed_loop(server.url, raw, 3, 30, inspect=json.loads))
    assert res.answered == 30 and res.errors == 0 and len(res.inspected) == 30
    reference = httpx.post(f"{server.url}/v1/predict", content=body,
                           headers={"content-type": "application/json"}).json()  # fmt: skip
    for answer in res.inspected:
        assert answer["model"] == reference["model"] == "toy"
        assert [sorted(p) for p in answer["predictions"]] == [
            sorted(p) for p in reference["predictions"]
        ]
        assert [p["samples_used"] for p in answer["predictions"]] == [16, 16]
    # a closed loop: never more than C requests in flight, so the latencies fit in C walls
    assert sum(res.latencies) <= 3 * res.wall + 1e-6
    assert res.wall > 0 and res.client_cpu >= 0


def test_large_answers_arrive_whole_across_reads(server):
    """200 rows with their samples: an answer of several hundred kB, read in many pieces."""
    body = json.dumps({"inputs": _rows(200), "return_samples": True}).encode()
    raw = [post_request(server.url, "/v1/predict", body)]
    res = asyncio.run(closed_loop(server.url, raw, 2, 4, inspect=lambda b: (len(b), json.loads(b))))
    assert res.errors == 0
    for size, answer in res.inspected:
        assert size > 100_000
        assert len(answer["predictions"]) == 200
        assert all(len(p["samples"]) == 16 for p in answer["predictions"])
    assert samples_used(json.dumps(res.inspected[0][1]).encode()) == [16] * 200


def test_error_answers_are_counted_not_inspected(server):
    good = post_request(server.url, "/v1/predict", json.dumps({"inputs": _rows(1)}).encode())
    bad = post_request(server.url, "/v1/predict", json.dumps({"inputs": [[1.0, 2.0]]}).encode())
    res = asyncio.run(closed_loop(server.url, [good, bad], 1, 10, inspect=samples_used))
    assert res.answered == 10 and res.errors == 5 and res.inspected == [[16]] * 5


def test_bad_arguments_are_refused(server):
    with pytest.raises(ValueError, match="clients >= 1"):
        asyncio.run(closed_loop(server.url, [b""], 0, 10))
