"""The fused training nodes of the node-noise mixture posterior against autograd of the plain
expressions (float64), ``gradcheck``, and the KL against torch.distributions."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bayesify.nn.mixture_posterior import block_noise_input, mixture_mean_kl

D = torch.float64


def _leaf(*shape: int, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
    return (shift + scale * torch.randn(*shape, dtype=D)).requires_grad_()


@pytest.mark.parametrize(("repeats", "spatial"), [(1, ()), (2, ()), (3, (3, 2))])
def test_block_noise_input_matches_autograd_of_the_gather(repeats, spatial):
    torch.manual_seed(0)
    k, f, n = 4, 5, 3
    rows = repeats * k * n
    x, mu, rho = _leaf(rows, f, *spatial), _leaf(k, f, shift=1.0), _leaf(k, f, scale=0.5)
    eps = torch.randn(rows, f, dtype=D)
    comp = (torch.arange(k * n) // n).repeat(repeats)  # row i of each copy: component i // n
    z = mu[comp] + F.softplus(rho)[comp] * eps
    expected = x * z.view(*z.shape, *([1] * len(spatial)))
    out = block_noise_input(x, mu, rho, eps, repeats)
    torch.testing.assert_close(out, expected)
    g = torch.randn_like(out)
    want = torch.autograd.grad(expected, (x, mu, rho), g)
    got = torch.autograd.grad(out, (x, mu, rho), g)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)
    assert torch.autograd.gradcheck(
        lambda a, b, c: block_noise_input(a, b, c, eps, repeats), (x, mu, rho)
    )


def test_block_noise_input_without_input_gradient():
    k, f = 2, 3
    mu, rho = _leaf(k, f), _leaf(k, f)
    x = torch.randn(4, f, dtype=D)
    out = block_noise_input(x, mu, rho, torch.randn(4, f, dtype=D), 1)
    gm, gr = torch.autograd.grad(out.sum(), (mu, rho))
    assert gm.shape == (k, f) and gr.shape == (k, f)


def test_block_noise_input_rejects_uneven_rows():
    with pytest.raises(ValueError, match="equal blocks"):
        block_noise_input(torch.ones(6, 2), torch.ones(4, 2), torch.ones(4, 2), torch.ones(6, 2), 1)


def test_mixture_mean_kl_sums_the_layers_kl_and_their_gradients():
    torch.manual_seed(1)
    k, s = 3, 0.6
    pairs = [(_leaf(k, w, scale=0.3, shift=1.0), _leaf(k, w, scale=0.4)) for w in (2, 5, 4)]

    def reference() -> torch.Tensor:
        total = torch.zeros((), dtype=D)
        for mu, rho in pairs:
            # q̂: the law of (1/K) Σ_k z_k, z_k ~ N(μ_k, σ_k²) independent
            std = (F.softplus(rho).pow(2).sum(0) / k**2).sqrt()
            q_hat = torch.distributions.Normal(mu.mean(0), std)
            prior = torch.distributions.Normal(torch.ones_like(std), s * torch.ones_like(std))
            total = total + torch.distributions.kl_divergence(q_hat, prior).sum()
        return total

    leaves = [t for pair in pairs for t in pair]
    want, got = reference(), mixture_mean_kl(pairs, s)
    torch.testing.assert_close(got, want)
    for a, b in zip(
        torch.autograd.grad(got, leaves), torch.autograd.grad(want, leaves), strict=True
    ):
        torch.testing.assert_close(a, b)
    assert torch.autograd.gradcheck(
        lambda *ts: mixture_mean_kl(list(zip(ts[0::2], ts[1::2], strict=True)), s), tuple(leaves)
    )


def test_mixture_mean_kl_checks_its_layers():
    with pytest.raises(ValueError, match="at least one"):
        mixture_mean_kl([], 1.0)
    with pytest.raises(ValueError, match="same number of components"):
        mixture_mean_kl(
            [(torch.ones(2, 3), torch.ones(2, 3)), (torch.ones(3, 3), torch.ones(3, 3))], 1.0
        )
