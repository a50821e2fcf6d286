"""StochasticScale: σ parametrisation, KL, projection, noise modes, BN-like noise."""

from __future__ import annotations

import math

import torch
from torch import nn

from bayesify.nn import StochasticScale, sampling
from bayesify.nn.stochastic_scale import inverse_piecewise_sigma, piecewise_sigma


def test_piecewise_sigma_is_continuous_with_bounded_derivatives():
    u = torch.tensor([-3.0, -1e-6, 0.0, 1e-6, 2.0], requires_grad=True)
    s = piecewise_sigma(u)
    torch.testing.assert_close(s.detach(), torch.tensor([math.exp(-3), 1.0, 1.0, 1.0, 3.0]))
    s.sum().backward()
    torch.testing.assert_close(u.grad, torch.tensor([math.exp(-3), 1.0, 1.0, 1.0, 1.0]))
    for sig in (0.01, 0.5, 1.0, 4.0):
        assert abs(float(piecewise_sigma(torch.tensor(inverse_piecewise_sigma(sig)))) - sig) < 1e-6


def test_output_is_normalised_weights_times_scale():
    lin = nn.Linear(4, 3)
    ref = nn.Linear(4, 3)
    ref.load_state_dict(lin.state_dict())
    layer = StochasticScale(lin, noise="none")
    torch.testing.assert_close(layer.weight_norm(), torch.ones(3))
    x = torch.randn(5, 4)
    torch.testing.assert_close(layer(x), ref(x), rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        lin.weight.mul_(3.0)  # off the sphere: the output is unchanged, projection restores it
    torch.testing.assert_close(layer(x), ref(x), rtol=1e-5, atol=1e-6)
    layer.project()
    torch.testing.assert_close(layer.weight_norm(), torch.ones(3))


def test_learned_noise_has_the_scale_law_per_row_and_channel():
    conv = nn.Conv2d(2, 3, 1, bias=False)
    layer = StochasticScale(conv, sigma_init=0.3)
    x = torch.randn(1, 2, 2, 2).repeat(4000, 1, 1, 1)
    with torch.no_grad():
        mean = layer(x[:1])
        with sampling(layer, 4000, torch.Generator().manual_seed(0)):
            out = layer(x)
    ratio = out / mean  # S / s per row and channel, equal over space
    assert torch.allclose(ratio, ratio[..., :1, :1].expand_as(ratio), atol=1e-4)
    s = ratio[:, :, 0, 0] * layer.scale.detach()
    torch.testing.assert_close(s.mean(0), layer.scale.detach(), atol=0.03, rtol=0)
    torch.testing.assert_close(s.std(0), torch.full((3,), 0.3), atol=0.02, rtol=0)


def test_bn_like_noise_has_fixed_levels():
    """y / s = (x̂ + V) U with V ~ N(0, a²), U ~ N(1, m²) independent: mean x̂ and variance
    (x̂² + a²)(1 + m²) − x̂², which tells the multiplicative noise apart when x̂ is not small."""
    lin = nn.Linear(3, 2, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))  # unit rows: x̂ = x[:2]
    a, m = 0.2, 0.1
    layer = StochasticScale(lin, noise="bn", bn_mult_std=m, bn_add_std=a)
    assert not [n for n, _ in layer.named_parameters() if n.startswith("u")]
    x_hat = torch.tensor([2.0, -1.0])
    x = torch.tensor([[2.0, -1.0, 5.0]]).repeat(20000, 1)
    with torch.no_grad(), sampling(layer, 20000, torch.Generator().manual_seed(0)):
        out = layer(x) / layer.scale.detach()
    expected_std = ((x_hat**2 + a**2) * (1 + m**2) - x_hat**2).sqrt()  # 0.284, 0.224
    torch.testing.assert_close(out.mean(0), x_hat, atol=0.01, rtol=0)
    torch.testing.assert_close(out.std(0), expected_std, atol=0.006, rtol=0)
    assert float(layer.kl()) == 0.0


def test_per_layer_sigma_is_one_parameter():
    layer = StochasticScale(nn.Linear(3, 5), sigma_per="layer", sigma_init=0.2)
    assert layer.u.shape == (1,)
    torch.testing.assert_close(layer.sigma, torch.full((5,), 0.2))


def test_prior_parameters_are_those_the_kl_depends_on():
    """Exactly the parameters with a gradient from the KL (learned mode), none otherwise."""
    for bias in (False, True):
        layer = StochasticScale(nn.Linear(3, 4), stochastic_bias=bias)
        layer.kl().backward()
        with_grad = {id(p) for p in layer.parameters() if p.grad is not None and p.grad.any()}
        assert {id(p) for p in layer.prior_parameters()} == with_grad
        assert len(with_grad) == (4 if bias else 2)
    assert StochasticScale(nn.Linear(3, 4), noise="bn").prior_parameters() == []
