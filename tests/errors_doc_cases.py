"""The cases of docs/errors.md that tests/test_errors_doc.py runs: tables, bundles, servers and
stores made to fail in one documented way each."""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

import bayesify
from bayesify.app.table_jobs import build_table_training
from bayesify.data.preprocessing import Preprocessing
from bayesify.predictor import Predictor
from bayesify.serve.monitor import Monitor

DOC = Path(__file__).resolve().parents[1] / "docs" / "errors.md"


def _rows() -> list[tuple[str, str]]:
    rows = []
    for line in DOC.read_text().splitlines():
        m = re.match(r"\| `([\w-]+)` \| .* \| `(.*)` \|$", line)
        if m:
            rows.append((m.group(1), m.group(2)))
    return rows


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame({"x": rng.normal(size=250), "y": rng.normal(size=250)})


def _train(tmp_path, frame, target="y", features=None, task="auto"):
    frame.to_csv(tmp_path / "t.csv", index=False)
    build_table_training("mcbn", tmp_path / "t.csv", target, features=features, task=task)


def _predictor() -> Predictor:
    m = bayesify.MCDropout(nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.1), nn.Linear(4, 1)))
    m.noise_variance = 1.0
    m.preprocessing = Preprocessing(features=["a", "b", "c"])
    return Predictor(m)


def _custom_bundle(tmp_path):
    (tmp_path / "mynets.py").write_text(textwrap.dedent("""
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(2, 1)

            def forward(self, x):
                return self.lin(x)
    """))  # fmt: skip
    import importlib
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        net = importlib.import_module("mynets").Net()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("mynets", None)
    m = bayesify.Deterministic(net)
    m.noise_variance = 1.0
    return m.save(tmp_path / "custom")


def _search_without_optuna():
    """A preset's search where optuna is not installed (``import optuna`` fails)."""
    from unittest import mock

    from bayesify.bench.search import Dimension, run_search

    with mock.patch.dict("sys.modules", {"optuna": None}):
        run_search(lambda p, r: (0.0, None), [Dimension("b", (32, 64))])


def _newer_record(tmp_path):
    """A record whose schema version is one past what this code reads."""
    import sqlite3

    from bayesify.serve.record import Record

    Record.open(tmp_path / "r.sqlite3").close()
    with sqlite3.connect(tmp_path / "r.sqlite3") as conn:
        conn.execute("UPDATE record_schema SET version = version + 1")
    Record.open(tmp_path / "r.sqlite3")


def _record_without_psycopg():
    """A PostgreSQL record where psycopg is not installed."""
    from unittest import mock

    from bayesify.serve.record import Record

    with mock.patch.dict("sys.modules", {"psycopg": None}):
        Record.open("postgresql://someone@127.0.0.1:1/db")


def _record_of_another_task(tmp_path):
    from bayesify.serve.record import Record

    store = Record.open(tmp_path / "r.sqlite3")
    Monitor("classification", ["a", "b"], name="m", store=store)
    Monitor("regression", name="m", store=store)


def _flow_without_zuko():
    """The flow posterior where zuko is not installed (``import zuko`` fails)."""
    from unittest import mock

    with mock.patch.dict("sys.modules", {"zuko": None}):
        bayesify.FlowPosterior(nn.Sequential(nn.Linear(3, 1)))


@dataclass(frozen=True)
class _ToyJob:
    method: str
    dataset: str
    split: int
    seed: int = 0


def _cluster_run(tmp_path, without_distributed: bool = False):
    """One job run with ``--cluster`` at a port nothing listens on (1 s to give up)."""
    from unittest import mock

    from bayesify.bench import engines
    from bayesify.bench.process import free_port
    from bayesify.bench.runner import run_jobs

    absent = {"distributed": None} if without_distributed else {}
    with mock.patch.dict("sys.modules", absent), mock.patch.object(engines, "CONNECT_TIMEOUT", 1):
        run_jobs("e", [_ToyJob("m", "d", 0)], vars, tmp_path / "r.db", progress=False,
                 cluster=f"tcp://127.0.0.1:{free_port()}")  # fmt: skip


def _scheduler_lost(tmp_path):
    """A ``--cluster`` run whose client's futures are cancelled as when the scheduler dies."""
    import contextlib
    from types import SimpleNamespace
    from unittest import mock

    from bayesify.bench import engines
    from bayesify.bench.runner import run_jobs

    class Lost:
        status = "cancelled"

        def result(self, timeout=None):
            raise type("FutureCancelledError", (Exception,),
                       {"reason": "scheduler-connection-lost"})()  # fmt: skip

    client = SimpleNamespace(as_current=contextlib.nullcontext, close=lambda: None,
                             submit=lambda *a, **k: Lost())  # fmt: skip
    fake = SimpleNamespace(as_completed=lambda futures: list(futures))
    with mock.patch.object(engines, "_distributed", lambda: fake), \
            mock.patch.object(engines.DaskCluster, "connect", lambda self: client):  # fmt: skip
        run_jobs("e", [_ToyJob("m", "d", s) for s in range(2)], vars, tmp_path / "r.db",
                 progress=False, cluster="tcp://127.0.0.1:8786")  # fmt: skip


