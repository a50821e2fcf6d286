"""VBLL end to end on a table: ``bayesify train --method vbll``, ``bayesify calibrate``
(deferral and conformal sets), ``bayesify predict`` on a CSV file, and a seeded request served by
a real ``bayesify serve`` process, which answers as the bundle's predictor does in Python."""

from __future__ import annotations

import httpx
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
def vbll_bundle(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vbll")
    out = tmp / "bundle"
    invoke_ok(["train", "--method", "vbll", "--data", toy_table(tmp / "train.csv", 400, 0),
             "--target", "grade", "--hidden", "16", "--epochs", "5", "--lr", "0.01",
             "--option", "covariance=lowrank", "--out", out, "--no-eval"])  # fmt: skip
    invoke_ok(["calibrate", out, "--data", toy_table(tmp / "val.csv", 300, 1), "--coverage", "0.8",
             "--conformal", "--samples", "16"])  # fmt: skip
    return out


def test_the_cli_trains_calibrates_and_predicts_a_file(vbll_bundle, tmp_path):
    method = bayesify.load(vbll_bundle)
    assert type(method) is bayesify.VBLL and method.layer.covariance == "lowrank"
    rows = toy_table(tmp_path / "rows.csv", 40, 2)
    out = tmp_path / "pred.csv"
    invoke_ok(["predict", vbll_bundle, rows, "--out", out, "--samples", "16", "--no-progress"])
    pred = pd.read_csv(out)
    assert len(pred) == 40 and set(pred["label"]) <= set(CLASSES)
    assert pred["defer"].dtype == bool and 0 < pred["defer"].mean() < 1
    assert [c for c in pred.columns if "set" in c], list(pred.columns)
    assert (pred["label"] == pd.read_csv(rows)["grade"]).mean() > 0.6


def test_a_seeded_served_request_is_the_predictors_answer(vbll_bundle, tmp_path):
    rows = toy_data(6, 3)[0].tolist()
    server = start_server(vbll_bundle, tmp_path / "server.log", "--samples", "16")
    try:
        inputs = [dict(zip(FEATURES, r, strict=True)) for r in rows]
        body = {"inputs": inputs, "samples": 32, "seed": 4}
        r = httpx.post(f"{server.url}/v1/predict", json=body)
        assert r.status_code == 200, r.text
        served = r.json()["predictions"]
    finally:
        stop_server(server)
    local = Predictor.load(vbll_bundle).predict(pd.DataFrame(rows, columns=FEATURES),
                                                samples=32, seed=4).records()  # fmt: skip
    assert len(served) == len(local) == 6
    for s, loc in zip(served, local, strict=True):
        assert s["probabilities"] == pytest.approx(loc["probabilities"], abs=1e-6)
        assert s["defer"] == loc["defer"] and s["samples_used"] == 32
