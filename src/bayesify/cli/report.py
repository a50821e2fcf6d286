"""``bayesify report STORE``: a results store as an HTML page and a markdown file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def report(
    store: Annotated[Path, typer.Argument(help="Results store (sqlite file) written by a bench.")],
    out: Annotated[
        Path | None, typer.Option(help="Folder for report.html, report.md and figures/.")
    ] = None,
) -> None:
    """Write one self-contained HTML page (figures embedded) and a markdown file with every
    table and figure of a results store [default folder: STORE's name without .db + _report]."""
    from bayesify.bench.store import StoreError
    from bayesify.bench.store_report import write_store_report

    if not store.is_file():
        typer.secho(f"error: no results store at {store}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=2)
    out = out if out is not None else store.with_name(store.stem + "_report")
    try:
        html_path, md_path = write_store_report(store, out)
    except StoreError as e:
        typer.secho(f"error: {e}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=2) from None
    typer.echo(f"wrote {html_path} and {md_path}")
