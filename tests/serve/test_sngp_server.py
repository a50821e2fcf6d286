"""SNGP end to end on a table: ``bayesify train --method sngp``, ``bayesify calibrate``
(deferral and conformal sets), ``bayesify predict`` on a CSV file, and a seeded request served
by a real ``bayesify serve`` process, which gives the Python predictor's answer."""

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
def sngp_bundle(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sngp")
    out = tmp / "bundle"
    train = toy_table(tmp / "train.csv", 400, 0)
    invoke_ok(["train", "--method", "sngp", "--data", train,
             "--target", "grade", "--hidden", "16", "--epochs", "5", "--lr", "0.01",
             "--option", "num_features=128", "--out", out, "--no-eval"])  # fmt: skip
    invoke_ok(["calibrate", out, "--data", toy_table(tmp / "val.csv", 300, 1), "--coverage", "0.8",
             "--conformal", "--samples", "16"])  # fmt: skip
    return out


def test_the_cli_trains_calibrates_and_predicts_a_file(sngp_bundle, tmp_path):
    method = bayesify.load(sngp_bundle)
    assert type(method) is bayesify.SNGP and method.head.num_features == 128
    rows = toy_table(tmp_path / "rows.csv", 40, 2)
    out = tmp_path / "pred.csv"
    invoke_ok(["predict", sngp_bundle, rows, "--out", out, "--samples", "16", "--no-progress"])
    pred = pd.read_csv(out)
    assert len(pred) == 40 and set(pred["label"]) <= set(CLASSES)
    assert pred["defer"].dtype == bool and 0 < pred["defer"].mean() < 1
    assert [c for c in pred.columns if "set" in c], list(pred.columns)
    assert (pred["label"] == pd.read_csv(rows)["grade"]).mean() > 0.6


def test_a_seeded_served_request_is_the_predictors_answer(sngp_bundle, tmp_path):
    rows = toy_data(6, 3)[0].tolist()
    server = start_server(sngp_bundle, tmp_path / "server.log", "--samples", "16")
    try:
        inputs = [dict(zip(FEATURES, r, strict=True)) for r in rows]
        body = {"inputs": inputs, "samples": 16, "seed": 5}
        r = httpx.post(f"{server.url}/v1/predict", json=body)
        assert r.status_code == 200, r.text
        preds = r.json()["predictions"]
    finally:
        stop_server(server)
    ref = Predictor.load(sngp_bundle).predict(
        pd.DataFrame(rows, columns=FEATURES), samples=16, seed=5
    )
    probs = np.array([p["probabilities"] for p in preds])
    np.testing.assert_allclose(probs, ref.columns["probabilities"], atol=1e-5)
    assert all(p["samples_used"] == 16 for p in preds)
    assert [p["defer"] for p in preds] == list(ref.columns["defer"])
