"""Every ``bayesify`` command line written on a page (README, docs/, benchmarks/) names only
options its command has today: a page must not tell a reader to run what fails. A command kept
as it was run long ago says so within the line before it ("of that time")."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.core import TyperGroup

from bayesify.cli import app

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         *sorted((ROOT / "benchmarks").rglob("*.md"))]  # fmt: skip
COMMAND = re.compile(r"bayesify ((?:bench )?[a-z][a-z0-9-]*)((?: +[^`\n|]*)?)")
FLAG = re.compile(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)")


def _command(path: tuple[str, ...]) -> Any:
    """The command a page's ``bayesify <path>`` runs (Typer's own click), or None."""
    cmd: Any = typer.main.get_command(app)
    for name in path:
        if not isinstance(cmd, TyperGroup):
            return None
        cmd = cmd.get_command(typer.Context(cmd), name)
    return cmd


def _options(cmd: Any) -> set[str]:
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}


def _uses() -> list[tuple[str, tuple[str, ...], str]]:
    uses = []
    for page in PAGES:
        text = page.read_text().replace("\\\n", " ")
        for m in COMMAND.finditer(text):
            if "of that time" in text[max(0, m.start() - 300) : m.start()]:
                continue
            path = tuple(m.group(1).split())
            uses.append((str(page.relative_to(ROOT)), path, m.group(2)))
    return uses


def test_pages_name_commands_and_options_that_exist() -> None:
    uses = _uses()
    assert len(uses) > 50  # the pages do show commands: the pattern finds them
    wrong = []
    for page, path, rest in uses:
        cmd = _command(path)
        if cmd is None or isinstance(cmd, TyperGroup):  # a word after "bayesify", or a group
            continue
        unknown = sorted(set(FLAG.findall(rest)) - _options(cmd))
        if unknown:
            wrong.append(f"{page}: bayesify {' '.join(path)} {' '.join(unknown)}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("line", ["bayesify bench uci --epochs 3 --no-such-flag 1"])
def test_a_flag_the_command_lacks_is_found(line: str) -> None:
    m = COMMAND.search(line)
    assert m is not None
    cmd = _command(tuple(m.group(1).split()))
    assert cmd is not None
    assert set(FLAG.findall(m.group(2))) - _options(cmd) == {"--no-such-flag"}
