"""``bayesify distill``: a table bundle in, a student bundle out that ``bayesify predict`` reads
in the data's units; bad options are one-line errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import bayesify
from bayesify.cli import app

runner = CliRunner()


def _run(*args, code: int = 0):
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == code, result.output
    return result


@pytest.fixture(scope="module")
def table_teacher(tmp_path_factory):
    folder = tmp_path_factory.mktemp("distill-cli")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(240, 3))
    frame = pd.DataFrame(x, columns=["a", "b", "c"])
    frame["price"] = 50 + 10 * x[:, 0] - 5 * x[:, 1] + rng.normal(size=240)
    table = folder / "train.csv"
    frame.to_csv(table, index=False)
    teacher = folder / "teacher"
    _run("train", "--method", "mc-dropout", "--data", table, "--target", "price", "--epochs",
         "5", "--no-eval", "--out", teacher)  # fmt: skip
    return folder, table, teacher


def test_distill_then_predict_in_the_tables_units(table_teacher):
    folder, table, teacher = table_teacher
    student = folder / "student"
    out = _run("distill", teacher, "--data", table, "--out", student, "--epochs", "30",
               "--samples", "8", "--no-progress")  # fmt: skip
    assert "distilled mc-dropout (480 transfer rows" in out.output
    s = bayesify.load(student)
    assert isinstance(s, bayesify.Distilled)
    assert s.distillation["teacher"]["source"] == str(teacher)
    assert s.distillation["transfer"]["file"] == str(table)
    preds = folder / "preds.csv"
    _run("predict", student, table, "--out", preds, "--samples", "8", "--no-progress")
    got = pd.read_csv(preds)
    assert {"mean", "std", "epistemic_variance", "aleatoric_variance"} <= set(got.columns)
    truth = pd.read_csv(table)["price"]
    assert float(np.sqrt(((got["mean"] - truth) ** 2).mean())) < 0.5 * float(truth.std())


def test_bad_options_are_one_line_errors(table_teacher):
    folder, table, teacher = table_teacher
    r = _run("distill", teacher, "--data", table, "--out", folder / "x", "--augment", "rotate",
             code=2)  # fmt: skip
    assert "augment" in r.output and "Traceback" not in r.output
    r = _run("distill", folder / "nope", "--data", table, "--out", folder / "y", code=2)
    assert "no bundle folder" in r.output
    r = _run("distill", teacher, "--data", folder / "missing.csv", "--out", folder / "z", code=2)
    assert "missing.csv" in r.output
