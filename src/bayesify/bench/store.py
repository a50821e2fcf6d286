"""The results store: one sqlite3 row per benchmark job, written durably the moment it finishes.

A row is identified by (experiment, method, dataset, split, seed, configuration hash). The file
is in WAL mode with ``synchronous=FULL``: every row is one committed transaction, so killing a run
at any moment (SIGKILL, power loss) loses at most the jobs in progress, and several processes
(the runner's workers) can write to the same file at once, each through its own connection.

A row's ``status`` is ``running`` (claimed; left behind by a killed run), ``done`` (metrics
stored; never overwritten) or ``failed`` (the error's traceback stored). ``attempts`` counts how
often the job was started; ``created`` is when its result was written. :meth:`ResultsStore.put_done`
stores a row finished elsewhere (an import, :mod:`bayesify.bench.store_io`) with 0 attempts.

:meth:`ResultsStore.add`/:meth:`ResultsStore.rows` keep the older cell API (one cell per
experiment, dataset, split and method, replaced when re-run): such cells are rows with seed 0 and
an empty configuration hash.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bayesify.bench.store_file import (
    StoreError,
    create_store,
    guarded,
    store_error,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    experiment TEXT NOT NULL,
    method TEXT NOT NULL,
    dataset TEXT NOT NULL,
    split INTEGER NOT NULL,
    seed INTEGER NOT NULL,
    config_hash TEXT NOT NULL,
    status TEXT NOT NULL,
    config TEXT NOT NULL,
    metrics TEXT,
    error TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    seconds REAL,
    created REAL,
    started REAL,
    host TEXT,
    pid INTEGER,
    PRIMARY KEY (experiment, method, dataset, split, seed, config_hash)
)
"""
_LEGACY = "results"  # the table of the store's first version; its cells are copied over on open

RUNNING, DONE, FAILED = "running", "done", "failed"
STATUSES = (RUNNING, DONE, FAILED)


class RowDoneError(RuntimeError):
    """A result was written for a row that is already done (another run finished it first)."""


@dataclass(frozen=True)
class RowKey:
    """What identifies one row: a job of an experiment."""

    experiment: str
    method: str
    dataset: str
    split: int
    seed: int
    config_hash: str

    def __str__(self) -> str:
        return "/".join(str(v) for v in (self.experiment, self.method, self.dataset,
                                          self.split, self.seed, self.config_hash))  # fmt: skip

    @classmethod
    def of(cls, row: dict[str, Any]) -> RowKey:
        """The key of a row as :meth:`ResultsStore.records` returns it."""
        return cls(row["experiment"], row["method"], row["dataset"], row["split"], row["seed"],
                   row["config_hash"])  # fmt: skip

    def values(self) -> tuple[Any, ...]:
        return (self.experiment, self.method, self.dataset, self.split, self.seed,
                self.config_hash)  # fmt: skip


_WHERE_KEY = "experiment=? AND method=? AND dataset=? AND split=? AND seed=? AND config_hash=?"


