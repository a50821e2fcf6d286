"""A real ``bayesify serve`` process on a free loopback port, one per test module, serving a
small MC dropout classifier (trained in about a second) with a deferral policy."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bayesify.bench.process import ServerProcess
from bayesify.bench.process import start_server as _start

CLASSES = ["low", "mid", "high"]
API_KEY = "test-key-123"


def toy_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = torch.bucketize(x[:, 0] + 0.5 * x[:, 1] + 0.3 * torch.randn(n, generator=g),
                        torch.tensor([-0.5, 0.5]))  # fmt: skip
    return x, y


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


def start_server(bundle: Path, log: Path, *args: str, env: dict | None = None,
                 wait: bool = True) -> ServerProcess:  # fmt: skip
    return _start(bundle, log, "--threads", "1", *args, name="toy", env=env, wait=wait)


def stop_server(server: ServerProcess) -> int:
    return server.stop()


@pytest.fixture(scope="session")
def toy_bundle(tmp_path_factory) -> Path:
    return make_bundle(tmp_path_factory.mktemp("bundle") / "toy")


@pytest.fixture(scope="module")
def server(toy_bundle, tmp_path_factory):
    srv = start_server(toy_bundle, tmp_path_factory.mktemp("log") / "server.log",
                       "--samples", "16", "--batch-wait-ms", "2")  # fmt: skip
    yield srv
    stop_server(srv)
