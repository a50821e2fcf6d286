"""The option defaults a bench row's method was built under, stored with the row, and the note a
page prints where a stored row's defaults are no longer this code's.

A job's key holds the job's settings (model, epochs, T, …), not the method's own option
defaults: when a default changes, the old rows stay done under the method's name and a page
rebuilt from them would credit the new default with the old one's figures. Each new row records
its method's class and that class's option defaults (:func:`defaults_record`);
:func:`stale_defaults_note` compares them with the current code's. Rows made before the record
existed are not checked.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import Any

from bayesify.methods.core.config import MethodConfig

#: the metrics key the record is stored under
KEY = "method_defaults"


def class_defaults(config_cls: type) -> dict[str, Any]:
    """The default options of the method Config ``config_cls``, as a bundle's config.json holds
    them (``MethodConfig.to_dict`` through JSON: enums by value, tuples as lists)."""
    return json.loads(json.dumps(config_cls().to_dict()))


def defaults_record(method: Any) -> dict[str, Any] | None:
    """``{"class": name, "defaults": {...}}`` for a bayesify method (None for anything else,
    e.g. a reference library's wrapper)."""
    config = getattr(method, "config", None)
    if not isinstance(config, MethodConfig):
        return None
    return {"class": type(method).__name__, "defaults": class_defaults(type(config))}


@functools.cache
def _current_defaults(class_name: str) -> dict[str, Any] | None:
    """This code's defaults of the method class ``class_name`` (None: no such class)."""
    import bayesify

    config = getattr(getattr(bayesify, class_name, None), "Config", None)
    return None if config is None else class_defaults(config)


def _changes(record: dict[str, Any]) -> list[str] | None:
    """``"option stored → now"`` for each default that has changed since ``record`` (None:
    its class is not in this code)."""
    now = _current_defaults(record.get("class", ""))
    if now is None:
        return None
    then = record.get("defaults", {})
    return [f"{k} {then[k]!r} → {now[k]!r}" for k in sorted(now) if k in then and then[k] != now[k]]


def stale_defaults_note(rows: Iterable[tuple[str, dict[str, Any]]]) -> list[str]:
    """Markdown lines naming each method (of ``(method name, metrics)`` rows) whose rows were
    made under other option defaults than this code's, with the options that changed; no
    lines where every recorded row agrees."""
    stale: dict[str, tuple[int, set[str]]] = {}
    for name, metrics in rows:
        record = metrics.get(KEY) if isinstance(metrics, dict) else None
        changes = _changes(record) if record else None
        if changes:
            count, seen = stale.get(name, (0, set()))
            stale[name] = (count + 1, seen | set(changes))
    if not stale:
        return []
    parts = [f"{name} ({count} rows: {'; '.join(sorted(seen))})"
             for name, (count, seen) in sorted(stale.items())]  # fmt: skip
    return [
        "**Rows made under other defaults than this code's**: "
        + ", ".join(parts)
        + ". Their figures are the old defaults'; rerun those rows (delete them from the store "
        "and the export, or import a rerun with `--rerun-from`).",
        "",
    ]
