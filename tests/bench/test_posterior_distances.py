"""The posterior study's distances on f(x) and its floor, against independent references: the
sorted-sample formula of 1-D W2, scipy's W1, two Gaussians' closed form, and two samples of one
distribution (the floor) shrinking with draws."""

from __future__ import annotations

import math

import pytest
import torch
from scipy.special import ndtri
from scipy.stats import wasserstein_distance

from bayesify.bench.posterior.distances import distances, fx_std, fx_w2, subsample
from bayesify.bench.posterior.problems import Problem
from bayesify.metrics import wasserstein_1d
from bayesify.options import Task
from bayesify.predictive import Predictive


def _exact_quantiles(mu: float, sigma: float, n: int) -> torch.Tensor:
    """n points at the normal's quantiles (i + 1/2) / n: a sample whose W2 to the normal -> 0."""
    u = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    return mu + sigma * torch.as_tensor(ndtri(u.numpy()))


def test_w2_of_equal_samples_is_the_sorted_sample_formula():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(500, 3, generator=g), 2 + 0.5 * torch.randn(500, 3, generator=g)
    want = (a.double().sort(0).values - b.double().sort(0).values).square().mean(0).sqrt()
    torch.testing.assert_close(fx_w2(a, b), want)


def test_w2_of_unequal_samples_is_the_formula_on_repeated_draws():
    # 1-D W2 is the L2 distance of quantile functions: repeating each of 4 draws 3 times and each
    # of 6 draws twice gives two 12-draw samples with the same quantile functions
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(4, generator=g).double(), torch.randn(6, generator=g).double()
    ra, rb = a.repeat_interleave(3).sort().values, b.repeat_interleave(2).sort().values
    want = (ra - rb).square().mean().sqrt()
    assert float(fx_w2(a[:, None], b[:, None])[0]) == pytest.approx(float(want), rel=1e-12)
    # and W1 of the same samples is scipy's
    assert float(wasserstein_1d(a, b, p=1)) == pytest.approx(wasserstein_distance(a, b), 1e-12)


@pytest.mark.parametrize(("mu1", "s1", "mu2", "s2"), [(0, 1, 0.5, 2), (1, 0.3, 1, 0.8)])
def test_w2_between_two_gaussians_is_the_closed_form(mu1, s1, mu2, s2):
    a, b = _exact_quantiles(mu1, s1, 20000), _exact_quantiles(mu2, s2, 30000)
    want = math.sqrt((mu1 - mu2) ** 2 + (s1 - s2) ** 2)
    assert float(fx_w2(a[:, None], b[:, None])[0]) == pytest.approx(want, rel=2e-3)


def test_classification_w2_averages_the_classes():
    g = torch.Generator().manual_seed(2)
    p = torch.rand(50, 4, 3, generator=g).softmax(-1)
    q = torch.rand(80, 4, 3, generator=g).softmax(-1)
    want = torch.stack([wasserstein_1d(p[..., k], q[..., k]) for k in range(3)]).mean(0)
    torch.testing.assert_close(fx_w2(p, q), want)
    torch.testing.assert_close(fx_std(p), p.double().var(0).mean(-1).sqrt())


def test_the_floor_of_one_distribution_is_small_and_shrinks_with_draws():
    # two samples of one N(0, 0.8²): their W2 is Monte Carlo error alone, about 0.8·sqrt(c/n)
    g = torch.Generator().manual_seed(3)
    floors = []
    for n in (100, 1000, 10000):
        w2 = fx_w2(0.8 * torch.randn(n, 200, generator=g), 0.8 * torch.randn(n, 200, generator=g))
        floors.append(float(w2.mean()))
    assert floors[0] > 2 * floors[1] > 4 * floors[2], floors
    assert 0.02 < floors[1] < 0.1, floors  # the 1,000-draw floor: about 0.06
    # a distribution 0.2 away in its mean is far outside the 1,000-draw floor
    far = fx_w2(0.8 * torch.randn(1000, 200, generator=g),
                0.2 + 0.8 * torch.randn(1000, 200, generator=g))  # fmt: skip
    assert float(far.mean()) > 2 * floors[1]


def _problem(n: int) -> Problem:
    x = torch.zeros(n, 1)
    inside = torch.arange(n) < n // 2
    return Problem("p", Task.REGRESSION, x, x[:, 0], x, x[:, 0], x, x[:, 0], inside, ~inside)


def test_distances_split_f_of_x_from_the_noise():
    # a collapsed weight posterior with a wider noise: close on the whole predictive, far on f(x)
    g = torch.Generator().manual_seed(4)
    n = 6
    ref = Predictive.regression(0.3 * torch.randn(2000, n, generator=g), 0.5**2)
    total = math.sqrt(0.3**2 + 0.5**2)
    collapsed = Predictive.regression(0.001 * torch.randn(2000, n, generator=g), total**2)
    out = distances(collapsed, ref, _problem(n), seed=0)
    assert out["w2"] < 0.05 < 0.25 < out["w2_f"]  # f(x): about 0.3 (std 0.3 against 0)
    assert out["std_ratio_data"] == pytest.approx(1.0, abs=0.05)
    assert out["std_ratio_f_data"] < 0.01
    same = distances(ref, ref, _problem(n), seed=0)
    assert same["w2_f"] == 0 and same["std_ratio_f_gap"] == pytest.approx(1.0)


class _Draws:
    task = Task.REGRESSION

    def __init__(self, c: int, s: int) -> None:
        self.log_noise = torch.arange(c * s, dtype=torch.float64).reshape(c, s) / 100


def test_subsample_keeps_distinct_draws_with_their_noise():
    c, s, n = 3, 20, 5
    outputs = torch.arange(c * s, dtype=torch.float64).reshape(c, s, 1, 1).expand(c, s, n, 1)
    pred = subsample(_Draws(c, s), outputs, 25, seed=0)
    first = pred.samples[:, 0]
    assert pred.samples.shape == (25, n) and len(first.unique()) == 25
    # each kept draw keeps its own noise: draw k has log σ = k / 100
    want = (2 * first / 100).exp().mean().expand(n)
    torch.testing.assert_close(pred.aleatoric_variance, want.to(pred.aleatoric_variance.dtype))
    assert subsample(_Draws(c, s), outputs, 1000, seed=0).samples.shape == (c * s, n)


def test_classification_agreement_and_tv_are_also_scored_apart_in_the_data_and_the_gap():
    g = torch.Generator().manual_seed(5)
    n = 8
    ref = Predictive.from_logits(torch.randn(50, n, 3, generator=g))
    pred = Predictive.from_logits(torch.randn(40, n, 3, generator=g))
    gap = torch.arange(n) >= 5
    problem = Problem("c", Task.CLASSIFICATION, torch.zeros(1, 2), torch.zeros(1),
                      torch.zeros(1, 2), torch.zeros(1), torch.zeros(n, 2), torch.zeros(n),
                      ~gap, gap)  # fmt: skip
    out = distances(pred, ref, problem, seed=0)
    p, q = pred.mean.double().numpy(), ref.mean.double().numpy()
    same = p.argmax(1) == q.argmax(1)
    tv = 0.5 * abs(p - q).sum(1)
    assert out["agreement"] == pytest.approx(same.mean())
    assert out["agreement_data"] == pytest.approx(same[:5].mean())
    assert out["agreement_gap"] == pytest.approx(same[5:].mean())
    assert out["tv_data"] == pytest.approx(tv[:5].mean(), rel=1e-5)
    assert out["tv_gap"] == pytest.approx(tv[5:].mean(), rel=1e-5)
    assert out["tv"] == pytest.approx(tv.mean(), rel=1e-5)
