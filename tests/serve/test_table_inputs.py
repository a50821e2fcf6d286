"""A bundle trained with ``bayesify train`` on a table (a number feature, a text category,
integer classes 1..3) served by a real process: the Open Inference Protocol takes the raw
feature values, one tensor per feature (BYTES for the category), from tritonclient in JSON and
binary form, and answers exactly as the predictor does on the same rows; pre-encoded one-hot
columns are checked; class labels come back as integers; a value far outside the training data
is refused with the words Python uses. Deterministic method: every answer is exact."""

from __future__ import annotations

import httpx
import numpy as np
import pandas as pd
import pytest

from bayesify.app.table_jobs import build_table_training
from bayesify.data import DataError
from bayesify.predictor import Predictor

from .conftest import start_server, stop_server

httpclient = pytest.importorskip("tritonclient.http")
ZONES = ["east", "north", "south"]


def _table(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    a = rng.normal(10, 3, n)
    zone = rng.choice(ZONES, n)
    score = (a - 10) / 3 + (zone == "north") - (zone == "south") + 0.3 * rng.normal(size=n)
    return pd.DataFrame({"a": a, "zone": zone, "fault": np.digitize(score, [-0.5, 0.5]) + 1})


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = tmp_path_factory.mktemp("faults")
    _table(300, 0).to_csv(path / "faults.csv", index=False)
    job, _ = build_table_training("deterministic", path / "faults.csv", "fault")
    job.method.fit(job.train, val=job.val, epochs=20, lr=1e-2, progress=False)
    job.method.preprocessing = job.preprocessing
    bundle = job.method.save(path / "faults")
    srv = start_server(bundle, tmp_path_factory.mktemp("log") / "server.log", "--samples", "4")
    yield srv, Predictor.load(bundle)
    stop_server(srv)


def _client(srv):
    return httpclient.InferenceServerClient(srv.url.removeprefix("http://"))


def _feature_inputs(rows: pd.DataFrame, binary: bool) -> list:
    a = httpclient.InferInput("a", [len(rows)], "FP64")
    a.set_data_from_numpy(rows["a"].to_numpy(np.float64), binary_data=binary)
    zone = httpclient.InferInput("zone", [len(rows), 1], "BYTES")
    zone.set_data_from_numpy(rows[["zone"]].to_numpy(object), binary_data=binary)
    return [zone, a]  # any order


@pytest.mark.parametrize("binary", [False, True])
def test_v2_raw_features_match_the_predictor(served, binary):
    srv, predictor = served
    rows = _table(12, 1)
    res = _client(srv).infer("toy", _feature_inputs(rows, binary))
    ref = predictor.predict(rows, samples=4).columns
    np.testing.assert_allclose(res.as_numpy("probabilities"), ref["probabilities"], rtol=1e-5)
    labels = res.as_numpy("label")
    assert labels.dtype == np.int64 and list(labels) == list(ref["label"])
    assert set(labels) <= {1, 2, 3}
    assert list(res.as_numpy("class_index")) == [int(v) - 1 for v in labels]
    meta = _client(srv).get_model_metadata("toy")
    assert [(i["name"], i["datatype"]) for i in meta["inputs"]] == [("a", "FP64"),
                                                                     ("zone", "BYTES")]  # fmt: skip
    assert next(o for o in meta["outputs"] if o["name"] == "label")["datatype"] == "INT64"


def test_v1_labels_are_integers(served):
    srv, predictor = served
    rows = _table(5, 2)
    body = {"inputs": rows.drop(columns="fault").to_dict("records"), "samples": 4}
    preds = httpx.post(f"{srv.url}/v1/predict", json=body).json()["predictions"]
    ref = predictor.predict(rows, samples=4).records()
    assert [p["label"] for p in preds] == [r["label"] for r in ref]
    assert all(type(p["label"]) is int for p in preds)


def test_feedback_reads_integer_classes_as_labels(served):
    """Classes 1..3: an outcome of 1 is class 1 (the label the server returned), not index 1."""
    srv, _ = served
    rows = _table(1, 3)
    body = {"inputs": rows.drop(columns="fault").to_dict("records"), "samples": 4}
    pred = httpx.post(f"{srv.url}/v1/predict", json=body).json()["predictions"][0]
    label = pred["label"]
    answer = httpx.post(f"{srv.url}/v1/feedback",
                        json={"outcomes": [{"request_id": pred["request_id"],
                                            "outcome": label}]}).json()  # fmt: skip
    assert answer["accepted"] == 1
    status = httpx.get(f"{srv.url}/v1/model").json()["monitor"]
    assert status["all"]["error"] == 0.0  # scored as the predicted class, so no error
    bad = httpx.post(
        f"{srv.url}/v1/feedback",
        json={"outcomes": [{"request_id": pred["request_id"], "outcome": 0}]},
    )
    assert bad.status_code == 422 and "unknown class 0" in bad.text


def _v2(srv, inputs):
    return httpx.post(f"{srv.url}/v2/models/toy/infer", json={"inputs": inputs})


def test_pre_encoded_columns_are_checked(served):
    srv, predictor = served
    rows = _table(3, 3)
    onehot = [[r.a, *(float(r.zone == z) for z in ZONES)] for r in rows.itertuples()]
    good = _v2(srv, [{"name": "x", "shape": [3, 4], "datatype": "FP64", "data": onehot}])
    assert good.status_code == 200, good.text
    prob = next(o for o in good.json()["outputs"] if o["name"] == "probabilities")["data"]
    ref = predictor.predict(rows, samples=4).columns["probabilities"]
    np.testing.assert_allclose(np.reshape(prob, (3, 3)), ref, rtol=1e-5)
    for bad, said in [([10.0, 1.0, 1.0, 0.0], "hold 2 ones; one-hot columns hold exactly one 1"),
                      ([10.0, 0.0, 0.0, 0.0], "hold 0 ones"),
                      ([10.0, 0.3, 0.7, 0.0], "0.3 is not 0 or 1")]:  # fmt: skip
        r = _v2(srv, [{"name": "x", "shape": [2, 4], "datatype": "FP64",
                       "data": [onehot[0], bad]}])  # fmt: skip
        assert r.status_code == 422 and r.json()["error"].startswith("inputs.0.1: "), r.text
        assert "row 1: columns of category 'zone' (zone=east, zone=north, zone=south)" in (
            r.json()["error"]) and said in r.json()["error"], r.text  # fmt: skip


def test_far_out_values_get_the_words_python_uses(served):
    srv, predictor = served
    with pytest.raises(DataError) as info:
        predictor.predict([{"a": 1e30, "zone": "east"}])
    python_says = str(info.value).removesuffix("; use on_error='skip' to leave such rows out")
    assert "column 'a': 1e+30 is outside the range this model accepts" in python_says
    r = httpx.post(f"{srv.url}/v1/predict", json={"inputs": [{"a": 1e30, "zone": "east"}]})
    assert r.status_code == 422 and r.json()["detail"][0]["msg"] == python_says, r.text
    a = {"name": "a", "shape": [2], "datatype": "FP64", "data": [10.0, 1e30]}
    zone = {"name": "zone", "shape": [2], "datatype": "BYTES", "data": ["east", "east"]}
    r = _v2(srv, [a, zone])
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "inputs.1: " + python_says.replace("row 0", "row 1"), r.text


@pytest.mark.parametrize(
    ("inputs", "said"),
    [
        ([{"name": "a", "shape": [1], "datatype": "FP64", "data": [1.0]}],
         "inputs: missing feature tensor(s) ['zone']"),
        ([{"name": "a", "shape": [1], "datatype": "BYTES", "data": ["1"]},
          {"name": "zone", "shape": [1], "datatype": "BYTES", "data": ["east"]}],
         "inputs.0.datatype: 'BYTES'; feature 'a' is a number"),
        ([{"name": "a", "shape": [1], "datatype": "FP64", "data": [1.0]},
          {"name": "zone", "shape": [1], "datatype": "INT64", "data": [1]}],
         "inputs.1.datatype: 'INT64'; feature 'zone' is a category: send BYTES"),
        ([{"name": "a", "shape": [2], "datatype": "FP64", "data": [1.0, 2.0]},
          {"name": "zone", "shape": [2], "datatype": "BYTES", "data": ["east", "west"]}],
         "inputs.1: row 1: column 'zone': unknown category 'west'"),
        ([{"name": "a", "shape": [2], "datatype": "FP64", "data": [1.0, 2.0]},
          {"name": "zone", "shape": [1], "datatype": "BYTES", "data": ["east"]}],
         "inputs.1.shape: 1 rows; the other feature tensors have 2"),
        ([{"name": "a", "shape": [1], "datatype": "FP64", "data": [1.0]},
          {"name": "zone", "shape": [1], "datatype": "BYTES", "data": ["east"]},
          {"name": "b", "shape": [1], "datatype": "FP64", "data": [1.0]}],
         "inputs.2.name: 'b' is not a feature"),
    ],
)  # fmt: skip
def test_bad_feature_tensors_are_named(served, inputs, said):
    r = _v2(served[0], inputs)
    assert r.status_code == 422 and r.json()["error"].startswith(said), r.text
