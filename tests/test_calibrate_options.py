"""``bayesify calibrate`` as a table user expects it: ``--on-error skip`` (rows left out, listed,
under predict's file-safety rules), a progress bar, ``--conformal-method`` stored with the
calibration and used by ``predict``, the deferral score by task, and messages that name flags."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import bayesify.app.calibration as calibration
from bayesify.cli import app
from bayesify.methods import load
from bayesify.posthoc.conformal import ConformalByPolicy
from bayesify.posthoc.sampling import SamplingPolicy
from bayesify.predictor import Predictor
from bayesify.progress import progress_bar

runner = CliRunner()


def _frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=n), rng.normal(size=n)
    y = 3 * a - b + 0.5 * rng.normal(size=n)
    label = np.array(["cat", "dog", "eel"])[np.digitize(a + 0.5 * rng.normal(size=n), [-0.5, 0.5])]
    return pd.DataFrame({"a": a, "b": b, "y": y, "label": label})


def _invoke(*args):
    result = runner.invoke(app, [str(a) for a in args])
    return result, " ".join(result.output.replace("│", " ").split())


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    root = tmp_path_factory.mktemp("tables")
    for name, n, seed in (("train", 300, 0), ("val", 120, 1), ("test", 80, 2)):
        _frame(n, seed).to_csv(root / f"{name}.csv", index=False)
    return root


def _train(tables, target: str, out):
    frame = pd.read_csv(tables / "train.csv").drop(columns=["label" if target == "y" else "y"])
    frame.to_csv(out.parent / f"train_{target}.csv", index=False)
    result, said = _invoke("train", "--method", "mc-dropout", "--data",
                           out.parent / f"train_{target}.csv", "--target", target, "--epochs", 3,
                           "--hidden", 16, "--norm", "none", "--out", out, "--no-eval")  # fmt: skip
    assert result.exit_code == 0, said
    return out


@pytest.fixture(scope="module")
def regression(tables, tmp_path_factory):
    return _train(tables, "y", tmp_path_factory.mktemp("reg") / "reg")


@pytest.fixture(scope="module")
def classification(tables, tmp_path_factory):
    return _train(tables, "label", tmp_path_factory.mktemp("cls") / "cls")


def _one_line_error(result) -> None:
    assert result.exit_code == 2, result.output
    assert result.output.strip().startswith("error:") and "Traceback" not in result.output


def test_regression_defaults_to_its_epistemic_score_and_prints_the_target_plainly(
    regression, tables
):
    result, said = _invoke("calibrate", regression, "--data", tables / "val.csv", "--coverage",
                           0.8, "--decision", "single", "--samples", 8)  # fmt: skip
    assert result.exit_code == 0, said
    assert "defer when epistemic_variance >" in said and "(target coverage 0.80;" in said
    assert "{" not in said
    stored = load(regression).metadata["deferral"]
    assert stored["score"] == "epistemic_variance"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--coverage", "1.5"], "--coverage must be in (0, 1], got 1.5"),
        (["--coverage", "0"], "--coverage must be in (0, 1], got 0.0"),
        (["--error", "-1"], "--error must be a positive number, got -1.0"),
        (["--conformal", "--level", "0"], "--level must be in (0, 1), got 0.0"),
        (["--conformal", "--level", "1"], "--level must be in (0, 1), got 1.0"),
        (["--coverage", "0.8", "--score", "mi"], "--score must be one of std, epistemic_variance"),
        (
            ["--conformal", "--conformal-method", "aps"],
            "--conformal-method aps makes classification prediction sets; this bundle is a "
            "regression: use auto or split",
        ),
        (["--conformal", "--conformal-method", "lac"], "--conformal-method must be one of auto"),
        (["--coverage", "0.8", "--on-error", "maybe"], "--on-error must be fail or skip"),
    ],  # fmt: skip
)
def test_messages_name_the_flags(regression, tables, args, message):
    result, said = _invoke("calibrate", regression, "--data", tables / "val.csv", *args)
    _one_line_error(result)
    assert message in said and "target_coverage" not in said


def test_help_states_the_range_the_check_enforces():
    result = runner.invoke(app, ["calibrate", "--help"], env={"COLUMNS": "200"})
    helped = " ".join(result.output.replace("│", " ").split())
    assert "level of the held-out check, in (0, 1)" in helped and "0<=x<=1" not in helped
    assert "mi for classification, epistemic_variance for regression" in helped


def _with_bad_rows(tables, path):
    frame = pd.read_csv(tables / "val.csv")
    frame["a"] = frame["a"].astype(object)
    frame.loc[3, "a"] = "oops"
    frame.loc[7, "b"] = np.nan
    frame.loc[11, "y"] = np.nan
    frame.to_csv(path, index=False)
    return frame.drop(index=[3, 7, 11])


def test_skip_leaves_bad_rows_out_lists_them_and_fits_on_the_rest(regression, tables, tmp_path):
    clean = _with_bad_rows(tables, tmp_path / "dirty.csv")
    clean.to_csv(tmp_path / "clean.csv", index=False)
    args = ["--coverage", 0.7, "--decision", "single", "--samples", 8, "--test-limit", 0]
    result, said = _invoke("calibrate", regression, "--data", tmp_path / "dirty.csv", *args)
    _one_line_error(result)
    assert "row 3" in said and "--on-error skip" in said
    result, said = _invoke("calibrate", regression, "--data", tmp_path / "dirty.csv", *args,
                           "--on-error", "skip")  # fmt: skip
    assert result.exit_code == 0, said
    side = regression.parent / "reg.skipped.csv"
    listed = pd.read_csv(side)
    assert list(listed["row"]) == [3, 7, 11] and set(listed["file"]) == {
        str(tmp_path / "dirty.csv")
    }
    assert "missing value" in listed["reason"][2] and "skipped 3 row(s) of" in said
    skipped = load(regression).metadata["deferral"]["threshold"]
    # the same policy as one fitted on a table of only the good rows
    result, said = _invoke("calibrate", regression, "--data", tmp_path / "clean.csv", *args)
    assert result.exit_code == 0, said
    assert load(regression).metadata["deferral"]["threshold"] == pytest.approx(skipped)
    side.unlink()


def test_skip_follows_the_file_safety_rules(regression, tables, tmp_path):
    _with_bad_rows(tables, tmp_path / "dirty.csv")
    config = (regression / "config.json").read_bytes()
    side = regression.parent / "reg.skipped.csv"
    side.write_text("mine\n")
    args = ["--coverage", 0.7, "--decision", "single", "--samples", 4, "--on-error", "skip"]
    result, said = _invoke("calibrate", regression, "--data", tmp_path / "dirty.csv", *args)
    _one_line_error(result)
    assert f"{side} exists" in said and "--overwrite" in said and side.read_text() == "mine\n"
    side.unlink()
    # the list would be the --data file itself
    own = regression.parent / "reg.skipped.csv"
    pd.read_csv(tmp_path / "dirty.csv").to_csv(own, index=False)
    before = own.read_bytes()
    result, said = _invoke("calibrate", regression, "--data", own, *args, "--overwrite")
    _one_line_error(result)
    assert "an input" in said and own.read_bytes() == before
    own.unlink()
    # every row bad: one line, the bundle untouched
    frame = pd.read_csv(tables / "val.csv").head(5)
    frame["y"] = np.nan
    frame.to_csv(tmp_path / "allbad.csv", index=False)
    result, said = _invoke("calibrate", regression, "--data", tmp_path / "allbad.csv", *args)
    _one_line_error(result)
    assert "no row of" in said and "all 5 were skipped" in said
    assert (regression / "config.json").read_bytes() == config
    side.unlink()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_sequential_calibration_shows_the_samples_it_draws(regression, tables, monkeypatch):
    screens: list[_Terminal] = []

    def on_terminal(*args, **kwargs):
        screens.append(_Terminal())
        return progress_bar(*args, file=screens[-1], mininterval=0, **kwargs)

    monkeypatch.setattr(calibration, "progress_bar", on_terminal)
    args = ["calibrate", regression, "--data", tables / "val.csv", "--coverage", 0.8,
            "--decision-start", 4, "--decision-max", 4, "--test-limit", 0]  # fmt: skip
    result, said = _invoke(*args)
    assert result.exit_code == 0, said
    drawn = screens[-1].getvalue()
    assert "calibrate" in drawn and "480sample" in drawn.replace(" ", "")  # 120 rows x 4
    result, said = _invoke(*args, "--no-progress")
    assert result.exit_code == 0 and screens[-1].getvalue() == ""


@pytest.mark.parametrize("name,kind,randomized", [("raps", "raps", False),
                                                  ("split", "lac", False),
                                                  ("aps-randomized", "aps", True)])  # fmt: skip
def test_the_chosen_conformal_method_is_stored_and_predict_uses_it(
    classification, tables, tmp_path, name, kind, randomized
):
    result, said = _invoke("calibrate", classification, "--data", tables / "val.csv", "--target",
                           "label", "--conformal", "--conformal-method", name, "--samples", 8,
                           "--raps-k-reg", 0, "--raps-lambda", 0.3, "--test",
                           tables / "test.csv")  # fmt: skip
    assert result.exit_code == 0, said
    assert f"conformal {kind}" in said
    stored = load(classification).metadata["conformal"]
    assert stored["method"] == kind and stored["randomized"] is randomized
    if kind == "raps":
        assert (stored["k_reg"], stored["lam"]) == (0, 0.3)
    rows = pd.read_csv(tables / "test.csv").drop(columns=["y", "label"])
    rows.to_csv(tmp_path / "rows.csv", index=False)
    result, said = _invoke("predict", classification, tmp_path / "rows.csv", "--out",
                           tmp_path / "p.csv", "--samples", 8, "--seed", 5, "--level", 0.8,
                           "--no-progress")  # fmt: skip
    assert result.exit_code == 0, said
    sets = [json.loads(s) for s in pd.read_csv(tmp_path / "p.csv")["prediction_set"]]
    # the reference: the stored scores' quantile and the score of the chosen method, by hand
    predictor = Predictor(load(classification))
    probs = predictor.predictive(rows, 8, seed=5).mean.double().numpy()
    conf = ConformalByPolicy.from_dict(stored).select(SamplingPolicy.fixed(8))[0]
    n = conf.n
    k = math.ceil((n + 1) * 0.8)
    q = math.inf if k > n else float(conf.scores[k - 1])
    names = predictor.class_names
    if kind == "lac":
        want = [[names[c] for c in range(3) if 1 - p[c] <= q] for p in probs]
        assert sets == want
    elif kind == "raps":
        want = []
        for p in probs:
            order = sorted(range(3), key=lambda c: (-p[c], c))
            score = {c: sum(p[j] for j in order[:r]) + 0.3 * max(0, r + 1 - 0)
                     for r, c in enumerate(order)}  # fmt: skip
            want.append([names[c] for c in range(3) if score[c] <= q])
        assert sets == want
    else:  # randomized: U per row from predict's generator; every set within APS's bounds
        for s, p in zip(sets, probs, strict=True):
            order = sorted(range(3), key=lambda c: (-p[c], c))
            top = [names[c] for c in order]
            assert s == [c for c in names if c in top[: len(s)]]  # a top set
