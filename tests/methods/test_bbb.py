"""Bayes by Backprop: the shared suite, the ELBO, KL schedules, learned noise, hybrids."""

from __future__ import annotations

import math

import pytest
import torch
from conformance import MethodConformance
from test_mcbn import regression_data

import bayesify
from bayesify.methods.bbb.bayes_by_backprop import KLSchedule, kl_weight
from bayesify.models import lenet, mlp
from bayesify.nn.bayes_layers import BayesConv2d, BayesLinear


class TestBBBRegression(MethodConformance):
    def make(self):
        x, y = regression_data()
        method = bayesify.BayesByBackprop(mlp(5, hidden=(16, 16), norm=None), init_rho=-3.0)
        method.fit(
            (x[:200], y[:200]), val=(x[200:], y[200:]), epochs=3, batch_size=16, progress=False
        )
        return method, x[200:230]


class TestBBBClassificationHybridMixture(MethodConformance):
    def make(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(48, 1, 28, 28, generator=g)
        y = torch.randint(0, 10, (48,), generator=g)
        method = bayesify.BayesByBackprop(
            lenet(norm="batch"), task="classification", prior="mixture", last_k=3, init_rho=-3
        )
        method.fit((x, y), epochs=1, batch_size=16, progress=False)
        return method, x[:8]


def test_schedules():
    assert kl_weight("constant", 0.1) == 1.0
    assert kl_weight("linear", 0.25, warmup=0.5) == pytest.approx(0.5)
    assert kl_weight("linear", 0.75, warmup=0.5) == 1.0
    assert kl_weight("cosine", 0.25, warmup=0.5) == pytest.approx(0.5)
    quarter = 0.5 * (1 - math.cos(math.pi / 4))
    assert kl_weight("cosine", 0.125, warmup=0.5) == pytest.approx(quarter)
    assert kl_weight(KLSchedule.CYCLIC, 0.25 + 0.0625, warmup=0.5, cycles=4) == pytest.approx(0.5)
    assert kl_weight(KLSchedule.CYCLIC, 0.25 + 0.2, warmup=0.5, cycles=4) == 1.0
    with pytest.raises(ValueError, match="kl_schedule"):
        bayesify.BayesByBackprop(mlp(2, norm=None), kl_schedule="exp")


def test_objective_is_nll_plus_weighted_kl_over_n():
    torch.manual_seed(0)
    method = bayesify.BayesByBackprop(
        mlp(3, hidden=(4,), norm=None), kl_schedule="linear", kl_warmup=0.5
    )
    x, y = torch.randn(6, 3), torch.randn(6)
    method.net.eval()  # deterministic mean forward, so the NLL part is reproducible
    with torch.no_grad():
        out = method.net(x).squeeze(-1)
        var = method.noise_variance
        nll = (0.5 * math.log(2 * math.pi * var) + (y - out) ** 2 / (2 * var)).mean()
        expected = nll + 0.5 * method.kl() / 100
        torch.testing.assert_close(method.objective(x, y, 0.25, 100), expected)


def test_conversion_layers_and_param_groups():
    method = bayesify.BayesByBackprop(lenet(norm="batch"), task="classification")
    kinds = [type(m) for m in method.layers]
    assert kinds == [BayesConv2d, BayesConv2d, BayesLinear, BayesLinear]
    groups = method.param_groups(1e-3, 1e-4)
    assert groups[0]["weight_decay"] == 0.0 and groups[1]["weight_decay"] == 1e-4
    n_var = sum(p.numel() for layer in method.layers for p in layer.parameters())
    assert sum(p.numel() for p in groups[0]["params"]) == n_var


def test_learned_noise_moves_towards_the_data_noise():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(400, 2, generator=g)
    y = x[:, 0] + 0.5 * torch.randn(400, generator=g)
    method = bayesify.BayesByBackprop(mlp(2, hidden=(16,), norm=None), init_noise_variance=1.0)
    method.fit((x, y), epochs=30, batch_size=50, lr=1e-2, progress=False)
    assert 0.1 < method.noise_variance < 0.5  # started at 1, the true variance is 0.25
