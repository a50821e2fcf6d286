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
    bayesify bench serve --workers 1,2 --clients 8,32 --repeats 3 --sampling fixed \
        --batching on --no-int8 --no-offline

With ``--workers 1,2`` every configuration is served by one and by two worker processes
(``bayesify serve --workers``); with ``--repeats R`` the rows are run R times, round after
round (each round starts every server afresh, in the same order), and the table shows each
figure's median over the rounds beside every round's requests/s.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import platform
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from bayesify.bench.options import command_line, option, write_report
from bayesify.bench.serve.http_load import LoadResult, closed_loop, post_request, samples_used

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeBenchOptions:
    """Options of ``bayesify bench serve``."""

    command: ClassVar[str] = "serve"
    bundle: str = option("", "Fashion-MNIST bundle; empty: train one (--method, --limit).")
    student: str = option(
        "",
        "A second bundle, e.g. the bundle's distilled student (bayesify distill), served under "
        "every configuration right after it, rows side by side.",
    )
    method: str = option("mc-dropout", "Method of the bundle trained when --bundle is empty.")
    dropout: float = option(
        0.5,
        "Dropout rate of that bundle when it is MC dropout (before the last linear layer, "
        "Gal & Ghahramani's LeNet-ip).",
    )
    limit: int = option(10000, "Training images of that bundle.")
    epochs: int = option(3, "Epochs of that bundle.")
    clients: tuple[int, ...] = option((1, 8), "Concurrent clients, comma-separated.")
    workers: tuple[int, ...] = option(
        (1,), "Server worker processes (bayesify serve --workers), comma-separated."
    )
    repeats: int = option(1, "Rounds of every row; the table shows medians over the rounds.")
    sampling: tuple[str, ...] = option(("fixed", "adaptive"), "Sampling served: fixed, adaptive.")
    batching: tuple[str, ...] = option(("on", "off"), "Micro-batching served: on, off.")
    requests: int = option(200, "Requests per configuration and client count.")
    samples: int = option(32, "Fixed T.")
    tol: float = option(0.03, "Adaptive sampling: MC standard error tolerance.")
    start: int = option(8, "Adaptive sampling: first T.")
    max_samples: int = option(32, "Adaptive sampling: most T.")
    batch_wait_ms: float = option(2.0, "Micro-batching wait.")
    int8: bool = option(True, "Also serve and score the int8 model.")
    offline: bool = option(True, "Also the offline sections (adaptive samples; int8 figures).")
    test_rows: int = option(500, "Test images for the offline adaptive and int8 figures.")
    threads: int = option(2, "torch threads of the server.")
    out: str = option("benchmarks/serve.md", "Markdown report.")


@dataclass
class _Run:
    """One closed-loop run's figures (ms, requests/s, CPU ms per request)."""

    p50: float
    p95: float
    p99: float
    rate: float
    mean_used: float | None
    errors: int
    server_cpu: float | None
    client_cpu: float
    per_worker: str = ""


def _measure(res: LoadResult, server_cpu: float | None, per_worker: str) -> _Run:
    lat = np.asarray(res.latencies) * 1000
    p50, p95, p99 = (float(np.percentile(lat, p)) if len(lat) else math.nan for p in (50, 95, 99))
    used = [u for rows in res.inspected for u in rows]
    n = max(res.answered, 1)
    return _Run(p50, p95, p99, res.answered / res.wall, statistics.mean(used) if used else None,
                res.errors, 1000 * server_cpu / n if server_cpu is not None else None,
                1000 * res.client_cpu / n, per_worker)  # fmt: skip


def _cells(runs: list[_Run], spread: bool) -> list[str]:
    """A row's cells: each figure's median over its runs (every run's requests/s beside, when
    there are several; with ``spread``, how the last run's requests went to the workers)."""

    def median(values: list[float | None], digits: int) -> str:
        known = [v for v in values if v is not None and math.isfinite(v)]
        return f"{statistics.median(known):.{digits}f}" if known else "–"

    cells = [median([getattr(r, k) for r in runs], 1) for k in ("p50", "p95", "p99", "rate")]
    cells += [
        median([r.mean_used for r in runs], 1),
        str(sum(r.errors for r in runs)),
        median([r.server_cpu for r in runs], 1),
        median([r.client_cpu for r in runs], 2),
    ]
    if len(runs) > 1:
        cells.append(" / ".join(f"{r.rate:.1f}" for r in runs))
    return [*cells, runs[-1].per_worker or "–"] if spread else cells


