"""Docs a user can follow: the options reference is current, the quick start's examples run, CLI
help has no reStructuredText markup."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from bayesify.app.options_reference import options_reference

ROOT = Path(__file__).resolve().parents[1]


def test_options_reference_is_up_to_date():
    committed = (ROOT / "docs" / "options.md").read_text()
    assert committed == options_reference(), (
        "docs/options.md is stale: run python -m bayesify.app.options_reference docs/options.md"
    )


def test_options_reference_lists_every_method_and_option():
    import dataclasses

    from bayesify.methods import METHODS

    text = options_reference()
    for name, cls in METHODS.items():
        assert f"## `{name}`" in text
        for f in dataclasses.fields(cls.Config):
            assert f"| `{f.name}` |" in text


def _commands(app, prefix=()):
    import typer.main

    group = typer.main.get_command(app)
    stack = [(prefix, group)]
    while stack:
        path, cmd = stack.pop()
        yield path
        for name, sub in getattr(cmd, "commands", {}).items():
            stack.append(((*path, name), sub))


def test_cli_help_has_no_rst_markup():
    from bayesify.cli import app

    runner = CliRunner()
    for path in _commands(app):
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "``" not in result.output, f"bayesify {' '.join(path)} --help shows ``markup``"
        assert not re.search(r":(?:func|class|meth|mod):`", result.output)


def _quickstart_examples() -> list[str]:
    text = (ROOT / "docs" / "quickstart.md").read_text()
    section = text.split("## One example per method", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_quickstart_examples_run(tmp_path, monkeypatch):
    """The quick start's per-method examples (docs/quickstart.md) run as they are, in order, in
    one namespace."""
    blocks = _quickstart_examples()
    assert len(blocks) >= 8
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "quickstart.md", "exec"), namespace)  # noqa: S102
    for name in ("mcbn", "dropout", "bbb", "ensemble", "ibnn", "snorm"):
        pred = namespace[name].predict(namespace["x"], samples=8, seed=0)
        assert pred.mean.shape == (5,) and bool((pred.std > 0).all())
    assert (tmp_path / "my-dropout-model" / "config.json").is_file()


def test_method_descriptions_are_whole_sentences():
    """`bayesify methods` and docs/options.md give each method's first sentence whole: never
    cut at a wrapped line or at "e.g.", and no field meaning ends inside parentheses."""
    from bayesify.cli import app
    from bayesify.methods import METHODS, method_summary

    class Wrapped:
        """MC dropout: wraps any network, e.g. ``MCDropout.from_pretrained(net,
        dropout=0.1)`` for a network trained without dropout. Second sentence."""

    assert method_summary(Wrapped) == (
        "MC dropout: wraps any network, e.g. `MCDropout.from_pretrained(net, dropout=0.1)` for a "
        "network trained without dropout."
    )
    result = CliRunner().invoke(app, ["methods"])
    assert result.exit_code == 0, result.output
    said: dict[str, str] = {}
    for line in result.output.splitlines():
        if line.count("│") >= 3:  # a table row, or the wrapped rest of the row above
            name, text = (cell.strip() for cell in line.split("│")[1:3])
            key = name or list(said)[-1]
            said[key] = f"{said.get(key, '')} {text}".strip()
    for name, cls in METHODS.items():
        assert said[name] == method_summary(cls).replace("`", "")
        assert said[name].endswith((".", ")")), f"{name}: {said[name]!r}"
    text = options_reference()
    assert "(e.g |" not in text and "<class '" not in text
    for line in text.splitlines():
        if line.startswith("| `"):
            meaning = line.rstrip(" |").rsplit(" | ", 1)[-1]
            assert meaning.count("(") == meaning.count(")"), line
