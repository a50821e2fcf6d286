"""Regression metrics against independent references (scipy, properscoring, quadrature)."""

import math

import numpy as np
import properscoring as ps
import pytest
import torch
from scipy import integrate, stats
from scipy.special import logsumexp

import bayesify.metrics.regression as regression_module
from bayesify.metrics import (
    Reduction,
    crps_gaussian,
    crps_mixture,
    crps_samples,
    gaussian_log_prob,
    mixture_log_prob,
    rmse,
)


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _crps_by_quadrature(cdf, y: float, lo: float, hi: float, points=()) -> float:
    """∫ (F(z) - 1{z >= y})² dz, split at y, over [lo, hi] (the mass outside is negligible)."""
    below = [p for p in points if lo < p < y]
    above = [p for p in points if y < p < hi]
    left = integrate.quad(lambda z: cdf(z) ** 2, lo, y, points=below or None, limit=200)[0]
    right = integrate.quad(lambda z: (1.0 - cdf(z)) ** 2, y, hi, points=above or None, limit=200)
    return left + right[0]


def test_crps_gaussian_matches_properscoring():
    rng = _rng(1)
    mean, std, y = rng.normal(size=50), rng.uniform(0.1, 3.0, 50), rng.normal(size=50) * 2
    ours = crps_gaussian(torch.tensor(mean), torch.tensor(std), torch.tensor(y), reduction="none")
    np.testing.assert_allclose(ours.numpy(), ps.crps_gaussian(y, mean, std), rtol=1e-10)


def test_crps_gaussian_matches_quadrature():
    rng = _rng(2)
    mean, std, y = rng.normal(size=6), rng.uniform(0.2, 2.0, 6), rng.normal(size=6) * 3
    ours = crps_gaussian(mean, std, y, reduction="none").numpy()
    for i in range(6):
        cdf = stats.norm(mean[i], std[i]).cdf
        lo, hi = min(mean[i], y[i]) - 15 * std[i], max(mean[i], y[i]) + 15 * std[i]
        assert ours[i] == pytest.approx(_crps_by_quadrature(cdf, y[i], lo, hi), abs=1e-8)


def test_crps_gaussian_scalar_std_and_reductions():
    mean, y = torch.tensor([0.0, 1.0, -2.0]), torch.tensor([0.5, 1.0, 0.0])
    per_point = crps_gaussian(mean, torch.full((3,), 0.7), y, reduction="none")
    ref = ps.crps_gaussian(y.numpy(), mean.numpy(), 0.7)
    np.testing.assert_allclose(per_point.numpy(), ref, rtol=1e-6)
    assert crps_gaussian(mean, 0.7, y).item() == pytest.approx(ref.mean(), rel=1e-6)
    assert crps_gaussian(mean, 0.7, y, reduction="sum").item() == pytest.approx(ref.sum(), rel=1e-6)
    assert crps_gaussian(mean, 0.7, y, reduction=Reduction.MEAN).shape == ()


@pytest.mark.parametrize("std_shape", ["scalar", "N", "TN"])
def test_crps_mixture_matches_quadrature(std_shape):
    rng = _rng(3)
    t, n = 3, 4
    means = rng.normal(size=(t, n)) * 2
    y = rng.normal(size=n)
    std = {
        "scalar": np.array(0.6),
        "N": rng.uniform(0.3, 1.5, n),
        "TN": rng.uniform(0.3, 1.5, (t, n)),
    }[std_shape]
    ours = crps_mixture(torch.tensor(means), torch.tensor(std), torch.tensor(y), reduction="none")
    std_tn = np.broadcast_to(std, (t, n))
    for i in range(n):

        def cdf(z, i=i):
            return np.mean(stats.norm.cdf(z, means[:, i], std_tn[:, i]))

        lo = min(means[:, i].min(), y[i]) - 15 * std_tn[:, i].max()
        hi = max(means[:, i].max(), y[i]) + 15 * std_tn[:, i].max()
        ref = _crps_by_quadrature(cdf, y[i], lo, hi, points=means[:, i])
        assert ours[i].item() == pytest.approx(ref, abs=1e-7)


def test_crps_mixture_with_some_point_masses_matches_quadrature():
    means = np.array([[0.0], [1.0], [2.5]])
    std = np.array([[0.5], [0.0], [1.0]])  # middle component is a point mass at 1
    y = 0.8
    ours = crps_mixture(means, std, [y], reduction="none").item()

    def cdf(z):
        comps = [stats.norm.cdf(z, 0.0, 0.5), float(z >= 1.0), stats.norm.cdf(z, 2.5, 1.0)]
        return float(np.mean(comps))

    assert ours == pytest.approx(_crps_by_quadrature(cdf, y, -10.0, 15.0, points=[1.0]), abs=1e-7)


def test_crps_mixture_zero_std_is_ensemble_crps():
    rng = _rng(4)
    samples, y = rng.normal(size=(7, 20)), rng.normal(size=20)
    ours = crps_mixture(samples, 0.0, y, reduction="none").numpy()
    np.testing.assert_allclose(ours, ps.crps_ensemble(y, samples.T), rtol=1e-10, atol=1e-12)


