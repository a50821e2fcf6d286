"""``bayesify serve DIR`` at its edges, one real process: version folders whose names are not
plain integers (``²``, ``01``, ``1.5``, ``abc``) are listed with their reason and never break the
rest; every repository route checks its body (4xx, a deeply nested one included); every v2 error
is ``{"error": ...}``; an unload waits for its passes off the event loop; ``--max-models`` bounds
what is loaded; an unloaded model's series leave ``/metrics``."""

from __future__ import annotations

import shutil
import statistics
import subprocess
import threading
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bayesify.bench.process import cli_path, start_server

from .conftest import make_bundle, stop_server, toy_data

ODD = ["²", "01", "1.5", "0"]
MAX_MODELS = 3


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("edges") / "models"
    make_bundle(root / "toy" / "1")
    for name in ODD:
        shutil.copytree(root / "toy" / "1", root / "toy" / name)
    shutil.copytree(root / "toy" / "1", root / "plain")
    shutil.copytree(root / "toy" / "1", root / "odd" / "abc")  # no version to serve at all
    return root


@pytest.fixture(scope="module")
def edges(folder, tmp_path_factory):
    log = tmp_path_factory.mktemp("log") / "server.log"
    srv = start_server(folder, log, "--threads", "1", "--samples", "16", "--batch-rows", "0",
                       "--max-models", str(MAX_MODELS), name=None)  # fmt: skip
    yield srv
    stop_server(srv)


@pytest.fixture(autouse=True)
def plain_loaded_after(edges):
    """Every test leaves 'plain' loaded, so one that fails between an unload and its load does
    not fail the tests after it."""
    yield
    index = _post(edges, "/v2/repository/index").json()
    if not any(row["name"] == "plain" and row["state"] == "READY" for row in index):
        assert _post(edges, "/v2/repository/models/plain/load").status_code == 200


def _post(srv, path, content=None, **kw):
    return httpx.post(f"{srv.url}{path}", content=content, timeout=60, **kw)


def _series(srv, model):
    text = httpx.get(f"{srv.url}/metrics").text
    return [s for f in text_string_to_metric_families(text) for s in f.samples
            if s.labels.get("model") == model]  # fmt: skip


def test_odd_version_folders_are_listed_with_their_reason(edges, folder):
    # before: '²' passed isdigit() and failed int(): index 500, every load 400, and serve DIR
    # stopped without naming the folder; '01' was served as 1, 'abc' and '1.5' were ignored
    out = edges.output()
    for name in ODD:
        assert f"not serving toy/{name}:" in out, out
    r = _post(edges, "/v2/repository/index")
    assert r.status_code == 200, r.text
    rows = {(row["name"], row.get("version")): row for row in r.json()}
    assert rows["toy", "1"]["state"] == "READY" and rows["plain", "1"]["state"] == "READY"
    for name in ["²", "01", "1.5"]:
        assert rows["toy", name]["state"] == "UNAVAILABLE"
        assert "is not a plain integer" in rows["toy", name]["reason"], rows["toy", name]
    assert "versions run from 1" in rows["toy", "0"]["reason"]
    assert rows["odd", "abc"]["state"] == "UNAVAILABLE"
    # loads go on: the model with good versions loads, the one without says why
    assert _post(edges, "/v2/repository/models/toy/load").status_code == 200
    r = _post(edges, "/v2/repository/models/odd/load")
    assert r.status_code == 400 and "no version folder can be served" in r.json()["error"], r.text
    assert "'abc' is not a plain integer" in r.json()["error"]
    # the status page's list carries them too
    r = httpx.get(f"{edges.url}/v1/status")
    assert r.status_code == 200, r.text
    assert {("toy", "²"), ("toy", 1)} <= {(m["name"], m["version"]) for m in r.json()["models"]}
    # a version in a URL is a plain integer too: '²' and '01' name no version (404, not 500)
    for version in ["%C2%B2", "01", "1.5", "99999999999999999999999"]:
        for tail in ["", "/ready"]:
            r = httpx.get(f"{edges.url}/v2/models/toy/versions/{version}{tail}")
            assert r.status_code == 404 and "served versions: 1" in r.json()["error"], r.text
        r = _post(edges, f"/v2/models/toy/versions/{version}/infer", json={"inputs": []})
        assert r.status_code == 404, r.text


