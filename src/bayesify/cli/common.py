"""What every command shares: the console, one-line errors, ``key=value`` options, tables.

Only the command line prints; the library logs. Errors are one line in red and exit code 2.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

console = Console()


def fail(message: str) -> typer.Exit:
    """Print ``error: message`` on one line (never wrapped to the terminal's width) and return
    the exit (code 2) for the caller to raise."""
    console.print(f"[bold red]error:[/] {message}", soft_wrap=True)
    return typer.Exit(code=2)


def parse_options(options: list[str]) -> dict[str, Any]:
    """``key=value`` pairs; values parsed as JSON where they can be (numbers, booleans, null),
    else kept as strings. The method's config checks each against its declared type."""
    out: dict[str, Any] = {}
    for item in options:
        if "=" not in item:
            raise fail(f"--option takes key=value, got {item!r}")
        key, value = item.split("=", 1)
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def ints(text: str) -> tuple[int, ...]:
    """``"32,128"`` -> ``(32, 128)``; anything else is a one-line error."""
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise fail(f"expected comma-separated integers, got {text!r}") from None


def scores_table(title: str, rows: dict[str, dict[str, float]], keys: list[str]) -> Table:
    """One row per method, one column per score (3 decimals)."""
    table = Table(title=title)
    table.add_column("method")
    for k in keys:
        table.add_column(k, justify="right")
    for name, scores in rows.items():
        table.add_row(name, *(f"{scores[k]:.3f}" for k in keys))
    return table


def check_out(out: Path, overwrite: bool) -> None:
    """Fail before any work when a bundle could not be written to ``out``."""
    if out.exists() and not out.is_dir():
        raise fail(f"--out {out} is a file; a bundle is a folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise fail(f"--out {out} already exists and is not empty; pass --overwrite to replace it")
    parent = next(p for p in (out, *out.parents) if p.exists())
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise fail(f"--out {out} cannot be written ({parent} is not a writable folder)")
