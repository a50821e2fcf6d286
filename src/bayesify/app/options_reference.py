"""The reference of every method's options (``docs/options.md``), generated from the Config
dataclasses so it cannot drift from the code.

Each option's meaning is read from its Config's docstring (````name``: meaning``) or from the
comment beside the field; its default from the dataclass. Regenerate the page with
``python -m bayesify.app.options_reference docs/options.md``; a test checks it is up to date.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
from enum import Enum

from bayesify.atomic import write_text
from bayesify.methods import METHODS, method_summary
from bayesify.methods.core.base import MethodConfig

HEADER = """# Method options

Generated from the Config dataclasses by `python -m bayesify.app.options_reference
docs/options.md` (a test checks it is up to date). Give options in Python as keyword arguments
(`bayesify.MCBN(net, bank_size=128)`) or on the command line as `--option key=value`
(`bayesify train --method mcbn --option bank_size=128`).
"""


#: a full stop that ends a clause, not the one of "e.g." or "i.e."
_FULL_STOP = r"(?<!\be\.g)(?<!\bi\.e)\."


def _docstring_meanings(cls: type) -> dict[str, str]:
    """Meanings from a Config docstring: ````name``: meaning`` / ````name`` meaning`` items
    separated by ``;``, else the clause that mentions ````name````."""
    doc = " ".join((inspect.getdoc(cls) or "").split())
    out: dict[str, str] = {}
    for item in re.split(rf"(?:;|{_FULL_STOP})\s+(?=``)", doc):
        m = re.match(r"``(\w+)``:?\s+(.*)", item.strip())
        if m:
            out.setdefault(m.group(1), m.group(2).strip().rstrip(";."))
    for f in dataclasses.fields(cls):
        if f.name not in out:
            clauses = re.split(rf"[;,]\s+(?![^(]*\))|{_FULL_STOP}\s+", doc)  # not inside (...)
            clause = next((c for c in clauses if f"``{f.name}``" in c), None)
            if clause:
                out[f.name] = clause.strip().rstrip(".")
    return {k: v.replace("``", "`") for k, v in out.items()}


def _comment_meanings(cls: type) -> dict[str, str]:
    """Comments on a field's line or on the lines just above it."""
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    out: dict[str, str] = {}
    above: list[str] = []
    for line in lines:
        s = line.strip()
        if s.startswith("#"):
            above.append(s.lstrip("# ").strip())
            continue
        m = re.match(r"(\w+)\s*:\s*[^=]+=.*?(?:#\s*(.*))?$", s)
        if m and not s.startswith(("def ", "return", "if ")):
            text = m.group(2) or " ".join(above)
            if text:
                out[m.group(1)] = text.replace("``", "`")
        above = []
    return out


def _meanings(config: type) -> dict[str, str]:
    out: dict[str, str] = {}
    for cls in reversed(config.__mro__):
        if isinstance(cls, type) and dataclasses.is_dataclass(cls):
            out.update(_comment_meanings(cls))
            out.update(_docstring_meanings(cls))
    return out


def _default(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "(required)"
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, type):  # a method class: its name, as --option and bundles give it
        return f"`{getattr(value, 'name', value.__name__)!r}`"
    return f"`{value!r}`"


def _kind(field: dataclasses.Field) -> str:
    kind = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", "")
    return f"`{kind}`".replace("|", "\\|")


def _table(config: type, skip: set[str]) -> list[str]:
    meanings = _meanings(config)
    rows = ["| option | type | default | meaning |", "| --- | --- | --- | --- |"]
    for f in dataclasses.fields(config):
        if f.name in skip:
            continue
        meaning = meanings.get(f.name, "").replace("|", "\\|")
        rows.append(f"| `{f.name}` | {_kind(f)} | {_default(f)} | {meaning} |")
    return rows


def options_reference() -> str:
    """The markdown page: the options every method has, then each method's own."""
    common = {f.name for f in dataclasses.fields(MethodConfig)}
    lines = [HEADER, "## Every method", "", *_table(MethodConfig, set()), ""]
    for name, cls in sorted(METHODS.items()):
        summary = method_summary(cls)
        lines += [f"## `{name}` ({cls.__name__})", "", summary.rstrip(".") + ".", ""]
        own = [f for f in dataclasses.fields(cls.Config) if f.name not in common]
        lines += _table(cls.Config, common) if own else ["No options of its own."]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> None:  # pragma: no cover
    """``python -m bayesify.app.options_reference [PATH]``: write the page (stdout without)."""
    text = options_reference()
    if len(argv) > 1:
        write_text(argv[1], text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv)
