"""Every row of docs/errors.md: the case runs and its error contains the documented message."""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

import bayesify
from bayesify.app.table_jobs import build_table_training, decide_task
from bayesify.data.preprocessing import Preprocessing
from bayesify.data.tables import table_format
from bayesify.models import net_from_reference
from bayesify.posthoc.conformal import Conformal, ConformalByPolicy
from bayesify.posthoc.sampling import SamplingPolicy, parse_policies
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


CASES = {
    "train-missing-values": lambda p: _train(p, _frame().assign(
        x=lambda f: f["x"].mask(f.index.isin([3, 7])))),
    "train-non-numeric": lambda p: _train(p, _frame().assign(
        x=lambda f: f["x"].astype(object).where(f.index != 5, "abc"))),
    "train-constant": lambda p: _train(p, _frame().assign(c=1.5)),
    "train-no-target": lambda p: _train(p, _frame(), target="price"),
    "train-unknown-feature": lambda p: _train(p, _frame(), features="x,size"),
    "train-too-many-categories": lambda p: _train(p, _frame().assign(
        name=[f"id{i}" for i in range(250)])),
    "train-many-problems": lambda p: _train(p, _frame().assign(
        x=lambda f: f["x"].mask(f.index == 4), c=1, y=lambda f: f["y"].mask(f.index == 0))),
    "train-bad-task": lambda p: decide_task(_frame()["y"], "y", "maybe"),
    "train-dates": lambda p: _train(p, _frame().assign(
        when=pd.date_range("2024-01-01", periods=250).strftime("%Y-%m-%d"))),
    "train-target-too-large": lambda p: _train(p, _frame().assign(
        y=lambda f: f["y"].where(f.index != 2, 1e39))),
    "table-format": lambda p: table_format("book.xlsx"),
    "serve-name-with-folder": lambda p: _serve_folder(p, name="x"),
    "serve-unknown-model": lambda p: _served().get("nope"),
    "serve-unknown-version": lambda p: _served().get("toy", 3),
    "serve-model-required": lambda p: _serve_folder(p).get(None),
    "serve-record-newer": lambda p: _newer_record(p),
    "serve-record-postgres-extra": lambda p: _record_without_psycopg(),
    "serve-record-task-changed": lambda p: _record_of_another_task(p),
    "predict-unknown-category": lambda p: Predictor(_categorical_method()).predict(
        pd.DataFrame({"n": [1, 2, 3, 4], "band": ["high", "low", "low", "medium"]})),
    "predict-missing-value": lambda p: _predictor().predict(
        pd.DataFrame({"a": [1.0, 2, 3], "b": [1.0, 2, None], "c": [0.0, 0, 0]})),
    "predict-not-a-number": lambda p: _predictor().predict(
        pd.DataFrame({"a": [1.0, 2], "b": [1.0, "x"], "c": [0.0, 0]})),
    "predict-many-problems": lambda p: _predictor().predict(
        pd.DataFrame({"a": [None, 2, 3], "b": [1.0, "x", "x"], "c": [0.0, 0, 0]})),
    "predict-out-of-range": lambda p: _bounded_predictor().predict([[1e30, 0, 0]]),
    "predict-float32-overflow": lambda p: _predictor().predict([[1e39, 0, 0]]),
    "predict-output-not-finite": lambda p: _predictor().predict([[1e30, 1e30, 1e30]]),
    "predict-encoded-one-hot": lambda p: Predictor(_categorical_method()).predict(
        [[1.0, 1.0, 1.0]], encoded=True),
    "predict-missing-column": lambda p: _predictor().predict(pd.DataFrame({"a": [1], "b": [2]})),
    "predict-shape": lambda p: Predictor(_plain_method()).predict(torch.randn(4, 3)),
    "predict-level": lambda p: _predictor().predict([[1, 2, 3]], level=1.5),
    "predict-samples": lambda p: _predictor().predict([[1, 2, 3]], samples=True),
    "predict-on-error": lambda p: _predictor().predict([[1, 2, 3]], on_error="ignore"),
    "calibrate-no-target": lambda p: _calibrate(p, pd.DataFrame({"a": [1.0], "y": [2.0]}),
                                                target="price"),
    "calibrate-missing-column": lambda p: _calibrate(p, pd.DataFrame(
        {"a": [1.0], "b": [2.0], "y": [3.0]}), target="y"),
    "calibrate-unknown-class": lambda p: _calibrate(p, pd.DataFrame(
        {"x0": [0.0, 1.0], "x1": [1.0, 0.0], "label": ["cat", "fox"]}), method=_named_classifier()),
    "calibrate-width": lambda p: _calibrate(p, pd.DataFrame(
        {"a": [1.0], "b": [2.0], "c": [3.0], "y": [4.0]}), target="y", method=_plain_method()),
    "calibrate-sampling-policy": lambda p: parse_policies("8,32,adaptive:x"),
    "conformal-several-policies": lambda p: Conformal.from_dict(ConformalByPolicy({
        SamplingPolicy.fixed(t): Conformal("normalized", torch.rand(5)) for t in (8, 32)
    }).to_dict()),
    "feedback-reused-id": lambda p: _feedback_id(["scan-1", "scan-1"], 1, "scan-1"),
    "feedback-several-rows": lambda p: _feedback_id([None], 3),
    "feedback-too-many": lambda p: Monitor("regression").check_count(101),
    "load-custom-network": lambda p: bayesify.load(_custom_bundle(p)),
    "load-bad-net-reference": lambda p: net_from_reference("mynets"),
    "load-net-not-importable": lambda p: net_from_reference("nosuch_module:make"),
    "fit-float-labels": lambda p: _classifier().fit(
        (torch.randn(4, 2), torch.tensor([0.5, 1.5, 0.0, 1.0])), epochs=1, progress=False),
    "fit-labels-out-of-range": lambda p: _classifier().fit(
        (torch.randn(4, 2), torch.tensor([0, 1, 2, 7])), epochs=1, progress=False),
    "save-overwrite": lambda p: [_plain_method().save(p / "b") for _ in range(2)],
    "device-no-cuda": lambda p: bayesify.load(_plain_method().save(p / "b"), device="cuda"),
    "distill-augment": lambda p: bayesify.distill(_plain_method(), torch.randn(4, 2),
                                                  augment="rotate"),
    "distill-student-teacher": lambda p: bayesify.distill(bayesify.distill(
        _plain_method(), torch.randn(4, 2), epochs=1, samples=2, progress=False),
        torch.randn(4, 2)),
    "distill-no-linear": lambda p: bayesify.distill(bayesify.Deterministic(
        nn.Sequential(nn.Conv1d(1, 3, 3), nn.Flatten()), task="classification"),
        torch.randn(4, 1, 3), progress=False),
    "distill-fit": lambda p: bayesify.Distilled(nn.Sequential(nn.Linear(2, 3)),
        task="classification").fit((torch.randn(4, 2), torch.tensor([0, 1, 2, 0])), epochs=1,
                                   progress=False),
    "load-malformed-config": lambda p: bayesify.load(_edited_bundle(p, lambda c: c.pop("method"))),
    "load-nested-config": lambda p: bayesify.load(_edited_bundle(p, text="[" * 9**5 + "]" * 9**5)),
    "load-shape-mismatch": lambda p: bayesify.load(_edited_bundle(p, lambda c: c["model"]["kwargs"][
        "layers"][0]["kwargs"].update(in_features=30000, out_features=30000))),
    "load-int-weights": lambda p: bayesify.load(_int_bundle(p)),
    "load-buffer-shape": lambda p: bayesify.load(_bn_bundle_with_wide_mean(p)),
    "load-too-many-layers": lambda p: bayesify.load(_edited_bundle(p, lambda c: c["model"][
        "kwargs"].update(layers=[{"name": str(i), "type": "ReLU"} for i in range(1001)]))),
    "import-missing-metrics": lambda p: _import_bogus(p),
    "store-damaged": lambda p: _damaged_store(p),
    "fit-complex": lambda p: _plain_method().fit(
        (torch.randn(4, 2, dtype=torch.complex64), torch.randn(4)), epochs=1, progress=False),
    "fit-width": lambda p: bayesify.Deterministic(nn.Sequential(nn.Linear(3, 1))).fit(
        (torch.randn(4, 7), torch.randn(4)), epochs=1, progress=False),
    "fit-int-dataset": lambda p: _plain_method().fit(torch.utils.data.TensorDataset(
        torch.ones(4, 2, dtype=torch.long), torch.randn(4)), epochs=1, progress=False),
    "predict-complex": lambda p: _plain_method().predict(torch.randn(4, 2) * 1j, samples=2),
    "predict-text": lambda p: _plain_method().predict(np.array([["a", "b"]]), samples=2),
    "predict-too-many-samples": lambda p: _plain_method().predict(torch.randn(1, 2),
                                                                  samples=10**9),
    "laplace-no-train": lambda p: bayesify.Laplace.from_pretrained(
        nn.Sequential(nn.Linear(3, 2)), task="classification"),
    "laplace-grid-no-val": lambda p: bayesify.Laplace.from_pretrained(
        nn.Sequential(nn.Linear(3, 2)), (torch.randn(8, 3), torch.randint(0, 2, (8,))),
        task="classification", prior_fit="grid"),
    "laplace-full-all-layers": lambda p: bayesify.Laplace(
        nn.Sequential(nn.Linear(3, 2)), subset="all", hessian="full"),
    "laplace-probit-all-layers": lambda p: bayesify.Laplace(
        nn.Sequential(nn.Linear(3, 2)), task="classification", subset="all", link="probit"),
    "laplace-link-regression": lambda p: bayesify.Laplace(nn.Sequential(nn.Linear(3, 1)),
                                                          link="mc"),
    "laplace-no-linear": lambda p: bayesify.Laplace(nn.Sequential(nn.Conv2d(1, 2, 3))),
    "flow-needs-zuko": lambda p: _flow_without_zuko(),
    "flow-no-train": lambda p: bayesify.FlowPosterior.from_pretrained(
        nn.Sequential(nn.Linear(3, 1))),
    "tta-unknown-transform": lambda p: bayesify.TTA(nn.Identity(), transforms="flip,rotate:15"),
    "tta-transform-value": lambda p: bayesify.TTA(nn.Identity(), transforms="shift:1.5"),
    "tta-image-transform-on-table": lambda p: bayesify.TTA(nn.Linear(3, 1), transforms="flip")
        .predict(torch.randn(4, 3), samples=2),
    "tta-crop-too-large": lambda p: bayesify.TTA(nn.Flatten(), task="classification",
        transforms="crop:5").predict(torch.randn(2, 1, 5, 5), samples=2),
    "tta-ensemble-member": lambda p: bayesify.TTA(nn.Identity(), method=bayesify.DeepEnsemble),
    "tta-member-option": lambda p: bayesify.TTA.from_pretrained(
        nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)), (torch.randn(8, 2), torch.randn(8)),
        method=bayesify.MCBN, batch_size=4, bank_size=8),
    "swag-no-train": lambda p: bayesify.SWAG.from_pretrained(nn.Sequential(nn.Linear(2, 1))),
    "swag-few-snapshots": lambda p: bayesify.SWAG.from_pretrained(
        nn.Sequential(nn.Linear(2, 1)), (torch.randn(40, 2), torch.randn(40)), epochs=1),
    "swag-not-collected": lambda p: bayesify.SWAG(nn.Sequential(nn.Linear(2, 1))).predict(
        torch.randn(3, 2), samples=2),
    "hmc-network": lambda p: __import__("bayesify.reference").reference.sample_posterior(
        nn.Sequential(nn.Linear(1, 3), nn.BatchNorm1d(3), nn.Linear(3, 1)), torch.zeros(4, 1),
        torch.zeros(4), "regression"),
    "vcl-continue-other-method": lambda p: _continue_other_method(p),
    "vcl-coreset-without-size": lambda p: bayesify.VCL(nn.Sequential(nn.Linear(2, 2)),
                                                       task="classification", coreset="random"),
    "vcl-head": lambda p: bayesify.VCL(bayesify.MultiHeadMLP(2, 2, (4,), 2),
                                       task="classification").predict(torch.randn(3, 2), 2,
                                                                      head=5),
    "vcl-batch-norm": lambda p: bayesify.VCL(nn.Sequential(nn.Linear(2, 4), nn.BatchNorm1d(4),
                                                           nn.Linear(4, 2)),
                                             task="classification"),
    "search-needs-optuna": lambda p: _search_without_optuna(),
}  # fmt: skip


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


CASES.update({
    "cluster-needs-distributed": lambda p: _cluster_run(p, without_distributed=True),
    "cluster-unreachable": lambda p: _cluster_run(p),
    "cluster-scheduler-lost": _scheduler_lost,
    "store-empty": lambda p: _bench_faults(p, "store-empty"),
    "search-journal-damaged": lambda p: _bench_faults(p, "search-journal-damaged"),
    "import-metric-out-of-range": lambda p: _bench_faults(p, "import-metric-out-of-range"),
})  # fmt: skip


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


def test_every_documented_case_has_a_test():
    assert {case for case, _ in _rows()} == set(CASES)


@pytest.mark.parametrize("case, message", _rows())
def test_documented_error(tmp_path, case, message):
    if case == "device-no-cuda" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    errors = (ValueError, TypeError, FileExistsError, RuntimeError, ImportError)
    with pytest.raises(errors) as info:
        CASES[case](tmp_path)
    text = str(info.value)
    assert "\n" not in text, text
    for part in message.split("…"):
        assert part.strip() in text, f"{case}: {part.strip()!r} not in {text!r}"
