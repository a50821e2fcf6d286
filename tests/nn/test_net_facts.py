"""The per-network facts a prediction reads (modules, stochastic layers, prefix, device and
dtype) are cached across calls and found again whenever the network's modules change."""

from __future__ import annotations

import torch
from torch import nn

from bayesify import MCDropout
from bayesify.nn.dropout import MCDropout as DropoutLayer
from bayesify.nn.folding import deterministic_prefix
from bayesify.nn.laplace_posterior import KronBlock
from bayesify.nn.net_facts import NetFacts, prefix_of
from bayesify.nn.stochastic import stochastic_modules


def _check(cache: NetFacts, net: nn.Module) -> None:
    """The cached facts equal what a fresh walk of ``net`` finds."""
    facts = cache.of(net)
    assert list(facts.modules) == list(net.modules())
    assert list(facts.stochastic) == stochastic_modules(net)
    assert prefix_of(net, facts) == deterministic_prefix(net)
    first = next(net.parameters(), None)
    assert cache.first_param is first
    if first is not None:
        assert (cache.device, cache.dtype) == (first.device, first.dtype)


def test_facts_follow_every_change_of_the_network() -> None:
    net = nn.Sequential(nn.Linear(3, 4), nn.Sequential(nn.ReLU(), nn.Linear(4, 4)), nn.Linear(4, 2))
    cache = NetFacts()
    _check(cache, net)
    same = cache.of(net)
    assert cache.of(net) is same  # nothing changed: nothing rebuilt
    net[1][0] = DropoutLayer(0.5)  # a nested layer swapped
    _check(cache, net)
    assert cache.of(net).prefix == 1
    net.append(DropoutLayer(0.1))
    _check(cache, net)
    del net[1]
    _check(cache, net)
    handle = net.register_forward_hook(lambda *_: None)
    _check(cache, net)  # hooks on the Sequential: no prefix
    handle.remove()
    net.double()
    _check(cache, net)
    net[0].weight = nn.Parameter(torch.zeros(4, 3, dtype=torch.float16))  # a parameter replaced
    _check(cache, net)
    _check(NetFacts(), nn.Sequential(nn.ReLU()))  # no parameters


def test_a_method_sees_the_network_changed_between_calls() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3))
    m = MCDropout(net, p=0.5, task="classification")
    x = torch.randn(4, 5)
    spread = m.predict(x, 8, seed=0).samples.std(0).max()
    assert spread > 0
    for i, layer in enumerate(m.net):  # dropout switched off by swapping its layers out
        if isinstance(layer, DropoutLayer):
            m.net[i] = nn.Identity()
    assert m.predict(x, 8, seed=0).samples.std(0).max() == 0
    m.net.double()  # inputs are now cast to float64, the network's new dtype
    assert m.sample(x, 3, seed=0).dtype == torch.float64


def test_kfac_output_noise_in_float32_matches_float64() -> None:
    g = torch.Generator().manual_seed(0)
    block = KronBlock(6, 20, bias=True)
    a, b = torch.randn(20, 20, generator=g), torch.randn(6, 6, generator=g)
    block.set_curvature(b @ b.T, a @ a.T / 20)
    phi, z = torch.randn(7, 20, generator=g), torch.randn(3, 7, 6, generator=g)
    for delta in (1.0, 0.01):  # changing δ in place is seen by the cached factors
        block.prior_precision.fill_(delta)
        ref = (z.double() * block._rotated_variance(phi).sqrt()) @ block.q_out.T
        assert block.output_noise(phi.double(), z).dtype == torch.float64
        torch.testing.assert_close(block.output_noise(phi.double(), z), ref)
        fast = block.output_noise(phi, z)
        assert fast.dtype == torch.float32
        torch.testing.assert_close(fast.double(), ref, rtol=1e-5, atol=1e-6)


def test_bbb_sigmas_kept_across_calls_follow_the_parameters() -> None:
    """σ = softplus(ρ) is kept between predictions and made again when ρ changes."""
    from bayesify import BayesByBackprop

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 3, 3), nn.ReLU(), nn.Flatten(), nn.Linear(48, 3))
    m = BayesByBackprop(net, task="classification")
    x = torch.randn(2, 1, 6, 6)
    m.sample(x, 4, seed=0)  # σ kept from this call
    with torch.no_grad():
        for layer in m.net.modules():
            if hasattr(layer, "weight_rho"):
                layer.weight_rho.add_(1.0)  # in place: the same tensors, a new version
    fresh = BayesByBackprop(net, task="classification")
    fresh.net.load_state_dict(m.net.state_dict())
    torch.testing.assert_close(m.sample(x, 4, seed=0), fresh.sample(x, 4, seed=0))
    m.net.double()  # .to() replaces the data of the same parameters
    fresh.net.double()
    out = m.sample(x, 4, seed=0)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, fresh.sample(x, 4, seed=0))
