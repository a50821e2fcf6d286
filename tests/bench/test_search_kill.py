"""A grid search killed (SIGKILL) at any moment resumes on its journal: every configuration
runs, none that finished runs again (but the chosen one, once, for its model), and the pick is
the full grid's. The kill points are random and seeded; ``BAYESIFY_SEARCH_KILLS`` sets how many
(3 by default; e.g. 30 for a longer run) and ``BAYESIFY_SEARCH_KILL_SEED`` their seed."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest

pytest.importorskip("optuna")

from bayesify.bench.search import (  # noqa: E402
    Dimension,
    SearchSettings,
    _study,
    grid_points,
    optuna_module,
    run_search,
)
from bayesify.bench.search_journal import journal_storage  # noqa: E402

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import search_kill_trials as trials  # noqa: E402

PAUSE = 0.15  # seconds per trial in the killed process
BEST = {"a": 2, "b": 1}


def _journal_lines(path: Path) -> int:
    return len(path.read_bytes().splitlines()) if path.exists() else 0


def _start(storage: Path, ready: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(HERE / "search_kill_trials.py"), str(storage),
                             str(ready), str(PAUSE)])  # fmt: skip


def _kill_at(proc: subprocess.Popen, storage: Path, lines: int, extra: float) -> None:
    """SIGKILL ``proc`` ``extra`` seconds after its journal reached ``lines`` lines (or once
    it has ended by itself)."""
    deadline = time.time() + 120
    while proc.poll() is None and _journal_lines(storage) < lines and time.time() < deadline:
        time.sleep(0.002)
    time.sleep(extra)
    proc.kill()
    proc.wait()


def _finished(storage: Path) -> list[dict]:
    """The configurations with a finished (complete) trial in the journal."""
    optuna = optuna_module()
    try:
        study = optuna.load_study(study_name="kill", storage=journal_storage(optuna, str(storage)))
    except KeyError:  # killed before it made the study
        return []
    S = optuna.trial.TrialState
    return [t.params for t in study.get_trials(deepcopy=False, states=(S.COMPLETE,))]


def _full_run_lines(folder: Path) -> int:
    """How many journal lines an uninterrupted run of the same search writes."""
    storage = folder / "full.journal"
    run_search(partial(trials.objective, 0.0), trials.space(),
               SearchSettings(storage=str(storage), study="kill"))  # fmt: skip
    return _journal_lines(storage)


def test_a_grid_search_killed_at_random_moments_resumes_and_picks_the_grids_best(tmp_path):
    kills = int(os.environ.get("BAYESIFY_SEARCH_KILLS", "3"))
    rng = random.Random(int(os.environ.get("BAYESIFY_SEARCH_KILL_SEED", "0")))
    total = _full_run_lines(tmp_path)
    points = grid_points(trials.space())
    outcomes = []
    for i in range(kills):
        folder = tmp_path / f"kill{i}"
        folder.mkdir()
        storage = folder / "s.journal"
        for k in range(1 + (rng.random() < 0.5)):  # sometimes the resumed run is killed too
            ready = folder / f"ready{k}"
            proc = _start(storage, ready)
            while proc.poll() is None and not ready.exists():
                time.sleep(0.005)
            start = _journal_lines(storage)
            _kill_at(proc, storage, start + rng.randint(0, total), rng.uniform(0, PAUSE))
        before = _finished(storage)
        calls: list[dict] = []

        def objective(params, report, calls=calls):
            calls.append(dict(params))
            return trials.objective(0.0, params, report)

        found = run_search(objective, trials.space(),
                           SearchSettings(storage=str(storage), study="kill"))  # fmt: skip
        outcomes.append((len(before), len(calls)))
        assert found.params == BEST and found.value == 0.0, f"kill point {i}"
        assert found.artefact == ("trained", 2, 1)
        after = _finished(storage)
        assert all(p in after for p in points), f"kill point {i}: a configuration never ran"
        again = [p for p in calls if p in before]
        assert again in ([], [BEST] if BEST in before else []), f"kill point {i}: {again}"
        assert len(calls) == len(points) - len(before) + len(again)
    print("kill points (finished before, run on resume):", outcomes)


def test_a_trial_killed_with_one_grid_point_left_after_it_resumes(tmp_path):
    """Killed while trial n-2 of an n-point grid ran: the trial queued again for it carries
    its grid id, so the sampler's bookkeeping at its end finds one (it used to fail with
    ``KeyError: 'grid_id'``)."""
    optuna = optuna_module()
    space = [Dimension("a", (0, 1, 2))]
    settings = SearchSettings(storage=str(tmp_path / "s.journal"), study="one-left")
    study = _study(optuna, space, settings, "minimize", journal_storage(optuna, settings.storage))
    first = study.ask()
    study.tell(first, float((first.suggest_categorical("a", [0, 1, 2]) - 1) ** 2))
    study.ask().suggest_categorical("a", [0, 1, 2])  # the process dies in this trial
    calls = []

    def objective(params, report):
        calls.append(params["a"])
        return float((params["a"] - 1) ** 2), params["a"]

    found = run_search(objective, space, settings)
    assert sorted(calls) == sorted({0, 1, 2} - {first.params["a"]})
    assert found.params == {"a": 1} and found.artefact == 1
    ran = len(calls)
    again = run_search(objective, space, settings)  # finished: only the pick trains again
    assert again.params == {"a": 1} and calls[ran:] == [1]
