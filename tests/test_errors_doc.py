"""Every row of docs/errors.md: the case runs and its error contains the documented message."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

import bayesify
from bayesify.app.table_jobs import decide_task
from bayesify.data.tables import table_format
from bayesify.models import net_from_reference
from bayesify.posthoc.conformal import Conformal, ConformalByPolicy
from bayesify.posthoc.sampling import SamplingPolicy, parse_policies
from bayesify.predictor import Predictor
from bayesify.serve.monitor import Monitor
from tests.errors_doc_cases import (
    _bench_faults,
    _bn_bundle_with_wide_mean,
    _bounded_predictor,
    _calibrate,
    _categorical_method,
    _classifier,
    _cluster_run,
    _continue_other_method,
    _custom_bundle,
    _damaged_store,
    _edited_bundle,
    _feedback_id,
    _flow_without_zuko,
    _frame,
    _import_bogus,
    _int_bundle,
    _named_classifier,
    _newer_record,
    _plain_method,
    _predictor,
    _record_of_another_task,
    _record_without_psycopg,
    _rows,
    _scheduler_lost,
    _search_without_optuna,
    _serve_folder,
    _served,
    _train,
)

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
    "laplace-no-linear": lambda p: bayesify.Laplace(nn.Sequential(nn.Conv2d(1, 2, 3)),
                                                    subset="last-layer"),
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


CASES.update({
    "cluster-needs-distributed": lambda p: _cluster_run(p, without_distributed=True),
    "cluster-unreachable": lambda p: _cluster_run(p),
    "cluster-scheduler-lost": _scheduler_lost,
    "store-empty": lambda p: _bench_faults(p, "store-empty"),
    "search-journal-damaged": lambda p: _bench_faults(p, "search-journal-damaged"),
    "import-metric-out-of-range": lambda p: _bench_faults(p, "import-metric-out-of-range"),
})  # fmt: skip


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
