"""``bayesify serve DIR``: one real process serving a folder of bundles, a classifier in two
versions (``DIR/toy/1``, ``DIR/toy/2``, with different class names so an answer says which
version gave it) and a regression (``DIR/reg``, version 1). Each is answered by name and version
on v1 and the Open Inference Protocol (checked against the predictor of that bundle), tritonclient
lists, unloads, loads and calls all three, a bundle copied into DIR after start-up is loaded
without a restart, and the status page in chromium lists them all."""

from __future__ import annotations

import shutil
import threading

import httpx
import numpy as np
import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families

from bayesify.bench.process import start_server
from bayesify.predictor import Predictor

from .conftest import CLASSES, make_bundle, stop_server, toy_data
from .test_status_page import browser  # noqa: F401 - the fixture

CLASSES_V2 = ["small", "medium", "large"]
ROWS = toy_data(5, 4)[0].tolist()
SERVED = {("reg", "1"), ("toy", "1"), ("toy", "2")}


def make_regression_bundle(path):
    """MC dropout regression on 4 inputs (y = x0 - 0.5 x2 + noise)."""
    from bayesify.data.preprocessing import Preprocessing
    from bayesify.methods import MCDropout
    from bayesify.models import mlp

    x, _ = toy_data(500, 3)
    y = x[:, 0] - 0.5 * x[:, 2] + 0.1 * torch.randn(500, generator=torch.Generator().manual_seed(3))
    torch.manual_seed(0)
    m = MCDropout(mlp(4, 1, (32,), norm=None, dropout=0.1), task="regression")
    m.fit((x[:400], y[:400]), val=(x[400:], y[400:]), epochs=10, lr=1e-2, progress=False)
    m.preprocessing = Preprocessing(input_shape=[4])
    m.save(path)
    return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo") / "models"
    make_bundle(root / "toy" / "1")
    make_bundle(root / "toy" / "2", classes=CLASSES_V2, seed=1)
    make_regression_bundle(root / "reg")
    (root / "notes").mkdir()  # a folder without bundles is not a model
    return root


@pytest.fixture(scope="module")
def repo_server(folder, tmp_path_factory):
    log = tmp_path_factory.mktemp("log") / "server.log"
    srv = start_server(folder, log, "--threads", "1", "--samples", "16", name=None)
    yield srv
    stop_server(srv)


def _damaged_copy(bundle, to):
    """A copy of ``bundle`` whose weights file is cut short."""
    shutil.copytree(bundle, to)
    weights = to / "weights.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])


def _predict(srv, **body):
    return httpx.post(f"{srv.url}/v1/predict", json={"inputs": ROWS, **body}, timeout=60)


def _client(srv):
    httpclient = pytest.importorskip("tritonclient.http")
    return httpclient, httpclient.InferenceServerClient(srv.url.removeprefix("http://"))


def _infer(srv, name, version="", samples=16):
    httpclient, client = _client(srv)
    x = np.asarray(ROWS, dtype=np.float32)
    inp = httpclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=True)
    res = client.infer(name, [inp], model_version=version, parameters={"samples": samples})
    return res


def _labels(res):
    return [v.decode() if isinstance(v, bytes) else v for v in res.as_numpy("label")]


