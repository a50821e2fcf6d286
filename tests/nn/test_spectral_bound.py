"""The spectral bound (SNGP's and DDU's): the bounded weight's norm against
``torch.linalg.matrix_norm(ord=2)`` of the weight as a matrix, the forward and its gradient
against torch's own ``parametrizations.spectral_norm`` (the bound 1 on a weight above it), the
power iteration in training and nothing in eval, raised bounds and the state dict round trip."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrizations

from bayesify.nn.spectral_bound import (
    SpectralBound,
    bound_spectral_norms,
    raise_bounds_to_norms,
    spectral_bounds,
)


def _two_norm(w: torch.Tensor) -> torch.Tensor:
    return torch.linalg.matrix_norm(w.detach().flatten(1), ord=2)


def _layer(kind: str, scale: float = 10.0) -> nn.Module:
    torch.manual_seed(0)
    layer = nn.Linear(7, 5) if kind == "linear" else nn.Conv2d(3, 4, 3, padding=1)
    with torch.no_grad():
        layer.weight.mul_(scale)
    return layer


def _inputs(layer: nn.Module) -> torch.Tensor:
    return torch.randn(3, 7) if isinstance(layer, nn.Linear) else torch.randn(2, 3, 5, 5)


@pytest.mark.parametrize("shape", [(20, 12), (8, 3, 3, 3), (6, 2, 5)])
def test_a_weight_above_the_bound_is_scaled_to_it_and_one_below_left_alone(shape):
    g = torch.Generator().manual_seed(0)
    w = torch.randn(*shape, generator=g)
    sigma = _two_norm(w)
    for c, expect in ((1.0, 1.0), (2 * sigma.item(), sigma.item())):
        bound = SpectralBound(w, c, 1, g)
        for _ in range(200):
            bound(w)  # training mode: power-iteration steps, converged whatever the gap
        out = bound.eval()(w)
        torch.testing.assert_close(_two_norm(out), torch.tensor(expect), rtol=1e-4, atol=0)
        torch.testing.assert_close(bound.sigma(w), sigma, rtol=1e-4, atol=0)
        if c > sigma:
            assert torch.equal(out, w)


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_a_bounded_layer_scales_its_weight_not_its_bias(kind):
    layer = _layer(kind)
    sigma = _two_norm(layer.weight)
    bounded = copy.deepcopy(layer)
    (spectral,) = bound_spectral_norms([bounded], 0.9, 1)
    assert type(bounded).__mro__[1] is type(layer)  # still an nn.Linear / nn.Conv2d
    spectral.power_iteration(bounded.parametrizations.weight.original, 200)
    bounded.eval()
    torch.testing.assert_close(_two_norm(bounded.weight), torch.tensor(0.9), rtol=1e-4, atol=0)
    x = _inputs(layer)
    bias = layer.bias.view(-1, *[1] * (x.dim() - 2))
    with torch.no_grad():
        expected = (layer(x) - bias) * 0.9 / sigma + bias
        torch.testing.assert_close(bounded(x), expected, rtol=1e-4, atol=1e-5)
        loose = copy.deepcopy(layer)
        bound_spectral_norms([loose], 2 * sigma.item(), 1)
        torch.testing.assert_close(loose.eval()(x), layer(x))  # below the bound: unchanged


def _same_vectors(spectral: SpectralBound, u: torch.Tensor, v: torch.Tensor) -> None:
    with torch.no_grad():
        spectral._u.copy_(u)
        spectral._v.copy_(v)


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_training_forwards_match_torchs_spectral_norm(kind):
    """With the bound 1 on a weight of norm above 1 a training forward is torch's
    ``spectral_norm`` (Miyato et al.'s step, v then u, then W / uᵀWv) from the same vectors:
    the same outputs, the same gradient, the same vectors after five steps."""
    ours = _layer(kind, 3.0)
    theirs = nn.utils.spectral_norm(_layer(kind, 3.0))
    (spectral,) = bound_spectral_norms([ours], 1.0, 1)
    _same_vectors(spectral, theirs.weight_u, theirs.weight_v)
    x = _inputs(ours)
    for _ in range(5):
        out_ours, out_theirs = ours(x), theirs(x)
        torch.testing.assert_close(out_ours, out_theirs, rtol=1e-5, atol=1e-6)
        (g_ours,) = torch.autograd.grad(out_ours.square().sum(),
                                        ours.parametrizations.weight.original)  # fmt: skip
        (g_theirs,) = torch.autograd.grad(out_theirs.square().sum(), theirs.weight_orig)
        torch.testing.assert_close(g_ours, g_theirs, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(spectral._u, theirs.weight_u)
    torch.testing.assert_close(spectral._v, theirs.weight_v)


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_eval_forwards_match_torchs_parametrization(kind):
    """In eval mode, from the same stored vectors, the layer and its gradient are those of
    ``torch.nn.utils.parametrizations.spectral_norm`` (σ̂ = uᵀWv, u and v constants)."""
    ours = _layer(kind, 3.0)
    theirs = parametrizations.spectral_norm(_layer(kind, 3.0))
    (spectral,) = bound_spectral_norms([ours], 1.0, 1)
    torch_sn = theirs.parametrizations.weight[0]
    _same_vectors(spectral, torch_sn._u, torch_sn._v)
    ours.eval(), theirs.eval()
    x = _inputs(ours)
    out_ours, out_theirs = ours(x), theirs(x)
    torch.testing.assert_close(out_ours, out_theirs, rtol=1e-5, atol=1e-6)
    (g_ours,) = torch.autograd.grad(out_ours.sum(), ours.parametrizations.weight.original)
    (g_theirs,) = torch.autograd.grad(out_theirs.sum(), theirs.parametrizations.weight.original)
    torch.testing.assert_close(g_ours, g_theirs, rtol=1e-4, atol=1e-6)


def test_the_gradient_holds_u_and_v_fixed():
    """σ̂ = uᵀWv differentiated in W alone: the gradient of the bounded weight's sum is the
    closed form of W / (uᵀWv) with constant u, v."""
    w = torch.randn(5, 4, dtype=torch.float64) * 3
    bound = SpectralBound(w, 1.0, 0).eval()
    u, v = bound._u.clone(), bound._v.clone()
    w_ = w.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(bound(w_).sum(), w_)
    s = u @ w @ v
    expected = torch.ones_like(w) / s - w.sum() / s**2 * torch.outer(u, v)
    torch.testing.assert_close(grad, expected)


def test_training_forwards_run_the_power_iteration_and_eval_forwards_do_not():
    layer = nn.Linear(6, 6)
    with torch.no_grad():
        layer.weight.copy_(torch.diag(torch.arange(1.0, 7.0)))
    (spectral,) = bound_spectral_norms([layer], 1.0, 1)
    with torch.no_grad():
        spectral._u.copy_(torch.ones(6) / 6**0.5)  # far from the top vector (e_6)
        spectral._v.copy_(torch.ones(6) / 6**0.5)
    weight = layer.parametrizations.weight.original
    for _ in range(200):
        layer(torch.randn(2, 6))
    torch.testing.assert_close(spectral.sigma(weight), torch.tensor(6.0), rtol=1e-3, atol=0)
    u, v = spectral._u.clone(), spectral._v.clone()
    layer.eval()(torch.randn(2, 6))
    assert torch.equal(spectral._u, u) and torch.equal(spectral._v, v)


def test_a_layer_used_twice_in_one_training_forward_still_backpropagates():
    layer = nn.Linear(4, 4)
    bound_spectral_norms([layer], 0.5, 1)
    layer(layer(torch.randn(3, 4))).sum().backward()  # u, v updated between the two uses
    assert layer.parametrizations.weight.original.grad is not None


def test_raised_bounds_leave_trained_weights_unscaled_and_round_trip_in_the_state_dict():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    with torch.no_grad():
        net[0].weight.mul_(10)  # above the bound
        net[2].weight.copy_(0.01 * torch.eye(8))  # below it
    trained = copy.deepcopy(net)
    bounds = bound_spectral_norms([net[0], net[2]], 0.95, 1, seed=3)
    assert spectral_bounds(net) == bounds
    raise_bounds_to_norms(net)
    sigma = _two_norm(trained[0].weight)
    assert bounds[0].bound.item() == pytest.approx(sigma.item(), rel=1e-5)
    assert bounds[1].bound.item() == pytest.approx(0.95)
    x = torch.randn(10, 3)
    with torch.no_grad():
        torch.testing.assert_close(net.eval()(x), trained(x))
    fresh = copy.deepcopy(trained)
    bound_spectral_norms([fresh[0], fresh[2]], 0.95, 1, seed=4)
    fresh.load_state_dict(net.state_dict())
    assert [b.bound.item() for b in spectral_bounds(fresh)] == [b.bound.item() for b in bounds]
    with torch.no_grad():
        torch.testing.assert_close(fresh.eval()(x), net(x), rtol=0, atol=0)


def test_a_meta_build_has_the_real_builds_tensors():
    """A bundle's network is first built on the meta device: the same names, shapes, dtypes."""
    real = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(8, 2))
    bound_spectral_norms([real[0], real[2]], 1.0, 1)
    with torch.device("meta"):
        meta = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(8, 2))
        bound_spectral_norms([meta[0], meta[2]], 1.0, 1)
    shapes = {k: (v.shape, v.dtype) for k, v in real.state_dict().items()}
    assert shapes == {k: (v.shape, v.dtype) for k, v in meta.state_dict().items()}
    assert "0.parametrizations.weight.0.bound" in shapes


def test_bound_spectral_norms_is_in_place_and_seeded():
    a = nn.Linear(4, 4)
    b, c = copy.deepcopy(a), copy.deepcopy(a)
    bound_spectral_norms([a], 2.0, 1, seed=5)
    bound_spectral_norms([b], 2.0, 1, seed=5)
    bound_spectral_norms([c], 2.0, 1, seed=6)
    assert torch.equal(a.parametrizations.weight[0]._u, b.parametrizations.weight[0]._u)
    assert not torch.equal(a.parametrizations.weight[0]._v, c.parametrizations.weight[0]._v)


def test_bad_bounds_and_layers_are_one_line_errors():
    with pytest.raises(ValueError, match="bound must be > 0"):
        bound_spectral_norms([nn.Linear(2, 2)], 0.0, 1)
    with pytest.raises(ValueError, match="power iterations must be >= 0"):
        bound_spectral_norms([nn.Linear(2, 2)], 1.0, -1)
    with pytest.raises(TypeError, match="has none"):
        bound_spectral_norms([nn.ReLU()], 1.0, 1)
    with pytest.raises(ValueError, match="2 or more dimensions"):
        SpectralBound(torch.ones(3), 1.0)
