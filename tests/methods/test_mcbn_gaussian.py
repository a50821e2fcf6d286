"""MCBN with the Gaussian statistics model: the shared suite, the law of the drawn statistics,
and choosing the batch size on validation data."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conformance import MethodConformance
from scipy import stats

import bayesify
from bayesify.methods.mcbn.tuning import (
    DEFAULT_GRID,
    tune_effective_batch_size,
    validation_log_likelihood,
)
from bayesify.models import lenet, mlp
from bayesify.nn import MCBatchNorm
from bayesify.nn.mc_batchnorm import Statistics, StatisticsPlan


def regression_data(n: int = 256, d: int = 5, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = torch.sin(x[:, 0]) + 0.5 * x[:, 1] + 0.1 * torch.randn(n, generator=g)
    return x, y


class TestGaussianMCBNRegression(MethodConformance):
    def make(self):
        x, y = regression_data()
        method = bayesify.MCBN(mlp(5, hidden=(16, 16)), statistics="gaussian")
        method.fit(
            (x[:200], y[:200]), val=(x[200:], y[200:]), epochs=3, batch_size=16, progress=False
        )
        assert method.effective_batch_size == 16.0
        return method, x[200:230]


class TestGaussianMCBNClassification(MethodConformance):
    def make(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(64, 1, 28, 28, generator=g)
        y = torch.randint(0, 10, (64,), generator=g)
        net = lenet(norm="batch")
        method = bayesify.MCBN.from_pretrained(
            net,
            (x, y),
            batch_size=16,
            task="classification",
            statistics="gaussian",
            effective_batch_size=4.5,
        )
        assert [int(m.spatial_size) for m in method.layers] == [28 * 28, 14 * 14, 1]
        return method, x[:10]


def _layer(c: int = 3, n_spatial: int = 1) -> MCBatchNorm:
    layer = MCBatchNorm(c)
    layer.running_mean = torch.tensor([0.5, -1.0, 2.0])[:c]
    layer.running_var = torch.tensor([1.0, 4.0, 0.25])[:c]
    layer.spatial_size.fill_(n_spatial)
    return layer


def _gaussian(b: float) -> StatisticsPlan:
    return StatisticsPlan(Statistics.GAUSSIAN, effective_batch_size=b)


@pytest.mark.parametrize("b, spatial", [(3.0, 1), (8.0, 4), (2.5, 1)])
def test_drawn_statistics_follow_the_chi2_law(b, spatial):
    layer = _layer(n_spatial=spatial)
    n = b * spatial
    mean, var = layer.draw_statistics(20000, torch.Generator().manual_seed(0), _gaussian(b))
    mu, s2 = layer.running_mean.double(), layer.running_var.double()
    m, v = mean.double(), var.double()
    # sample mean ~ N(mu, s2 / n)
    torch.testing.assert_close(m.mean(0), mu, atol=4 * (s2 / n / 20000).sqrt().max(), rtol=0)
    torch.testing.assert_close(m.var(0), s2 / n, rtol=0.05, atol=0)
    # the biased variance S² of n values: n S² / σ² ~ χ²(n - 1); moments and a KS test (scipy)
    scaled = (v * n / s2).numpy()
    for c in range(3):
        assert abs(scaled[:, c].mean() - stats.chi2.mean(n - 1)) < 4 * np.sqrt(
            stats.chi2.var(n - 1) / 20000
        )
        assert abs(scaled[:, c].var() / stats.chi2.var(n - 1) - 1) < 0.06
        assert stats.kstest(scaled[:, c], stats.chi2(n - 1).cdf).pvalue > 1e-3


@pytest.mark.parametrize("b", [2, 4, 16])
def test_drawn_statistics_match_real_mini_batches(b):
    """The Gaussian model against what the bank records from real mini-batches of b rows drawn
    from a Gaussian population: the same mean variance σ²(b−1)/b (the biased variance batch
    norm normalises with) and the same spread of batch means σ²/b."""
    g = torch.Generator().manual_seed(1)
    population = torch.randn(20000, 3, generator=g, dtype=torch.float64) * torch.tensor(
        [1.0, 2.0, 0.5], dtype=torch.float64
    ) + torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    layer = MCBatchNorm(3).double()
    layer.running_mean = population.mean(0)
    layer.running_var = population.var(0)  # unbiased, as torch's running statistics
    layer.spatial_size.fill_(1)
    batches = torch.randint(0, 20000, (4000, b), generator=g)  # with replacement: N >> b
    with layer.recording():
        for idx in batches:
            layer(population[idx])
    mean, var = layer.draw_statistics(20000, torch.Generator().manual_seed(2), _gaussian(b))
    s2 = layer.running_var
    bank_ratio = layer.bank_var.mean(0) / s2
    model_ratio = var.mean(0) / s2
    torch.testing.assert_close(bank_ratio, torch.full_like(s2, (b - 1) / b), atol=0.04, rtol=0)
    torch.testing.assert_close(model_ratio, bank_ratio, atol=0.05, rtol=0)
    torch.testing.assert_close(mean.var(0) / layer.bank_mean.var(0), torch.ones_like(s2),
                               atol=0.08, rtol=0)  # fmt: skip


def test_gaussian_draws_need_spatial_size_and_n_above_one():
    layer = _layer()
    layer.spatial_size.fill_(0)
    with pytest.raises(RuntimeError, match="spatial size"):
        layer.draw_statistics(2, None, _gaussian(4.0))
    layer.spatial_size.fill_(1)
    with pytest.raises(ValueError, match="n must be > 1"):
        layer.draw_statistics(2, None, _gaussian(1.0))


def test_larger_effective_batch_means_less_spread():
    x, y = regression_data()
    method = bayesify.MCBN(mlp(5, hidden=(16, 16)), statistics="gaussian")
    method.fit((x, y), epochs=2, batch_size=16, progress=False)
    spreads = []
    for b in (4.0, 64.0, 4096.0):
        method.set_effective_batch_size(b)
        spreads.append(float(method.predict(x[:50], samples=30, seed=0).epistemic_variance.mean()))
    assert spreads[0] > spreads[1] > spreads[2]


def test_tune_batch_size_picks_the_best_grid_point():
    x, y = regression_data(400)
    method = bayesify.MCBN(mlp(5, hidden=(16, 16)), statistics="gaussian")
    method.fit((x[:300], y[:300]), val=(x[300:], y[300:]), epochs=3, batch_size=16, progress=False)
    scores = method.tune_batch_size((x[300:], y[300:]), grid=[2, 8, 32, 128, 1024], samples=16)
    assert set(scores) == {2.0, 8.0, 32.0, 128.0, 1024.0}
    best = max(scores, key=scores.get)
    assert method.effective_batch_size == best
    # every b is scored with τ refitted at that b, and the chosen b keeps its own τ
    tau = method.noise_variance
    val = (x[300:], y[300:])
    for b in (best, 2.0):
        method.set_effective_batch_size(b)
        tau_b = method.fit_noise(val)
        ll = validation_log_likelihood(method, *val, samples=16, seed=0)
        assert ll == pytest.approx(scores[b], rel=1e-6)
        if b == best:
            assert tau_b == pytest.approx(tau, rel=1e-9)


def test_tune_bank_model_default_grid_skips_batches_larger_than_the_data():
    x, y = regression_data(300)
    method = bayesify.MCBN(mlp(5, hidden=(8,)), bank_size=4)
    method.fit((x[:200], y[:200]), epochs=1, batch_size=16, progress=False)
    scores = tune_effective_batch_size(
        method, (x[200:], y[200:]), train=(x[:200], y[:200]), samples=4
    )
    assert set(scores) == {b for b in DEFAULT_GRID if round(b) <= 200}
    assert method.bank_batch_size == round(max(scores, key=scores.get))
    with pytest.raises(ValueError, match="at most 200 training rows"):
        tune_effective_batch_size(method, (x[200:], y[200:]), [512, 1024], train=(x[:200], y[:200]))


def test_tune_bank_model_refills_the_bank():
    x, y = regression_data(300)
    method = bayesify.MCBN(mlp(5, hidden=(8,)), bank_size=8)
    method.fit((x[:200], y[:200]), val=(x[200:], y[200:]), epochs=1, batch_size=16, progress=False)
    with pytest.raises(ValueError, match="train"):
        tune_effective_batch_size(method, (x[200:], y[200:]), [4, 16])
    scores = tune_effective_batch_size(
        method, (x[200:], y[200:]), [4, 16], train=(x[:200], y[:200]), samples=8
    )
    assert method.bank_batch_size == round(max(scores, key=scores.get))


def test_tune_batch_size_of_the_bank_model_takes_train():
    x, y = regression_data(300)
    method = bayesify.MCBN(mlp(5, hidden=(8,)), bank_size=8)
    method.fit((x[:200], y[:200]), val=(x[200:], y[200:]), epochs=1, batch_size=16, progress=False)
    with pytest.raises(ValueError, match=r"needs the training data \(train=...\)"):
        method.tune_batch_size((x[200:], y[200:]), grid=[4, 16])
    scores = method.tune_batch_size(
        (x[200:], y[200:]), grid=[4, 16], train=(x[:200], y[:200]), samples=8
    )
    best = max(scores, key=scores.get)
    assert set(scores) == {4.0, 16.0} and method.bank_batch_size == round(best)
    assert method.bank_size == 8


def test_unknown_statistics_is_a_clear_error():
    with pytest.raises(ValueError, match="statistics"):
        bayesify.MCBN(mlp(3), statistics="magic")
