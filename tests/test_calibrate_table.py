"""``bayesify calibrate BUNDLE --data FILE`` for bundles trained on the user's own table: the
policy is fitted on the table's rows through the bundle's preprocessing, in the units the
predictor reports (a target in thousands gives a threshold in thousands), its validation and
held-out (``--test FILE``) figures equal those computed here from independent predictions, and
bad tables are one-line errors with a non-zero exit."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from bayesify.app.calibration import calibrate_bundle
from bayesify.cli import app
from bayesify.data.preprocessing import Preprocessing
from bayesify.methods import load
from bayesify.predictor import Predictor

runner = CliRunner()
CLASSES = ["cat", "dog", "eel"]


def _frame(n: int, seed: int) -> pd.DataFrame:
    """Three numeric features, a categorical one, a target in thousands (y) and a label."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(5, 2, n), rng.normal(-3, 0.5, n)
    c = rng.choice(["red", "blue"], n)
    d = rng.uniform(0, 100, n)
    signal = (a - 5) / 2 - 2 * (b + 3) + (c == "red") + 0.01 * (d - 50)
    y = 20_000 + 3_000 * signal + 1_500 * rng.normal(size=n) * (1 + np.abs(a - 5))
    label = np.array(CLASSES)[np.digitize(signal + 0.7 * rng.normal(size=n), [-1.0, 1.0])]
    return pd.DataFrame({"a": a, "b": b, "c": c, "d": d, "y": y, "label": label})


def _invoke(*args: str):
    result = runner.invoke(app, [str(a) for a in args])
    return result, " ".join(result.output.replace("│", " ").split())


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    root = tmp_path_factory.mktemp("tables")
    paths = {}
    for name, n, seed in (("train", 600, 0), ("val", 300, 1), ("test", 400, 2)):
        paths[name] = root / f"{name}.csv"
        _frame(n, seed).to_csv(paths[name], index=False)
    return paths


def _train(tables, out, target: str) -> None:
    train = _frame(600, 0).drop(columns=["label" if target == "y" else "y"])
    path = out.parent / f"train_{target}.csv"
    train.to_csv(path, index=False)
    result, text = _invoke("train", "--method", "mc-dropout", "--data", path, "--target", target,
                           "--epochs", "8", "--hidden", "32", "--norm", "none", "--dropout",
                           "0.2", "--out", out, "--no-eval")  # fmt: skip
    assert result.exit_code == 0, text


@pytest.fixture(scope="module")
def regression_bundle(tables, tmp_path_factory):
    out = tmp_path_factory.mktemp("reg") / "bundle"
    _train(tables, out, "y")
    return out


@pytest.fixture(scope="module")
def classification_bundle(tables, tmp_path_factory):
    out = tmp_path_factory.mktemp("cls") / "bundle"
    _train(tables, out, "label")
    return out


def _threshold(scores: np.ndarray, coverage: float) -> float:
    """The policy's threshold by hand: halfway between the k-th and (k+1)-th smallest score."""
    s = np.sort(scores)
    k = round(coverage * len(s))
    return (s[k - 1] + s[k]) / 2


def _figure(text: str, name: str) -> list[float]:
    m = re.search(rf"{name}: n = (\d+), coverage (\S+), \w+ all (\S+) -> accepted (\S+)", text)
    assert m, text
    return [float(v) for v in m.groups()]


