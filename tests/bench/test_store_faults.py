"""Damaged results stores: a corrupt page or an empty (0-byte) file is one line naming the file
in every command (``bench``, ``report``, the runner, an import), never a traceback and never
taken as a new store; creating a store never leaves an empty file behind."""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bayesify.bench.runner import run_jobs
from bayesify.bench.store import ResultsStore, RowKey, StoreError
from bayesify.bench.store_io import export_rows, import_rows
from bayesify.bench.store_report import write_store_report
from bayesify.cli import app

PAGE = 4096


@dataclass(frozen=True)
class Job:
    method: str
    dataset: str
    split: int
    seed: int = 0


def square(job: Job) -> dict[str, float]:
    return {"value": float(job.split**2)}


def _full_store(path: Path, rows: int = 300) -> None:
    """A store of many pages (rows with padding), checkpointed into the main file."""
    with ResultsStore(path) as db:
        for i in range(rows):
            db.finish(RowKey("e", "m", "d", i, 0, "h"), {"pad": "x" * 200}, 1.0, {})
    assert not Path(f"{path}-wal").exists()  # closing the last connection checkpointed it
    assert path.stat().st_size > 10 * PAGE


def _corrupt_page(path: Path, page: int = 5) -> None:
    """Overwrite one page in the middle of the file (its header stays intact)."""
    with open(path, "r+b") as f:
        f.seek(PAGE * page)
        f.write(bytes(range(256)) * (PAGE // 256))


def _sqlite_finds_it_whole(path: Path) -> bool:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    except sqlite3.DatabaseError:
        return False
    finally:
        conn.close()


def _cli(*args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output.strip().splitlines()


def _noise_toy(store: Path, out: Path) -> list[str]:
    return ["bench", "noise-toy", "--store", str(store), "--out", str(out), "--methods",
            "deterministic", "--splits", "1", "--epochs", "1", "--n-train", "50"]  # fmt: skip


def test_a_store_with_a_corrupt_page_is_one_line_in_every_command(tmp_path):
    store = tmp_path / "results.db"
    _full_store(store)
    _corrupt_page(store)
    assert not _sqlite_finds_it_whole(store)  # the damage is real
    calls = {
        "runner": lambda: run_jobs("e", [Job("m", "d", 1)], square, store, progress=False),
        "runner, 2 workers": lambda: run_jobs(
            "e", [Job("m", "d", s) for s in range(3)], square, store, workers=2, progress=False
        ),  # fmt: skip
        "report": lambda: write_store_report(store, tmp_path / "report"),
        "export": lambda: export_rows(store, tmp_path / "rows.jsonl"),
        "open": lambda: ResultsStore(store, readonly=True),
    }
    for what, call in calls.items():
        with pytest.raises(StoreError) as info:
            call()
        text = str(info.value)
        assert "\n" not in text and f"{store} is not a readable results store" in text, what
        assert "move it aside" in text, what
    for args in (_noise_toy(store, tmp_path / "nt"), ["report", str(store)]):
        code, lines = _cli(*args)
        assert code == 2 and len(lines) == 1, (args[:2], lines)
        assert lines[0].startswith("error: ") and str(store) in lines[0]


def test_damage_found_after_opening_is_one_line_too(tmp_path, monkeypatch):
    store = tmp_path / "results.db"
    _full_store(store)
    _corrupt_page(store)
    monkeypatch.setattr(ResultsStore, "_check", lambda self: None)  # as if it came later
    with ResultsStore(store) as db:
        with pytest.raises(StoreError, match="is not a readable results store") as info:
            db.records()
        assert "\n" not in str(info.value) and str(store) in str(info.value)
        with pytest.raises(StoreError, match="is not a readable results store"):
            db.done_keys("e")


def test_an_empty_file_is_refused_not_taken_as_a_new_store(tmp_path):
    store = tmp_path / "results.db"
    store.write_bytes(b"")
    for call in (lambda: run_jobs("e", [Job("m", "d", 1)], square, store, progress=False),
                 lambda: write_store_report(store, tmp_path / "report"),
                 lambda: import_rows(store, []),
                 lambda: ResultsStore(store, readonly=True)):  # fmt: skip
        with pytest.raises(StoreError, match=r"is an empty file \(0 bytes\), not a results store"):
            call()
    assert store.stat().st_size == 0  # left exactly as it was
    code, lines = _cli(*_noise_toy(store, tmp_path / "nt"))
    assert code == 2 and lines == [
        f"error: {store} is an empty file (0 bytes), not a results store; a run creates its "
        "store itself: remove the file or give another path"
    ]


def test_a_new_store_appears_whole(tmp_path, monkeypatch):
    store = tmp_path / "sub" / "results.db"
    summary = run_jobs("e", [Job("m", "d", s) for s in range(2)], square, store, progress=False)
    assert len(summary.finished) == 2
    assert sorted(p.name for p in store.parent.iterdir() if not p.name.startswith(
        "results.db-")) == ["results.db"]  # fmt: skip
    # a run killed while creating its store leaves no file at the store's path
    from bayesify.bench import store_file

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(store_file.os, "link", killed)
    other = tmp_path / "other.db"
    with pytest.raises(KeyboardInterrupt):
        ResultsStore(other)
    assert os.listdir(tmp_path) == ["sub"]