def _process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) a process and its children have used so far (a server of
    several workers: the parent and every worker); None where /proc is absent."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + sum(_process_cpu(int(c)) or 0.0 for c in children)


def _worker_requests(url: str) -> dict[str, float]:
    """Requests answered per worker so far (``bayesify_worker_requests``; empty for one)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics", timeout=30).text
    return {s.labels["worker"]: s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == "bayesify_worker_requests_total"}  # fmt: skip


def _load(url: str, pid: int, raw: list[bytes], clients: int, total: int) -> _Run:
    """One closed-loop run."""
    before, spread = _process_cpu(pid), _worker_requests(url)
    res = asyncio.run(closed_loop(url, raw, clients, total, inspect=samples_used))
    after, then = _process_cpu(pid), _worker_requests(url)
    per_worker = "/".join(f"{then[w] - spread.get(w, 0.0):.0f}" for w in sorted(then))
    cpu = after - before if before is not None and after is not None else None
    return _measure(res, cpu, per_worker)


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
    """Single-image requests in the units the bundle reads: raw pixels, the integers 0..255
    of the image files, for a bundle with image preprocessing."""
    from bayesify.data import load_fashion_mnist
    from bayesify.methods import load

    if load(bundle).preprocessing is None:
        return [{"inputs": [x.tolist()]} for x in load_fashion_mnist("test").x[:n]]
    pixels = (load_fashion_mnist("test", normalize=False).x[:n] * 255.0).round().to(torch.int64)
    return [{"inputs": [x.tolist()]} for x in pixels]


def _serve_configs(opts: ServeBenchOptions) -> list[tuple[str, list[str]]]:
    fixed = ["--samples", str(opts.samples)]
    adaptive = ["--adaptive-tol", str(opts.tol), "--adaptive-start", str(opts.start),
                "--adaptive-max", str(opts.max_samples)]  # fmt: skip
    on = ["--batch-wait-ms", str(opts.batch_wait_ms), "--batch-rows", "64"]
    off = ["--batch-rows", "0"]
    sampling = {"fixed": (f"fixed T = {opts.samples}", fixed),
                "adaptive": (f"adaptive {opts.start}-{opts.max_samples}, tol {opts.tol}",
                             adaptive)}  # fmt: skip
    batching = {"on": on, "off": off}
    unknown = sorted(set(opts.sampling) - set(sampling)) + sorted(set(opts.batching) - {*batching})
    if unknown:
        raise ValueError(f"--sampling takes fixed, adaptive; --batching on, off: got {unknown}")
    configs = [(f"{label}, batching {b}", args + batching[b])
               for s, (label, args) in sampling.items() if s in opts.sampling
               for b in ("on", "off") if b in opts.batching]  # fmt: skip
    if opts.int8:
        configs.append((f"int8, fixed T = {opts.samples}, batching on", [*fixed, *on, "--int8"]))
    return [(f"{label}, {w} worker{'s' if w > 1 else ''}" if opts.workers != (1,) else label,
             [*args, "--workers", str(w)]) for label, args in configs
            for w in opts.workers]  # fmt: skip


def _offline(opts: ServeBenchOptions, bundle: Path) -> list[str]:
    """Adaptive samples against the fixed T reaching the tolerance; float32 against int8."""
    from bayesify.data import load_fashion_mnist
    from bayesify.methods import load
    from bayesify.methods.core.adaptive import predict_adaptive, standard_error
    from bayesify.methods.core.quantize import quantize_int8
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


def _serve_round(opts: ServeBenchOptions, path: Path, workdir: Path, label: str,
                 args: list[str], bodies: list[dict],
                 runs: dict[tuple[str, int], list[_Run]]) -> None:  # fmt: skip
    """Start one server, warm it up, run every client count on it, stop it."""
    from bayesify.bench.process import start_server

    server = start_server(path, workdir / "server.log", "--threads", str(opts.threads),
                          "--max-samples", str(max(opts.samples, opts.max_samples)), *args,
                          name="fmnist")  # fmt: skip
    try:
        if "--workers" in args and args[args.index("--workers") + 1] != "1":
            _wait_for_workers(server)
        raw = [post_request(server.url, "/v1/predict", json.dumps(b).encode()) for b in bodies]
        workers = int(args[args.index("--workers") + 1]) if "--workers" in args else 1
        # warm-up: 10 requests per worker, from enough connections to reach every worker
        asyncio.run(closed_loop(server.url, raw, 4 * workers, 10 * workers))
        for c in opts.clients:
            run = _load(server.url, server.process.pid, raw, c, opts.requests)
            log.info("%s, %d clients: %s", label, c, run)
            runs.setdefault((label, c), []).append(run)
    finally:
        server.stop()


def _wait_for_workers(server: Any, timeout: float = 300) -> None:
    """Until the server's parent logs that every worker is ready."""
    deadline = time.monotonic() + timeout
    while "workers serving on" not in server.output():
        if server.process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the server's workers did not start: {server.output()}")
        time.sleep(0.2)


