"""The server's durable record: what each model version served, what came back, its rolling
window and its history, in a database every process and replica of a server can share.

``bayesify serve`` keeps it in SQLite (WAL mode) at ``--store PATH``, by default
:data:`DEFAULT_NAME` in the model repository's folder (for one bundle, in the bundle's parent
folder), or in PostgreSQL with ``--store postgresql://...`` (replicas on several machines; the
optional extra ``postgres``). ``--store memory`` keeps it in the process (lost when it ends).
:class:`Record` opens a store and migrates its schema (:mod:`.record_schema`);
:meth:`Record.ledger` gives one model version's view (:mod:`.record_ledger`). Retention
(:class:`Retention`) bounds what it keeps by rows and by age; ``durability`` says what a
killed process or a power cut may lose (:mod:`.record_sqlite`, :mod:`.record_postgres`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bayesify.serve.record_schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    VERSION_TABLE,
    statements,
    steps_from,
)
from bayesify.serve.record_sqlite import SqliteBackend

if TYPE_CHECKING:
    from bayesify.serve.record_ledger import Ledger

log = logging.getLogger(__name__)

#: the record's file name in the repository folder (hidden: the folder scan skips it)
DEFAULT_NAME = ".bayesify-record.sqlite3"
#: ``--store`` for a record held in memory
MEMORY = "memory"


class Durability(StrEnum):
    """What a commit survives: ``full`` a power cut, ``normal`` a killed process."""

    FULL = "full"
    NORMAL = "normal"


@dataclass(frozen=True)
class Retention:
    """How long the record keeps rows: served rows awaiting outcomes, received ids, request
    ids and history snapshots older than ``max_age_s`` are dropped, and at most
    ``history_rows`` snapshots per model version are kept (the oldest go first). Pending rows
    are also bounded by the monitor's ``max_pending`` rows and ``max_pending_values`` numbers,
    the scored rows by its window."""

    max_age_s: float = 30 * 86400.0
    history_rows: int = 10_000


@dataclass(frozen=True)
class RecordOptions:
    """What a server's monitors keep in the record: the ``store`` (None: one in the process's
    memory), how often a snapshot is taken while requests are served (``history_every``
    seconds; feedback always takes one) and the bounds of rows awaiting outcomes
    (``max_pending`` rows, ``max_pending_values`` stored numbers: a regression row keeps its T
    sample means and noise)."""

    store: Record | None = None
    history_every: float = 60.0
    max_pending: int = 100_000
    max_pending_values: int = 4_000_000


class Record:
    """An open store (see the module docstring); thread-safe, one connection per process."""

    def __init__(self, backend: Any, retention: Retention | None = None) -> None:
        self.backend = backend
        self.retention = retention or Retention()
        self.where: str = backend.where
        self._migrate()

    @classmethod
    def open(cls, target: str | Path, durability: Durability | str = Durability.NORMAL,
             retention: Retention | None = None) -> Record:  # fmt: skip
        """The store at ``target``: a SQLite file, ``postgresql://...`` (or ``postgres://``)
        or :data:`MEMORY`. An ``OSError`` or ``ValueError`` in one line when it cannot be
        opened or was written by a newer bayesify."""
        level = Durability(durability).value
        text = str(target)
        if text.startswith(("postgresql://", "postgres://")):
            from bayesify.serve.record_postgres import PostgresBackend

            return cls(PostgresBackend(text, level), retention)
        path = ":memory:" if text == MEMORY else text
        return cls(SqliteBackend(path, level), retention)

    @classmethod
    def memory(cls, retention: Retention | None = None) -> Record:
        """A store of this process only (what a monitor built without one uses)."""
        return cls(SqliteBackend(":memory:"), retention)

    @staticmethod
    def default_path(served: Path) -> Path:
        """Where ``bayesify serve PATH`` keeps its record without ``--store``: in ``PATH`` when
        it is a folder of bundles, else beside the bundle."""
        from bayesify.serve.folders import is_folder_of_bundles

        folder = served if is_folder_of_bundles(served) else served.resolve().parent
        return folder / DEFAULT_NAME

    def _migrate(self) -> None:
        b = self.backend
        with b.transaction() as cur:
            b.lock_schema(cur)
            found = None
            if b.table_exists(cur, "record_schema"):
                row = cur.execute("SELECT max(version) FROM record_schema").fetchone()
                found = None if row is None or row[0] is None else int(row[0])
            steps = steps_from(found, self.where)
            if found is None and steps:
                cur.execute(VERSION_TABLE)
            for version in steps:
                for s in statements(MIGRATIONS[version - 1], b.id_type, b.blob_type):
                    cur.execute(s)
                cur.execute("DELETE FROM record_schema")
                cur.execute("INSERT INTO record_schema (version) VALUES (?)", (version,))
        if steps and found is not None:
            log.info("record %s migrated from schema version %d to %d", self.where, found,
                     SCHEMA_VERSION)  # fmt: skip

    def ledger(self, model: str, version: str, task: str, **limits: Any) -> Ledger:
        """The view of one model version (see :class:`~.record_ledger.Ledger`)."""
        from bayesify.serve.record_ledger import Ledger

        return Ledger(self, model, version, task, **limits)

    def close(self) -> None:
        self.backend.close()