def test_each_model_answers_by_name_and_version(repo_server, folder):
    srv = repo_server
    # several models: a request must name one (422 on `model` naming what is served)
    r = _predict(srv)
    assert r.status_code == 422, r.text
    err = r.json()["detail"][0]
    assert err["loc"] == ["body", "model"] and "'toy' (versions 1, 2)" in err["msg"]
    assert "'reg'" in err["msg"]
    toy = folder / "toy"
    for name, version, path, classes in [("toy", 1, toy / "1", CLASSES),
                                         ("toy", 2, toy / "2", CLASSES_V2),
                                         ("toy", None, toy / "2", CLASSES_V2)]:  # fmt: skip
        r = _predict(srv, model=name, version=version, samples=256)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["model"] == "toy" and body["version"] == (version or 2)  # newest by default
        probs = np.array([p["probabilities"] for p in body["predictions"]])
        ref = Predictor.load(path).predict(ROWS, samples=2000, seed=0)
        np.testing.assert_allclose(probs, ref.columns["probabilities"], atol=0.1)  # T = 256
        assert [p["label"] for p in body["predictions"]] == [classes[i] for i in probs.argmax(1)]
    r = _predict(srv, model="reg", samples=256)
    assert r.status_code == 200 and r.json()["version"] == 1, r.text
    mean = np.array([p["mean"] for p in r.json()["predictions"]])
    ref = Predictor.load(folder / "reg").predict(ROWS, samples=4000, seed=0).columns
    # within 5 Monte Carlo standard errors of the served mean (T = 256)
    assert (np.abs(mean - ref["mean"]) < 5 * np.sqrt(ref["epistemic_variance"] / 256)).all()
    # unknown names and versions: 404 naming what is served
    r = _predict(srv, model="nope")
    assert r.status_code == 404 and "unknown model 'nope'" in r.json()["detail"]
    assert "'reg', 'toy' (versions 1, 2)" in r.json()["detail"]
    r = _predict(srv, model="toy", version=3)
    assert r.status_code == 404 and "served versions: 1, 2" in r.json()["detail"]
    r = httpx.post(f"{srv.url}/v2/models/toy/versions/7/infer", json={"inputs": []})
    assert r.status_code == 404 and "served versions: 1, 2" in r.json()["error"]
    # the model card: a list, or one by name and version
    listed = httpx.get(f"{srv.url}/v1/model").json()["models"]
    assert {(m["name"], str(m["version"])) for m in listed} >= SERVED
    card = httpx.get(f"{srv.url}/v1/model", params={"name": "toy", "version": 1}).json()
    assert card["version"] == 1 and card["class_names"] == CLASSES
    assert httpx.get(f"{srv.url}/v1/model", params={"name": "x"}).status_code == 404
    # feedback goes to the model version that served the rows; metrics carry its labels
    r = _predict(srv, model="toy", version=1)
    ids = [p["request_id"] for p in r.json()["predictions"]]
    outcomes = [{"request_id": i, "outcome": 0} for i in ids]
    fb = httpx.post(f"{srv.url}/v1/feedback", json={"outcomes": outcomes, "model": "toy"})
    assert fb.json()["unknown"] == ids  # version 2 never served them
    fb = httpx.post(f"{srv.url}/v1/feedback",
                    json={"outcomes": outcomes, "model": "toy", "version": 1})  # fmt: skip
    assert fb.json()["accepted"] == len(ids) and fb.json()["unknown"] == []
    text = httpx.get(f"{srv.url}/metrics").text
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]

    def value(name, **labels):
        return sum(s.value for s in samples
                   if s.name == name and labels.items() <= s.labels.items())  # fmt: skip

    assert value("bayesify_feedback_rows_total", model="toy", version="1") == len(ids)
    assert value("bayesify_feedback_rows_total", model="toy", version="2") == 0
    assert value("bayesify_rows_total", model="reg", version="1") >= len(ROWS)
    assert value("bayesify_rows_total", model="toy", version="1") >= 2 * len(ROWS)
    # a request that named no model (the 422 above) is counted apart, with empty labels
    assert value("bayesify_requests_total", model="", endpoint="/v1/predict", code="422") >= 1
    assert value("bayesify_requests_total", model="toy", version="1", code="200") >= 2


