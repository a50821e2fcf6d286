"""FlowPosterior: the shared suite, and the fitted flow against the exact last-layer posterior."""

from __future__ import annotations

import pytest
import torch
from conformance import MethodConformance
from torch import nn

import bayesify
from bayesify.models import lenet, mlp

pytest.importorskip("zuko")


def regression_data(n: int = 160, d: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = torch.sin(x[:, 0]) + 0.5 * x[:, 1] + 0.1 * torch.randn(n, generator=g)
    return x, y


def pretrained_mlp(x, y, hidden=(16, 16), epochs=3):
    method = bayesify.Deterministic(mlp(x.shape[1], hidden=hidden, norm=None))
    method.fit((x, y), epochs=epochs, batch_size=16, progress=False, lr=1e-2)
    return method.net


class TestFlowRegressionPretrained(MethodConformance):
    def make(self):
        x, y = regression_data()
        net = pretrained_mlp(x[:128], y[:128])
        method = bayesify.FlowPosterior.from_pretrained(
            net, (x[:128], y[:128]), val=(x[128:], y[128:]), elbo_steps=30, init_scale=0.1
        )
        return method, x[128:150]


class TestFlowClassificationFit(MethodConformance):
    samples = 8

    def make(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(48, 1, 28, 28, generator=g)
        y = torch.randint(0, 10, (48,), generator=g)
        method = bayesify.FlowPosterior(
            lenet(norm=None, width=1),
            task="classification",
            flow="realnvp",
            elbo_steps=10,
            hidden=16,
            init_scale=0.1,
        )
        method.fit((x, y), epochs=1, batch_size=16, progress=False)
        return method, x[:7]


def gaussian_kl(m0, s0, m1, s1) -> float:
    """KL(N(m0, s0) || N(m1, s1)) of two full-covariance Gaussians (closed form)."""
    inv = torch.linalg.inv(s1)
    d = m1 - m0
    k = len(m0)
    tr = torch.trace(inv @ s0)
    return float(0.5 * (tr + d @ inv @ d - k + torch.logdet(s1) - torch.logdet(s0)))


def exact_last_layer_posterior(method, x, y, prior_sigma):
    """The closed-form posterior of a regression net's last linear layer (weights, bias) given
    the body's features and the method's noise variance: N(m, S)."""
    h, _ = method.features((x, y))
    a = torch.cat([h, torch.ones(len(h), 1)], 1).double()  # [N, in + 1]
    noise = method.noise_variance
    cov = torch.linalg.inv(a.T @ a / noise + torch.eye(a.shape[1]) / prior_sigma**2)
    return cov @ a.T @ y.double() / noise, cov


def test_flow_matches_the_exact_gaussian_last_layer_posterior_better_than_mean_field():
    """Regression with a Gaussian prior: the last layer's posterior given the features and the
    noise is exactly Gaussian with correlated weights. The flow's draws match its mean and
    covariance (KL of their moment-matched Gaussian well below mean-field's, which cannot
    represent the correlations)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 2, generator=g)
    y = x[:, 0] - 0.5 * x[:, 1] + 0.3 * torch.randn(40, generator=g)
    net = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))
    net = bayesify.Deterministic(net).fit((x, y), epochs=30, batch_size=8, lr=1e-2,
                                          progress=False).net  # fmt: skip
    kls = {}
    for flow in ("realnvp", "mean-field"):
        method = bayesify.FlowPosterior.from_pretrained(
            net, (x, y), flow=flow, elbo_steps=300, elbo_samples=16, init_scale=0.3
        )
        m, cov = exact_last_layer_posterior(method, x, y, 1.0)
        draws = method.posterior.sample(4000, torch.Generator().manual_seed(1)).double()
        kls[flow] = gaussian_kl(draws.mean(0), draws.T.cov(), m, cov)
        if flow == "realnvp":
            sd = cov.diagonal().sqrt()
            assert ((draws.mean(0) - m).abs() / sd).max() < 0.2
            assert ((draws.std(0) - sd).abs() / sd).max() < 0.2
    corr = cov / (cov.diagonal().sqrt()[:, None] * cov.diagonal().sqrt())
    assert (corr - torch.eye(4)).abs().max() > 0.5  # the posterior is strongly correlated
    assert kls["realnvp"] < 0.15 and kls["mean-field"] > 1.0, kls
