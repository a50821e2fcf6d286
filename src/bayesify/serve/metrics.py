"""Prometheus metrics of one server (its own registry, so several apps can live in a process)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5)
POWERS_OF_TWO = tuple(float(2**k) for k in range(11))


class ServerMetrics:
    """Requests, errors, latency, batch sizes, deferral and samples used; rolling calibration."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("bayesify_requests", "HTTP requests.",
                                ["endpoint", "method", "code"], registry=r)  # fmt: skip
        self.errors = Counter("bayesify_request_errors", "HTTP requests answered with an error.",
                              ["endpoint", "code"], registry=r)  # fmt: skip
        self.latency = Histogram("bayesify_request_latency_seconds", "Request latency.",
                                 ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)  # fmt: skip
        self.batch_rows = Histogram("bayesify_batch_rows", "Rows per vectorised pass.",
                                    buckets=POWERS_OF_TWO, registry=r)  # fmt: skip
        self.rows = Counter("bayesify_rows", "Rows predicted.", registry=r)
        self.deferred = Counter("bayesify_deferred_rows", "Rows flagged defer.", registry=r)
        self.deferral_rate = Gauge("bayesify_deferral_rate", "Deferred / predicted rows.",
                                   registry=r)  # fmt: skip
        self.samples_used = Histogram("bayesify_samples_used", "Monte Carlo samples per row.",
                                      buckets=POWERS_OF_TWO, registry=r)  # fmt: skip
        self.feedback = Counter("bayesify_feedback_rows", "Outcomes received.", registry=r)
        self.rolling = {
            name: Gauge(
                f"bayesify_rolling_{name}",
                f"Rolling {name} of served rows with feedback.",
                ["cases"],
                registry=r,
            )  # fmt: skip
            for name in ("accuracy", "error", "nll", "ece")
        }
        self._rows = self._deferred = 0

    def served(self, defer: list[bool], samples_used: list[int]) -> None:
        self.rows.inc(len(defer))
        d = sum(defer)
        self.deferred.inc(d)
        self._rows += len(defer)
        self._deferred += d
        self.deferral_rate.set(self._deferred / self._rows)
        for s in samples_used:
            self.samples_used.observe(s)

    def set_rolling(self, figures: dict[str, Any]) -> None:
        for cases in ("all", "accepted"):
            for name, gauge in self.rolling.items():
                value = figures.get(cases, {}).get(name)
                if value is not None:
                    gauge.labels(cases=cases).set(value)

    def text(self) -> bytes:
        return generate_latest(self.registry)
