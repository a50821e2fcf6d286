"""Predict time per 1,000 rows of a UCI row's fitted method, beside the deterministic network
timed in the same job.

Each job of :func:`~bayesify.bench.uci.gal_methods.score_method_job` times, after scoring, the
fitted method's ``predict`` on 1,000 rows (its test rows repeated) with the job's T samples, and
the deterministic network of the same shape (Gal's one-hidden-layer MLP, batch norm for MCBN)
through :class:`~bayesify.methods.Deterministic`'s ``predict`` with one sample: the same call,
the same input checks and ``Predictive``. The two run interleaved, ``ROUNDS`` times after one
untimed warm-up each, and each keeps its median, so load on a shared machine hits both alike.
Rows scored before this was stored have no timings; :mod:`predict_time_page`'s table lists
those that have.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

ROWS = 1_000
ROUNDS = 5


def thousand_rows(x: torch.Tensor, rows: int = ROWS) -> torch.Tensor:
    """``x [N, D]`` repeated in order to exactly ``rows`` rows ``[rows, D]``."""
    reps = -(-rows // len(x))
    return x.repeat(reps, *([1] * (x.dim() - 1)))[:rows]


def median_seconds(fns: dict[str, Callable[[], Any]], rounds: int = ROUNDS) -> dict[str, float]:
    """Median wall seconds per call of each function: one untimed warm-up each, then
    ``rounds`` rounds in a rotating order (so machine noise hits them alike)."""
    keys = list(fns)
    for k in keys:
        fns[k]()
    times: dict[str, list[float]] = {k: [] for k in keys}
    for r in range(rounds):
        s = r % len(keys)
        for k in keys[s:] + keys[:s]:
            t0 = time.perf_counter()
            fns[k]()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def deterministic_net(job: Any, n_features: int) -> Any:
    """The deterministic network the job's method wraps, as a method: Gal's MLP of the job's
    width and output count (batch norm for MCBN), untrained (its time does not depend on the
    weights), its noise variance set so that its ``predict`` warns of none (a warning each
    call would be timed with it)."""
    from bayesify.methods import Deterministic
    from bayesify.models import mlp

    out = 2 if job.likelihood == "heteroscedastic" else 1
    norm = "batch" if job.method == "mcbn" else None
    det = Deterministic(mlp(n_features, out, (job.hidden,), norm=norm), likelihood=job.likelihood)
    det.noise_variance = 1.0
    return det


def predict_times(method: Any, job: Any, x_test: torch.Tensor) -> dict[str, Any]:
    """Milliseconds per 1,000 rows of ``method.predict`` (``job.samples`` samples) and of the
    deterministic network's (one sample), timed side by side on ``x_test`` repeated to 1,000
    rows; the samples the method drew."""
    x = thousand_rows(x_test)
    det = deterministic_net(job, x.shape[1])
    drawn: list[int] = []

    def ours() -> None:
        drawn[:] = [method.predict(x, samples=job.samples, seed=job.seed).num_samples]

    def plain() -> None:
        det.predict(x, samples=1, seed=job.seed)

    with warnings.catch_warnings():  # a method's spread warning is not this timing's concern
        warnings.simplefilter("ignore")
        secs = median_seconds({"method": ours, "deterministic": plain})
    scale = 1e3 * ROWS / len(x)
    return {"predict_ms_per_1000": scale * secs["method"],
            "det_predict_ms_per_1000": scale * secs["deterministic"],
            "predict_samples": drawn[0]}  # fmt: skip
