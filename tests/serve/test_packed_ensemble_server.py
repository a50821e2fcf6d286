"""Packed-Ensembles end to end on a table: ``bayesify train --method packed-ensemble``,
``bayesify calibrate`` (deferral and conformal sets), ``bayesify predict`` on a CSV file, and a
request served by a real ``bayesify serve`` process, which gives the members' exact mixture
with T = M whatever T the request asks."""

from __future__ import annotations

import httpx
import numpy as np
import pandas as pd
import pytest
import torch

import bayesify
from bayesify.posthoc.deferral import DeferralPolicy
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
def pe_bundle(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("packed-ensemble")
    out = tmp / "bundle"
    train = toy_table(tmp / "train.csv", 400, 0)
    invoke_ok(["train", "--method", "packed-ensemble", "--data", train,
             "--target", "grade", "--hidden", "16", "--epochs", "5", "--lr", "0.01",
             "--option", "members=3", "--option", "alpha=3", "--out", out,
             "--no-eval"])  # fmt: skip
    invoke_ok(["calibrate", out, "--data", toy_table(tmp / "val.csv", 300, 1), "--coverage", "0.8",
             "--conformal", "--samples", "3"])  # fmt: skip
    return out


def test_the_cli_trains_calibrates_and_predicts_a_file(pe_bundle, tmp_path):
    method = bayesify.load(pe_bundle)
    assert type(method) is bayesify.PackedEnsemble and method.members == 3
    assert method.config.alpha == 3.0
    # the exact mixture of the 3 members: fitted on one draw of them, no sequential decision
    # drawing repeated members (calibrate's default decision elsewhere)
    policy = DeferralPolicy.from_metadata(method.metadata)
    assert policy.decision is None and policy.validation["samples"] == 3
    rows = toy_table(tmp_path / "rows.csv", 40, 2)
    out = tmp_path / "pred.csv"
    invoke_ok(["predict", pe_bundle, rows, "--out", out, "--samples", "3", "--no-progress"])
    pred = pd.read_csv(out)
    assert len(pred) == 40 and set(pred["label"]) <= set(CLASSES)
    assert pred["defer"].dtype == bool and 0 < pred["defer"].mean() < 1
    assert [c for c in pred.columns if "set" in c], list(pred.columns)
    assert (pred["label"] == pd.read_csv(rows)["grade"]).mean() > 0.6


def test_a_served_request_is_the_members_mixture(pe_bundle, tmp_path):
    rows = toy_data(6, 3)[0].tolist()
    server = start_server(pe_bundle, tmp_path / "server.log", "--samples", "3")
    try:
        inputs = [dict(zip(FEATURES, r, strict=True)) for r in rows]
        r = httpx.post(f"{server.url}/v1/predict", json={"inputs": inputs, "samples": 6})
        assert r.status_code == 200, r.text
        preds = r.json()["predictions"]
    finally:
        stop_server(server)
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
