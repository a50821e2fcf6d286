"""The results store's file: made whole (a run killed while creating it leaves no file), and
sqlite's errors as one line naming it (:class:`StoreError`)."""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bayesify.atomic import fsync_folder, remove_stale_temporaries, temporary_beside


class StoreError(ValueError):
    """A results store, or a file of rows to import, that cannot be read: one line saying which."""


#: how to go on from a damaged store
RECOVER = (
    "move it aside and run again: its jobs run anew (--seed-from imports an export of its rows)"
)


def store_error(path: str, error: BaseException) -> StoreError:
    """An sqlite error (or a :class:`StoreError`) as one line naming the store file."""
    if isinstance(error, StoreError):
        return error
    text = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, sqlite3.OperationalError):  # locked, disk full, no permission
        return StoreError(f"results store {path}: sqlite: {text}")
    return StoreError(f"{path} is not a readable results store (sqlite: {text}); {RECOVER}")


def guarded(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` with sqlite's errors as one :class:`StoreError` line naming the file."""

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.DatabaseError as e:
            raise store_error(self.path, e) from None

    return call


def create_store(path: Path, schema: str) -> None:
    """A new, empty store at ``path``, made beside it and linked into place whole: a run
    killed while creating it leaves no file (an empty file at ``path`` is refused)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    tmp = temporary_beside(path)
    try:
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(schema)
        finally:
            conn.close()
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        with contextlib.suppress(FileExistsError):  # another process made it first: keep it
            os.link(tmp, path)
        fsync_folder(path.parent)
    finally:
        tmp.unlink(missing_ok=True)