BAD_BODIES = {
    "parameters not an object": b'{"parameters": 5}',
    "deep JSON": b"[" * 100_000 + b"]" * 100_000,
    "deep object": b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    "a list": b"[]",
    "a string": b'"x"',
    "not JSON": b"{nope",
    "unknown field": b'{"config": "x"}',
}


@pytest.mark.parametrize("route", ["/v2/repository/index", "/v2/repository/models/toy/load",
                                   "/v2/repository/models/nope/unload"])  # fmt: skip
def test_every_repository_route_checks_its_body(edges, route):
    for what, body in BAD_BODIES.items():
        r = _post(edges, route, body, headers={"Content-Type": "application/json"})
        # before: {"parameters": 5} and the deep bodies were 500s
        assert r.status_code == 400, (what, r.status_code, r.text[:300])
        assert list(r.json()) == ["error"] and isinstance(r.json()["error"], str), (what, r.text)
    typed = {
        "/v2/repository/index": b'{"ready": "yes"}',
        "/v2/repository/models/toy/load": b'{"parameters": {"config": "{}"}}',
        "/v2/repository/models/nope/unload": b'{"parameters": {"unload_dependents": 1}}',
    }
    r = _post(edges, route, typed[route])
    assert r.status_code == 400 and list(r.json()) == ["error"], r.text
    # tritonclient's own bodies are taken
    ok = {
        "/v2/repository/index": b'{"ready": true}',
        "/v2/repository/models/toy/load": b"{}",
        "/v2/repository/models/nope/unload": b'{"parameters": {"unload_dependents": false}}',
    }
    assert _post(edges, route, ok[route]).status_code in (200, 404)


def test_every_v2_error_is_one_form(edges):
    url = edges.url
    answers = {
        "metadata": httpx.get(f"{url}/v2/models/nope"),
        "version metadata": httpx.get(f"{url}/v2/models/toy/versions/9"),
        "ready": httpx.get(f"{url}/v2/models/nope/ready"),
        "infer": httpx.post(f"{url}/v2/models/nope/infer", json={"inputs": []}),
        "bad infer": httpx.post(f"{url}/v2/models/toy/infer", content=b"{nope"),
        "method": httpx.get(f"{url}/v2/models/toy/infer"),
        "route": httpx.get(f"{url}/v2/nothing/here"),
        "load": httpx.post(f"{url}/v2/repository/models/ghost/load"),
        "unload": httpx.post(f"{url}/v2/repository/models/ghost/unload"),
        "index": httpx.post(f"{url}/v2/repository/index", content=b"[]"),
    }
    for what, r in answers.items():
        assert r.status_code >= 400, (what, r.text)
        assert list(r.json()) == ["error"] and isinstance(r.json()["error"], str), (what, r.text)


