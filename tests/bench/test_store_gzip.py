"""The committed export is gzip-compressed (``benchmarks/uci/store.jsonl.gz``): ``--seed-from``
reads it and an old plain ``.jsonl`` alike, to the same rows; ``--export`` to a ``.gz`` name
writes the same text compressed, the same bytes on every export."""

from __future__ import annotations

import gzip
from pathlib import Path

from typer.testing import CliRunner

from bayesify.bench.runner import run_jobs
from bayesify.bench.store import ResultsStore
from bayesify.bench.store_io import export_rows, read_rows
from bayesify.bench.uci.command import EXPORT_DIGITS
from bayesify.bench.uci.jobs import GAL_EXPERIMENT, mc_dropout_job
from bayesify.cli import app

REPO = Path(__file__).resolve().parents[2]


def _score(job) -> dict:
    return {"rmse": 1.0 + job.split, "ll": -2.0 - job.split, "ue_std": [0.123456789, 2.0]}


def _seed(tmp_path: Path, source: Path, name: str, *more: str) -> list[dict]:
    """``bench uci --report-only --seed-from source`` into a fresh store: its done rows."""
    store = tmp_path / f"{name}.db"
    args = ["bench", "uci", "--report-only", "--store", str(store), "--seed-from", str(source),
            "--out", str(tmp_path / name / "uci.md"), *more]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    with ResultsStore(store) as db:
        return db.records()


def test_a_jsonl_and_its_gzip_seed_the_same_rows_and_export_round_trips(tmp_path):
    store, plain = tmp_path / "a.db", tmp_path / "store.jsonl"
    jobs = [mc_dropout_job(d, s, "homoscedastic", "quick") for d in ("yacht", "energy")
            for s in range(3)]  # fmt: skip
    run_jobs(GAL_EXPERIMENT, jobs, _score, store, progress=False)
    assert export_rows(store, plain, digits=EXPORT_DIGITS) == 6
    packed = tmp_path / "store.jsonl.gz"
    assert export_rows(store, packed, digits=EXPORT_DIGITS) == 6
    assert gzip.decompress(packed.read_bytes()) == plain.read_bytes()
    assert read_rows(packed) == read_rows(plain) and len(read_rows(plain)) == 6

    from_plain = _seed(tmp_path, plain, "p")
    again = tmp_path / "again.jsonl.gz"
    from_packed = _seed(tmp_path, packed, "g", "--export", str(again))
    assert len(from_plain) == 6 and from_packed == from_plain
    assert again.read_bytes() == packed.read_bytes()  # no time stamp: the same bytes

    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(packed.read_bytes()[:-20])
    args = ["bench", "uci", "--report-only", "--store", str(tmp_path / "c.db"), "--seed-from",
            str(cut), "--out", str(tmp_path / "c" / "uci.md")]  # fmt: skip
    result = CliRunner().invoke(app, args)
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and "cut.jsonl.gz is not a gzip-compressed file of rows" in said
    assert "Traceback" not in said


def test_the_committed_export_is_compressed_and_reads_as_rows():
    export = REPO / "benchmarks" / "uci" / "store.jsonl.gz"
    assert not (REPO / "benchmarks" / "uci" / "store.jsonl").exists()
    rows = read_rows(export)
    assert len(rows) > 1000 and {"experiment", "config", "metrics"} <= set(rows[0])
