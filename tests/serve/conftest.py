"""A real ``bayesify serve`` process on a free loopback port, one per test module, serving a
small MC dropout classifier (trained in about a second) with a deferral policy."""

from __future__ import annotations

from pathlib import Path

import httpx
import pandas as pd
import pytest
import torch

from bayesify.bench.process import ServerProcess
from bayesify.bench.process import start_server as _start

CLASSES = ["low", "mid", "high"]
#: the columns of :func:`toy_table`
FEATURES = ["a", "b", "c", "d"]
API_KEY = "test-key-123"


def toy_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = torch.bucketize(x[:, 0] + 0.5 * x[:, 1] + 0.3 * torch.randn(n, generator=g),
                        torch.tensor([-0.5, 0.5]))  # fmt: skip
    return x, y


def toy_table(path: Path, n: int, seed: int) -> Path:
    """:func:`toy_data` as a CSV file: the :data:`FEATURES` and the class name in ``grade``."""
    import pandas as pd

    x, y = toy_data(n, seed)
    frame = pd.DataFrame(x.numpy(), columns=FEATURES)
    frame["grade"] = [CLASSES[int(i)] for i in y]
    frame.to_csv(path, index=False)
    return path


def invoke_ok(args: list) -> object:
    """``bayesify ARGS`` in this process; it must exit 0."""
    from typer.testing import CliRunner

    from bayesify.cli import app

    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def make_bundle(path: Path, classes: list[str] = CLASSES, seed: int = 0) -> Path:
    """MC dropout MLP on a 3-class toy problem, with a deferral policy on MI at 80 % coverage
    (``classes``: the names of the classes; ``seed``: of the initial weights)."""
    from bayesify.data.preprocessing import Preprocessing
    from bayesify.methods import MCDropout
    from bayesify.models import mlp
    from bayesify.posthoc.deferral import DeferralPolicy

    torch.manual_seed(seed)
    method = MCDropout(mlp(4, 3, (32,), norm=None, dropout=0.2), task="classification")
    method.fit(toy_data(600, 0), epochs=15, batch_size=64, lr=1e-2, progress=False)
    method.preprocessing = Preprocessing(input_shape=[4], class_names=list(classes))
    xv, yv = toy_data(400, 1)
    pred = method.to_predictive(method.sample(xv, 16, seed=0))
    DeferralPolicy.fit(pred, yv, score="mi", target_coverage=0.8).store(method.metadata)
    method.save(path)
    return path


def regression_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Three features; a target around 100 in its own units."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    return x, 100 + 8 * x[:, 0] - 4 * x[:, 1] + 3 * torch.randn(n, generator=g)


def make_regression_bundle(path: Path) -> Path:
    """MC dropout MLP regression trained on standardised targets (preprocessing maps back to
    the target's units), with a deferral policy on std at 80 % coverage and the training
    targets' range recorded as table training records it."""
    from bayesify.data.preprocessing import Preprocessing
    from bayesify.methods import MCDropout
    from bayesify.models import mlp
    from bayesify.posthoc.deferral import DeferralPolicy

    torch.manual_seed(0)
    x, y = regression_data(500, 0)
    yt = (y - 100.0) / 9.0
    method = MCDropout(mlp(3, 1, (32,), norm=None, dropout=0.2), task="regression")
    method.fit((x[:400], yt[:400]), val=(x[400:], yt[400:]), epochs=10, lr=1e-2,
               progress=False)  # fmt: skip
    method.preprocessing = Preprocessing(input_shape=[3], y_mean=100.0, y_std=9.0)
    xv, yv = regression_data(300, 1)
    pred = method.preprocessing.outputs(method.to_predictive(method.sample(xv, 16, seed=0)))
    DeferralPolicy.fit(pred, yv, score="std", target_coverage=0.8).store(method.metadata)
    method.metadata["target_range"] = [float(y[:400].min()), float(y[:400].max())]
    method.save(path)
    return path