def _bench_faults(tmp_path, case):
    """A results store, a search journal or a file of rows damaged as ``case`` says."""
    import json

    from bayesify.bench.runner import config_hash, run_jobs
    from bayesify.bench.search import Dimension, SearchSettings, run_search
    from bayesify.bench.store_io import import_rows, read_rows

    if case == "store-empty":
        (tmp_path / "results.db").write_bytes(b"")
        run_jobs("e", [_ToyJob("m", "d", 0)], vars, tmp_path / "results.db", progress=False)
    elif case == "search-journal-damaged":
        (tmp_path / "uci.search.journal").write_text('{"op_code": 0}\n{"op_code": \n{}\n')
        run_search(lambda p, r: (float(p["a"]), None), [Dimension("a", (1, 2))],
                   SearchSettings(storage=str(tmp_path / "uci.search.journal")))  # fmt: skip
    else:
        row = {"experiment": "e", "method": "m", "dataset": "d", "split": 0, "seed": 0,
               "config_hash": config_hash({}), "config": {}, "metrics": {"ll": 1e308}}  # fmt: skip
        (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
        import_rows(tmp_path / "r.db", read_rows(tmp_path / "rows.jsonl"))


def _continue_other_method(tmp_path):
    """``bayesify train --continue-from`` a bundle that is not a vcl bundle."""
    from bayesify.app.continual_jobs import continue_from_bundle

    _plain_method().save(tmp_path / "b")
    continue_from_bundle(tmp_path / "b", tmp_path / "t.csv")


def _served():
    from bayesify.serve.model import ServedModel
    from bayesify.serve.repository import Repository

    return Repository.of_model(ServedModel(Predictor(_plain_method()), "toy"))


def _serve_folder(tmp_path, name=None):
    """``bayesify serve`` on a folder of two bundles, ``a`` and ``b``."""
    from bayesify.serve.model import ServedModel
    from bayesify.serve.repository import Repository

    for sub in ("a", "b"):
        _plain_method().save(tmp_path / "models" / sub)
    return Repository.open(tmp_path / "models", name, ServedModel.load)


def _feedback_id(aliases: list, rows: int, name: str | None = None) -> None:
    """Check a feedback id after one request of ``rows`` rows per client id in ``aliases``
    (``name`` None: the last request's own id)."""
    mon = Monitor("classification", ["a", "b"])
    for alias in aliases:
        rid, _ = mon.record_request([{"probabilities": [0.5, 0.5]}] * rows, alias=alias)
    mon.check_id(name or rid)


def _edited_bundle(tmp_path, change=None, text=None):
    m = bayesify.Deterministic(nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)))
    m.noise_variance = 1.0
    config = m.save(tmp_path / "b") / "config.json"
    if change is not None:
        cfg = json.loads(config.read_text())
        change(cfg)
        text = json.dumps(cfg)
    config.write_text(text)
    return tmp_path / "b"


def _int_bundle(tmp_path):
    from safetensors.torch import load_file, save_file

    weights = _plain_method().save(tmp_path / "b") / "weights.safetensors"
    save_file({k: v.to(torch.int64) for k, v in load_file(weights).items()}, weights)
    return tmp_path / "b"


def _bn_bundle_with_wide_mean(tmp_path):
    from safetensors.torch import load_file, save_file

    m = bayesify.Deterministic(nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3), nn.Linear(3, 1)))
    m.noise_variance = 1.0
    weights = m.save(tmp_path / "b") / "weights.safetensors"
    save_file({**load_file(weights), "1.running_mean": torch.zeros(5)}, weights)
    return tmp_path / "b"


def _import_bogus(tmp_path):
    from bayesify.bench.runner import config_hash
    from bayesify.bench.store_io import import_rows
    from bayesify.bench.uci.rows import REQUIRED_METRICS

    row = {
        "experiment": "gal-uci",
        "method": "mc-dropout",
        "dataset": "yacht",
        "split": 0,
        "seed": 0,
        "config_hash": config_hash({}),
        "config": {},
        "metrics": {"bogus": 1},
    }
    import_rows(tmp_path / "s.db", [row], required=REQUIRED_METRICS)


def _damaged_store(tmp_path):
    from bayesify.bench.store_report import write_store_report

    (tmp_path / "results.db").write_bytes(b"not a database" * 100)
    write_store_report(tmp_path / "results.db", tmp_path / "report")


def _bounded_predictor() -> Predictor:
    p = _predictor()
    p.method.preprocessing = Preprocessing(features=["a", "b", "c"],
                                           bounds={"a": [-5.0, 5.0]})  # fmt: skip
    return Predictor(p.method)


def _plain_method():
    m = bayesify.Deterministic(nn.Sequential(nn.Linear(2, 1)))
    m.noise_variance = 1.0
    m.input_shape = (2,)
    return m


def _classifier():
    return bayesify.Deterministic(nn.Sequential(nn.Linear(2, 3)), task="classification")


def _named_classifier():
    m = _classifier()
    m.preprocessing = Preprocessing(input_shape=[2], class_names=["cat", "dog", "eel"],
                                    target="label")  # fmt: skip
    return m


def _calibrate(tmp_path, frame, target=None, method=None):
    from bayesify.app.calibration import calibrate_bundle

    frame.to_csv(tmp_path / "rows.csv", index=False)
    method = method or _predictor().method
    score = "std" if method.config.task.value == "regression" else "mi"
    calibrate_bundle(method, score=score, coverage=0.9, samples=2, data=tmp_path / "rows.csv",
                     target=target)  # fmt: skip


def _categorical_method():
    m = bayesify.Deterministic(nn.Sequential(nn.Linear(3, 1)))
    m.noise_variance = 1.0
    m.preprocessing = Preprocessing(features=["n", "band"], categories={"band": ["high", "low"]})
    return m
