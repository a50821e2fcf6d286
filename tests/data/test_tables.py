"""User tables: one reader/writer for CSV, Parquet and .npz; the checks before training."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bayesify.app.table_jobs import _split, build_table_training, decide_task
from bayesify.data.errors import DataError
from bayesify.data.tables import (
    TableWriter,
    count_rows,
    is_table_path,
    iter_table,
    read_table,
    table_format,
)


@pytest.fixture
def frame():
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {
            "x": rng.normal(size=250),
            "k": rng.integers(0, 5, size=250),
            "colour": rng.choice(["red", "blue", "green"], size=250),
            "y": rng.normal(size=250),
            "cls": rng.choice(["a", "b"], size=250, p=[0.8, 0.2]),
        }
    )


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".npz"])
def test_write_chunks_then_read_whole_and_in_chunks(tmp_path, frame, suffix):
    path = tmp_path / f"t{suffix}"
    with TableWriter(path) as w:
        for a in range(0, len(frame), 100):
            w.write(frame.iloc[a : a + 100])
    back = read_table(path)
    pd.testing.assert_frame_equal(back, frame, check_dtype=False)
    chunks = list(iter_table(path, chunk_rows=60))
    assert [len(c) for c in chunks] == [60, 60, 60, 60, 10]
    pd.testing.assert_frame_equal(pd.concat(chunks, ignore_index=True), frame, check_dtype=False)
    assert count_rows(path) in (250, None)


def test_npz_two_dimensional_arrays_become_columns(tmp_path):
    np.savez(tmp_path / "a.npz", X=np.arange(6.0).reshape(3, 2), y=np.array([1.0, 2, 3]))
    back = read_table(tmp_path / "a.npz")
    assert list(back.columns) == ["X_0", "X_1", "y"] and back["X_1"].tolist() == [1, 3, 5]


def test_formats_and_paths(tmp_path):
    assert table_format("a/b.PARQUET") == "parquet" and table_format("x.csv") == "csv"
    with pytest.raises(DataError, match=r"unknown table format '\.xlsx'; valid suffixes: \.csv"):
        table_format("book.xlsx")
    assert is_table_path("data/x.csv") and is_table_path("x.csv") and not is_table_path("concrete")
    with pytest.raises(DataError, match="no such file"):
        read_table(tmp_path / "missing.csv")
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(DataError, match="cannot read as parquet"):
        read_table(tmp_path / "bad.parquet")


def test_auto_task_says_why(frame):
    assert decide_task(frame["cls"], "cls", "auto") == (
        decide_task(frame["cls"], "cls", "auto")[0],
        "target 'cls' has 2 string values → classification",
    )
    kind, why = decide_task(frame["k"], "k", "auto")
    assert kind.value == "classification" and "5 whole-number values" in why
    kind, why = decide_task(frame["y"], "y", "auto")
    assert kind.value == "regression" and "250 distinct numeric values → regression" in why
    assert decide_task(frame["k"], "k", "regression")[0].value == "regression"
    with pytest.raises(ValueError, match="unknown --task 'maybe'; valid: auto, regression"):
        decide_task(frame["k"], "k", "maybe")


def test_stratified_split_keeps_class_shares():
    labels = np.array([0] * 80 + [1] * 20)
    val = _split(100, labels, 0.2, seed=3)
    assert val[:80].sum() == 16 and val[80:].sum() == 4
    assert not np.array_equal(val, _split(100, labels, 0.2, seed=4))
    np.testing.assert_array_equal(val, _split(100, labels, 0.2, seed=3))


def test_table_job_encodes_and_scales(tmp_path, frame):
    frame.to_csv(tmp_path / "t.csv", index=False)
    job, notes = build_table_training("mc-dropout", tmp_path / "t.csv", "cls",
                                      features="x,colour")  # fmt: skip
    prep = job.preprocessing
    assert prep.encoded_names == ["x", "colour=blue", "colour=green", "colour=red"]
    assert prep.class_names == ["a", "b"] and "stratified by class" in notes[2]
    assert notes[1] == "column 'colour' is text: 3 categories -> 3 one-hot inputs"
    x_train, y_train = job.train
    # standardised with training statistics; one-hot columns kept 0/1
    assert abs(float(x_train[:, 0].mean())) < 1e-5 and abs(float(x_train[:, 0].std()) - 1) < 0.01
    assert set(np.unique(x_train[:, 1:].numpy())) == {0.0, 1.0}
    assert len(x_train) + len(job.val[0]) == 250


def test_a_regression_table_job_records_the_training_targets_range(tmp_path, frame):
    frame.to_csv(tmp_path / "t.csv", index=False)
    job, _ = build_table_training("mc-dropout", tmp_path / "t.csv", "y", features="x")
    y_train = job.train[1].numpy() * job.scale + job.loc  # back to the table's units
    low, high = job.metadata["target_range"]
    assert low == pytest.approx(y_train.min(), abs=1e-5)
    assert high == pytest.approx(y_train.max(), abs=1e-5)


@pytest.mark.parametrize(
    "change, target, features, message",
    [
        (lambda f: f.assign(x=f["x"].mask(f.index.isin([3, 7]))), "y", None,
         r"column 'x' has missing values in 2 row\(s\) \(first: row 3, 7\)"),
        (lambda f: f.assign(x=f["x"].astype(object).where(f.index != 5, "abc")), "y", None,
         r"column 'x' has non-numeric values in 1 row\(s\) \(first: row 5\) \(e\.g\. 'abc'\)"),
        (lambda f: f.assign(c=1.5), "y", None, r"column 'c' is constant \(1\.5 in all 250 rows\)"),
        (lambda f: f, "price", None, r"no target column 'price'; columns: \['x'"),
        (lambda f: f, "y", "x,size", r"no column\(s\) \['size'\]"),
        (lambda f: f.assign(y=f["y"].mask(f.index == 9)), "y", None,
         r"target 'y' has missing values in 1 row\(s\) \(first: row 9\)"),
        (lambda f: f.assign(name=[f"id{i}" for i in range(250)]), "y", None,
         r"column 'name' is text with 250 distinct values"),
    ],
)  # fmt: skip
def test_bad_tables_are_one_line_errors(tmp_path, frame, change, target, features, message):
    change(frame).to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(DataError, match=message) as info:
        build_table_training("mcbn", tmp_path / "t.csv", target, features=features)
    assert "\n" not in str(info.value)
