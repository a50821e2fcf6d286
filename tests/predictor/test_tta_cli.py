"""TTA from the command line: ``bayesify train --method tta`` with an MC dropout member and
input jitter on a table, then ``bayesify predict``: the same numbers as the bundle in Python."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from typer.testing import CliRunner

import bayesify
from bayesify.cli import app

runner = CliRunner()


def _run(args):
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def test_train_tta_over_mc_dropout_then_predict_a_csv(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 3)) * [1.0, 10.0, 100.0]  # standardised by the bundle
    y = 50 + 3 * x[:, 0] + 0.2 * x[:, 1] + rng.normal(size=300)
    frame = pd.DataFrame(x, columns=["a", "b", "c"]).assign(y=y)
    frame.iloc[:250].to_csv(tmp_path / "train.csv", index=False)
    frame.iloc[250:, :3].to_csv(tmp_path / "new.csv", index=False)
    bundle = tmp_path / "b"
    _run(["train", "--method", "tta", "--option", "method=mc-dropout", "--option",
          "transforms=noise:0.2", "--data", tmp_path / "train.csv", "--target", "y",
          "--epochs", 5, "--out", bundle, "--samples", 10])  # fmt: skip
    cfg = json.loads((bundle / "config.json").read_text())
    assert cfg["method"] == "tta" and cfg["config"]["method"] == "mc-dropout"
    assert cfg["config"]["transforms"] == "noise:0.2"
    out = tmp_path / "pred.csv"
    _run(["predict", bundle, tmp_path / "new.csv", "--out", out, "--samples", 20, "--seed", 3])
    pred = pd.read_csv(out)
    method = bayesify.load(bundle)
    assert type(method.member) is bayesify.MCDropout
    assert [layer.p for layer in method.member.layers] == [0.05] * 3  # the default rate
    ref = method.predict(frame.iloc[250:, :3], samples=20, seed=3)
    np.testing.assert_allclose(pred["mean"], ref.mean.double(), rtol=1e-5)
    np.testing.assert_allclose(pred["std"], ref.std.double(), rtol=1e-5)
