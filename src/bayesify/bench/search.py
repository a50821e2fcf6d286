"""Hyper-parameter searches of the benchmarks, run by Optuna (the optional extra ``search``).

One helper, :func:`run_search`, runs every search of the presets: a ``space`` of
:class:`Dimension` s (each with its values in the paper's order) and an ``objective(params,
report) -> (value, artefact)`` that trains and scores one configuration. By default the sampler
is Optuna's ``GridSampler`` over the full grid, and the choice is exactly the hand-written loop's:
the best value, ties going to the configuration first in the grid's order (Optuna visits the grid
in a shuffled order, so the tie rule is applied here, not left to ``study.best_trial``).
``sampler="tpe"`` draws ``trials`` configurations by TPE over each dimension's range instead (not
a paper protocol). ``prune`` stops a configuration whose intermediate values (``report(step,
value)``, e.g. the CV RMSE at each check) are worse than the median of earlier configurations'
at the same step; it may change the pick (``docs/fidelity.md``), so it is off unless asked for.

With ``storage`` (a journal file) the study outlives the process: a killed search run again
with the same ``storage`` and ``study`` skips finished trials and reruns the ones that were in
progress; ``workers`` processes run trials side by side on it (the objective must then pickle:
a module-level function or a ``functools.partial`` of one). Artefacts (trained models) never
leave their process: when the chosen configuration was trained by another process or an earlier
run, it is trained again here, once, from the same seeds.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from bayesify.bench.jobs import config_hash, job_config, key_field
from bayesify.bench.pool import exit_with_run, worker_context
from bayesify.bench.search_journal import journal_storage
from bayesify.extras import MissingExtra

log = logging.getLogger(__name__)

SAMPLERS = ("grid", "tpe")
NEEDS_OPTUNA = "hyper-parameter searches need optuna: pip install 'bayesify[search]'"
#: ``report(step, value)``: an intermediate value of the objective (pruning)
Report = Callable[[int, float], None]
Objective = Callable[[dict[str, Any], Report], tuple[float, Any]]


class MissingSearchExtra(MissingExtra, ValueError):
    """Optuna is not installed: one line naming the extra ``search``."""


def optuna_module() -> Any:
    """The ``optuna`` module; if absent, one line naming the extra."""
    try:
        import optuna
    except ImportError:
        raise MissingSearchExtra(NEEDS_OPTUNA) from None
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # trials and errors are logged here
    return optuna


@dataclass(frozen=True)
class Dimension:
    """One hyper-parameter: its grid ``values`` in the paper's order; TPE draws numbers from
    [min, max] of them (``log``: on a log scale; ``integer``: whole numbers), other values
    as categories."""

    name: str
    values: tuple[Any, ...]
    log: bool = False
    integer: bool = False

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"the search dimension {self.name!r} has no values")


@dataclass(frozen=True)
class SearchSettings:
    """How a search runs: ``sampler`` grid (the paper's full grid) or tpe (``trials``
    draws); ``prune`` (median pruner on reported values); ``storage`` (journal file, "" in
    memory) holding ``study``; ``workers`` processes; ``seed`` of the samplers."""

    sampler: str = "grid"
    trials: int = 0
    prune: bool = False
    storage: str = ""
    study: str = "search"
    workers: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.sampler not in SAMPLERS:
            raise ValueError(f"unknown sampler {self.sampler!r}; valid: {', '.join(SAMPLERS)}")
        if self.sampler == "tpe" and self.trials < 1:
            raise ValueError(f"the tpe sampler needs a trial budget >= 1, got {self.trials}")
        if self.trials < 0 or self.workers < 1:
            raise ValueError(f"need trials >= 0 and workers >= 1, got {self.trials}, "
                             f"{self.workers}")  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class SearchJob:
    """A benchmark job's search settings (a base class of its dataclass): ``sampler``,
    ``trials`` and ``prune`` are in the row key when set (they may change the pick);
    ``search_storage`` (journal file) and ``trial_workers`` are how it runs, not in the key."""

    sampler: str = key_field("grid")
    trials: int = key_field(0)
    prune: bool = key_field(False)
    search_storage: str = key_field("", "never")
    trial_workers: int = key_field(1, "never")

    def search_settings(self) -> SearchSettings:
        """The settings of this job's search; its study is named by the job's row."""
        job: Any = self
        study = (f"{type(self).__name__}/{job.method}/{job.dataset}/{job.split}/{job.seed}/"
                 f"{config_hash(job_config(self))}")  # fmt: skip
        return SearchSettings(self.sampler, self.trials, self.prune, self.search_storage, study,
                              self.trial_workers, seed=int(job.seed))  # fmt: skip


@dataclass
class SearchResult:
    """The chosen ``params``, their ``value``, the objective's ``artefact`` for them, and every
    finished trial as (params, value or None if pruned)."""

    params: dict[str, Any]
    value: float
    artefact: Any
    trials: list[tuple[dict[str, Any], float | None]] = field(default_factory=list)


def grid_points(space: Sequence[Dimension]) -> list[dict[str, Any]]:
    """Every configuration of the full grid, in the paper's order (the first dimension
    outermost, as nested loops over ``space`` in order)."""
    names = [d.name for d in space]
    return [dict(zip(names, vals, strict=True)) for vals in itertools.product(
        *(d.values for d in space))]  # fmt: skip


class _Best:
    """The best ((sign·value, order), params, artefact) evaluated in this process."""

    def __init__(self, sign: float) -> None:
        self.sign, self.lock = sign, threading.Lock()
        self.entry: tuple[tuple[float, int], dict, Any] | None = None

    def keep(self, order: int, params: dict, value: float, artefact: Any) -> None:
        key = (self.sign * value, order)
        with self.lock:
            if self.entry is None or key < self.entry[0]:
                self.entry = (key, params, artefact)


def _sampler(optuna: Any, space: Sequence[Dimension], settings: SearchSettings) -> Any:
    if settings.sampler == "grid":
        return optuna.samplers.GridSampler({d.name: list(d.values) for d in space},
                                           seed=settings.seed)  # fmt: skip
    return optuna.samplers.TPESampler(seed=settings.seed)


def _study(optuna: Any, space: Sequence[Dimension], settings: SearchSettings,
           direction: str, storage: Any) -> Any:  # fmt: skip
    pruner = optuna.pruners.MedianPruner() if settings.prune else optuna.pruners.NopPruner()
    return optuna.create_study(study_name=settings.study, storage=storage, direction=direction,
                               sampler=_sampler(optuna, space, settings), pruner=pruner,
                               load_if_exists=True)  # fmt: skip


def _suggest(trial: Any, d: Dimension, sampler: str) -> Any:
    """The trial's value of ``d``: one of its values (grid), else drawn from its range."""
    if sampler == "grid":
        return trial.suggest_categorical(d.name, list(d.values))
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in d.values):
        return trial.suggest_categorical(d.name, list(d.values))
    lo, hi = min(d.values), max(d.values)
    if lo == hi:
        return d.values[0]
    if d.integer:
        return trial.suggest_int(d.name, int(lo), int(hi), log=d.log)
    return trial.suggest_float(d.name, float(lo), float(hi), log=d.log)


