"""Predictive against independent references (numpy/scipy)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as st
import torch
from scipy.integrate import quad

from bayesify import Predictive
from bayesify.metrics import crps_mixture


@pytest.fixture
def reg():
    g = torch.Generator().manual_seed(0)
    means = torch.randn(8, 5, generator=g, dtype=torch.float64)
    noise = torch.rand(8, 5, generator=g, dtype=torch.float64) + 0.1
    y = torch.randn(5, generator=g, dtype=torch.float64)
    return means, noise, y


def test_regression_moments_follow_law_of_total_variance(reg):
    means, noise, y = reg
    pred = Predictive.regression(means, noise)
    m, v = means.numpy(), noise.numpy()
    # moments of the equal-weight mixture, computed from E[y^2] - E[y]^2
    second = (v + m**2).mean(0)
    np.testing.assert_allclose(pred.mean.numpy(), m.mean(0))
    np.testing.assert_allclose(pred.variance.numpy(), second - m.mean(0) ** 2, rtol=1e-12)
    np.testing.assert_allclose(pred.epistemic_variance.numpy(), m.var(0))
    np.testing.assert_allclose(pred.aleatoric_variance.numpy(), v.mean(0))


def test_regression_log_prob_is_the_mixture(reg):
    means, noise, y = reg
    pred = Predictive.regression(means, noise)
    dens = st.norm.pdf(y.numpy()[None], means.numpy(), np.sqrt(noise.numpy())).mean(0)
    np.testing.assert_allclose(pred.log_prob(y).numpy(), np.log(dens), rtol=1e-10)


def test_regression_crps_forms(reg):
    means, noise, y = reg
    pred = Predictive.regression(means, noise)
    # gaussian form: closed form of N(mean, total var) vs numerical integration
    for i in range(3):
        mu, sd, yi = pred.mean[i].item(), pred.std[i].item(), y[i].item()
        f = lambda z, mu=mu, sd=sd, yi=yi: (st.norm.cdf(z, mu, sd) - (z >= yi)) ** 2  # noqa: E731
        ref = sum(quad(f, a, b, limit=200)[0] for a, b in ((mu - 12 * sd, yi), (yi, mu + 12 * sd)))
        assert pred.crps(y, form="gaussian")[i].item() == pytest.approx(ref, rel=1e-6)
    # the default is the mixture form: the metric itself (tests/metrics checks it against
    # quadrature) on the predictive's samples, not the moment-matched Gaussian
    mix = pred.crps(y)
    torch.testing.assert_close(mix, crps_mixture(means, noise.sqrt(), y, reduction="none"))
    assert not torch.allclose(mix, pred.crps(y, form="gaussian"))


def test_classification_information_split():
    g = torch.Generator().manual_seed(1)
    probs = torch.softmax(torch.randn(6, 4, 3, generator=g, dtype=torch.float64), -1)
    pred = Predictive.classification(probs)
    p = probs.numpy()
    h = st.entropy(p.mean(0), axis=-1)
    eh = st.entropy(p, axis=-1).mean(0)
    np.testing.assert_allclose(pred.entropy.numpy(), h)
    np.testing.assert_allclose(pred.expected_entropy.numpy(), eh)
    np.testing.assert_allclose(pred.mutual_information.numpy(), h - eh, atol=1e-12)
    labels = torch.tensor([0, 2, 1, 1])
    np.testing.assert_allclose(
        pred.log_prob(labels).numpy(), np.log(p.mean(0)[np.arange(4), labels.numpy()])
    )
    np.testing.assert_allclose(pred.variance.numpy(), p.mean(0) * (1 - p.mean(0)), rtol=1e-12)


def test_identical_samples_have_zero_mutual_information():
    probs = torch.softmax(torch.randn(1, 4, 3), -1).expand(5, 4, 3)
    assert Predictive.classification(probs).mutual_information.abs().max() < 1e-6


def test_affine_changes_units(reg):
    means, noise, y = reg
    pred = Predictive.regression(means, noise)
    scaled = pred.affine(3.0, 2.0)
    np.testing.assert_allclose(scaled.mean.numpy(), 3 + 2 * pred.mean.numpy())
    np.testing.assert_allclose(scaled.variance.numpy(), 4 * pred.variance.numpy())
    np.testing.assert_allclose(
        scaled.log_prob(3 + 2 * y).numpy(), pred.log_prob(y).numpy() - np.log(2.0)
    )


def test_constant_uncertainty_baseline(reg):
    means, _, y = reg
    base = Predictive.regression(means).constant_uncertainty(0.5)
    np.testing.assert_allclose(base.variance.numpy(), 0.5)
    np.testing.assert_allclose(
        base.log_prob(y).numpy(), st.norm.logpdf(y.numpy(), means.mean(0).numpy(), np.sqrt(0.5))
    )


def test_clear_errors():
    with pytest.raises(ValueError, match=r"\[T, N\]"):
        Predictive.regression(torch.zeros(3))
    with pytest.raises(ValueError, match="non-finite"):
        Predictive.regression(torch.tensor([[float("nan")]]))
    with pytest.raises(ValueError, match="sum to 1"):
        Predictive.classification(torch.ones(2, 3, 4))
    pred = Predictive.classification(torch.full((2, 3, 4), 0.25))
    with pytest.raises(ValueError, match="regression"):
        pred.crps(torch.zeros(3))
    with pytest.raises(ValueError, match="targets"):
        pred.log_prob(torch.zeros(5))
    for labels in ([0, 1, 4], [0, -1, 2], [0.5, 1, 2]):  # 4 classes: 0..3
        with pytest.raises(ValueError, match=r"whole numbers in 0\.\.3"):
            pred.log_prob(torch.tensor(labels))
    with pytest.raises(ValueError, match="noise_variance > 0"):
        Predictive.regression(torch.zeros(2, 3)).log_prob(torch.zeros(3))
