"""Bench rows record their method's option defaults, and a page names the rows made under
other defaults than the current code's (job keys do not hold a method's defaults)."""

from __future__ import annotations

import dataclasses
import json
import sqlite3

import bayesify
from bayesify.bench.method_defaults import (
    KEY,
    class_defaults,
    defaults_record,
    stale_defaults_note,
)
from bayesify.models import mlp


def test_class_defaults_are_the_config_fields_defaults_as_json_holds_them():
    got = class_defaults(bayesify.BatchEnsemble.Config)
    names = {f.name for f in dataclasses.fields(bayesify.BatchEnsemble.Config)}
    assert set(got) <= names and {"members", "init", "fast_lr", "member_batch"} <= set(got)
    assert got["members"] == 4 and got["fast_lr"] == 0.5
    assert got["init"] == "normal" and got["member_batch"] == "repeat"  # enums by value
    assert json.loads(json.dumps(got)) == got


def test_a_record_names_the_class_and_anything_else_has_none():
    record = defaults_record(bayesify.BatchEnsemble(mlp(2)))
    assert record == {"class": "BatchEnsemble",
                      "defaults": class_defaults(bayesify.BatchEnsemble.Config)}  # fmt: skip
    assert defaults_record(object()) is None


def test_the_note_names_only_rows_whose_defaults_changed():
    now = defaults_record(bayesify.BatchEnsemble(mlp(2)))
    old = {"class": "BatchEnsemble", "defaults": {**now["defaults"], "fast_lr": 1.0}}
    assert stale_defaults_note([("batch-ensemble", {KEY: now})]) == []
    assert stale_defaults_note([("batch-ensemble", {}), ("x", {KEY: None})]) == []  # no record
    gone = {"class": "NoSuchMethod", "defaults": {"a": 1}}
    assert stale_defaults_note([("old", {KEY: gone})]) == []
    rows = [("batch-ensemble", {KEY: old}), ("batch-ensemble", {KEY: old}),
            ("batch-ensemble", {KEY: now}), ("mcbn", {})]  # fmt: skip
    (line, blank) = stale_defaults_note(rows)
    assert "batch-ensemble (2 rows: fast_lr 1.0 → 0.5)" in line and "mcbn" not in line
    assert blank == ""


def test_a_uci_run_records_the_defaults_and_the_page_flags_a_stale_row(tmp_path):
    from uci_cli import run_bench_uci

    args = run_bench_uci(tmp_path, "batch-ensemble", "homoscedastic")
    page = tmp_path / "uci.md"
    assert "other defaults" not in page.read_text()
    with sqlite3.connect(tmp_path / "a.db") as db:
        (metrics,) = db.execute("SELECT metrics FROM runs").fetchone()
        m = json.loads(metrics)
        assert m[KEY] == defaults_record(bayesify.BatchEnsemble(mlp(2)))
        m[KEY]["defaults"]["fast_lr"] = 1.0  # as if made before the default changed
        db.execute("UPDATE runs SET metrics = ?", (json.dumps(m),))
    run_bench_uci(tmp_path, "batch-ensemble", "homoscedastic", "--report-only")
    assert args[-1] == str(page)
    assert "batch-ensemble (1 rows: fast_lr 1.0 → 0.5)" in page.read_text()
