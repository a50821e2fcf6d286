"""``bayesify predict BUNDLE INPUT --out OUTPUT``: a file of raw rows in, one record per row out."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bayesify.cli.common import Threads, set_threads


def predict(
    bundle: Annotated[Path, typer.Argument(help="Bundle folder (bayesify train or method.save).")],
    input: Annotated[Path, typer.Argument(help="Rows to predict: a CSV, Parquet or .npz file.")],
    out: Annotated[
        Path, typer.Option(help="Output file; its suffix (.csv, .parquet, .npz) picks the format.")
    ],
    samples: Annotated[
        int | None, typer.Option(help="MC samples T per prediction.", show_default="100", min=1)
    ] = None,
    level: Annotated[float, typer.Option(help="Interval / prediction-set level.")] = 0.9,
    net: Annotated[
        str | None,
        typer.Option(
            help="package.module:factory returning a new instance of the bundle's "
            "own network (needed when it is not an nn.Sequential of torch "
            "layers); the module must be importable (PYTHONPATH)."
        ),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Seed for reproducible samples.")] = None,
    on_error: Annotated[
        str,
        typer.Option(
            help="A row with bad values: fail (stop, naming the row) or skip "
            "(leave it out; listed at the end and in <OUT stem>.skipped.csv beside OUT, "
            "e.g. pred.csv -> pred.skipped.csv)."
        ),
    ] = "fail",
    chunk_rows: Annotated[int, typer.Option(help="Rows read and predicted at a time.", min=1)] = (
        65536
    ),
    keep: Annotated[
        str | None, typer.Option(help="Input columns copied to the output (e.g. an id).")
    ] = None,
    with_samples: Annotated[
        bool, typer.Option("--with-samples", help="Also write each row's T samples.")
    ] = False,
    scores: Annotated[
        str | None,
        typer.Option(
            help="OOD scores to add, comma-separated (max_prob, max_logit, energy, entropy, "
            "mutual_information, mahalanobis, density): a column ood_<name> each, higher = "
            "more likely out of distribution."
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option(help="Replace an existing output file (and its skipped-rows list).")
    ] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    threads: Threads = None,
) -> None:
    """Predict every row of a file with a bundle: the prediction and its uncertainty per row
    (regression: mean, std, epistemic and aleatoric variance, interval; classification: label,
    class probabilities, entropy, mutual information, prediction set), in the units of the data
    the bundle was trained on."""
    from rich.console import Console

    from bayesify.predictive.ood import check_names
    from bayesify.predictor import OnError, Predictor, predict_file

    console = Console()

    def fail(message: str) -> typer.Exit:
        console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
        return typer.Exit(code=2)

    if out.exists() and not overwrite:
        raise fail(f"--out {out} exists; pass --overwrite to replace it")
    if on_error not in tuple(OnError):
        raise fail(f"--on-error must be fail or skip, got {on_error!r}")
    set_threads(threads)
    try:
        names = check_names([s.strip() for s in scores.split(",") if s.strip()] if scores else [])
        predictor = Predictor.load(bundle, net=net)
        summary = predict_file(
            predictor,
            input,
            out,
            samples=samples,
            level=level,
            seed=seed,
            on_error=on_error,
            chunk_rows=chunk_rows,
            keep=[k.strip() for k in keep.split(",") if k.strip()] if keep else None,
            with_samples=with_samples,
            progress=progress,
            overwrite=overwrite,
            scores=names,
        )
    except (ValueError, TypeError, OSError) as e:
        raise fail(str(e)) from None
    console.print(
        f"predicted {summary.rows} row(s) in {summary.seconds:.1f} s "
        f"({summary.rows_per_second:,.0f} rows/s) -> {out}",
        highlight=False,
    )
    if summary.skipped:
        shown = sorted(summary.skipped)[:20]
        console.print(
            f"skipped {len(summary.skipped)} row(s), listed in {summary.skipped_file}:",
            highlight=False,
        )
        for row in shown:
            console.print(f"  row {row}: {summary.skipped[row]}", highlight=False)
        if len(summary.skipped) > len(shown):
            console.print(f"  ... and {len(summary.skipped) - len(shown)} more", highlight=False)
