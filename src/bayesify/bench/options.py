"""A benchmark's options as a frozen dataclass, and the one adapter that makes it a Typer command.

A benchmark module defines::

    @dataclass(frozen=True)
    class FooOptions:
        command: ClassVar[str] = "foo"  # `bayesify bench foo`
        n_train: int = option(1000, "Training images.")
        batch_sizes: tuple[int, ...] = option((8, 16), "Batch sizes, comma-separated.")

    def run(options: FooOptions) -> str: ...  # writes the report, returns its markdown

and :func:`add_bench_command` turns it into ``bayesify bench foo --n-train 1000 --batch-sizes
8,16``: every field becomes an option named after it (underscores as dashes) with the field's
default and help (:func:`option` is ``field`` with ``metadata={"help": ...}``); a tuple field is a
comma-separated string on the command line.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import shlex
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from bayesify.atomic import write_text
from bayesify.bench.engines import ClusterError
from bayesify.bench.store import StoreError
from bayesify.data.errors import DataError
from bayesify.extras import MissingExtra
from bayesify.io import BundleError

O = TypeVar("O")
SCALARS = (int, float, str, bool, Path)
#: errors a bench command reports in one line (exit code 2)
ONE_LINE_ERRORS = (DataError, BundleError, StoreError, MissingExtra, ClusterError)


def _item_type(tp: Any) -> type | None:
    """``int`` for ``tuple[int, ...]`` (or ``list[int]``); None for a scalar field."""
    if typing.get_origin(tp) in (tuple, list):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        if len(set(args)) != 1 or args[0] not in SCALARS:
            raise TypeError(f"unsupported list field type {tp!r}")
        return args[0]
    if tp not in SCALARS:
        raise TypeError(f"unsupported option type {tp!r}")
    return None


def _field_types(cls: type) -> dict[str, tuple[Any, type | None]]:
    """Each field's resolved type and, for a tuple field, its item type."""
    hints = typing.get_type_hints(cls)
    return {f.name: (hints[f.name], _item_type(hints[f.name])) for f in dataclasses.fields(cls)}


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise TypeError(f"option field {f.name!r} needs a default")


def option(default: Any, help: str) -> Any:
    """A dataclass field for an options class: its default and its ``--help`` text."""
    return dataclasses.field(default=default, metadata={"help": help})


def join_values(values: typing.Iterable[Any]) -> str:
    """``(8, 16)`` -> ``"8,16"``: a tuple option as it is written on the command line."""
    return ",".join(str(v) for v in values)


def split_values(text: str, item: type, name: str = "value") -> tuple[Any, ...]:
    """``"8,16"`` -> ``(8, 16)`` (blank items skipped); a bad item is a usage error."""
    try:
        return tuple(item(v.strip()) for v in text.split(",") if v.strip())
    except ValueError:
        raise typer.BadParameter(
            f"expected comma-separated {item.__name__} values, got {text!r}",
            param_hint=f"'--{name.replace('_', '-')}'",
        ) from None


def option_signature(cls: type) -> inspect.Signature:
    """Keyword-only parameters, one per field, annotated for Typer (a tuple as comma-separated
    strings that may be repeated: ``--seed-from a.jsonl --seed-from b.db`` is ``a.jsonl,b.db``)."""
    params = []
    types = _field_types(cls)
    for f in dataclasses.fields(cls):
        tp, item = types[f.name]
        default = _default(f)
        help_text = f.metadata.get("help", "")
        info = typer.Option(help=help_text, metavar=f"{item.__name__},…" if item else None)
        params.append(
            inspect.Parameter(
                f.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=[join_values(default)] if item else default,
                annotation=Annotated[list[str] if item else tp, info],
            )
        )
    return inspect.Signature(params)


def check_choices(name: str, values: tuple[str, ...], valid: typing.Iterable[str]) -> None:
    """For an options class's ``__post_init__``: ``values`` non-empty and all in ``valid``."""
    valid = tuple(valid)
    unknown = [v for v in values if v not in valid]
    if unknown or not values:
        what = f"unknown {name} {unknown}" if unknown else f"no {name} given"
        raise ValueError(f"{what}; valid: {', '.join(valid)}")


def options_from_cli(cls: type[O], values: dict[str, Any]) -> O:
    """The options object from the command's parsed values (comma lists split and typed); a
    ``ValueError`` from the class's own checks is a usage error."""
    kwargs = {}
    for name, (_, item) in _field_types(cls).items():
        value = values[name]
        if item and not isinstance(value, str):  # a repeated option: its values in order
            value = join_values(value)
        kwargs[name] = split_values(value, item, name) if item else value
    try:
        return cls(**kwargs)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None


def command_line(options: Any) -> str:
    """``bayesify bench <command>`` with the options that differ from their defaults."""
    parts = ["bayesify", "bench", type(options).command]
    types = _field_types(type(options))
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        if value == _default(f):
            continue
        flag = f"--{f.name.replace('_', '-')}"
        if isinstance(value, bool):
            parts.append(flag if value else f"--no-{flag[2:]}")
        else:
            parts += [flag, join_values(value) if types[f.name][1] else str(value)]
    return " ".join(shlex.quote(p) for p in parts)


def write_report(path: str | Path, text: str) -> str:
    """Write a markdown report (creating its folder); returns the text."""
    write_text(path, text)
    return text


def _first_paragraph(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def add_bench_command(app: typer.Typer, cls: type[O], run: Callable[[O], str]) -> None:
    """Register ``cls.command`` on ``app``: parse the options, call ``run``, print its markdown;
    a :class:`~bayesify.data.errors.DataError`, :class:`~bayesify.io.BundleError` or
    :class:`~bayesify.bench.store.StoreError` (missing data, a damaged bundle, store or file of
    rows), a missing extra or an unreachable ``--cluster`` is a one-line error, exit code 2.

    The help text is the first paragraph of ``run``'s module docstring."""

    def command(**values: Any) -> None:
        options = options_from_cli(cls, values)
        logging.getLogger("bayesify.bench").setLevel(logging.INFO)  # progress on stderr
        try:
            text = run(options)
        except ONE_LINE_ERRORS as e:  # one line says which
            typer.secho(f"error: {e}", fg=typer.colors.RED, err=True)
            raise typer.Exit(code=2) from None
        typer.echo(text)

    command.__signature__ = option_signature(cls)  # type: ignore[attr-defined]
    command.__name__ = cls.command.replace("-", "_")
    command.__doc__ = _first_paragraph(sys.modules[run.__module__].__doc__)
    app.command(cls.command)(command)
