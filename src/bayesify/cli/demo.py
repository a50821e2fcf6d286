"""``bayesify demo``: MCBN vs CUBN on real UCI data, and a 1-D toy figure."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import torch
import typer

from bayesify.bench.options import check_choices
from bayesify.bench.uci.teye_report import DEMO_DATASETS
from bayesify.cli.common import console, fail, ints, scores_table
from bayesify.data.uci import TEYE_N_SPLITS, UCI_DATASETS
from bayesify.seeding import seeded


def demo(
    out: Annotated[Path, typer.Option(help="Folder for the table and figures.")] = Path(
        "bayesify-demo"
    ),
    datasets: Annotated[str, typer.Option(help="Comma-separated UCI datasets.")] = ",".join(
        DEMO_DATASETS
    ),
    splits: Annotated[
        int, typer.Option(help="Teye et al. 80/20 splits per dataset.", min=1, max=TEYE_N_SPLITS)
    ] = 3,
    epochs: Annotated[int, typer.Option(help="Maximum epochs (early stopping).", min=1)] = 300,
    samples: Annotated[int, typer.Option(help="MC samples T per prediction.", min=1)] = 200,
    threads: Annotated[
        int,
        typer.Option(
            help="torch CPU threads (these small networks gain nothing from more, and a "
            "second thread waits on a core another program holds).",
            min=1,
        ),
    ] = 1,
    toy_epochs: Annotated[int, typer.Option(help="Epochs for the 1-D toy figure.", min=1)] = 400,
    batch_sizes: Annotated[str, typer.Option(help="Batch sizes to choose from on validation.")] = (
        "32,128"
    ),
) -> None:
    """Check the options, run the UCI benchmark on a few datasets, then draw the toy figure."""
    from bayesify.bench.uci.teye import UCISettings
    from bayesify.bench.uci.teye_report import run_uci_benchmark

    torch.set_num_threads(threads)
    names = [d.strip() for d in datasets.split(",") if d.strip()]
    try:
        check_choices("datasets", tuple(names), UCI_DATASETS)
    except ValueError as e:
        raise fail(str(e)) from None
    settings = UCISettings(epochs=epochs, samples=samples, batch_sizes=ints(batch_sizes))
    console.print(f"MCBN vs CUBN on {', '.join(names)}, {splits} split(s) each -> {out}/")
    console.print(
        "τ and CUBN fitted by Teye et al.'s rule (one CRPS-fitted τ, noise protocol teye)"
    )

    def show(name: str, split: int, scores: dict) -> None:
        console.print(scores_table(f"{name}, split {split}", scores,
                                   ["rmse", "pll", "crps", "pll_norm", "crps_norm"]))  # fmt: skip

    try:
        text, _ = run_uci_benchmark(names, splits, settings, out, on_result=show)
    except ValueError as e:
        raise fail(str(e)) from None
    _toy_demo(out, toy_epochs)
    console.print(text)
    console.print(f"figures: {', '.join(sorted(p.name for p in out.glob('*.png')))} in {out}/")


def _toy_demo(out: Path, epochs: int) -> None:
    from bayesify.data import toy_grid, toy_teye, toy_teye_function
    from bayesify.methods import MCBN
    from bayesify.models import mlp
    from bayesify.plots.uncertainty import toy_regression_plot

    x, y = toy_teye(n=120, seed=0)
    with seeded(0):  # the network's initial weights
        method = MCBN(mlp(1, hidden=(64, 64)), bank_size=128)
    method.fit((x, y), val=(x, y), epochs=epochs, batch_size=16, lr=3e-3, seed=0, progress=False)
    grid = toy_grid(-7.0, 7.0, 300)
    pred = method.predict(grid, samples=200, seed=0)
    toy_regression_plot(
        x, y, grid, pred, baseline_std=method.constant_variance**0.5,
        truth=toy_teye_function(grid), title="MCBN on a 1-D toy (Teye et al. Fig. 1 style)",
        path=out / "toy_mcbn.png",
    )  # fmt: skip
