"""StochasticNorm: the shared suite, projection after steps, the three noise modes."""

from __future__ import annotations

import pytest
import torch
from conformance import MethodConformance

import bayesify
from bayesify.models import lenet, mlp


def regression_data(n: int = 160, d: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = torch.sin(x[:, 0]) + 0.5 * x[:, 1] + 0.1 * torch.randn(n, generator=g)
    return x, y


class TestStochasticNormRegression(MethodConformance):
    def make(self):
        x, y = regression_data()
        method = bayesify.StochasticNorm(mlp(4, hidden=(16, 16), norm=None), stochastic_bias=True)
        method.fit(
            (x[:128], y[:128]), val=(x[128:], y[128:]), epochs=2, batch_size=16, progress=False
        )
        return method, x[128:150]


class TestStochasticNormClassification(MethodConformance):
    def make(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(48, 1, 28, 28, generator=g)
        y = torch.randint(0, 10, (48,), generator=g)
        method = bayesify.StochasticNorm(lenet(norm=None), task="classification", sigma_per="layer")
        method.fit((x, y), epochs=1, batch_size=16, progress=False)
        return method, x[:7]


class TestNoiseLikeBN(MethodConformance):
    def make(self):
        x, y = regression_data()
        method = bayesify.StochasticNorm(mlp(4, hidden=(16,), norm=None), noise="bn")
        method.fit((x, y), epochs=1, batch_size=16, progress=False)
        return method, x[:20]


class TestWeightNormWithoutNoise(MethodConformance):
    stochastic = False

    def make(self):
        x, y = regression_data()
        method = bayesify.StochasticNorm(mlp(4, hidden=(16,), norm=None), noise="none")
        method.fit((x, y), epochs=1, batch_size=16, progress=False)
        return method, x[:20]


@pytest.mark.parametrize("noise", ["learned", "bn", "none"])
def test_unit_norm_after_every_step_and_no_weight_decay(noise):
    x, y = regression_data()
    method = bayesify.StochasticNorm(mlp(4, hidden=(16, 8), norm=None), noise=noise)
    groups = method.param_groups(1e-2, 0.1)
    free = {id(layer.layer.weight) for layer in method.layers}
    if noise == "learned":  # the scale posterior's parameters: the KL is their regulariser
        free |= {id(p) for layer in method.layers for p in (layer.scale, layer.u)}
    assert {id(p) for p in groups[0]["params"]} == free and groups[0]["weight_decay"] == 0
    decayed = {id(p) for p in groups[1]["params"]}
    assert decayed == {id(p) for p in method.net.parameters()} - free
    assert groups[1]["weight_decay"] == 0.1
    norms = []
    method.after_step = (
        lambda: (  # record norms right after each projection
            type(method).after_step(method),
            norms.append(torch.stack([layer.weight_norm() for layer in method.layers[:1]])),
        )
    )
    method.fit((x, y), epochs=2, batch_size=32, lr=1e-2, weight_decay=0.1, progress=False)
    assert len(norms) == 2 * (160 // 32)
    for n in norms:
        torch.testing.assert_close(n, torch.ones_like(n))
    for layer in method.layers:
        torch.testing.assert_close(layer.weight_norm(), torch.ones(layer.channels))


def test_surgery_keeps_a_pretrained_function_at_the_mean():
    net = mlp(4, hidden=(16, 8), norm=None)
    x = torch.randn(10, 4)
    with torch.no_grad():
        before = net(x)
    method = bayesify.StochasticNorm(net)
    with torch.no_grad():
        torch.testing.assert_close(method.net(x), before, rtol=1e-5, atol=1e-5)


def test_kl_drives_sigma_objective():
    method = bayesify.StochasticNorm(mlp(4, hidden=(8,), norm=None), prior_std=10.0)
    layer = method.layers[0]
    kl = method.kl()
    s = layer.scale.detach()
    sig = layer.sigma.detach()
    ref = torch.distributions.kl_divergence(
        torch.distributions.Normal(s, sig), torch.distributions.Normal(1.0, 10.0)
    ).sum()
    torch.testing.assert_close(kl, ref)


def test_unknown_noise_mode_is_a_clear_error():
    with pytest.raises(ValueError, match="noise"):
        bayesify.StochasticNorm(mlp(4, norm=None), noise="loud")
