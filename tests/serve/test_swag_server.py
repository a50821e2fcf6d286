"""SWAG end to end on a table: ``bayesify train --method swag`` (train, then collect),
``bayesify calibrate`` (deferral and conformal sets through the Predictive), ``bayesify
predict`` on a CSV file, and a request served by a real ``bayesify serve`` process."""

from __future__ import annotations

import httpx
import numpy as np
import pandas as pd
import pytest

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
def swag_bundle(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("swag")
    out = tmp / "bundle"
    invoke_ok(["train", "--method", "swag", "--data", toy_table(tmp / "train.csv", 400, 0),
             "--target", "grade", "--hidden", "16", "--epochs", "5", "--lr", "0.01",
             "--option", "swag_epochs=3", "--option", "collect_every=4", "--option", "rank=5",
             "--option", "bn_rows=32", "--out", out, "--no-eval"])  # fmt: skip
    invoke_ok(["calibrate", out, "--data", toy_table(tmp / "val.csv", 300, 1), "--coverage", "0.8",
             "--conformal", "--samples", "16"])  # fmt: skip
    return out


def test_the_cli_trains_collects_calibrates_and_predicts_a_file(swag_bundle, tmp_path):
    method = bayesify.load(swag_bundle)
    assert type(method) is bayesify.SWAG and method.net.bn_inputs.shape == (32, 4)
    assert int(method.net.counts[0]) >= 2
    rows = toy_table(tmp_path / "rows.csv", 40, 2)
    out = tmp_path / "pred.csv"
    invoke_ok(["predict", swag_bundle, rows, "--out", out, "--samples", "16", "--no-progress"])
    pred = pd.read_csv(out)
    assert len(pred) == 40 and set(pred["label"]) <= set(CLASSES)
    assert pred["defer"].dtype == bool and 0 < pred["defer"].mean() < 1
    set_columns = [c for c in pred.columns if "set" in c]
    assert set_columns, list(pred.columns)
    truth = pd.read_csv(rows)["grade"]
    accuracy = (pred["label"] == truth).mean()
    assert accuracy > 0.6, accuracy


def test_a_served_request_agrees_with_the_predictor(swag_bundle, tmp_path):
    rows = toy_data(6, 3)[0].tolist()
    server = start_server(swag_bundle, tmp_path / "server.log", "--samples", "16")
    try:
        inputs = [dict(zip(FEATURES, r, strict=True)) for r in rows]
        r = httpx.post(f"{server.url}/v1/predict", json={"inputs": inputs, "samples": 64})
        assert r.status_code == 200, r.text
        preds = r.json()["predictions"]
    finally:
        stop_server(server)
    ref = Predictor.load(swag_bundle).predict(pd.DataFrame(rows, columns=FEATURES),
                                              samples=1000, seed=0)  # fmt: skip
    probs = np.array([p["probabilities"] for p in preds])
    np.testing.assert_allclose(probs, ref.columns["probabilities"], atol=0.12)
    for p in preds:
        assert p["label"] in CLASSES and p["samples_used"] == 64
        assert p["defer"] == (p["defer_score"] > p["defer_threshold"])
