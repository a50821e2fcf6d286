"""``bayesify train`` and ``bayesify methods`` (``bayesify evaluate``: ``cli/evaluate.py``).

Help texts are given where the commands are registered (``bayesify/cli/__init__.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from bayesify.cli.common import (
    Threads,
    check_out,
    console,
    fail,
    parse_options,
    scores_table,
    set_threads,
)


def train(
    ctx: typer.Context,
    method: Annotated[str, typer.Option(help="Method name (see `bayesify methods`).")] = "mcbn",
    data: Annotated[
        str,
        typer.Option(help="UCI dataset name, 'fashion-mnist', or a CSV / Parquet / .npz file."),
    ] = "bostonHousing",
    target: Annotated[str | None, typer.Option(help="Target column (--data a file).")] = None,
    features: Annotated[
        str | None,
        typer.Option(
            help="Feature columns, comma-separated.",
            show_default="all others but --exclude and row ids",
        ),
    ] = None,
    exclude: Annotated[
        str | None,
        typer.Option(help="Columns to leave out of the features, comma-separated (COL[,COL])."),
    ] = None,
    val: Annotated[
        Path | None, typer.Option(help="Validation table.", show_default="a seeded 20% split")
    ] = None,
    task: Annotated[str, typer.Option(help="auto, regression or classification.")] = "auto",
    split: Annotated[
        int | None, typer.Option(help="UCI split index.", min=0, show_default="0")
    ] = None,
    protocol: Annotated[
        str | None, typer.Option(help="UCI split protocol: teye or gal.", show_default="teye")
    ] = None,
    model: Annotated[
        str,
        typer.Option(
            help="mlp (UCI, tables), lenet or resnet (images).", show_default="by the data"
        ),
    ] = "",
    hidden: Annotated[str, typer.Option(help="MLP hidden sizes, comma-separated.")] = "50,50",
    norm: Annotated[str, typer.Option(help="batch or none.")] = "batch",
    dropout: Annotated[
        float | None,
        typer.Option(help="Dropout rate in the model.", show_default="0; 0.05 for mc-dropout"),
    ] = None,
    epochs: Annotated[int, typer.Option(help="Most training epochs.", min=1)] = 100,
    batch_size: Annotated[int, typer.Option(help="Mini-batch size.", min=1)] = 32,
    lr: Annotated[float, typer.Option(help="Learning rate.")] = 1e-3,
    weight_decay: Annotated[float, typer.Option(help="Weight decay.")] = 0.0,
    patience: Annotated[int | None, typer.Option(help="Early-stopping patience.", min=1)] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            help="Train on a seeded sample of this many training rows (tables: validation "
            "rows stay as they are).",
            min=1,
        ),
    ] = None,
    seed: Annotated[
        int, typer.Option(help="Seed of the validation split, initialisation and batch order.")
    ] = 0,
    option: Annotated[list[str] | None, typer.Option(help="Method option key=value.")] = None,
    preset: Annotated[
        str | None,
        typer.Option(
            help="Paper preset (e.g. paper): its config and its optimiser, lr, weight "
            "decay and batch size replace --lr/--weight-decay/--batch-size; --epochs "
            "still applies. See docs/fidelity.md."
        ),
    ] = None,  # fmt: skip
    out: Annotated[Path, typer.Option(help="Bundle folder to write.")] = Path("runs/model"),
    overwrite: Annotated[
        bool, typer.Option(help="Write into a non-empty --out folder (replacing its bundle).")
    ] = False,
    nproc: Annotated[
        int,
        typer.Option(
            help="Data-parallel processes on this machine (--batch-size is the global batch). "
            "Started by torchrun (on one or several machines) the command trains as one "
            "process of torchrun's group instead (leave --nproc out); only rank 0 writes "
            "--out and prints. See README, 'Training across machines'.",
            min=1,
        ),
    ] = 1,
    batch_norm: Annotated[
        str, typer.Option(help="With --nproc or torchrun: replica or sync.")
    ] = "replica",
    samples: Annotated[
        int, typer.Option(help="MC samples T of the closing test-set evaluation.", min=1)
    ] = 100,
    evaluate: Annotated[
        bool, typer.Option("--eval/--no-eval", help="Score the bundle on the test set.")
    ] = True,
    threads: Threads = None,
    continue_from: Annotated[
        Path | None,
        typer.Option(
            help="A vcl bundle to go on from: learn --data (a table, read with the bundle's "
            "preprocessing) as its next task and write a new bundle to --out (the model "
            "options are the bundle's)."
        ),
    ] = None,
) -> None:
    """Train a method on a built-in dataset or on your own table (--data
    FILE.csv|.parquet|.npz --target COLUMN), save a bundle (safetensors + JSON) that predicts in
    your data's units, and score it on the test split, or the validation rows of a table
    (--no-eval skips that)."""
    import bayesify.app.jobs as jobs
    from bayesify.data.tables import is_table_path
    from bayesify.train.distributed import DDP, is_main_process, torchrun_world

    world = torchrun_world()
    if world is not None and nproc not in (1, world):
        raise fail(f"--nproc {nproc} under torchrun, whose group has {world} processes; leave "
                   "--nproc out (torchrun's --nnodes and --nproc-per-node decide)")  # fmt: skip
    if world is not None and continue_from is not None:
        raise fail("--continue-from trains in one process; start it without torchrun")
    main = is_main_process()
    check_out(out, overwrite)
    set_threads(threads)
    if continue_from is not None:
        _refuse_continue_flags(ctx)
        fit_options = dict(epochs=epochs, batch_size=batch_size, lr=lr,
                           weight_decay=weight_decay, seed=seed)  # fmt: skip
        return _continue(continue_from, data, out, overwrite, fit_options)
    options = parse_options(option or []) | ({"preset": preset} if preset else {})
    try:
        if is_table_path(data):
            from bayesify.app.table_jobs import build_table_training

            _refuse_dataset_flags(split, protocol, model)
            job, notes = build_table_training(method, data, target, features=features,
                                              exclude=exclude, val=val,
                                              task=task, hidden=hidden, norm=norm,
                                              dropout=dropout, seed=seed, limit=limit,
                                              options=options)  # fmt: skip
            if main:
                console.print("\n".join(notes), highlight=False, soft_wrap=True)
        else:
            if target or features or exclude or val or task != "auto":
                raise ValueError(f"--target, --features, --exclude, --val and --task are for "
                                 f"tables; {data!r} is a built-in dataset")  # fmt: skip
            job = jobs.build_training(method, data, split=split or 0,
                                      protocol=protocol or "teye", model=model,
                                      hidden=hidden, norm=norm, dropout=dropout, limit=limit,
                                      seed=seed, options=options)  # fmt: skip
        fit_options = dict(epochs=epochs, batch_size=batch_size, lr=lr,
                           weight_decay=weight_decay, patience=patience, seed=seed)  # fmt: skip
        if preset:  # the recipe fills what is left out (methods/core/presets.py)
            fit_options = {k: fit_options[k] for k in ("epochs", "patience", "seed")}
        strategy = None
        if nproc > 1 or world is not None:
            strategy = DDP(nproc=world or nproc, batch_norm=batch_norm)
        job.method.fit(job.train, val=job.val, strategy=strategy, **fit_options)
        if not main:  # torchrun's other ranks: rank 0 holds the same method and saves it
            return
        job.method.metadata.update(job.metadata)
        job.method.preprocessing = job.preprocessing
        job.method.save(out, overwrite=overwrite)
    except (ValueError, TypeError, OSError) as e:
        raise fail(str(e)) from None
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
        try:
            scores = job.evaluate(samples)
        except (ValueError, TypeError, RuntimeError) as e:
            raise fail(
                f"the bundle is saved in {out}/, but its closing evaluation failed: {e}"
            ) from None
        where = "validation rows" if "table" in job.metadata else "test set"
        console.print(scores_table(f"{where}, T = {samples}", {job.method.name: scores},
                                   job.score_keys))  # fmt: skip
        if "pll_norm" in job.score_keys:
            chose = history is not None and history.best_epoch >= 0
            note = _normalised_note("table" in job.metadata, chose)
            console.print(note, highlight=False, soft_wrap=True)


#: what ``--continue-from`` uses of the command line; the bundle decides the rest
_CONTINUE_FLAGS = {"continue_from", "data", "out", "overwrite", "threads", "epochs",
                   "batch_size", "lr", "weight_decay", "seed"}  # fmt: skip


def _refuse_continue_flags(ctx: typer.Context) -> None:
    """Flags given with ``--continue-from`` that the bundle decides: one line naming them
    (they would be ignored silently otherwise)."""

    def typed(name: str) -> bool:
        source = ctx.get_parameter_source(name)
        return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")

    given = [p.opts[0] for p in ctx.command.params
             if p.name is not None and p.name not in _CONTINUE_FLAGS and typed(p.name)
             and not (p.name == "evaluate" and not ctx.params["evaluate"])]  # fmt: skip
    if given:
        raise fail(f"{', '.join(given)} cannot be used with --continue-from: the bundle's "
                   "method, model, preprocessing and options carry on, and the next task is "
                   "not scored; --epochs, --batch-size, --lr, --weight-decay and --seed set its "
                   "training")  # fmt: skip


def _refuse_dataset_flags(split: int | None, protocol: str | None, model: str) -> None:
    """Options of the built-in datasets given with a table: one line naming them."""
    given = [name for name, on in (("--split", split is not None),
                                   ("--protocol", protocol is not None),
                                   ("--model", model not in ("", "mlp"))) if on]  # fmt: skip
    if given:
        verb = "applies" if len(given) == 1 else "apply"
        raise ValueError(f"{' and '.join(given)} {verb} to the built-in datasets, not to --data "
                         "tables (a table trains an MLP: --hidden, --norm, --dropout shape "
                         "it)")  # fmt: skip


def _normalised_note(table: bool, chose_epoch: bool) -> str:
    """The line under a regression score table saying what pll_norm and crps_norm are."""
    line = ("pll_norm, crps_norm: PLL and CRPS rescaled so that 0 is the same means with one "
            "constant variance and 100 the best variance for each row (higher is better; "
            "Teye et al. 2018)")  # fmt: skip
    if table:
        also = " and chose the kept epoch (early stopping)" if chose_epoch else ""
        line += (f"; the validation rows scored here also fitted the noise variance{also}, "
                 "so these figures are optimistic")  # fmt: skip
    return line


def _continue(
    bundle: Path, data: str, out: Path, overwrite: bool, fit_options: dict[str, Any]
) -> None:
    """``train --continue-from``: the bundle's next task from the table ``data``, to ``out``."""
    from bayesify.app.continual_jobs import continue_from_bundle

    if out.resolve() == bundle.resolve():
        raise fail(
            f"--out {out} is the --continue-from bundle; write the next task to a new folder"
        )
    try:
        method, train = continue_from_bundle(bundle, data)
        method.fit(train, **fit_options)
        method.tasks[-1]["data"] = str(data)
        method.save(out, overwrite=overwrite)
    except (ValueError, TypeError, OSError) as e:
        raise fail(str(e)) from None
    last = method.tasks[-1]
    console.print(
        f"learned task {last['task'] + 1} from {data} ({last['trained_rows']} training rows, "
        f"{last['coreset_rows']} coreset rows); saved vcl bundle with {len(method.tasks)} "
        f"tasks to {out}/",
        highlight=False,
    )


def list_methods() -> None:
    """A table of the registered methods: name and the first sentence of the class docstring."""
    from bayesify.methods import METHODS, method_summary

    table = Table(title="methods (use the name with --method)")
    table.add_column("name", no_wrap=True)
    table.add_column("what it is")
    for name, cls in sorted(METHODS.items()):
        table.add_row(name, method_summary(cls).replace("`", ""))
    console.print(table)
