"""Own data end to end: a table in with ``bayesify train``, a file out with ``bayesify predict``,
and the same numbers from ``bayesify.load(bundle).predict(raw)``, in the data's units."""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

import bayesify
from bayesify.cli import app
from bayesify.data import DataError, data_root

runner = CliRunner()
BOSTON = ["CRIM", "ZN", "INDUS", "CHAS", "NOX", "RM", "AGE", "DIS", "RAD", "TAX", "PTRATIO", "B",
          "LSTAT", "MEDV"]  # fmt: skip


def _uci(name: str) -> np.ndarray:
    try:
        path = data_root() / "uci" / name / "data.txt"
    except DataError as e:
        pytest.skip(f"shared data not found: {e}")
    return np.loadtxt(path)


def _said(result) -> str:
    return " ".join(result.output.replace("│", " ").split())


def _run(args):
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def test_train_from_csv_predict_csv_same_numbers_as_python(tmp_path):
    raw = _uci("bostonHousing")
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(raw))
    frame = pd.DataFrame(raw, columns=BOSTON)
    frame.iloc[idx[:400]].to_csv(tmp_path / "train.csv", index=False)
    test = frame.iloc[idx[400:]]
    test.drop(columns="MEDV").to_csv(tmp_path / "new.csv", index=False)
    bundle = tmp_path / "boston"
    result = _run(["train", "--data", tmp_path / "train.csv", "--target", "MEDV",
                   "--epochs", 40, "--out", bundle, "--samples", 20])  # fmt: skip
    said = _said(result)
    assert "target 'MEDV' has" in said and "→ regression" in said
    assert "320 training rows, 80 validation rows" in said
    out = tmp_path / "pred.csv"
    _run(["predict", bundle, tmp_path / "new.csv", "--out", out, "--samples", 30,
          "--seed", 7, "--keep", "CRIM"])  # fmt: skip
    pred = pd.read_csv(out)
    assert list(pred.columns[:3]) == ["row", "CRIM", "mean"] and len(pred) == len(test)
    np.testing.assert_allclose(pred["CRIM"], test["CRIM"])
    ref = bayesify.load(bundle).predict(test.drop(columns="MEDV"), samples=30, seed=7)
    np.testing.assert_allclose(pred["mean"], ref.mean.double(), rtol=1e-5)
    np.testing.assert_allclose(pred["std"], ref.std.double(), rtol=1e-5)
    np.testing.assert_allclose(pred["aleatoric_variance"], ref.aleatoric_variance, rtol=1e-5)
    rmse = float(np.sqrt(((pred["mean"] - test["MEDV"].to_numpy()) ** 2).mean()))
    assert rmse < 6.0, rmse  # target std is 9.2 (in thousands of dollars), units are the data's
    # the output is Parquet as well, by suffix
    _run(["predict", bundle, tmp_path / "new.csv", "--out", tmp_path / "p.parquet",
          "--samples", 30, "--seed", 7, "--chunk-rows", 40])  # fmt: skip
    chunked = pd.read_parquet(tmp_path / "p.parquet")
    assert list(chunked["row"]) == list(range(len(test)))
    assert np.abs(chunked["mean"] - pred["mean"]).max() < 3 * pred["std"].max()


def test_builtin_uci_bundle_predicts_raw_rows_in_original_units(tmp_path):
    raw = _uci("bostonHousing")
    bundle = tmp_path / "boston"
    _run(["train", "--data", "bostonHousing", "--epochs", 30, "--out", bundle, "--no-eval"])
    from bayesify.data import load_uci

    s = load_uci("bostonHousing", 0)
    rows = raw[s.test_index.numpy()]
    pred = bayesify.load(bundle).predict(rows[:, :13], samples=30, seed=0)
    rmse = float(((pred.mean.double() - torch.as_tensor(rows[:, 13])) ** 2).mean().sqrt())
    assert rmse < 6.0, rmse  # before bundles carried their scaling, predictions were ~2x off


def test_classification_table_with_a_text_column_and_bad_rows(tmp_path):
    raw = _uci("wine-quality-red")
    cols = [f"f{j}" for j in range(raw.shape[1] - 1)] + ["quality"]
    frame = pd.DataFrame(raw, columns=cols)
    frame["band"] = np.where(frame["f0"] > frame["f0"].median(), "high", "low")
    frame = frame.drop(columns="f0")
    frame.iloc[:1200].to_csv(tmp_path / "train.csv", index=False)
    new = frame.iloc[1200:1260].drop(columns="quality").astype(object)
    new.iloc[3, new.columns.get_loc("band")] = "medium"
    new.iloc[5, new.columns.get_loc("f3")] = None
    new.to_csv(tmp_path / "new.csv", index=False)
    bundle = tmp_path / "wine"
    args = ["train", "--method", "mc-dropout", "--data", tmp_path / "train.csv",
            "--target", "quality", "--epochs", 5, "--out", bundle, "--samples", 10]  # fmt: skip
    result = _run(args)
    assert "whole-number values" in _said(result) and "stratified by class" in _said(result)
    p = bayesify.predictor.Predictor.load(bundle)
    assert p.preprocessing.categories == {"band": ["high", "low"]}
    assert p.class_names == [str(q) for q in sorted({int(q) for q in frame["quality"][:1200]})]
    out = tmp_path / "pred.csv"
    result = runner.invoke(app, ["predict", str(bundle), str(tmp_path / "new.csv"),
                                 "--out", str(out)])  # fmt: skip
    assert result.exit_code == 2
    assert "row 3: column 'band': unknown category 'medium'" in _said(result)
    result = _run(["predict", bundle, tmp_path / "new.csv", "--out", out, "--overwrite",
                   "--on-error", "skip", "--samples", 10])  # fmt: skip
    assert "skipped 2 row(s)" in _said(result) and "row 5: column 'f3': missing value" in _said(
        result
    )
    pred = pd.read_csv(out)
    assert len(pred) == 58 and 3 not in set(pred["row"]) and 5 not in set(pred["row"])
    probs = pred[[f"p_{c}" for c in p.class_names]].to_numpy()
    np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-5)
    assert list(pred["label"].astype(str)) == [p.class_names[i] for i in probs.argmax(1)]
    skipped = pd.read_csv(tmp_path / "pred.skipped.csv")
    assert list(skipped["row"]) == [3, 5]