def start_server(bundle: Path, log: Path, *args: str, env: dict | None = None,
                 wait: bool = True) -> ServerProcess:  # fmt: skip
    return _start(bundle, log, "--threads", "1", *args, name="toy", env=env, wait=wait)


def stop_server(server: ServerProcess) -> int:
    return server.stop()


@pytest.fixture(scope="session")
def toy_bundle(tmp_path_factory) -> Path:
    return make_bundle(tmp_path_factory.mktemp("bundle") / "toy")


@pytest.fixture(scope="session")
def regression_bundle(tmp_path_factory) -> Path:
    return make_regression_bundle(tmp_path_factory.mktemp("bundle") / "reg")


@pytest.fixture(scope="module")
def server(toy_bundle, tmp_path_factory):
    srv = start_server(toy_bundle, tmp_path_factory.mktemp("log") / "server.log",
                       "--samples", "16", "--batch-wait-ms", "2")  # fmt: skip
    yield srv
    stop_server(srv)


def train_calibrated(tmp: Path, method: str, samples: int, *options: str) -> Path:
    """A classification bundle of ``method`` trained on the toy table by ``bayesify train``
    (``options``: ``--option k=v`` pairs and the like), then ``bayesify calibrate``d for
    deferral at 0.8 coverage and conformal sets at ``samples`` samples; its folder."""
    out = tmp / "bundle"
    invoke_ok(["train", "--method", method, "--data", toy_table(tmp / "train.csv", 400, 0),
               "--target", "grade", "--hidden", "16", "--epochs", "5", "--lr", "0.01",
               *options, "--out", out, "--no-eval"])  # fmt: skip
    invoke_ok(["calibrate", out, "--data", toy_table(tmp / "val.csv", 300, 1), "--coverage", "0.8",
               "--conformal", "--samples", str(samples)])  # fmt: skip
    return out


def predict_file_ok(bundle: Path, tmp: Path, samples: int) -> tuple[Path, pd.DataFrame]:
    """``bayesify predict`` on 40 fresh toy rows: every row a label, deferral flags that split
    the rows, conformal set columns and better than chance labels; (rows file, predictions)."""
    rows = toy_table(tmp / "rows.csv", 40, 2)
    out = tmp / "pred.csv"
    invoke_ok(["predict", bundle, rows, "--out", out, "--samples", str(samples),
               "--no-progress"])  # fmt: skip
    pred = pd.read_csv(out)
    assert len(pred) == 40 and set(pred["label"]) <= set(CLASSES)
    assert pred["defer"].dtype == bool and 0 < pred["defer"].mean() < 1
    assert [c for c in pred.columns if "set" in c], list(pred.columns)
    assert (pred["label"] == pd.read_csv(rows)["grade"]).mean() > 0.6
    return rows, pred


def served_predictions(bundle: Path, log: Path, serve_samples: int,
                       **body: object) -> tuple[list[list[float]], list[dict]]:  # fmt: skip
    """Six toy rows sent to a real ``bayesify serve --samples serve_samples`` process as one
    ``/v1/predict`` request (``body``: more request fields); (the rows, their predictions)."""
    rows = toy_data(6, 3)[0].tolist()
    server = start_server(bundle, log, "--samples", str(serve_samples))
    try:
        inputs = [dict(zip(FEATURES, r, strict=True)) for r in rows]
        r = httpx.post(f"{server.url}/v1/predict", json={"inputs": inputs, **body})
        assert r.status_code == 200, r.text
        return rows, r.json()["predictions"]
    finally:
        stop_server(server)


def feedback_round(url: str, name: str, seed: int) -> None:
    """One request of 40 rows to ``name`` and its outcomes: one history snapshot more."""
    x, y = toy_data(40, seed)
    preds = httpx.post(f"{url}/v1/predict", json={"inputs": x.tolist(), "model": name}).json()
    outcomes = [{"request_id": p["request_id"], "outcome": int(t)}
                for p, t in zip(preds["predictions"], y, strict=True)]  # fmt: skip
    assert httpx.post(f"{url}/v1/feedback", json={"outcomes": outcomes, "model": name}).is_success
