"""A benchmark job: its row key in the results store, and running it once.

A job is a frozen dataclass with the fields ``method``, ``dataset``, ``split`` and ``seed``; its
other fields are its configuration, hashed (canonical JSON, SHA-256) into the row key, so
changing any setting makes a new row instead of reusing an old one. ``fn(job)`` computes the
job's metrics (a JSON-able dict).

:func:`compute` runs ``fn`` anywhere (a worker of a cluster: no store needed) and returns an
:class:`Outcome`; :func:`write_outcome` puts it in the store; :func:`run_job` does both in one
process, claiming the row first.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bayesify.bench.store import DONE, FAILED, ResultsStore, RowDoneError, RowKey, StoreError

IDENTITY_FIELDS = ("method", "dataset", "split", "seed")
JobFn = Callable[[Any], dict[str, Any]]
SKIPPED = "skipped"
ROW_KEY = "row_key"  # field metadata: when a job field is part of its row key (key_field)


def job_config(job: Any) -> dict[str, Any]:
    """A job's configuration: its fields other than method, dataset, split and seed, less
    those :func:`key_field` leaves out."""
    if not dataclasses.is_dataclass(job) or isinstance(job, type):
        raise TypeError(f"a job is a frozen dataclass instance, got {type(job).__name__}")
    missing = [f for f in IDENTITY_FIELDS if not hasattr(job, f)]
    if missing:
        raise ValueError(
            f"job {type(job).__name__} lacks the field(s) {missing}; a job needs "
            f"{', '.join(IDENTITY_FIELDS)}"
        )
    out = {k: v for k, v in dataclasses.asdict(job).items() if k not in IDENTITY_FIELDS}
    for f in dataclasses.fields(job):  # fields added later keep the rows written before them
        rule = f.metadata.get(ROW_KEY)
        if rule == "never" or (rule == "if-set" and getattr(job, f.name) == f.default):
            out.pop(f.name, None)
    return out


def key_field(default: Any, rule: str = "if-set") -> Any:
    """A job field outside the row key (``rule`` "never": how a job runs, not what it
    computes) or in it only when not ``default`` ("if-set": a setting added after rows were
    written, whose default is what those rows did)."""
    if rule not in ("never", "if-set"):
        raise ValueError(f"rule must be never or if-set, got {rule!r}")
    return dataclasses.field(default=default, metadata={ROW_KEY: rule})


def config_hash(config: dict[str, Any]) -> str:
    """16 hex digits of SHA-256 over the configuration's canonical JSON (sorted keys)."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def job_key(experiment: str, job: Any) -> RowKey:
    """The store row of ``job`` in ``experiment``."""
    config = job_config(job)  # checks the job first
    return RowKey(experiment, str(job.method), str(job.dataset), int(job.split), int(job.seed),
                  config_hash(config))  # fmt: skip


@dataclass(frozen=True)
class Outcome:
    """What one run of a job gave: its metrics, or the traceback and last line of its error."""

    metrics: dict[str, Any] | None
    error: str
    message: str
    seconds: float


def compute(fn: JobFn, job: Any, threads: int | None = None) -> Outcome:
    """``fn(job)`` timed; an exception (or a result that is not a dict) is a failed outcome,
    but a :class:`~bayesify.bench.store.StoreError` (a damaged store or search journal, which
    every job of the run shares) is raised: it stops the run.
    ``threads``: torch threads for the call (None: leave torch's setting)."""
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    t0 = time.perf_counter()
    try:
        metrics = fn(job)
        if not isinstance(metrics, dict):
            raise TypeError(f"a job function returns a dict of metrics, got {type(metrics)}")
    except StoreError:
        raise
    except Exception as e:  # noqa: BLE001 - a failed job is recorded, the run goes on
        return Outcome(None, traceback.format_exc(), f"{type(e).__name__}: {e}",
                       time.perf_counter() - t0)  # fmt: skip
    return Outcome(metrics, "", "", time.perf_counter() - t0)


def write_outcome(store: ResultsStore, key: RowKey, job: Any, outcome: Outcome) -> tuple[str, str]:
    """Write ``outcome`` as ``key``'s row: ``(status, message)``, status ``done``, ``failed``
    or ``skipped`` (another run finished the row first; its row is kept)."""
    config = job_config(job)
    if outcome.metrics is None:
        store.fail(key, outcome.error, outcome.seconds, config)
        return FAILED, outcome.message
    try:
        store.finish(key, outcome.metrics, outcome.seconds, config)
    except RowDoneError:  # a concurrent run of the same jobs finished it first: keep its row
        return SKIPPED, ""
    return DONE, f"{outcome.seconds:.1f} s"


def run_job(store: ResultsStore, experiment: str, job: Any, fn: JobFn) -> tuple[str, str]:
    """Run one job into ``store`` unless it is done: ``(status, message)`` with status
    ``skipped``, ``done`` or ``failed``."""
    key = job_key(experiment, job)
    if not store.claim(key, job_config(job)):
        return SKIPPED, ""
    return write_outcome(store, key, job, compute(fn, job))
