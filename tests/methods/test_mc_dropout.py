"""MC dropout: the shared suite, Gal's weight decay, CUDO baseline, BN kept in eval."""

from __future__ import annotations

import copy

import pytest
import torch
from conformance import MethodConformance
from test_mcbn import regression_data

import bayesify
from bayesify.methods.dropout.mc_dropout import gal_weight_decay
from bayesify.models import lenet, mlp


class TestMCDropoutRegression(MethodConformance):
    def make(self):
        x, y = regression_data()
        method = bayesify.MCDropout(mlp(5, hidden=(16, 16), norm=None, dropout=0.1))
        method.fit(
            (x[:200], y[:200]), val=(x[200:], y[200:]), epochs=3, batch_size=16, progress=False
        )
        return method, x[200:230]


class TestMCDropoutClassificationWithBN(MethodConformance):
    def make(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(64, 1, 28, 28, generator=g)
        y = torch.randint(0, 10, (64,), generator=g)
        method = bayesify.MCDropout(lenet(norm="batch", dropout=0.5), task="classification")
        method.fit((x, y), epochs=1, batch_size=16, progress=False)
        return method, x[:10]


def test_rate_override_and_gal_weight_decay():
    method = bayesify.MCDropout(mlp(3, norm=None, dropout=0.1), p=0.05, length_scale=1e-2, tau=2)
    assert all(layer.p == 0.05 for layer in method.layers)
    lam = method.weight_decay(100)
    assert lam == pytest.approx(1e-4 * 0.95 / (2 * 100 * 2))
    assert gal_weight_decay(1e-2, 0.05, 100, 2.0) == lam
    x, y = torch.randn(8, 3), torch.randn(8)
    method.net.eval()
    with torch.no_grad():
        base = method.nll(method.net(x), y)
        l2 = sum(m.weight.square().sum() for m in method.net if isinstance(m, torch.nn.Linear))
        torch.testing.assert_close(method.objective(x, y, 0.0, 100), base + lam * l2)


def test_cudo_baseline_has_the_same_mean_and_constant_variance():
    method, x = TestMCDropoutRegression().make()
    pred = method.predict(x, samples=8, seed=0)
    cudo = method.constant_baseline(pred)
    torch.testing.assert_close(cudo.mean, pred.mean)
    assert torch.allclose(cudo.variance, torch.full_like(cudo.variance, method.constant_variance))


def test_predict_keeps_batchnorm_running_stats_and_eval_output():
    net = lenet(norm="batch", dropout=0.5).eval()
    plain = copy.deepcopy(net)
    method = bayesify.MCDropout(net, task="classification")
    x = torch.randn(4, 1, 28, 28)
    method.predict(x, samples=3, seed=0)
    for (k, a), b in zip(method.net.state_dict().items(), plain.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=k)
    with torch.no_grad():
        torch.testing.assert_close(method.net.eval()(x), plain.eval()(x))
