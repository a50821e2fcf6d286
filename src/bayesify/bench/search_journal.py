"""The search journal: Optuna's trials of every search of a run, logged to one file beside the
results store, and its check before a run resumes from it (a damaged line is one error naming
the file and how to recover)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bayesify.bench.store import StoreError

#: seconds a journal lock may stand unchanged before it counts as left by a killed writer
STALE_LOCK_S = 5


class SearchJournalError(StoreError):
    """A search journal that cannot be read (cut short or garbled): one line naming it and
    how to recover; it stops the run (every search of the run shares the file)."""


def check_journal(path: str | Path) -> None:
    """Raise :class:`SearchJournalError` unless every line of the journal file at ``path``
    (if any) is a whole JSON object ending in a newline, as Optuna writes them."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return
    for n, line in enumerate(data.splitlines(keepends=True), 1):
        why = "" if line.endswith(b"\n") else "cut short"
        if not why:
            try:
                why = "" if isinstance(json.loads(line), dict) else "not a JSON object"
            except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
                why = "not JSON"
        if why:
            keep = (f"keep its first {n - 1} line(s) (head -n {n - 1}: the trials logged "
                    "before it) to resume the searches, or " if n > 1 else "")  # fmt: skip
            raise SearchJournalError(f"the search journal {path} is damaged: line {n} is "
                                     f"{why}; {keep}move it aside to run them again")  # fmt: skip


def journal_storage(optuna: Any, path: str) -> Any:
    """Optuna's journal storage in the file at ``path`` (checked first; None: in memory)."""
    if not path:
        return None
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    check_journal(path)
    # a writer holds the lock for one appended line (milliseconds); one killed while holding it
    # leaves the lock behind, which Optuna's default breaks only after 30 s of waiting
    lock = optuna.storages.journal.JournalFileSymlinkLock(path, grace_period=STALE_LOCK_S)
    backend = optuna.storages.journal.JournalFileBackend(path, lock_obj=lock)
    return optuna.storages.journal.JournalStorage(backend)
