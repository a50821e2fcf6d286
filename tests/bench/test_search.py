"""The searches of the presets on Optuna (bayesify.bench.search): the full grid picks exactly
what a hand-written loop picks, a killed search resumes without redoing finished trials,
trials run in parallel processes, TPE keeps its budget, pruning can change the pick."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from bayesify.bench.runner import job_config, job_key
from bayesify.bench.search import (
    NEEDS_OPTUNA,
    Dimension,
    MissingSearchExtra,
    SearchSettings,
    grid_points,
    run_search,
)
from bayesify.bench.uci import teye as uci
from bayesify.bench.uci.gal import GalUCIJob
from bayesify.bench.uci.jobs import TeyeUCIJob
from bayesify.bench.uci.teye_cv import Fold, TrainSpec, cross_validate, teye_weight_decay

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import search_trials  # noqa: E402

SPACE = [Dimension("a", (0, 1, 2, 3)), Dimension("b", (0, 1, 2))]


def brute_force(space, value, sign=1.0):
    """The hand-written loop: nested loops in the grid's order, strictly better replaces."""
    best = None
    for p in grid_points(space):
        v = sign * value(p)
        if best is None or v < best[0]:
            best = (v, p)
    return best[1]


def _lines(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def test_grid_picks_the_loops_choice_among_ties(tmp_path):
    calls = []

    def objective(params, report):
        calls.append(params)
        return search_trials.bowl(params), dict(params)

    found = run_search(objective, SPACE)
    # three configurations tie at 0; the loop keeps the first of them in the grid's order
    assert found.params == brute_force(SPACE, search_trials.bowl) == {"a": 2, "b": 0}
    assert found.artefact == {"a": 2, "b": 0} and found.value == 0.0
    assert sorted(map(str, calls)) == sorted(map(str, grid_points(SPACE)))  # each once
    assert calls != grid_points(SPACE)  # Optuna visits the grid in another order
    # maximising: the loop's first strictly largest value
    up = run_search(objective, SPACE, direction="maximize")
    assert up.params == brute_force(SPACE, search_trials.bowl, sign=-1.0)


def test_teye_search_picks_what_brute_force_cross_validation_picks():
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(48, 3, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.3 * torch.randn(48, generator=g)
    folds = [Fold(x[:24], y[:24], x[24:], y[24:]), Fold(x[24:], y[24:], x[:24], y[:24])]
    data = SimpleNamespace(name="toy", n_features=3)
    s = uci.UCISettings(epochs=3, patience=2, batch_sizes=(6, 24), weight_decays=(1e-4, 1e-1))
    loop = {}
    for b in s.batch_sizes:  # the old hand-written grid of _search
        for lam in s.weight_decays:
            spec = TrainSpec(b, s.lr, teye_weight_decay(lam), s.decay_all)
            res = cross_validate(uci._builders("mcbn", data, s)[0], folds, spec,
                                 max_epochs=s.epochs, check_every=s.check_every,
                                 patience=s.patience, samples=0, seed=3)  # fmt: skip
            loop[(b, lam)] = res.rmse
    want = min(loop, key=lambda k: (loop[k], list(loop).index(k)))
    res, spec, _, chosen = uci._search("mcbn", data, folds, s, 3)
    assert (chosen["batch_size"], chosen["weight_decay"]) == want
    assert res.rmse == loop[want] and spec.batch_size == want[0]
    assert len(set(loop.values())) == 4  # four different CV values: the choice is not trivial


def test_a_killed_search_resumes_without_redoing_finished_trials(tmp_path):
    log, storage = tmp_path / "calls.jsonl", str(tmp_path / "study.journal")
    proc = subprocess.Popen([sys.executable, str(HERE / "search_trials.py"), str(log), storage])
    try:
        deadline = time.time() + 60
        while time.time() < deadline and (not log.exists() or len(_lines(log)) < 3):
            time.sleep(0.1)
        assert len(_lines(log)) == 3, "the search did not reach its third trial"
    finally:
        proc.kill()
        proc.wait()
    first = [line["params"] for line in _lines(log)]
    log.write_text("")
    found = run_search(partial(search_trials.logged, str(log), 1, -1), SPACE,
                       SearchSettings(storage=storage, study="k"))  # fmt: skip
    again = [line["params"] for line in _lines(log)]
    finished, killed = first[:2], first[2]
    want = brute_force(SPACE, search_trials.bowl)
    assert killed in again and not any(p in again for p in finished if p != want)
    rerun_for_model = 1 if want in finished else 0  # trained again once, for its artefact
    assert len(again) == 12 - 2 + rerun_for_model
    assert found.params == want and found.artefact == ("trained", 2, 0)


def test_trials_run_in_parallel_processes_and_pick_the_same(tmp_path):
    log = tmp_path / "calls.jsonl"
    found = run_search(partial(search_trials.logged, str(log), 2, -1), SPACE,
                       SearchSettings(workers=2))  # fmt: skip
    lines = _lines(log)
    assert len({line["pid"] for line in lines}) == 2  # each process waits for the other
    seen = [line["params"] for line in lines]
    assert all(p in seen for p in grid_points(SPACE))
    assert len(seen) - len(grid_points(SPACE)) <= 1  # at most the chosen one, trained again
    assert found.params == brute_force(SPACE, search_trials.bowl)
    assert found.artefact == ("trained", 2, 0)


def test_tpe_keeps_its_budget_and_its_ranges(tmp_path):
    space = [Dimension("lr", (1e-4, 1e-1), log=True), Dimension("batch", (8, 256), integer=True)]
    seen = []

    def objective(params, report):
        seen.append(params)
        return abs(params["lr"] - 1e-2) + params["batch"] / 1e4, None

    storage = str(tmp_path / "tpe.journal")
    settings = SearchSettings(sampler="tpe", trials=6, storage=storage, study="t")
    found = run_search(objective, space, settings)
    assert len(seen) == 6 and all(1e-4 <= p["lr"] <= 1e-1 for p in seen)
    assert all(isinstance(p["batch"], int) and 8 <= p["batch"] <= 256 for p in seen)
    best = min(seen, key=lambda p: abs(p["lr"] - 1e-2) + p["batch"] / 1e4)
    assert found.params == best
    resumed = run_search(objective, space, settings)  # the budget is spent: only the model
    assert len(seen) == 7 and resumed.params == best


def test_median_pruning_can_change_the_grid_choice():
    """A configuration whose early checks are bad but whose last is the best: the full grid
    picks it, the median pruner stops it (why pruning is off in the paper presets)."""
    import optuna

    space = [Dimension("c", tuple(range(8)))]
    order = optuna.samplers.GridSampler({"c": list(range(8))}, seed=0)._all_grids
    late = order[-1][0]  # the last configuration Optuna visits

    def curve(c, step):
        return (10.0 - step if c == late else 5.0 + c / 10 - step / 10) if step < 4 else (
            0.0 if c == late else 4.5 + c / 10)  # fmt: skip

    def objective(params, report):
        for step in range(5):
            report(step, curve(params["c"], step))
        return min(curve(params["c"], s) for s in range(5)), None

    full = run_search(objective, space)
    pruned = run_search(objective, space, SearchSettings(prune=True))
    assert full.params == {"c": late}
    assert pruned.params != full.params and None in [v for _, v in pruned.trials]


def test_without_optuna_one_line_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(MissingSearchExtra) as info:
        run_search(lambda p, r: (0.0, None), SPACE)
    assert str(info.value) == NEEDS_OPTUNA and "bayesify[search]" in NEEDS_OPTUNA
    one = run_search(lambda p, r: (1.0, p), [Dimension("a", (3,)), Dimension("b", (1,))])
    assert one.params == one.artefact == {"a": 3, "b": 1}  # nothing to choose: no Optuna


def test_search_settings_enter_the_row_key_only_when_set():
    job = GalUCIJob("mc-dropout", "yacht", 0)
    assert not {"sampler", "trials", "prune", "search_storage", "trial_workers"} & set(
        job_config(job)
    )
    from dataclasses import replace

    quiet = replace(job, search_storage="x.journal", trial_workers=3)
    assert job_key("e", quiet) == job_key("e", job)
    assert job_key("e", replace(job, sampler="tpe", trials=5)) != job_key("e", job)
    assert job_key("e", replace(TeyeUCIJob("mcbn", "yacht", 0), prune=True)) != job_key(
        "e", TeyeUCIJob("mcbn", "yacht", 0)
    )


def test_bench_uci_puts_each_jobs_study_in_a_journal_beside_the_store(tmp_path):
    from bayesify.bench.uci.command import UCIBenchOptions

    store = tmp_path / "runs" / "uci.db"
    opts = UCIBenchOptions(methods=("mc-dropout", "bbb"), datasets=("yacht",), splits=1,
                           store=str(store), trial_workers=2)  # fmt: skip
    jobs = [j for _, j in opts.jobs()]
    assert {j.search_storage for j in jobs} == {str(tmp_path / "runs" / "uci.search.journal")}
    assert {j.trial_workers for j in jobs} == {2}
    names = {j.search_settings().study for j in jobs}
    assert len(names) == len(jobs)  # one study per row
    memory = UCIBenchOptions(store=str(store), search_storage="none", sampler="tpe", trials=4)
    assert {j.search_storage for _, j in memory.jobs()} == {""}
    assert {j.search_settings().sampler for _, j in memory.jobs()} == {"tpe"}
    with pytest.raises(ValueError, match="trial budget"):
        UCIBenchOptions(sampler="tpe")


def test_a_trial_killed_before_its_values_were_drawn_still_runs(tmp_path):
    from bayesify.bench.search import _study, optuna_module
    from bayesify.bench.search_journal import journal_storage

    optuna = optuna_module()
    settings = SearchSettings(storage=str(tmp_path / "s.journal"), study="e")
    study = _study(optuna, SPACE, settings, "minimize", journal_storage(optuna, settings.storage))
    study.ask()  # the grid sampler gave it a point; the process died before drawing it
    calls = []

    def objective(params, report):
        calls.append(params)
        return search_trials.bowl(params), None

    found = run_search(objective, SPACE, settings)
    assert sorted(map(str, calls)) == sorted(map(str, grid_points(SPACE)))
    assert found.params == brute_force(SPACE, search_trials.bowl)


def test_trial_workers_are_refused_on_a_cluster():
    from bayesify.bench.uci.command import UCIBenchOptions

    with pytest.raises(ValueError, match="use --trial-workers 1"):
        UCIBenchOptions(cluster="tcp://127.0.0.1:8786", trial_workers=2)
