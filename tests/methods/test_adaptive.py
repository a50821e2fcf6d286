"""Adaptive sampling: figures equal a fixed-T prediction with the same draws, the stopping rule
holds row by row, and fewer samples are used than T_max where the tolerance allows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bayesify.methods import MCDropout
from bayesify.methods.adaptive import AdaptivePredictive
from bayesify.models import mlp
from bayesify.predictive import Predictive


def _method(task: str = "classification", out: int = 3) -> MCDropout:
    torch.manual_seed(0)
    m = MCDropout(mlp(4, out, (32,), norm=None, dropout=0.3), task=task)
    if task == "regression":
        m.noise_variance = 0.25
    return m


def _x(n: int = 60) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    # rows far from the origin have larger logits, so their dropout samples disagree more
    return torch.randn(n, 4, generator=g) * torch.linspace(0.05, 6, n)[:, None]


def test_loose_tolerance_is_the_fixed_t0_prediction():
    m, x = _method(), _x()
    pred = m.predict(x, "adaptive", tol=10.0, start=8, max_samples=32, seed=3)
    fixed = m.predict(x, 8, seed=3)
    assert isinstance(pred, AdaptivePredictive) and pred.samples.shape[0] == 32
    assert torch.equal(pred.samples_used, torch.full((60,), 8))
    torch.testing.assert_close(pred.mean, fixed.mean)
    torch.testing.assert_close(pred.mutual_information, fixed.mutual_information)
    torch.testing.assert_close(pred.entropy, fixed.entropy)


def test_zero_tolerance_draws_every_round_from_one_generator():
    m, x = _method(), _x(20)
    pred = m.predict(x, "adaptive", tol=0.0, start=4, max_samples=16, seed=5)
    assert torch.equal(pred.samples_used, torch.full((20,), 16))
    g = torch.Generator().manual_seed(5)
    rounds = [m.sample(x, 4, generator=g), m.sample(x, 4, generator=g), m.sample(x, 8, generator=g)]
    torch.testing.assert_close(pred.samples, torch.softmax(torch.cat(rounds), -1))


def _se(samples: np.ndarray) -> np.ndarray:
    """Largest-over-classes standard error of the mean, computed with numpy (ddof=1)."""
    return (samples.std(0, ddof=1) / np.sqrt(len(samples))).reshape(samples.shape[1], -1).max(-1)


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_each_row_is_its_own_fixed_t_prediction_and_the_stopping_rule_holds(task):
    m, x = _method(task, 3 if task == "classification" else 1), _x()
    tol = 0.03 if task == "classification" else 0.15
    pred = m.predict(x, "adaptive", tol=tol, start=4, max_samples=32, seed=7)
    used = pred.samples_used
    assert set(used.tolist()) <= {4, 8, 16, 32} and len(set(used.tolist())) > 1
    assert used.double().mean() < 32
    s = pred.samples
    for i in range(len(x)):
        t_r = int(used[i])
        own = s[:t_r, i : i + 1]  # the row's distinct draws
        row = (Predictive.classification(own) if task == "classification"
               else Predictive.regression(own, 0.25))  # fmt: skip
        torch.testing.assert_close(pred[i : i + 1].mean, row.mean)
        torch.testing.assert_close(pred[i : i + 1].epistemic_variance, row.epistemic_variance)
        if task == "classification":
            torch.testing.assert_close(pred[i : i + 1].mutual_information, row.mutual_information)
        else:
            torch.testing.assert_close(pred[i : i + 1].std, row.std)
        own_np = own.numpy().astype(np.float64)
        if t_r < 32:
            assert _se(own_np)[0] <= tol + 1e-6
        if t_r > 4:
            assert _se(own_np[: t_r // 2])[0] > tol - 1e-6


def test_fixed_t_that_reaches_the_tolerance_everywhere_needs_more_samples():
    m, x = _method(), _x()
    pred = m.predict(x, "adaptive", tol=0.03, start=4, max_samples=64, seed=2)
    worst = int(pred.samples_used.max())
    assert pred.samples_used.double().mean() < worst


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "needs tol"),
        ({"tol": -1}, "tol must be"),
        ({"tol": float("nan")}, "tol must be"),
        ({"tol": 0.1, "start": 1}, "start must be"),
        ({"tol": 0.1, "start": 8, "max_samples": 24}, "power of two"),
        ({"tol": 0.1, "start": 8, "max_samples": 4}, "power of two"),
    ],
)
def test_bad_adaptive_options(options, message):
    with pytest.raises(ValueError, match=message):
        _method().predict(_x(5), "adaptive", **options)


def test_adaptive_options_need_adaptive_samples():
    with pytest.raises(ValueError, match='go with samples="adaptive"'):
        _method().predict(_x(5), 8, tol=0.1)