def test_an_unload_waits_for_its_passes_off_the_event_loop(edges):
    # batching off: each request is its own pass in the model's one worker; 8 heavy ones
    # queue seconds of work, which the unload waits for (before: blocking the event loop,
    # /healthz included, the whole time)
    heavy = {"inputs": toy_data(256, 3)[0].tolist(), "samples": 256, "model": "plain"}
    answered: list[tuple[int, float]] = []  # (status, when its answer came)

    def send() -> None:
        r = httpx.post(f"{edges.url}/v1/predict", json=heavy, timeout=120)
        answered.append((r.status_code, time.monotonic()))

    one = float("inf")
    for _ in range(3):  # one pass's time on this machine (the fastest of three, warm)
        start = time.monotonic()
        send()
        one = min(one, time.monotonic() - start)
    answered.clear()
    # queue about 4 s of passes, whatever the machine's speed
    senders = [threading.Thread(target=send) for _ in range(min(64, max(8, int(4 / one) + 1)))]
    for t in senders:
        t.start()
    time.sleep(0.5)  # all queued
    took: list[float] = []
    unloaded: list[float] = []

    def unload() -> None:
        start = time.monotonic()
        assert _post(edges, "/v2/repository/models/plain/unload").status_code == 200
        unloaded.append(time.monotonic())
        took.append(unloaded[0] - start)

    unloader = threading.Thread(target=unload)
    unloader.start()
    waits: list[float] = []  # /healthz's answer times while the unload waits
    while unloader.is_alive():
        start = time.monotonic()
        assert httpx.get(f"{edges.url}/healthz", timeout=30).status_code == 200
        waits.append(time.monotonic() - start)
        time.sleep(0.02)
    unloader.join()
    for t in senders:
        t.join(300)
    assert took and took[0] > 1.0, (took, one, len(senders))  # passes were still queued ...
    # ... and the unload answered only once every pass queued before it had been answered
    # (a quiet machine runs the queue faster than one timed request suggests, so no fixed time)
    last = max(when for status, when in answered if status == 200)
    assert last <= unloaded[0] + 0.25, (last - unloaded[0], took, one, len(senders))
    # the server answered meanwhile, slowed only by the passes' share of the GIL: a blocked
    # event loop answers once or twice in all (the first waiting the whole unload). The median,
    # not the worst: on a loaded machine one answer took 7 s of a 16 s unload
    assert len(waits) >= 3 and statistics.median(waits) < took[0] / 3, (waits, took)
    statuses = [status for status, _ in answered]
    assert set(statuses) <= {200, 404} and 200 in statuses, statuses
    assert _post(edges, "/v2/repository/models/plain/load").status_code == 200


def test_an_unloaded_models_series_leave_the_metrics(edges):
    r = httpx.post(f"{edges.url}/v1/predict", json={"inputs": toy_data(3, 0)[0].tolist(),
                                                     "model": "plain"})  # fmt: skip
    assert r.status_code == 200, r.text
    assert _series(edges, "plain")
    assert _post(edges, "/v2/repository/models/plain/unload").status_code == 200
    # before: every series of the unloaded model stayed, for as long as the server ran
    assert _series(edges, "plain") == []
    assert _series(edges, "toy")  # the others' stay
    assert _post(edges, "/v2/repository/models/plain/load").status_code == 200


def test_max_models_bounds_what_is_loaded(edges, folder):
    bundle = folder / "toy" / "1"
    for version in ("1", "2"):
        shutil.copytree(bundle, folder / "twin" / version)
    shutil.copytree(bundle, folder / "single")
    try:
        # toy and plain are loaded: twin's two versions would make 4 of at most 3
        r = _post(edges, "/v2/repository/models/twin/load")
        assert r.status_code == 409, r.text
        assert "at most 3" in r.json()["error"] and "--max-models" in r.json()["error"]
        assert not any(row["name"] == "twin" and row["state"] == "READY"
                       for row in _post(edges, "/v2/repository/index").json())  # fmt: skip
        assert _post(edges, "/v2/repository/models/single/load").status_code == 200
        assert _post(edges, "/v2/repository/models/single/unload").status_code == 200
    finally:
        shutil.rmtree(folder / "twin")
        shutil.rmtree(folder / "single")


def test_a_folder_beyond_max_models_fails_at_start_up_in_one_line(folder):
    out = subprocess.run([cli_path(), "serve", str(folder), "--max-models", "1"],
                         capture_output=True, text=True, timeout=180)  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    text = " ".join(" ".join(lines).split())
    assert "holds 2 model versions; at most 1" in text and "--max-models" in text, text
    assert "Traceback" not in text and "serving" not in text
