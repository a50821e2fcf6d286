"""Finished rows of a results store as text: an export that travels with the repository, and
the import that makes a store on another machine resume where the last run stopped.

The export is JSON Lines, one finished row per line (its key, ``config``, ``metrics``,
``seconds`` and ``created``), keys sorted and lines sorted by row key, so a file rewritten after
more rows finished differs from the old one only by the new lines. A name ending ``.jsonl.gz``
is the same text gzip-compressed (no time stamp in the header, so the same rows give the same
bytes); imports read either. Floats are written exactly
(shortest round-trip text) except metrics the caller names as plot data, which are rounded to
a few significant digits to keep the file small; export, import and export again gives the
same bytes.

An import adds each row as done (0 attempts in the importing store), so the runner skips it; a
row already done in the store is kept, never overwritten, and importing a file twice adds
nothing the second time. One exception: a recomputation that holds more replaces the row of
its key (a full row one marked ``recovered_from``, scalars recovered from a flat table without
the plot data; a row with metrics the stored one lacks, one added since it ran such as the
epistemic share), but only when every number the stored row holds equals the new row's to
float32 precision (a recomputation that reproduces it); otherwise the stored row is kept and
the import counts a conflict. An import of a *rerun* (``rerun=True``: the same jobs run again under
the current code, on purpose) replaces every stored row of its keys whose metrics it holds all
of, whatever the numbers, and counts those whose numbers changed.

Every row is checked before anything is written: its key, that its configuration hash is its
configuration's, that every number in its metrics is finite and within ±1e100 (a non-finite
metric is exported as null; a larger one is a damaged or hand-edited row, and would overflow the
summaries of every later report), and that its metrics hold what a finished row of its
experiment holds (the caller's ``required`` names); a file or row that fails is one
:class:`StoreError` line naming it (a ``.jsonl`` file's line number) and nothing is imported.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bayesify.atomic import write_bytes, write_text
from bayesify.bench.runner import config_hash
from bayesify.bench.store import ResultsStore, RowKey, StoreError

log = logging.getLogger(__name__)

KEY_FIELDS = ("experiment", "method", "dataset", "split", "seed", "config_hash")
RECOVERED = "recovered_from"  # metrics key of a row recovered from a flat table (no plot data)
#: the largest metric magnitude imported: sums of squares over many rows stay finite
METRIC_LIMIT = 1e100
#: the names of exports (JSON Lines, plain or gzip-compressed); any other file is a store
EXPORT_SUFFIXES = (".jsonl", ".jsonl.gz")


@dataclass
class ImportSummary:
    """What an import did, per row: added, kept (already done), replaced (a recovered row by
    the full one, a row by its recomputation or rerun), conflicts (a recomputation whose
    numbers differ from the stored row's, which is kept) or changed (replaced by a rerun whose
    numbers differ)."""

    added: int = 0
    kept: int = 0
    replaced: int = 0
    conflicts: list[str] = field(default_factory=list)
    changed: int = 0

    def add(self, other: ImportSummary) -> None:
        """Count ``other``'s rows in this summary too."""
        self.added, self.kept = self.added + other.added, self.kept + other.kept
        self.replaced += other.replaced
        self.conflicts += other.conflicts
        self.changed += other.changed

    def __str__(self) -> str:
        text = f"{self.added} added, {self.kept} kept (already done), {self.replaced} replaced"
        text += f" ({self.changed} with other numbers: a rerun)" if self.changed else ""
        return text + (f", {len(self.conflicts)} conflicts" if self.conflicts else "")


def _rounded(value: Any, digits: int) -> Any:
    """``value`` (a float or a list of them) to ``digits`` significant digits."""
    if isinstance(value, list):
        return [_rounded(v, digits) for v in value]
    return float(f"{value:.{digits}g}") if isinstance(value, float) else value


def export_line(row: dict[str, Any], digits: Mapping[str, int] | None = None) -> str:
    """One finished row (as :meth:`ResultsStore.records` gives it) as one JSON line; the
    metrics named in ``digits`` (plot data) rounded to that many significant digits."""
    metrics = {k: _rounded(v, digits[k]) if digits and k in digits else v
               for k, v in row["metrics"].items()}  # fmt: skip
    out = {k: row[k] for k in KEY_FIELDS}
    out.update(config=row["config"], metrics=metrics, seconds=row.get("seconds"),
               created=row.get("created"))  # fmt: skip
    return json.dumps(out, sort_keys=True, separators=(",", ":"), allow_nan=False)


