"""``bayesify calibrate``: fit a bundle's deferral policy on validation data and save it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def calibrate(
    bundle: Annotated[Path, typer.Argument(help="Bundle folder to calibrate (rewritten).")],
    data: Annotated[
        str | None,
        typer.Option(
            help="Validation data: omit (or the bundle's dataset name) for the "
            "validation split the bundle was trained with."
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
) -> None:
    """Fit a deferral policy (a threshold on an uncertainty score) for a target coverage or a
    target error on accepted rows, store it in the bundle, and check it on the test split."""
    from bayesify.app.calibration import calibrate_bundle, dataset_seed_note
    from bayesify.cli.common import console, fail
    from bayesify.io import read_bundle, write_bundle
    from bayesify.methods import load

    if (coverage is None) == (error is None):
        raise fail("give exactly one of --coverage and --error")
    try:
        method = load(bundle)
        if data is not None and data != method.metadata.get("data"):
            raise ValueError(f"--data {data!r}: only the bundle's own dataset "
                             f"({method.metadata.get('data')!r}) is supported")  # fmt: skip
        note = dataset_seed_note(method.metadata)
        if note:
            console.print(f"[yellow]warning:[/] {note}")
        res = calibrate_bundle(method, score=score, coverage=coverage, error=error,
                               error_metric=error_metric, samples=samples, seed=seed,
                               test_limit=test_limit)  # fmt: skip
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
            continue
        console.print(
            f"{name}: n = {fig['n']}, coverage {fig['coverage']:.4f}, "
            f"{fig['error_metric']} all {fig['error_all']:.4f} -> accepted "
            f"{fig['error_accepted']:.4f}"
        )
    console.print(f"saved to {bundle}/config.json")
