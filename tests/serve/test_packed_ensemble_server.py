"""Packed-Ensembles end to end on a table: ``bayesify train --method packed-ensemble``,
``bayesify calibrate`` (deferral and conformal sets), ``bayesify predict`` on a CSV file, and a
request served by a real ``bayesify serve`` process, which gives the members' exact mixture
with T = M whatever T the request asks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import bayesify
from bayesify.posthoc.deferral import DeferralPolicy
from bayesify.predictor import Predictor

from .conftest import FEATURES, predict_file_ok, served_predictions, train_calibrated


@pytest.fixture(scope="module")
def pe_bundle(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("packed-ensemble")
    return train_calibrated(tmp, "packed-ensemble", 3, "--option", "members=3", "--option",
                            "alpha=3")  # fmt: skip


def test_the_cli_trains_calibrates_and_predicts_a_file(pe_bundle, tmp_path):
    method = bayesify.load(pe_bundle)
    assert type(method) is bayesify.PackedEnsemble and method.members == 3
    assert method.config.alpha == 3.0
    # the exact mixture of the 3 members: fitted on one draw of them, no sequential decision
    # drawing repeated members (calibrate's default decision elsewhere)
    policy = DeferralPolicy.from_metadata(method.metadata)
    assert policy.decision is None and policy.validation["samples"] == 3
    predict_file_ok(pe_bundle, tmp_path, 3)


def test_a_served_request_is_the_members_mixture(pe_bundle, tmp_path):
    rows, preds = served_predictions(pe_bundle, tmp_path / "server.log", 3, samples=6)
    # the reference: the three members cut out as plain networks, on the encoded rows
    predictor = Predictor.load(pe_bundle)
    ref = predictor.predict(pd.DataFrame(rows, columns=FEATURES), samples=3)
    method = predictor.method
    x = method.preprocessing.inputs(torch.tensor(rows, dtype=torch.float64))
    with torch.no_grad():
        members = torch.stack([method.member(m)(x.float()) for m in range(3)]).softmax(-1)
    np.testing.assert_allclose(ref.columns["probabilities"], members.mean(0).numpy(), atol=1e-5)
    probs = np.array([p["probabilities"] for p in preds])
    np.testing.assert_allclose(probs, ref.columns["probabilities"], atol=1e-5)
    assert all(p["samples_used"] == 3 for p in preds)  # T is M: 6 asked, the 3 members drawn
