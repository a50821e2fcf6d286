"""A search journal cut short or garbled: the run stops with one line naming the journal, the
line and how to recover (exit code 2 from a bench command), instead of failing every row with
a traceback; its rows stay to run, and the recovery it names works."""

from __future__ import annotations

import dataclasses
import sys
from functools import partial
from pathlib import Path
from typing import ClassVar

import pytest
import typer
from typer.testing import CliRunner

pytest.importorskip("optuna")

from bayesify.bench.options import add_bench_command, option  # noqa: E402
from bayesify.bench.runner import run_jobs  # noqa: E402
from bayesify.bench.search import SearchSettings, run_search  # noqa: E402
from bayesify.bench.search_journal import SearchJournalError, check_journal  # noqa: E402
from bayesify.bench.store import ResultsStore, StoreError  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import search_kill_trials as trials  # noqa: E402

BEST = {"a": 2, "b": 1}


def _journal(path: Path) -> bytes:
    """A finished search's journal (two studies, so that a cut keeps a whole one)."""
    for study in ("job0", "job1"):
        run_search(partial(trials.objective, 0.0), trials.space(),
                   SearchSettings(storage=str(path), study=study))  # fmt: skip
    return path.read_bytes()


def _damaged(tmp_path: Path) -> dict[str, tuple[bytes, int, str]]:
    """name -> (journal bytes, the first bad line, what is wrong with it)."""
    whole = _journal(tmp_path / "whole.journal")
    lines = whole.splitlines(keepends=True)
    cut = len(whole) - len(lines[-1]) // 2  # the last line cut in half, as by a crash
    garbled = b"".join(lines[:5]) + b'{"op_code": 4, "trial\x00\n' + b"".join(lines[6:])
    return {
        "cut short": (whole[:cut], len(lines), "cut short"),
        "garbled": (garbled, 6, "not JSON"),
        "not text": (b"\x89PNG\r\n\x1a\n" * 20, 1, "not JSON"),
        "not an object": (b"[1, 2]\n", 1, "not a JSON object"),
    }


def test_a_damaged_journal_is_one_line_naming_the_file_line_and_recovery(tmp_path):
    for name, (data, line, why) in _damaged(tmp_path).items():
        path = tmp_path / f"{name.replace(' ', '-')}.journal"
        path.write_bytes(data)
        with pytest.raises(SearchJournalError) as info:
            run_search(partial(trials.objective, 0.0), trials.space(),
                       SearchSettings(storage=str(path), study="job1"))  # fmt: skip
        text = str(info.value)
        assert "\n" not in text and isinstance(info.value, StoreError), name
        assert text.startswith(f"the search journal {path} is damaged: line {line} is {why};")
        assert "move it aside" in text
        assert (f"keep its first {line - 1} line(s) (head -n {line - 1}" in text) == (line > 1)
        assert path.read_bytes() == data, f"{name}: the journal was changed"


def test_keeping_the_lines_before_the_damage_resumes_the_searches(tmp_path):
    data, line, _ = _damaged(tmp_path)["garbled"]
    path = tmp_path / "s.journal"
    path.write_bytes(b"".join(data.splitlines(keepends=True)[: line - 1]))  # head -n 5
    check_journal(path)
    calls = []

    def objective(params, report):
        calls.append(params)
        return trials.objective(0.0, params, report)

    found = run_search(objective, trials.space(), SearchSettings(storage=str(path), study="job0"))
    assert found.params == BEST and len(calls) >= 1


@pytest.mark.parametrize("workers", [1, 2])
def test_a_run_stops_on_a_damaged_journal_and_leaves_its_rows_to_run(tmp_path, workers):
    journal, store = tmp_path / "s.journal", tmp_path / "r.db"
    journal.write_bytes(_damaged(tmp_path)["garbled"][0])
    jobs = [trials.SearchJob("m", "d", s, storage=str(journal)) for s in range(3)]
    for _ in range(2 if workers == 1 else 1):  # and again on the next run
        with pytest.raises(SearchJournalError, match=f"the search journal {journal} is damaged"):
            run_jobs("e", jobs, trials.search_job, store, workers=workers, progress=False)
        with ResultsStore(store) as db:
            statuses = [r["status"] for r in db.records("e", status=None)]
        assert statuses and set(statuses) == {"running"}, statuses  # never failed
    if workers == 1:
        journal.unlink()  # moved aside: the searches run again
        summary = run_jobs("e", jobs, trials.search_job, store, progress=False)
        assert len(summary.finished) == 3 and not summary.failed


@dataclasses.dataclass(frozen=True)
class JournalOptions:
    command: ClassVar[str] = "journal-toy"
    store: str = option("r.db", "Results store.")
    journal: str = option("s.journal", "Search journal.")


def _run(opts: JournalOptions) -> str:
    jobs = [trials.SearchJob("m", "d", s, storage=opts.journal) for s in range(2)]
    return str(run_jobs("e", jobs, trials.search_job, opts.store, progress=False))


def test_a_bench_command_exits_2_with_the_one_line(tmp_path):
    journal = tmp_path / "s.journal"
    journal.write_bytes(_damaged(tmp_path)["cut short"][0])
    app = typer.Typer()
    add_bench_command(app, JournalOptions, _run)
    app.command("other")(lambda: None)  # two commands: the name is the first argument
    args = ["journal-toy", "--store", str(tmp_path / "r.db"), "--journal", str(journal)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    [line] = result.output.strip().splitlines()
    assert line.startswith(f"error: the search journal {journal} is damaged: line ")


def test_a_lock_left_by_a_killed_writer_is_broken_after_the_stale_time(tmp_path):
    """A writer SIGKILLed while appending leaves the journal's lock link: the next search waits
    STALE_LOCK_S seconds of it standing unchanged, not Optuna's default 30, then runs."""
    import os
    import time

    from bayesify.bench.search_journal import STALE_LOCK_S

    path = tmp_path / "s.journal"
    path.write_bytes(_journal(tmp_path / "first.journal"))
    os.symlink(str(path), str(path) + ".lock")  # the lock as a killed writer leaves it
    start = time.monotonic()
    run_search(partial(trials.objective, 0.0), trials.space(),
               SearchSettings(storage=str(path), study="after-the-kill"))  # fmt: skip
    waited = time.monotonic() - start
    assert STALE_LOCK_S <= waited < 25, waited  # Optuna's own grace period is 30 s
    assert not os.path.lexists(str(path) + ".lock")
    check_journal(str(path))
