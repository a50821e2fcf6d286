"""Conformal intervals (regression) and prediction sets (classification) for a bundle, fitted
on its validation rows under each sampling policy it will be served with (``bayesify calibrate
--conformal``) and stored in its metadata, where the predictor and the server read them.

``conformal_method`` picks the score (:class:`~bayesify.posthoc.conformal_scores.ConformalMethod`):
``split`` (regression: normalized residuals; classification: ``1 - p̂_y``, Sadinle et al.
2019), ``aps`` and ``aps-randomized`` (Romano et al. 2020), ``raps`` (Angelopoulos et al.
2021), ``auto`` (normalized, or APS). The choice and its options are stored with the scores.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from bayesify.app.calibration import Split, bundle_splits, predictive
from bayesify.app.calibration_tables import TableRows, check_classes, rows_of
from bayesify.data.errors import DataError
from bayesify.methods import Method
from bayesify.posthoc.conformal import METADATA_KEY as CONFORMAL_KEY
from bayesify.posthoc.conformal import Conformal, ConformalByPolicy
from bayesify.posthoc.conformal_scores import ConformalMethod
from bayesify.posthoc.sampling import SamplingPolicy
from bayesify.predictive import Predictive, Task
from bayesify.predictor import Predictor
from bayesify.progress import progress_bar

#: the sampling policies ``calibrate --conformal`` calibrates for by default: the server's
#: default T (32), ``predict``'s (100), the most a request may ask (256) and those between
DEFAULT_CONFORMAL_POLICIES = "8,16,32,64,100,128,256"
#: ``--conformal-method`` -> the score's options per task (None: not for that task)
CONFORMAL_METHODS: dict[str, dict[Task, dict[str, Any] | None]] = {
    "auto": {Task.REGRESSION: {"method": ConformalMethod.NORMALIZED},
             Task.CLASSIFICATION: {"method": ConformalMethod.APS}},
    "split": {Task.REGRESSION: {"method": ConformalMethod.NORMALIZED},
              Task.CLASSIFICATION: {"method": ConformalMethod.LAC}},
    "aps": {Task.REGRESSION: None, Task.CLASSIFICATION: {"method": ConformalMethod.APS}},
    "aps-randomized": {Task.REGRESSION: None,
                       Task.CLASSIFICATION: {"method": ConformalMethod.APS, "randomized": True}},
    "raps": {Task.REGRESSION: None, Task.CLASSIFICATION: {"method": ConformalMethod.RAPS}},
}  # fmt: skip


def conformal_options(name: str, task: Task, k_reg: int = 1, lam: float = 0.01) -> dict[str, Any]:
    """``Conformal.fit``'s options for ``--conformal-method name`` on a ``task`` bundle
    (``k_reg``, ``lam``: RAPS's); a one-line ``ValueError`` for a name or task that does not fit."""
    if name not in CONFORMAL_METHODS:
        raise ValueError(f"--conformal-method must be one of {', '.join(CONFORMAL_METHODS)}, "
                         f"got {name!r}")  # fmt: skip
    options = CONFORMAL_METHODS[name][task]
    if options is None:
        valid = [n for n, by_task in CONFORMAL_METHODS.items() if by_task[task] is not None]
        raise ValueError(f"--conformal-method {name} makes classification prediction sets; this "
                         f"bundle is a {task.value}: use {' or '.join(valid)}")  # fmt: skip
    if options["method"] is ConformalMethod.RAPS:
        return {**options, "k_reg": k_reg, "lam": lam}
    return dict(options)


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
    data: str | Path | TableRows | None = None,
    target: str | None = None,
    test: str | Path | TableRows | None = None,
    test_limit: int | None = None,
    level: float = 0.9,
    conformal_method: str = "auto",
    k_reg: int = 1,
    lam: float = 0.01,
    progress: bool = False,
) -> ConformalResult:
    """Fit conformal intervals (regression) or prediction sets (classification) under each
    sampling policy of ``policies`` on ``data`` (a table file, labels as strings or integers)
    or the built-in validation split, store them in ``method.metadata["conformal"]`` and check
    them at ``level`` on held-out rows (``test`` table or the built-in test split), with the
    score ``conformal_method`` names (:data:`CONFORMAL_METHODS`; ``k_reg``, ``lam``: RAPS's).
    ``progress`` shows a bar over the sampling policies."""
    predictor = Predictor(method)
    options = conformal_options(conformal_method, predictor.task, k_reg, lam)
    test_rows = rows_of(predictor, test, target)

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

    val_rows = rows_of(predictor, data, target)
    val_split = test_split = None
    if val_rows is None:
        val_split, test_split = bundle_splits(method)
    y = val_rows.y if val_rows is not None else val_split.y  # type: ignore[union-attr]
    fitted: dict[SamplingPolicy | None, Conformal] = {}
    where = val_rows.path if val_rows is not None else "the validation split"
    for policy in progress_bar(policies, desc="conformal", unit="policy", progress=progress):
        pred = pred_of(val_rows, val_split, policy, seed)
        check_classes(pred, y, where)
        generator = torch.Generator().manual_seed(seed)
        fitted[policy] = Conformal.fit(pred, y, generator=generator, **options)
        fitted[policy].check_rows_for(level)  # before the bundle is rewritten
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
            generator = torch.Generator().manual_seed(seed + 1)
            figures[policy.label()] = conformal_figures(conf, pred, y_t, level, generator)
    return ConformalResult(calibrations, figures)


def conformal_figures(
    conf: Conformal,
    pred: Predictive,
    y: Tensor,
    level: float,
    generator: torch.Generator | None = None,
) -> dict:
    """Coverage at ``level`` of ``conf`` on ``pred`` with targets ``y``, and the mean width
    (regression, target units) or mean set size (classification; ``generator`` draws the
    randomized sets' U)."""
    if pred.task is Task.REGRESSION:
        lo, hi = conf.interval(pred, level)
        yy = y.to(lo.dtype).to(lo.device)
        covered = (lo <= yy) & (yy <= hi)
        return {"n": len(y), "coverage": float(covered.double().mean()),
                "width": float((hi - lo).double().mean())}  # fmt: skip
    sets = conf.prediction_set(pred, level, generator=generator)
    covered = sets.gather(1, y.long().to(sets.device)[:, None]).squeeze(1)
    return {"n": len(y), "coverage": float(covered.double().mean()),
            "size": float(sets.double().sum(1).mean())}  # fmt: skip
