"""Fitting a bundle's deferral policy on its validation data (``bayesify calibrate``).

For bundles trained on a built-in dataset the validation split is rebuilt from the bundle's
metadata exactly as training made it (same rows, same seed), and the policy is checked on the
test split. Any bundle can instead be calibrated on a table file of the user's rows (CSV,
Parquet, ``.npz``; ``data=``) holding the features in raw units and the target column, read
through the one table reader and the bundle's own preprocessing
(:mod:`bayesify.app.calibration_tables`), and checked on a second table (``test=``).
Predictives are in the units the predictor reports (regression: original target units), so the
stored threshold reads the same as the served ``defer_score``. Conformal calibration is in
:mod:`bayesify.app.calibration_conformal`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from bayesify.app.calibration_tables import TableRows, rows_of, table_predictive
from bayesify.data import UCI_DATASETS, load_fashion_mnist, load_uci
from bayesify.methods import Method
from bayesify.methods.core.ood import feature_scores, fit_mahalanobis_inputs
from bayesify.posthoc.deferral import DeferralPolicy
from bayesify.posthoc.deferral_scores import FEATURE_SCORES, DeferralScore
from bayesify.posthoc.sampling import SamplingPolicy
from bayesify.posthoc.sequential import Draw, SequentialDecision
from bayesify.predictive import Predictive, Task
from bayesify.predictor import Predictor
from bayesify.progress import progress_bar

#: the deferral score ``calibrate`` thresholds unless told: each task's epistemic score
DEFAULT_SCORES = {Task.CLASSIFICATION: DeferralScore.MI,
                  Task.REGRESSION: DeferralScore.EPISTEMIC_VARIANCE}  # fmt: skip


@dataclass
class Split:
    """Inputs in network units, targets in original units, and the map to original units."""

    x: Tensor
    y: Tensor
    loc: float = 0.0
    scale: float = 1.0


def bundle_splits(method: Method) -> tuple[Split, Split]:
    """``(validation, test)`` of the built-in dataset a bundle was trained on."""
    meta = method.metadata
    data = meta.get("data")
    if data is None:
        raise ValueError("this bundle records no built-in dataset; pass --data with a table file")
    if data in UCI_DATASETS:
        s = load_uci(data, meta.get("split", 0), protocol=meta.get("protocol", "teye"))
        loc, scale = s.scaler.y_mean, s.scaler.y_std
        return (Split(s.x_val, loc + scale * s.y_val.double(), loc, scale),
                Split(s.x_test, loc + scale * s.y_test.double(), loc, scale))  # fmt: skip
    train, n_val = _fashion_training(method)
    test = load_fashion_mnist("test")
    return Split(train.x[:n_val], train.y[:n_val]), Split(test.x, test.y)


def _fashion_training(method: Method) -> tuple[Any, int]:
    """The Fashion-MNIST rows a bundle was trained with and how many of them, from the first,
    ``build_training`` held out for validation."""
    meta = method.metadata
    if meta.get("data") != "fashion-mnist":
        raise ValueError(f"unknown dataset {meta.get('data')!r} in the bundle's metadata")
    train = load_fashion_mnist("train")
    limit = meta.get("limit")
    if limit is not None:
        train = train.subset(limit, seed=meta.get("seed", 0))
    return train, max(1, len(train) // 10)


def fit_bundle_mahalanobis(
    method: Method, data: str | Path | TableRows | None = None, target: str | None = None
) -> int:
    """Fit the Mahalanobis OOD score (``bayesify.fit_mahalanobis``) of a classification bundle
    on its training rows: ``data`` (a table file with the ``target`` column, or those rows
    read), or the training split of the built-in dataset it was trained on. Stored in
    ``method.metadata``; returns the number of rows fitted on."""
    if method.config.task is not Task.CLASSIFICATION:
        raise ValueError("the Mahalanobis score is for classification bundles")
    predictor = Predictor(method)
    rows = rows_of(predictor, data, target)
    if rows is not None:
        x, y = predictor.network_inputs(rows.inputs), rows.y
    else:
        if method.metadata.get("data") is None:
            raise ValueError("this bundle records no built-in dataset; give the training rows "
                             "as a table file (--mahalanobis FILE)")  # fmt: skip
        train, n_val = _fashion_training(method)
        x, y = train.x[n_val:], train.y[n_val:]
    fit_mahalanobis_inputs(method, x, y)
    return len(y)


def _outputs(method: Method, split: Split) -> Callable[[Predictive], Predictive]:
    def outputs(pred: Predictive) -> Predictive:
        if method.config.task is Task.REGRESSION and (split.loc, split.scale) != (0.0, 1.0):
            return pred.affine(split.loc, split.scale)
        return pred

    return outputs


def predictive(
    method: Method, split: Split, samples: int, seed: int, policy: SamplingPolicy | None = None
) -> Predictive:
    """The predictive on ``split`` (network-unit inputs), in original target units, with
    ``samples`` or under ``policy``."""
    outputs = _outputs(method, split)
    if policy is not None and policy.is_adaptive:
        from bayesify.methods.core.adaptive import predict_adaptive

        return predict_adaptive(method, split.x, "adaptive", tol=policy.tol, start=policy.start,
                                max_samples=policy.max_samples, seed=seed,
                                outputs=outputs)  # fmt: skip
    if policy is not None:
        samples = int(policy.samples)  # type: ignore[arg-type]
    return outputs(method.to_predictive(method.sample(split.x, samples, seed=seed)))


def split_draw(method: Method, split: Split, seed: int) -> Draw:
    """Fresh samples of rows of ``split`` for a sequential decision (original units)."""
    generator = torch.Generator().manual_seed(seed)
    outputs = _outputs(method, split)

    def draw(rows: Tensor, have: int, more: int) -> Predictive:
        x = split.x[rows]
        return outputs(method.to_predictive(method.sample(x, more, generator=generator)))

    return draw


def counted(draw: Draw, bar: Any) -> Draw:
    """``draw`` that adds the samples it draws (rows x samples) to the progress ``bar``."""

    def counting(rows: Tensor, have: int, more: int) -> Predictive:
        out = draw(rows, have, more)
        bar.update(len(rows) * more)
        return out

    return counting


@dataclass
class CalibrationResult:
    policy: DeferralPolicy
    test: dict[str, Any] | None  # the policy's figures on held-out test rows


def calibrate_bundle(
    method: Method,
    *,
    score: str | None = None,
    coverage: float | None = None,
    error: float | None = None,
    error_metric: str | None = None,
    samples: int = 32,
    seed: int = 0,
    test_limit: int | None = None,
    data: str | Path | TableRows | None = None,
    target: str | None = None,
    test: str | Path | TableRows | None = None,
    decision: SequentialDecision | None = None,
    progress: bool = False,
) -> CalibrationResult:
    """Fit a deferral policy, store it in ``method.metadata`` and score it on the first
    ``test_limit`` held-out rows (0: no test check).

    ``decision``: fit the threshold under that sequential decision (the one the predictor then
    serves, whatever its sampling policy); None: on one draw of ``samples`` samples (also for a
    method with finitely many distinct samples, all drawn at once). ``score`` defaults to the
    method's ``deferral_score`` where it has one, else the task's epistemic score
    (:data:`DEFAULT_SCORES`); ``progress`` shows a bar
    of the samples drawn.

    The policy is fitted on ``data`` (a table file with the ``target`` column; see
    :func:`~bayesify.app.calibration_tables.table_rows`, or those rows already read) or, without
    it, on the validation split of the built-in dataset the bundle was trained on. Held-out
    figures come from the ``test`` table, else the built-in test split (a table-calibrated
    bundle without ``test`` gets none).
    """
    distinct = method.distinct_samples()
    if decision is not None and distinct is not None:
        # an exact mixture of finitely many samples (ensemble members): one draw of them all
        # has no Monte Carlo error, and more draws would only repeat them
        decision, samples = None, method.sample_count(distinct)
    predictor = Predictor(method)
    # a method whose samples are all equal (DDU) names its own: its mutual information is 0
    score = score or getattr(method, "deferral_score", None) or DEFAULT_SCORES[predictor.task].value
    feature = score in FEATURE_SCORES
    if feature:  # of the features, not the samples: one pass decides it exactly
        decision = None

    def row_scores(x: Tensor) -> Tensor | None:
        return feature_scores(method, [score], x)[score] if feature else None

    test_rows = rows_of(predictor, test, target)
    rows = rows_of(predictor, data, target)
    with progress_bar(desc="calibrate", unit="sample", unit_scale=True, progress=progress) as bar:
        if rows is not None:
            y, split = rows.y, None
            s = row_scores(predictor.network_inputs(rows.inputs)) if feature else None
            draw = counted(predictor.draw(rows.inputs, seed), bar) if decision else None
            pred = None if decision else table_predictive(predictor, rows, samples, seed)
        else:
            val, split = bundle_splits(method)
            y, s = val.y, row_scores(val.x)
            draw = counted(split_draw(method, val, seed), bar) if decision else None
            pred = None if decision else predictive(method, val, samples, seed)
        if decision is not None:
            assert draw is not None
            policy = DeferralPolicy.fit_sequential(draw, y, score=score, target_coverage=coverage,
                                                   target_error=error, error_metric=error_metric,
                                                   decision=decision)  # fmt: skip
        else:
            assert pred is not None
            policy = DeferralPolicy.fit(pred, y, score=score, target_coverage=coverage,
                                        target_error=error, error_metric=error_metric,
                                        row_scores=s)  # fmt: skip
            policy.validation["samples"] = samples
        where = f"{method.metadata.get('data')} validation split"
        policy.validation["data"] = str(rows.path) if rows is not None else where
        policy.store(method.metadata)
        figures = None
        held: tuple[Predictive, Tensor, Draw, Tensor | None] | None = None
        if test_limit != 0:
            start = decision.start if decision else samples
            if test_rows is not None:
                held_rows = test_rows.head(test_limit)
                s_t = row_scores(predictor.network_inputs(held_rows.inputs)) if feature else None
                held = (table_predictive(predictor, held_rows, start, seed + 1), held_rows.y,
                        counted(predictor.draw(held_rows.inputs, seed + 1), bar), s_t)  # fmt: skip
            elif split is not None:
                if test_limit is not None:
                    split = Split(split.x[:test_limit], split.y[:test_limit], split.loc,
                                  split.scale)  # fmt: skip
                held = (predictive(method, split, start, seed + 1), split.y,
                        counted(split_draw(method, split, seed + 1), bar),
                        row_scores(split.x))  # fmt: skip
        if held is not None:
            pred_t, y_t, draw_t, s_t = held
            defer = None
            if decision is not None:
                defer, _, used = policy.decide_sequential(draw_t, len(y_t), pred_t)
            figures = policy.evaluate(pred_t, y_t, defer=defer, row_scores=s_t)
            if decision is not None:
                figures["mean_samples"] = float(used.double().mean())
    return CalibrationResult(policy, figures)


def training_table_note(metadata: dict[str, Any], data: str | Path | None) -> str | None:
    """A warning when ``data`` is the table the bundle was trained on (its rows trained or
    stopped the network, so a policy fitted on them trusts the model too much)."""
    table = metadata.get("table")
    if data is None or table is None:
        return None
    try:
        same = Path(table).resolve() == Path(data).resolve()
    except OSError:  # pragma: no cover - unresolvable paths are simply not the same
        same = False
    if not same:
        return None
    return (f"{data} is the table this bundle was trained on: its rows trained the network or "
            "stopped its training, so the policy will accept too much; calibrate on rows the "
            "model has not seen")  # fmt: skip


def dataset_seed_note(metadata: dict[str, Any]) -> str | None:
    """A warning when a limited Fashion-MNIST bundle does not record its subset seed."""
    if metadata.get("data") == "fashion-mnist" and metadata.get("limit") and "seed" not in metadata:
        return (
            "the bundle does not record the seed of its training subset; assuming 0 "
            "(validation rows may overlap training rows if it was trained with another)"
        )
    return None
