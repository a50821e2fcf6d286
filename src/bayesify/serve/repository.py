"""The models one server holds: a model repository, as Triton and KServe keep one.

``bayesify serve DIR`` serves every bundle in a folder: ``DIR/<name>/`` is a bundle (version 1
of model ``name``) or holds integer version folders, ``DIR/<name>/<version>/``, each a bundle
(the newest version loaded is the model's default; :mod:`.folders` reads the folder, and lists
bundles in folders not named as versions, with the reason, without serving them).
``bayesify serve BUNDLE`` is a repository of one model, version 1. Each loaded version is an
:class:`Entry`: its :class:`ServedModel`, its :class:`Monitor` (feedback and rolling figures),
its :class:`ServerMetrics` and its own micro-batcher (passes of different models never mix);
the metrics of all of them are one :class:`MetricFamilies`, each sample labelled with its model
and version. Models are loaded and unloaded while the server runs (:meth:`Repository.load`,
:meth:`Repository.unload`): a load scans the folder again, so a bundle copied into ``DIR``
after start-up can be loaded. At most ``max_models`` versions are loaded at once
(:class:`TooManyModels` beyond); an unload drops the model's metric series and waits for its
passes off the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bayesify.serve.batching import MicroBatcher
from bayesify.serve.drift import LEVEL
from bayesify.serve.folders import is_folder_of_bundles, scan, version_number
from bayesify.serve.metrics import MetricFamilies, ServerMetrics
from bayesify.serve.model import ServedModel
from bayesify.serve.monitor import Monitor, target_range
from bayesify.serve.record import Record, RecordOptions

log = logging.getLogger(__name__)

READY, UNAVAILABLE = "READY", "UNAVAILABLE"


class UnknownModel(ValueError):
    """A model name or version that is not served; the message names what is."""


class ModelRequired(UnknownModel):
    """A request that named no model where several are served."""


class TooManyModels(ValueError):
    """A load that would hold more model versions than the server's ``max_models``."""


#: the key of an HTTP request's scope that holds the :class:`Entry` it was for
SCOPE_KEY = "bayesify.entry"


@dataclass
class Entry:
    """One loaded version of a model and what serves it."""

    model: ServedModel
    version: int
    path: Path
    monitor: Monitor
    metrics: ServerMetrics
    batcher: MicroBatcher

    @property
    def name(self) -> str:
        return self.model.name

    def summary(self) -> dict[str, Any]:
        """Name, version, state and the figures the status page lists per model."""
        m = self.monitor
        return {"name": self.name, "version": self.version, "state": READY,
                "task": self.model.task, "method": self.model.predictor.method.name,
                "served": m.served,
                "deferral_rate": m.deferred / m.served if m.served else None}  # fmt: skip


#: ServedModel.load(path, name) with the server's settings (samples, adaptive, int8)
Loader = Callable[[str, str], ServedModel]


@dataclass
class BatchSettings:
    """Micro-batching of every loaded version (see :class:`MicroBatcher`)."""

    max_wait_ms: float = 2.0
    max_rows: int = 64