def _order(points: list[dict], params: dict, number: int, sampler: str) -> int:
    """Tie rank: the grid position (grid sampler), else the trial number."""
    return points.index(params) if sampler == "grid" and params in points else number


def _prepare(optuna: Any, study: Any, points: list[dict], settings: SearchSettings) -> None:
    """Before any trial of this search runs: trials left running by a killed process are
    marked failed, and (grid) every configuration without a finished trial whose grid point
    the sampler counts as visited (a failed trial holds it) is queued again, as a waiting trial
    that carries its grid id: the sampler then counts it like its own trials (one queued by
    ``enqueue_trial`` carries no grid id, and the sampler fails on it with ``KeyError:
    'grid_id'`` when it ends with one grid point left)."""
    S = optuna.trial.TrialState
    for t in study.get_trials(deepcopy=False, states=(S.RUNNING,)):
        study._storage.set_trial_state_values(t._trial_id, state=S.FAIL)
        log.info("search %s: trial %d was left running; it runs again", settings.study, t.number)
    if settings.sampler != "grid":
        return
    sampler = study.sampler
    trials = study.get_trials(deepcopy=False)
    done = [t.params for t in trials if t.state in (S.COMPLETE, S.PRUNED)]
    waiting = [_point(study, t) for t in trials if t.state == S.WAITING]
    visited = {t.system_attrs["grid_id"] for t in trials
               if t.state.is_finished() and "grid_id" in t.system_attrs
               and sampler._same_search_space(t.system_attrs.get("search_space", {}))}  # fmt: skip
    for gid in sorted(visited):
        p = _grid_point(sampler, gid)
        if p not in done and p not in waiting:
            attrs = {"grid_id": gid, "search_space": sampler._search_space, "fixed_params": p}
            study.add_trial(optuna.trial.create_trial(state=S.WAITING, system_attrs=attrs))
            waiting.append(p)


