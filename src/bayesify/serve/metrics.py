"""Prometheus metrics: one :class:`MetricFamilies` per server (its own registry, so several
apps can live in a process) and one :class:`ServerMetrics` per served model, which labels
every sample it writes with ``model`` and ``version``.

Drift is exported as gauges side by side: ``bayesify_rolling{figure, part}`` (the live value
over the feedback window; ``part`` is ``all`` or ``accepted``), ``bayesify_validation{figure,
part}`` (its baseline: the deferral policy's validation figure, or for ``interval_coverage``
the nominal level served) and ``bayesify_drifting{figure, part}`` (1 while past the baseline).

**Several processes** (``bayesify serve --workers N``): prometheus_client's multiprocess mode,
so one scrape of any worker gives the whole server's figures, as one process would (no ``pid``
label): every worker writes its samples to files in ``PROMETHEUS_MULTIPROC_DIR`` (made fresh by
the parent at start, :mod:`.workers`) and ``/metrics`` merges the files of every worker, dead
ones included. Counters and histograms are summed. ``bayesify_deferral_rate`` is computed from
the summed ``bayesify_rows`` and ``bayesify_deferred_rows``. The figure gauges
(``bayesify_rolling``, ``bayesify_validation``, ``bayesify_drifting``) take the value most
recently set by any worker (``mostrecent``): the workers' monitors share one store, so the
latest figures are the server's. One family is added: ``bayesify_worker_requests{worker}``,
the requests each worker (by index, 0 to N-1, the same across a restart) has answered, so an
uneven spread of connections shows.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector

from bayesify.serve.workers import MULTIPROC_ENV, worker_index

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5)
POWERS_OF_TWO = tuple(float(2**k) for k in range(11))
MODEL = ("model", "version")
#: rolling figures exported (where the window has them)
ROLLING = ("accuracy", "error", "nll", "ece", "interval_coverage")


class MetricFamilies:
    """Every metric family of one server, all labelled by model and version."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("bayesify_requests", "HTTP requests.",
                                [*MODEL, "endpoint", "method", "code"], registry=r)  # fmt: skip
        self.errors = Counter("bayesify_request_errors", "HTTP requests answered with an error.",
                              [*MODEL, "endpoint", "code"], registry=r)  # fmt: skip
        self.latency = Histogram("bayesify_request_latency_seconds", "Request latency.",
                                 [*MODEL, "endpoint"], buckets=LATENCY_BUCKETS,
                                 registry=r)  # fmt: skip
        self.batch_rows = Histogram("bayesify_batch_rows", "Rows per vectorised pass.", MODEL,
                                    buckets=POWERS_OF_TWO, registry=r)  # fmt: skip
        self.rows = Counter("bayesify_rows", "Rows predicted.", MODEL, registry=r)
        self.deferred = Counter("bayesify_deferred_rows", "Rows flagged defer.", MODEL,
                                registry=r)  # fmt: skip
        self.deferral_rate = Gauge("bayesify_deferral_rate", "Deferred / predicted rows.", MODEL,
                                   registry=r, multiprocess_mode="mostrecent")  # fmt: skip
        self.samples_used = Histogram("bayesify_samples_used", "Monte Carlo samples per row.",
                                      MODEL, buckets=POWERS_OF_TWO, registry=r)  # fmt: skip
        self.feedback = Counter("bayesify_feedback_rows", "Outcomes received, by status "
                                "(accepted: scored; flagged: out of range, not scored).",
                                [*MODEL, "status"], registry=r)  # fmt: skip
        self.rolling = Gauge("bayesify_rolling", "Rolling figure of served rows with feedback.",
                             [*MODEL, "figure", "part"], registry=r,
                             multiprocess_mode="mostrecent")  # fmt: skip
        self.validation = Gauge("bayesify_validation", "Baseline of a rolling figure: the "
                                "validation figure, or the nominal level for interval coverage.",
                                [*MODEL, "figure", "part"], registry=r,
                                multiprocess_mode="mostrecent")  # fmt: skip
        self.drifting = Gauge("bayesify_drifting", "1 while a rolling figure drifts past its "
                              "baseline.", [*MODEL, "figure", "part"], registry=r,
                              multiprocess_mode="mostrecent")  # fmt: skip
        #: this process's index among the server's workers (None: the server is one process)
        self.worker = worker_index()
        if self.worker is not None:
            self.worker_requests = Counter("bayesify_worker_requests", "HTTP requests answered "
                                           "by each worker process.", ["worker"],
                                           registry=r)  # fmt: skip
            self._merged = _Merged(os.environ[MULTIPROC_ENV], self.registry)

    def text(self) -> bytes:
        if self.worker is None:
            return generate_latest(self.registry)
        merged = CollectorRegistry(auto_describe=False)
        merged.register(self._merged)
        return generate_latest(merged)

    def forget(self, name: str, version: str) -> None:
        """Drop every series of model ``name`` version ``version`` (it was unloaded)."""
        labels = dict(zip(MODEL, (name, version), strict=True))
        for family in vars(self).values():
            if not isinstance(family, MetricWrapperBase):
                continue
            if hasattr(family, "remove_by_labels"):  # prometheus-client >= 0.22
                family.remove_by_labels(labels)
                continue
            names = list(family._labelnames)  # noqa: SLF001 - older clients: their own loop
            i, j = names.index(MODEL[0]), names.index(MODEL[1])
            with family._lock:  # noqa: SLF001
                for values in list(family._metrics):  # noqa: SLF001
                    if (values[i], values[j]) == (name, version):
                        family._metrics.pop(values, None)  # noqa: SLF001