def run(opts: ServeBenchOptions) -> str:
    """Train or take the bundle, load every configuration, write the report; returns it."""
    began = time.time()
    load_avg = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bayesify-bench-serve-") as tmp:
        workdir = Path(tmp)
        bundle = _bundle(opts, workdir)
        bodies = _request_bodies(bundle)
        served = [("", bundle)]
        if opts.student:
            served = [("teacher: ", bundle), ("student: ", Path(opts.student))]
        runs: dict[tuple[str, int], list[_Run]] = {}
        for _ in range(opts.repeats):  # round after round: every row once per round
            for config, args in _serve_configs(opts):
                for who, path in served:  # teacher and student under the same load, in turn
                    _serve_round(opts, path, workdir, who + config, args, bodies, runs)
        spread = max(opts.workers) > 1
        rows = [f"| {label} | {c} | " + " | ".join(_cells(r, spread)) + " |"
                for (label, c), r in runs.items()]  # fmt: skip
        offline = _offline(opts, bundle) if opts.offline else []
    text = "\n".join([
        "# Serving: latency and throughput of `bayesify serve`", "",
        f"Command: `{command_line(opts)}`  ", f"Bundle: `{opts.bundle or 'trained here'}`  ",
        *([f"Student: `{opts.student}` (its rows are labelled student)  "] if opts.student else []),
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs, torch "
        f"{torch.__version__}, server threads {opts.threads}; load average at start "
        f"{load_avg[0]:.1f} / {load_avg[1]:.1f} / {load_avg[2]:.1f} (1/5/15 min); the clients "
        "run in the benchmark process on the same machine (keep-alive connections, requests "
        "encoded once, answers parsed by httptools: `bayesify.bench.serve.http_load`).  ",
        f"Run took {time.time() - began:.0f} s.", "",
        "## Closed-loop load, single-image `/v1/predict` requests", "",
        f"{opts.requests} requests per row after 10 warm-up requests per worker; each client "
        "sends its next request when the previous one is answered. Server and client CPU: CPU "
        "time (user + system) of the server's processes and of the load generator during the "
        "row, per answered request; the two share the machine's cores."
        + (f" {opts.repeats} rounds: each round starts every server afresh and runs every row "
           "once, in the table's order; figures are medians over the rounds (errors: their "
           "sum)." if opts.repeats > 1 else "")
        + (" Per worker: the requests each worker answered in the row's last run "
           "(`bayesify_worker_requests`; they include the one `/metrics` request read before "
           "the run)." if spread else ""), "",
        "| configuration | clients | p50 (ms) | p95 (ms) | p99 (ms) | requests/s | "
        "mean samples | errors | server CPU (ms/req) | client CPU (ms/req) |"
        + (" requests/s of each round |" if opts.repeats > 1 else "")
        + (" per worker |" if spread else ""),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        + ("---|" if opts.repeats > 1 else "") + ("---|" if spread else ""),
        *rows, "", *offline,
    ])  # fmt: skip
    return write_report(opts.out, text)