def _grid_point(sampler: Any, gid: int) -> dict[str, Any]:
    """The configuration of the grid sampler's grid id ``gid``."""
    return dict(zip(sampler._param_names, sampler._all_grids[gid], strict=True))


def _point(study: Any, trial: Any) -> dict[str, Any]:
    """A grid trial's configuration, also when it was killed before its values were drawn
    (from the values it was queued with, or the sampler's grid id)."""
    if trial.params:
        return trial.params
    if "fixed_params" in trial.system_attrs:
        return dict(trial.system_attrs["fixed_params"])
    gid = trial.system_attrs.get("grid_id")
    if getattr(study.sampler, "_all_grids", None) is None or gid is None:
        return trial.params
    return _grid_point(study.sampler, gid)


def _remaining(optuna: Any, study: Any, n: int, points: list[dict] | None = None) -> int:
    """Trials still to run, queued ones included: of ``n`` (tpe), or the grid ``points`` no
    trial finished or runs (a configuration run twice counts once)."""
    S = optuna.trial.TrialState
    started = study.get_trials(deepcopy=False, states=(S.COMPLETE, S.PRUNED, S.RUNNING))
    if points is None:
        return n - len(started)
    covered = [_point(study, t) for t in started]
    return sum(p not in covered for p in points)


def _optimize(objective: Objective, space: Sequence[Dimension], settings: SearchSettings,
              direction: str, threads: int, parent: int) -> None:  # fmt: skip
    """A worker process: run trials on the stored study until the grid is covered or the
    budget is spent (its artefacts are dropped); it stops if ``parent`` is killed."""
    exit_with_run(parent)
    optuna = optuna_module()
    import torch

    torch.set_num_threads(threads)
    study = _study(optuna, space, settings, direction, journal_storage(optuna, settings.storage))
    _loop(optuna, study, objective, space, settings, None)


def _loop(optuna: Any, study: Any, objective: Objective, space: Sequence[Dimension],
          settings: SearchSettings, best: _Best | None) -> None:  # fmt: skip
    points = grid_points(space)
    grid = points if settings.sampler == "grid" else None
    n = len(points) if grid is not None else settings.trials

    def run_trial(trial: Any) -> float:
        params = {d.name: _suggest(trial, d, settings.sampler) for d in space}

        def report(step: int, value: float) -> None:
            if settings.prune:
                trial.report(float(value), int(step))
                if trial.should_prune():
                    log.info("search %s: %s pruned at step %d", settings.study, params, step)
                    raise optuna.TrialPruned()

        value, artefact = objective(params, report)
        value = float(value)
        if not math.isfinite(value):  # loses, as it did in the hand-written loops
            log.warning("search %s: %s gave %s", settings.study, params, value)
            value = math.inf if study.direction.name == "MINIMIZE" else -math.inf
        log.info("search %s: %s -> %.6g", settings.study, params, value)
        if best is not None:
            best.keep(_order(points, params, trial.number, settings.sampler), params, value,
                      artefact)  # fmt: skip
        return value

    def covered(study: Any, _trial: Any) -> None:
        if _remaining(optuna, study, n, grid) <= 0:
            study.stop()

    left = _remaining(optuna, study, n, grid)
    while left > 0:  # the grid sampler stops a call early when only queued points are left
        study.optimize(run_trial, n_trials=left, callbacks=[covered])
        now = _remaining(optuna, study, n, grid)
        if now >= left:
            break
        left = now


