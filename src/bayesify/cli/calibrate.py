"""``bayesify calibrate``: fit a bundle's deferral policy on validation data and save it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bayesify.cli.common import Threads, set_threads


def calibrate(
    bundle: Annotated[Path, typer.Argument(help="Bundle folder to calibrate (rewritten).")],
    data: Annotated[
        str | None,
        typer.Option(
            help="Validation data: a table file (CSV, Parquet, .npz) of rows the model has not "
            "trained on, with the bundle's feature columns in raw units and the target column; "
            "omit (or give the bundle's dataset name) for the validation split of the built-in "
            "dataset the bundle was trained with."
        ),
    ] = None,
    target: Annotated[
        str | None,
        typer.Option(
            help="Target column of --data and --test [default: the column the bundle was "
            "trained on]."
        ),
    ] = None,
    test: Annotated[
        str | None,
        typer.Option(
            help="A table file of held-out rows to report the policy's figures on (coverage, "
            "error on all and on accepted rows) [default: the built-in test split; none for "
            "--data FILE]."
        ),
    ] = None,
    score: Annotated[
        str,
        typer.Option(help="mi, entropy, max_prob (1 - max probability), std, epistemic_variance."),
    ] = "mi",
    coverage: Annotated[
        float | None, typer.Option(help="Target fraction of rows accepted, in (0, 1].")
    ] = None,
    error: Annotated[
        float | None, typer.Option(help="Target error on accepted rows (instead of --coverage).")
    ] = None,
    error_metric: Annotated[
        str | None, typer.Option(help="error (classification); rmse or mae (regression).")
    ] = None,
    samples: Annotated[int, typer.Option(help="MC samples T per prediction.", min=1)] = 32,
    seed: Annotated[int, typer.Option()] = 0,
    test_limit: Annotated[
        int | None,
        typer.Option(
            help="Check the policy on only the first this many test rows (0: skip).", min=0
        ),
    ] = None,
    threads: Threads = None,
) -> None:
    """Fit a deferral policy (a threshold on an uncertainty score) for a target coverage or a
    target error on accepted rows, on a table of your rows (--data FILE) or the bundle's
    validation split, store it in the bundle, and check it on held-out rows."""
    from bayesify.app.calibration import calibrate_bundle, dataset_seed_note, training_table_note
    from bayesify.cli.common import console, fail
    from bayesify.data.tables import is_table_path
    from bayesify.io import read_bundle, write_bundle
    from bayesify.methods import load

    if (coverage is None) == (error is None):
        raise fail("give exactly one of --coverage and --error")
    set_threads(threads)
    table = data if data is not None and is_table_path(data) else None
    try:
        method = load(bundle)
        if data is not None and table is None and data != method.metadata.get("data"):
            raise ValueError(f"--data {data!r}: not a table file (.csv, .parquet, .npz) nor the "
                             f"bundle's own dataset ({method.metadata.get('data')!r})")  # fmt: skip
        if target is not None and table is None and test is None:
            raise ValueError("--target names the target column of --data FILE or --test FILE")
        notes = [dataset_seed_note(method.metadata) if table is None else None,
                 training_table_note(method.metadata, table)]  # fmt: skip
        for note in filter(None, notes):
            console.print(f"[yellow]warning:[/] {note}")
        res = calibrate_bundle(method, score=score, coverage=coverage, error=error,
                               error_metric=error_metric, samples=samples, seed=seed,
                               test_limit=test_limit, data=table, target=target,
                               test=test)  # fmt: skip
        tensors, cfg = read_bundle(bundle)  # rewrite only the metadata, weights untouched
        cfg.pop("format", None)
        cfg["metadata"] = method.metadata
        write_bundle(bundle, tensors, cfg)
    except (ValueError, TypeError, OSError) as e:
        raise fail(str(e)) from None
    p = res.policy
    console.print(f"deferral policy: defer when {p.score.value} > {p.threshold:.6g} "
                  f"(target {p.target})")  # fmt: skip
    for name, fig in (("validation", p.validation), ("test", res.test)):
        if fig is None:
            if name == "test" and test_limit != 0:
                console.print("test: no held-out rows checked (pass --test FILE)")
            continue
        console.print(
            f"{name}: n = {fig['n']}, coverage {fig['coverage']:.4f}, "
            f"{fig['error_metric']} all {_num(fig['error_all'])} -> accepted "
            f"{_num(fig['error_accepted'])}"
        )
    console.print(f"saved to {bundle}/config.json")


def _num(v: float | None) -> str:
    """A figure to 4 decimals; ``-`` where there is none (e.g. no rows accepted)."""
    return "-" if v is None else f"{v:.4f}"
