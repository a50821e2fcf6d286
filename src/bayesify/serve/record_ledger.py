"""One model version's part of the record: its SQL, shared by SQLite and PostgreSQL.

Every write is one transaction that first locks the version's ``counters`` row, so writers of
one model version (threads, processes, replicas) take turns, and each reads what the one
before it committed. Feedback takes a pending row with ``DELETE ... WHERE row_id = ?`` and
scores it only if that deleted exactly one row: a row is scored once, whichever process
served it and however many send its outcome.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bayesify.serve.record_rows import (
    ACCEPTED,
    ALREADY,
    FLAGGED,
    INVALID,
    SCORE_COLUMNS,
    SERVED_COLUMNS,
    UNKNOWN,
    AmbiguousId,
    Score,
    ServedRow,
    score_row,
    score_values,
    served_row,
    served_values,
)

if TYPE_CHECKING:
    from bayesify.serve.record import Record

#: seconds between two passes that drop rows past their age
EXPIRE_EVERY_S = 60.0
_KEY = "model = ? AND version = ?"
_SERVED = ", ".join(SERVED_COLUMNS)
_SCORED = ", ".join(SCORE_COLUMNS)

#: a served row -> (why it is flagged, or None; its score when not flagged)
Judge = Callable[[ServedRow], tuple[str | None, Score | None]]


class TaskChanged(ValueError):
    """A store that holds the same model version under another task."""


class Ledger:
    """The record of model ``model`` version ``version`` (see the module docstring):
    ``max_pending`` rows awaiting outcomes holding at most ``max_pending_values`` numbers (the
    oldest go first; the ids of received rows and of requests are bounded by ``max_pending``
    too), and the last ``window`` scored rows."""

    def __init__(self, record: Record, model: str, version: str, task: str, *,
                 window: int = 1000, max_pending: int = 100_000,
                 max_pending_values: int = 4_000_000) -> None:  # fmt: skip
        self.record, self.backend, self.key = record, record.backend, (model, version)
        self.window, self.max_pending, self.max_values = window, max_pending, max_pending_values
        with self.backend.transaction() as cur:
            cur.execute("INSERT INTO counters (model, version, task) VALUES (?, ?, ?) "
                        "ON CONFLICT (model, version) DO NOTHING", (*self.key, task))  # fmt: skip
            held = cur.execute(f"SELECT task FROM counters WHERE {_KEY}", self.key).fetchone()[0]
        if held != task:
            raise TaskChanged(f"the record at {record.where} holds model {model!r} version "
                              f"{version} as {held}, this bundle is {task}: give another "
                              "--store, or remove that record")  # fmt: skip
        self._expired = 0.0
        #: snapshots read (number, snapshot), the newest ``_history_limit`` at most
        self._history: list[tuple[int, dict[str, Any]]] = []
        self._history_limit = 0
        self.expire()

    def _lock(self, cur: Any) -> None:
        cur.execute(f"UPDATE counters SET batches = batches WHERE {_KEY}", self.key)

    def _add(self, cur: Any, returning: str = "", **changes: int | float) -> Any:
        """Add to counters; with ``returning`` (columns), their new values."""
        sets = ", ".join(f"{k} = {k} + ?" for k in changes)
        tail = f" RETURNING {returning}" if returning else ""
        cur.execute(f"UPDATE counters SET {sets} WHERE {_KEY}{tail}",
                    (*changes.values(), *self.key))  # fmt: skip
        return cur.fetchone() if returning else None

    # ------------------------------------------------------------------ serving
    def add_request(self, rid: str, ids: list[str], rows: list[ServedRow],
                    alias: str | None) -> None:  # fmt: skip
        """Remember request ``rid`` (its client's ``alias``) and its rows under ``ids``."""
        now = time.time()
        with self.backend.transaction() as cur:
            # new rows first (they conflict with no one), then the counters row, locked, and
            # the trims, which read what the writer before committed
            cur.execute("INSERT INTO requests (model, version, request_id, n_rows, alias, "
                        "time) VALUES (?, ?, ?, ?, ?, ?)",
                        (*self.key, rid, len(ids), alias, now))  # fmt: skip
            marks = ", ".join("?" * (len(SERVED_COLUMNS) + 4))
            cur.executemany(f"INSERT INTO pending (model, version, row_id, time, {_SERVED}) "
                            f"VALUES ({marks})",
                            [(*self.key, i, now, *served_values(r))
                             for i, r in zip(ids, rows, strict=True)])  # fmt: skip
            held = self._add(cur, "pending_rows, pending_values, request_rows", served=len(rows),
                             deferred=sum(r.defer for r in rows), pending_rows=len(rows),
                             pending_values=sum(r.size for r in rows), request_rows=1)  # fmt: skip
            self._trim_pending(cur, int(held[0]), int(held[1]))
            self._trim_oldest(cur, "requests", "request_rows", int(held[2]), self.max_pending)
        if now - self._expired >= EXPIRE_EVERY_S:
            self.expire()

    def _trim_pending(self, cur: Any, rows: int, values: int) -> None:
        """Drop the oldest pending rows until at most ``max_pending`` rows holding at most
        ``max_pending_values`` numbers remain (``rows``, ``values``: held now)."""
        last, dropped, size = -1, 0, 0
        while rows - dropped > self.max_pending or values - size > self.max_values:
            chunk = cur.execute(f"SELECT seq, size FROM pending WHERE {_KEY} AND seq > ? ORDER "
                                "BY seq LIMIT ?", (*self.key, last,
                                                   max(rows - dropped - self.max_pending, 0)
                                                   + 64)).fetchall()  # fmt: skip
            for seq, n in chunk:
                if rows - dropped <= self.max_pending and values - size <= self.max_values:
                    break
                last, dropped, size = seq, dropped + 1, size + n
            if not chunk:
                break
        if dropped:
            cur.execute(f"DELETE FROM pending WHERE {_KEY} AND seq <= ?", (*self.key, last))
            self._add(cur, pending_rows=-dropped, pending_values=-size)

    def _trim_oldest(self, cur: Any, table: str, column: str, n: int, limit: int) -> None:
        """Drop the oldest rows of ``table`` beyond ``limit`` (``n`` held now)."""
        if n > limit:
            cur.execute(f"DELETE FROM {table} WHERE seq IN (SELECT seq FROM {table} WHERE "
                        f"{_KEY} ORDER BY seq LIMIT ?)", (*self.key, n - limit))  # fmt: skip
            self._add(cur, **{column: limit - n})

    # ------------------------------------------------------------------ feedback
    def resolve(self, request_id: str, cur: Any = None) -> str:
        """The row id ``request_id`` names: a row id, a request of one row, or a client's
        alias that one remembered request carries. :class:`AmbiguousId` otherwise."""
        if cur is None:
            with self.backend.transaction(write=False) as c:
                return self.resolve(request_id, c)
        known = cur.execute(f"SELECT 1 FROM pending WHERE {_KEY} AND row_id = ? UNION ALL "
                            f"SELECT 1 FROM received WHERE {_KEY} AND row_id = ?",
                            (*self.key, request_id, *self.key, request_id)).fetchone()  # fmt: skip
        if known is not None:
            return request_id
        found = cur.execute(f"SELECT n_rows FROM requests WHERE {_KEY} AND request_id = ?",
                            (*self.key, request_id)).fetchone()  # fmt: skip
        if found is not None:
            n = found[0]
            if n > 1:
                raise AmbiguousId(f"request {request_id!r} had {n} rows; give a row id "
                                  f"({request_id}-0 .. {request_id}-{n - 1})")  # fmt: skip
            return f"{request_id}-0"
        rids = cur.execute(f"SELECT request_id, n_rows FROM requests WHERE {_KEY} AND "
                           "alias = ? ORDER BY seq DESC LIMIT 2",
                           (*self.key, request_id)).fetchall()  # fmt: skip
        if len(rids) > 1:
            raise AmbiguousId(f"id {request_id!r} was sent with {len(rids)} requests (clients "
                              "choose their ids, so they can repeat); give the row's "
                              "request_id output instead")  # fmt: skip
        if rids:
            if rids[0][1] > 1:
                raise AmbiguousId(f"request {request_id!r} had {rids[0][1]} rows; give the "
                                  "rows' request_id outputs")  # fmt: skip
            return f"{rids[0][0]}-0"
        return request_id

    def take(self, items: list[tuple[str, Judge]],
             batch: int | None) -> tuple[list[tuple[str, str | None]], int | None]:  # fmt: skip
        """Receive the outcomes of the rows ``(request_id, judge)`` name, in one transaction
        (one commit): ``([(status, reason)], batch)``. ``judge`` flags or scores its row; a
        ``ValueError`` from it ends the list there with ``(INVALID, message)`` and leaves that
        row and the rest untouched (the rows before it are committed). Scored rows join
        feedback request ``batch``, a new number when None."""
        out: list[tuple[str, str | None]] = []
        with self.backend.transaction() as cur:
            self._lock(cur)
            for request_id, judge in items:
                try:
                    status, reason, batch = self._take(cur, request_id, judge, batch)
                except ValueError as e:  # judge raises before this row is written
                    out.append((INVALID, str(e)))
                    break
                out.append((status, reason))
        return out, batch

    def _take(self, cur: Any, request_id: str, judge: Judge,
              batch: int | None) -> tuple[str, str | None, int | None]:  # fmt: skip
        """One row's part of :meth:`take`, inside its transaction."""
        row_id = self.resolve(request_id, cur)
        seen = cur.execute(f"SELECT 1 FROM received WHERE {_KEY} AND row_id = ?",
                           (*self.key, row_id)).fetchone()  # fmt: skip
        if seen is not None:
            return ALREADY, None, batch
        values = cur.execute(f"SELECT {_SERVED} FROM pending WHERE {_KEY} AND row_id = ?",
                             (*self.key, row_id)).fetchone()  # fmt: skip
        if values is None:
            return UNKNOWN, None, batch
        row = served_row(tuple(values))
        reason, score = judge(row)
        gone = cur.execute(f"DELETE FROM pending WHERE {_KEY} AND row_id = ?",
                           (*self.key, row_id)).rowcount  # fmt: skip
        if gone != 1:  # cannot happen while the counters row is locked; never score twice
            return ALREADY, None, batch
        cur.execute("INSERT INTO received (model, version, row_id, time) VALUES (?, ?, ?, ?)",
                    (*self.key, row_id, time.time()))  # fmt: skip
        (held,) = self._add(cur, "received_rows", pending_rows=-1,
                            pending_values=-row.size, received_rows=1)  # fmt: skip
        self._trim_oldest(cur, "received", "received_rows", int(held), self.max_pending)
        if score is None:
            self._add(cur, flagged=1)
            return FLAGGED, reason, batch
        if batch is None:
            (batch,) = self._add(cur, "batches", batches=1)
        marks = ", ".join("?" * (len(SCORE_COLUMNS) + 2))
        (seq,) = cur.execute(f"INSERT INTO scored (model, version, {_SCORED}) VALUES "
                             f"({marks}) RETURNING seq",
                             (*self.key, *score_values(batch, score))).fetchone()  # fmt: skip
        cur.execute(f"UPDATE counters SET scored_seq = ? WHERE {_KEY}", (seq, *self.key))
        (held,) = self._add(cur, "scored_rows", accepted=1, scored_rows=1)
        self._trim_oldest(cur, "scored", "scored_rows", int(held), self.window)
        return ACCEPTED, None, batch

    # ------------------------------------------------------------------ reading
    def counts(self) -> dict[str, int]:
        """``served``, ``deferred``, ``accepted``, ``flagged`` and ``scored_seq`` (the last
        scored row's number: it moves whenever any process scores a row)."""
        with self.backend.transaction(write=False) as cur:
            row = cur.execute("SELECT served, deferred, accepted, flagged, scored_seq FROM "
                              f"counters WHERE {_KEY}", self.key).fetchone()  # fmt: skip
        return dict(zip(("served", "deferred", "accepted", "flagged", "scored_seq"),
                        map(int, row), strict=True))  # fmt: skip

    def scored_since(self, seq: int) -> list[tuple[int, int, Score]]:
        """The scored rows after row number ``seq``, at most the window's last, oldest first:
        ``(seq, batch, score)``."""
        with self.backend.transaction(write=False) as cur:
            rows = cur.execute(f"SELECT seq, {_SCORED} FROM scored WHERE {_KEY} AND seq > ? "
                               "ORDER BY seq DESC LIMIT ?",
                               (*self.key, seq, self.window)).fetchall()  # fmt: skip
        return [(int(r[0]), *score_row(tuple(r[1:]))) for r in reversed(rows)]

    # ------------------------------------------------------------------ history
    def claim_history(self, now: float, every: float) -> bool:
        """Whether this caller writes the next snapshot: true for one caller per ``every``
        seconds, whichever process asks (``every`` 0: every caller)."""
        with self.backend.transaction() as cur:
            claimed = cur.execute(f"UPDATE counters SET last_history = ? WHERE {_KEY} AND "
                                  "last_history <= ?",
                                  (now, *self.key, now - every)).rowcount  # fmt: skip
        return claimed == 1

    def add_history(self, now: float, snapshot: dict[str, Any]) -> None:
        """Append one snapshot; the oldest beyond the retention's rows go."""
        keep = self.record.retention.history_rows
        with self.backend.transaction() as cur:
            self._lock(cur)
            text = json.dumps(snapshot, allow_nan=False)
            cur.execute(
                "INSERT INTO history (model, version, time, snapshot) VALUES (?, ?, ?, ?)",
                (*self.key, now, text),
            )
            (n,) = cur.execute(f"SELECT count(*) FROM history WHERE {_KEY}", self.key).fetchone()
            if n > keep:
                cur.execute(f"DELETE FROM history WHERE seq IN (SELECT seq FROM history WHERE "
                            f"{_KEY} ORDER BY seq LIMIT ?)", (*self.key, n - keep))  # fmt: skip

    def history(self, limit: int = 500) -> list[dict[str, Any]]:
        """The last ``limit`` snapshots, oldest first."""
        return [snap for _, snap in self._held(limit)]

    def history_after(self, after: int, limit: int = 500) -> tuple[list[dict[str, Any]], int, int]:
        """Of the last ``limit`` snapshots, those numbered above ``after`` (oldest first), the
        newest one's number (0: none) and how many the last ``limit`` are: what a reader
        holding the snapshots up to ``after`` needs to hold the last ``limit``."""
        held = self._held(limit)
        new = [snap for seq, snap in held if seq > after]
        return new, (held[-1][0] if held else 0), len(held)

    def _held(self, limit: int) -> list[tuple[int, dict[str, Any]]]:
        """The last ``limit`` (number, snapshot) pairs, oldest first. Snapshots read before are
        kept parsed: a call reads only those added since (rows go oldest first, so the oldest
        number held says which cached ones are still there)."""
        with self.backend.transaction(write=False) as cur:  # its lock guards the cache too
            lo, hi = cur.execute(f"SELECT min(seq), max(seq) FROM history WHERE {_KEY}",
                                 self.key).fetchone()  # fmt: skip
            last = self._history[-1][0] if self._history else 0
            if limit > self._history_limit or hi is None or hi < last:
                last, self._history, self._history_limit = 0, [], max(limit, 500)
            rows = cur.execute(f"SELECT seq, snapshot FROM history WHERE {_KEY} AND seq > ? "
                               "ORDER BY seq DESC LIMIT ?",
                               (*self.key, last, self._history_limit)).fetchall()  # fmt: skip
            kept = [h for h in self._history if h[0] >= (lo or 0)]
            new = [(int(seq), json.loads(text)) for seq, text in reversed(rows)]
            self._history = (kept + new)[-self._history_limit :]
            return self._history[-limit:]

    # ------------------------------------------------------------------ retention
    def expire(self, now: float | None = None) -> None:
        """Drop pending rows, received ids, request ids and snapshots older than the
        retention's ``max_age_s``."""
        now = time.time() if now is None else now
        cutoff = now - self.record.retention.max_age_s
        with self.backend.transaction() as cur:
            self._lock(cur)
            n, size = cur.execute(f"SELECT count(*), coalesce(sum(size), 0) FROM pending "
                                  f"WHERE {_KEY} AND time < ?",
                                  (*self.key, cutoff)).fetchone()  # fmt: skip
            if n:
                cur.execute(f"DELETE FROM pending WHERE {_KEY} AND time < ?", (*self.key, cutoff))
                self._add(cur, pending_rows=-int(n), pending_values=-int(size))
            for table, column in (("received", "received_rows"), ("requests", "request_rows"),
                                  ("history", None)):  # fmt: skip
                gone = cur.execute(f"DELETE FROM {table} WHERE {_KEY} AND time < ?",
                                   (*self.key, cutoff)).rowcount  # fmt: skip
                if column and gone:
                    self._add(cur, **{column: -gone})
        self._expired = now
