"""Distances to a reference predictive against scipy and closed forms."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

from bayesify.metrics import argmax_agreement, total_variation, wasserstein_1d


def test_w1_matches_scipy_for_samples_of_different_sizes():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(37, 5, generator=g)
    b = 1.5 * torch.randn(50, 5, generator=g) + 0.3
    ours = wasserstein_1d(a, b, p=1)
    for j in range(5):
        want = stats.wasserstein_distance(a[:, j].numpy(), b[:, j].numpy())
        assert float(ours[j]) == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_w2_of_two_gaussians_matches_the_closed_form():
    # quantile-placed samples of N(0, 1) and N(0.7, 2²): W2 = sqrt(Δμ² + Δσ²) = sqrt(0.49 + 1)
    def z(m: int) -> torch.Tensor:
        u = (torch.arange(m, dtype=torch.float64) + 0.5) / m
        return torch.distributions.Normal(0.0, 1.0).icdf(u)

    a = z(4000)[torch.randperm(4000)]  # order must not matter
    b = 0.7 + 2.0 * z(3001)  # another sample size
    assert float(wasserstein_1d(a, b)) == pytest.approx(math.sqrt(0.49 + 1.0), rel=5e-3)
    # W2 is not W1: for these two W1 is smaller (about 1.01)
    assert float(wasserstein_1d(a, b, p=1)) < float(wasserstein_1d(a, b)) - 0.1


def test_w2_of_a_shift_is_the_shift_and_zero_for_the_same_samples():
    g = torch.Generator().manual_seed(1)
    a = torch.randn(200, 3, generator=g)
    assert torch.allclose(wasserstein_1d(a, a + 0.25), torch.full((3,), 0.25, dtype=torch.float64))
    assert torch.equal(wasserstein_1d(a, a.flip(0)), torch.zeros(3, dtype=torch.float64))


def test_total_variation_and_agreement():
    p = torch.tensor([[0.9, 0.1, 0.0], [0.2, 0.5, 0.3]])
    q = torch.tensor([[0.6, 0.3, 0.1], [0.6, 0.2, 0.2]])
    assert torch.allclose(total_variation(p, q), torch.tensor([0.3, 0.4], dtype=torch.float64))
    assert argmax_agreement(p, q) == 0.5
    with pytest.raises(ValueError, match=r"\[N, C\]"):
        total_variation(p, q[:, :2])
