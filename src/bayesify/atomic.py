"""Files written whole or not at all: the one way bayesify writes a file the user keeps.

Every writer streams into a temporary file beside its target (same folder, so the same file
system), flushes it to disk (``fsync``) and renames it over the target with ``os.replace``, which
is atomic: a reader, or a run killed at any moment, sees the previous file or the new one, never
a mix or a truncated file. On an error the temporary file is removed and the target is left
exactly as it was. Temporary names are unique (``.<stem>.tmp-<random><suffix>``), so a file left
behind by a killed run never blocks the next one; the suffix is kept for writers that pick the
format from it (matplotlib, numpy). The final file has the mode the user's umask gives a new file.

A writer holds an exclusive ``flock`` on its temporary file until it is renamed or removed; the
system drops it when the process dies. So the next write of the same target removes the
temporaries of killed runs beside it (:func:`remove_stale_temporaries`): only names of exactly
this pattern that no live process holds and that have not changed for ``STALE_SECONDS``.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = [
    "atomic_open",
    "atomic_path",
    "fsync_folder",
    "is_temporary",
    "remove_stale_temporaries",
    "write_bytes",
    "write_text",
]

_TMP = ".tmp-"
_TOKEN = 6  # random bytes of a temporary name (12 hex digits)

try:  # POSIX: a live writer's lock marks its temporary file as in use
    import fcntl
except ImportError:  # pragma: no cover - Windows: age alone decides
    fcntl = None  # type: ignore[assignment]

#: a temporary file no live process holds, unchanged this long, was left by a killed run
STALE_SECONDS = 60.0 if fcntl is not None else 86400.0


def temporary_beside(target: Path) -> Path:
    """A new empty file beside ``target`` (created with the umask's mode) for its next version."""
    while True:
        tmp = target.with_name(f".{target.stem}{_TMP}{secrets.token_hex(_TOKEN)}{target.suffix}")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:  # pragma: no cover - 48 random bits
            continue


def is_temporary(path: Path) -> bool:
    """Whether ``path`` is a temporary file of :func:`atomic_path` (e.g. left by a killed run)."""
    return path.name.startswith(".") and _TMP in path.name


def _temporary_name(target: Path) -> re.Pattern[str]:
    """The exact names :func:`temporary_beside` gives ``target``'s temporary files."""
    hexdigits = f"[0-9a-f]{{{2 * _TOKEN}}}"
    stem, suffix = re.escape(target.stem), re.escape(target.suffix)
    return re.compile(rf"\.{stem}{re.escape(_TMP)}{hexdigits}{suffix}")


def _try_lock(path: Path) -> int | None:
    """An fd holding an exclusive lock on ``path``, or None when another process holds one
    (or the file is gone). Without ``fcntl``: an open fd, no lock."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
    return fd


def remove_stale_temporaries(target: str | Path, stale_seconds: float | None = None) -> list[Path]:
    """Remove the temporary files of ``target`` that killed runs left beside it: names of
    exactly :func:`temporary_beside`'s pattern, unchanged for ``stale_seconds`` (default
    ``STALE_SECONDS``) and not locked by a live writer. Returns the removed paths."""
    target = Path(target)
    limit = STALE_SECONDS if stale_seconds is None else stale_seconds
    pattern = _temporary_name(target)
    removed: list[Path] = []
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        if not pattern.fullmatch(entry.name):
            continue
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            if now - entry.stat(follow_symlinks=False).st_mtime < limit:
                continue
        except OSError:
            continue
        path = Path(entry.path)
        fd = _try_lock(path)
        if fd is None:  # a live writer holds it
            continue
        try:
            path.unlink()
            removed.append(path)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


def fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


class Replacement:
    """The next version of ``target``, written at ``self.path`` (a temporary file beside it,
    locked while this process writes it) until :meth:`commit` renames it over ``target`` or
    :meth:`discard` removes it. Stale temporaries of ``target`` left by killed runs go first."""

    def __init__(self, target: str | Path) -> None:
        self.target = Path(target)
        if self.target.is_dir():
            raise IsADirectoryError(f"{self.target} is a folder; expected a file")
        self.target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(self.target)
        self.path = temporary_beside(self.target)
        self._lock = _try_lock(self.path)

    def _unlock(self) -> None:
        fd, self._lock = self._lock, None
        if fd is not None:
            os.close(fd)

    def commit(self) -> None:
        """Flush the new version to disk and rename it over the target (atomic)."""
        fd = os.open(self.path, os.O_RDONLY)  # fsync works read-only (umask 0o277 too)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(self.path, self.target)
        self._unlock()
        fsync_folder(self.target.parent)

    def discard(self) -> None:
        """Remove the new version; the target stays as it was."""
        self.path.unlink(missing_ok=True)
        self._unlock()


@contextlib.contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """A temporary path beside ``target`` to write to; renamed over ``target`` when the block
    ends without an error, removed (``target`` untouched) when it raises. Folders are created."""
    new = Replacement(target)
    try:
        yield new.path
        new.commit()
    except BaseException:
        new.discard()
        raise


@contextlib.contextmanager
def atomic_open(target: str | Path, mode: str = "w", **kwargs: Any) -> Iterator[IO[Any]]:
    """``open(tmp, mode)`` for a temporary file beside ``target``, renamed over it on success."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes a new file: mode 'w' or 'wb', got {mode!r}")
    with atomic_path(target) as tmp, open(tmp, mode, **kwargs) as f:
        yield f


def write_text(target: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``target`` atomically; returns the path."""
    with atomic_open(target, "w", encoding=encoding) as f:
        f.write(text)
    return Path(target)


def write_bytes(target: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``target`` atomically; returns the path."""
    with atomic_open(target, "wb") as f:
        f.write(data)
    return Path(target)
