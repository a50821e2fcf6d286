"""Commands registered by import path and imported only when they run.

``bayesify --help`` must not start PyTorch: a :class:`LazyTyper` lists each lazy command from
its name and one line of help, and imports the command's module only when the command is
invoked (or its own ``--help`` is asked for)::

    app = LazyTyper(help="...")
    app.lazy_command("train", "bayesify.cli.train:train", "Train a method on a dataset ...")

The target ``"module:attribute"`` is a Typer command function (registered under ``name`` with
``help`` as its help text), a ``typer.Typer`` with one command, or a click command; ``build``
turns any other object into one of those (``bayesify bench`` builds a command from an options
dataclass). The help given at registration is what the group's listing shows: for a function
it is also the command's own help, so there is one source; for a built command a test checks
that the two agree.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import typer
from typer.core import TyperCommand, TyperGroup

__all__ = ["LazyCommand", "LazyTyper"]


@dataclass(frozen=True)
class LazyCommand:
    """A command known by name and help until it runs."""

    name: str
    target: str  # "package.module:attribute"
    help: str
    build: Callable[[Any], Any] | None = None

    def load(self) -> Any:
        """Import the target and return it as a click command named :attr:`name`."""
        module, _, attribute = self.target.partition(":")
        obj = getattr(importlib.import_module(module), attribute)
        if self.build is not None:
            obj = self.build(obj)
        if isinstance(obj, typer.Typer):
            command = typer.main.get_command(obj)
        elif callable(obj) and not hasattr(obj, "make_context"):  # a Typer command function
            single = typer.Typer(add_completion=False)
            single.command(self.name, help=self.help)(obj)
            command = typer.main.get_command(single)
        else:
            command = obj
        command.name = self.name
        return command


class _Listed(TyperCommand):
    """Stands in for a lazy command in its group's help listing."""

    def __init__(self, entry: LazyCommand) -> None:
        super().__init__(name=entry.name, help=entry.help)
        self.entry = entry


class LazyGroup(TyperGroup):
    """A Typer group whose lazy commands are imported on first use; subclassed per app with
    its own :attr:`lazy` table (see :class:`LazyTyper`)."""

    lazy: ClassVar[dict[str, LazyCommand]] = {}

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        eager = dict(self.commands)  # sub-groups added with add_typer, listed after
        self.commands = {name: _Listed(entry) for name, entry in self.lazy.items()} | eager
        self._listing = False

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = self.commands.get(cmd_name)
        if isinstance(command, _Listed) and not self._listing:
            command = self.commands[cmd_name] = command.entry.load()
        return command

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True  # the listing shows names and help without importing anything
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


class LazyTyper(typer.Typer):
    """A ``typer.Typer`` that also takes lazy commands (:meth:`lazy_command`)."""

    def __init__(self, **kwargs: Any) -> None:
        self.lazy_commands: dict[str, LazyCommand] = {}
        group = type("LazyGroup", (LazyGroup,), {"lazy": self.lazy_commands})
        super().__init__(cls=group, **kwargs)
        # a group even while every command is lazy (Typer makes a lone command the app itself)
        self.callback()(_group)

    def lazy_command(
        self, name: str, target: str, help: str, *, build: Callable[[Any], Any] | None = None
    ) -> None:
        """Register ``name``: imported from ``target`` (``"module:attribute"``) when it runs;
        ``help`` is shown in the listing."""
        if name in self.lazy_commands:
            raise ValueError(f"command {name!r} is registered twice")
        self.lazy_commands[name] = LazyCommand(name, target, help, build)


def _group() -> None:  # the group callback: no options of its own, no docstring (help is
    pass  # given to LazyTyper(help=...))
