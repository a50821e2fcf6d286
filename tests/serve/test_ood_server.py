"""OOD scores by name through the one predictor: ``Predictor.predict(scores=...)``, ``bayesify
predict --scores`` and a real ``bayesify serve`` process's ``"scores"`` request field."""

from __future__ import annotations

import httpx
import numpy as np
import pandas as pd
import pytest
import torch
from scipy.special import logsumexp
from typer.testing import CliRunner

import bayesify
from bayesify.cli import app
from bayesify.predictor import Predictor

from .conftest import make_bundle, start_server, stop_server, toy_data

NAMES = ["energy", "mutual_information", "mahalanobis"]


@pytest.fixture(scope="module")
def scored_bundle(tmp_path_factory):
    """The toy MC dropout bundle with a Mahalanobis fit on its training rows."""
    tmp = tmp_path_factory.mktemp("ood")
    method = bayesify.load(make_bundle(tmp / "toy"))
    x, y = toy_data(600, 0)
    bayesify.fit_mahalanobis(method, x, y)
    method.save(tmp / "scored")
    return tmp / "scored"


def test_the_predictor_scores_rows_by_name(scored_bundle):
    p = Predictor.load(scored_bundle)
    x = toy_data(5, 3)[0]
    res = p.predict(x.numpy(), samples=8, seed=0, scores=NAMES)
    raw = p.method.sample(x, 8, seed=0)  # the same draws: logits [T, N, C]
    energy = -logsumexp(raw.double().numpy(), axis=-1).mean(0)
    np.testing.assert_allclose(res.columns["ood_energy"], energy, rtol=1e-5)
    np.testing.assert_allclose(res.columns["ood_mutual_information"],
                               res.columns["mutual_information"])  # fmt: skip
    direct = bayesify.ood_scores(p.method, x, ["mahalanobis"], samples=1)["mahalanobis"]
    np.testing.assert_allclose(res.columns["ood_mahalanobis"], direct.numpy(), rtol=1e-6)
    assert "ood_energy" in res.records()[0]
    with pytest.raises(ValueError, match="unknown OOD score 'bogus'"):
        p.predict(x.numpy(), samples=2, scores=["bogus"])
    with pytest.raises(ValueError, match="density: MCDropout has no fitted feature density"):
        p.predict(x.numpy(), samples=2, scores=["density"])


def test_bayesify_predict_writes_a_column_per_score(scored_bundle, tmp_path):
    rows = tmp_path / "rows.npz"
    x = toy_data(7, 4)[0].numpy()
    np.savez(rows, x=x)
    out = tmp_path / "pred.csv"
    args = ["predict", scored_bundle, rows, "--out", out, "--samples", "8", "--seed", "1",
            "--no-progress", "--scores", "energy,mahalanobis"]  # fmt: skip
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    ref = Predictor.load(scored_bundle).predict(x, samples=8, seed=1, scores=["mahalanobis"])
    np.testing.assert_allclose(frame["ood_mahalanobis"], ref.columns["ood_mahalanobis"],
                               rtol=1e-6)  # fmt: skip
    assert frame["ood_energy"].notna().all() and "ood_entropy" not in frame
    args[4] = tmp_path / "other.csv"
    bad = CliRunner().invoke(app, [str(a) for a in [*args[:-1], "energy,nope"]])
    assert bad.exit_code == 2 and "unknown OOD score 'nope'" in bad.output


def test_a_served_request_returns_the_scores_it_names(scored_bundle, tmp_path):
    x = toy_data(4, 5)[0]
    server = start_server(scored_bundle, tmp_path / "server.log", "--samples", "8")
    try:
        body = {"inputs": x.tolist(), "samples": 8, "seed": 3, "scores": NAMES}
        r = httpx.post(f"{server.url}/v1/predict", json=body)
        assert r.status_code == 200, r.text
        preds = r.json()["predictions"]
        plain = httpx.post(f"{server.url}/v1/predict", json={"inputs": x.tolist()})
        bad = httpx.post(f"{server.url}/v1/predict",
                         json={"inputs": x.tolist(), "scores": ["density"]})  # fmt: skip
        tensor = {"name": "x", "shape": [4, 4], "datatype": "FP32", "data": x.flatten().tolist()}
        v2 = httpx.post(
            f"{server.url}/v2/models/toy/infer",
            json={"inputs": [tensor], "parameters": {"samples": 8, "seed": 3, "scores": "energy"}},
        )
    finally:
        stop_server(server)
    ref = Predictor.load(scored_bundle).predict(x.numpy(), samples=8, seed=3, scores=NAMES)
    for name in NAMES:
        got = [p[f"ood_{name}"] for p in preds]
        np.testing.assert_allclose(got, ref.columns[f"ood_{name}"], rtol=1e-5)
    assert plain.status_code == 200 and "ood_energy" not in plain.json()["predictions"][0]
    assert bad.status_code == 422
    detail = bad.json()["detail"][0]
    assert detail["loc"] == ["body", "scores", 0] and "density is not available" in detail["msg"]
    assert torch.isfinite(torch.tensor([p["ood_energy"] for p in preds])).all()
    assert v2.status_code == 200, v2.text
    out = {o["name"]: o for o in v2.json()["outputs"]}
    np.testing.assert_allclose(out["ood_energy"]["data"], ref.columns["ood_energy"], rtol=1e-5)
    assert out["ood_energy"]["datatype"] == "FP64" and "ood_mahalanobis" not in out
