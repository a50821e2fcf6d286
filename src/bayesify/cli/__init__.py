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

from bayesify.cli.bench import bench_app
from bayesify.cli.common import console, fail
from bayesify.cli.lazy import LazyTyper

_fail = fail  # the name command modules used before cli/common.py; new code imports from there

app = LazyTyper(help="Approximate Bayesian deep learning: train, evaluate, benchmark.",
                no_args_is_help=True)  # fmt: skip

# one line per command: name, "module:function", help
app.lazy_command("demo", "bayesify.cli.demo:demo",
                 "MCBN vs CUBN on real UCI data: a table of RMSE, PLL, CRPS and normalised "
                 "scores, an uncertainty–error plot per dataset, and a 1-D toy plot.")  # fmt: skip
app.lazy_command("train", "bayesify.cli.train:train",
                 "Train a method on a dataset, save a bundle (safetensors + JSON) and score it on "
                 "the test split (--no-eval skips that; `bayesify evaluate` scores a bundle "
                 "later).")  # fmt: skip
app.lazy_command("evaluate", "bayesify.cli.train:evaluate",
                 "Score a saved bundle on the test split it was trained for.")  # fmt: skip
app.lazy_command("methods", "bayesify.cli.train:list_methods", "List the registered methods.")
app.lazy_command("report", "bayesify.cli.report:report",
                 "Write one self-contained HTML page (figures embedded) and a markdown file with "
                 "every table and figure of a results store.")  # fmt: skip
app.add_typer(bench_app, name="bench")

__all__ = ["app", "console", "main"]


def main() -> None:  # pragma: no cover
    logging.basicConfig(level=logging.WARNING)
    app()
