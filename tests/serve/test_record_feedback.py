"""One feedback request is one record transaction: one commit for 100 outcomes, the same
statuses and figures as outcome-by-outcome calls, and all or none of a request kept when it
fails part way (as when the process is killed before the commit)."""

from __future__ import annotations

import numpy as np
import pytest

from bayesify.serve.monitor import ACCEPTED, ALREADY, FLAGGED, INVALID, Monitor
from bayesify.serve.record import Record


def _monitor(tmp_path, name: str, task: str = "regression") -> tuple[Monitor, Record]:
    store = Record.open(tmp_path / f"{name}.db", "full")
    return Monitor(task, name="m", target_range=(-3.0, 5.0), store=store), store


def _served(mon: Monitor, n: int) -> list[str]:
    rng = np.random.default_rng(0)
    means = rng.normal(0, 1, (n, 8))
    recs = [{"mean": float(m.mean()), "std": 1.0, "aleatoric_variance": 0.25, "lower": -1.0,
             "upper": 1.0} for m in means]  # fmt: skip
    return mon.record_request(recs, samples=means, noise_std=np.full((n, 8), 0.5))[1]


def _commits(store: Record) -> list[str]:
    seen: list[str] = []
    store.backend._conn.set_trace_callback(
        lambda sql: seen.append(sql) if sql.strip().upper() == "COMMIT" else None
    )
    return seen


def test_a_100_outcome_request_commits_once_and_scores_as_single_calls(tmp_path):
    batch, store = _monitor(tmp_path, "batch")
    single, _ = _monitor(tmp_path, "single")
    outcomes = [float(v) for v in np.random.default_rng(1).normal(0, 1, 100)]
    outcomes[7] = 99.0  # beyond the widened target range: flagged
    items = list(zip(_served(batch, 100), outcomes, strict=True))
    items[9] = (items[3][0], 0.0)  # the same row twice in one request
    commits = _commits(store)
    got = batch.feedback_many(items)
    assert len(commits) == 1
    ids = _served(single, 100)
    want = [single.feedback(ids[int(r.rsplit("-", 1)[1])], y) for r, y in items]
    assert got == want
    assert [s for s, _ in got].count(ACCEPTED) == 98
    assert got[7][0] == FLAGGED and got[9] == (ALREADY, None)
    batch.refresh(), single.refresh()
    assert batch.figures()["all"] == single.figures()["all"]


def test_an_invalid_class_ends_the_request_there_keeping_the_rows_before(tmp_path):
    store = Record.open(tmp_path / "c.db", "full")
    mon = Monitor("classification", store=store)
    _, ids = mon.record_request([{"probabilities": [0.9, 0.05, 0.05]}] * 10)
    got = mon.feedback_many([(r, 5.0 if i == 4 else 0.0) for i, r in enumerate(ids)])
    assert [s for s, _ in got] == [ACCEPTED] * 4 + [INVALID]
    assert "0..2" in got[4][1]
    assert [mon.feedback(r, 0.0)[0] for r in ids] == [ALREADY] * 4 + [ACCEPTED] * 6
    _, (fresh,) = mon.record_request([{"probabilities": [0.9, 0.05, 0.05]}])
    with pytest.raises(ValueError, match="0..2"):
        mon.feedback(fresh, 7.0)
    assert mon.feedback(fresh, 1.0) == (ACCEPTED, None)


def test_a_request_that_fails_part_way_keeps_none_of_its_outcomes(tmp_path, monkeypatch):
    mon, store = _monitor(tmp_path, "fail")
    ids = _served(mon, 100)
    before = mon._ledger.counts()
    calls = iter(range(1000))

    def crash(item, y):  # the process dying at row 50, before the commit
        if next(calls) == 50:
            raise RuntimeError("killed")
        return None

    monkeypatch.setattr(mon, "_out_of_range", crash)
    with pytest.raises(RuntimeError):
        mon.feedback_many([(r, 0.0) for r in ids])
    assert mon._ledger.counts() == before
    monkeypatch.undo()
    assert [s for s, _ in mon.feedback_many([(r, 0.0) for r in ids])] == [ACCEPTED] * 100