@dataclass
class Repository:
    """Loaded versions by model name; see the module docstring. ``root`` is the folder scanned
    on every load (``None`` for one bundle, whose ``sources`` are fixed)."""

    loader: Loader
    root: Path | None = None
    sources: dict[str, dict[int, Path]] = field(default_factory=dict)
    batching: BatchSettings = field(default_factory=BatchSettings)
    #: name -> version -> entry, for every loaded version
    loaded: dict[str, dict[int, Entry]] = field(default_factory=dict)
    #: why a model is not loaded ("unloaded", or the error of its last load)
    reasons: dict[str, str] = field(default_factory=dict)
    #: model name -> version folder not served (its name is not a version) -> why
    problems: dict[str, dict[str, str]] = field(default_factory=dict)
    #: most versions loaded at once
    max_models: int = 16
    #: false-alarm probability of a model's drift check (:mod:`.drift`)
    drift_level: float = LEVEL
    #: the record every monitor keeps (:mod:`.record`; default: one in memory)
    record: RecordOptions = field(default_factory=RecordOptions)
    #: the Prometheus families of every version (``/metrics``)
    families: MetricFamilies = field(default_factory=MetricFamilies)
    _lock: asyncio.Lock | None = None
    _started: bool = False

    # ------------------------------------------------------------------ building
    @classmethod
    def open(cls, path: Path, name: str | None, loader: Loader,
             batching: BatchSettings | None = None, max_models: int = 16,
             drift_level: float = LEVEL,
             record: RecordOptions | None = None) -> Repository:  # fmt: skip
        """What ``bayesify serve PATH`` serves: the bundle at ``path`` (named ``name``, else
        by its folder) or, when ``path`` is a folder of bundles, every one of them."""
        if is_folder_of_bundles(path):
            if name is not None:
                raise ValueError(f"--name names one bundle; the models in {path} are named by "
                                 "their folders")  # fmt: skip
            return cls.of_folder(path, loader, batching, max_models, drift_level, record)
        model = loader(str(path), name or path.resolve().name)
        return cls.of_model(model, path=path, loader=loader, batching=batching,
                            drift_level=drift_level, record=record)  # fmt: skip

    @classmethod
    def of_model(cls, model: ServedModel, *, path: Path | None = None, loader: Loader | None = None,
                 batching: BatchSettings | None = None, drift_level: float = LEVEL,
                 record: RecordOptions | None = None) -> Repository:  # fmt: skip
        """A repository of one model already loaded, version 1 (``path``: its bundle, loaded
        again by ``loader`` after an unload)."""
        repo = cls(loader=loader or _no_loader, sources={model.name: {1: path}} if path else {},
                   batching=batching or BatchSettings(), drift_level=drift_level,
                   record=record or RecordOptions())  # fmt: skip
        repo._add(repo._entry(model, 1, path or Path(model.name)))
        return repo

    @classmethod
    def of_folder(cls, root: Path, loader: Loader, batching: BatchSettings | None = None,
                  max_models: int = 16, drift_level: float = LEVEL,
                  record: RecordOptions | None = None) -> Repository:  # fmt: skip
        """Every bundle in ``root`` loaded (a ``ValueError`` naming the bundle that fails, or
        :class:`TooManyModels` when they are more than ``max_models``)."""
        found = scan(root)
        repo = cls(loader=loader, root=root, sources=found.found, problems=found.problems,
                   batching=batching or BatchSettings(), max_models=max_models,
                   drift_level=drift_level, record=record or RecordOptions())  # fmt: skip
        count = sum(map(len, repo.sources.values()))
        if count > max_models:
            raise TooManyModels(f"{root} holds {count} model versions; at most {max_models} "
                                "are loaded at once (--max-models)")  # fmt: skip
        for name, versions in repo.sources.items():
            for version, path in versions.items():
                repo._add(repo._load_entry(name, version, path))
        return repo

    def _entry(self, model: ServedModel, version: int, path: Path) -> Entry:
        """The monitor, metrics and micro-batcher of one loaded version."""
        metrics = ServerMetrics(model.name, str(version), self.families)
        policy = model.policy
        if self.record.store is None:  # one store in memory for every version
            self.record = replace(self.record, store=Record.memory())
        rec = self.record
        monitor = Monitor(model.task, model.class_names, policy.validation if policy else None,
                          name=model.name, version=str(version),
                          class_labels=model.predictor.class_labels, drift_level=self.drift_level,
                          target_range=target_range(model.predictor.method.metadata),
                          store=rec.store, history_every=rec.history_every,
                          max_pending=rec.max_pending,
                          max_pending_values=rec.max_pending_values)  # fmt: skip
        metrics.set_figures(monitor.figures())
        batcher = MicroBatcher(model.run, max_wait_ms=self.batching.max_wait_ms,
                               max_rows=self.batching.max_rows,
                               on_batch=metrics.batch_rows.observe)  # fmt: skip
        return Entry(model, version, path, monitor, metrics, batcher)

    def _load_entry(self, name: str, version: int, path: Path) -> Entry:
        """One version loaded; any failure is a ``ValueError`` naming it in one line."""
        try:
            model = self.loader(str(path), name)
        except (ValueError, TypeError, OSError) as e:  # BundleError among them
            raise ValueError(f"model {name!r} version {version} ({path}): {e}") from None
        except Exception as e:  # noqa: BLE001 - a load never takes the server down
            log.warning("loading %s failed", path, exc_info=True)
            why = f"{type(e).__name__}: {e}".splitlines()[0]
            raise ValueError(f"model {name!r} version {version} ({path}): {why}") from None
        return self._entry(model, version, path)

    def _add(self, entry: Entry) -> None:
        self.loaded.setdefault(entry.name, {})[entry.version] = entry
        self.loaded[entry.name] = dict(sorted(self.loaded[entry.name].items()))
        self.reasons.pop(entry.name, None)

    # ------------------------------------------------------------------ looking up
    def entries(self) -> Iterator[Entry]:
        for versions in list(self.loaded.values()):
            yield from list(versions.values())

    @property
    def single(self) -> bool:
        """Whether one model name is served (requests may leave the model out)."""
        return len(self.loaded) == 1

    def describe(self) -> str:
        """What is served, for error messages: ``'a', 'b' (versions 1, 2)``."""
        if not self.loaded:
            return "no model (load one with POST /v2/repository/models/{name}/load)"
        parts = []
        for name, versions in self.loaded.items():
            vs = list(versions)
            if vs == [1]:
                parts.append(repr(name))
            else:
                word = "version" if len(vs) == 1 else "versions"
                parts.append(f"{name!r} ({word} {', '.join(map(str, vs))})")
        return ", ".join(parts)

    def get(self, name: str | None, version: int | str | None = None) -> Entry:
        """The loaded ``version`` of ``name`` (default: its newest); ``name`` may be left out
        when one model is served. ``UnknownModel`` names what is served."""
        if name is None:
            if not self.loaded:
                raise UnknownModel(f"this server serves {self.describe()}")
            if not self.single:
                raise ModelRequired(f"several models are served ({self.describe()}); name one")
            name = next(iter(self.loaded))
        versions = self.loaded.get(name)
        if not versions:
            if name in self.sources or name in self.reasons or name in self.problems:
                what = f"model {name!r} is not loaded ({self.reasons.get(name, 'unloaded')})"
            else:
                what = f"unknown model {name!r}"
            raise UnknownModel(f"{what}; this server serves {self.describe()}")
        if version is None:
            return versions[max(versions)]
        v = version if isinstance(version, int) else version_number(str(version))
        if v is None or v not in versions:
            served = ", ".join(map(str, versions))
            raise UnknownModel(f"unknown version {str(version)!r} of model {name!r}; served "
                               f"versions: {served}")  # fmt: skip
        return versions[v]

    def find(self, name: str | None, version: int | str | None,
             scope: dict[str, Any] | None = None) -> Entry:  # fmt: skip
        """:meth:`get`, remembering the entry in the HTTP request's ``scope`` (its metrics
        then count the request)."""
        entry = self.get(name, version)
        if scope is not None:
            scope[SCOPE_KEY] = entry
        return entry

    @staticmethod
    def addressed(scope: dict[str, Any]) -> Entry | None:
        """The entry a request was for (set by :meth:`find`), if any."""
        return scope.get(SCOPE_KEY)

    def summaries(self, unloaded: bool = False) -> list[dict[str, Any]]:
        """:meth:`Entry.summary` of every loaded version; with ``unloaded``, also a row per
        version known but not loaded (``state`` ``UNAVAILABLE`` and its ``reason``)."""
        rows: list[dict[str, Any]] = [e.summary() for e in self.entries()]
        if unloaded:
            for r in self.index(rescan=False):
                if r["state"] != READY:  # a folder not named as a version keeps its name
                    number = version_number(r.get("version", ""))
                    rows.append({**r, "version": number if number is not None
                                 else r.get("version")})  # fmt: skip
        return sorted(rows, key=lambda r: (r["name"], not isinstance(r["version"], int),
                                           r["version"] if isinstance(r["version"], int)
                                           else str(r["version"])))  # fmt: skip

    def index(self, rescan: bool = True) -> list[dict[str, str]]:
        """Every model version on disk (``rescan``: looked up again now) or loaded, with its
        state (``READY`` or ``UNAVAILABLE``) and, when not loaded, the reason."""
        if rescan:
            self._rescan()
        rows = []
        names = set(self.sources) | set(self.loaded) | set(self.reasons) | set(self.problems)
        for name in sorted(names):
            loaded = self.loaded.get(name, {})
            versions = sorted(set(self.sources.get(name, {})) | set(loaded))
            problems = self.problems.get(name, {})
            rows += [{"name": name, "version": folder, "state": UNAVAILABLE, "reason": why}
                     for folder, why in problems.items()]  # fmt: skip
            if not versions and not problems:
                rows.append({"name": name, "state": UNAVAILABLE,
                             "reason": self.reasons.get(name, "no bundle")})  # fmt: skip
            for v in versions:
                row = {"name": name, "version": str(v), "state": READY if v in loaded
                       else UNAVAILABLE}  # fmt: skip
                if v not in loaded:
                    row["reason"] = self.reasons.get(name, "unloaded")
                rows.append(row)
        return rows

    def _rescan(self) -> None:
        if self.root is not None and self.root.is_dir():
            found = scan(self.root)
            self.sources, self.problems = found.found, found.problems
            known = set(self.sources) | set(self.loaded)  # forget models gone from the folder
            self.reasons = {n: r for n, r in self.reasons.items() if n in known}

    # ------------------------------------------------------------------ loading
    def _get_lock(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    async def start(self) -> None:
        """Start the micro-batchers (in the server's event loop)."""
        self._started = True
        for e in self.entries():
            await e.batcher.start()

    async def stop(self) -> None:
        """Finish what is queued on every model, then stop."""
        for e in self.entries():
            await e.batcher.stop()

    async def load(self, name: str) -> list[Entry]:
        """Load the versions of ``name`` found on disk now and not loaded yet (those loaded
        stay as they are); ``UnknownModel`` when the folder holds no such model, ``ValueError``
        when a bundle fails to load (the model's state then says why)."""
        async with self._get_lock():
            self._rescan()
            versions = self.sources.get(name)
            if not versions and name in self.problems:
                why = "; ".join(self.problems[name].values())
                raise ValueError(f"model {name!r}: no version folder can be served: {why}")
            if not versions:
                where = f"in {self.root}" if self.root is not None else "to this server"
                known = ", ".join(map(repr, self.sources)) or "none"
                raise UnknownModel(f"no model {name!r} {where}; models there: {known}")
            have = self.loaded.get(name, {})
            todo = {v: p for v, p in versions.items() if v not in have}
            count = sum(map(len, self.loaded.values()))
            if count + len(todo) > self.max_models:
                raise TooManyModels(
                    f"loading model {name!r} ({len(todo)} versions) would hold "
                    f"{count + len(todo)} model versions; at most {self.max_models} are loaded "
                    "at once (--max-models): unload one first"
                )
            new = []
            for version, path in todo.items():
                try:
                    entry = await asyncio.to_thread(self._load_entry, name, version, path)
                except ValueError as e:
                    self.reasons[name] = str(e)
                    raise
                new.append(entry)
            for entry in new:
                if self._started:
                    await entry.batcher.start()
                self._add(entry)
                log.info("loaded %s version %d from %s", name, entry.version, entry.path)
            return new

    async def unload(self, name: str) -> None:
        """Stop serving every version of ``name`` (requests already queued are answered: a
        request finds its entry and queues its rows without yielding to the event loop in
        between, so every request that found it is queued before its batcher stops)."""
        async with self._get_lock():
            versions = self.loaded.pop(name, None)
            if versions is None:
                raise UnknownModel(f"model {name!r} is not loaded; this server serves "
                                   f"{self.describe()}")  # fmt: skip
            self.reasons[name] = "unloaded"
            for entry in versions.values():
                await entry.batcher.stop()  # waits for its passes off the event loop
                entry.metrics.retire()
            log.info("unloaded %s", name)

    # ------------------------------------------------------------------ metrics
    def metrics_text(self) -> bytes:
        """Prometheus text of every version's metrics (and those of requests that named no
        model), each sample labelled with its model and version."""
        return self.families.text()


def _no_loader(path: str, name: str) -> ServedModel:
    raise ValueError(f"cannot load {path}: this server was given its model already loaded")