def test_regression_policy_is_fitted_in_target_units_on_the_table(regression_bundle, tables):
    weights = (regression_bundle / "weights.safetensors").read_bytes()
    result, text = _invoke("calibrate", regression_bundle, "--data", tables["val"], "--test",
                           tables["test"], "--score", "std", "--coverage", "0.8",
                           "--samples", "16", "--decision", "single")  # fmt: skip
    assert result.exit_code == 0, text
    assert (regression_bundle / "weights.safetensors").read_bytes() == weights
    stored = json.loads((regression_bundle / "config.json").read_text())["metadata"]["deferral"]
    assert stored["validation"]["data"] == str(tables["val"])
    # independent predictions of the same rows with the same seeds (calibrate: seed 0 for the
    # validation rows, seed 1 for the test rows); the extra label column is ignored
    p = Predictor.load(regression_bundle)
    val, test = pd.read_csv(tables["val"]), pd.read_csv(tables["test"])
    cols = p.predict(val, samples=16, seed=0).columns
    th = _threshold(cols["std"], 0.8)
    assert stored["threshold"] == pytest.approx(th, rel=1e-9)
    assert th > 500  # original units: the target's noise alone is about 1,500
    keep = cols["std"] <= th
    rmse = float(np.sqrt(((cols["mean"] - val["y"]) ** 2).mean()))
    rmse_kept = float(np.sqrt(((cols["mean"] - val["y"])[keep] ** 2).mean()))
    assert stored["validation"]["coverage"] == pytest.approx(keep.mean())
    assert stored["validation"]["error_all"] == pytest.approx(rmse, rel=1e-6)
    assert stored["validation"]["error_accepted"] == pytest.approx(rmse_kept, rel=1e-6)
    held = p.predict(test, samples=16, seed=1).columns
    keep_t = held["std"] <= stored["threshold"]
    n, coverage, err_all, err_kept = _figure(text, "test")
    assert n == 400 and coverage == pytest.approx(keep_t.mean(), abs=1e-4)
    assert err_all == pytest.approx(np.sqrt(((held["mean"] - test["y"]) ** 2).mean()), abs=1e-4)
    err = np.sqrt(((held["mean"] - test["y"])[keep_t] ** 2).mean())
    assert err_kept == pytest.approx(err, abs=1e-4)
    assert abs(coverage - 0.8) < 0.08 and err_kept < err_all  # it defers the noisier rows
    # the served record uses the stored policy
    rec = Predictor.load(regression_bundle).predict(test[:5], samples=8, seed=0).records()
    assert all(r["defer"] == (r["defer_score"] > r["defer_threshold"]) for r in rec)


def test_classification_policy_on_the_table_with_string_labels(classification_bundle, tables):
    result, text = _invoke("calibrate", classification_bundle, "--data", tables["val"],
                           "--score", "max_prob", "--coverage", "0.7",
                           "--samples", "16", "--decision", "single")  # fmt: skip
    assert result.exit_code == 0, text
    assert "no held-out rows checked (pass --test FILE)" in text
    policy = load(classification_bundle).metadata["deferral"]
    val = pd.read_csv(tables["val"])
    cols = Predictor.load(classification_bundle).predict(val, samples=16, seed=0).columns
    score = 1 - cols["probabilities"].max(1)
    assert policy["threshold"] == pytest.approx(_threshold(score, 0.7), rel=1e-9)
    wrong = cols["label"] != val["label"].to_numpy()
    keep = score <= policy["threshold"]
    v = policy["validation"]
    assert v["error_all"] == pytest.approx(wrong.mean())
    assert v["error_accepted"] == pytest.approx(wrong[keep].mean())
    assert v["coverage"] == pytest.approx(0.7, abs=1 / 300)
    # an error target instead of a coverage, and class indices instead of names
    idx = val.assign(label=[CLASSES.index(v) for v in val["label"]])
    path = tables["val"].parent / "val_index.parquet"
    idx.to_parquet(path)
    result, text = _invoke("calibrate", classification_bundle, "--data", path, "--error",
                           "0.1", "--samples", "16", "--decision", "single")  # fmt: skip
    assert result.exit_code == 0, text
    v = load(classification_bundle).metadata["deferral"]["validation"]
    assert v["error_accepted"] <= 0.1 and v["coverage"] < 1


