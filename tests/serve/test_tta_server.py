"""A TTA bundle (MC dropout + input jitter) served by a real ``bayesify serve`` process: the
seeded answer is the one ``Predictor.load(bundle)`` gives in Python, and the deferral policy
stored with it applies."""

from __future__ import annotations

import httpx
import pytest
import torch

from bayesify.predictor import Predictor

from .conftest import CLASSES, start_server, stop_server, toy_data


@pytest.fixture(scope="module")
def tta_bundle(tmp_path_factory):
    from bayesify.data.preprocessing import Preprocessing
    from bayesify.methods import TTA, MCDropout
    from bayesify.models import mlp
    from bayesify.posthoc.deferral import DeferralPolicy

    torch.manual_seed(0)
    net = mlp(4, 3, (32,), norm=None, dropout=0.2)
    method = TTA(net, task="classification", method=MCDropout, transforms="noise:0.3")
    method.fit(toy_data(600, 0), epochs=10, batch_size=64, lr=1e-2, progress=False)
    method.preprocessing = Preprocessing(input_shape=[4], class_names=list(CLASSES))
    xv, yv = toy_data(300, 1)
    pred = method.to_predictive(method.sample(xv, 16, seed=0))
    DeferralPolicy.fit(pred, yv, score="mi", target_coverage=0.8).store(method.metadata)
    return method.save(tmp_path_factory.mktemp("bundle") / "tta")


@pytest.fixture(scope="module")
def server(tta_bundle, tmp_path_factory):
    srv = start_server(tta_bundle, tmp_path_factory.mktemp("log") / "server.log",
                       "--samples", "16", "--batch-wait-ms", "2")  # fmt: skip
    yield srv
    stop_server(srv)


def test_served_tta_answers_as_the_bundle_does_in_python(server, tta_bundle):
    rows = toy_data(6, 5)[0].tolist()
    r = httpx.post(f"{server.url}/v1/predict", json={"inputs": rows, "samples": 16, "seed": 4})
    assert r.status_code == 200, r.text
    served = r.json()["predictions"]
    local = Predictor.load(tta_bundle).predict(rows, samples=16, seed=4).records()
    assert len(served) == len(local) == 6
    for s, loc in zip(served, local, strict=True):
        assert s["probabilities"] == pytest.approx(loc["probabilities"], abs=1e-6)
        assert s["defer"] == loc["defer"]
    info = httpx.get(f"{server.url}/v1/model").json()
    assert "tta" in str(info)
