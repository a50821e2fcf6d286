"""The record in SQLite (the standard library's ``sqlite3``): one file in WAL mode, shared by
every process on the machine that opens it (writers take turns: each write is one ``BEGIN
IMMEDIATE`` transaction, waiting up to :data:`BUSY_TIMEOUT_S` for another's).

Durability ``full`` is ``synchronous=FULL`` (the WAL is synced at every commit: a power cut
loses nothing committed); ``normal`` is ``synchronous=NORMAL`` (synced at checkpoints: a
killed process loses nothing committed, a power cut or an operating-system crash may lose the
last transactions, never the file's consistency). ``:memory:`` is a store of one process.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: how long a write waits for another process's transaction before failing
BUSY_TIMEOUT_S = 30.0
_SYNC = {"full": "FULL", "normal": "NORMAL"}


class SqliteBackend:
    """One connection to a SQLite file (or ``:memory:``), used by one thread at a time."""

    id_type = "INTEGER PRIMARY KEY AUTOINCREMENT"
    blob_type = "BLOB"

    def __init__(self, path: str | Path, durability: str = "normal") -> None:
        self.where = str(path)
        try:
            if self.where != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.where, timeout=BUSY_TIMEOUT_S,
                                         isolation_level=None, check_same_thread=False)  # fmt: skip
            if self.where != ":memory:":
                self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(f"PRAGMA synchronous={_SYNC[durability]}")
        except (sqlite3.Error, OSError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else e
            raise OSError(f"cannot open the record at {self.where}: {why} (--store names "
                          "another place)") from None  # fmt: skip
        self._lock = threading.Lock()

    @contextmanager
    def transaction(self, write: bool = True) -> Iterator[sqlite3.Cursor]:
        """A cursor inside one transaction (``write``: taking the write lock at once, so two
        writers never both read and then both write); committed on exit, rolled back on an
        exception."""
        with self._lock:
            cur = self._conn.cursor()
            cur.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield cur
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            cur.execute("COMMIT")

    def lock_schema(self, cur: sqlite3.Cursor) -> None:
        """Concurrent openers take turns already (``BEGIN IMMEDIATE``)."""

    def table_exists(self, cur: sqlite3.Cursor, name: str) -> bool:
        found = cur.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                            (name,)).fetchone()  # fmt: skip
        return found is not None

    def close(self) -> None:
        with self._lock:
            self._conn.close()
