"""Deferral policy: thresholds checked against brute force, scores against scipy/numpy."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy.stats import entropy as scipy_entropy

from bayesify.posthoc.deferral import DeferralPolicy, uncertainty_score
from bayesify.predictive import Predictive


def _classification(n: int, seed: int, t: int = 16, c: int = 4) -> tuple[Predictive, torch.Tensor]:
    """Rows with a per-row sharpness; labels drawn from the predictive mean, so uncertain rows
    are wrong more often."""
    g = torch.Generator().manual_seed(seed)
    sharp = torch.rand(n, generator=g) * 6
    logits = torch.randn(t, n, c, generator=g) * (1 + sharp[None, :, None] * 0.3)
    logits = logits + sharp[None, :, None] * torch.eye(c)[torch.zeros(n, dtype=torch.long)]
    pred = Predictive.from_logits(logits.double())
    y = torch.multinomial(pred.mean, 1, generator=g).squeeze(-1)
    return pred, y


def test_scores_match_scipy_and_numpy():
    pred, _ = _classification(50, 0)
    p = pred.samples.numpy()
    mean = p.mean(0)
    ent = scipy_entropy(mean, axis=-1)
    mi = ent - scipy_entropy(p, axis=-1).mean(0)

    def close(name: str, want: np.ndarray) -> None:
        np.testing.assert_allclose(uncertainty_score(pred, name).numpy(), want, rtol=1e-5,
                                   atol=1e-6)  # fmt: skip

    close("entropy", ent)
    close("mi", mi)
    close("max_prob", 1 - mean.max(-1))
    close("epistemic_variance", p.var(0).sum(-1))


@pytest.mark.parametrize("score", ["mi", "entropy", "max_prob"])
def test_target_coverage_on_validation_and_held_out(score):
    pred, y = _classification(4000, 1)
    policy = DeferralPolicy.fit(pred, y, score=score, target_coverage=0.8)
    assert policy.validation["coverage"] == pytest.approx(0.8, abs=1 / 4000)
    held, y_held = _classification(4000, 2)
    figures = policy.evaluate(held, y_held)
    assert abs(figures["coverage"] - 0.8) <= 0.02
    assert figures["error_accepted"] < figures["error_all"]
    defer, s = policy.decide(held)
    assert torch.equal(defer, s > policy.threshold)


def test_target_error_is_the_largest_accepted_set_brute_force():
    pred, y = _classification(600, 3)
    target = 0.15
    policy = DeferralPolicy.fit(pred, y, score="entropy", target_error=target)
    s = uncertainty_score(pred, "entropy").numpy()
    wrong = (pred.mean.argmax(-1) != y).numpy()
    best = 0
    for th in np.unique(s):  # every possible threshold: accept s <= th
        keep = s <= th
        if wrong[keep].mean() <= target:
            best = max(best, keep.sum())
    assert (s <= policy.threshold).sum() == best
    assert policy.validation["error_accepted"] <= target
    assert policy.validation["coverage"] == pytest.approx(best / 600)


def test_regression_rmse_target_and_figures():
    g = torch.Generator().manual_seed(4)
    n, t = 500, 20
    spread = torch.rand(n, generator=g) * 2 + 0.1
    means = torch.randn(t, n, generator=g, dtype=torch.float64) * spread
    pred = Predictive.regression(means, 0.05)
    y = torch.randn(n, generator=g, dtype=torch.float64) * spread
    policy = DeferralPolicy.fit(pred, y, score="std", target_error=0.8)
    keep = (pred.std <= policy.threshold).numpy()
    err = (pred.mean - y).numpy()
    assert np.sqrt((err[keep] ** 2).mean()) <= 0.8
    assert policy.validation["error_accepted"] == pytest.approx(np.sqrt((err[keep] ** 2).mean()))
    assert policy.validation["error_all"] == pytest.approx(np.sqrt((err**2).mean()))
    mae = DeferralPolicy.fit(pred, y, score="std", target_error=0.5, error_metric="mae")
    assert np.abs(err[(pred.std <= mae.threshold).numpy()]).mean() <= 0.5
    assert "nll_accepted" in policy.validation


def test_json_round_trip_and_metadata():
    pred, y = _classification(300, 5)
    policy = DeferralPolicy.fit(pred, y, score="mi", target_coverage=0.9)
    meta: dict = {}
    policy.store(meta)
    back = DeferralPolicy.from_metadata(json.loads(json.dumps(meta, allow_nan=False)))
    assert back == policy
    assert torch.equal(back.decide(pred)[0], policy.decide(pred)[0])
    assert DeferralPolicy.from_metadata({}) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target_coverage": 0.9, "target_error": 0.1}, "exactly one"),
        ({}, "exactly one"),
        ({"target_coverage": 1.5}, "target_coverage"),
        ({"target_error": -1}, "target_error"),
        ({"target_coverage": 0.9, "score": "std"}, "score must be one of"),
        ({"target_error": 0.1, "error_metric": "rmse"}, "error_metric"),
    ],
)
def test_bad_options_name_the_problem(kwargs, message):
    pred, y = _classification(200, 6)
    with pytest.raises(ValueError, match=message):
        DeferralPolicy.fit(pred, y, **kwargs)


def test_unreachable_error_target_says_so():
    probs = torch.tensor([[[0.9, 0.1], [0.6, 0.4], [0.3, 0.7]]])  # [1, 3, 2]
    pred = Predictive.classification(probs)
    with pytest.raises(ValueError, match="no threshold reaches error 0.1"):
        DeferralPolicy.fit(pred, torch.tensor([1, 1, 1]), score="entropy", target_error=0.1)


def test_damaged_dict_is_refused():
    with pytest.raises(ValueError, match="deferral policy"):
        DeferralPolicy.from_dict({"format": 1, "task": "classification"})
    with pytest.raises(ValueError, match="not a deferral policy"):
        DeferralPolicy.from_dict({"score": "mi"})
