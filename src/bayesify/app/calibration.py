"""Fitting a bundle's deferral policy on its validation data (``bayesify calibrate``).

For bundles trained on a built-in dataset the validation split is rebuilt from the bundle's
metadata exactly as training made it (same rows, same seed), and the policy is checked on the
test split. Any bundle can instead be calibrated on a table file of the user's rows (CSV,
Parquet, ``.npz``; ``data=``) holding the features in raw units and the target column, read
through the one table reader and the bundle's own preprocessing (:class:`~bayesify.predictor.
Predictor`), and checked on a second table (``test=``). Predictives are in the units the
predictor reports (regression: original target units), so the stored threshold reads the same
as the served ``defer_score``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from bayesify.app.table_jobs import _rows, label_strings
from bayesify.data import UCI_DATASETS, load_fashion_mnist, load_uci
from bayesify.data.errors import DataError
from bayesify.data.tables import read_table
from bayesify.methods import Method
from bayesify.posthoc.conformal import METADATA_KEY as CONFORMAL_KEY
from bayesify.posthoc.conformal import Conformal, ConformalByPolicy
from bayesify.posthoc.deferral import DeferralPolicy
from bayesify.posthoc.sampling import SamplingPolicy
from bayesify.posthoc.sequential import Draw, SequentialDecision
from bayesify.predictive import Predictive, Task
from bayesify.predictor import Predictor

#: the sampling policies ``calibrate --conformal`` calibrates for by default: the server's
#: default T (32), ``predict``'s (100), the most a request may ask (256) and those between
DEFAULT_CONFORMAL_POLICIES = "8,16,32,64,100,128,256"


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
    if data != "fashion-mnist":
        raise ValueError(f"unknown dataset {data!r} in the bundle's metadata")
    train = load_fashion_mnist("train")
    limit = meta.get("limit")
    if limit is not None:
        train = train.subset(limit, seed=meta.get("seed", 0))
    n_val = max(1, len(train) // 10)  # the rows build_training held out for validation
    test = load_fashion_mnist("test")
    return Split(train.x[:n_val], train.y[:n_val]), Split(test.x, test.y)


def _outputs(method: Method, split: Split):
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
        from bayesify.methods.adaptive import predict_adaptive

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


@dataclass
class TableRows:
    """Rows of a table file for a bundle: inputs in raw units (a DataFrame for bundles with
    feature names, else an array ``[N, F]`` of the columns besides the target) and targets
    ``[N]`` (original units; classification: indices in the bundle's class order)."""

    path: Path
    inputs: Any
    y: Tensor

    def head(self, n: int | None) -> TableRows:
        if n is None:
            return self
        return TableRows(self.path, self.inputs[:n], self.y[:n])


def _table_targets(predictor: Predictor, col: Any, path: Path, target: str) -> Tensor:
    """The target column as a tensor ``[N]``: numbers (regression) or class indices."""
    import pandas as pd

    missing = col.isna().to_numpy()
    if missing.any():
        raise DataError(f"{path}: target {target!r} has missing values in {_rows(missing)}")
    if predictor.task is Task.REGRESSION:
        y = pd.to_numeric(col, errors="coerce")
        bad = y.isna().to_numpy()
        if bad.any():
            value = col.iloc[int(np.flatnonzero(bad)[0])]
            raise DataError(f"{path}: target {target!r} has non-numeric values in {_rows(bad)} "
                            f"(e.g. {value!r}); this bundle is a regression")  # fmt: skip
        return torch.tensor(y.to_numpy(np.float64))
    labels = label_strings(col)
    names = predictor.class_names
    if names is None:  # a bundle without class names reads class indices 0..C-1
        ok = np.array([v.isdigit() for v in labels])
        if not ok.all():
            raise DataError(f"{path}: target {target!r} has values that are not class indices "
                            f"in {_rows(~ok)}; this bundle names no classes")  # fmt: skip
        return torch.as_tensor([int(v) for v in labels])
    unknown = sorted(set(labels) - set(names), key=str)
    numbered = not any(c.isdigit() for c in names)  # indices cannot be mistaken for names
    if unknown and numbered and all(v.isdigit() and int(v) < len(names) for v in labels):
        return torch.as_tensor([int(v) for v in labels])  # class indices, in names' order
    if unknown:
        raise DataError(f"{path}: target {target!r} has classes {unknown[:5]} the model does "
                        f"not know; its classes: {names}")  # fmt: skip
    index = {c: i for i, c in enumerate(names)}
    return torch.as_tensor([index[v] for v in labels])


def table_rows(predictor: Predictor, path: str | Path, target: str | None = None) -> TableRows:
    """Read a table file of rows for ``predictor``'s bundle: its feature columns in raw units
    and the target column (``target``, default the one the bundle was trained on). Missing
    columns, unusable values and unknown classes are one-line ``DataError``s naming the file."""
    import pandas as pd

    path = Path(path)
    prep = predictor.preprocessing
    target = target or (prep.target if prep is not None else None)
    if not target:
        raise ValueError("--target COLUMN is required: the bundle records no target column")
    frame = read_table(path)
    if target not in frame.columns:
        raise DataError(f"{path}: no target column {target!r}; columns: {list(frame.columns)}")
    names = predictor.feature_names
    if names is None:  # a bundle that reads unnamed rows: the other columns, in file order
        inputs: Any = frame.drop(columns=[target])
        shape = predictor.input_shape
        if shape is not None and inputs.shape[1] != int(np.prod(shape)):
            raise DataError(f"{path}: {inputs.shape[1]} columns besides the target {target!r}; "
                            f"the model reads {int(np.prod(shape))} numbers per row "
                            f"(shape {list(shape)})")  # fmt: skip
        text = [c for c in inputs.columns if not pd.api.types.is_numeric_dtype(inputs[c])]
        if text:
            raise DataError(f"{path}: column(s) {text[:5]} are not numbers; this bundle reads "
                            "numeric rows")  # fmt: skip
        inputs = inputs.to_numpy(np.float64, copy=True)
    else:
        if target in names:
            raise ValueError(f"--target {target!r} is one of the model's features {names}")
        missing = [f for f in names if f not in frame.columns]
        if missing:
            raise DataError(f"{path}: no column(s) {missing}; the model reads {names}")
        inputs = frame
    return TableRows(path, inputs, _table_targets(predictor, frame[target], path, target))


def table_predictive(predictor: Predictor, rows: TableRows, samples: int, seed: int) -> Predictive:
    """The predictive of a table's rows, in the units the predictor reports; a row that cannot
    be used is a ``DataError`` naming the file and the row (0-based, header excluded)."""
    try:
        pred = predictor.predictive(rows.inputs, samples, seed=seed)
    except DataError as e:
        raise DataError(f"{rows.path}: {e}") from None
    n_classes = pred.mean.shape[-1] if pred.task is Task.CLASSIFICATION else None
    if n_classes is not None and int(rows.y.max()) >= n_classes:
        raise DataError(f"{rows.path}: class index {int(rows.y.max())} is out of range for "
                        f"{n_classes} classes")  # fmt: skip
    return pred


@dataclass
class CalibrationResult:
    policy: DeferralPolicy
    test: dict[str, Any] | None  # the policy's figures on held-out test rows


def calibrate_bundle(
    method: Method,
    *,
    score: str,
    coverage: float | None = None,
    error: float | None = None,
    error_metric: str | None = None,
    samples: int = 32,
    seed: int = 0,
    test_limit: int | None = None,
    data: str | Path | None = None,
    target: str | None = None,
    test: str | Path | None = None,
    decision: SequentialDecision | None = None,
) -> CalibrationResult:
    """Fit a deferral policy, store it in ``method.metadata`` and score it on the first
    ``test_limit`` held-out rows (0: no test check).

    ``decision``: fit the threshold under that sequential decision (the one the predictor then
    serves, whatever its sampling policy); None: on one draw of ``samples`` samples.

    The policy is fitted on ``data`` (a table file with the ``target`` column; see
    :func:`table_rows`) or, without it, on the validation split of the built-in dataset the
    bundle was trained on. Held-out figures come from the ``test`` table, else the built-in
    test split (a table-calibrated bundle without ``test`` gets none).
    """
    predictor = Predictor(method)
    test_rows = table_rows(predictor, test, target) if test is not None else None
    if data is not None:
        rows = table_rows(predictor, data, target)
        y, split = rows.y, None
        draw = predictor.draw(rows.inputs, seed) if decision else None
        pred = None if decision else table_predictive(predictor, rows, samples, seed)
    else:
        val, split = bundle_splits(method)
        y = val.y
        draw = split_draw(method, val, seed) if decision else None
        pred = None if decision else predictive(method, val, samples, seed)
    options = {"score": score, "target_coverage": coverage, "target_error": error,
               "error_metric": error_metric}  # fmt: skip
    if decision is not None:
        assert draw is not None
        policy = DeferralPolicy.fit_sequential(draw, y, decision=decision, **options)
    else:
        assert pred is not None
        policy = DeferralPolicy.fit(pred, y, **options)
        policy.validation["samples"] = samples
    where = f"{method.metadata.get('data')} validation split"
    policy.validation["data"] = str(data) if data is not None else where
    policy.store(method.metadata)
    figures = None
    held: tuple[Predictive, Tensor, Draw] | None = None
    if test_limit != 0:
        start = decision.start if decision else samples
        if test_rows is not None:
            held_rows = test_rows.head(test_limit)
            held = (table_predictive(predictor, held_rows, start, seed + 1), held_rows.y,
                    predictor.draw(held_rows.inputs, seed + 1))  # fmt: skip
        elif split is not None:
            if test_limit is not None:
                split = Split(split.x[:test_limit], split.y[:test_limit], split.loc, split.scale)
            held = (predictive(method, split, start, seed + 1), split.y,
                    split_draw(method, split, seed + 1))  # fmt: skip
    if held is not None:
        pred_t, y_t, draw_t = held
        defer = None
        if decision is not None:
            defer, _, used = policy.decide_sequential(draw_t, len(y_t), pred_t)
        figures = policy.evaluate(pred_t, y_t, defer=defer)
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


@dataclass
class ConformalResult:
    calibrations: ConformalByPolicy
    #: per policy label: held-out coverage and mean width (regression) or set size at ``level``
    test: dict[str, dict[str, float]] | None


def calibrate_conformal_bundle(
    method: Method,
    *,
    policies: list[SamplingPolicy],
    seed: int = 0,
    data: str | Path | None = None,
    target: str | None = None,
    test: str | Path | None = None,
    test_limit: int | None = None,
    level: float = 0.9,
    conformal_method: str = "auto",
) -> ConformalResult:
    """Fit conformal intervals (regression) or prediction sets (classification) under each
    sampling policy of ``policies`` on ``data`` (a table file, labels as strings or integers)
    or the built-in validation split, store them in ``method.metadata["conformal"]`` and check
    them at ``level`` on held-out rows (``test`` table or the built-in test split)."""
    predictor = Predictor(method)
    test_rows = table_rows(predictor, test, target) if test is not None else None

    def pred_of(rows: TableRows | None, split: Split | None, policy: SamplingPolicy,
                s: int) -> Predictive:  # fmt: skip
        if rows is not None:
            kw = ({"tol": policy.tol, "start": policy.start, "max_samples": policy.max_samples}
                  if policy.is_adaptive else {})  # fmt: skip
            t = "adaptive" if policy.is_adaptive else policy.samples
            try:
                return predictor.predictive(rows.inputs, t, seed=s, **kw)
            except DataError as e:
                raise DataError(f"{rows.path}: {e}") from None
        assert split is not None
        return predictive(method, split, 0, s, policy)

    val_rows = table_rows(predictor, data, target) if data is not None else None
    val_split = test_split = None
    if val_rows is None:
        val_split, test_split = bundle_splits(method)
    y = val_rows.y if val_rows is not None else val_split.y  # type: ignore[union-attr]
    fitted: dict[SamplingPolicy | None, Conformal] = {}
    for policy in policies:
        pred = pred_of(val_rows, val_split, policy, seed)
        _check_classes(pred, y, data)
        generator = torch.Generator().manual_seed(seed)
        fitted[policy] = Conformal.fit(pred, y, method=conformal_method, generator=generator)
    calibrations = ConformalByPolicy(fitted)
    method.metadata[CONFORMAL_KEY] = calibrations.to_dict()
    figures = None
    if test_limit != 0 and (test_rows is not None or test_split is not None):
        held_rows = test_rows.head(test_limit) if test_rows is not None else None
        held_split = test_split
        if held_split is not None and test_limit is not None:
            held_split = Split(held_split.x[:test_limit], held_split.y[:test_limit],
                               held_split.loc, held_split.scale)  # fmt: skip
        y_t = held_rows.y if held_rows is not None else held_split.y  # type: ignore[union-attr]
        figures = {}
        for policy, conf in fitted.items():
            assert policy is not None
            pred = pred_of(held_rows, held_split, policy, seed + 1)
            figures[policy.label()] = conformal_figures(conf, pred, y_t, level)
    return ConformalResult(calibrations, figures)


def _check_classes(pred: Predictive, y: Tensor, where: Any) -> None:
    if pred.task is Task.CLASSIFICATION and int(y.max()) >= pred.mean.shape[-1]:
        raise DataError(f"{where}: class index {int(y.max())} is out of range for "
                        f"{pred.mean.shape[-1]} classes")  # fmt: skip


def conformal_figures(conf: Conformal, pred: Predictive, y: Tensor, level: float) -> dict:
    """Coverage at ``level`` of ``conf`` on ``pred`` with targets ``y``, and the mean width
    (regression, target units) or mean set size (classification)."""
    if pred.task is Task.REGRESSION:
        lo, hi = conf.interval(pred, level)
        yy = y.to(lo.dtype).to(lo.device)
        covered = (lo <= yy) & (yy <= hi)
        return {"n": len(y), "coverage": float(covered.double().mean()),
                "width": float((hi - lo).double().mean())}  # fmt: skip
    sets = conf.prediction_set(pred, level)
    covered = sets.gather(1, y.long().to(sets.device)[:, None]).squeeze(1)
    return {"n": len(y), "coverage": float(covered.double().mean()),
            "size": float(sets.double().sum(1).mean())}  # fmt: skip