def test_tritonclient_lists_unloads_loads_and_calls_all_three(repo_server):
    _, client = _client(repo_server)
    index = {(m["name"], m["version"]): m["state"] for m in client.get_model_repository_index()}
    assert {k: index[k] for k in SERVED} == dict.fromkeys(SERVED, "READY")
    assert "notes" not in {name for name, _ in index}
    assert client.get_model_metadata("toy", "1")["versions"] == ["1", "2"]
    for name, version in sorted(SERVED):
        assert client.is_model_ready(name, version)
        res = _infer(repo_server, name, version)
        assert res.get_response()["model_name"] == name
        assert res.get_response()["model_version"] == version
        if name == "toy":
            assert set(_labels(res)) <= set(CLASSES if version == "1" else CLASSES_V2)
        else:
            assert res.as_numpy("mean").shape == (len(ROWS),)
    # without a version: the newest
    assert set(_labels(_infer(repo_server, "toy"))) <= set(CLASSES_V2)
    # unload: no longer served (404 naming what is), listed as unavailable; load: back again.
    # Clients that keep sending while it comes get answers, then the 404: none hangs or fails
    # otherwise
    statuses: list[list[int]] = [[] for _ in range(4)]
    answered = threading.Event()
    big = {"inputs": toy_data(64, 5)[0].tolist(), "samples": 256, "model": "reg"}

    def send(seen):
        with httpx.Client(timeout=120) as http:
            while len(seen) < 500 and 404 not in seen:
                seen.append(http.post(f"{repo_server.url}/v1/predict", json=big).status_code)
                answered.set()

    threads = [threading.Thread(target=send, args=(seen,)) for seen in statuses]
    for t in threads:
        t.start()
    assert answered.wait(60)
    client.unload_model("reg")
    for t in threads:
        t.join(120)
    for seen in statuses:  # 200 ... 200 404
        assert seen[-1] == 404 and set(seen[:-1]) <= {200}, seen
    assert not client.is_model_ready("reg")
    with pytest.raises(Exception, match="'reg' is not loaded"):
        _infer(repo_server, "reg", "1")
    index = {(m["name"], m.get("version")): m for m in client.get_model_repository_index()}
    assert index["reg", "1"]["state"] == "UNAVAILABLE" and index["reg", "1"]["reason"] == "unloaded"
    client.load_model("reg")
    assert client.is_model_ready("reg", "1")
    assert _infer(repo_server, "reg", "1").as_numpy("mean").shape == (len(ROWS),)
    with pytest.raises(Exception, match="no model 'ghost'"):
        client.load_model("ghost")


def test_a_bundle_copied_in_after_start_up_is_loaded(repo_server, folder):
    _, client = _client(repo_server)
    shutil.copytree(folder / "reg", folder / "late" / "3")
    try:
        index = {(m["name"], m.get("version")): m["state"]
                 for m in client.get_model_repository_index()}  # fmt: skip
        assert index["late", "3"] == "UNAVAILABLE"
        assert not client.is_model_ready("late")
        client.load_model("late")
        assert client.is_model_ready("late", "3")
        res = _infer(repo_server, "late", "3", samples=256)
        ref = _infer(repo_server, "reg", "1", samples=256)  # the same bundle
        error = np.sqrt(2 * ref.as_numpy("epistemic_variance") / 256)  # of the difference
        assert (np.abs(res.as_numpy("mean") - ref.as_numpy("mean")) < 5 * error).all()
        r = _predict(repo_server, model="late")
        assert r.status_code == 200 and r.json()["version"] == 3, r.text
        # a damaged bundle fails to load with its reason, and the others go on
        _damaged_copy(folder / "reg", folder / "broken")
        with pytest.raises(Exception, match="failed to load model 'broken'.*damaged or trunc"):
            client.load_model("broken")
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert "damaged or truncated" in index["broken"]["reason"]
        assert client.is_model_ready("toy", "1")
    finally:
        client.unload_model("late")
        shutil.rmtree(folder / "late")
        shutil.rmtree(folder / "broken", ignore_errors=True)


def test_status_page_lists_every_model(repo_server, browser):  # noqa: F811
    page = browser.new_page()
    page.goto(repo_server.url + "/")
    page.wait_for_function("document.querySelectorAll('#models tr[data-state]').length >= 3")
    rows = page.eval_on_selector_all(
        "#models tr[data-state]", "rs => rs.map(r => [r.dataset.name, r.dataset.version, "
        "r.dataset.state, r.cells[3].textContent])")  # fmt: skip
    shown = {(n, v): (s, task) for n, v, s, task in rows}
    assert shown["toy", "1"] == ("READY", "classification")
    assert shown["toy", "2"] == ("READY", "classification")
    assert shown["reg", "1"] == ("READY", "regression")
    # clicking a model shows its figures
    page.click("#models tr[data-name='reg']")
    page.wait_for_function("document.querySelector('#card').textContent.includes('regression')")
    page.close()


def test_a_bundle_that_fails_at_start_up_stops_the_server_naming_it(folder, tmp_path):
    root = tmp_path / "models"
    shutil.copytree(folder / "reg", root / "reg")
    _damaged_copy(folder / "reg", root / "bad" / "2")
    srv = start_server(root, tmp_path / "log", name=None, wait=False)
    assert srv.process.wait(120) == 2
    out = " ".join(srv.output().split())
    assert "model 'bad' version 2" in out and "damaged or truncated" in out, out