def run_search(objective: Objective, space: Sequence[Dimension],
               settings: SearchSettings | None = None, *,
               direction: str = "minimize") -> SearchResult:  # fmt: skip
    """Search ``space`` for the configuration with the best objective value (module
    docstring). A space of one configuration (or none) evaluates the objective once, without
    Optuna."""
    s = settings or SearchSettings()
    if direction not in ("minimize", "maximize"):
        raise ValueError(f"direction must be minimize or maximize, got {direction!r}")
    points = grid_points(space)
    if len(points) == 1:  # nothing to choose: no study
        value, artefact = objective(points[0], lambda step, value: None)
        return SearchResult(points[0], float(value), artefact, [(points[0], float(value))])
    optuna = optuna_module()
    sign = 1.0 if direction == "minimize" else -1.0
    if s.workers > 1 and not s.storage:  # processes share trials through a file
        with tempfile.TemporaryDirectory(prefix="bayesify-search-") as tmp:
            return run_search(objective, space, replace(s, storage=f"{tmp}/study.journal"),
                              direction=direction)  # fmt: skip
    storage = journal_storage(optuna, s.storage)
    study = _study(optuna, space, s, direction, storage)
    _prepare(optuna, study, points, s)
    best = _Best(sign)
    if s.workers > 1:
        import torch

        context = worker_context()
        with ProcessPoolExecutor(s.workers - 1, mp_context=context) as pool:
            threads = torch.get_num_threads()
            futures = [pool.submit(_optimize, objective, space, s, direction, threads, os.getpid())
                       for _ in range(s.workers - 1)]  # fmt: skip
            _loop(optuna, study, objective, space, s, best)
            for f in futures:
                f.result()
    else:
        _loop(optuna, study, objective, space, s, best)
    return _choose(optuna, study, objective, points, s, sign, best)


def _choose(optuna: Any, study: Any, objective: Objective, points: list[dict],
            s: SearchSettings, sign: float, best: _Best) -> SearchResult:  # fmt: skip
    """The best finished trial (ties: first in grid order), its artefact (trained again
    here if another process or run made it)."""
    S = optuna.trial.TrialState
    trials = study.get_trials(deepcopy=False, states=(S.COMPLETE, S.PRUNED))
    complete = [t for t in trials if t.state == S.COMPLETE]
    if s.sampler == "grid":
        missing = [p for p in points if all(t.params != p for t in trials)]
        if missing:
            raise RuntimeError(f"search {s.study}: {len(missing)} configuration(s) never ran")
    if not complete:
        raise RuntimeError(f"search {s.study}: every configuration was pruned or failed")

    def rank(t: Any) -> tuple[float, int]:
        return sign * t.value, _order(points, t.params, t.number, s.sampler)

    chosen = min(complete, key=rank)
    key = rank(chosen)
    params = dict(chosen.params)
    if best.entry is not None and best.entry[0] == key:
        artefact = best.entry[2]
    else:  # trained elsewhere: train it again from the same seeds
        log.info("search %s: training the chosen %s again for its model", s.study, params)
        value, artefact = objective(params, lambda step, value: None)
        if float(value) != chosen.value:
            log.warning("search %s: %s gave %.6g again, %.6g before (not reproducible?)",
                        s.study, params, float(value), chosen.value)  # fmt: skip
    history = [(dict(t.params), t.value if t.state == S.COMPLETE else None) for t in trials]
    return SearchResult(params, float(chosen.value), artefact, history)
