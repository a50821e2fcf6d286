"""Serving latency and throughput: a bounded closed-loop load on a real bayesify serve process.

For each configuration (fixed T or adaptive sampling; micro-batching on or off; float32 or int8)
a server process is started on loopback and C clients each send single-image ``/v1/predict``
requests back to back (async httpx) until ``requests`` are answered; p50/p95/p99 latency and
throughput are reported side by side. Offline on test images: the samples adaptive sampling uses
against the fixed T that reaches the tolerance on every row, and float32 against int8 (latency
of one pass, error, NLL, ECE). The bundle is a Fashion-MNIST LeNet, trained here when
``--bundle`` is not given, so the command is self-contained: MC dropout with p = 0.5 before the
last linear layer by default (its convolutions run once per image, not once per sample), or
``--method mcbn`` (batch norm after every layer: every sample runs the whole network).

    bayesify bench serve
    bayesify bench serve --method mcbn --out benchmarks/serve_mcbn.md
"""

from __future__ import annotations

import asyncio
import logging
import os
import platform
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from bayesify.bench.options import command_line, option, write_report

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeBenchOptions:
    """Options of ``bayesify bench serve``."""

    command: ClassVar[str] = "serve"
    bundle: str = option("", "Fashion-MNIST bundle; empty: train one (--method, --limit).")
    method: str = option("mc-dropout", "Method of the bundle trained when --bundle is empty.")
    dropout: float = option(
        0.5,
        "Dropout rate of that bundle when it is MC dropout (before the last linear layer, "
        "Gal & Ghahramani's LeNet-ip).",
    )
    limit: int = option(10000, "Training images of that bundle.")
    epochs: int = option(3, "Epochs of that bundle.")
    clients: tuple[int, ...] = option((1, 8), "Concurrent clients, comma-separated.")
    requests: int = option(200, "Requests per configuration and client count.")
    samples: int = option(32, "Fixed T.")
    tol: float = option(0.03, "Adaptive sampling: MC standard error tolerance.")
    start: int = option(8, "Adaptive sampling: first T.")
    max_samples: int = option(32, "Adaptive sampling: most T.")
    batch_wait_ms: float = option(2.0, "Micro-batching wait.")
    int8: bool = option(True, "Also serve and score the int8 model.")
    test_rows: int = option(500, "Test images for the offline adaptive and int8 figures.")
    threads: int = option(2, "torch threads of the server.")
    out: str = option("benchmarks/serve.md", "Markdown report.")


@dataclass
class LoadResult:
    latencies: list[float] = field(default_factory=list)
    wall: float = 0.0
    samples_used: list[int] = field(default_factory=list)
    errors: int = 0

    def row(self) -> list[str]:
        lat = np.asarray(self.latencies) * 1000
        q = [f"{np.percentile(lat, p):.1f}" for p in (50, 95, 99)] if len(lat) else ["–"] * 3
        used = f"{statistics.mean(self.samples_used):.1f}" if self.samples_used else "–"
        return [*q, f"{len(lat) / self.wall:.1f}", used, str(self.errors)]


async def closed_loop(url: str, bodies: list[dict], clients: int, requests: int) -> LoadResult:
    """``clients`` workers send requests back to back until ``requests`` are answered. Bodies
    are JSON-encoded once, up front: the clients share the server's cores, and encoding 784
    numbers per request would be client work charged to the server's latency."""
    import gc
    import json

    import httpx

    encoded = [json.dumps(b).encode() for b in bodies]
    # the benchmark process holds torch and the bundle: a full collection of that heap in the
    # middle of the load pauses every client at once (~100 ms), which is not the server's time
    gc.collect()
    gc.freeze()
    headers = {"content-type": "application/json"}
    res = LoadResult()
    counter = iter(range(requests))
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:

        async def worker() -> None:
            for i in counter:
                t = time.perf_counter()
                r = await client.post("/v1/predict", content=encoded[i % len(encoded)],
                                      headers=headers)  # fmt: skip
                res.latencies.append(time.perf_counter() - t)
                if r.status_code != 200:
                    res.errors += 1
                    continue
                res.samples_used += [p["samples_used"] for p in r.json()["predictions"]]

        start = time.perf_counter()
        await asyncio.gather(*[worker() for _ in range(clients)])
        res.wall = time.perf_counter() - start
    return res