def export_rows(
    store: str | Path, path: str | Path, digits: Mapping[str, int] | None = None
) -> int:
    """Write every finished row of the store file ``store`` to ``path`` (JSON Lines, sorted by
    key, gzip-compressed if the name ends ``.gz``; written to a temporary file first, then
    renamed); returns the number of rows. ``digits``: significant digits of named metrics
    (:func:`export_line`)."""
    with ResultsStore(store, readonly=True) as db:
        rows = db.records()
    rows.sort(key=lambda r: tuple(r[k] for k in KEY_FIELDS))
    write_lines(path, "".join(export_line(r, digits) + "\n" for r in rows))
    return len(rows)


def import_export(
    store: str | Path, path: str | Path, required: Mapping[str, Sequence[str]] | None = None
) -> ImportSummary | None:
    """Import the rows of the export ``path`` into ``store`` if that file exists (a benchmark's
    ``--export``: a run on a fresh checkout resumes from the committed rows); None if not."""
    if not path or not Path(path).is_file():
        return None
    summary = import_rows(store, read_rows(path), source=Path(path).name, required=required)
    log.info("imported %s into %s: %s", path, store, summary)
    return summary


def rewrite_export(
    store: str | Path, path: str | Path, digits: Mapping[str, int] | None = None
) -> int | None:
    """Rewrite the export ``path`` from ``store``'s finished rows (:func:`export_rows`) if both
    are named and the store exists; the number of rows, or None."""
    if not path or not Path(store).is_file():
        return None
    n = export_rows(store, path, digits)
    log.info("exported %d finished rows to %s", n, path)
    return n


def write_lines(path: str | Path, text: str) -> None:
    """``text`` (JSON Lines) to ``path``, gzip-compressed without a time stamp if the name ends
    ``.gz``; written beside it and renamed into place, so a kill leaves the old file whole."""
    if str(path).endswith(".gz"):
        write_bytes(path, gzip.compress(text.encode(), mtime=0))
    else:
        write_text(path, text)


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of an export (``.jsonl`` or ``.jsonl.gz``) or the finished rows of another
    store (sqlite)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no rows to import at {path}")
    if not path.name.endswith(EXPORT_SUFFIXES):
        with ResultsStore(path, readonly=True) as db:
            return db.records()
    rows = []
    data = path.read_bytes()
    if path.suffix == ".gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error):  # gzip's errors: not gzip, cut short, damaged
            raise StoreError(f"{path} is not a gzip-compressed file of rows (damaged or cut "
                             "short)") from None  # fmt: skip
    try:
        lines = data.decode().splitlines()
    except UnicodeDecodeError:
        raise StoreError(f"{path} is not a JSON Lines file of rows (not UTF-8 text)") from None
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                row = json.loads(line)
            except (ValueError, RecursionError) as e:
                raise StoreError(f"{path}:{n}: not a JSON row ({e})") from None
            if isinstance(row, dict) and isinstance(row.get("metrics"), dict):
                check_metrics(row["metrics"], f"{path}:{n}")
            rows.append(row)
    return rows


def check_metrics(metrics: dict[str, Any], where: str) -> None:
    """Every number in ``metrics`` (also inside lists) finite and within ±:data:`METRIC_LIMIT`;
    else a :class:`StoreError` naming ``where`` and the field (nothing is imported)."""

    def bad(value: Any) -> bool:
        if isinstance(value, list):
            return any(bad(v) for v in value)
        if isinstance(value, dict):
            return any(bad(v) for v in value.values())
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return number and not (math.isfinite(value) and abs(value) <= METRIC_LIMIT)

    for name, value in metrics.items():
        if bad(value):
            shown = value if not isinstance(value, list | dict) else "a list holding a number"
            raise StoreError(f"{where}: metric {name!r} is {shown}, not a finite number within "
                             f"±{METRIC_LIMIT:g}; nothing of the file was imported")  # fmt: skip


