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
    """``fit`` (the network trained by its NLL, then q) on a small classifier. (A LeNet body
    gives float32 results that differ by about 1e-7 between batches of 1 and 3 rows, which
    the chunking tests' 1e-6 tolerance does not always absorb once the last layer sums them:
    a property of the convolution kernels, not of the flow; a LeNet head is tested below.)"""

    samples = 8

    def make(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(64, 6, generator=g)
        y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
        method = bayesify.FlowPosterior(
            mlp(6, 3, hidden=(16,), norm=None), task="classification", flow="realnvp",
            elbo_steps=20, hidden=16, init_scale=0.1,
        )  # fmt: skip
        method.fit((x, y), epochs=2, batch_size=16, progress=False)
        return method, x[:7]


def test_lenet_head_one_pass_equals_the_loop_and_round_trips(tmp_path):
    """A flow over a LeNet's last layer (850 weights): one pass = loop, bundle round trip."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(24, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (24,), generator=g)
    method = bayesify.FlowPosterior.from_pretrained(
        lenet(norm=None, width=1),
        (x, y),
        task="classification",
        elbo_steps=5,
        hidden=16,
        flow="realnvp",  # zuko builds NSF's masked MLPs over 850 weights slowly (torch.unique)
    )
    one = method.sample(x[:5], 6, seed=3)
    loop = method.reference_samples(x[:5], 6, torch.Generator().manual_seed(3))
    torch.testing.assert_close(one, loop, rtol=1e-5, atol=1e-5)
    assert one.std(0).max() > 1e-4
    method.save(tmp_path / "b")
    again = bayesify.load(tmp_path / "b").sample(x[:5], 6, seed=3)
    torch.testing.assert_close(again, one, rtol=0, atol=0)


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