def _bundle(opts: ServeBenchOptions, workdir: Path) -> Path:
    """The bundle to serve: ``--bundle``, or one trained here with ``bayesify train``."""
    if opts.bundle:
        return Path(opts.bundle)
    import subprocess

    from bayesify.bench.process import cli_path

    out = workdir / "bundle"
    cmd = [cli_path(), "train", "--method", opts.method, "--data", "fashion-mnist",
           "--limit", str(opts.limit), "--epochs", str(opts.epochs), "--no-eval",
           "--out", str(out)]  # fmt: skip
    if opts.method == "mc-dropout":
        cmd += ["--dropout", str(opts.dropout)]
    log.info("training the bundle: %s", " ".join(cmd))
    subprocess.run(cmd, check=True, capture_output=True)
    return out


def _request_bodies(bundle: Path, n: int = 64) -> list[dict]:
    """Single-image requests in the units the bundle reads (raw pixels with preprocessing)."""
    from bayesify.data import load_fashion_mnist
    from bayesify.methods import load

    raw = load_fashion_mnist("test", normalize=False).x[:n] * 255.0
    if load(bundle).preprocessing is None:
        raw = load_fashion_mnist("test").x[:n]
    return [{"inputs": [x.tolist()]} for x in raw]


def _serve_configs(opts: ServeBenchOptions) -> list[tuple[str, list[str]]]:
    fixed = ["--samples", str(opts.samples)]
    adaptive = ["--adaptive-tol", str(opts.tol), "--adaptive-start", str(opts.start),
                "--adaptive-max", str(opts.max_samples)]  # fmt: skip
    on = ["--batch-wait-ms", str(opts.batch_wait_ms), "--batch-rows", "64"]
    off = ["--batch-rows", "0"]
    configs = [
        (f"fixed T = {opts.samples}, batching on", fixed + on),
        (f"fixed T = {opts.samples}, batching off", fixed + off),
        (f"adaptive {opts.start}-{opts.max_samples}, tol {opts.tol}, batching on", adaptive + on),
        (f"adaptive {opts.start}-{opts.max_samples}, tol {opts.tol}, batching off",
         adaptive + off),
    ]  # fmt: skip
    if opts.int8:
        configs.append((f"int8, fixed T = {opts.samples}, batching on", [*fixed, *on, "--int8"]))
    return configs


