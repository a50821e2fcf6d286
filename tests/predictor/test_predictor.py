"""The predictor: raw rows in, records in the user's units out, from a bundle alone."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

import bayesify
from bayesify.data.errors import DataError
from bayesify.data.preprocessing import Preprocessing
from bayesify.predictor import Predictor


def _regression_bundle(tmp_path, seed=0):
    """An MC dropout regression net trained on standardised data with preprocessing attached.

    Raw data: x ~ N(mu, s) per feature; y = 100 + 10 * (w . x_std) + noise."""
    g = torch.Generator().manual_seed(seed)
    mu, s = torch.tensor([5.0, -3.0, 1000.0]), torch.tensor([2.0, 0.5, 50.0])
    x_raw = mu + s * torch.randn(400, 3, generator=g)
    xs = (x_raw - mu) / s
    ys = xs @ torch.tensor([1.0, -0.5, 0.25]) + 0.1 * torch.randn(400, generator=g)
    torch.manual_seed(seed)  # the network's initial weights
    net = nn.Sequential(nn.Linear(3, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 1))
    m = bayesify.MCDropout(net)
    m.fit((xs[:300], ys[:300]), val=(xs[300:], ys[300:]), epochs=15, lr=1e-2, progress=False)
    m.preprocessing = Preprocessing(
        features=["a", "b", "c"],
        input_shape=[3],
        x_mean=mu.tolist(),
        x_std=s.tolist(),
        y_mean=100.0,
        y_std=10.0,
        target="y",
    )
    path = m.save(tmp_path / "reg")
    return m, path, x_raw, 100 + 10 * ys


def test_predict_raw_units_match_an_independent_reference(tmp_path):
    m, path, x_raw, y = _regression_bundle(tmp_path)
    loaded = bayesify.load(path)
    pred = loaded.predict(x_raw[:50].double().numpy(), samples=40, seed=3)
    # the reference: standardise by hand, sample in network units, map back by hand
    xs = (x_raw[:50] - torch.tensor([5.0, -3.0, 1000.0])) / torch.tensor([2.0, 0.5, 50.0])
    loaded.preprocessing = None
    ref = loaded.predict(xs, samples=40, seed=3)
    torch.testing.assert_close(pred.samples, 100 + 10 * ref.samples)
    torch.testing.assert_close(pred.aleatoric_variance, 100 * ref.aleatoric_variance)
    rmse = float(((pred.mean - y[:50]) ** 2).mean().sqrt())
    assert rmse < 2.0, rmse  # noise std 1, target std about 11: the units are the user's


def test_records_equal_the_method_and_inputs_of_every_kind(tmp_path):
    _, path, x_raw, _ = _regression_bundle(tmp_path)
    p = Predictor.load(path)
    assert p.feature_names == ["a", "b", "c"] and p.task.value == "regression"
    rows = x_raw[:5].double().numpy()
    ref = bayesify.load(path).predict(rows, samples=30, seed=1)
    frame = pd.DataFrame(rows[:, ::-1], columns=["c", "b", "a"])  # order by name, not position
    dicts = frame.to_dict("records")
    for inputs in (rows, rows.tolist(), frame, dicts, torch.as_tensor(rows)):
        res = p.predict(inputs, samples=30, seed=1)
        np.testing.assert_allclose(res.columns["mean"], ref.mean.double().numpy(), rtol=1e-6)
        np.testing.assert_allclose(res.columns["std"], ref.std.double().numpy(), rtol=1e-6)
    recs = res.records()
    assert len(recs) == 5 and len(recs[0]["samples"]) == 30
    assert set(recs[0]) >= {"mean", "std", "epistemic_variance", "aleatoric_variance"}
    card = p.card()
    assert card["features"] == ["a", "b", "c"] and card["method"] == "mc-dropout"


def test_bad_rows_are_named_or_skipped(tmp_path):
    _, path, x_raw, _ = _regression_bundle(tmp_path)
    p = Predictor.load(path)
    frame = pd.DataFrame(x_raw[:6].double().numpy(), columns=["a", "b", "c"]).astype(object)
    frame.loc[2, "b"] = None
    frame.loc[4, "c"] = "abc"
    with pytest.raises(DataError) as info:  # every problem in one line
        p.predict(frame, first_row=10)
    said = "2 rows cannot be used: row 12: column 'b': missing value; row 14: column 'c': 'abc'"
    assert str(info.value).startswith(said + " is not a number")
    res = p.predict(frame, samples=10, seed=0, on_error="skip", first_row=10)
    assert list(res.rows) == [10, 11, 13, 15]
    assert res.skipped == {12: "column 'b': missing value", 14: "column 'c': 'abc' is not a number"}
    with pytest.raises(DataError, match=r"no column\(s\) \['c'\]"):
        p.predict(frame[["a", "b"]])
    with pytest.raises(ValueError, match="level must be a number in"):
        p.predict(frame, level=1.5)
    with pytest.raises(ValueError, match="samples must be a positive integer"):
        p.predict(frame, samples=True)


def test_categorical_columns_one_hot_and_unknown_category():
    prep = Preprocessing(
        features=["n", "colour"],
        categories={"colour": ["blue", "red"]},
        x_mean=[1.0, 0.0, 0.0],
        x_std=[2.0, 1.0, 1.0],
    )
    arr, bad = prep.encode(pd.DataFrame({"colour": ["red", "blue", "green"], "n": [3, 5, 7]}))
    np.testing.assert_array_equal(arr[:2], [[3, 0, 1], [5, 1, 0]])
    assert bad == {2: "column 'colour': unknown category 'green' (known: ['blue', 'red'])"}
    x = prep.inputs([[3, "red"], [5, "blue"]])
    torch.testing.assert_close(x, torch.tensor([[1.0, 0, 1], [2.0, 1, 0]]))
    assert Preprocessing.from_dict(prep.to_dict()) == prep
    assert prep.encoded_names == ["n", "colour=blue", "colour=red"]


def test_classification_records_name_classes(tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 2, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 1).long()
    net = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 3))
    m = bayesify.MCDropout(net, task="classification").fit((x, y), epochs=20, progress=False)
    m.preprocessing = Preprocessing(
        features=["u", "v"], class_names=["lo", "mid", "hi"], x_mean=[0.0, 0.0], x_std=[1.0, 1.0]
    )
    p = Predictor(bayesify.load(m.save(tmp_path / "c")))
    res = p.predict(x[:20].numpy(), samples=20, seed=0)
    probs = res.columns["probabilities"]
    names = np.array(["lo", "mid", "hi"])
    assert list(res.columns["label"]) == list(names[probs.argmax(1)])
    ent = -(probs * np.log(probs)).sum(1)
    np.testing.assert_allclose(res.columns["entropy"], ent, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(
        res.columns["mutual_information"], ent - res.columns["expected_entropy"], atol=1e-5
    )
    assert res.columns["samples"].shape == (20, 20, 3)
    frame = res.frame()
    assert list(frame.columns[:5]) == ["row", "label", "p_lo", "p_mid", "p_hi"]


def test_bundles_without_preprocessing_take_network_inputs(tmp_path):
    net = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Dropout(0.1), nn.Linear(8, 1))
    x, y = torch.randn(64, 2), torch.randn(64)
    m = bayesify.MCDropout(net).fit((x, y), val=(x, y), epochs=2, progress=False)
    path = m.save(tmp_path / "plain")
    p = Predictor.load(path)
    assert p.preprocessing is None and p.input_shape == (2,)
    res = p.predict(x[:4], samples=10, seed=0)
    ref = bayesify.load(path).predict(x[:4], samples=10, seed=0)
    np.testing.assert_allclose(res.columns["mean"], ref.mean.double().numpy(), rtol=1e-6)
    with pytest.raises(DataError, match=r"inputs must have shape \[N, 2\], got \[4, 3\]"):
        p.predict(torch.randn(4, 3))


def test_intervals_are_the_mixtures_or_the_bundles_conformal_ones(tmp_path):
    from bayesify.posthoc.conformal import Conformal, calibrate_conformal

    m, path, x_raw, y = _regression_bundle(tmp_path)
    p = Predictor.load(path)
    rows = x_raw[:40].double().numpy()
    res = p.predict(rows, samples=30, seed=2, level=0.8)
    ref = bayesify.load(path).predict(rows, samples=30, seed=2)
    lo, hi = ref.interval(0.8)  # in the user's target units
    np.testing.assert_allclose(res.columns["lower"], lo.double(), rtol=1e-6)
    np.testing.assert_allclose(res.columns["upper"], hi.double(), rtol=1e-6)
    assert (res.columns["lower"] < res.columns["mean"]).all()
    # a conformal calibration fitted on raw validation rows is used once it is in the bundle
    calibrate_conformal(m, (x_raw[300:].double().numpy(), y[300:]), samples=30, seed=0)
    p = Predictor.load(m.save(tmp_path / "conf"))
    assert p.card()["intervals"] == "conformal"
    res = p.predict(rows, samples=30, seed=2, level=0.8)
    conf = Conformal.from_dict(m.metadata["conformal"])
    lo, hi = conf.interval(ref, 0.8)
    np.testing.assert_allclose(res.columns["lower"], lo.double(), rtol=1e-5)
    np.testing.assert_allclose(res.columns["upper"], hi.double(), rtol=1e-5)


def test_prediction_sets_name_the_top_classes(tmp_path):
    probs = torch.tensor([[[0.7, 0.2, 0.1], [0.4, 0.35, 0.25]]])  # [T=1, N=2, C=3]
    net = nn.Sequential(nn.Linear(2, 3))
    m = bayesify.Deterministic(net, task="classification")
    m.preprocessing = Preprocessing(class_names=["x", "y", "z"])
    p = Predictor(m)
    cols = p._columns(bayesify.Predictive.classification(probs), level=0.85)
    assert cols["prediction_set"].tolist() == [["x", "y"], ["x", "y", "z"]]
    assert cols["label"].tolist() == ["x", "x"]


def test_adaptive_tolerance_is_in_the_bundles_target_units(tmp_path):
    """The same network saved with its target in units and in thousandths: the ×1000 bundle
    needs the ×1000 tolerance to draw the same samples, and then reports everything ×1000."""
    m, path, x_raw, _ = _regression_bundle(tmp_path)
    prep = m.preprocessing.to_dict()
    prep.update(y_mean=1000 * prep["y_mean"], y_std=1000 * prep["y_std"])
    m.preprocessing = Preprocessing.from_dict(prep)
    milli = Predictor.load(m.save(tmp_path / "milli"))
    unit = Predictor.load(path)
    rows = x_raw[:80].numpy()
    opts = dict(samples="adaptive", start=4, max_samples=64, seed=3)
    a = unit.predict(rows, tol=0.2, **opts).columns
    b = milli.predict(rows, tol=200.0, **opts).columns
    assert 4 < a["samples_used"].mean() < 64  # the tolerance decides row by row
    np.testing.assert_array_equal(a["samples_used"], b["samples_used"])
    np.testing.assert_allclose(b["mean"], 1000 * a["mean"], rtol=1e-5)
    np.testing.assert_allclose(b["std"], 1000 * a["std"], rtol=1e-5)
    # the reported figures meet the tolerance: std of a row's distinct samples / sqrt(T) (numpy)
    s = milli.predict(rows, tol=200.0, **opts).columns["samples"]  # [N, T_max]
    for row, t_r in zip(s, b["samples_used"], strict=True):
        if t_r < 64:
            assert row[:t_r].std(ddof=1) / np.sqrt(t_r) <= 200.0 + 1e-9
    tight = milli.predict(rows, tol=0.2, **opts).columns["samples_used"]
    assert (tight == 64).all()  # 0.2 in thousandths is a thousand times tighter
