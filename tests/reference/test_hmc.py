"""The NUTS reference against a posterior known in closed form, and its stored draws."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

pytest.importorskip("numpyro")

from bayesify.reference import HMCConfig, HMCSamples, predictive_diagnostics, sample_posterior  # noqa: E402


def _blr(n: int = 30, d: int = 2, noise: float = 0.5, prior: float = 0.3):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=g)
    y = x @ torch.tensor([1.0, -0.5]) + noise * torch.randn(n, generator=g)
    # the closed form: Σ = (XᵀX/σ² + I/s²)⁻¹, μ = Σ Xᵀy/σ²
    xd, yd = x.double(), y.double()
    cov = torch.linalg.inv(xd.T @ xd / noise**2 + torch.eye(d, dtype=torch.float64) / prior**2)
    mean = cov @ xd.T @ yd / noise**2
    return x, y, mean, cov


def test_bayesian_linear_regression_matches_the_closed_form():
    x, y, mean, cov = _blr()
    net = nn.Linear(2, 1, bias=False)
    cfg = HMCConfig(prior_std=0.3, noise_std=0.5, chains=4, warmup=80, samples=150,
                    init_steps=20, max_tree_depth=3, seed=1)  # fmt: skip
    draws = sample_posterior(net, x, y, "regression", cfg)
    assert draws.theta.shape == (4, 150, 2)
    w = draws.theta.reshape(-1, 2).double()
    # Monte Carlo error of the mean: sqrt(var / ESS), ESS from the chains themselves
    diag = predictive_diagnostics(draws.theta.double())
    assert diag["rhat_max"] < 1.05
    se = (cov.diagonal() / diag["ess_min"]).sqrt()
    assert ((w.mean(0) - mean).abs() < 4 * se).all(), (w.mean(0), mean, se)
    # covariance: each entry within 4 standard errors (var of a sample covariance entry of a
    # Gaussian is (Σ_ij² + Σ_ii Σ_jj) / ESS)
    emp = torch.cov(w.T)
    se_cov = (
        (cov.square() + cov.diagonal()[:, None] * cov.diagonal()[None]) / diag["ess_min"]
    ).sqrt()
    assert ((emp - cov).abs() < 4 * se_cov).all(), (emp, cov)
    # the check can fail: the posterior under another prior (σ_w = 1) is far outside it
    other_mean = _blr(prior=1.0)[2]
    assert ((w.mean(0) - other_mean).abs() > 4 * se).any()


def test_sampled_noise_recovers_the_noise_and_round_trips(tmp_path):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(200, 1, generator=g)
    y = 2 * x[:, 0] + 0.3 * torch.randn(200, generator=g)
    net = nn.Linear(1, 1)
    cfg = HMCConfig(chains=2, warmup=100, samples=100, init_steps=100, max_tree_depth=4)
    draws = sample_posterior(net, x, y, "regression", cfg)
    sigma = draws.log_noise.exp()
    assert abs(float(sigma.mean()) - 0.3) < 0.05
    draws.save(tmp_path / "ref", extra={"dataset": "toy"})
    back = HMCSamples.load(tmp_path / "ref")
    assert torch.equal(back.theta, draws.theta) and torch.equal(back.log_noise, draws.log_noise)
    assert back.config == cfg and back.shapes == draws.shapes
    pred = back.predictive(net, x[:5])
    assert pred.samples.shape == (200, 5)
    assert torch.allclose(pred.noise_variance, sigma.reshape(-1, 1).square().expand(200, 5))


def test_networks_with_dropout_or_batch_norm_are_refused():
    with pytest.raises(ValueError, match="BatchNorm1d"):
        sample_posterior(nn.Sequential(nn.Linear(1, 3), nn.BatchNorm1d(3)),
                         torch.zeros(4, 1), torch.zeros(4), "regression")  # fmt: skip


def test_rhat_flags_chains_that_disagree():
    g = torch.Generator().manual_seed(0)
    same = torch.randn(4, 200, 3, generator=g)
    assert predictive_diagnostics(same)["reference"]
    apart = same + torch.arange(4.0)[:, None, None]
    bad = predictive_diagnostics(apart)
    assert not bad["reference"] and bad["rhat_max"] > 1.5
    assert math.isfinite(bad["ess_min"])


def test_without_the_extra_one_line_names_it(monkeypatch):
    import sys

    from bayesify.reference import MissingExtra

    monkeypatch.setitem(sys.modules, "numpyro", None)  # `import numpyro` raises ImportError
    monkeypatch.setitem(sys.modules, "numpyro.infer", None)
    with pytest.raises(MissingExtra, match=r"^the HMC reference needs numpyro and jax: "
                                           r"pip install 'bayesify\[hmc\]'$"):  # fmt: skip
        sample_posterior(nn.Linear(1, 1), torch.zeros(4, 1), torch.zeros(4), "regression")


def test_one_chain_samples_the_closed_form_posterior_too():
    x, y, mean, cov = _blr()
    cfg = HMCConfig(prior_std=0.3, noise_std=0.5, chains=1, warmup=80, samples=300,
                    init_steps=20, max_tree_depth=3, seed=2)  # fmt: skip
    draws = sample_posterior(nn.Linear(2, 1, bias=False), x, y, "regression", cfg)
    assert draws.theta.shape == (1, 300, 2) and len(draws.stats["chains"]) == 1
    w = draws.theta[0].double()
    se = (cov.diagonal() / 100).sqrt()  # an ESS of 100 of 300 draws, conservatively
    assert ((w.mean(0) - mean).abs() < 4 * se).all(), (w.mean(0), mean, se)
