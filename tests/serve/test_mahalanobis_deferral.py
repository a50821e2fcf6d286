"""``bayesify calibrate --mahalanobis``: the Mahalanobis OOD score fitted on a bundle's training
rows (a table file, or a built-in dataset's training split) against an independent fit of the
class means and shared covariance, then deferral on it through ``bayesify predict`` and a real
``bayesify serve`` process: the deferral score is the served ``ood_mahalanobis``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import bayesify
from bayesify.data import DataError, data_root
from bayesify.methods.core.ood import features

from .conftest import CLASSES, FEATURES, invoke_ok, served_predictions, toy_table


def _reference_fit(method, x: torch.Tensor, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Class means and the inverse of the pooled within-class covariance (ddof 0) of the
    penultimate features, by numpy."""
    h = features(method, x).double().numpy()
    means = np.stack([h[y == c].mean(0) for c in range(int(y.max()) + 1)])
    centred = h - means[y]
    return means, np.linalg.inv(centred.T @ centred / len(h))


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("maha")
    out = tmp / "bundle"
    train = toy_table(tmp / "train.csv", 400, 0)
    invoke_ok(["train", "--method", "mc-dropout", "--data", train, "--target", "grade", "--hidden",
               "16", "--epochs", "5", "--lr", "0.01", "--out", out, "--no-eval"])  # fmt: skip
    invoke_ok(["calibrate", out, "--mahalanobis", train, "--score", "mahalanobis",
               "--data", toy_table(tmp / "val.csv", 300, 1), "--coverage", "0.8"])  # fmt: skip
    return out, train


def test_the_fit_is_the_training_rows_class_gaussians(bundle):
    out, train = bundle
    method = bayesify.load(out)
    frame = pd.read_csv(train)
    labels = method.preprocessing.class_names  # the network's class order
    assert sorted(labels) == sorted(CLASSES)
    y = np.array([labels.index(g) for g in frame["grade"]])
    means, precision = _reference_fit(method, method.preprocessing.inputs(frame[FEATURES]), y)
    fit = method.metadata["mahalanobis"]
    np.testing.assert_allclose(fit["means"], means, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fit["precision"], precision, rtol=1e-3, atol=1e-4)
    policy = method.metadata["deferral"]
    assert policy["score"] == "mahalanobis" and "decision" not in policy


def test_predict_and_serve_defer_by_the_mahalanobis_score(bundle, tmp_path):
    out, _ = bundle
    rows = toy_table(tmp_path / "rows.csv", 40, 2)
    far = tmp_path / "far.csv"
    frame = pd.read_csv(rows)
    frame.assign(**{f: frame[f] * 20 for f in FEATURES}).to_csv(far, index=False)
    threshold = bayesify.load(out).metadata["deferral"]["threshold"]
    for path in (rows, far):
        got = path.with_suffix(".pred.csv")
        invoke_ok(["predict", out, path, "--out", got, "--scores", "mahalanobis", "--samples",
                   "4", "--no-progress"])  # fmt: skip
        pred = pd.read_csv(got)
        np.testing.assert_allclose(pred["defer_score"], pred["ood_mahalanobis"], rtol=1e-9)
        np.testing.assert_array_equal(pred["defer"], pred["defer_score"] > threshold)
        share = pred["defer"].mean()
        assert (0 < share < 0.6) if path == rows else share == 1.0
    _, preds = served_predictions(out, tmp_path / "server.log", 8, scores=["mahalanobis"])
    got = [(p["defer_score"], p["ood_mahalanobis"], p["defer"]) for p in preds]
    assert all(d == pytest.approx(o) and flag == (d > threshold) for d, o, flag in got)


def test_a_built_in_bundle_fits_on_its_training_split(tmp_path):
    try:
        data_root()
    except DataError as e:
        pytest.skip(f"shared data not found: {e}")
    out = tmp_path / "fm"
    invoke_ok(["train", "--method", "mc-dropout", "--data", "fashion-mnist", "--limit", "600",
               "--epochs", "1", "--out", out, "--no-eval"])  # fmt: skip
    invoke_ok(["calibrate", out, "--mahalanobis", "fashion-mnist"])
    method = bayesify.load(out)
    train = bayesify.data.load_fashion_mnist("train").subset(600, seed=0)
    means, _ = _reference_fit(method, train.x[60:], train.y[60:].numpy())  # the first 60 validate
    np.testing.assert_allclose(method.metadata["mahalanobis"]["means"], means, rtol=1e-5,
                               atol=1e-6)  # fmt: skip
    assert "deferral" not in method.metadata


def test_a_feature_score_the_bundle_cannot_give_is_refused_in_one_line(bundle, tmp_path):
    from typer.testing import CliRunner

    from bayesify.cli import app

    from .conftest import make_regression_bundle

    out, train = bundle
    regression = make_regression_bundle(tmp_path / "reg")
    val = toy_table(tmp_path / "val.csv", 100, 5)
    cases = [
        ([out, "--score", "density", "--coverage", "0.8", "--data", val],
         "density: MCDropout has no fitted feature density"),
        ([regression, "--mahalanobis", train], "the Mahalanobis score is for classification"),
        ([out, "--mahalanobis", "yacht"], "not a table file (.csv, .parquet, .npz) nor the"),
    ]  # fmt: skip
    before = (out / "config.json").read_text()
    for args, message in cases:
        result = CliRunner().invoke(app, ["calibrate", *map(str, args)])
        assert result.exit_code != 0 and message in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1, result.output
    assert (out / "config.json").read_text() == before  # a refused call changes nothing
