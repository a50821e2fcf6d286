"""The ``bayesify`` command line: train, evaluate, demo, bench."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Annotated, Any

import torch
import typer
from rich.console import Console
from rich.table import Table

from bayesify.bench import uci_report
from bayesify.bench.experiments import (
    bn_noise,
    coverage,
    fashion_nodes,
    fmnist_calibration,
    mcbn_collapse,
    speed,
    toy_depth,
    uci_methods,
)
from bayesify.bench.experiments import serve as serve_bench
from bayesify.bench.options import add_bench_command, check_choices
from bayesify.bench.uci_report import DEMO_DATASETS
from bayesify.cli import calibrate as _calibrate
from bayesify.cli import serve as _serve
from bayesify.data.uci import TEYE_N_SPLITS, UCI_DATASETS

app = typer.Typer(help="Approximate Bayesian deep learning: train, evaluate, benchmark.",
                  no_args_is_help=True)  # fmt: skip
bench_app = typer.Typer(help="Benchmarks on real data.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")
console = Console()


def _fail(message: str) -> typer.Exit:
    console.print(f"[bold red]error:[/] {message}")
    return typer.Exit(code=2)


def _parse_options(options: list[str]) -> dict[str, Any]:
    """``key=value`` pairs; values parsed as JSON where they can be (numbers, booleans)."""
    out: dict[str, Any] = {}
    for item in options:
        if "=" not in item:
            raise _fail(f"--option takes key=value, got {item!r}")
        key, value = item.split("=", 1)
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise _fail(f"expected comma-separated integers, got {text!r}") from None


def _scores_table(title: str, rows: dict[str, dict[str, float]], keys: list[str]) -> Table:
    table = Table(title=title)
    table.add_column("method")
    for k in keys:
        table.add_column(k, justify="right")
    for name, scores in rows.items():
        table.add_row(name, *(f"{scores[k]:.3f}" for k in keys))
    return table


@app.command()
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
    threads: Annotated[int, typer.Option(help="torch CPU threads.", min=1)] = 2,
    toy_epochs: Annotated[int, typer.Option(help="Epochs for the 1-D toy figure.", min=1)] = 400,
    batch_sizes: Annotated[str, typer.Option(help="Batch sizes to choose from on validation.")] = (
        "32,128"
    ),
) -> None:
    """MCBN vs CUBN on real UCI data: a table of RMSE, PLL, CRPS and normalised scores, an
    uncertainty–error plot per dataset, and a 1-D toy plot."""
    from bayesify.bench.uci import UCISettings
    from bayesify.bench.uci_report import run_uci_benchmark

    torch.set_num_threads(threads)
    names = [d.strip() for d in datasets.split(",") if d.strip()]
    try:
        check_choices("datasets", tuple(names), UCI_DATASETS)
    except ValueError as e:
        raise _fail(str(e)) from None
    settings = UCISettings(epochs=epochs, samples=samples, batch_sizes=_ints(batch_sizes))
    console.print(f"MCBN vs CUBN on {', '.join(names)}, {splits} split(s) each -> {out}/")

    def show(name: str, split: int, scores: dict) -> None:
        console.print(_scores_table(f"{name}, split {split}", scores,
                                    ["rmse", "pll", "crps", "pll_norm", "crps_norm"]))  # fmt: skip

    try:
        text, _ = run_uci_benchmark(names, splits, settings, out, on_result=show)
    except ValueError as e:
        raise _fail(str(e)) from None
    _toy_demo(out, toy_epochs)
    console.print(text)
    console.print(f"figures: {', '.join(sorted(p.name for p in out.glob('*.png')))} in {out}/")


def _toy_demo(out: Path, epochs: int) -> None:
    from bayesify.data import toy_grid, toy_teye, toy_teye_function
    from bayesify.methods import MCBN
    from bayesify.models import mlp
    from bayesify.plots.uncertainty import toy_regression_plot

    x, y = toy_teye(n=120, seed=0)
    torch.manual_seed(0)
    method = MCBN(mlp(1, hidden=(64, 64)), bank_size=128)
    method.fit((x, y), val=(x, y), epochs=epochs, batch_size=16, lr=3e-3, seed=0, progress=False)
    grid = toy_grid(-7.0, 7.0, 300)
    pred = method.predict(grid, samples=200, seed=0)
    toy_regression_plot(
        x, y, grid, pred, baseline_std=method.constant_variance**0.5,
        truth=toy_teye_function(grid), title="MCBN on a 1-D toy (Teye et al. Fig. 1 style)",
        path=out / "toy_mcbn.png",
    )  # fmt: skip


def _check_out(out: Path, overwrite: bool) -> None:
    """Fail before training when the bundle could not be written to ``out``."""
    if out.exists() and not out.is_dir():
        raise _fail(f"--out {out} is a file; a bundle is a folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise _fail(f"--out {out} already exists and is not empty; pass --overwrite to replace it")
    parent = next(p for p in (out, *out.parents) if p.exists())
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise _fail(f"--out {out} cannot be written ({parent} is not a writable folder)")


@app.command()
def train(
    method: Annotated[str, typer.Option(help="Method name (see `bayesify methods`).")] = "mcbn",
    data: Annotated[str, typer.Option(help="UCI dataset name or 'fashion-mnist'.")] = (
        "bostonHousing"
    ),
    split: Annotated[int, typer.Option(help="UCI split index.", min=0)] = 0,
    protocol: Annotated[str, typer.Option(help="UCI split protocol: teye or gal.")] = "teye",
    model: Annotated[str, typer.Option(help="mlp (UCI), lenet or resnet (images).")] = "",
    hidden: Annotated[str, typer.Option(help="MLP hidden sizes, comma-separated.")] = "50,50",
    norm: Annotated[str, typer.Option(help="batch or none.")] = "batch",
    dropout: Annotated[
        float | None,
        typer.Option(help="Dropout rate in the model [default: 0; 0.05 for mc-dropout]."),
    ] = None,
    epochs: Annotated[int, typer.Option(min=1)] = 100,
    batch_size: Annotated[int, typer.Option(min=1)] = 32,
    lr: Annotated[float, typer.Option()] = 1e-3,
    weight_decay: Annotated[float, typer.Option()] = 0.0,
    patience: Annotated[int | None, typer.Option(help="Early-stopping patience.", min=1)] = None,
    limit: Annotated[
        int | None, typer.Option(help="Train on only this many training rows.", min=1)
    ] = None,
    seed: Annotated[int, typer.Option()] = 0,
    option: Annotated[list[str] | None, typer.Option(help="Method option key=value.")] = None,
    out: Annotated[Path, typer.Option(help="Bundle folder to write.")] = Path("runs/model"),
    overwrite: Annotated[
        bool, typer.Option(help="Write into a non-empty --out folder (replacing its bundle).")
    ] = False,
    nproc: Annotated[int, typer.Option(help="Data-parallel processes (global batch).", min=1)] = 1,
    batch_norm: Annotated[str, typer.Option(help="With --nproc: replica or sync.")] = "replica",
    samples: Annotated[
        int, typer.Option(help="MC samples T of the closing test-set evaluation.", min=1)
    ] = 100,
    evaluate: Annotated[
        bool, typer.Option("--eval/--no-eval", help="Score the bundle on the test set.")
    ] = True,
) -> None:
    """Train a method on a dataset, save a bundle (safetensors + JSON) and score it on the test
    split (``--no-eval`` skips that; ``bayesify evaluate`` scores a bundle later)."""
    from bayesify.app.jobs import build_training

    _check_out(out, overwrite)
    try:
        job = build_training(method, data, split=split, protocol=protocol, model=model,
                             hidden=hidden, norm=norm, dropout=dropout, limit=limit, seed=seed,
                             options=_parse_options(option or []))  # fmt: skip
        fit_options = dict(epochs=epochs, batch_size=batch_size, lr=lr,
                           weight_decay=weight_decay, patience=patience, seed=seed)  # fmt: skip
        if nproc > 1:
            from bayesify.distributed import fit_distributed

            fit_distributed(job.method, job.train, job.val, nproc=nproc, batch_norm=batch_norm,
                            progress=True, **fit_options)  # fmt: skip
        else:
            job.method.fit(job.train, val=job.val, **fit_options)
        job.method.metadata.update(job.metadata)
        job.method.preprocessing = job.preprocessing
        job.method.save(out)
    except (ValueError, TypeError, OSError) as e:
        raise _fail(str(e)) from None
    history = getattr(job.method, "history", None)
    if history is not None and history.epochs:
        n = history.epochs
        line = (
            f"trained {n} epoch{'s' * (n != 1)}, final training loss {history.train_loss[-1]:.4g}"
        )
        if history.best_epoch >= 0:
            best = history.val_loss[history.best_epoch]
            line += f"; kept epoch {history.best_epoch + 1} (validation loss {best:.4g})"
        console.print(line + (", stopped early" if history.stopped_early else ""))
    console.print(f"saved {job.method.name} bundle to {out}/")
    if evaluate:
        scores = job.evaluate(samples)
        console.print(_scores_table(f"test set, T = {samples}", {job.method.name: scores},
                                    job.score_keys))  # fmt: skip


@app.command()
def evaluate(
    bundle: Annotated[Path, typer.Argument(help="Bundle folder written by `bayesify train`.")],
    samples: Annotated[int, typer.Option(help="MC samples T.", min=1)] = 100,
    limit: Annotated[
        int | None, typer.Option(help="Score only the first this many test rows.", min=1)
    ] = None,
) -> None:
    """Score a saved bundle on the test split it was trained for."""
    from bayesify.app.jobs import job_from_bundle
    from bayesify.methods import load

    try:
        job = job_from_bundle(load(bundle))
        scores = job.evaluate(samples, limit=limit)
    except (ValueError, TypeError) as e:
        raise _fail(str(e)) from None
    rows = "" if limit is None else f", first {min(limit, len(job.test[0]))} rows"
    console.print(_scores_table(f"{bundle} on {job.metadata['data']} test{rows}, T = {samples}",
                                {job.method.name: scores}, job.score_keys))  # fmt: skip


@app.command("methods")
def list_methods() -> None:
    """List the registered methods."""
    from bayesify.methods import METHODS

    table = Table(title="methods (use the name with --method)")
    table.add_column("name", no_wrap=True)
    table.add_column("what it is")
    for name, cls in sorted(METHODS.items()):
        summary = (cls.__doc__ or "").strip().splitlines()[0]
        table.add_row(name, summary.replace("``", ""))
    console.print(table)


app.command()(_calibrate.calibrate)
app.command()(_serve.serve)

# Every benchmark: one command each, built from the module's options dataclass (its fields
# are the command's options) and run by the module's ``run(options)``.
for _options, _run in (
    (bn_noise.BNNoiseOptions, bn_noise.run),
    (coverage.CoverageOptions, coverage.run),
    (fashion_nodes.FashionNodesOptions, fashion_nodes.run),
    (fmnist_calibration.FMNISTCalibrationOptions, fmnist_calibration.run),
    (mcbn_collapse.MCBNCollapseOptions, mcbn_collapse.run),
    (serve_bench.ServeBenchOptions, serve_bench.run),
    (speed.SpeedOptions, speed.run),
    (toy_depth.ToyDepthOptions, toy_depth.run),
    (uci_report.UCIOptions, uci_report.run),
    (uci_methods.UCIMethodsOptions, uci_methods.run),
):
    add_bench_command(bench_app, _options, _run)


def main() -> None:  # pragma: no cover
    logging.basicConfig(level=logging.WARNING)
    app()
