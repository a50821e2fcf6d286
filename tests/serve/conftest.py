"""A real ``bayesify serve`` process on a free loopback port, one per test module, serving a
small MC dropout classifier (trained in about a second) with a deferral policy."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import torch

CLASSES = ["low", "mid", "high"]
API_KEY = "test-key-123"


def toy_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = torch.bucketize(x[:, 0] + 0.5 * x[:, 1] + 0.3 * torch.randn(n, generator=g),
                        torch.tensor([-0.5, 0.5]))  # fmt: skip
    return x, y


def make_bundle(path: Path) -> Path:
    """MC dropout MLP on a 3-class toy problem, with a deferral policy on MI at 80 % coverage."""
    from bayesify.data.preprocessing import Preprocessing
    from bayesify.methods import MCDropout
    from bayesify.models import mlp
    from bayesify.posthoc.deferral import DeferralPolicy

    torch.manual_seed(0)
    method = MCDropout(mlp(4, 3, (32,), norm=None, dropout=0.2), task="classification")
    method.fit(toy_data(600, 0), epochs=15, batch_size=64, lr=1e-2, progress=False)
    method.preprocessing = Preprocessing(input_shape=[4], class_names=CLASSES)
    xv, yv = toy_data(400, 1)
    pred = method.to_predictive(method.sample(xv, 16, seed=0))
    DeferralPolicy.fit(pred, yv, score="mi", target_coverage=0.8).store(method.metadata)
    method.save(path)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    process: subprocess.Popen
    bundle: Path
    name: str
    log: Path

    def output(self) -> str:
        return self.log.read_text()


def start_server(bundle: Path, log: Path, *args: str, env: dict | None = None,
                 wait: bool = True) -> Server:  # fmt: skip
    port = free_port()
    cmd = [str(Path(sys.executable).parent / "bayesify"), "serve", str(bundle), "--name", "toy",
           "--port", str(port), "--threads", "1", *args]  # fmt: skip
    environ = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=environ)
    server = Server(f"http://127.0.0.1:{port}", proc, bundle, "toy", log)
    if wait:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited {proc.returncode}: {server.output()}")
            try:
                if httpx.get(f"{server.url}/v2/health/ready", timeout=1).status_code == 200:
                    return server
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        stop_server(server)
        raise RuntimeError(f"server did not become ready: {server.output()}")
    return server


def stop_server(server: Server) -> int:
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
        try:
            server.process.wait(30)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()
    return server.process.returncode


@pytest.fixture(scope="session")
def toy_bundle(tmp_path_factory) -> Path:
    return make_bundle(tmp_path_factory.mktemp("bundle") / "toy")


@pytest.fixture(scope="module")
def server(toy_bundle, tmp_path_factory):
    srv = start_server(toy_bundle, tmp_path_factory.mktemp("log") / "server.log",
                       "--samples", "16", "--batch-wait-ms", "2")  # fmt: skip
    yield srv
    stop_server(srv)
