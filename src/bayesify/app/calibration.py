"""Fitting a bundle's deferral policy on its validation data (``bayesify calibrate``).

For bundles trained on a built-in dataset the validation split is rebuilt from the bundle's
metadata exactly as training made it (same rows, same seed), and the policy is checked on the
test split. Predictives are in the units the predictor reports (regression: original target
units), so the stored threshold reads the same as the served ``defer_score``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor

from bayesify.data import UCI_DATASETS, load_fashion_mnist, load_uci
from bayesify.methods import Method
from bayesify.posthoc.deferral import DeferralPolicy
from bayesify.predictive import Predictive, Task


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


def predictive(method: Method, split: Split, samples: int, seed: int) -> Predictive:
    """The predictive on ``split`` (network-unit inputs), in original target units."""
    pred = method.to_predictive(method.sample(split.x, samples, seed=seed))
    if method.config.task is Task.REGRESSION and (split.loc, split.scale) != (0.0, 1.0):
        pred = pred.affine(split.loc, split.scale)
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
) -> CalibrationResult:
    """Fit a deferral policy on the bundle's validation split, store it in ``method.metadata``
    and score it on the first ``test_limit`` test rows (0: no test check)."""
    val, test = bundle_splits(method)
    pred = predictive(method, val, samples, seed)
    policy = DeferralPolicy.fit(pred, val.y, score=score, target_coverage=coverage,
                                target_error=error, error_metric=error_metric)  # fmt: skip
    policy.validation["samples"] = samples
    policy.store(method.metadata)
    figures = None
    if test_limit != 0:
        if test_limit is not None:
            test = Split(test.x[:test_limit], test.y[:test_limit], test.loc, test.scale)
        held = predictive(method, test, samples, seed + 1)
        figures = policy.evaluate(held, test.y)
    return CalibrationResult(policy, figures)


def dataset_seed_note(metadata: dict[str, Any]) -> str | None:
    """A warning when a limited Fashion-MNIST bundle does not record its subset seed."""
    if metadata.get("data") == "fashion-mnist" and metadata.get("limit") and "seed" not in metadata:
        return (
            "the bundle does not record the seed of its training subset; assuming 0 "
            "(validation rows may overlap training rows if it was trained with another)"
        )
    return None
