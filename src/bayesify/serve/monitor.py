"""Calibration in production: what one model served, scored against outcomes reported later.
One :class:`Monitor` per served model (``name``, ``version``). Thread-safe.

**The record.** What must outlive the process or be shared lives in a store
(:class:`~bayesify.serve.record.Record`, SQLite or PostgreSQL; without one, a store in
memory): the served rows awaiting outcomes, request ids and aliases, received ids, the scored
rows of the window with their feedback request, the counters and the history. Several
monitors of one model version on one store (workers, replicas) agree: a row is scored once,
whichever served it and whichever receives its outcome, feedback requests are numbered by the
store, and each monitor's figures follow every scored row (it reads the rows scored since it
last looked). The monitor keeps only caches, and the latency quantiles of its own process.

**Ids.** Every request's rows are remembered under ids the server makes
(:meth:`Monitor.record_request`): row ``i`` of request ``R`` (32 random hex digits) is
``R-i``, and a one-row request is also named by ``R``. A v2 client's own request ``id`` is kept
as an *alias*: it names the request's row only while exactly one remembered one-row request
carries it, so a second client sending the same ``id`` can neither replace the first client's
row nor receive its feedback (the alias then names two requests and is refused as ambiguous;
the row ids still work). Rows are remembered until ``max_pending`` rows or
``max_pending_values`` stored numbers (a regression row keeps its T sample means and noise) are
exceeded, oldest first.

**Outcomes.** Feedback moves a row into a rolling window of the last ``window`` scored rows;
feedback for a row already received is answered ``already_received`` and not counted again.
A regression outcome is *flagged* (received, counted in ``flagged``, left out of the figures)
when it is outside the training targets' range widened by its width (``target_range``, where
the bundle records one) or, without a recorded range, more than :data:`STD_BOUND` served
standard deviations from the served mean: one absurd value cannot make a figure infinite.

**Figures** (:mod:`.figures`), for all rows and for accepted (not deferred) ones:
classification accuracy, error, NLL, ECE and a reliability curve; regression error (RMSE, or
MAE when the deferral policy was fitted for it), NLL and PIT histogram under the served mixture
and interval coverage beside the nominal level served.

**Drift** (:mod:`.drift`). Each figure with a baseline (the deferral policy's validation
figures; for interval coverage, the nominal level) is compared with it, on at least
``min_count`` rows and with the rows of any one feedback request (the outcomes between two
:meth:`Monitor.refresh` calls) left out: no single request, however wrong, raises a warning by
itself. One request carries at most ``max_feedback_rows`` outcomes (defaults: 100 per request,
200 rows, a 1000-row window), so it moves a full window's figures by at most a tenth. A
warning is logged once and again only after recovery.

**History** (:mod:`.history`). At each :meth:`Monitor.refresh`, and at most once every
``history_every`` seconds while requests are served (whichever process of the store comes
first), a snapshot of the figures is appended to the record; :meth:`Monitor.history` reads
them back, oldest first (:meth:`Monitor.history_after`: those after a snapshot's number).
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from bayesify.serve.drift import LEVEL, WindowPart, drift_rows
from bayesify.serve.figures import (
    Mixture,
    classification_figures,
    classification_terms,
    regression_figures,
    regression_terms,
    reliability,
    score_regression,
)
from bayesify.serve.history import snapshot
from bayesify.serve.record import Record
from bayesify.serve.record_rows import (
    ACCEPTED,
    ALREADY,
    FLAGGED,
    INVALID,
    UNKNOWN,
    AmbiguousId,
    ClassScore,
    Score,
    ServedRow,
    target_range,
)

__all__ = ["ACCEPTED", "ALREADY", "FLAGGED", "INVALID", "STD_BOUND", "UNKNOWN", "AmbiguousId",
           "Monitor", "target_range"]  # fmt: skip

log = logging.getLogger(__name__)

#: without a recorded target range, an outcome this many served standard deviations from the
#: served mean is flagged
STD_BOUND = 1e3


class Monitor:
    """Rolling figures of one model's served predictions; see the module docstring."""

    def __init__(
        self,
        task: str,
        class_names: list[str] | None = None,
        validation: dict[str, Any] | None = None,
        *,
        name: str = "model",
        version: str = "1",
        target_range: tuple[float, float] | None = None,
        class_labels: list[Any] | None = None,
        window: int = 1000,
        min_count: int = 200,
        max_feedback_rows: int = 100,
        tolerance: float = 0.25,
        max_pending: int = 100_000,
        max_pending_values: int = 4_000_000,
        latency_window: int = 2000,
        drift_level: float = LEVEL,
        store: Record | None = None,
        history_every: float = 60.0,
    ) -> None:
        if not 0 < max_feedback_rows < min_count <= window:
            raise ValueError("need 0 < max_feedback_rows < min_count <= window")
        self.task, self.class_names, self.name, self.version = task, class_names, name, version
        self.has_policy = validation is not None
        self.validation = validation or {}
        self.error_metric = str(self.validation.get("error_metric", "rmse"))
        self.target_range = target_range
        #: typed classes (e.g. ints) when the training table's labels were not text: an
        #: outcome equal to one of them is that class, not a class index
        typed = class_labels is not None and any(not isinstance(c, str) for c in class_labels)
        self._label_index = {c: i for i, c in enumerate(class_labels)} if typed else None
        self.window, self.min_count, self.tolerance = window, min_count, tolerance
        self.drift_level = drift_level
        self.max_feedback_rows = max_feedback_rows
        self.history_every = history_every
        self.record = store if store is not None else Record.memory()
        self._ledger = self.record.ledger(name, version, task, window=window,
                                          max_pending=max_pending,
                                          max_pending_values=max_pending_values)  # fmt: skip
        #: (feedback request number, scored row): a cache of the store's window
        self._scored: deque[tuple[int, Score]] = deque(maxlen=window)
        self._seq = -1  # the last scored row read from the store (-1: none read yet)
        self._batch: int | None = None  # this process's feedback request, numbered by the store
        self._latency: deque[float] = deque(maxlen=latency_window)
        self._lock = threading.RLock()
        self._drifting: set[str] = set()
        self._window: dict[str, Any] = {}
        self._drift: list[dict[str, Any]] = []
        self._history_tried = 0.0
        self._sync(self._ledger.counts(), force=True)

    # ------------------------------------------------------------------ counters
    #: rows served and deferred, outcomes accepted and flagged, by every process of the store
    served = property(lambda self: self._ledger.counts()["served"])
    deferred = property(lambda self: self._ledger.counts()["deferred"])
    accepted = property(lambda self: self._ledger.counts()["accepted"])
    flagged = property(lambda self: self._ledger.counts()["flagged"])

    # ------------------------------------------------------------------ recording
    def record_request(
        self,
        records: list[dict[str, Any]],
        *,
        samples: np.ndarray | None = None,
        noise_std: np.ndarray | None = None,
        level: float = 0.9,
        alias: str | None = None,
    ) -> tuple[str, list[str]]:
        """Remember the rows of one request (the predictor's records; regression: ``samples
        [N, T]`` sample means and ``noise_std [N, T]`` or ``[N, 1]``, else the row's
        aleatoric standard deviation, at interval ``level``). Returns the new request id and
        its row ids; ``alias`` is the client's own id for the request."""
        rid = uuid.uuid4().hex
        ids = [f"{rid}-{i}" for i in range(len(records))]
        items = [self._served(i, rec, samples, noise_std, level) for i, rec in enumerate(records)]
        self._ledger.add_request(rid, ids, items, alias or None)
        now = time.time()
        if now - self._history_tried >= self.history_every:
            self._history_tried = now
            if self._ledger.claim_history(now, self.history_every):
                self._ledger.add_history(now, self._snapshot(now))
        return rid, ids

    def _served(self, i: int, rec: dict[str, Any], samples: np.ndarray | None,
                noise: np.ndarray | None, level: float) -> ServedRow:  # fmt: skip
        defer = bool(rec.get("defer", False))
        if self.task == "classification":
            return ServedRow(defer, probs=np.asarray(rec["probabilities"], dtype=np.float64))
        mean, std = float(rec["mean"]), float(rec["std"])
        if samples is not None:
            offsets = (np.asarray(samples[i], dtype=np.float64) - mean).astype(np.float32)
            sd = np.sqrt(np.asarray([float(rec["aleatoric_variance"])], np.float32))
            if noise is not None:
                sd = np.asarray(noise[i], dtype=np.float32)
        else:  # no samples: the Gaussian with the served mean and std
            offsets, sd = np.zeros(1, np.float32), np.asarray([std], np.float32)
        return ServedRow(defer, mix=Mixture(mean, std, offsets, sd), lower=float(rec["lower"]),
                         upper=float(rec["upper"]), level=float(level))  # fmt: skip

    def latency(self, seconds: float) -> None:
        """One answer's latency (kept by this process only)."""
        with self._lock:
            self._latency.append(seconds)

    # ------------------------------------------------------------------ feedback
    def outcome_value(self, outcome: Any) -> float:
        """An outcome as a number: a class index or name (classification), a finite number."""
        if self.task == "classification":
            if self._label_index is not None and not isinstance(outcome, bool | str):
                if outcome not in self._label_index:
                    raise ValueError(f"unknown class {outcome}; valid: {list(self._label_index)}")
                return float(self._label_index[outcome])
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

    def check_count(self, n: int) -> None:
        """A ``ValueError`` if one feedback request carries more than ``max_feedback_rows``."""
        if n > self.max_feedback_rows:
            most = self.max_feedback_rows
            raise ValueError(f"{n} outcomes; at most {most} per request (the rolling window "
                             f"holds {self.window}), send them in parts")  # fmt: skip

    def check_id(self, request_id: str) -> None:
        """An :class:`AmbiguousId` error if ``request_id`` does not name one row."""
        self._ledger.resolve(request_id)

    def feedback(self, request_id: str, outcome: float) -> tuple[str, str | None]:
        """One outcome as :meth:`feedback_many`; a ``ValueError`` for a refused one."""
        ((status, reason),) = self.feedback_many([(request_id, outcome)])
        if status != INVALID:
            return status, reason
        raise ValueError(reason)

    def feedback_many(self, items: list[tuple[str, float]]) -> list[tuple[str, str | None]]:
        """Score the rows ``(request_id, outcome)`` name in one transaction: ``[(status, reason)]``
        (``accepted``, ``flagged``, ``unknown``: never served or forgotten, ``already_received``;
        last ``invalid``: a class beyond the row's, it and the rest untouched). Then refresh."""

        def judge(outcome: float) -> Callable[[ServedRow], tuple[str | None, Score | None]]:
            def check(item: ServedRow) -> tuple[str | None, Score | None]:
                if item.probs is not None and not 0 <= outcome < (n := len(item.probs)):
                    raise ValueError(f"class index must be in 0..{n - 1}, got {int(outcome)}")
                reason = self._out_of_range(item, outcome)
                if reason is not None:
                    return reason, None
                if item.mix is not None:
                    return None, score_regression(item.mix, outcome, item.lower, item.upper,
                                                  item.level, item.defer)  # fmt: skip
                return None, ClassScore(item.defer, item.probs, int(outcome))  # type: ignore[arg-type]

            return check

        with self._lock:
            out, self._batch = self._ledger.take([(r, judge(y)) for r, y in items], self._batch)
            return out

    def _out_of_range(self, item: ServedRow, y: float) -> str | None:
        mix = item.mix
        if mix is None:
            return None
        if self.target_range is not None:
            lo, hi = self.target_range
            span = (hi - lo) or max(abs(lo), 1.0)
            if lo - span <= y <= hi + span:
                return None
            return (
                f"outcome {y:.6g} is outside {lo - span:.6g} .. {hi + span:.6g} (the "
                f"training targets' range {lo:.6g} .. {hi:.6g} widened by its width)"
            )
        if abs(y - mix.mean) <= STD_BOUND * mix.std:
            return None
        return (f"outcome {y:.6g} is more than {STD_BOUND:g} standard deviations "
                f"({mix.std:.6g}) from the served mean {mix.mean:.6g}")  # fmt: skip

    # ------------------------------------------------------------------ figures
    def refresh(self) -> None:
        """Recompute the window's figures and the drift checks (after feedback: the outcomes
        since the last refresh were one feedback request) and append a history snapshot."""
        with self._lock:
            self._batch = None
            self._sync(self._ledger.counts(), force=True)
        now = time.time()
        self._ledger.claim_history(now, 0.0)
        self._ledger.add_history(now, self._snapshot(now))

    def _sync(self, counts: dict[str, int], force: bool = False) -> None:
        """Read the rows scored since the last look (by any process) and recompute."""
        with self._lock:
            if counts["scored_seq"] == self._seq and not force:
                return
            if counts["scored_seq"] != self._seq:
                for seq, batch, score in self._ledger.scored_since(max(self._seq, 0)):
                    self._scored.append((batch, score))
                    self._seq = seq
                self._seq = max(self._seq, counts["scored_seq"])
            parts = self._parts(list(self._scored))
            self._window = self._window_figures(parts)
            self._drift = drift_rows(self._window, parts, self.validation, self.task,
                                     self.error_metric, self.min_count, self.tolerance,
                                     self.drift_level)  # fmt: skip
            for row in self._drift:
                key = f"{row['figure']}_{row['part']}"
                if row["drifting"] and key not in self._drifting:
                    self._drifting.add(key)
                    log.warning("drift on %s v%s: rolling %s %s = %.4g over the last %d "
                                "scored rows, baseline %.4g", self.name, self.version,
                                row["part"], row["figure"], row["live"], row["n"],
                                row["validation"])  # fmt: skip
                elif not row["drifting"]:
                    self._drifting.discard(key)

    def figures(self) -> dict[str, Any]:
        """Rolling figures for all and accepted rows, drift against the baselines, feedback
        counts, the deferral rate and latency quantiles (this process's)."""
        counts = self._ledger.counts()
        with self._lock:
            self._sync(counts)
            lat = np.asarray(self._latency, dtype=np.float64)
            served, deferred = counts["served"], counts["deferred"]
            out: dict[str, Any] = {
                "served": served,
                "deferral_rate": deferred / served if served else None,
                "feedback": {"accepted": counts["accepted"], "flagged": counts["flagged"]},
                **self._window,
                "drift": self._drift,
                "validation": self.validation,
            }
        out["latency_ms"] = {f"p{q}": (float(np.percentile(lat, q)) * 1000 if len(lat) else None)
                             for q in (50, 95, 99)}  # fmt: skip
        return out

    def history(self, limit: int = 500) -> list[dict[str, Any]]:
        """The last ``limit`` snapshots of the figures (:mod:`.history`), oldest first."""
        return self._ledger.history(limit)

    def history_after(self, after: int, limit: int = 500) -> tuple[list[dict[str, Any]], int, int]:
        """:meth:`~bayesify.serve.record_ledger.Ledger.history_after`."""
        return self._ledger.history_after(after, limit)

    def _snapshot(self, now: float) -> dict[str, Any]:
        return snapshot(now, self.figures(), self.task, self.has_policy, self.drifting)

    def _parts(self, scored: list[tuple[int, Any]]) -> dict[str, WindowPart]:
        """The window's rows, all and accepted, with their per-row terms and request numbers."""
        groups = np.asarray([b for b, _ in scored], dtype=np.int64)
        rows = [s for _, s in scored]
        accepted = ~np.asarray([s.defer for s in rows], dtype=bool)
        if self.task == "classification":
            probs = np.stack([r.probs for r in rows]) if rows else np.zeros((0, 1))
            labels = np.asarray([r.label for r in rows], dtype=np.int64)
        out = {}
        for part, mask in (("all", np.ones(len(rows), dtype=bool)), ("accepted", accepted)):
            if self.task == "classification":
                p, y = probs[mask], labels[mask]
                terms = classification_terms(p, y) if len(y) else {}
                out[part] = WindowPart(p, y, terms, groups[mask])
            else:
                sub = [r for r, keep in zip(rows, mask, strict=True) if keep]
                terms = regression_terms(sub, self.error_metric) if sub else {}
                out[part] = WindowPart(sub, None, terms, groups[mask])
        return out

    def _window_figures(self, parts: dict[str, WindowPart]) -> dict[str, Any]:
        n = len(parts["all"].groups)
        if self.task == "classification":
            figs = {p: classification_figures(d.terms) for p, d in parts.items()}
            curve = reliability(parts["all"].rows, parts["all"].labels)
            return {"scored": n, **figs, "reliability": curve, "pit": None}
        figs = {p: regression_figures(d.rows, self.error_metric) for p, d in parts.items()}
        counts = figs["all"].get("pit_counts")
        pit = {"bins": len(counts), "counts": counts} if counts else None
        return {"scored": n, **figs, "reliability": None, "pit": pit}

    @property
    def drifting(self) -> list[str]:
        return sorted(self._drifting)
