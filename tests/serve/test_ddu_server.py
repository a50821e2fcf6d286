"""DDU end to end on a table: ``bayesify train --method ddu``, ``bayesify calibrate`` (deferral
on the softmax entropy, its default, and conformal sets), ``bayesify predict`` on a CSV file,
and a request served by a real ``bayesify serve`` process, which gives the network's softmax;
the bundle's density scores raw table rows."""

from __future__ import annotations

import httpx
import numpy as np
import pandas as pd
import pytest
import torch

import bayesify
from bayesify.predictor import Predictor

from .conftest import (
    CLASSES,
    FEATURES,
    invoke_ok,
    start_server,
    stop_server,
    toy_data,
    toy_table,
)


@pytest.fixture(scope="module")
def ddu_bundle(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddu")
    out = tmp / "bundle"
    train = toy_table(tmp / "train.csv", 400, 0)
    invoke_ok(["train", "--method", "ddu", "--data", train, "--target", "grade",
               "--hidden", "16", "--epochs", "5", "--lr", "0.01", "--out", out,
               "--no-eval"])  # fmt: skip
    invoke_ok(["calibrate", out, "--data", toy_table(tmp / "val.csv", 300, 1), "--coverage", "0.8",
             "--conformal", "--samples", "2"])  # fmt: skip
    return out


def test_the_cli_trains_calibrates_and_predicts_a_file(ddu_bundle, tmp_path):
    method = bayesify.load(ddu_bundle)
    assert type(method) is bayesify.DDU and bool(method.density.fitted)
    assert method.metadata["deferral"]["score"] == "entropy"
    rows = toy_table(tmp_path / "rows.csv", 40, 2)
    out = tmp_path / "pred.csv"
    invoke_ok(["predict", ddu_bundle, rows, "--out", out, "--samples", "2", "--no-progress"])
    pred = pd.read_csv(out)
    assert len(pred) == 40 and set(pred["label"]) <= set(CLASSES)
    assert pred["defer"].dtype == bool and 0 < pred["defer"].mean() < 1
    assert [c for c in pred.columns if "set" in c], list(pred.columns)
    assert (pred["label"] == pd.read_csv(rows)["grade"]).mean() > 0.6
    # the density takes raw rows as predict does: table rows score above rows far from them
    frame = pd.read_csv(rows)[FEATURES]
    inside = method.density_score(frame)
    outside = method.density_score(frame * 20)
    assert inside.shape == (40,) and (outside.max() < inside.median()).item()


def test_a_served_request_is_the_networks_softmax(ddu_bundle, tmp_path):
    rows = toy_data(6, 3)[0].tolist()
    server = start_server(ddu_bundle, tmp_path / "server.log", "--samples", "2")
    try:
        inputs = [dict(zip(FEATURES, r, strict=True)) for r in rows]
        r = httpx.post(f"{server.url}/v1/predict", json={"inputs": inputs, "samples": 4})
        assert r.status_code == 200, r.text
        preds = r.json()["predictions"]
    finally:
        stop_server(server)
    ref = Predictor.load(ddu_bundle).predict(pd.DataFrame(rows, columns=FEATURES), samples=2)
    probs = np.array([p["probabilities"] for p in preds])
    np.testing.assert_allclose(probs, ref.columns["probabilities"], atol=1e-5)
    method = bayesify.load(ddu_bundle)  # the softmax of the network on the prepared rows
    x = method.preprocessing.inputs(pd.DataFrame(rows, columns=FEATURES))
    with torch.no_grad():
        soft = torch.softmax(method.net(x), -1).numpy()
    np.testing.assert_allclose(probs, soft, atol=1e-5)
