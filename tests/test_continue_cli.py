"""``bayesify train --continue-from BUNDLE``: a vcl bundle learns the next task from a table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from typer.testing import CliRunner

import bayesify
from bayesify.cli import app

runner = CliRunner()


def _table(path, shift: float, flip: bool, seed: int) -> str:
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=80), rng.normal(size=80) + shift
    label = np.where((a > 0) != flip, "yes", "no")
    pd.DataFrame({"a": a, "b": b, "label": label}).to_csv(path, index=False)
    return str(path)


def _said(result) -> str:
    return " ".join(result.output.replace("│", " ").split())


def test_continue_from_learns_the_next_task_into_a_new_bundle(tmp_path):
    first = _table(tmp_path / "t1.csv", 2.0, False, 0)
    second = _table(tmp_path / "t2.csv", -2.0, True, 1)
    common = ["--epochs", "2", "--batch-size", "16", "--no-eval"]
    result = runner.invoke(app, ["train", "--method", "vcl", "--data", first, "--target", "label",
                                 "--hidden", "8", "--norm", "none", "--option", "coreset=random",
                                 "--option", "coreset_size=5", "--out", str(tmp_path / "b1"),
                                 *common])  # fmt: skip
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["train", "--continue-from", str(tmp_path / "b1"), "--data",
                                 second, "--out", str(tmp_path / "b2"), *common])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "learned task 2" in _said(result) and "2 tasks" in _said(result)
    b1, b2 = bayesify.load(tmp_path / "b1"), bayesify.load(tmp_path / "b2")
    assert len(b1.tasks) == 1 and [t["task"] for t in b2.tasks] == [0, 1]
    assert b2.tasks[1]["data"] == second and b2.tasks[1]["rows"] == 80
    assert b2.tasks[1]["coreset_rows"] == 5 and len(b2.coreset()[0]) == 5 + 5
    torch.testing.assert_close(b2.coreset()[0][:5], b1.coreset()[0])  # task 1's rows kept
    # the new table went through the first bundle's scaling: its coreset rows are scaled rows
    scaled = b1.preprocessing.inputs(pd.read_csv(second)[["a", "b"]])
    rows = b2.tasks[1]["coreset_indices"]
    torch.testing.assert_close(b2.coreset()[0][5:], scaled[rows])


def test_continue_from_refuses_what_it_cannot_continue(tmp_path):
    first = _table(tmp_path / "t1.csv", 0.0, False, 0)
    common = ["--epochs", "1", "--no-eval", "--hidden", "4", "--norm", "none"]
    result = runner.invoke(app, ["train", "--method", "bbb", "--data", first, "--target",
                                 "label", "--out", str(tmp_path / "bbb"), *common])  # fmt: skip
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["train", "--continue-from", str(tmp_path / "bbb"), "--data",
                                 first, "--out", str(tmp_path / "next")])  # fmt: skip
    assert result.exit_code == 2 and "only a vcl bundle learns a next task" in _said(result)
    result = runner.invoke(app, ["train", "--method", "vcl", "--data", first, "--target",
                                 "label", "--out", str(tmp_path / "v"), *common])  # fmt: skip
    other = tmp_path / "t3.csv"
    pd.DataFrame({"a": [0.1, 0.2], "b": [1.0, 2.0], "label": ["yes", "maybe"]}).to_csv(other)
    result = runner.invoke(app, ["train", "--continue-from", str(tmp_path / "v"), "--data",
                                 str(other), "--out", str(tmp_path / "next")])  # fmt: skip
    assert result.exit_code == 2 and "has classes ['maybe'] that the bundle does not" in _said(
        result
    )


def test_continue_from_refuses_the_flags_the_bundle_decides(tmp_path):
    first = _table(tmp_path / "t1.csv", 2.0, False, 0)
    result = runner.invoke(app, ["train", "--method", "vcl", "--data", first, "--target", "label",
                                 "--hidden", "8", "--norm", "none", "--epochs", "1", "--no-eval",
                                 "--out", str(tmp_path / "b1")])  # fmt: skip
    assert result.exit_code == 0, result.output
    go_on = ["train", "--continue-from", str(tmp_path / "b1"), "--data", first,
             "--out", str(tmp_path / "b2"), "--epochs", "1"]  # fmt: skip
    for flags, named in ((["--method", "mcbn"], "--method"),
                         (["--hidden", "4,4", "--option", "coreset_size=3"], "--hidden, --option"),
                         (["--eval"], "--eval")):  # fmt: skip
        result = runner.invoke(app, [*go_on, *flags])
        assert result.exit_code == 2, result.output
        assert f"{named} cannot be used with --continue-from" in _said(result)
        assert not (tmp_path / "b2").exists()
    result = runner.invoke(app, [*go_on, "--no-eval", "--lr", "0.01"])
    assert result.exit_code == 0, result.output
