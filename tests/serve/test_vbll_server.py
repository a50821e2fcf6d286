"""VBLL end to end on a table: ``bayesify train --method vbll``, ``bayesify calibrate``
(deferral and conformal sets), ``bayesify predict`` on a CSV file, and a seeded request served by
a real ``bayesify serve`` process, which answers as the bundle's predictor does in Python."""

from __future__ import annotations

import pandas as pd
import pytest

import bayesify
from bayesify.predictor import Predictor

from .conftest import FEATURES, predict_file_ok, served_predictions, train_calibrated


@pytest.fixture(scope="module")
def vbll_bundle(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vbll")
    return train_calibrated(tmp, "vbll", 16, "--option", "covariance=lowrank")


def test_the_cli_trains_calibrates_and_predicts_a_file(vbll_bundle, tmp_path):
    method = bayesify.load(vbll_bundle)
    assert type(method) is bayesify.VBLL and method.layer.covariance == "lowrank"
    predict_file_ok(vbll_bundle, tmp_path, 16)


def test_a_seeded_served_request_is_the_predictors_answer(vbll_bundle, tmp_path):
    rows, served = served_predictions(vbll_bundle, tmp_path / "server.log", 16, samples=32,
                                      seed=4)  # fmt: skip
    local = Predictor.load(vbll_bundle).predict(pd.DataFrame(rows, columns=FEATURES),
                                                samples=32, seed=4).records()  # fmt: skip
    assert len(served) == len(local) == 6
    for s, loc in zip(served, local, strict=True):
        assert s["probabilities"] == pytest.approx(loc["probabilities"], abs=1e-6)
        assert s["defer"] == loc["defer"] and s["samples_used"] == 32