def test_a_users_networks_open_with_bayesify_predict(tmp_path, monkeypatch):
    """An nn.Sequential needs no extra argument; a custom module is named with --net."""
    x = torch.randn(200, 4)
    y = x @ torch.tensor([1.0, -1.0, 0.5, 0.0]) + 0.1 * torch.randn(200)
    rows = pd.DataFrame(x[:25].numpy(), columns=list("abcd"))
    rows.to_csv(tmp_path / "rows.csv", index=False)
    seq = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 1))
    m = bayesify.MCDropout(seq).fit((x, y), val=(x, y), epochs=3, progress=False)
    m.save(tmp_path / "seq")
    _run(["predict", tmp_path / "seq", tmp_path / "rows.csv", "--out", tmp_path / "s.csv",
          "--seed", 1, "--samples", 20])  # fmt: skip
    ref = m.predict(x[:25], samples=20, seed=1)
    np.testing.assert_allclose(pd.read_csv(tmp_path / "s.csv")["mean"], ref.mean, rtol=1e-5)

    (tmp_path / "mynets.py").write_text(textwrap.dedent("""
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = nn.Linear(4, 16)
                self.drop = nn.Dropout(0.1)
                self.head = nn.Linear(16, 1)

            def forward(self, x):
                return self.head(self.drop(torch.tanh(self.inner(x))))

        def build():
            return Net()
    """))  # fmt: skip
    monkeypatch.syspath_prepend(str(tmp_path))
    from mynets import build

    m = bayesify.MCDropout(build()).fit((x, y), val=(x, y), epochs=3, progress=False)
    m.save(tmp_path / "custom")
    result = runner.invoke(app, ["predict", str(tmp_path / "custom"), str(tmp_path / "rows.csv"),
                                 "--out", str(tmp_path / "c.csv")])  # fmt: skip
    assert result.exit_code == 2
    assert "holds mynets.Net" in _said(result) and "--net package.module:factory" in _said(result)
    _run(["predict", tmp_path / "custom", tmp_path / "rows.csv", "--out", tmp_path / "c.csv",
          "--net", "mynets:build", "--seed", 1, "--samples", 20])  # fmt: skip
    ref = m.predict(x[:25], samples=20, seed=1)
    np.testing.assert_allclose(pd.read_csv(tmp_path / "c.csv")["mean"], ref.mean, rtol=1e-5)


def test_image_preprocessing_maps_raw_pixels_like_the_loader():
    from bayesify.app.jobs import image_preprocessing
    from bayesify.data import load_fashion_mnist

    try:
        raw = load_fashion_mnist("test", normalize=False, limit=8)
        norm = load_fashion_mnist("test", limit=8)
    except DataError as e:
        pytest.skip(f"shared data not found: {e}")
    pixels = (raw.x * 255).round().numpy()  # what a user has: 0..255
    prep = image_preprocessing()
    torch.testing.assert_close(prep.inputs(pixels), norm.x, atol=1e-5, rtol=1e-5)
    flat = pixels.reshape(8, -1)  # rows of 784 pixels from a table
    torch.testing.assert_close(prep.inputs(flat), norm.x, atol=1e-5, rtol=1e-5)


def test_image_bundle_predicts_an_npz_of_raw_pixels(tmp_path):
    """An image bundle reads raw 0..255 pixels [N, 1, 28, 28] from .npz and names its classes."""
    from bayesify.app.jobs import image_preprocessing
    from bayesify.models import lenet

    torch.manual_seed(0)
    m = bayesify.MCDropout(lenet(dropout=0.2), task="classification")
    m.preprocessing = image_preprocessing()
    m.save(tmp_path / "img")
    pixels = np.random.default_rng(0).integers(0, 256, size=(6, 1, 28, 28)).astype(np.uint8)
    np.savez(tmp_path / "images.npz", x=pixels)
    _run(["predict", tmp_path / "img", tmp_path / "images.npz", "--out", tmp_path / "p.npz",
          "--samples", 8, "--seed", 0])  # fmt: skip
    with np.load(tmp_path / "p.npz") as z:
        labels, p0 = z["label"], z[f"p_{m.preprocessing.class_names[0]}"]
    ref = bayesify.load(tmp_path / "img").predict(pixels, samples=8, seed=0)
    names = np.array(m.preprocessing.class_names)
    assert list(labels) == list(names[ref.mean.argmax(-1).numpy()])
    np.testing.assert_allclose(p0, ref.mean[:, 0].double(), rtol=1e-5)
