"""Imported rows must hold finite metrics within ±1e100: a row with ``ll = 1e308`` (or
``NaN``, ``Infinity``, or such a number inside a list) refuses the whole file in one line naming
its line number and the field, before anything is written; and a report of a store whose own
rows hold such numbers shows them instead of crashing."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bayesify.bench.runner import config_hash
from bayesify.bench.store import ResultsStore, RowKey, StoreError
from bayesify.bench.store_io import import_rows, read_rows
from bayesify.bench.store_report import write_store_report
from bayesify.bench.summary import mean_se, summarise
from bayesify.cli import app


def _row(split: int, **metrics) -> dict:
    config = {"epochs": 3}
    return {"experiment": "e", "method": "m", "dataset": "d", "split": split, "seed": 0,
            "config_hash": config_hash(config), "config": config,
            "metrics": {"rmse": 1.0 + split, "ll": -1.5, **metrics}, "seconds": 1.0,
            "created": 0.0}  # fmt: skip


def _write(path: Path, rows: list[dict], raw: dict[int, str] | None = None) -> None:
    """JSON Lines with a blank line after the first row; ``raw``: row index -> its text."""
    lines = [(raw or {}).get(i, json.dumps(r)) for i, r in enumerate(rows)]
    path.write_text(lines[0] + "\n\n" + "\n".join(lines[1:]) + "\n")


@pytest.mark.parametrize(
    "bad, shown",
    [({"ll": 1e308}, "1e+308"), ({"ll": -1e101}, "-1e+101"), ({"bins": [0.5, 1e200]}, "a list")],
)
def test_an_out_of_range_metric_refuses_the_file_naming_line_and_field(tmp_path, bad, shown):
    rows = [_row(0), _row(1), _row(2, **bad)]
    path, store = tmp_path / "rows.jsonl", tmp_path / "r.db"
    _write(path, rows)
    with pytest.raises(StoreError) as info:
        import_rows(store, read_rows(path))
    field = next(iter(bad))
    assert str(info.value).startswith(f"{path}:4: metric {field!r} is {shown}")  # blank line 2
    assert "not a finite number within ±1e+100; nothing of the file was imported" in str(info.value)
    assert not store.exists()  # nothing written, not even a store
    with ResultsStore(store) as db:  # the rows of another store are checked the same way
        for r in rows:
            db.put_done(RowKey(*(r[k] for k in ("experiment", "method", "dataset")), r["split"],
                               0, r["config_hash"]), r["config"], r["metrics"])  # fmt: skip
    with pytest.raises(StoreError, match=re.escape(f"other.db row 3: metric {field!r} is {shown}")):
        import_rows(tmp_path / "fresh.db", read_rows(store), source="other.db")


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_json_numbers_are_refused_too(tmp_path, token):
    rows = [_row(0), _row(1)]
    raw = {1: json.dumps(rows[1]).replace('"ll": -1.5', f'"ll": {token}')}
    path = tmp_path / "rows.jsonl"
    _write(path, rows, raw)
    with pytest.raises(StoreError, match="rows.jsonl:3: metric 'll' is -?(nan|inf)"):
        import_rows(tmp_path / "r.db", read_rows(path))


def test_finite_rows_within_range_are_imported(tmp_path):
    path = tmp_path / "rows.jsonl"
    _write(path, [_row(0, ll=-1e100, bins=[1.0, None]), _row(1, ll=None)])
    assert import_rows(tmp_path / "r.db", read_rows(path)).added == 2


def test_a_report_of_huge_own_rows_shows_them_instead_of_crashing(tmp_path):
    store = tmp_path / "r.db"
    with ResultsStore(store) as db:  # rows a diverged run wrote itself (not imported)
        for split, ll in enumerate((1e308, -1e308, 5.0)):
            r = _row(split, ll=ll)
            db.finish(RowKey("e", "m", "d", split, 0, r["config_hash"]), r["metrics"], 1.0,
                      r["config"])  # fmt: skip
    mean, se = mean_se([1e308, -1e308, 5.0])
    assert math.isnan(mean) or math.isinf(mean) or abs(mean) < 1e308
    assert math.isinf(se) or math.isnan(se)
    stats = summarise([{"dataset": "d", "method": "m", "ll": v} for v in (1e308, -1e308)], ["ll"])
    assert stats[("d", "m")]["ll"][2] == 2
    write_store_report(store, tmp_path / "report")
    result = CliRunner().invoke(app, ["report", str(store), "--out", str(tmp_path / "cli")])
    assert result.exit_code == 0, result.output
