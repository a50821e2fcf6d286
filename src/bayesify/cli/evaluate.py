"""``bayesify evaluate BUNDLE [--data FILE]``: a bundle's scores on its built-in test split or on
a table of labelled rows, as a table on screen or a CSV / Markdown / JSON file, and a
calibration figure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from bayesify.cli.common import Threads, console, fail, scores_table, set_threads

#: --format values, and the format an --out suffix implies
FORMATS = ("table", "csv", "markdown", "json")
SUFFIX_FORMATS = {".csv": "csv", ".md": "markdown", ".markdown": "markdown", ".json": "json"}


def evaluate(
    bundle: Annotated[Path, typer.Argument(help="Bundle folder written by `bayesify train`.")],
    data: Annotated[
        Path | None,
        typer.Option(
            help="Labelled rows to score: a CSV, Parquet or .npz table with the feature "
            "columns in raw units and the target column.",
            show_default="the test split of the bundle's built-in dataset",
        ),
    ] = None,
    target: Annotated[
        str | None,
        typer.Option(help="--data: the target column.", show_default="the bundle's target"),
    ] = None,
    samples: Annotated[int, typer.Option(help="MC samples T.", min=1)] = 100,
    limit: Annotated[
        int | None, typer.Option(help="Score only the first this many rows.", min=1)
    ] = None,
    levels: Annotated[
        str,
        typer.Option("--levels", help="--data: interval / prediction-set levels, comma-separated."),
    ] = "0.5,0.8,0.9,0.95",
    seed: Annotated[int, typer.Option(help="Seed of the samples.")] = 0,
    on_error: Annotated[
        str,
        typer.Option(
            help="--data: a row with a bad feature or target value: fail (stop, naming the "
            "row) or skip (leave it out; listed at the end)."
        ),
    ] = "fail",
    format: Annotated[
        str | None,
        typer.Option(
            help="table, csv, markdown or json: how the scores are printed, or written to --out.",
            show_default="by the suffix of --out (.csv, .md, .json), else table",
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Write the scores to this file.")] = None,
    figure: Annotated[
        Path | None,
        typer.Option(
            help="--data: the calibration figure (PNG): a reliability diagram, or a PIT "
            "histogram and coverage against level for regression.",
            show_default="OUT with the suffix .png when --out is given",
        ),
    ] = None,
    chunk_rows: Annotated[int, typer.Option(help="--data: rows read at a time.", min=1)] = 65536,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    threads: Threads = None,
) -> None:
    """Score a saved bundle on the test split it was trained for, or on a table of labelled
    rows (--data FILE): regression RMSE, NLL/PLL, CRPS and interval coverage and width;
    classification accuracy, NLL, Brier, ECE and prediction-set coverage and size; the
    epistemic share of the predictive variance."""
    from bayesify.app.evaluation import parse_levels
    from bayesify.predictor import OnError

    fmt = format or SUFFIX_FORMATS.get(out.suffix.lower() if out else "", "table")
    if fmt not in FORMATS:
        raise fail(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if out is not None and fmt == "table":
        raise fail(f"--out {out}: give --format csv, markdown or json (or a .csv, .md or "
                   ".json suffix)")  # fmt: skip
    if on_error not in tuple(OnError):
        raise fail(f"--on-error must be fail or skip, got {on_error!r}")
    if data is None and (target or figure):
        raise fail("--target and --figure go with --data FILE")
    try:
        level_list = parse_levels(levels)
    except ValueError as e:
        raise fail(f"--levels: {e}") from None
    set_threads(threads)
    if data is None:
        title, scores, context = _builtin(bundle, samples, limit)
    else:
        title, scores, context = _table(bundle, data, target, samples, limit, level_list, seed,
                                        on_error, progress, chunk_rows, figure, out)  # fmt: skip
    _report(title, scores, context, fmt, out)


def _builtin(
    bundle: Path, samples: int, limit: int | None
) -> tuple[str, dict[str, float], dict[str, Any]]:
    """Scores on the test split of the built-in dataset the bundle names."""
    from bayesify.app.jobs import job_from_bundle
    from bayesify.methods import load

    try:
        method = load(bundle)
        if method.metadata.get("data") is None and method.metadata.get("table"):
            raise ValueError(f"this bundle was trained on the table {method.metadata['table']}; "
                             "pass --data FILE with labelled rows to score (rows it was not "
                             "trained on)")  # fmt: skip
        job = job_from_bundle(method)
        scores = job.evaluate(samples, limit=limit)
    except (ValueError, TypeError, OSError) as e:
        raise fail(str(e)) from None
    n = len(job.test[0]) if limit is None else min(limit, len(job.test[0]))
    rows = "" if limit is None else f", first {n} rows"
    title = f"{bundle} on {job.metadata['data']} test{rows}, T = {samples}"
    context = {"bundle": str(bundle), "method": method.name, "data": job.metadata["data"],
               "rows": n, "samples": samples}  # fmt: skip
    return title, {k: scores[k] for k in job.score_keys}, context


def _table(
    bundle: Path,
    data: Path,
    target: str | None,
    samples: int,
    limit: int | None,
    levels: tuple[float, ...],
    seed: int,
    on_error: str,
    progress: bool,
    chunk_rows: int,
    figure: Path | None,
    out: Path | None,
) -> tuple[str, dict[str, float], dict[str, Any]]:
    """Scores on the labelled rows of ``data``; writes the calibration figure."""
    from bayesify.app.evaluation import calibration_figure, evaluate_table
    from bayesify.predictor import Predictor

    if figure is None and out is not None:
        figure = out.with_suffix(".png")
    try:
        predictor = Predictor.load(bundle)
        ev = evaluate_table(predictor, data, target=target, samples=samples, seed=seed,
                            levels=levels, on_error=on_error, limit=limit,
                            chunk_rows=chunk_rows, progress=progress)  # fmt: skip
        if figure is not None:
            calibration_figure(ev, figure, title=predictor.method.name)
    except (ValueError, TypeError, OSError) as e:
        raise fail(str(e)) from None
    for w in ev.warnings:
        console.print(f"[yellow]warning:[/] {w}", highlight=False)
    skipped = f", {len(ev.skipped)} skipped" if ev.skipped else ""
    title = f"{bundle} on {data}: {ev.rows} rows{skipped}, T = {samples}"
    context = {"bundle": str(bundle), "method": predictor.method.name, "data": str(data),
               "task": ev.task.value, "rows": ev.rows, "skipped": len(ev.skipped),
               "samples": samples, "seed": seed, "levels": list(levels),
               "conformal": ev.conformal is not None}  # fmt: skip
    if ev.skipped:
        shown = sorted(ev.skipped)[:20]
        console.print(f"skipped {len(ev.skipped)} row(s):", highlight=False)
        for row in shown:
            console.print(f"  row {row}: {ev.skipped[row]}", highlight=False)
        if len(ev.skipped) > len(shown):
            console.print(f"  ... and {len(ev.skipped) - len(shown)} more", highlight=False)
    if figure is not None:
        console.print(f"calibration figure -> {figure}", highlight=False)
    return title, ev.scores, context


def render(scores: dict[str, float], context: dict[str, Any], fmt: str) -> str:
    """The scores as CSV (``metric,value``), a Markdown table or JSON (``context`` and
    ``scores``)."""
    if fmt == "json":
        return json.dumps({**context, "scores": scores}, indent=2) + "\n"
    if fmt == "csv":
        return "metric,value\n" + "".join(f"{k},{v!r}\n" for k, v in scores.items())
    lines = ["| metric | value |", "| --- | ---: |"]
    lines += [f"| {k} | {v:.6g} |" for k, v in scores.items()]
    return "\n".join(lines) + "\n"


def _report(
    title: str, scores: dict[str, float], context: dict[str, Any], fmt: str, out: Path | None
) -> None:
    from bayesify.atomic import write_text

    if out is not None:
        try:
            write_text(out, render(scores, context, fmt))
        except OSError as e:
            raise fail(f"--out {out}: {e}") from None
        console.print(title, highlight=False)
        console.print(f"scores ({fmt}) -> {out}", highlight=False)
    elif fmt == "table" and "levels" not in context:  # built-in: one row, as train prints
        console.print(scores_table(title, {context["method"]: scores}, list(scores)))
    elif fmt == "table":  # many figures: one row each
        from rich.table import Table

        table = Table(title=title)
        table.add_column("metric")
        table.add_column(context["method"], justify="right")
        for k, v in scores.items():
            table.add_row(k, f"{v:.4g}")
        console.print(table)
    else:
        typer.echo(render(scores, context, fmt), nl=False)
