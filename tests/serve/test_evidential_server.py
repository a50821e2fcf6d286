"""Evidential models end to end on tables: ``bayesify train --method evidential-classification``
and ``--method evidential-regression``, ``bayesify calibrate`` (deferral and conformal),
``bayesify predict`` on a CSV file, and requests served by a real ``bayesify serve`` process,
whose answer is the Python predictor's and converges to the head's closed forms."""

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
    regression_data,
    start_server,
    stop_server,
    toy_data,
    toy_table,
)

REG_FEATURES = ["u", "v", "w"]


def regression_table(path, n: int, seed: int):
    x, y = regression_data(n, seed)
    frame = pd.DataFrame(x.numpy(), columns=REG_FEATURES)
    frame["price"] = y.numpy()
    frame.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("evidential")
    cls, reg = tmp / "cls", tmp / "reg"
    invoke_ok(["train", "--method", "evidential-classification", "--data",
               toy_table(tmp / "train.csv", 400, 0), "--target", "grade", "--hidden", "16",
               "--epochs", "10", "--lr", "0.01", "--out", cls, "--no-eval"])  # fmt: skip
    invoke_ok(["calibrate", cls, "--data", toy_table(tmp / "val.csv", 300, 1), "--coverage",
               "0.8", "--conformal", "--samples", "50"])  # fmt: skip
    invoke_ok(["train", "--method", "evidential-regression", "--data",
               regression_table(tmp / "rtrain.csv", 400, 0), "--target", "price", "--hidden",
               "16", "--epochs", "20", "--lr", "0.01", "--out", reg, "--no-eval"])  # fmt: skip
    invoke_ok(["calibrate", reg, "--data", regression_table(tmp / "rval.csv", 300, 1),
               "--coverage", "0.8", "--conformal", "--samples", "50"])  # fmt: skip
    return cls, reg


def test_the_cli_trains_calibrates_and_predicts_a_file(bundles, tmp_path):
    cls, reg = bundles
    assert type(bayesify.load(cls)) is bayesify.EvidentialClassifier
    assert type(bayesify.load(reg)) is bayesify.EvidentialRegression
    rows = toy_table(tmp_path / "rows.csv", 40, 2)
    out = tmp_path / "pred.csv"
    invoke_ok(["predict", cls, rows, "--out", out, "--samples", "50", "--no-progress"])
    pred = pd.read_csv(out)
    assert len(pred) == 40 and set(pred["label"]) <= set(CLASSES)
    assert pred["defer"].dtype == bool and 0 < pred["defer"].mean() < 1
    assert [c for c in pred.columns if "set" in c], list(pred.columns)
    assert (pred["label"] == pd.read_csv(rows)["grade"]).mean() > 0.6
    rrows = regression_table(tmp_path / "rrows.csv", 40, 2)
    rout = tmp_path / "rpred.csv"
    invoke_ok(["predict", reg, rrows, "--out", rout, "--samples", "50", "--no-progress"])
    pred = pd.read_csv(rout)
    assert len(pred) == 40 and pred["defer"].dtype == bool
    truth = pd.read_csv(rrows)["price"]
    assert np.corrcoef(pred["mean"], truth)[0, 1] > 0.8
    assert [c for c in pred.columns if "lower" in c or "interval" in c], list(pred.columns)


def test_served_answers_are_the_predictors_and_the_closed_forms(bundles, tmp_path):
    cls, reg = bundles
    rows = toy_data(6, 3)[0].tolist()
    rrows = regression_data(6, 3)[0].tolist()
    answers = {}
    for name, bundle, cols, data in (("cls", cls, FEATURES, rows),
                                     ("reg", reg, REG_FEATURES, rrows)):  # fmt: skip
        server = start_server(bundle, tmp_path / f"{name}.log", "--samples", "50")
        try:
            inputs = [dict(zip(cols, r, strict=True)) for r in data]
            body = {"inputs": inputs, "samples": 256, "seed": 3}
            r = httpx.post(f"{server.url}/v1/predict", json=body, timeout=60)
            assert r.status_code == 200, r.text
            answers[name] = r.json()["predictions"]
        finally:
            stop_server(server)
    # the classifier: the predictor's answer with the same seed; the Dirichlet's closed forms
    p = Predictor.load(cls)
    ref = p.predict(pd.DataFrame(rows, columns=FEATURES), samples=256, seed=3)
    probs = np.array([a["probabilities"] for a in answers["cls"]])
    np.testing.assert_allclose(probs, ref.columns["probabilities"], atol=1e-5)
    forms = p.method.summaries(torch.tensor(rows))
    np.testing.assert_allclose(probs, forms["mean"].numpy(), atol=0.1)
    mi = np.array([a["mutual_information"] for a in answers["cls"]])
    np.testing.assert_allclose(mi, forms["mutual_information"].numpy(), atol=0.1)
    # the regression: the Student-t's mean and standard deviation in the target's units
    p = Predictor.load(reg)
    ref = p.predict(pd.DataFrame(rrows, columns=REG_FEATURES), samples=256, seed=3)
    mean = np.array([a["mean"] for a in answers["reg"]])
    np.testing.assert_allclose(mean, ref.columns["mean"], rtol=1e-5)
    forms = p.method.summaries(torch.tensor(rrows))
    std = np.array([a["std"] for a in answers["reg"]])
    np.testing.assert_allclose(std, forms["variance"].sqrt().numpy(), rtol=0.3)
    assert abs(mean - forms["mean"].numpy()).max() < 0.3 * std.min()
