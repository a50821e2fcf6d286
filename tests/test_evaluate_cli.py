"""``bayesify evaluate BUNDLE --data FILE`` on bundles trained on a table: every figure checked
against a recomputation with scikit-learn, scipy and properscoring on the same samples."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats
from scipy.optimize import brentq
from scipy.special import logsumexp, ndtr
from typer.testing import CliRunner

from bayesify.cli import app
from bayesify.predictor import Predictor

runner = CliRunner()
T, SEED = 20, 3


def _invoke(*args: str) -> str:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _rows(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x1, x2 = rng.normal(size=n), rng.normal(size=n)
    kind = rng.choice(["a", "b", "c"], size=n)
    y = 2 * x1 - x2 + 1.5 * (kind == "b") + 50 + rng.normal(scale=0.5, size=n)
    label = np.where(x1 + 0.5 * x2 > 0, "up", "down")
    label[x1 > 1.2] = "far"
    return pd.DataFrame({"x1": x1, "x2": x2, "kind": kind, "y": y, "label": label})


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    root = tmp_path_factory.mktemp("evaluate")
    paths = {}
    for name, n, seed in (("train", 240, 0), ("cal", 80, 1), ("test", 100, 2)):
        paths[name] = root / f"{name}.csv"
        _rows(n, seed).to_csv(paths[name], index=False)
    for task, target, drop in (("regression", "y", "label"), ("classification", "label", "y")):
        bundle = root / task
        data = root / f"train_{task}.csv"
        pd.read_csv(paths["train"]).drop(columns=[drop]).to_csv(data, index=False)
        _invoke("train", "--data", data, "--target", target, "--method", "mc-dropout",
                "--epochs", 8, "--hidden", "16", "--lr", 0.01, "--no-eval",
                "--out", bundle)  # fmt: skip
        paths[task] = bundle
    _invoke("calibrate", paths["regression"], "--conformal", "--data", paths["cal"],
            "--samples", T, "--test-limit", 0)  # fmt: skip
    return paths


def _mixture_cdf(z: float, means: np.ndarray, sd: float) -> float:
    return float(ndtr((z - means) / sd).mean())


def test_regression_scores_match_an_independent_recomputation(tables, tmp_path):
    import properscoring
    from sklearn.metrics import mean_squared_error

    out = tmp_path / "scores.json"
    _invoke("evaluate", tables["regression"], "--data", tables["test"], "--samples", T,
            "--seed", SEED, "--levels", "0.8,0.9", "--out", out, "--no-progress")  # fmt: skip
    got = json.loads(out.read_text())
    s = got["scores"]
    assert got["rows"] == 100 and got["skipped"] == 0 and got["conformal"] is True
    frame = pd.read_csv(tables["test"])
    y = frame["y"].to_numpy()
    pred = Predictor.load(tables["regression"]).predictive(frame, T, seed=SEED)
    means = pred.samples.double().numpy()  # [T, N], target units
    sd = float(pred.noise_variance[0, 0]) ** 0.5
    assert s["rmse"] == pytest.approx(mean_squared_error(y, means.mean(0)) ** 0.5, rel=1e-6)
    logp = logsumexp(stats.norm.logpdf(y, means, sd), axis=0) - math.log(T)
    assert s["pll"] == pytest.approx(logp.mean(), rel=1e-6) and s["nll"] == -s["pll"]
    crps = [properscoring.crps_quadrature(y[i], lambda z, i=i: _mixture_cdf(z, means[:, i], sd),
                                          xmin=min(y[i], means[:, i].min()) - 20 * sd,
                                          xmax=max(y[i], means[:, i].max()) + 20 * sd)
            for i in range(len(y))]  # fmt: skip
    assert s["crps"] == pytest.approx(float(np.mean(crps)), rel=1e-4)
    pit = np.array([_mixture_cdf(y[i], means[:, i], sd) for i in range(len(y))])
    lo, hi = [], []
    for i in range(len(y)):  # the equal-tailed mixture interval at 0.9 by root finding
        f = lambda z, q, i=i: _mixture_cdf(z, means[:, i], sd) - q  # noqa: E731
        a, b = means[:, i].min() - 10 * sd, means[:, i].max() + 10 * sd
        lo.append(brentq(f, a, b, args=(0.05,), xtol=1e-10))
        hi.append(brentq(f, a, b, args=(0.95,), xtol=1e-10))
    assert s["coverage_mc@0.9"] == pytest.approx(np.mean((pit >= 0.05) & (pit <= 0.95)))
    assert s["width_mc@0.9"] == pytest.approx(np.mean(np.subtract(hi, lo)), rel=1e-6)
    epi = means.var(0)
    assert s["epistemic_share"] == pytest.approx(epi.sum() / (epi + sd**2).sum(), rel=1e-6)
    # conformal: q̂ = the ⌈(n+1)·0.9⌉-th smallest stored score, interval mean ± q̂·std
    conf = json.loads((tables["regression"] / "config.json").read_text())["metadata"]["conformal"]
    scores = np.sort(conf["calibrations"][0]["scores"])
    q = scores[math.ceil((len(scores) + 1) * 0.9) - 1]
    std = np.sqrt(epi + sd**2)
    inside = np.abs(y - means.mean(0)) <= q * std
    assert s["coverage_conformal@0.9"] == pytest.approx(inside.mean())
    assert s["width_conformal@0.9"] == pytest.approx(np.mean(2 * q * std), rel=1e-6)
    figure = out.with_suffix(".png")
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_classification_scores_skip_bad_rows_and_match_sklearn(tables, tmp_path):
    from sklearn.metrics import accuracy_score, log_loss

    frame = pd.read_csv(tables["test"]).drop(columns=["y"])
    frame["x1"] = frame["x1"].astype(object)
    frame.loc[4, "x1"] = "n/a"  # a feature that is not a number
    frame.loc[9, "label"] = "sideways"  # a class the bundle does not know
    data = tmp_path / "rows.csv"
    frame.to_csv(data, index=False)
    result = runner.invoke(app, ["evaluate", str(tables["classification"]), "--data", str(data),
                                 "--no-progress"])  # fmt: skip
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert (
        "row 4" in result.output and "row 9" in result.output and "--on-error skip" in result.output
    )
    out = tmp_path / "scores.md"
    said = _invoke("evaluate", tables["classification"], "--data", data, "--samples", T,
                   "--seed", SEED, "--on-error", "skip", "--format", "json",
                   "--no-progress")  # fmt: skip
    got = json.loads(said[said.index("{") :])
    assert got["rows"] == 98 and got["skipped"] == 2 and got["conformal"] is False
    assert "row 4: column 'x1'" in said and "row 9: target 'label': unknown class" in said
    s = got["scores"]
    predictor = Predictor.load(tables["classification"])
    usable = frame.drop(index=4)  # the predictor leaves bad-feature rows out before sampling
    pred = predictor.predictive(usable, T, seed=SEED)
    keep = usable.index != 9
    probs = pred.mean.double().numpy()[keep]
    names = predictor.class_names
    y = np.array([names.index(v) for v in usable["label"][keep]])
    assert s["accuracy"] == pytest.approx(accuracy_score(y, probs.argmax(1)))
    assert s["nll"] == pytest.approx(log_loss(y, probs, labels=range(len(names))), rel=1e-5)
    assert s["brier"] == pytest.approx(((probs - np.eye(len(names))[y]) ** 2).sum(1).mean())
    conf, hit = probs.max(1), probs.argmax(1) == y
    bins = np.clip(np.ceil(conf * 15).astype(int) - 1, 0, 14)  # (lower, upper] bins
    ece = sum(abs(hit[bins == b].sum() - conf[bins == b].sum()) for b in range(15)) / len(y)
    assert s["ece"] == pytest.approx(ece, abs=1e-6)  # float32 probabilities
    samples = pred.samples.double().numpy()[:, keep]
    epi = samples.var(0).sum()
    assert s["epistemic_share"] == pytest.approx(
        epi / (epi + (samples * (1 - samples)).mean(0).sum())
    )
    _invoke("evaluate", tables["classification"], "--data", data, "--samples", T, "--on-error",
            "skip", "--out", out, "--no-progress")  # fmt: skip
    text = out.read_text()
    assert text.startswith("| metric | value |") and "| accuracy |" in text
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"


def test_table_bundle_without_data_says_to_pass_it(tables):
    result = runner.invoke(app, ["evaluate", str(tables["classification"])])
    assert result.exit_code == 2 and "--data FILE" in result.output
    assert len(result.output.strip().splitlines()) == 1