def _json(value: Any) -> str:
    """JSON with non-finite floats as null (sqlite/JSON readers choke on NaN)."""

    def clean(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {str(k): clean(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [clean(x) for x in v]
        return v

    return json.dumps(clean(value))


class ResultsStore:
    """Benchmark results in an sqlite file, safe against kills and concurrent writers.

    Each process opens its own store (sqlite connections are not shared across processes).
    """

    def __init__(
        self, path: str | Path = ":memory:", *, timeout: float = 60.0, readonly: bool = False
    ) -> None:
        """Open (or create) the store at ``path``; ``readonly=True`` opens an existing file
        for reading only (sqlite's ``mode=ro``: nothing is created, migrated or written)."""
        self.path = str(path)
        try:
            self._open(path, timeout, readonly)
            if self.path != ":memory:":
                self._check()
        except (sqlite3.DatabaseError, StoreError) as e:
            if hasattr(self, "conn"):
                self.conn.close()
            raise store_error(self.path, e) from None

    def _open(self, path: str | Path, timeout: float, readonly: bool) -> None:
        if self.path != ":memory:" and Path(path).is_file() and Path(path).stat().st_size == 0:
            raise StoreError(
                f"{path} is an empty file (0 bytes), not a results store; a run "
                "creates its store itself: remove the file or give another path"
            )
        if readonly:
            if not Path(path).is_file():
                raise FileNotFoundError(f"no results store at {path}")
            uri = f"{Path(path).resolve().as_uri()}?mode=ro"
            self.conn = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None)
            self.conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
            return
        if self.path != ":memory:" and not Path(path).exists():
            create_store(Path(path), _SCHEMA)
        # autocommit mode (isolation_level=None): transactions are the explicit BEGINs below
        self.conn = sqlite3.connect(self.path, timeout=timeout, isolation_level=None)
        self.conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        if self.path != ":memory:":
            self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        with self._transaction():
            self.conn.execute(_SCHEMA)
            self._copy_legacy_cells()

    def _check(self) -> None:
        """SQLite's ``quick_check`` of every page: a damaged file is refused when opened, not
        half-way through a run."""
        found = self.conn.execute("PRAGMA quick_check(1)").fetchone()
        if found is None or found[0] != "ok":
            raise sqlite3.DatabaseError(found[0] if found else "quick_check gave no answer")

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ transactions
    def _transaction(self) -> _Transaction:
        return _Transaction(self.conn)

    def _copy_legacy_cells(self) -> None:
        exists = self.conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (_LEGACY,)
        ).fetchone()
        if exists:
            self.conn.execute(
                "INSERT OR IGNORE INTO runs (experiment, method, dataset, split, seed, "
                "config_hash, status, config, metrics, attempts, created) "
                f"SELECT experiment, method, dataset, split, 0, '', 'done', settings, metrics, 1, "
                f"created FROM {_LEGACY}"
            )
            self.conn.execute(f"DROP TABLE {_LEGACY}")

    # ------------------------------------------------------------------ job rows
    @guarded
    def claim(self, key: RowKey, config: dict[str, Any]) -> bool:
        """Mark ``key`` as running (one more attempt) unless it is done; False if it is done."""
        with self._transaction():
            row = self.conn.execute(f"SELECT status FROM runs WHERE {_WHERE_KEY}",
                                    key.values()).fetchone()  # fmt: skip
            if row is not None and row[0] == DONE:
                return False
            now = time.time()
            if row is None:
                self.conn.execute(
                    "INSERT INTO runs (experiment, method, dataset, split, seed, config_hash, "
                    "status, config, attempts, started, host, pid) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?)",
                    (*key.values(), RUNNING, _json(config), now, socket.gethostname(),
                     os.getpid()),
                )  # fmt: skip
            else:
                self.conn.execute(
                    "UPDATE runs SET status=?, error=NULL, attempts=attempts+1, started=?, "
                    f"host=?, pid=? WHERE {_WHERE_KEY}",
                    (RUNNING, now, socket.gethostname(), os.getpid(), *key.values()),
                )
        return True

    def finish(
        self, key: RowKey, metrics: dict[str, Any], seconds: float | None, config: dict[str, Any]
    ) -> None:
        """Write a job's result (status ``done``) in one durable transaction."""
        self._write(key, DONE, config, metrics=_json(metrics), error=None, seconds=seconds)

    def fail(self, key: RowKey, error: str, seconds: float, config: dict[str, Any]) -> None:
        """Record that a job raised ``error`` (status ``failed``; it is retried next run)."""
        self._write(key, FAILED, config, metrics=None, error=error, seconds=seconds)

    @guarded
    def _write(self, key: RowKey, status: str, config: dict[str, Any], **values: Any) -> None:
        with self._transaction():
            done = self.conn.execute(f"SELECT status FROM runs WHERE {_WHERE_KEY}",
                                     key.values()).fetchone()  # fmt: skip
            if done is not None and done[0] == DONE:
                raise RowDoneError(f"row {key} is already done; a done row is never overwritten")
            self.conn.execute(
                "INSERT INTO runs (experiment, method, dataset, split, seed, config_hash, status, "
                "config, metrics, error, attempts, seconds, created, host, pid) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?) "
                "ON CONFLICT (experiment, method, dataset, split, seed, config_hash) DO UPDATE "
                "SET status=excluded.status, config=excluded.config, metrics=excluded.metrics, "
                "error=excluded.error, seconds=excluded.seconds, created=excluded.created, "
                "host=excluded.host, pid=excluded.pid",
                (*key.values(), status, _json(config), values["metrics"], values["error"],
                 values["seconds"], time.time(), socket.gethostname(), os.getpid()),
            )  # fmt: skip

    @guarded
    def put_done(
        self,
        key: RowKey,
        config: dict[str, Any],
        metrics: dict[str, Any],
        *,
        seconds: float | None = None,
        created: float | None = None,
        replace: Callable[[dict[str, Any]], bool] | None = None,
    ) -> str:
        """Store a finished row computed elsewhere (an import), in one transaction.

        Returns ``added`` (the key was absent, running or failed here), ``kept`` (it is done
        here: a done row is never overwritten) or ``replaced`` (it is done here and
        ``replace(its metrics)`` is true). An added row has 0 attempts in this store."""
        with self._transaction():
            found = self.conn.execute(f"SELECT status, metrics FROM runs WHERE {_WHERE_KEY}",
                                      key.values()).fetchone()  # fmt: skip
            outcome = "added"
            if found is not None and found[0] == DONE:
                if replace is None or not replace(json.loads(found[1]) if found[1] else {}):
                    return "kept"
                outcome = "replaced"
            self.conn.execute(
                "INSERT INTO runs (experiment, method, dataset, split, seed, config_hash, status, "
                "config, metrics, attempts, seconds, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, "
                "0, ?, ?) ON CONFLICT (experiment, method, dataset, split, seed, config_hash) "
                "DO UPDATE SET status=excluded.status, config=excluded.config, "
                "metrics=excluded.metrics, error=NULL, seconds=excluded.seconds, "
                "created=excluded.created",
                (*key.values(), DONE, _json(config), _json(metrics), seconds, created),
            )  # fmt: skip
        return outcome

    @guarded
    def status(self, key: RowKey) -> str | None:
        """``running``, ``done``, ``failed`` or None (never started)."""
        row = self.conn.execute(f"SELECT status FROM runs WHERE {_WHERE_KEY}", key.values())
        found = row.fetchone()
        return None if found is None else found[0]

    @guarded
    def done_keys(self, experiment: str) -> set[RowKey]:
        """The keys of ``experiment``'s finished rows."""
        cur = self.conn.execute(
            "SELECT experiment, method, dataset, split, seed, config_hash FROM runs "
            "WHERE experiment=? AND status='done'",
            (experiment,),
        )
        return {RowKey(*r) for r in cur}

    @guarded
    def records(
        self, experiment: str | None = None, *, status: str | None = DONE
    ) -> list[dict[str, Any]]:
        """Rows as dicts (``metrics`` and ``config`` parsed), optionally of one experiment and
        status (None: every status), ordered by experiment, dataset, method, split, seed."""
        where, args = [], []
        if experiment is not None:
            where.append("experiment=?")
            args.append(experiment)
        if status is not None:
            where.append("status=?")
            args.append(status)
        sql = "SELECT * FROM runs" + (" WHERE " + " AND ".join(where) if where else "")
        out = []
        cur = self.conn.execute(sql + " ORDER BY experiment, dataset, method, split, seed", args)
        names = [d[0] for d in cur.description]
        for values in cur:
            row = dict(zip(names, values, strict=True))
            where_row = f"{self.path}: row {RowKey.of(row)}"
            row["config"] = _object(row["config"], f"{where_row}: config")
            row["metrics"] = _object(row["metrics"] or "{}", f"{where_row}: metrics")
            out.append(row)
        return out

    @guarded
    def experiments(self) -> list[str]:
        """The experiments that have rows, sorted."""
        cur = self.conn.execute("SELECT DISTINCT experiment FROM runs ORDER BY experiment")
        return [r[0] for r in cur]

    # ------------------------------------------------------------------ the cell API
    @guarded
    def add(
        self,
        experiment: str,
        dataset: str,
        split: int,
        method: str,
        metrics: dict[str, float],
        settings: dict[str, Any] | None = None,
    ) -> None:
        """Store one cell (experiment, dataset, split, method), replacing an earlier one."""
        key = RowKey(experiment, method, dataset, split, 0, "")
        with self._transaction():
            self.conn.execute(f"DELETE FROM runs WHERE {_WHERE_KEY}", key.values())
        self.finish(key, metrics, seconds=None, config=settings or {})

    def rows(self, experiment: str) -> list[dict[str, Any]]:
        """All finished rows of ``experiment`` as dicts with the metrics flattened in."""
        return [
            {"dataset": r["dataset"], "split": r["split"], "method": r["method"], **r["metrics"]}
            for r in self.records(experiment)
        ]


def _object(text: str, where: str) -> dict[str, Any]:
    """A stored JSON object; a damaged one is a :class:`StoreError` naming ``where``."""
    try:
        value = json.loads(text)
    except (ValueError, TypeError, RecursionError):
        value = None
    if not isinstance(value, dict):
        raise StoreError(f"{where} is not a JSON object; the store is damaged")
    return value


class _Transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on error): one writer at a time, and the
    commit is on disk when the block ends."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.conn.execute("COMMIT")
        elif self.conn.in_transaction:  # an error may have ended it already
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("ROLLBACK")
