"""DDU end to end on a table: ``bayesify train --method ddu``, ``bayesify calibrate`` (deferral
on the feature density, its default, and conformal sets), ``bayesify predict`` on a CSV file,
and a request served by a real ``bayesify serve`` process, which gives the network's softmax
and defers by the density; the bundle's density scores raw table rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import bayesify
from bayesify.predictor import Predictor

from .conftest import FEATURES, invoke_ok, predict_file_ok, served_predictions, train_calibrated


@pytest.fixture(scope="module")
def ddu_bundle(tmp_path_factory):
    return train_calibrated(tmp_path_factory.mktemp("ddu"), "ddu", 2)


def test_the_cli_trains_calibrates_and_predicts_a_file(ddu_bundle, tmp_path):
    method = bayesify.load(ddu_bundle)
    assert type(method) is bayesify.DDU and bool(method.density.fitted)
    policy = method.metadata["deferral"]
    assert policy["score"] == "density" and "decision" not in policy  # one pass, no sequence
    rows, pred = predict_file_ok(ddu_bundle, tmp_path, 2)
    # the density takes raw rows as predict does: table rows score above rows far from them
    frame = pd.read_csv(rows)[FEATURES]
    inside = method.density_score(frame)
    outside = method.density_score(frame * 20)
    assert inside.shape == (40,) and (outside.max() < inside.median()).item()
    # the deferral score is minus the density of each row, thresholded as calibrated
    np.testing.assert_allclose(pred["defer_score"], -inside.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(pred["defer"], pred["defer_score"] > policy["threshold"])
    # rows far from the training table are all deferred, whatever the softmax says
    far = tmp_path / "far.csv"
    (pd.read_csv(rows).assign(**{f: frame[f] * 20 for f in FEATURES})).to_csv(far, index=False)
    invoke_ok(["predict", ddu_bundle, far, "--out", tmp_path / "far_pred.csv", "--no-progress"])
    assert pd.read_csv(tmp_path / "far_pred.csv")["defer"].all()


def test_a_served_request_is_the_networks_softmax(ddu_bundle, tmp_path):
    rows, preds = served_predictions(ddu_bundle, tmp_path / "server.log", 2, samples=4)
    ref = Predictor.load(ddu_bundle).predict(pd.DataFrame(rows, columns=FEATURES), samples=2)
    probs = np.array([p["probabilities"] for p in preds])
    np.testing.assert_allclose(probs, ref.columns["probabilities"], atol=1e-5)
    method = bayesify.load(ddu_bundle)  # the softmax of the network on the prepared rows
    x = method.preprocessing.inputs(pd.DataFrame(rows, columns=FEATURES))
    with torch.no_grad():
        soft = torch.softmax(method.net(x), -1).numpy()
    np.testing.assert_allclose(probs, soft, atol=1e-5)
    # served deferral: minus the density of the rows, the bundle's threshold
    density = method.density_score(pd.DataFrame(rows, columns=FEATURES)).numpy()
    np.testing.assert_allclose([p["defer_score"] for p in preds], -density, rtol=1e-6)
    threshold = method.metadata["deferral"]["threshold"]
    assert [p["defer"] for p in preds] == [bool(-d > threshold) for d in density]
