"""A page's preamble: a hand-written markdown file (what ran, when, on what machine) that a
benchmark command puts under its page's title, so those notes live in a committed file and the
page is rebuilt whole by its command."""

from __future__ import annotations

import os
import re
from pathlib import Path


def check_preamble(path: str) -> None:
    """Refuse a named preamble file that does not exist (before any job runs)."""
    if path and not Path(path).is_file():
        raise ValueError(f"preamble file {path!r} does not exist")


def read_preamble(path: str, page: str) -> str:
    """The markdown file ``path`` ('' none) with its relative links rewritten to hold from
    ``page``'s folder (``benchmarks/uci/runs.md``'s ``(store.jsonl.gz)`` is
    ``(uci/store.jsonl.gz)`` in ``benchmarks/uci.md``)."""
    if not path:
        return ""
    source, target = Path(path).resolve().parent, Path(page).resolve().parent

    def rebase(m: re.Match[str]) -> str:
        link = m.group(2)
        if re.match(r"[a-z][a-z0-9+.-]*:|[#/]", link):  # a URL, an anchor or an absolute path
            return m.group(0)
        return f"{m.group(1)}({os.path.relpath(source / link, target)})"

    return re.sub(r"(\[[^\]]*\])\(([^)\s]+)\)", rebase, Path(path).read_text())
