"""SNGP end to end on a table: ``bayesify train --method sngp``, ``bayesify calibrate``
(deferral and conformal sets), ``bayesify predict`` on a CSV file, and a seeded request served
by a real ``bayesify serve`` process, which gives the Python predictor's answer."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import bayesify
from bayesify.predictor import Predictor

from .conftest import FEATURES, predict_file_ok, served_predictions, train_calibrated


@pytest.fixture(scope="module")
def sngp_bundle(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sngp")
    return train_calibrated(tmp, "sngp", 16, "--option", "num_features=128")


def test_the_cli_trains_calibrates_and_predicts_a_file(sngp_bundle, tmp_path):
    method = bayesify.load(sngp_bundle)
    assert type(method) is bayesify.SNGP and method.head.num_features == 128
    predict_file_ok(sngp_bundle, tmp_path, 16)


def test_a_seeded_served_request_is_the_predictors_answer(sngp_bundle, tmp_path):
    rows, preds = served_predictions(sngp_bundle, tmp_path / "server.log", 16, samples=16,
                                     seed=5)  # fmt: skip
    ref = Predictor.load(sngp_bundle).predict(
        pd.DataFrame(rows, columns=FEATURES), samples=16, seed=5
    )
    probs = np.array([p["probabilities"] for p in preds])
    np.testing.assert_allclose(probs, ref.columns["probabilities"], atol=1e-5)
    assert all(p["samples_used"] == 16 for p in preds)
    assert [p["defer"] for p in preds] == list(ref.columns["defer"])