def _offline(opts: ServeBenchOptions, bundle: Path) -> list[str]:
    """Adaptive samples against the fixed T reaching the tolerance; float32 against int8."""
    from bayesify.data import load_fashion_mnist
    from bayesify.methods import load
    from bayesify.methods.adaptive import predict_adaptive, standard_error
    from bayesify.methods.quantize import quantize_int8
    from bayesify.metrics import error_rate, expected_calibration_error, nll

    torch.set_num_threads(opts.threads)
    test = load_fashion_mnist("test").subset(opts.test_rows, seed=0)
    m = load(bundle)
    lines = ["## Adaptive sampling against fixed T (offline, test images)", ""]
    pred = predict_adaptive(m, test.x, tol=opts.tol, start=opts.start,
                            max_samples=opts.max_samples, seed=0)  # fmt: skip
    used = pred.samples_used.double()
    big = 4 * opts.max_samples
    out = m.sample(test.x, big, seed=1)
    grid = [opts.start * 2**k for k in range(10) if opts.start * 2**k <= big]
    reach = {t: float((standard_error(m.to_predictive(out[:t])) <= opts.tol).double().mean())
             for t in grid}  # fmt: skip
    everywhere = next((t for t in grid if reach[t] == 1.0), None)
    lines += [
        f"Tolerance {opts.tol} on the MC standard error of the class probabilities, "
        f"{opts.test_rows} test images. Adaptive ({opts.start} to {opts.max_samples}): "
        f"mean {used.mean():.1f} samples per row (median {used.median():.0f}); rows at each "
        "T: " + ", ".join(f"{int(t)}: {int((used == t).sum())}" for t in sorted(set(used.tolist())))
        + ".", "",
        "| fixed T | rows within tolerance |", "|---:|---:|",
        *[f"| {t} | {100 * reach[t]:.1f} % |" for t in grid], "",
        "Fixed T reaching the tolerance on every row: "
        + (f"**{everywhere}**" if everywhere else f"none up to {big}") + f"; adaptive mean "
        f"**{used.mean():.1f}** (capped at {opts.max_samples}, so rows still above the "
        f"tolerance at {opts.max_samples} stop there).", "",
    ]  # fmt: skip
    if not opts.int8:
        return lines
    lines += [
        "## int8 against float32 (offline, test images)", "",
        f"T = {opts.samples}; latency: median of 10 passes over 8 images x T samples.", "",
        "| model | pass latency (ms) | error | NLL | ECE |", "|---|---:|---:|---:|---:|",
    ]  # fmt: skip
    for label in ("float32", "int8"):
        if label == "int8":
            quantize_int8(m)
        p = m.to_predictive(m.sample(test.x, opts.samples, seed=2)).mean
        times = []
        for _ in range(10):
            t = time.perf_counter()
            m.sample(test.x[:8], opts.samples, seed=3)
            times.append(time.perf_counter() - t)
        lines.append(f"| {m.name} {label} | {1000 * statistics.median(times):.1f} | "
                     f"{error_rate(p, test.y):.4f} | {nll(p, test.y):.4f} | "
                     f"{expected_calibration_error(p, test.y):.4f} |")  # fmt: skip
    return [*lines, ""]


def run(opts: ServeBenchOptions) -> str:
    """Train or take the bundle, load every configuration, write the report; returns it."""
    from bayesify.bench.process import start_server

    began = time.time()
    load_avg = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bayesify-bench-serve-") as tmp:
        workdir = Path(tmp)
        bundle = _bundle(opts, workdir)
        bodies = _request_bodies(bundle)
        rows = []
        for label, args in _serve_configs(opts):
            server = start_server(bundle, workdir / "server.log", "--threads", str(opts.threads),
                                  "--max-samples", str(max(opts.samples, opts.max_samples)),
                                  *args, name="fmnist")  # fmt: skip
            try:
                asyncio.run(closed_loop(server.url, bodies, 1, 10))  # warm-up
                for c in opts.clients:
                    res = asyncio.run(closed_loop(server.url, bodies, c, opts.requests))
                    log.info("%s, %d clients: %s", label, c, res.row())
                    rows.append(f"| {label} | {c} | " + " | ".join(res.row()) + " |")
            finally:
                server.stop()
        offline = _offline(opts, bundle)
    text = "\n".join([
        "# Serving: latency and throughput of `bayesify serve`", "",
        f"Command: `{command_line(opts)}`  ", f"Bundle: `{opts.bundle or 'trained here'}`  ",
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs, torch "
        f"{torch.__version__}, server threads {opts.threads}; load average at start "
        f"{load_avg[0]:.1f} / {load_avg[1]:.1f} / {load_avg[2]:.1f} (1/5/15 min); the clients "
        "run in the benchmark process on the same machine.  ",
        f"Run took {time.time() - began:.0f} s.", "",
        "## Closed-loop load, single-image `/v1/predict` requests", "",
        f"{opts.requests} requests per row after 10 warm-up requests; each client sends its "
        "next request when the previous one is answered.", "",
        "| configuration | clients | p50 (ms) | p95 (ms) | p99 (ms) | requests/s | "
        "mean samples | errors |", "|---|---:|---:|---:|---:|---:|---:|---:|",
        *rows, "", *offline,
    ])  # fmt: skip
    return write_report(opts.out, text)
