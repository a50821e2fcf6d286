"""Files written whole or not at all: the one way bayesify writes a file the user keeps.

Every writer streams into a temporary file beside its target (same folder, so the same file
system), flushes it to disk (``fsync``) and renames it over the target with ``os.replace``, which
is atomic: a reader, or a run killed at any moment, sees the previous file or the new one, never
a mix or a truncated file. On an error the temporary file is removed and the target is left
exactly as it was. Temporary names are unique (``.<stem>.tmp-<random><suffix>``), so a file left
behind by a killed run never blocks the next one; the suffix is kept for writers that pick the
format from it (matplotlib, numpy). The final file has the mode the user's umask gives a new file.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = [
    "atomic_open",
    "atomic_path",
    "fsync_folder",
    "is_temporary",
    "write_bytes",
    "write_text",
]

_TMP = ".tmp-"


def temporary_beside(target: Path) -> Path:
    """A new empty file beside ``target`` (created with the umask's mode) for its next version."""
    while True:
        tmp = target.with_name(f".{target.stem}{_TMP}{secrets.token_hex(6)}{target.suffix}")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:  # pragma: no cover - 48 random bits
            continue


def is_temporary(path: Path) -> bool:
    """Whether ``path`` is a temporary file of :func:`atomic_path` (e.g. left by a killed run)."""
    return path.name.startswith(".") and _TMP in path.name


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
    """The next version of ``target``, written at ``self.path`` (a temporary file beside it)
    until :meth:`commit` renames it over ``target`` or :meth:`discard` removes it."""

    def __init__(self, target: str | Path) -> None:
        self.target = Path(target)
        if self.target.is_dir():
            raise IsADirectoryError(f"{self.target} is a folder; expected a file")
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.path = temporary_beside(self.target)

    def commit(self) -> None:
        """Flush the new version to disk and rename it over the target (atomic)."""
        fd = os.open(self.path, os.O_RDONLY)  # fsync works read-only (umask 0o277 too)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(self.path, self.target)
        fsync_folder(self.target.parent)

    def discard(self) -> None:
        """Remove the new version; the target stays as it was."""
        self.path.unlink(missing_ok=True)


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
