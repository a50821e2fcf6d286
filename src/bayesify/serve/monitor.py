"""Calibration in production: what was served, scored against outcomes reported later.

Every served row is remembered by its row id (the most recent ``max_pending``): row ``i`` of the
request with id ``R`` is ``R-i`` (:meth:`Monitor.record_request`), and a one-row request can also
be named by ``R`` itself, so the id an Open Inference Protocol client gets back in the response
(or gave in its request) is enough for feedback. Feedback with the true outcome moves the row
into a rolling window of the last ``window`` scored rows. Over
the window: accuracy, NLL and ECE (classification) or RMSE and Gaussian NLL (regression), for
all rows and for the accepted (not deferred) rows, plus a reliability curve. When a figure
drifts past the deferral policy's validation figure (by ``tolerance``, relative, and with at
least ``min_count`` rows scored) a warning is logged once, and again only after it recovers.
Latencies of recent requests give percentiles for the status page.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bayesify import metrics

log = logging.getLogger(__name__)


class AmbiguousId(ValueError):
    """Feedback named a request of several rows rather than one row."""


@dataclass
class _Served:
    probs: np.ndarray | None  # [C] classification
    mean: float | None  # regression
    var: float | None
    defer: bool


class Monitor:
    """Rolling figures of served predictions; thread-safe. See the module docstring."""

    def __init__(
        self,
        task: str,
        class_names: list[str] | None = None,
        validation: dict[str, Any] | None = None,
        *,
        window: int = 1000,
        max_pending: int = 100_000,
        min_count: int = 50,
        tolerance: float = 0.25,
        latency_window: int = 2000,
    ) -> None:
        self.task = task
        self.class_names = class_names
        self.validation = validation or {}
        self.min_count, self.tolerance = min_count, tolerance
        self._pending: OrderedDict[str, _Served] = OrderedDict()
        self._requests: OrderedDict[str, int] = OrderedDict()  # request id -> its rows
        self._max_pending = max_pending
        self._scored: deque[tuple[_Served, float]] = deque(maxlen=window)
        self._latency: deque[float] = deque(maxlen=latency_window)
        self._lock = threading.Lock()
        self._drifting: set[str] = set()
        self.served = self.deferred = 0

    # ------------------------------------------------------------------ recording
    def record(self, request_id: str, record: dict[str, Any]) -> None:
        """Remember a served record (the predictor's fields) under its row id (a row id
        served again is replaced and counts as the newest)."""
        defer = bool(record.get("defer", False))
        if self.task == "classification":
            item = _Served(np.asarray(record["probabilities"], dtype=np.float64), None, None, defer)
        else:
            item = _Served(None, float(record["mean"]), float(record["std"]) ** 2, defer)
        with self._lock:
            self.served += 1
            self.deferred += defer
            self._pending.pop(request_id, None)
            self._pending[request_id] = item
            while len(self._pending) > self._max_pending:
                self._pending.popitem(last=False)

    def record_request(self, request_id: str, records: list[dict[str, Any]]) -> list[str]:
        """Remember the rows of one request as ``request_id-i``; returns the row ids. A one-row
        request is also found by ``request_id`` alone."""
        ids = [f"{request_id}-{i}" for i in range(len(records))]
        for row_id, rec in zip(ids, records, strict=True):
            self.record(row_id, rec)
        with self._lock:
            self._requests.pop(request_id, None)
            self._requests[request_id] = len(ids)
            while len(self._requests) > self._max_pending:
                self._requests.popitem(last=False)
        return ids

    def latency(self, seconds: float) -> None:
        with self._lock:
            self._latency.append(seconds)

    def outcome_value(self, outcome: Any) -> float:
        """An outcome as a number: a class index or name (classification), a finite number."""
        if self.task == "classification":
            if isinstance(outcome, str):
                if not self.class_names or outcome not in self.class_names:
                    raise ValueError(f"unknown class {outcome!r}; valid: {self.class_names}")
                return float(self.class_names.index(outcome))
            if isinstance(outcome, bool) or not isinstance(outcome, int):
                raise ValueError(f"a class index or name, got {outcome!r}")
            if outcome < 0 or (self.class_names and outcome >= len(self.class_names)):
                valid = f"0..{len(self.class_names) - 1}" if self.class_names else ">= 0"
                raise ValueError(f"class index must be in {valid}, got {outcome}")
        elif isinstance(outcome, bool) or not isinstance(outcome, int | float):
            raise ValueError(f"a number, got {outcome!r}")
        try:
            value = float(outcome)  # JSON integers may be beyond float64
        except OverflowError:
            value = math.inf
        if not math.isfinite(value):
            raise ValueError("not a finite number" if self.task != "classification"
                             else f"class index out of range, got {outcome}")  # fmt: skip
        return value

    def feedback(self, request_id: str, outcome: float) -> bool:
        """Score the served row ``request_id`` (a row id, or the id of a one-row request)
        against ``outcome``; False if unknown or expired. The id of a request of several rows
        is an :class:`AmbiguousId` error naming its row ids."""
        with self._lock:
            request_id = self._resolve(request_id)
            item = self._pending.pop(request_id, None)
            if item is None:
                return False
            if item.probs is not None and not 0 <= outcome < len(item.probs):
                self._pending[request_id] = item
                raise ValueError(f"class index must be in 0..{len(item.probs) - 1}, "
                                 f"got {int(outcome)}")  # fmt: skip
            self._scored.append((item, outcome))
        self._check_drift()
        return True

    def check_id(self, request_id: str) -> None:
        """An :class:`AmbiguousId` error if ``request_id`` names a request of several rows."""
        with self._lock:
            self._resolve(request_id)

    def _resolve(self, request_id: str) -> str:
        """The row id ``request_id`` names (the caller holds the lock)."""
        if request_id not in self._pending and request_id in self._requests:
            n = self._requests[request_id]
            if n > 1:
                raise AmbiguousId(f"request {request_id!r} had {n} rows; give a row id "
                                  f"({request_id}-0 .. {request_id}-{n - 1})")  # fmt: skip
            return f"{request_id}-0"
        return request_id

    # ------------------------------------------------------------------ figures
    def figures(self) -> dict[str, Any]:
        """Rolling figures for all and accepted rows, the deferral rate and latency quantiles."""
        with self._lock:
            scored = list(self._scored)
            lat = np.asarray(self._latency, dtype=np.float64)
            served, deferred = self.served, self.deferred
        out: dict[str, Any] = {
            "served": served,
            "deferral_rate": deferred / served if served else None,
            "scored": len(scored),
            "latency_ms": {
                f"p{q}": (float(np.percentile(lat, q)) * 1000 if len(lat) else None)
                for q in (50, 95, 99)
            },  # fmt: skip
            "all": self._scores(scored),
            "accepted": self._scores([s for s in scored if not s[0].defer]),
            "reliability": self._reliability(scored),
            "validation": self.validation,
        }
        return out

    def _scores(self, scored: list[tuple[_Served, float]]) -> dict[str, float | None]:
        if not scored:
            return {"n": 0}
        y = torch.tensor([o for _, o in scored], dtype=torch.float64)
        if self.task == "classification":
            probs = torch.as_tensor(np.stack([s.probs for s, _ in scored]))
            probs = probs / probs.sum(-1, keepdim=True)
            labels = y.long()
            return {
                "n": len(scored),
                "accuracy": 1.0 - float(metrics.error_rate(probs, labels)),
                "error": float(metrics.error_rate(probs, labels)),
                "nll": float(metrics.nll(probs, labels)),
                "ece": float(metrics.expected_calibration_error(probs, labels)),
            }
        mean = torch.tensor([s.mean for s, _ in scored], dtype=torch.float64)
        var = torch.tensor([s.var for s, _ in scored], dtype=torch.float64).clamp_min(1e-12)
        return {
            "n": len(scored),
            "error": float(metrics.rmse(mean, y)),
            "nll": -float(metrics.gaussian_log_prob(mean, var, y)),
        }

    def _reliability(self, scored: list[tuple[_Served, float]]) -> dict[str, list] | None:
        if self.task != "classification" or not scored:
            return None
        probs = torch.as_tensor(np.stack([s.probs for s, _ in scored]))
        probs = probs / probs.sum(-1, keepdim=True)
        labels = torch.tensor([int(o) for _, o in scored])
        curve = metrics.reliability_curve(probs, labels, n_bins=10)

        def clean(t: torch.Tensor) -> list:
            return [None if not math.isfinite(v) else v for v in t.tolist()]

        return {"confidence": clean(curve.confidence), "accuracy": clean(curve.accuracy),
                "counts": curve.counts.tolist()}  # fmt: skip

    def _check_drift(self) -> None:
        """Log once when a rolling figure passes its validation figure by the tolerance."""
        with self._lock:
            scored = list(self._scored)
        if len(scored) < self.min_count or not self.validation:
            return
        now = {"all": self._scores(scored),
               "accepted": self._scores([s for s in scored if not s[0].defer])}  # fmt: skip
        for part in ("all", "accepted"):
            for fig in ("error", "nll", "ece"):
                ref = self.validation.get(f"{fig}_{part}")
                cur = now[part].get(fig)
                if ref is None or cur is None or now[part]["n"] < self.min_count:
                    continue
                name = f"{fig}_{part}"
                drifting = cur > ref * (1 + self.tolerance) + 1e-3
                if drifting and name not in self._drifting:
                    self._drifting.add(name)
                    log.warning("drift: rolling %s %s = %.4g over the last %d scored rows, "
                                "validation %.4g", part, fig, cur, now[part]["n"], ref)  # fmt: skip
                elif not drifting:
                    self._drifting.discard(name)

    @property
    def drifting(self) -> list[str]:
        return sorted(self._drifting)
