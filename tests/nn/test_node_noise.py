"""NodeNoise: KL eq. 22–24 vs torch.distributions, component t mod K (also when only a range of
groups runs), chunk invariance, replay in the loop."""

from __future__ import annotations

import torch
from torch import nn

from bayesify.nn import (
    NodeNoise,
    add_node_noise,
    noisy_training,
    reference_loop,
    sampling,
    select_groups,
)


def test_kl_matches_torch_distributions():
    layer = NodeNoise(
        5, components=3, mu_init_std=0.4, sigma_init=0.2, generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        layer.rho.add_(0.3 * torch.randn(3, 5))
    mu, sigma = layer.mu.detach(), layer.sigma.detach()
    # q̂: the law of (1/K) Σ_k z_k with independent z_k ~ N(μ_k, σ_k²)
    q_hat = torch.distributions.Normal(mu.mean(0), (sigma.pow(2).sum(0) / 9).sqrt())
    prior = torch.distributions.Normal(torch.ones(5), torch.full((5,), 0.7))
    expected = torch.distributions.kl_divergence(q_hat, prior).sum()
    torch.testing.assert_close(layer.kl(0.7), expected)


def test_mixture_mean_gaussian_is_the_law_of_the_average():
    layer = NodeNoise(2, components=4, mu_init_std=0.5, sigma_init=0.3)
    mu, sigma = layer.mu.detach(), layer.sigma.detach()
    z = mu + sigma * torch.randn(200000, 4, 2)  # [M, K, F] one draw per component
    avg = z.mean(1)
    mean, var = layer.mixture_mean_gaussian()
    torch.testing.assert_close(avg.mean(0), mean.detach(), atol=3e-3, rtol=0)
    torch.testing.assert_close(avg.var(0), var.detach(), rtol=0.02, atol=0)


def test_group_t_uses_component_t_mod_k():
    k = 3
    layer = NodeNoise(4, components=k, mu_init_std=1.0, sigma_init=1e-4)
    x = torch.ones(2, 4)
    with torch.no_grad(), sampling(layer, 7, torch.Generator().manual_seed(0)):
        z = layer(x.repeat(7, 1)).view(7, 2, 4)
    for t in range(7):
        torch.testing.assert_close(z[t], layer.mu[t % k].detach().expand(2, 4), atol=1e-3, rtol=0)
    with torch.no_grad(), sampling(layer, 7, torch.Generator().manual_seed(0)):
        select_groups(layer, 4, 7)  # global groups 4, 5, 6: components 1, 2, 0
        part = layer(x.repeat(3, 1)).view(3, 2, 4)
    torch.testing.assert_close(part, z[4:7], rtol=0, atol=0)


def test_per_row_noise_is_chunk_invariant_and_replays_in_the_loop():
    layer = NodeNoise(6, components=2, sigma_init=0.5)
    x = torch.randn(10, 6, 3, 3)  # conv input: z per channel, shared over space
    with torch.no_grad(), sampling(layer, 4, torch.Generator().manual_seed(1)):
        whole = layer(x.repeat(4, 1, 1, 1)).view(4, 10, 6, 3, 3)
    with torch.no_grad(), sampling(layer, 4, torch.Generator().manual_seed(1)):
        parts = [layer(c.repeat(4, 1, 1, 1)).view(4, len(c), 6, 3, 3) for c in x.split(3)]
    torch.testing.assert_close(whole, torch.cat(parts, 1), rtol=0, atol=0)
    with torch.no_grad():
        loop = reference_loop(layer, x, 4, torch.Generator().manual_seed(1))
    torch.testing.assert_close(whole, loop, rtol=0, atol=0)
    ratio = whole / x
    assert torch.allclose(ratio, ratio[..., :1, :1].expand_as(ratio), atol=1e-4)


def test_deterministic_outside_sampling_and_noisy_in_training():
    layer = NodeNoise(3, components=2, mu_init_std=0.3)
    x = torch.ones(4, 3)
    torch.testing.assert_close(layer(x), layer.mu.mean(0).expand(4, 3))
    with noisy_training(layer):
        a, b = layer(x), layer(x)
    assert (a - b).abs().max() > 0


def test_surgery_wraps_every_linear_and_conv():
    net = nn.Sequential(
        nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(8, 3), nn.ReLU(), nn.Linear(3, 1)
    )
    layers = add_node_noise(net, 2)
    assert [m.features for m in layers] == [1, 8, 3]
    assert net(torch.randn(5, 1, 4, 4)).shape == (5, 1)
