"""Risk-coverage curve and AURC against brute-force loops."""

import itertools

import numpy as np
import pytest
import torch

from bayesify.metrics import aurc, risk_coverage_curve


def _risk_loop(order, loss):
    kept, risks = [], []
    for idx in order:
        kept.append(loss[idx])
        risks.append(sum(kept) / len(kept))
    return np.array(risks)


def test_risk_coverage_matches_loop_without_ties():
    rng = np.random.default_rng(0)
    unc, loss = rng.permutation(50).astype(float), rng.exponential(size=50)
    curve = risk_coverage_curve(torch.tensor(unc), torch.tensor(loss))
    ref = _risk_loop(np.argsort(unc), loss)
    np.testing.assert_allclose(curve.risk.numpy(), ref, rtol=1e-12)
    np.testing.assert_allclose(curve.coverage.numpy(), np.arange(1, 51) / 50)
    assert aurc(unc, loss).item() == pytest.approx(ref.mean(), rel=1e-12)


def test_ties_are_the_expectation_over_tie_breaks():
    unc = np.array([0.3, 0.1, 0.3, 0.2, 0.1, 0.3])
    loss = np.array([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
    orders = [p for p in itertools.permutations(range(6)) if np.all(np.diff(unc[list(p)]) >= 0)]
    assert len(orders) == 2 * 1 * 6  # all tie-breaks of the two tie groups
    ref = np.mean([_risk_loop(p, loss) for p in orders], axis=0)
    curve = risk_coverage_curve(unc, loss)
    np.testing.assert_allclose(curve.risk.numpy(), ref, rtol=1e-12)
    assert aurc(unc, loss).item() == pytest.approx(ref.mean(), rel=1e-12)


def test_aurc_hand_examples():
    # perfect ranking of 0/1 errors: risks 0, 0, 1/3
    assert aurc([0.1, 0.2, 0.9], [0, 0, 1]).item() == pytest.approx(1 / 9)
    # worst ranking: risks 1, 1/2, 1/3
    assert aurc([0.9, 0.2, 0.1], [0, 0, 1]).item() == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)
    # uninformative (all tied): the mean loss at every coverage
    assert aurc([1.0, 1.0, 1.0], [0, 0, 1]).item() == pytest.approx(1 / 3)


def test_dtype_follows_inputs():
    assert aurc(torch.rand(5), torch.rand(5)).dtype == torch.float32
    assert risk_coverage_curve(torch.rand(5), torch.rand(5).double()).risk.dtype == torch.float64