class ServerMetrics:
    """One model's metrics: requests, errors, latency, batch sizes, deferral, samples used,
    feedback, and the rolling figures beside their baselines."""

    def __init__(self, name: str, version: str = "1",
                 families: MetricFamilies | None = None) -> None:  # fmt: skip
        f = self.families = families or MetricFamilies()
        self.labels = (name, version)
        self.batch_rows = f.batch_rows.labels(*self.labels)
        self._rows, self._deferred = f.rows.labels(*self.labels), f.deferred.labels(*self.labels)
        self._rate = f.deferral_rate.labels(*self.labels)
        self._samples = f.samples_used.labels(*self.labels)
        self._n_rows = self._n_deferred = 0
        self.retired = False

    def retire(self) -> None:
        """The model version was unloaded: its series leave ``/metrics``, and requests that
        were still being answered add none back."""
        self.retired = True
        self.families.forget(*self.labels)

    def request(self, endpoint: str, method: str, code: int, seconds: float) -> None:
        """Count one HTTP request answered with status ``code``."""
        if self.retired:
            return
        f = self.families
        if f.worker is not None:
            f.worker_requests.labels(f.worker).inc()
        f.requests.labels(*self.labels, endpoint, method, str(code)).inc()
        if code >= 400:
            f.errors.labels(*self.labels, endpoint, str(code)).inc()
        f.latency.labels(*self.labels, endpoint).observe(seconds)

    def served(self, defer: list[bool], samples_used: list[int]) -> None:
        self._rows.inc(len(defer))
        d = sum(defer)
        self._deferred.inc(d)
        self._n_rows += len(defer)
        self._n_deferred += d
        if self._n_rows:
            self._rate.set(self._n_deferred / self._n_rows)
        for s in samples_used:
            self._samples.observe(s)

    def feedback(self, accepted: int, flagged: int) -> None:
        if self.retired:
            return
        for status, n in (("accepted", accepted), ("flagged", flagged)):
            self.families.feedback.labels(*self.labels, status).inc(n)

    def set_figures(self, figures: dict[str, Any]) -> None:
        """The monitor's rolling figures and drift rows (``Monitor.figures()``)."""
        if self.retired:
            return
        f = self.families
        for part in ("all", "accepted"):
            for name in ROLLING:
                value = figures.get(part, {}).get(name)
                if value is not None and math.isfinite(value):
                    f.rolling.labels(*self.labels, name, part).set(value)
        for row in figures.get("drift", []):
            keys = (*self.labels, row["figure"], row["part"])
            f.validation.labels(*keys).set(row["validation"])
            f.drifting.labels(*keys).set(1.0 if row["drifting"] else 0.0)
        accepted = figures.get("validation", {}).get("coverage")  # the policy's acceptance
        if isinstance(accepted, int | float) and math.isfinite(accepted):
            f.validation.labels(*self.labels, "deferral_rate", "all").set(1.0 - accepted)

    def text(self) -> bytes:
        return self.families.text()


class _Merged:
    """A collector of every worker's samples (prometheus_client's multiprocess files), with
    each family's own help and the deferral rate computed from the summed row counts."""

    def __init__(self, folder: str, registry: CollectorRegistry) -> None:
        self.files = MultiProcessCollector(None, folder)
        self.help = {f.name: f.documentation for f in registry.collect()}

    def collect(self) -> Iterator[Metric]:
        families = {f.name: f for f in self.files.collect()}
        for name, family in families.items():
            family.documentation = self.help.get(name, family.documentation)
        rate = GaugeMetricFamily("bayesify_deferral_rate", self.help["bayesify_deferral_rate"],
                                 labels=MODEL)  # fmt: skip
        rows = _by_model(families.get("bayesify_rows"))
        deferred = _by_model(families.get("bayesify_deferred_rows"))
        for labels, n in rows.items():
            if n > 0:
                rate.add_metric(list(labels), deferred.get(labels, 0.0) / n)
        families["bayesify_deferral_rate"] = rate
        yield from families.values()


def _by_model(family: Metric | None) -> dict[tuple[str, ...], float]:
    """A counter family's ``_total`` values by (model, version)."""
    if family is None:
        return {}
    return {tuple(s.labels[k] for k in MODEL): s.value
            for s in family.samples if s.name.endswith("_total")}  # fmt: skip
