"""The server as a real process: /v1/predict against the predictor, Open Inference Protocol via
tritonclient, limits and bad input (422 naming the field, never 500), feedback -> rolling
figures in /metrics, micro-batching of concurrent requests, API key, start-up failures and
graceful shutdown."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import threading

import httpx
import numpy as np
import pytest
import torch

from bayesify.bench.process import cli_path
from bayesify.predictor import Predictor

from .conftest import API_KEY, CLASSES, start_server, stop_server, toy_data

ROWS = toy_data(6, 2)[0].tolist()


def test_predict_records_match_the_predictor(server):
    r = httpx.post(f"{server.url}/v1/predict", json={"inputs": ROWS, "samples": 64})
    assert r.status_code == 200, r.text
    body = r.json()
    preds = body["predictions"]
    assert body["model"] == "toy" and len(preds) == len(ROWS)
    assert len({p["request_id"] for p in preds}) == len(ROWS)
    # an independent prediction of the same bundle: with T = 64 the mean probabilities agree
    # to Monte Carlo error, the policy's threshold is the bundle's
    ref = Predictor.load(server.bundle).predict(ROWS, samples=2000, seed=0)
    probs = np.array([p["probabilities"] for p in preds])
    np.testing.assert_allclose(probs, ref.columns["probabilities"], atol=0.12)
    for p, th in zip(preds, ref.columns["defer_threshold"], strict=True):
        assert p["label"] in CLASSES and p["samples_used"] == 64
        assert p["defer_threshold"] == pytest.approx(th)
        assert p["defer"] == (p["defer_score"] > p["defer_threshold"])
        assert p["defer_score"] == pytest.approx(p["mutual_information"])
        assert "samples" not in p
    r = httpx.post(f"{server.url}/v1/predict", json={"inputs": ROWS[:1], "samples": 5,
                                                      "return_samples": True})  # fmt: skip
    sample = np.array(r.json()["predictions"][0]["samples"])
    assert sample.shape == (5, 3)
    np.testing.assert_allclose(
        sample.mean(0), r.json()["predictions"][0]["probabilities"], rtol=1e-6
    )


def test_tritonclient_round_trip(server):
    httpclient = pytest.importorskip("tritonclient.http")
    client = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("toy")
    meta = client.get_model_metadata("toy")
    assert meta["inputs"][0]["shape"] == [-1, 4]
    x = np.asarray(ROWS, dtype=np.float32)
    for binary in (False, True):
        inp = httpclient.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x, binary_data=binary)
        outs = [httpclient.InferRequestedOutput(n, binary_data=False)
                for n in ("probabilities", "mutual_information", "defer", "label")]  # fmt: skip
        res = client.infer("toy", [inp], outputs=outs, parameters={"samples": 32})
        probs = res.as_numpy("probabilities")
        assert probs.shape == (6, 3)
        np.testing.assert_allclose(probs.sum(1), 1, atol=1e-6)
        assert res.as_numpy("defer").dtype == np.bool_
        labels = [v.decode() if isinstance(v, bytes) else v for v in res.as_numpy("label")]
        assert labels == [CLASSES[i] for i in probs.argmax(1)]
        assert (res.as_numpy("mutual_information") >= 0).all()
    with pytest.raises(Exception, match="unknown model"):
        client.infer("nope", [inp])


def _post(server, body, path="/v1/predict"):
    return httpx.post(f"{server.url}{path}", content=body,
                      headers={"content-type": "application/json"})  # fmt: skip


@pytest.mark.parametrize(
    ("body", "loc", "msg"),
    [
        ('{"inputs": [[1, 2, 3]]}', ["body", "inputs"], "shape [4]"),
        ('{"inputs": [[1, 2, NaN, 4]]}', ["body", "inputs", 0, 2], "NaN"),
        ('{"inputs": [[1, 2, 3, Infinity]]}', ["body", "inputs", 0, 3], "infinite"),
        ('{"inputs": [[1, 2, 3, 1e999]]}', ["body", "inputs", 0, 3], "infinite"),
        ('{"inputs": [[1, "a", 3, 4]]}', ["body", "inputs", 0, 1], "a string, not a number"),
        ('{"inputs": [[1, 2, true, 4]]}', ["body", "inputs", 0, 2], "true/false, not a number"),
        ('{"inputs": [[1, 2, 3, 4], [1, null, 3, 4]]}', ["body", "inputs", 1, 1], "null, not"),
        ('{"inputs": [[1, 2, 3, 1' + "0" * 400 + "]]}", ["body", "inputs", 0, 3], "float64"),
        ('{"inputs": [[1e300, 2, 3, 4]]}', ["body", "inputs", 0, 0], "beyond the float32 range"),
        (
            '{"outcomes": [{"request_id": "a", "outcome": 1' + "0" * 400 + "}]}",
            ["body", "outcomes", 0, "outcome"],
            "class index must be in 0..2",
        ),
        ('{"inputs": [[1, 2, 3, 4], [1, 2]]}', ["body", "inputs"], "numbers"),
        ('{"inputs": []}', ["body", "inputs"], "at least 1"),
        ('{"inputs": [[1, 2, 3, 4]], "samples": 0}', ["body", "samples"], "greater than"),
        ('{"inputs": [[1, 2, 3, 4]], "samples": 100000}', ["body", "samples"], "at most 256"),
        ('{"inputs": [[1, 2, 3, 4]], "bogus": 1}', ["body", "bogus"], "Extra inputs"),
        ('{"inputs": [{"a": 1}]}', ["body", "inputs"], "unnamed rows"),
        ('{"inputs": ' + json.dumps([[0, 0, 0, 0]] * 300) + "}", ["body", "inputs"], "at most 256"),
    ],
)
def test_bad_input_is_a_422_naming_the_field(server, body, loc, msg):
    r = _post(server, body, "/v1/feedback" if "outcomes" in body else "/v1/predict")
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert any(d["loc"][: len(loc)] == loc and msg in d["msg"] for d in detail), detail


@pytest.mark.parametrize(
    ("tensor", "msg"),
    [
        ({"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}, "shape [4]"),
        ({"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3]}, "3 values"),
        ({"name": "x", "shape": [1, 4], "datatype": "BYTES", "data": ["a"] * 4}, "datatype"),
        ({"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, "NaN"]}, "NaN"),
        ({"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, True, 4]}, "true"),
        (
            {"name": "x", "shape": [1, 4], "datatype": "INT64", "data": [1, 2, 3, 10**400]},
            "too large for a float64",
        ),
        # element counts past 2**64: numpy's product wrapped to 0 and passed (a 500)
        (
            {"name": "x", "shape": [2**32, 2**32], "datatype": "FP32", "data": []},
            "0.shape: 4294967296 rows",
        ),
        (
            {"name": "x", "shape": [1, 2**32, 2**32], "datatype": "FP32", "data": []},
            "0.shape: [1, 4294967296",
        ),
    ],
)
def test_v2_bad_input_is_a_422_with_an_error_message(server, tensor, msg):
    r = httpx.post(f"{server.url}/v2/models/toy/infer", json={"inputs": [tensor]})
    assert r.status_code == 422 and msg in r.json()["error"], r.text


def test_malformed_bodies_and_size_limit(server):
    assert _post(server, "{not json").status_code == 422
    assert _post(server, "{not json", "/v2/models/toy/infer").status_code == 422
    big = ('{"inputs": [' + ",".join(["[0,0,0,0]"] * 500_000) + "]}").encode()  # 5 MB
    r = _post(server, big)
    assert r.status_code == 413 and "over" in r.json()["detail"]

    def chunks():  # no Content-Length: the limit is counted as the body arrives
        for i in range(0, len(big), 2**16):
            yield big[i : i + 2**16]

    r = httpx.post(f"{server.url}/v1/predict", content=chunks(),
                   headers={"content-type": "application/json"}, timeout=60)  # fmt: skip
    assert r.status_code == 413


def test_feedback_updates_rolling_figures_and_metrics(server):
    x, y = toy_data(80, 3)
    r = httpx.post(f"{server.url}/v1/predict", json={"inputs": x.tolist()})
    preds = r.json()["predictions"]
    outcomes = [{"request_id": p["request_id"], "outcome": CLASSES[int(t)]}
                for p, t in zip(preds, y, strict=True)]  # fmt: skip
    outcomes.append({"request_id": "never-served", "outcome": 0})
    r = httpx.post(f"{server.url}/v1/feedback", json={"outcomes": outcomes})
    assert r.json() == {"accepted": 80, "unknown": ["never-served"], "already_received": [],
                        "flagged": []}  # fmt: skip
    probs = torch.tensor([p["probabilities"] for p in preds], dtype=torch.float64)
    accuracy = float((probs.argmax(1) == y).double().mean())
    nll = float(-probs[torch.arange(80), y].log().mean())
    keep = torch.tensor([not p["defer"] for p in preds])
    acc_kept = float((probs.argmax(1) == y)[keep].double().mean())
    card = httpx.get(f"{server.url}/v1/model").json()
    mon = card["monitor"]
    assert mon["all"]["n"] >= 80  # earlier tests may have added feedback rows
    if mon["all"]["n"] == 80:
        assert mon["all"]["accuracy"] == pytest.approx(accuracy)
        assert mon["all"]["nll"] == pytest.approx(nll, rel=1e-6)
        assert mon["accepted"]["accuracy"] == pytest.approx(acc_kept)
    assert card["deferral"]["validation"]["coverage"] == pytest.approx(0.8, abs=0.01)
    text = httpx.get(f"{server.url}/metrics").text
    pattern = r'bayesify_rolling\{figure="accuracy",model="toy",part="all",version="1"\} (\S+)'
    got = float(re.search(pattern, text).group(1))
    assert got == pytest.approx(mon["all"]["accuracy"])
    validation = card["deferral"]["validation"]
    for fig in ("error", "nll", "ece"):  # each baseline beside its live figure
        for part in ("all", "accepted"):
            pattern = (rf'bayesify_validation\{{figure="{fig}",model="toy",part="{part}",'
                       rf'version="1"\}} (\S+)')  # fmt: skip
            got = float(re.search(pattern, text).group(1))
            assert got == pytest.approx(validation[f"{fig}_{part}"])
            assert f'bayesify_rolling{{figure="{fig}",model="toy",part="{part}"' in text
    for name in ("bayesify_request_latency_seconds_bucket", "bayesify_batch_rows_bucket",
                 "bayesify_deferral_rate", "bayesify_samples_used_bucket"):  # fmt: skip
        assert name in text
    fresh = httpx.post(f"{server.url}/v1/predict", json={"inputs": ROWS[:1]}).json()
    bad = [{"request_id": fresh["predictions"][0]["request_id"], "outcome": 7}]
    errors = _feedback_422s(server)
    r = httpx.post(f"{server.url}/v1/feedback", json={"outcomes": bad})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "outcome", r.text
    assert _feedback_422s(server) == errors + 1


def _feedback_422s(server) -> float:
    text = httpx.get(f"{server.url}/metrics").text
    pattern = (
        r'bayesify_request_errors_total\{code="422",endpoint="/v1/feedback",'
        r'model="toy",version="1"\} (\S+)'
    )
    m = re.search(pattern, text)
    return float(m.group(1)) if m else 0.0


def test_concurrent_requests_share_passes_and_each_gets_its_own_answer(server):
    x = toy_data(40, 4)[0]

    async def go():
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as c:
            posts = [c.post("/v1/predict", json={"inputs": [row], "samples": 256})
                     for row in x.tolist()]  # fmt: skip
            rs = await asyncio.gather(*posts)
            return [r.json() for r in rs]

    before = _batches(server)
    answers = asyncio.run(go())
    after = _batches(server)
    assert all(len(a["predictions"]) == 1 for a in answers)
    ref = Predictor.load(server.bundle).predict(x.numpy(), samples=2000, seed=1)
    got = np.array([a["predictions"][0]["probabilities"] for a in answers])
    np.testing.assert_allclose(got, ref.columns["probabilities"], atol=0.15)
    passes, rows = after[0] - before[0], after[1] - before[1]
    assert rows == 40 and passes < 40  # gathered: fewer passes than requests


def _batches(server) -> tuple[float, float]:
    text = httpx.get(f"{server.url}/metrics").text
    count = float(re.search(r"bayesify_batch_rows_count\{[^}]*\} (\S+)", text).group(1))
    total = float(re.search(r"bayesify_batch_rows_sum\{[^}]*\} (\S+)", text).group(1))
    return count, total


def test_a_stalled_client_does_not_block_others(server):
    import socket

    host, port = server.url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)))
    s.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 1000\r\n\r\n{\"inputs\": [")  # fmt: skip
    try:
        r = httpx.post(f"{server.url}/v1/predict", json={"inputs": ROWS[:1]}, timeout=30)
        assert r.status_code == 200
    finally:
        s.close()  # and the half-sent request goes away without harming the server
    assert httpx.get(f"{server.url}/healthz").json() == {"status": "ok"}


def test_unknown_model_and_model_ready(server):
    assert httpx.get(f"{server.url}/v2/models/toy/ready").json()["ready"] is True
    r = httpx.get(f"{server.url}/v2/models/other")
    assert r.status_code == 404 and "unknown model" in r.json()["error"]


def test_api_key_and_graceful_shutdown(toy_bundle, tmp_path):
    srv = start_server(toy_bundle, tmp_path / "log", "--samples", "256",
                       env={"BAYESIFY_API_KEY": API_KEY})  # fmt: skip
    try:
        assert httpx.get(f"{srv.url}/v2/health/ready").status_code == 200
        r = httpx.post(f"{srv.url}/v1/predict", json={"inputs": ROWS})
        assert r.status_code == 401 and "API key" in r.json()["detail"]
        r = httpx.post(f"{srv.url}/v1/predict", json={"inputs": ROWS},
                       headers={"X-API-Key": "wrong"})  # fmt: skip
        assert r.status_code == 401
        assert httpx.get(f"{srv.url}/metrics").status_code == 401
        r = httpx.post(f"{srv.url}/v2/models/toy/infer", json={})
        assert r.status_code == 401 and "error" in r.json()
        ok = {"Authorization": f"Bearer {API_KEY}"}
        assert httpx.post(f"{srv.url}/v1/predict", json={"inputs": ROWS},
                          headers=ok).status_code == 200  # fmt: skip
        # a request in flight when SIGTERM arrives is finished, then the process exits
        result = {}
        big = {"inputs": toy_data(256, 5)[0].tolist(), "samples": 256}

        def slow():
            result["r"] = httpx.post(f"{srv.url}/v1/predict", json=big, headers=ok, timeout=120)

        t = threading.Thread(target=slow)
        t.start()
        import time

        time.sleep(0.3)
        stop_server(srv)
        t.join(120)
        assert result["r"].status_code == 200 and len(result["r"].json()["predictions"]) == 256
        assert srv.process.returncode in (0, -15)
    finally:
        stop_server(srv)


@pytest.mark.parametrize("damage", ["missing", "pickle", "truncated"])
def test_bad_bundle_fails_at_start_up(toy_bundle, tmp_path, damage):
    import shutil

    bundle = tmp_path / "b"
    if damage == "pickle":
        bundle = tmp_path / "model.pt"
        torch.save({"w": torch.zeros(1)}, bundle)
    elif damage == "truncated":
        shutil.copytree(toy_bundle, bundle)
        w = bundle / "weights.safetensors"
        w.write_bytes(w.read_bytes()[:100])
    srv = start_server(bundle, tmp_path / "log", wait=False)
    rc = srv.process.wait(120)
    out = srv.output()
    assert rc == 2, out
    want = {"missing": "no bundle folder", "pickle": "refuses to unpickle",
            "truncated": "damaged or truncated"}[damage]  # fmt: skip
    assert want in " ".join(out.split()), out


def test_adaptive_server_reports_samples_used(toy_bundle, tmp_path):
    srv = start_server(toy_bundle, tmp_path / "log", "--adaptive-tol", "0.02",
                       "--adaptive-start", "4", "--adaptive-max", "64")  # fmt: skip
    try:
        x = toy_data(50, 6)[0].tolist()
        preds = httpx.post(f"{srv.url}/v1/predict", json={"inputs": x}).json()["predictions"]
        used = [p["samples_used"] for p in preds]
        assert set(used) <= {4, 8, 16, 32, 64} and np.mean(used) < 64
        fixed = httpx.post(f"{srv.url}/v1/predict", json={"inputs": x[:2], "samples": 9})
        assert [p["samples_used"] for p in fixed.json()["predictions"]] == [9, 9]
        assert httpx.get(f"{srv.url}/v1/model").json()["sampling"]["mode"] == "adaptive"
    finally:
        stop_server(srv)


def test_cli_rejects_bad_adaptive_options(toy_bundle, tmp_path):
    out = subprocess.run([cli_path(), "serve", str(toy_bundle), "--adaptive-tol", "0.1",
                          "--adaptive-start", "8", "--adaptive-max", "24"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 2 and "power of two" in " ".join(out.stdout.split())
