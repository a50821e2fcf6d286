"""Predictive.cdf / quantile / interval / sample / prediction_set against scipy and numpy."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as st
import torch
from scipy.optimize import brentq

from bayesify import Predictive


def _mixture(t: int = 7, n: int = 6, seed: int = 0, per_sample: bool = True):
    g = torch.Generator().manual_seed(seed)
    means = 3 * torch.randn(t, n, generator=g, dtype=torch.float64)
    shape = (t, n) if per_sample else ()
    noise = 0.05 + torch.rand(shape, generator=g, dtype=torch.float64)
    return means, noise


def _scipy_cdf(m: np.ndarray, s: np.ndarray, y: float) -> float:
    return float(st.norm.cdf(y, m, s).mean())


@pytest.mark.parametrize("per_sample", [True, False])
def test_cdf_is_the_normal_mixture(per_sample):
    means, noise = _mixture(per_sample=per_sample)
    pred = Predictive.regression(means, noise)
    m, s = means.numpy(), np.broadcast_to(noise.sqrt().numpy(), means.shape)
    y = torch.linspace(-4, 4, 6, dtype=torch.float64)
    ref = [_scipy_cdf(m[:, i], s[:, i], y[i].item()) for i in range(6)]
    np.testing.assert_allclose(pred.cdf(y).numpy(), ref, rtol=1e-12, atol=1e-15)
    grid = torch.stack([y - 1, y, y + 2])  # [K, N]
    ref_k = [[_scipy_cdf(m[:, i], s[:, i], grid[k, i].item()) for i in range(6)] for k in range(3)]
    np.testing.assert_allclose(pred.cdf(grid).numpy(), ref_k, rtol=1e-12, atol=1e-15)
    scalar = [_scipy_cdf(m[:, i], s[:, i], 0.5) for i in range(6)]
    np.testing.assert_allclose(pred.cdf(0.5).numpy(), scalar, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("per_sample", [True, False])
def test_quantiles_match_brentq_per_row(per_sample):
    means, noise = _mixture(t=9, n=8, seed=1, per_sample=per_sample)
    pred = Predictive.regression(means, noise)
    m, s = means.numpy(), np.broadcast_to(noise.sqrt().numpy(), means.shape)
    levels = [0.001, 0.05, 0.3, 0.5, 0.9, 0.999]
    got = pred.quantile(levels).numpy()
    assert got.shape == (len(levels), 8)
    for k, q in enumerate(levels):
        for i in range(8):
            f = lambda x, i=i, q=q: _scipy_cdf(m[:, i], s[:, i], x) - q  # noqa: E731
            ref = brentq(f, -60, 60, xtol=1e-14)
            assert got[k, i] == pytest.approx(ref, abs=1e-9)
    np.testing.assert_allclose(pred.quantile(0.3).numpy(), got[2])


def test_quantile_of_one_gaussian_is_closed_form():
    means = torch.tensor([[0.5, -2.0, 10.0]], dtype=torch.float64)
    pred = Predictive.regression(means, torch.tensor([1.0, 4.0, 0.25], dtype=torch.float64))
    ref = st.norm.ppf(0.8, means.numpy()[0], [1.0, 2.0, 0.5])
    np.testing.assert_allclose(pred.quantile(0.8).numpy(), ref, rtol=1e-13)
    lo, hi = pred.interval(0.9)
    np.testing.assert_allclose(lo.numpy(), st.norm.ppf(0.05, means.numpy()[0], [1.0, 2.0, 0.5]))
    np.testing.assert_allclose(hi.numpy(), st.norm.ppf(0.95, means.numpy()[0], [1.0, 2.0, 0.5]))


def test_quantiles_of_point_masses_are_empirical_quantiles():
    # no noise: the mixture is the empirical distribution of the T sample means
    means = torch.tensor([[3.0, 0.0], [1.0, 0.0], [2.0, 5.0], [4.0, 5.0]], dtype=torch.float64)
    pred = Predictive.regression(means, 0.0)
    np.testing.assert_allclose(pred.cdf(torch.tensor([2.0, 4.9])).numpy(), [0.5, 0.5])
    got = pred.quantile([0.1, 0.5, 0.6, 0.99]).numpy()
    # inf{x : F(x) >= q}: numpy's "inverted_cdf" definition
    ref = np.quantile(means.numpy(), [0.1, 0.5, 0.6, 0.99], axis=0, method="inverted_cdf")
    np.testing.assert_allclose(got, ref, atol=1e-9)


def test_interval_is_equal_tailed_and_float32_in_float32_out():
    means, noise = _mixture(t=20, n=50, seed=2)
    pred = Predictive.regression(means.float(), noise.float())
    lo, hi = pred.interval(0.8)
    assert lo.dtype == torch.float32 and lo.shape == (50,)
    assert (lo < hi).all()
    np.testing.assert_allclose(pred.cdf(lo).numpy(), 0.1, atol=1e-5)
    np.testing.assert_allclose(pred.cdf(hi).numpy(), 0.9, atol=1e-5)


def test_regression_draws_follow_the_mixture_within_one_call():
    means, noise = _mixture(t=5, n=3, seed=3)
    pred = Predictive.regression(means, noise)
    draws = pred.sample(4000, generator=torch.Generator().manual_seed(0))
    assert draws.shape == (4000, 3) and draws.dtype == torch.float64
    m, s = means.numpy(), noise.sqrt().numpy()
    for i in range(3):
        cdf = lambda x, i=i: st.norm.cdf(np.asarray(x)[:, None], m[:, i], s[:, i]).mean(1)  # noqa: E731
        assert st.kstest(draws[:, i].numpy(), cdf).pvalue > 1e-3
    # independent draws from the same mixture made with numpy: same distribution
    rng = np.random.default_rng(0)
    pick = rng.integers(0, 5, 4000)
    ref = m[pick, 0] + s[pick, 0] * rng.standard_normal(4000)
    assert st.ks_2samp(draws[:, 0].numpy(), ref).pvalue > 1e-3
    # rows are drawn independently of each other
    assert abs(np.corrcoef(draws[:, 0], draws[:, 1])[0, 1]) < 0.1
    again = pred.sample(4000, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(draws, again)


def test_prediction_set_hand_worked():
    probs = torch.tensor(
        [
            [0.5, 0.3, 0.15, 0.05],  # 0.9: {0, 1, 2} (0.5 + 0.3 = 0.8 < 0.9)
            [0.1, 0.6, 0.3, 0.0],  # 0.9: {1, 2} reaches exactly 0.9
            [0.95, 0.02, 0.02, 0.01],  # 0.9: {0}
            [0.25, 0.25, 0.25, 0.25],  # 0.9: all four
        ]
    )
    pred = Predictive.classification(probs.expand(3, 4, 4))
    expected = torch.tensor(
        [[1, 1, 1, 0], [0, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool
    )
    torch.testing.assert_close(pred.prediction_set(0.9), expected)
    assert pred.prediction_set(0.5).sum(1).tolist() == [1, 1, 1, 2]


def test_prediction_set_uses_the_mean_over_samples():
    # two samples that disagree: the mean is (0.5, 0.5, 0)
    probs = torch.tensor([[[1.0, 0.0, 0.0]], [[0.0, 1.0, 0.0]]])
    pred = Predictive.classification(probs)
    assert pred.prediction_set(0.9).tolist() == [[True, True, False]]


def test_label_draws_follow_the_mean_probabilities():
    g = torch.Generator().manual_seed(4)
    probs = torch.softmax(torch.randn(6, 2, 3, generator=g, dtype=torch.float64), -1)
    pred = Predictive.classification(probs)
    labels = pred.sample(6000, generator=torch.Generator().manual_seed(1))
    assert labels.shape == (6000, 2) and labels.dtype == torch.int64
    for i in range(2):
        counts = np.bincount(labels[:, i].numpy(), minlength=3)
        assert st.chisquare(counts, 6000 * probs.mean(0)[i].numpy()).pvalue > 1e-3


def test_multi_output_is_refused_with_a_way_out():
    means = torch.randn(5, 4, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="per_output"):
        Predictive.regression(means, 0.1)
    preds = Predictive.per_output(means, torch.tensor([0.1, 0.4], dtype=torch.float64))
    assert len(preds) == 2
    torch.testing.assert_close(preds[1].mean, means[..., 1].mean(0))
    torch.testing.assert_close(preds[1].aleatoric_variance, torch.full((4,), 0.4).double())
    per_row = Predictive.per_output(means, torch.rand(4, 2, dtype=torch.float64))
    assert per_row[0].noise_variance.shape == (5, 4)
    with pytest.raises(ValueError, match=r"\[D\], \[N, D\]"):
        Predictive.per_output(means, torch.ones(3))


def test_query_errors_are_named():
    reg = Predictive.regression(torch.zeros(3, 4), 1.0)
    cls = Predictive.classification(torch.full((2, 4, 3), 1 / 3))
    for bad in (0.0, 1.0, [0.5, 1.2]):
        with pytest.raises(ValueError, match="strictly between 0 and 1"):
            reg.quantile(bad)
    with pytest.raises(ValueError, match="level"):
        reg.interval(1.5)
    with pytest.raises(ValueError, match=r"\[K, N\] with N = 4"):
        reg.cdf(torch.zeros(5))
    with pytest.raises(ValueError, match="classification"):
        reg.prediction_set(0.9)
    with pytest.raises(ValueError, match="regression"):
        cls.quantile(0.5)
    for n in (0, True, 2.0):
        with pytest.raises(ValueError, match="n must be a positive int"):
            reg.sample(n)
