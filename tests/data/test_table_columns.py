"""Every kind of column a user's table holds, in CSV and in Parquet: trained on (and then the
same kind of values accepted by ``bayesify predict`` and by the predictor the server runs) or
refused in one line naming the column and the fix; bounds and constant columns decided on the
rows the model is trained on; regression targets checked like features."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from bayesify.app.table_jobs import _split, build_table_training, label_strings
from bayesify.cli import app
from bayesify.data.columns import Kind, category_text, column_kind
from bayesify.data.errors import DataError
from bayesify.data.tables import read_table
from bayesify.predictor import Predictor

N = 120
runner = CliRunner()


def _base(n: int = N, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"a": rng.normal(size=n), "y": rng.normal(size=n)})


def _column(kind: str, n: int = N) -> pd.Series:
    """A column of ``kind``, with every value appearing several times (not an id)."""
    rng = np.random.default_rng(1)
    pick = rng.integers(0, 4, size=n)
    if kind == "bool":
        return pd.Series(pick % 2 == 0)
    if kind == "nullable-int":
        return pd.Series(pick * 10, dtype="Int64")
    if kind == "int-missing":
        return pd.Series(pick, dtype="Int64").mask(np.arange(n) == 5)
    if kind == "category":
        return pd.Series(np.array(["low", "mid", "high", "top"])[pick], dtype="category")
    if kind == "digits-text":
        return pd.Series((pick * 7).astype(str))
    if kind == "datetime":
        return pd.Series(pd.Timestamp("2024-01-01") + pd.to_timedelta(pick, unit="D"))
    if kind == "mixed-text":
        return pd.Series(np.array(["a", 1, 2.5, "b"], dtype=object)[pick])
    if kind == "mixed-numbers":
        vals = np.array([1, 2.5, 3, 4], dtype=object)[pick]
        vals[7] = "abc"
        return pd.Series(vals)
    if kind == "inf":
        return pd.Series(rng.normal(size=n)).mask(np.arange(n) == 3, np.inf)
    raise AssertionError(kind)


def _write(frame: pd.DataFrame, path) -> None:
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    else:  # Parquet cannot hold an object column of mixed types: its values as text
        mixed = [c for c in frame if pd.api.types.infer_dtype(frame[c]).startswith("mixed")]
        frame.astype(dict.fromkeys(mixed, str)).to_parquet(path, index=False)


TRAINED = {  # kind -> the one-hot categories it becomes, or None for one number input
    "bool": ["False", "True"],
    "nullable-int": None,
    "category": ["high", "low", "mid", "top"],
    "digits-text": None,
    "mixed-text": ["1", "2.5", "a", "b"],
}
REFUSED = {  # kind -> the one-line error
    "int-missing": r"column 'c' has missing values in 1 row\(s\) \(first: row 5\); fill or drop",
    "datetime": r"column 'c' holds dates or times \(.*\), which are not inputs; leave it out "
    r"with --exclude, or add number columns made from it",
    "mixed-numbers": r"column 'c' has non-numeric values in 1 row\(s\) \(first: row 7\) "
    r"\(e\.g\. 'abc'\) among numbers",
    "inf": r"column 'c' has numbers beyond the float32 range in 1 row\(s\) \(first: row 3\)",
}


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
@pytest.mark.parametrize("kind", list(TRAINED))
def test_each_column_kind_trains_and_its_values_are_accepted_at_predict_time(
    tmp_path, kind, suffix
):
    c = _column(kind)
    frame = _base().assign(c=c)
    frame["y"] += 2 * (category_text(c) == category_text(c).iloc[0]).to_numpy()
    path = tmp_path / f"t{suffix}"
    _write(frame, path)
    job, notes = build_table_training("deterministic", path, "y", hidden="8")
    prep = job.preprocessing
    assert prep.features == ["a", "c"]
    cats = TRAINED[kind]
    if cats is None:
        assert "c" not in prep.categories and prep.bounds["c"][0] <= prep.bounds["c"][1]
        assert prep.encoded_names == ["a", "c"]
    else:
        assert prep.categories["c"] == cats
        assert sum(n.startswith("column 'c' is ") for n in notes) == 1
        assert any(n.endswith(f": {len(cats)} categories -> {len(cats)} one-hot inputs")
                   for n in notes)  # fmt: skip
    job.method.fit(job.train, val=job.val, epochs=1, batch_size=32)
    job.method.preprocessing = prep
    bundle = tmp_path / "m"
    job.method.save(bundle)

    # bayesify predict on the user's own file, read in chunks as the command reads it
    out = tmp_path / "p.csv"
    args = ["--out", str(out), "--samples", "4", "--chunk-rows", "50", "--no-progress"]
    result = runner.invoke(app, ["predict", str(bundle), str(path), *args])
    assert result.exit_code == 0, result.output
    pred = pd.read_csv(out)
    assert len(pred) == N and np.isfinite(pred["mean"]).all()

    # the server's path: rows as JSON gives them (plain Python values), through the predictor
    rows = json.loads(read_table(path).to_json(orient="records"))
    records = Predictor.load(bundle).predict(rows, samples=4, seed=0).records()
    assert len(records) == N and all(np.isfinite(r["mean"]) for r in records)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
@pytest.mark.parametrize("kind", list(REFUSED))
def test_kinds_that_cannot_be_inputs_are_refused_in_one_line(tmp_path, kind, suffix):
    path = tmp_path / f"t{suffix}"
    _write(_base().assign(c=_column(kind)), path)
    with pytest.raises(DataError, match=REFUSED[kind]) as info:
        build_table_training("deterministic", path, "y")
    assert "\n" not in str(info.value)


def test_column_kinds_follow_the_dtype_family_not_a_list_of_cases():
    kinds = {
        "b": ([True, False, None], Kind.BOOL),  # a CSV's booleans with an empty cell
        "i": (pd.array([1, None], dtype="Int64"), Kind.NUMBER),
        "u": (np.array([1, 2], dtype=np.uint8), Kind.NUMBER),
        "f": (pd.array([1.5, None], dtype="Float64"), Kind.NUMBER),
        "s": (pd.array(["1", "2.5", None], dtype="string"), Kind.NUMBER),
        "t": (["red", "blue"], Kind.CATEGORY),
        "c": (pd.Categorical([1, 2]), Kind.CATEGORY),  # declared: one-hot even of numbers
        "d": (["2024-01-31", "2024-02-01T08:00"], Kind.TIME),
        "td": (pd.to_timedelta([1, 2], unit="h"), Kind.TIME),
        "z": (np.array([1 + 2j]), Kind.OTHER),
    }
    for name, (values, kind) in kinds.items():
        assert column_kind(pd.Series(values)) is kind, name
    # one category text for a value however it arrives: 3, 3.0 (an int column with an empty
    # cell, read as floats) and "3" name the same category
    assert category_text(pd.Series([3.0, np.nan, True, 2.5, "x"], dtype=object)).tolist() == [
        "3", pd.NA, "True", "2.5", "x",
    ]  # fmt: skip


def test_a_column_constant_only_in_the_training_rows_is_left_out_with_a_note(tmp_path):
    frame = _base(1000)
    val = _split(1000, None, 0.2, seed=0)
    first_val, first_train = np.flatnonzero(val)[0], np.flatnonzero(~val)[0]
    frame["p"] = 0.0  # like a pixel that is dark in every training image
    frame.loc[first_val, "p"] = 1.0
    frame["q"] = 0.0  # one training row lit, one validation row lit far brighter
    frame.loc[first_train, "q"] = 1.0
    frame.loc[np.flatnonzero(val)[1], "q"] = 16.0
    path = tmp_path / "t.csv"
    frame.to_csv(path, index=False)
    job, notes = build_table_training("deterministic", path, "y", hidden="8")
    assert job.preprocessing.features == ["a", "q"]
    assert (
        "column 'p' is constant in the training rows (0.0 in all 800) though not in the table: "
        "left out of the features (the model could learn nothing from it)"
    ) in notes
    low, high = job.preprocessing.bounds["q"]
    assert low <= 0 and high >= 16  # every value of the user's own file is accepted
    job.method.fit(job.train, val=job.val, epochs=1)
    job.method.preprocessing = job.preprocessing
    result = Predictor(job.method).predict(frame, samples=2, seed=0)
    assert len(result) == 1000 and not result.skipped


def test_a_column_constant_in_the_whole_table_is_still_refused(tmp_path):
    _base().assign(c=3).to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(DataError, match=r"column 'c' is constant \(3 in all 120 rows\)"):
        build_table_training("deterministic", tmp_path / "t.csv", "y")


@pytest.mark.parametrize(
    "value, message",
    [
        (1e39, r"target 'y' has values beyond ±1e\+18 in 1 row\(s\) \(first: row 4\): "
               r"predictive variances, in its units squared, would pass the float32 range; "
               r"rescale the column"),
        (1e30, r"target 'y' has values beyond ±1e\+18 in 1 row\(s\) \(first: row 4\)"),
        (np.inf, r"target 'y' has infinite values in 1 row\(s\) \(first: row 4\)"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_target_beyond_what_float32_variances_hold_is_refused(tmp_path, value, message, suffix):
    frame = _base()
    frame.loc[4, "y"] = value
    path = tmp_path / f"t{suffix}"
    _write(frame, path)
    with pytest.raises(DataError, match=message) as info:
        build_table_training("deterministic", path, "y")
    assert "\n" not in str(info.value)


def test_targets_of_every_kind_decide_the_task_and_round_trip_their_labels(tmp_path):
    frame = _base()
    c = _column("digits-text")  # digits stored as text: numbers, 4 whole values -> classes
    frame["y"] = c
    frame.to_parquet(tmp_path / "t.parquet", index=False)
    job, notes = build_table_training("deterministic", tmp_path / "t.parquet", "y")
    assert job.preprocessing.class_names == ["0", "7", "14", "21"]
    assert job.preprocessing.label_type == "int" and "4 whole-number values" in notes[0]
    # a table to calibrate or score names the same classes whichever way it stores them
    assert label_strings(pd.Series(["7.0", "14"])) == label_strings(pd.Series([7, 14.0]))
    assert label_strings(pd.Series(["7.0", "14"])) == ["7", "14"]
    frame["y"] = _column("datetime")
    frame.to_parquet(tmp_path / "d.parquet", index=False)
    with pytest.raises(DataError, match=r"target 'y' holds dates or times"):
        build_table_training("deterministic", tmp_path / "d.parquet", "y")