def checked_key(
    row: dict[str, Any], where: str = "row", required: Mapping[str, Sequence[str]] | None = None
) -> RowKey:
    """The row's key, after checking its fields, that ``config_hash`` is its config's hash and
    that its metrics hold ``required[experiment]`` (numbers; null for a non-finite one)."""
    if not isinstance(row, dict):
        raise StoreError(f"{where} is not a JSON object")
    missing = [k for k in (*KEY_FIELDS, "config", "metrics") if k not in row]
    if missing:
        raise StoreError(f"{where} lacks {', '.join(missing)}")
    if not isinstance(row["config"], dict) or not isinstance(row["metrics"], dict):
        raise StoreError(f"{where}: config and metrics must be JSON objects")
    text = [k for k in KEY_FIELDS[:3] if not isinstance(row[k], str)]
    whole = [k for k in ("split", "seed") if type(row[k]) is not int]
    if text or whole or not isinstance(row["config_hash"], str):
        raise StoreError(f"{where}: experiment, method, dataset and config_hash must be text, "
                         "split and seed whole numbers")  # fmt: skip
    if config_hash(row["config"]) != row["config_hash"]:
        raise StoreError(
            f"{where}: config_hash {row['config_hash']} is not the hash of its config "
            f"({config_hash(row['config'])})"
        )
    check_metrics(row["metrics"], where)
    needed = (required or {}).get(row["experiment"], ())
    bad = [k for k in needed if not _number_or_null(row["metrics"].get(k, "absent"))]
    if bad:
        raise StoreError(
            f"{where}: metrics lack {', '.join(bad)} (a finished {row['experiment']} row has "
            f"{', '.join(needed)}); not imported"
        )
    return RowKey(*(row[k] for k in KEY_FIELDS[:3]), row["split"], row["seed"], row["config_hash"])


def _number_or_null(value: Any) -> bool:
    """A metric as a store holds it: a number, or null (a non-finite number)."""
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def same_numbers(stored: dict[str, Any], full: dict[str, Any], rel_tol: float = 1e-5) -> bool:
    """Every value of the stored row's metrics (a recovered row's marker aside) equals the
    recomputed row's, numbers to ``rel_tol`` (a recomputation on another machine agrees to
    float32 precision, not bit by bit: the last bit of a float32 sum differs, ~1e-7, a
    normalised score's a little more)."""

    def equal(a: Any, b: Any) -> bool:
        if isinstance(a, float | int) and isinstance(b, float | int):
            return math.isclose(a, b, rel_tol=rel_tol, abs_tol=1e-9)
        if isinstance(a, list) and isinstance(b, list):  # plot data, exported to 6 digits
            return len(a) == len(b) and all(equal(u, v) for u, v in zip(a, b, strict=True))
        return a == b

    return all(equal(v, full.get(k)) for k, v in stored.items() if k != RECOVERED)


def import_rows(
    store: str | Path,
    rows: Iterable[dict[str, Any]],
    *,
    source: str = "",
    required: Mapping[str, Sequence[str]] | None = None,
    rerun: bool = False,
) -> ImportSummary:
    """Add ``rows`` (export lines or store records) to the store file ``store`` as done rows;
    every row is checked (:func:`checked_key`, ``required``: metric names per experiment)
    before anything is written. ``source`` names the rows' file in errors (``file row 3``).
    ``rerun``: the rows are a rerun of stored jobs and replace them (module docstring)."""
    prefix = f"{source} " if source else ""
    checked = [(checked_key(r, f"{prefix}row {i}", required), r) for i, r in enumerate(rows, 1)]
    summary = ImportSummary()
    with ResultsStore(store) as db:
        for key, row in checked:
            verdict: list[bool] = []
            outcome = db.put_done(key, row["config"], row["metrics"], seconds=row.get("seconds"),
                                  created=row.get("created"),
                                  replace=_replacer(row["metrics"], verdict, rerun))  # fmt: skip
            if verdict and not verdict[0]:
                if rerun:
                    summary.changed += 1
                else:
                    summary.conflicts.append(str(key))
            setattr(summary, outcome, getattr(summary, outcome) + 1)
    return summary


def _replacer(new: dict[str, Any], verdict: list[bool], rerun: bool = False) -> Any:
    """``put_done``'s ``replace``: a recovered row gives way to a full row with its numbers, a
    row to one with its numbers and more metrics, and with ``rerun`` to any full row holding
    its metrics (the numbers' comparison is appended to ``verdict``)."""

    def replace(old: dict[str, Any]) -> bool:
        if rerun:
            holds = set(new) >= set(old) - {RECOVERED}
        else:
            holds = RECOVERED in old or set(new) > set(old)
        if RECOVERED in new or not holds:
            return False
        verdict.append(same_numbers(old, new))
        return rerun or verdict[-1]

    return replace
