"""``bayesify train --data TABLE``: every option applies to the table or is refused in one line;
a boolean column trains instead of crashing; the notes and the closing table say what was done."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from bayesify.app.table_jobs import _split, build_table_training
from bayesify.cli import app

runner = CliRunner()


def _said(result) -> str:
    """The command's output with rich's line wrapping undone."""
    return " ".join(result.output.replace("│", " ").split())


def _table(path, n: int = 100, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=n)
    flag = rng.random(n) < 0.5
    city = rng.choice(["rome", "oslo", "lima"], size=n)
    y = a + flag + (city == "oslo") + 0.1 * rng.normal(size=n)
    pd.DataFrame({"a": a, "flag": flag, "city": city, "y": y}).to_csv(path, index=False)


def _train(tmp_path, *args: str, n: int = 100):
    _table(tmp_path / "t.csv", n)
    base = ["train", "--data", str(tmp_path / "t.csv"), "--target", "y", "--epochs", "2",
            "--samples", "4", "--out", str(tmp_path / "m")]  # fmt: skip
    return runner.invoke(app, [*base, *args])


def test_a_boolean_column_trains_and_each_one_hot_column_gets_one_note(tmp_path):
    result = _train(tmp_path)
    assert result.exit_code == 0, result.output
    assert result.exception is None
    lines = result.output.splitlines()
    assert "column 'flag' is true/false: 2 categories -> 2 one-hot inputs" in lines
    assert "column 'city' is text: 3 categories -> 3 one-hot inputs" in lines
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["preprocessing"]["categories"]["flag"] == ["False", "True"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--split", "7"], "--split applies to the built-in datasets, not to --data tables"),
        (["--protocol", "gal"], "--protocol applies to the built-in datasets"),
        (["--model", "lenet"], "--model applies to the built-in datasets"),
        (["--split", "0", "--protocol", "teye"],
         "--split and --protocol apply to the built-in datasets, not to --data tables"),
    ],
)  # fmt: skip
def test_options_of_the_built_in_datasets_are_refused_with_a_table(tmp_path, args, message):
    result = _train(tmp_path, *args)
    assert result.exit_code == 2
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "m").exists()


def test_options_of_tables_are_refused_with_a_built_in_dataset(tmp_path):
    result = runner.invoke(app, ["train", "--data", "yacht", "--task", "regression",
                                 "--out", str(tmp_path / "m")])  # fmt: skip
    assert result.exit_code == 2
    assert "--task are for tables; 'yacht' is a built-in dataset" in _said(result)


def test_limit_trains_on_a_seeded_sample_of_the_training_rows(tmp_path):
    _table(tmp_path / "t.csv", n=2000)
    job, notes = build_table_training("deterministic", tmp_path / "t.csv", "y", limit=100)
    assert len(job.train[0]) == 100 and len(job.val[0]) == 400  # validation rows unchanged
    assert "--limit 100: trained on a seeded sample of 100 of the 1600 training rows (seed 0)" in (
        notes
    )
    # the sample is drawn from the training rows of the seeded split, the same for the same seed
    y = pd.read_csv(tmp_path / "t.csv")["y"].to_numpy()
    train_y = set(np.round(y[~_split(2000, None, 0.2, seed=0)], 4))
    sample_y = job.train[1].double().numpy() * job.scale + job.loc
    assert set(np.round(sample_y, 4)) <= train_y
    again, _ = build_table_training("deterministic", tmp_path / "t.csv", "y", limit=100)
    assert np.array_equal(again.train[1].numpy(), job.train[1].numpy())
    other, _ = build_table_training("deterministic", tmp_path / "t.csv", "y", limit=100, seed=1)
    assert not np.array_equal(other.train[1].numpy(), job.train[1].numpy())


def test_limit_on_the_command_line_reaches_the_table(tmp_path, monkeypatch):
    from bayesify.cli.common import console

    monkeypatch.setattr(console, "width", 40)  # a narrow terminal
    result = _train(tmp_path, "--limit", "40", "--no-eval", n=400)
    assert result.exit_code == 0, result.output
    note = "--limit 40: trained on a seeded sample of 40 of the 320 training rows (seed 0)"
    assert note in result.output.splitlines()  # each note one line, however narrow the terminal
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["metadata"]["limit"] == 40


def test_the_closing_table_says_what_the_normalised_scores_are(tmp_path):
    result = _train(tmp_path, "--model", "mlp")
    assert result.exit_code == 0, result.output
    said = _said(result)
    assert "pll_norm" in said and "crps_norm" in said
    assert (
        "pll_norm, crps_norm: PLL and CRPS rescaled so that 0 is the same means with one "
        "constant variance and 100 the best variance for each row (higher is better; Teye et "
        "al. 2018); the validation rows scored here also fitted the noise variance and chose "
        "the kept epoch (early stopping), so these figures are optimistic"
    ) in result.output.splitlines()


def test_a_target_beyond_float32_is_refused_on_the_command_line(tmp_path):
    _table(tmp_path / "t.csv")
    frame = pd.read_csv(tmp_path / "t.csv")
    frame.loc[[3, 8], "y"] = 1e39
    frame.to_csv(tmp_path / "t.csv", index=False)
    result = runner.invoke(app, ["train", "--data", str(tmp_path / "t.csv"), "--target", "y",
                                 "--out", str(tmp_path / "m")])  # fmt: skip
    assert result.exit_code == 2
    assert "target 'y' has values beyond ±1e+18 in 2 row(s) (first: row 3, 8)" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "m").exists()


def test_a_failing_closing_evaluation_is_one_line_naming_the_saved_bundle(tmp_path, monkeypatch):
    from bayesify.app.jobs import Job

    def broken(self, samples):
        raise ValueError("log_prob needs noise_variance > 0")

    monkeypatch.setattr(Job, "evaluate", broken)
    result = _train(tmp_path)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    said = _said(result)
    assert "Traceback" not in said
    assert said.count("error:") == 1
    last = said.split("error:")[-1]
    assert "closing evaluation failed: log_prob needs noise_variance > 0" in last
    assert (tmp_path / "m" / "config.json").exists()