def test_crps_mixture_single_component_is_gaussian_crps():
    rng = _rng(5)
    mean, std, y = rng.normal(size=(1, 10)), rng.uniform(0.5, 2, 10), rng.normal(size=10)
    np.testing.assert_allclose(
        crps_mixture(mean, std, y, reduction="none").numpy(),
        ps.crps_gaussian(y, mean[0], std),
        rtol=1e-10,
    )


@pytest.mark.parametrize("std_kind", ["scalar", "TN", "TN_with_zeros"])
def test_crps_mixture_chunking_gives_same_result(monkeypatch, std_kind):
    rng = _rng(6)
    means, y = rng.normal(size=(5, 37)), rng.normal(size=37)
    std = {"scalar": 0.5, "TN": rng.uniform(0.1, 1, (5, 37))}.get(std_kind)
    if std_kind == "TN_with_zeros":
        std = rng.uniform(0.1, 1, (5, 37)) * (rng.uniform(size=(5, 37)) > 0.3)
    full = crps_mixture(means, std, y, reduction="none")
    monkeypatch.setattr(regression_module, "_PAIR_BUDGET", 10 * 4)  # 10 pairs: chunks of 4 points
    chunked = crps_mixture(means, std, y, reduction="none")
    # (torch.testing is avoided: its first call imports for seconds)
    np.testing.assert_allclose(full.numpy(), chunked.numpy(), rtol=1e-14, atol=1e-14)


def test_crps_mixture_per_point_std_with_a_zero_column():
    rng = _rng(11)
    means, y = rng.normal(size=(4, 2)), rng.normal(size=2)
    ours = crps_mixture(means, [0.0, 0.5], y, reduction="none").numpy()
    assert ours[0] == pytest.approx(ps.crps_ensemble(y[0], means[:, 0]), rel=1e-12)
    assert ours[1] == pytest.approx(crps_mixture(means[:, 1:], 0.5, y[1:]).item(), rel=1e-12)


def test_crps_samples_matches_properscoring():
    rng = _rng(7)
    samples, y = rng.normal(size=(30, 15)), rng.normal(size=15)
    samples[3, 2] = samples[4, 2]  # ties among samples
    ours = crps_samples(torch.tensor(samples), torch.tensor(y), reduction="none").numpy()
    np.testing.assert_allclose(ours, ps.crps_ensemble(y, samples.T), rtol=1e-10, atol=1e-12)
    mixture = crps_mixture(samples, 0.0, y, reduction="none").numpy()
    np.testing.assert_allclose(ours, mixture, rtol=1e-10, atol=1e-12)


def test_gaussian_log_prob_matches_scipy():
    rng = _rng(8)
    mean, var, y = rng.normal(size=25), rng.uniform(0.05, 4, 25), rng.normal(size=25) * 3
    ours = gaussian_log_prob(mean, var, y, reduction="none").numpy()
    np.testing.assert_allclose(ours, stats.norm.logpdf(y, mean, np.sqrt(var)), rtol=1e-12)
    scalar = gaussian_log_prob(mean, 0.3, y).item()
    assert scalar == pytest.approx(stats.norm.logpdf(y, mean, math.sqrt(0.3)).mean(), rel=1e-12)


@pytest.mark.parametrize("var_shape", ["scalar", "N", "TN"])
def test_mixture_log_prob_matches_scipy(var_shape):
    rng = _rng(9)
    t, n = 6, 12
    means, y = rng.normal(size=(t, n)), rng.normal(size=n) * 2
    var = {"scalar": np.array(0.4), "N": rng.uniform(0.1, 2, n), "TN": rng.uniform(0.1, 2, (t, n))}[
        var_shape
    ]
    ours = mixture_log_prob(means, var, y, reduction="none").numpy()
    ref = np.log(np.mean(stats.norm.pdf(y, means, np.sqrt(var)), axis=0))
    np.testing.assert_allclose(ours, ref, rtol=1e-10)


def test_mixture_log_prob_is_stable_far_in_the_tail():
    means, y = np.array([[0.0], [0.1]]), np.array([60.0])  # pdf underflows to 0 in float64
    ours = mixture_log_prob(means, 0.01, y).item()
    ref = logsumexp(stats.norm.logpdf(y, means, 0.1), axis=0)[0] - math.log(2)
    assert math.isfinite(ours) and ours == pytest.approx(ref, rel=1e-12)


def test_rmse_matches_numpy():
    rng = _rng(10)
    mean, y = rng.normal(size=40), rng.normal(size=40)
    assert rmse(mean, y).item() == pytest.approx(np.sqrt(np.mean((mean - y) ** 2)), rel=1e-12)


def test_dtypes_follow_inputs():
    m32, y32 = torch.randn(5), torch.randn(5)
    assert crps_gaussian(m32, 1.0, y32).dtype == torch.float32
    assert crps_gaussian(m32.double(), 1.0, y32.double()).dtype == torch.float64
    assert mixture_log_prob(torch.randn(3, 5), 0.5, y32, reduction="none").dtype == torch.float32
    assert crps_gaussian(m32, torch.tensor(1.0, dtype=torch.float64), y32).dtype == torch.float32
    assert crps_samples(torch.tensor([[1, 2], [3, 4]]), torch.tensor([2, 3])).dtype == (
        torch.get_default_dtype()
    )
    assert crps_samples([[1, 2], [3, 4]], [2, 3]).dtype == torch.float64  # Python numbers
