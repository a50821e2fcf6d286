"""A distilled student as a bundle: saved, loaded, conformal-calibrated, given a deferral policy
and served by a real ``bayesify serve`` process whose answers and model card say it is one."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
import torch

import bayesify
from bayesify.posthoc.conformal import calibrate_conformal
from bayesify.posthoc.deferral import DeferralPolicy
from bayesify.predictor import Predictor

from .conftest import CLASSES, start_server, stop_server, toy_data


@pytest.fixture(scope="module")
def student_bundle(toy_bundle, tmp_path_factory):
    teacher = bayesify.load(toy_bundle)
    student = bayesify.distill(teacher, toy_data(600, 0)[0], samples=16, epochs=10,
                               progress=False, teacher_source=str(toy_bundle))  # fmt: skip
    assert "deferral" not in student.metadata  # the teacher's policy is not the student's
    xv, yv = toy_data(400, 1)
    calibrate_conformal(student, (xv, yv), samples=16)
    pred = student.to_predictive(student.sample(xv, 16, seed=0))
    DeferralPolicy.fit(pred, yv, score="mi", target_coverage=0.8).store(student.metadata)
    path = tmp_path_factory.mktemp("student") / "student"
    student.save(path)
    return path


@pytest.fixture(scope="module")
def student_server(student_bundle, tmp_path_factory):
    srv = start_server(student_bundle, tmp_path_factory.mktemp("log") / "server.log",
                       "--samples", "32")  # fmt: skip
    yield srv
    stop_server(srv)


def test_round_trip_keeps_the_student(student_bundle):
    p = Predictor.load(student_bundle)
    assert isinstance(p.method, bayesify.Distilled)
    assert p.class_names == CLASSES and p.conformal is not None
    assert p.distilled_from["method"] == "mc-dropout"


def test_served_answers_say_they_come_from_a_distilled_student(student_server, toy_bundle):
    rows = toy_data(5, 3)[0].tolist()
    r = httpx.post(f"{student_server.url}/v1/predict", json={"inputs": rows, "seed": 1})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["distilled_from"]["method"] == "mc-dropout"
    assert body["distilled_from"]["source"] == str(toy_bundle)
    assert len(body["distilled_from"]["config_hash"]) == 16
    ref = Predictor.load(student_server.bundle).method.summaries(torch.tensor(rows))
    for rec, mean, mi in zip(body["predictions"], ref["mean"], ref["mutual_information"],
                             strict=True):  # fmt: skip
        assert rec["label"] in CLASSES and "defer" in rec and "prediction_set" in rec
        # 32 Dirichlet draws: the served figures estimate the student's closed forms
        np.testing.assert_allclose(rec["probabilities"], mean.numpy(), atol=0.1)
        assert abs(rec["mutual_information"] - float(mi)) < 0.1
    card = httpx.get(f"{student_server.url}/v1/model").json()
    assert card["method"] == "distilled"
    assert card["distilled"]["teacher"]["source"] == str(toy_bundle)
    assert card["distilled"]["transfer"]["augment"] == "outliers"
    assert card["deferral"]["score"] == "mi"


def test_v2_answers_carry_the_teacher(student_server):
    tensor = {"name": "x", "shape": [2, 4], "datatype": "FP32",
              "data": toy_data(2, 4)[0].flatten().tolist()}  # fmt: skip
    r = httpx.post(f"{student_server.url}/v2/models/toy/infer", json={"inputs": [tensor]})
    assert r.status_code == 200, r.text
    assert r.json()["parameters"]["distilled_from"]["method"] == "mc-dropout"


def test_other_bundles_carry_no_teacher(toy_bundle):
    p = Predictor.load(toy_bundle)
    assert p.distilled_from is None and "distilled" not in p.card()
