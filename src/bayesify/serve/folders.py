"""The bundles a folder holds, as ``bayesify serve DIR`` reads it.

``DIR/<name>/`` is a bundle (version 1 of model ``name``) or holds version folders,
``DIR/<name>/<version>/``, each a bundle. A version folder's name is a plain integer: ASCII
digits without a leading zero, from 1 to 2**63 - 1. A bundle in a folder named otherwise
(``01``, ``1.5``, ``abc``, ``²``) is not served: it is listed beside the model's versions with
the reason, and never keeps the other versions or models from being served. Hidden folders
(``.name``) and folders without a bundle are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from bayesify.io import CONFIG, WEIGHTS

_PLAIN = re.compile(r"0|[1-9][0-9]*")
#: the largest version (a signed 64-bit integer, as clients of the v2 protocol read it)
MAX_VERSION = 2**63 - 1


def is_bundle(path: Path) -> bool:
    """Whether folder ``path`` looks like a bundle (it has the bundle's config file)."""
    return (path / CONFIG).is_file() or (path / WEIGHTS).is_file()


def version_number(text: str) -> int | None:
    """The version a folder name or request names, or None if it is not a plain integer in
    1 .. :data:`MAX_VERSION` (``str.isdigit`` takes ``²``, which ``int`` refuses)."""
    if not _PLAIN.fullmatch(text):
        return None
    number = int(text)
    return number if 1 <= number <= MAX_VERSION else None


def _why_not(name: str) -> str:
    if _PLAIN.fullmatch(name):
        return f"version folder {name!r}: versions run from 1 to {MAX_VERSION}"
    return (f"version folder {name!r} is not a plain integer (ASCII digits 0-9, no leading "
            "zero); rename it to serve it")  # fmt: skip


@dataclass
class Scan:
    """What :func:`scan` found: model name -> {version: bundle folder}, and per model the
    version folders not served -> why."""

    found: dict[str, dict[int, Path]] = field(default_factory=dict)
    problems: dict[str, dict[str, str]] = field(default_factory=dict)


def scan(root: Path) -> Scan:
    """The bundles in folder ``root`` (see the module docstring); a model folder that cannot
    be read is a problem of that model, not an error."""
    out = Scan()
    for sub in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if is_bundle(sub):
            out.found[sub.name] = {1: sub}
            continue
        versions: dict[int, Path] = {}
        problems: dict[str, str] = {}
        try:
            children = sorted(v for v in sub.iterdir() if not v.name.startswith("."))
            for v in children:
                if not (v.is_dir() and is_bundle(v)):
                    continue
                number = version_number(v.name)
                if number is None:
                    problems[v.name] = _why_not(v.name)
                else:
                    versions[number] = v
        except OSError as e:
            problems[""] = f"cannot read {sub}: {e.strerror or e}"
        if versions:
            out.found[sub.name] = dict(sorted(versions.items()))
        if problems:
            out.problems[sub.name] = problems
    return out


def discover(root: Path) -> dict[str, dict[int, Path]]:
    """The bundles in folder ``root`` that can be served: model name -> {version: folder}."""
    return scan(root).found


def is_folder_of_bundles(path: Path) -> bool:
    """Whether ``path`` is a folder that is no bundle itself but holds bundles (also in
    folders whose names are not versions)."""
    if not path.is_dir() or is_bundle(path):
        return False
    found = scan(path)
    return bool(found.found or found.problems)
