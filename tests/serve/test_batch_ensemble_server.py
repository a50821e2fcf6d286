"""BatchEnsemble end to end on a table: ``bayesify train --method batch-ensemble``,
``bayesify calibrate`` (deferral and conformal sets), ``bayesify predict`` on a CSV file, and a
request served by a real ``bayesify serve`` process, which gives the members' exact mixture."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import bayesify
from bayesify.predictor import Predictor

from .conftest import FEATURES, predict_file_ok, served_predictions, train_calibrated


@pytest.fixture(scope="module")
def be_bundle(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("batch-ensemble")
    return train_calibrated(tmp, "batch-ensemble", 3, "--option", "members=3")


def test_the_cli_trains_calibrates_and_predicts_a_file(be_bundle, tmp_path):
    method = bayesify.load(be_bundle)
    assert type(method) is bayesify.BatchEnsemble and method.members == 3
    predict_file_ok(be_bundle, tmp_path, 3)


def test_a_served_request_is_the_members_mixture(be_bundle, tmp_path):
    rows, preds = served_predictions(be_bundle, tmp_path / "server.log", 3, samples=6)
    # the members are deterministic: whatever T is asked for, the M members are the samples
    ref = Predictor.load(be_bundle).predict(pd.DataFrame(rows, columns=FEATURES), samples=3)
    probs = np.array([p["probabilities"] for p in preds])
    np.testing.assert_allclose(probs, ref.columns["probabilities"], atol=1e-5)
    assert all(p["samples_used"] == 3 for p in preds)
