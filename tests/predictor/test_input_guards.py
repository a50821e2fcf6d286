"""Inputs that never give silent wrong numbers: row-id columns left out of the features, every
problem of a file named in one run, class labels handed back in their own type, and values far
outside the training data refused per row with the same words in Python and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import bayesify
from bayesify.app.table_jobs import build_table_training
from bayesify.cli import app
from bayesify.data import DataError
from bayesify.predictor import Predictor

runner = CliRunner()


def _said(result) -> str:
    return " ".join(result.output.replace("│", " ").split())


def _invoke(args, code: int = 0):
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == code, result.output
    return result


def _houses(n: int = 150, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    area = rng.choice(np.arange(600, 4000), n, replace=False)  # unique whole numbers: a feature
    rooms = rng.integers(1, 6, n)
    return pd.DataFrame({
        "Unnamed: 0": np.arange(n),  # a pandas index saved with the table
        "house_id": 10_000 + rng.permutation(n),
        "sample id": rng.permutation(n) * 7 + 3,
        "area": area,
        "rooms": rooms,
        "age": rng.normal(30, 10, n),
        "price": 100 * area + 5_000 * rooms + rng.normal(0, 5_000, n),
    })  # fmt: skip


def _features(bundle) -> list[str]:
    return json.loads((bundle / "config.json").read_text())["preprocessing"]["features"]


def test_row_id_columns_are_left_out_and_exclude_or_features_decide(tmp_path):
    _houses().to_csv(tmp_path / "houses.csv", index=False)
    common = ["train", "--method", "deterministic", "--data", tmp_path / "houses.csv",
              "--target", "price", "--epochs", 1, "--no-eval"]  # fmt: skip
    said = _said(_invoke([*common, "--out", tmp_path / "a"]))
    for col in ("Unnamed: 0", "house_id", "sample id"):
        assert f"column '{col}' looks like a row id" in said, said
    assert "list it with the other features in --features" in said
    assert _features(tmp_path / "a") == ["area", "rooms", "age"]
    _invoke([*common, "--exclude", "age,rooms", "--out", tmp_path / "b"])
    assert _features(tmp_path / "b") == ["area"]
    _invoke([*common, "--features", "house_id,area", "--out", tmp_path / "c"])  # deliberate
    assert _features(tmp_path / "c") == ["house_id", "area"]
    said = _said(_invoke([*common, "--exclude", "size", "--out", tmp_path / "d"], code=2))
    assert "no column(s) ['size']" in said


def test_id_like_is_not_fooled_by_ordinary_columns():
    from bayesify.app.table_jobs import id_like

    n = 50
    rng = np.random.default_rng(1)
    assert id_like(pd.Series(rng.permutation(n) + 5), "customer_key") is not None
    assert id_like(pd.Series([f"S{i:03d}" for i in range(n)]), "SampleID") is not None
    assert id_like(pd.Series(np.arange(n) + 1990), "year") is not None  # a run: a row index
    assert id_like(pd.Series(rng.choice(10_000, n, replace=False)), "area") is None
    assert id_like(pd.Series(rng.integers(0, 5, n)), "index_band") is None  # repeats
    assert id_like(pd.Series(rng.normal(size=n)), "id_score") is None  # not whole numbers


def test_train_names_every_problem_of_the_table_in_one_run(tmp_path):
    frame = _houses()
    frame["area"] = frame["area"].astype(float).mask(frame.index.isin([4, 9]))
    frame["zone"] = "A"
    frame["rooms"] = frame["rooms"].astype(float).where(frame.index != 11, 1e39)
    frame["age"] = frame["age"].astype(object).where(frame.index != 7, "old")
    frame.to_csv(tmp_path / "t.csv", index=False)
    result = _invoke(["train", "--data", tmp_path / "t.csv", "--target", "price",
                      "--out", tmp_path / "m"], code=2)  # fmt: skip
    assert result.output.strip().count("\n") == 0, result.output  # one line, never wrapped
    said = _said(result)
    assert "4 problems: (1) column 'area' has missing values in 2 row(s) (first: row 4, 9)" in said
    big = "(2) column 'rooms' has numbers beyond the float32 range in 1 row(s) (first: row 11)"
    assert big in said
    assert "(3) column 'age' has non-numeric values in 1 row(s) (first: row 7) (e.g. 'old')" in said
    assert "(4) column 'zone' is constant ('A' in all 150 rows)" in said
    assert "np." not in said


@pytest.fixture(scope="module")
def houses_bundle(tmp_path_factory):
    """A regression bundle of the houses table (ids left out) and its training frame."""
    path = tmp_path_factory.mktemp("houses")
    frame = _houses()
    frame.to_csv(path / "houses.csv", index=False)
    job, _ = build_table_training("deterministic", path / "houses.csv", "price")
    job.method.fit(job.train, val=job.val, epochs=2, progress=False)
    job.method.preprocessing = job.preprocessing
    return job.method.save(path / "bundle"), frame


def test_far_out_values_are_refused_per_row_alike_in_python_and_the_cli(houses_bundle, tmp_path):
    bundle, frame = houses_bundle
    new = frame.drop(columns="price").head(8).astype(object)
    new.loc[1, "area"] = None
    new.loc[3, "rooms"] = 1e39  # beyond float32
    new.loc[5, "age"] = "abc"
    new.loc[6, "area"] = 1e30  # finite, but far outside the training rows
    new.to_csv(tmp_path / "new.csv", index=False)
    p = Predictor.load(bundle)
    with pytest.raises(DataError) as info:
        p.predict(new.iloc[[6]])
    python_says = str(info.value)
    assert "row 0: column 'area': 1e+30 is outside the range this model accepts" in python_says
    with pytest.raises(DataError, match=r"1e\+30 is outside the range"):  # the method itself
        bayesify.load(bundle).predict(new.iloc[[6]], samples=2)
    # the CLI, failing, lists every bad row of the file at once
    failed = _invoke(["predict", bundle, tmp_path / "new.csv", "--out", tmp_path / "p.csv"],
                     code=2)  # fmt: skip
    assert failed.output.strip().count("\n") == 0, failed.output  # one line, never wrapped
    said = _said(failed)
    assert "4 rows cannot be used: row 1: column 'area': missing value;" in said, said
    assert "row 3: column 'rooms': 1e+39 is beyond the float32 range" in said
    assert "row 5: column 'age': 'abc' is not a number" in said
    reason = python_says.removeprefix("row 0: ").split("; use on_error")[0]
    assert "row 6: " + reason in said and said.endswith(
        "use --on-error skip to leave such rows out"
    )
    # ... also when they lie in different chunks of the file (nothing is written)
    failed = _invoke(["predict", bundle, tmp_path / "new.csv", "--out", tmp_path / "c.csv",
                      "--chunk-rows", 2], code=2)  # fmt: skip
    assert "4 rows cannot be used: row 1: column 'area': missing value;" in _said(failed)
    assert "row 6: " in _said(failed) and not (tmp_path / "c.csv").exists()
    # skipping leaves out exactly those rows, names them, and predicts the others
    out = tmp_path / "q.csv"
    said = _said(_invoke(["predict", bundle, tmp_path / "new.csv", "--out", out,
                          "--on-error", "skip"]))  # fmt: skip
    assert "skipped 4 row(s)" in said
    pred = pd.read_csv(out)
    assert list(pred["row"]) == [0, 2, 4, 7] and np.isfinite(pred["std"]).all()
    skipped = pd.read_csv(tmp_path / "q.skipped.csv")
    assert list(skipped["row"]) == [1, 3, 5, 6] and "1e+39" in skipped["reason"][1]
    bounds = p.preprocessing.bounds["area"]
    span = frame["area"].std(ddof=0) * 100
    assert bounds == pytest.approx(
        [frame["area"].min() - span, frame["area"].max() + span], rel=0.02
    )  # training rows only (80 %): extremes ± 100 std


def _classes(n: int, seed: int) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2))
    y = np.digitize(x[:, 0] + 0.2 * rng.normal(size=n), [-0.5, 0.5]) + 1  # classes 1, 2, 3
    return pd.DataFrame({"f0": x[:, 0], "f1": x[:, 1], "fault": y}), y


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_integer_class_labels_stay_integers(tmp_path, suffix):
    frame, _ = _classes(300, 0)
    frame.to_parquet(tmp_path / "t.parquet") if suffix == ".parquet" else frame.to_csv(
        tmp_path / "t.csv", index=False)  # fmt: skip
    bundle = tmp_path / "m"
    _invoke(["train", "--method", "deterministic", "--data", tmp_path / f"t{suffix}",
             "--target", "fault", "--epochs", 30, "--lr", 0.01, "--out", bundle,
             "--no-eval"])  # fmt: skip
    prep = json.loads((bundle / "config.json").read_text())["preprocessing"]
    assert prep["label_type"] == "int" and prep["class_names"] == ["1", "2", "3"]
    new, y = _classes(100, 1)
    records = Predictor.load(bundle).predict(new, samples=2).records(samples=False)
    assert all(type(r["label"]) is int for r in records)
    assert all(type(c) is int for r in records for c in r["prediction_set"])
    assert np.mean([r["label"] == t for r, t in zip(records, y, strict=True)]) > 0.7
    out = tmp_path / f"p{suffix}"
    new.drop(columns="fault").to_csv(tmp_path / "new.csv", index=False)
    _invoke(["predict", bundle, tmp_path / "new.csv", "--out", out])
    read = pd.read_parquet(out) if suffix == ".parquet" else pd.read_csv(out)
    assert read["label"].dtype == np.int64
    assert (read["label"].to_numpy() == [r["label"] for r in records]).mean() > 0.9


def test_text_labels_stay_text(tmp_path):
    frame, _ = _classes(200, 2)
    frame["fault"] = frame["fault"].map({1: "low", 2: "mid", 3: "high"})
    frame.to_csv(tmp_path / "t.csv", index=False)
    job, _ = build_table_training("deterministic", tmp_path / "t.csv", "fault")
    job.method.fit(job.train, epochs=1, progress=False)
    job.method.preprocessing = job.preprocessing
    assert job.preprocessing.label_type == "str"
    records = Predictor(job.method).predict(frame.head(5), samples=2).records()
    assert all(r["label"] in ("low", "mid", "high") for r in records)
