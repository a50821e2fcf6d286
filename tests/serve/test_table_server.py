"""A bundle trained on a table (a number feature, a text category, a target in the thousands)
served by a real process: rows as {feature: value} objects or lists with category names, the
Open Inference Protocol with the encoded columns its metadata lists, adaptive sampling whose
tolerance is read in the target's units, bad values as 422s naming the field, and a request the
model cannot answer failing alone, not the requests that shared its pass."""

from __future__ import annotations

import asyncio
import re

import httpx
import numpy as np
import pytest
import torch

from bayesify.predictor import Predictor

from .conftest import start_server, stop_server

TOL, START, MAX = 600.0, 4, 64  # the server's adaptive sampling; TOL in target units


def _rows(n: int, seed: int) -> tuple[list[dict], np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.normal(10, 3, n)
    c = rng.choice(["north", "south"], n)
    y = 50_000 + 2_000 * (a - 10) + 6_000 * (c == "north") + 1_000 * rng.normal(size=n)
    return [{"a": float(v), "c": str(k)} for v, k in zip(a, c, strict=True)], y


def make_bundle(path):
    from bayesify.data.preprocessing import Preprocessing
    from bayesify.methods import MCDropout
    from bayesify.models import mlp
    from bayesify.posthoc.deferral import DeferralPolicy

    prep = Preprocessing(features=["a", "c"], categories={"c": ["north", "south"]},
                         input_shape=[3], x_mean=[10.0, 0.0, 0.0], x_std=[3.0, 1.0, 1.0],
                         y_mean=52_000.0, y_std=3_000.0, target="y")  # fmt: skip
    rows, y = _rows(500, 0)
    x = prep.scale(torch.as_tensor(prep.encode(_frame(rows))[0], dtype=torch.float32))
    torch.manual_seed(0)
    m = MCDropout(mlp(3, 1, (32,), norm=None, dropout=0.2), task="regression")
    yt = torch.as_tensor((y - 52_000.0) / 3_000.0, dtype=torch.float32)
    m.fit((x[:400], yt[:400]), val=(x[400:], yt[400:]), epochs=10, lr=1e-2, progress=False)
    m.preprocessing = prep
    val, yv = _rows(300, 1)
    pred = Predictor(m).predictive(val, samples=16, seed=0)
    DeferralPolicy.fit(pred, yv, score="std", target_coverage=0.8).store(m.metadata)
    m.save(path)
    return path


def _frame(rows):
    import pandas as pd

    return pd.DataFrame.from_records(rows)


@pytest.fixture(scope="module")
def table_server(tmp_path_factory):
    bundle = make_bundle(tmp_path_factory.mktemp("table") / "houses")
    srv = start_server(bundle, tmp_path_factory.mktemp("log") / "server.log",
                       "--adaptive-tol", str(TOL), "--adaptive-start", str(START),
                       "--adaptive-max", str(MAX), "--batch-wait-ms", "100")  # fmt: skip
    yield srv
    stop_server(srv)


def _predict(srv, body):
    return httpx.post(f"{srv.url}/v1/predict", json=body, timeout=60)


def test_named_and_list_rows_with_categories_match_the_predictor(table_server):
    rows, _ = _rows(20, 2)
    body = {"inputs": rows, "samples": 256}  # the server's most per request
    named = _predict(table_server, body)
    listed = _predict(table_server, {**body, "inputs": [[r["a"], r["c"]] for r in rows]})
    assert named.status_code == 200 and listed.status_code == 200, (named.text, listed.text)
    ref = Predictor.load(table_server.bundle).predict(rows, samples=4000, seed=0).columns
    for answer in (named, listed):
        preds = answer.json()["predictions"]
        mean = np.array([p["mean"] for p in preds])
        std = np.array([p["std"] for p in preds])
        # T = 256 against T = 4000, Monte Carlo error only: a mean's is std / 16; a std's
        # relative one is 0.033-0.048 by row (measured over 300 seeds, kurtosis near 3), so
        # 0.22 is over 4.5 of them for each of the 40 rows checked (0.15, 3.1 of them, failed in CI)
        np.testing.assert_allclose(mean, ref["mean"], atol=4 * ref["std"].max() / 16)
        np.testing.assert_allclose(std, ref["std"], rtol=0.22)
        assert all(p["defer"] == (p["defer_score"] > p["defer_threshold"]) for p in preds)


def test_v2_takes_the_encoded_columns_its_metadata_lists(table_server):
    meta = httpx.get(f"{table_server.url}/v2/models/toy").json()
    assert meta["parameters"]["input_columns"] == ["a", "c=north", "c=south"]
    assert meta["inputs"] == [
        {"name": "a", "datatype": "FP64", "shape": [-1]},
        {"name": "c", "datatype": "BYTES", "shape": [-1]},
    ]  # raw features
    rows, _ = _rows(8, 3)
    data = [[r["a"], float(r["c"] == "north"), float(r["c"] == "south")] for r in rows]
    tensor = {"name": "x", "shape": [8, 3], "datatype": "FP64", "data": data}
    body = {"inputs": [tensor], "parameters": {"samples": 256}}
    r = httpx.post(f"{table_server.url}/v2/models/toy/infer", json=body)
    assert r.status_code == 200, r.text
    mean = next(o for o in r.json()["outputs"] if o["name"] == "mean")["data"]
    ref = Predictor.load(table_server.bundle).predict(rows, samples=4000, seed=0).columns
    np.testing.assert_allclose(mean, ref["mean"], atol=4 * ref["std"].max() / 16)


def test_adaptive_tolerance_is_in_target_units(table_server):
    """Every row stops as soon as the standard error of its mean, in the units of ``mean``,
    is at most TOL (checked here with numpy on the samples the server returns)."""
    rows, _ = _rows(40, 4)
    r = _predict(table_server, {"inputs": rows, "return_samples": True})
    preds = r.json()["predictions"]
    used = np.array([p["samples_used"] for p in preds])
    assert set(used) <= {4, 8, 16, 32, 64} and len(set(used)) > 1, used
    for p, t_r in zip(preds, used, strict=True):
        own = np.array(p["samples"][:t_r])  # the row's distinct samples, target units
        assert own.mean() == pytest.approx(p["mean"], rel=1e-6)
        if t_r < MAX:
            assert own.std(ddof=1) / np.sqrt(t_r) <= TOL + 1e-6
        if t_r > START:
            half = own[: t_r // 2]
            assert half.std(ddof=1) / np.sqrt(t_r // 2) > TOL - 1e-6


@pytest.mark.parametrize(
    ("inputs", "loc", "msg"),
    [
        ([{"a": 10**400, "c": "north"}], ["body", "inputs", 0, "a"], "too large for a float64"),
        (
            [{"a": 1e300, "c": "north"}],
            ["body", "inputs", 0],
            "row 0: column 'a': 1e+300 is beyond the float32 range",
        ),
        ([{"a": [1, 2], "c": "north"}], ["body", "inputs", 0, "a"], "not a list"),
        ([{"a": 1.0, "c": "west"}], ["body", "inputs", 0], "unknown category 'west'"),
        ([{"a": 1.0}], ["body", "inputs", 0], "missing feature(s) ['c']"),
        ([[1.0, "north", 3.0]], ["body", "inputs", 0], "a row is 2 values in the order"),
        ([[1.0, None]], ["body", "inputs", 0], "column 'c': missing value"),
        ([{"a": 1e30, "c": "north"}], ["body", "inputs"], "output is not a finite number"),
    ],
)
def test_bad_values_are_422_naming_the_field(table_server, inputs, loc, msg):
    r = _predict(table_server, {"inputs": inputs, "samples": 8})
    assert r.status_code == 422, r.text
    d = r.json()["detail"][0]
    assert d["loc"] == loc and msg in d["msg"], d


def test_a_request_the_model_cannot_answer_fails_alone(table_server):
    rows, _ = _rows(6, 5)
    bodies = [{"inputs": [row], "samples": 16} for row in rows]
    bodies.insert(3, {"inputs": [{"a": 1e30, "c": "south"}], "samples": 16})

    async def go():
        async with httpx.AsyncClient(base_url=table_server.url, timeout=60) as c:
            return await asyncio.gather(*[c.post("/v1/predict", json=b) for b in bodies])

    before = _passes(table_server)
    answers = asyncio.run(go())
    assert _passes(table_server) - before < len(bodies)  # they shared passes
    codes = [a.status_code for a in answers]
    assert codes == [200, 200, 200, 422, 200, 200, 200], [a.text for a in answers]
    assert "not a finite number" in answers[3].json()["detail"][0]["msg"]


def _passes(srv) -> float:
    text = httpx.get(f"{srv.url}/metrics").text
    return float(re.search(r"bayesify_batch_rows_count\{[^}]*\} (\S+)", text).group(1))


def test_v2_regression_feedback_by_the_response_id(table_server):
    rows, y = _rows(1, 6)
    r = rows[0]
    data = [[r["a"], float(r["c"] == "north"), float(r["c"] == "south")]]
    tensor = {"name": "x", "shape": [1, 3], "datatype": "FP64", "data": data}
    body = {"id": "house-1", "inputs": [tensor], "parameters": {"samples": 32}}
    answer = httpx.post(f"{table_server.url}/v2/models/toy/infer", json=body).json()
    assert answer["id"] == "house-1"
    out = {o["name"]: o["data"][0] for o in answer["outputs"]}
    fb = {"outcomes": [{"request_id": "house-1", "outcome": float(y[0])}]}
    before = httpx.get(f"{table_server.url}/v1/model").json()["monitor"]["all"]
    assert httpx.post(f"{table_server.url}/v1/feedback", json=fb).json()["accepted"] == 1
    mon = httpx.get(f"{table_server.url}/v1/model").json()["monitor"]["all"]
    assert before["n"] == 0 and mon["n"] == 1
    assert mon["error"] == pytest.approx(abs(out["mean"] - y[0]), rel=1e-6)  # RMSE of one row
    # (the NLL is the served mixture's, checked from the returned samples in
    # test_monitor_server.py)
