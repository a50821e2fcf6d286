"""Where the real data lives: ``data_root()`` and the per-loader ``root=`` override."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import DataError

__all__ = ["DATA_ENV_VAR", "data_root", "resolve_root"]

DATA_ENV_VAR = "BAYESIFY_DATA"


def _candidates() -> list[Path]:
    """Fallback locations, in order: ``<cwd>/../shared/data``, then ``<ancestor>/shared/data``
    for every ancestor of this file (i.e. ``<repo>/../shared/data`` for a source checkout)."""
    found = [Path.cwd().parent / "shared" / "data"]
    here = Path(__file__).resolve()
    found += [parent / "shared" / "data" for parent in here.parents]
    return found


def data_root() -> Path:
    """The data root folder (it holds ``uci/``, ``fashion-mnist/``, ``mnist/``).

    Resolution order: the environment variable ``BAYESIFY_DATA`` (must then be a folder; no
    fallback), ``../shared/data`` relative to the current working directory, and finally a
    ``shared/data`` folder next to the repository (found by walking up from this file).
    Raises ``DataError`` listing every place tried when none exists.
    """
    env = os.environ.get(DATA_ENV_VAR)
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise DataError(f"{DATA_ENV_VAR}={env!r} is set but is not a folder")
        return path.resolve()
    tried = _candidates()
    for path in tried:
        if path.is_dir():
            return path.resolve()
    listed = ", ".join(str(p) for p in dict.fromkeys(tried))
    raise DataError(f"no data folder found: set {DATA_ENV_VAR} or pass root=; tried {listed}")


def resolve_root(root: str | Path | None) -> Path:
    """``root`` as a checked folder, or ``data_root()`` when it is None."""
    if root is None:
        return data_root()
    path = Path(root).expanduser()
    if not path.is_dir():
        raise DataError(f"data root {str(path)!r} does not exist or is not a folder")
    return path
