"""The flow posterior end to end: a bundle served by a real `bayesify serve` process agrees with
the predictor, and conformal intervals on its predictive hold their coverage on new rows."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
import torch

from bayesify.posthoc.conformal import Conformal
from bayesify.predictor import Predictor

from .conftest import regression_data, start_server, stop_server

pytest.importorskip("zuko")


@pytest.fixture(scope="module")
def flow(tmp_path_factory):
    import bayesify
    from bayesify.models import mlp

    torch.manual_seed(0)
    x, y = regression_data(600, 0)
    y = (y - 100.0) / 9.0
    net = bayesify.Deterministic(mlp(3, 1, (16,), norm=None))
    net.fit((x[:400], y[:400]), epochs=20, lr=1e-2, progress=False)
    method = bayesify.FlowPosterior.from_pretrained(
        net.net, (x[:400], y[:400]), val=(x[400:500], y[400:500]), flow="realnvp",
        elbo_steps=150, init_scale=0.05,
    )  # fmt: skip
    path = tmp_path_factory.mktemp("bundle") / "flow"
    method.save(path)
    return method, path, (x[500:], y[500:])


def test_conformal_intervals_of_the_flow_cover_new_rows(flow):
    method, _, (x, y) = flow
    xv, yv = regression_data(400, 3)
    conformal = Conformal.fit(method.predict(xv, samples=64, seed=0), (yv - 100.0) / 9.0)
    lo, hi = conformal.interval(method.predict(x, samples=64, seed=1), level=0.9)
    covered = ((y >= lo) & (y <= hi)).float().mean().item()
    assert 0.8 <= covered <= 0.98, covered


def test_served_flow_bundle_agrees_with_the_predictor(flow, tmp_path):
    _, path, (x, _) = flow
    rows = x[:5].tolist()
    server = start_server(path, tmp_path / "server.log", "--samples", "64")
    try:
        r = httpx.post(f"{server.url}/v1/predict", json={"inputs": rows, "samples": 64})
    finally:
        stop_server(server)
    assert r.status_code == 200, r.text
    served = np.array([p["mean"] for p in r.json()["predictions"]])
    ref = Predictor.load(path).predict(rows, samples=2000, seed=0).columns["mean"]
    np.testing.assert_allclose(served, ref, atol=0.1)
