"""SampledLinear: each sample group gets its own drawn weights, in one batched product."""

from __future__ import annotations

import torch
from torch import nn

from bayesify.nn import SampledLinear, reference_loop, sample_last_linear, sampling
from bayesify.nn.folding import deterministic_prefix, repeat_samples


class Shifted(nn.Module):
    """A toy posterior: the layer's weights plus independent N(0, 0.1²) noise per group."""

    def __init__(self, layer: SampledLinear | nn.Linear) -> None:
        super().__init__()
        self.register_buffer("w", layer.weight.detach().clone())
        self.register_buffer("b", layer.bias.detach().clone())

    def draw(self, groups, generator):
        noise = torch.randn((groups, *self.w.shape), generator=generator)
        bias = torch.randn((groups, len(self.b)), generator=generator)
        return self.w + 0.1 * noise, self.b + 0.1 * bias


def _net():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    layer = sample_last_linear(net)
    layer.posterior = Shifted(layer)
    return net, layer


def test_each_group_uses_its_own_weights():
    net, layer = _net()
    x = torch.randn(5, 4)
    g = torch.Generator().manual_seed(1)
    w, b = Shifted(layer).draw(3, torch.Generator().manual_seed(1))
    with torch.no_grad(), sampling(net, 3, g):
        out = net(repeat_samples(x, 3)).reshape(3, 5, 3)
        h = net[:2](x)
    for t in range(3):
        torch.testing.assert_close(out[t], h @ w[t].T + b[t])


def test_one_pass_equals_loop_and_plain_outside_sampling():
    net, layer = _net()
    x = torch.randn(5, 4)
    with torch.no_grad():
        with sampling(net, 4, torch.Generator().manual_seed(2)):
            one = net(repeat_samples(x, 4)).reshape(4, 5, 3)
        loop = reference_loop(net, x, 4, torch.Generator().manual_seed(2))
        torch.testing.assert_close(one, loop)
        plain = nn.functional.linear(net[:2](x), layer.weight, layer.bias)
        torch.testing.assert_close(net(x), plain)
    assert deterministic_prefix(net) == 2  # the body runs once per row
    assert "posterior.w" in dict(layer.named_buffers())
