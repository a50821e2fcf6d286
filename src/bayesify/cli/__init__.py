"""The ``bayesify`` command line: train, evaluate, demo, methods, bench.

Every command lives in its own module under ``bayesify/cli/`` and is imported only when it runs,
so ``bayesify --help`` starts without PyTorch. To add a command, write its function in a module
here (options as Typer annotations; import heavy modules inside the function) and register it
with one line below: name, ``"module:function"`` and its help text (shown by ``bayesify --help``
and by the command's own ``--help``). Shared helpers (``fail``, ``console``, ``parse_options``,
tables) are in :mod:`bayesify.cli.common`.
"""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from bayesify.cli.bench import bench_app
from bayesify.cli.lazy import LazyTyper

app = LazyTyper(help="Approximate Bayesian deep learning: train, evaluate, benchmark.",
                no_args_is_help=True)  # fmt: skip

# one line per command: name, "module:function", help
app.lazy_command("demo", "bayesify.cli.demo:demo",
                 "MCBN vs CUBN on real UCI data: a table of RMSE, PLL, CRPS and normalised "
                 "scores, an uncertainty–error plot per dataset, and a 1-D toy plot.")  # fmt: skip
app.lazy_command("train", "bayesify.cli.train:train",
                 "Train a method on a built-in dataset or on your own table (--data "
                 "FILE.csv|.parquet|.npz --target COLUMN), save a bundle (safetensors + JSON) "
                 "that predicts in your data's units, and score it on the test split, or the "
                 "validation rows of a table (--no-eval skips that).")  # fmt: skip
app.lazy_command("evaluate", "bayesify.cli.evaluate:evaluate",
                 "Score a saved bundle on the test split it was trained for, or on a table of "
                 "labelled rows (--data FILE): regression RMSE, NLL/PLL, CRPS and interval "
                 "coverage and width; classification accuracy, NLL, Brier, ECE and "
                 "prediction-set coverage and size; the epistemic share of the predictive "
                 "variance.")  # fmt: skip
app.lazy_command("methods", "bayesify.cli.train:list_methods", "List the registered methods.")
app.lazy_command("report", "bayesify.cli.report:report",
                 "Write one self-contained HTML page (figures embedded) and a markdown file with "
                 "every table and figure of a results store.")  # fmt: skip
app.lazy_command("predict", "bayesify.cli.predict:predict",
                 "Predict every row of a file with a bundle: the prediction and its uncertainty "
                 "per row (regression: mean, std, epistemic and aleatoric variance, interval; "
                 "classification: label, class probabilities, entropy, mutual information, "
                 "prediction set), in the units of the data the bundle was trained "
                 "on.")  # fmt: skip
app.lazy_command("calibrate", "bayesify.cli.calibrate:calibrate",
                 "Fit a deferral policy (a threshold on an uncertainty score) for a target "
                 "coverage or a target error on accepted rows, on a table of your rows or the "
                 "bundle's validation split, store it in the bundle, and check it on held-out "
                 "rows.")  # fmt: skip
app.lazy_command("serve", "bayesify.cli.serve:serve",
                 "Serve a bundle, or every bundle in a folder, over HTTP: /v1/predict, the Open "
                 "Inference Protocol (/v2/..., with load and unload while it runs), /metrics, "
                 "feedback and a status page at /. Set BAYESIFY_API_KEY to require an API "
                 "key.")  # fmt: skip
app.lazy_command("distill", "bayesify.cli.distill:distill",
                 "Train a student network on a bundle's predictive that gives, in one pass over "
                 "the rows, the predictive mean and its uncertainty split (classification: a "
                 "Dirichlet over the class probabilities; regression: mean, epistemic and "
                 "aleatoric variance), and save it as a bundle that predict, calibrate and "
                 "serve use like any other.")  # fmt: skip
app.add_typer(bench_app, name="bench")


def _print_version(asked: bool) -> None:
    if asked:  # the installed distribution's version (pyproject.toml), read without PyTorch
        from importlib.metadata import version

        typer.echo(f"bayesify {version('bayesify')}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True,
                     help="Show the installed version and exit."),
    ] = False,
) -> None:  # fmt: skip
    pass  # no docstring: the group's help is LazyTyper(help=...)


__all__ = ["app", "main"]


def main() -> None:  # pragma: no cover
    logging.basicConfig(level=logging.WARNING)
    app()
