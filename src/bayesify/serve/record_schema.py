"""The record's tables, versioned: each schema version is one migration step from the one
before, and a new store runs every step in order (so a migrated store and a new one are the
same tables).

Version 1 holds what one model version served and received: ``counters`` (one row per model
and version: rows served and deferred, outcomes accepted and flagged, feedback requests
numbered, the last scored row and the sizes retention keeps in bounds), ``requests`` (request
ids, their row counts and the client's alias), ``pending`` (served rows awaiting an outcome,
their arrays as little-endian bytes), ``received`` (row ids whose outcome came) and ``scored``
(the rolling window's rows with their feedback request). Version 2 adds ``history`` (a
snapshot of the figures per model version over time) and ``counters.last_history``.

The SQL is shared by SQLite and PostgreSQL: ``{id}`` is an auto-incremented 64-bit key and
``{blob}`` a byte string; ``DOUBLE PRECISION`` and ``BIGINT`` mean the same in both.
"""

from __future__ import annotations

#: the version this code writes and reads
SCHEMA_VERSION = 2

_V1 = """
CREATE TABLE counters (
    model TEXT NOT NULL, version TEXT NOT NULL, task TEXT NOT NULL,
    served BIGINT NOT NULL DEFAULT 0, deferred BIGINT NOT NULL DEFAULT 0,
    accepted BIGINT NOT NULL DEFAULT 0, flagged BIGINT NOT NULL DEFAULT 0,
    batches BIGINT NOT NULL DEFAULT 0, scored_seq BIGINT NOT NULL DEFAULT 0,
    scored_rows BIGINT NOT NULL DEFAULT 0, pending_rows BIGINT NOT NULL DEFAULT 0,
    pending_values BIGINT NOT NULL DEFAULT 0, received_rows BIGINT NOT NULL DEFAULT 0,
    request_rows BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (model, version));
CREATE TABLE requests (
    seq {id}, model TEXT NOT NULL, version TEXT NOT NULL, request_id TEXT NOT NULL,
    n_rows BIGINT NOT NULL, alias TEXT, time DOUBLE PRECISION NOT NULL,
    UNIQUE (model, version, request_id));
CREATE INDEX requests_alias ON requests (model, version, alias);
CREATE INDEX requests_time ON requests (model, version, time);
CREATE TABLE pending (
    seq {id}, model TEXT NOT NULL, version TEXT NOT NULL, row_id TEXT NOT NULL,
    time DOUBLE PRECISION NOT NULL, defer BIGINT NOT NULL, size BIGINT NOT NULL,
    probs {blob}, mean DOUBLE PRECISION, std DOUBLE PRECISION, offsets {blob},
    noise {blob}, lower_end DOUBLE PRECISION, upper_end DOUBLE PRECISION,
    level DOUBLE PRECISION,
    UNIQUE (model, version, row_id));
CREATE INDEX pending_order ON pending (model, version, seq);
CREATE INDEX pending_time ON pending (model, version, time);
CREATE TABLE received (
    seq {id}, model TEXT NOT NULL, version TEXT NOT NULL, row_id TEXT NOT NULL,
    time DOUBLE PRECISION NOT NULL,
    UNIQUE (model, version, row_id));
CREATE INDEX received_order ON received (model, version, seq);
CREATE INDEX received_time ON received (model, version, time);
CREATE TABLE scored (
    seq {id}, model TEXT NOT NULL, version TEXT NOT NULL, batch BIGINT NOT NULL,
    defer BIGINT NOT NULL, label BIGINT, probs {blob}, sq_error DOUBLE PRECISION,
    abs_error DOUBLE PRECISION, log_prob DOUBLE PRECISION, pit DOUBLE PRECISION,
    covered BIGINT, level DOUBLE PRECISION);
CREATE INDEX scored_order ON scored (model, version, seq);
"""

_V2 = """
ALTER TABLE counters ADD COLUMN last_history DOUBLE PRECISION NOT NULL DEFAULT 0;
CREATE TABLE history (
    seq {id}, model TEXT NOT NULL, version TEXT NOT NULL, time DOUBLE PRECISION NOT NULL,
    snapshot TEXT NOT NULL);
CREATE INDEX history_order ON history (model, version, seq);
CREATE INDEX history_time ON history (model, version, time);
"""

#: MIGRATIONS[v - 1] makes version v from version v - 1 (version 0: an empty store)
MIGRATIONS = [_V1, _V2]

#: the table that holds the version; created with the first step
VERSION_TABLE = "CREATE TABLE record_schema (version BIGINT NOT NULL)"


class NewerSchema(ValueError):
    """A store written by a newer bayesify: refused, never changed."""


def statements(step: str, id_type: str, blob_type: str) -> list[str]:
    """The SQL statements of one migration step for a back end's key and byte types."""
    sql = step.format(id=id_type, blob=blob_type)
    return [s.strip() for s in sql.split(";") if s.strip()]


def steps_from(found: int | None, where: str) -> list[int]:
    """The versions to migrate through from ``found`` (None: an empty store) up to
    :data:`SCHEMA_VERSION`; :class:`NewerSchema` for a store this code cannot read."""
    if found is not None and found > SCHEMA_VERSION:
        raise NewerSchema(f"the record at {where} has schema version {found}; this bayesify "
                          f"reads up to version {SCHEMA_VERSION}: upgrade bayesify or give "
                          "another --store")  # fmt: skip
    return list(range((found or 0) + 1, SCHEMA_VERSION + 1))
