"""The fused σ/KL autograd node of the Bayes layers against autograd of the plain formula."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bayesify.nn.bayes_layers import BayesConv2d, BayesLinear
from bayesify.nn.gaussian_posterior import Prior, _SoftplusGaussian, gaussian_kl


@pytest.mark.parametrize("use_sigma", [True, False])
def test_fused_softplus_gaussian_gradients_equal_autograd_of_the_formula(use_sigma: bool) -> None:
    g = torch.Generator().manual_seed(0)
    mu = torch.randn(7, 5, generator=g, dtype=torch.float64)
    rho = torch.randn(7, 5, generator=g, dtype=torch.float64) - 3.0
    c = torch.randn(7, 5, generator=g, dtype=torch.float64)
    grads = []
    for fused in (True, False):
        m, r = mu.clone().requires_grad_(), rho.clone().requires_grad_()
        if fused:
            sigma, kl = _SoftplusGaussian.apply(m, r, 0.7)
        else:
            sigma = F.softplus(r)
            kl = gaussian_kl(m, sigma, 0.7)
        loss = 0.3 * kl + ((sigma * c).sum() if use_sigma else 0.0)
        loss.backward()
        grads.append((kl.detach(), m.grad, r.grad))
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-10)


def test_gaussian_kl_equals_torch_distributions() -> None:
    mu, sigma = torch.randn(20, dtype=torch.float64), torch.rand(20, dtype=torch.float64) + 0.1
    ref = torch.distributions.kl_divergence(
        torch.distributions.Normal(mu, sigma), torch.distributions.Normal(0.0, 1.3)
    ).sum()
    torch.testing.assert_close(gaussian_kl(mu, sigma, 1.3), ref)


@pytest.mark.parametrize("prior", [Prior(sigma=0.5), Prior(kind="mixture")])
@pytest.mark.parametrize("make", [lambda p: BayesLinear(6, 4, prior=p),
                                  lambda p: BayesConv2d(2, 3, 3, padding=1, prior=p)])  # fmt: skip
def test_training_forward_records_the_step_kl_once(make, prior: Prior) -> None:
    layer = make(prior).train()
    x = torch.randn(5, 6) if isinstance(layer, BayesLinear) else torch.randn(5, 2, 4, 4)
    layer(x)
    torch.manual_seed(1)
    recorded = layer.take_kl()
    torch.manual_seed(1)
    fresh = layer.kl()
    if prior.kind.value == "gaussian":  # the mixture's KL is a Monte Carlo estimate
        torch.testing.assert_close(recorded, fresh)
    assert recorded.requires_grad
    assert layer._step_kl is None  # taken once; the next take recomputes
    with torch.no_grad():
        layer(x)
    assert layer._step_kl is None  # no graph kept from forwards without autograd


@pytest.mark.parametrize("estimator", ["shared", "flipout"])
def test_conv_training_noise_has_the_posterior_moments(estimator: str) -> None:
    """Each output element is a sum of independent Gaussian weights: mean conv(x, μ) + b_μ and
    variance conv(x², σ²) + σ_b², whichever training estimator draws it."""
    torch.manual_seed(0)
    layer = BayesConv2d(2, 3, 3, padding=1, init_rho=-1.0).train()
    bayesianize_estimator(layer, estimator)
    x = torch.randn(2, 2, 4, 4)
    with torch.no_grad():
        outs = torch.stack([layer(x) for _ in range(4000)])  # [draws, 2, 3, 4, 4]
        mean = F.conv2d(x, layer.weight_mu, layer.bias_mu, padding=1)
        var = F.conv2d(x**2, layer.weight_sigma**2, layer.bias_sigma**2, padding=1)
    z = (outs.mean(0) - mean) / (var / len(outs)).sqrt()  # standard errors of the mean
    assert z.abs().max() < 5.0
    torch.testing.assert_close(outs.var(0) / var, torch.ones_like(var), atol=0.12, rtol=0.0)
    same_rows = layer(torch.cat([x[:1], x[:1]]))
    shared = torch.allclose(same_rows[0], same_rows[1])
    assert shared == (estimator == "shared")  # one weight sample per mini-batch, or per row


def bayesianize_estimator(layer: BayesConv2d, estimator: str) -> None:
    layer.train_estimator = estimator


def test_bbb_validates_and_applies_the_conv_estimator() -> None:
    from bayesify import BayesByBackprop
    from bayesify.models import lenet

    with pytest.raises(ValueError, match="conv_estimator"):
        BayesByBackprop(lenet(norm=None), task="classification", conv_estimator="bogus")
    m = BayesByBackprop(lenet(norm=None), task="classification", conv_estimator="flipout")
    convs = [layer for layer in m.layers if isinstance(layer, BayesConv2d)]
    assert convs and all(c.train_estimator == "flipout" for c in convs)
    assert BayesByBackprop(lenet(norm=None), task="classification").config.conv_estimator == (
        "shared"
    )


@pytest.mark.parametrize("bias", [True, False])
def test_fused_local_reparam_linear_equals_autograd_of_the_formula(bias: bool) -> None:
    """BayesLinear's one-node training step against autograd of the plain expressions (same ε),
    values and all gradients in float64; and torch's numerical gradcheck."""
    from bayesify.nn.gaussian_posterior import _LocalReparamLinear

    g = torch.Generator().manual_seed(3)

    def rand(*shape: int, shift: float = 0.0) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64) + shift

    x, eps, g_out = rand(6, 4), rand(6, 3), rand(6, 3)
    params = [rand(3, 4), rand(3, 4, shift=-2.0)] + ([rand(3), rand(3, shift=-2.0)] if bias else [])
    grads = []
    for fused in (True, False):
        xs = x.clone().requires_grad_()
        ps = [p.clone().requires_grad_() for p in params]
        w_mu, w_rho = ps[0], ps[1]
        b_mu, b_rho = (ps[2], ps[3]) if bias else (None, None)
        if fused:
            out, kl = _LocalReparamLinear.apply(xs, w_mu, w_rho, b_mu, b_rho, eps, 0.8)
        else:
            w_sig = F.softplus(w_rho)
            b_var = F.softplus(b_rho) ** 2 if bias else None
            var = F.linear(xs**2, w_sig**2, b_var)
            out = F.linear(xs, w_mu, b_mu) + torch.sqrt(var + 1e-16) * eps
            kl = gaussian_kl(w_mu, w_sig, 0.8)
            if bias:
                kl = kl + gaussian_kl(b_mu, F.softplus(b_rho), 0.8)
        ((out * g_out).sum() + 0.37 * kl).backward()
        grads.append([out.detach(), kl.detach(), xs.grad, *(p.grad for p in ps)])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-9)
    inputs = (x.clone().requires_grad_(), *(p.clone().requires_grad_() for p in params[:2]))
    b_in = tuple(p.clone().requires_grad_() for p in params[2:]) if bias else (None, None)
    assert torch.autograd.gradcheck(
        lambda *a: _LocalReparamLinear.apply(*a[:3], *b_in, eps, 0.8), inputs
    )


def test_bayes_linear_training_uses_the_fused_node_and_records_its_kl() -> None:
    layer = BayesLinear(5, 2, prior=Prior(sigma=0.5)).train()
    out = layer(torch.randn(3, 4, 5))  # extra middle axis
    assert out.shape == (3, 4, 2)
    node = out.grad_fn.next_functions[0][0]  # under the reshape back to [3, 4, 2]
    assert "LocalReparamLinear" in type(node).__name__
    torch.testing.assert_close(layer.take_kl(), layer.kl())
