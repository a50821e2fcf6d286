"""``bayesify calibrate BUNDLE --conformal --data FILE``: conformal prediction sets for a
classifier trained on string labels and on integer labels, and intervals for a regression under
a fixed and an adaptive policy; the stored scores are those computed here from independent
predictions of the same rows, and the held-out coverage it prints is the served one."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from bayesify.cli import app
from bayesify.methods import load
from bayesify.posthoc.conformal import Conformal, ConformalByPolicy
from bayesify.posthoc.sampling import SamplingPolicy
from bayesify.predictor import Predictor

runner = CliRunner()
NAMES = ["cat", "dog", "eel"]


def _frame(n: int, seed: int, labels: list) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    a, b = rng.normal(0, 1, n), rng.normal(0, 1, n)
    signal = a + 0.5 * b
    label = np.array(labels, dtype=object)[np.digitize(signal + 0.5 * rng.normal(size=n),
                                                        [-0.5, 0.5])]  # fmt: skip
    y = 3 * signal + rng.normal(size=n) * (1 + np.abs(a))
    return pd.DataFrame({"a": a, "b": b, "y": y, "label": label})


def _invoke(*args):
    result = runner.invoke(app, [str(a) for a in args])
    return result, " ".join(result.output.replace("│", " ").split())


def _bundle(root, labels: list, target: str):
    paths = {}
    for name, n, seed in (("train", 500, 0), ("val", 400, 1), ("test", 400, 2)):
        frame = _frame(n, seed, labels).drop(columns=["y" if target == "label" else "label"])
        paths[name] = root / f"{name}.csv"
        frame.to_csv(paths[name], index=False)
    out = root / "bundle"
    result, text = _invoke("train", "--method", "mc-dropout", "--data", paths["train"],
                           "--target", target, "--epochs", "6", "--hidden", "32", "--norm",
                           "none", "--dropout", "0.3", "--out", out, "--no-eval")  # fmt: skip
    assert result.exit_code == 0, text
    return out, paths


def _printed(text: str, label: str) -> float:
    m = re.search(rf"conformal test {re.escape(label)}: n = 400, coverage at 0.9 (\S+),", text)
    assert m, text
    return float(m.group(1))


@pytest.mark.parametrize("labels", [NAMES, [0, 1, 2]], ids=["strings", "integers"])
def test_conformal_sets_from_a_table(tmp_path, labels):
    bundle, paths = _bundle(tmp_path, labels, "label")
    result, text = _invoke("calibrate", bundle, "--conformal", "--data", paths["val"], "--test",
                           paths["test"], "--samples", "8,16")  # fmt: skip
    assert result.exit_code == 0, text
    assert "deferral" not in load(bundle).metadata  # --conformal alone fits no deferral policy
    stored = ConformalByPolicy.from_dict(load(bundle).metadata["conformal"])
    assert stored.policies == [SamplingPolicy.fixed(8), SamplingPolicy.fixed(16)]
    # the same scores from an independent prediction of the validation rows (seed 0)
    p = Predictor.load(bundle)
    val, test = pd.read_csv(paths["val"]), pd.read_csv(paths["test"])
    names = [str(c) for c in p.class_names]
    y_val = torch.tensor([names.index(str(v)) for v in val["label"]])
    ref = Conformal.fit(p.predictive(val, 16, seed=0), y_val)
    torch.testing.assert_close(stored.calibrations[SamplingPolicy.fixed(16)].scores, ref.scores)
    # served sets on the held-out rows (seed 1, as calibrate checks them) cover as printed
    res = p.predict(test, samples=16, seed=1)
    sets = res.columns["prediction_set"]
    covered = np.mean([str(y) in map(str, s) for y, s in zip(test["label"], sets, strict=True)])
    assert _printed(text, "T=16") == pytest.approx(covered, abs=1e-4)
    assert abs(covered - 0.9) < 0.05 and res.warnings == []


def test_conformal_intervals_under_fixed_and_adaptive_sampling(tmp_path):
    bundle, paths = _bundle(tmp_path, NAMES, "y")
    policies = "8,adaptive:0.05:8:32"
    result, text = _invoke("calibrate", bundle, "--conformal", "--data", paths["val"], "--test",
                           paths["test"], "--samples", policies)  # fmt: skip
    assert result.exit_code == 0, text
    test = pd.read_csv(paths["test"])
    p = Predictor.load(bundle)
    res = p.predict(test, samples="adaptive", tol=0.05, start=8, max_samples=32, seed=1)
    c = res.columns
    covered = float(((c["lower"] <= test["y"]) & (test["y"] <= c["upper"])).mean())
    assert _printed(text, "adaptive tol=0.05 T=8..32") == pytest.approx(covered, abs=1e-4)
    assert abs(covered - 0.9) < 0.05 and res.warnings == []
    assert abs(_printed(text, "T=8") - 0.9) < 0.05
    # another adaptive tolerance has no calibration: the answer says so
    res = p.predict(test[:5], samples="adaptive", tol=0.01, start=8, max_samples=32, seed=1)
    assert res.warnings and "adaptive tol=0.01" in res.warnings[0]
    bad, text = _invoke("calibrate", bundle, "--conformal", "--samples", "adaptive:x")
    assert bad.exit_code == 2 and "sampling policy 'adaptive:x'" in text, text
