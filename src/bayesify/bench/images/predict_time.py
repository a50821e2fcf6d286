"""Predict time per 1,000 rows of an images row's method, beside the deterministic network of
the same model timed in the same job.

After scoring, each job times the method's ``predict`` with the job's T samples and an
untrained :class:`~bayesify.methods.Deterministic` network of the same model (batch-norm
LeNet / ResNet, its time does not depend on the weights) with one sample, on ``ROWS`` test
images: one untimed warm-up each, then ``ROUNDS`` rounds in a rotating order, each keeping its
median (:func:`bayesify.bench.uci.predict_time.median_seconds`), so load on a shared machine
hits both alike. The milliseconds are scaled to 1,000 rows.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from bayesify.bench.uci.predict_time import median_seconds, thousand_rows

ROWS, ROUNDS = 500, 3


def predict_times(
    predict: Callable[[torch.Tensor], Any], deterministic: Any, x: torch.Tensor, seed: int
) -> dict[str, float]:
    """Milliseconds per 1,000 rows of ``predict(x)`` (the method with its T samples) and of
    ``deterministic.predict(x, samples=1)``, timed interleaved on ``x [N, ...]`` repeated or cut
    to ``ROWS`` rows; and their ratio."""
    x = thousand_rows(x, ROWS)

    def plain() -> None:
        deterministic.predict(x, samples=1, seed=seed)

    with warnings.catch_warnings():  # the untrained net's warnings (spread, τ) do not matter
        warnings.simplefilter("ignore")
        secs = median_seconds({"method": lambda: predict(x), "deterministic": plain}, ROUNDS)
    scale = 1e3 * 1000 / len(x)
    ms, det = scale * secs["method"], scale * secs["deterministic"]
    return {"timed_ms_per_1000": ms, "det_ms_per_1000": det, "time_ratio": ms / det}
