"""``bayesify distill BUNDLE --data FILE --out STUDENT``: a one-pass student of a bundle."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bayesify.cli.common import Threads, check_out, console, fail, set_threads


def distill(
    bundle: Annotated[Path, typer.Argument(help="The teacher's bundle folder.")],
    data: Annotated[
        Path,
        typer.Option(
            help="The teacher's training inputs: a CSV, Parquet or .npz file in the "
            "units the bundle reads (a table's target column is ignored)."
        ),
    ],  # fmt: skip
    out: Annotated[Path, typer.Option(help="Student bundle folder to write.")],
    samples: Annotated[int, typer.Option(help="Teacher samples T per transfer row.", min=1)] = 30,
    augment: Annotated[
        str,
        typer.Option(
            help="Extra transfer rows: outliers (images: a noise copy, then shuffled, rotated, "
            "inverted and zoomed copies; tables: the noise copy), noise, mixup or none."
        ),
    ] = "outliers",
    copies: Annotated[int, typer.Option(help="Augmented copies of the inputs.", min=0)] = 2,
    noise: Annotated[
        float, typer.Option(help="The noise copy's standard deviation (network units).")
    ] = 1.0,
    epochs: Annotated[int, typer.Option(help="Training epochs of the student.", min=1)] = 20,
    batch_size: Annotated[int, typer.Option(help="Mini-batch size.", min=1)] = 128,
    lr: Annotated[float, typer.Option(help="Learning rate (Adam).")] = 1e-3,
    temperature: Annotated[
        float, typer.Option(help="Classification: first temperature of the annealed targets.")
    ] = 10.0,
    seed: Annotated[int, typer.Option(help="Seed of the transfer set, draws and batches.")] = 0,
    net: Annotated[
        str | None,
        typer.Option(
            help="package.module:factory returning the bundle's network (as for bayesify predict)."
        ),
    ] = None,  # fmt: skip
    overwrite: Annotated[
        bool, typer.Option(help="Write into a non-empty --out folder (replacing its bundle).")
    ] = False,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
    threads: Threads = None,
) -> None:
    """Train a student network on a bundle's predictive that gives, in one pass over the rows,
    the predictive mean and its uncertainty split (classification: a Dirichlet over the class
    probabilities; regression: mean, epistemic and aleatoric variance), and save it as a bundle
    that predict, calibrate and serve use like any other."""
    from bayesify.app.distill_jobs import distill_bundle

    check_out(out, overwrite)
    set_threads(threads)
    try:
        student = distill_bundle(bundle, data, out, net=net, overwrite=overwrite,
                                 samples=samples, augment=augment, copies=copies, noise=noise,
                                 epochs=epochs, batch_size=batch_size, lr=lr,
                                 temperature=temperature, seed=seed,
                                 progress=progress)  # fmt: skip
    except (ValueError, TypeError, OSError) as e:
        raise fail(str(e)) from None
    d = student.distillation
    console.print(
        f"distilled {d['teacher']['method']} ({d['transfer']['rows']} transfer rows, "
        f"{d['epochs']} epochs, epoch {d['chosen_epoch']} kept, final loss "
        f"{d['final_loss']:.4g}, {d['seconds']:.0f} s) -> {out}",
        highlight=False,
    )