@pytest.mark.parametrize(
    ("change", "args", "message"),
    [
        (lambda f: f, ["--target", "nope"], "no target column 'nope'"),
        (lambda f: f.drop(columns=["a", "c"]), [], "no column(s) ['a', 'c']; the model reads"),
        (lambda f: f.assign(y=f["y"].astype(object).where(f.index != 4, "abc")), [],
         "target 'y' has non-numeric values in 1 row(s) (first: row 4)"),
        (lambda f: f.assign(b=f["b"].where(f.index != 7)), [], "row 7: column 'b': missing value"),
        (lambda f: f.assign(c=f["c"].where(f.index != 2, "green")), [],
         "row 2: column 'c': unknown category 'green'"),
        (lambda f: f.assign(y=f["y"].where(f.index != 3)), [], "target 'y' has missing values"),
        (lambda f: f, ["--target", "a"], "--target 'a' is one of the model's features"),
        (lambda f: f, ["--test", "missing.csv"], "no such file"),
    ],
)  # fmt: skip
def test_bad_tables_are_one_line_errors(regression_bundle, tmp_path, change, args, message):
    before = (regression_bundle / "config.json").read_text()
    path = tmp_path / "rows.csv"
    change(_frame(50, 3)).to_csv(path, index=False)
    args = [a if a != "missing.csv" else str(tmp_path / a) for a in args]
    result, text = _invoke("calibrate", regression_bundle, "--data", path, "--score", "std",
                           "--coverage", "0.8", "--samples", "4", *args)  # fmt: skip
    assert result.exit_code == 2, text
    assert text.startswith("error:") and message in text, text
    assert "Traceback" not in result.output
    assert (regression_bundle / "config.json").read_text() == before  # nothing written


def test_unknown_class_and_training_table_warning(classification_bundle, tables, tmp_path):
    path = tmp_path / "rows.csv"
    _frame(50, 4).assign(label="fox").to_csv(path, index=False)
    result, text = _invoke("calibrate", classification_bundle, "--data", path, "--coverage",
                           "0.8", "--samples", "4", "--decision", "single")  # fmt: skip
    assert result.exit_code == 2 and "classes ['fox'] the model does not know" in text, text
    train = classification_bundle.parent / "train_label.csv"
    result, text = _invoke("calibrate", classification_bundle, "--data", train, "--coverage",
                           "0.8", "--samples", "4", "--decision", "single")  # fmt: skip
    assert result.exit_code == 0 and "is the table this bundle was trained on" in text, text


def test_bundle_reading_unnamed_rows_takes_the_other_columns(tmp_path):
    """A bundle without feature names (arrays) is calibrated on a table whose columns besides
    the target are its inputs, in file order; the wrong number of columns is an error."""
    import torch

    from bayesify.methods import MCDropout
    from bayesify.models import mlp

    torch.manual_seed(0)
    m = MCDropout(mlp(3, 3, (16,), norm=None, dropout=0.2), task="classification")
    m.preprocessing = Preprocessing(input_shape=[3], class_names=CLASSES)
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(80, 3)), columns=["x0", "x1", "x2"])
    frame.insert(1, "truth", rng.choice(CLASSES, 80))
    path = tmp_path / "rows.csv"
    frame.to_csv(path, index=False)
    res = calibrate_bundle(m, score="entropy", coverage=0.5, samples=8, data=path,
                           target="truth")  # fmt: skip
    x = frame[["x0", "x1", "x2"]].to_numpy()
    ent = Predictor(m).predict(x, samples=8, seed=0).columns["entropy"]
    assert res.policy.threshold == pytest.approx(_threshold(ent, 0.5), rel=1e-6)
    assert res.test is None
    with pytest.raises(ValueError, match=r"column\(s\) \['truth'\] are not numbers"):
        calibrate_bundle(m, score="entropy", coverage=0.5, samples=8, data=path, target="x0")
    frame.assign(extra=1.0).to_csv(path, index=False)
    with pytest.raises(ValueError, match="4 columns besides the target 'truth'; the model reads 3"):
        calibrate_bundle(m, score="entropy", coverage=0.5, samples=8, data=path, target="truth")
    with pytest.raises(ValueError, match="--target COLUMN is required"):
        calibrate_bundle(m, score="entropy", coverage=0.5, samples=8, data=path)
