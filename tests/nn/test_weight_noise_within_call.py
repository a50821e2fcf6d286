"""Bayes layers: the T samples of one ``sample`` call are independent posterior draws.

Within a single call with large T, the per-element variance over the samples of each data row
must equal the variance under independent weight draws ``w ~ N(μ, σ²)``, which is a closed form
for one layer: ``conv(x², σ_w²) + σ_b²`` (``x² σ_w²ᵀ + σ_b²`` for a linear layer). A layer that
shares one weight perturbation between the samples of a call (and varies only, say, random
signs) has a within-call variance that depends on that one draw and misses it by tens of
percent, however large T is.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bayesify.methods import BayesByBackprop
from bayesify.nn.bayes_layers import BayesConv2d

T = 20_000  # sampling error of one element's variance: sqrt(2 / T) = 1%


def _moments(layer: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and variance of the layer's output under independent weight draws (closed form)."""
    w_var, b_var = layer.weight_sigma.square(), layer.bias_sigma.square()
    if isinstance(layer, BayesConv2d):
        mean = layer._conv(x, layer.weight_mu, layer.bias_mu)
        var = layer._conv(x.square(), w_var) + b_var[:, None, None]
    else:
        mean = F.linear(x, layer.weight_mu, layer.bias_mu)
        var = F.linear(x.square(), w_var, b_var)
    return mean, var


def _check_one_call(net: nn.Module, x: torch.Tensor, seed: int) -> None:
    method = BayesByBackprop(net, task="classification", init_rho=-1.0)
    layer = method.layers[0]
    out = method.sample(x, T, seed=seed).double()  # one call: [T, N, ...]
    with torch.no_grad():
        mean, var = (m.double() for m in _moments(layer, x))
    rel = out.var(0) / var - 1.0
    worst = rel.abs().max().item()
    assert worst < 0.05, (
        f"within-call variance off by up to {worst:.1%} (median {rel.abs().median().item():.1%})"
    )
    z = (out.mean(0) - mean) / (var / T).sqrt()
    assert z.abs().max() < 5.0, f"within-call mean off by {z.abs().max():.1f} standard errors"


@pytest.mark.parametrize(
    ("c_in", "c_out", "kernel", "size"),
    [(6, 16, 5, 8), (1, 1, 1, 3)],
    ids=["6to16-5x5", "fan-in-1"],
)
def test_conv_samples_of_one_call_have_the_variance_of_independent_weights(
    c_in: int, c_out: int, kernel: int, size: int
) -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(c_in, c_out, kernel))
    x = torch.randn(2, c_in, size, size)
    _check_one_call(net, x, seed=1)


@pytest.mark.parametrize(("d_in", "d_out"), [(6, 16), (1, 1)], ids=["6to16", "fan-in-1"])
def test_linear_samples_of_one_call_have_the_variance_of_independent_weights(
    d_in: int, d_out: int
) -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(d_in, d_out))
    x = torch.randn(3, d_in)
    _check_one_call(net, x, seed=2)


def test_conv_closed_form_matches_a_loop_over_sampled_weights() -> None:
    """The reference itself: the closed form equals the moments of plain convolutions with
    independently sampled weight tensors."""
    torch.manual_seed(3)
    layer = BayesConv2d(6, 16, 5, init_rho=-1.0)
    x = torch.randn(1, 6, 8, 8)
    with torch.no_grad():
        mean, var = _moments(layer, x)
        outs = []
        for _ in range(T // 1000):
            w = layer.weight_mu + layer.weight_sigma * torch.randn(1000, *layer.weight_mu.shape)
            b = layer.bias_mu + layer.bias_sigma * torch.randn(1000, 16)
            o = F.conv2d(x, w.reshape(-1, 6, 5, 5))  # [1, 1000*16, 4, 4]
            outs.append(o.view(1000, 16, 4, 4) + b[..., None, None])
        direct = torch.cat(outs).double()
    assert (direct.var(0) / var[0] - 1).abs().max() < 0.05
    assert ((direct.mean(0) - mean[0]) / (var[0] / T).sqrt()).abs().max() < 5.0


def test_conv_group_weights_are_independent_between_groups_and_shared_by_chunks() -> None:
    """Flipout's ε is drawn per sample group from the group's key: a chunked call (rows, and
    ranges of groups run alone) gives exactly the samples of one pass."""
    torch.manual_seed(4)
    net = nn.Sequential(nn.Conv2d(3, 4, 3))
    method = BayesByBackprop(net, task="classification", init_rho=-1.0)
    x = torch.randn(5, 3, 6, 6)
    whole = method.sample(x, 64, seed=7, max_rows=None)
    chunked = method.sample(x, 64, seed=7, max_rows=20)  # ranges of 20 groups, one row each
    torch.testing.assert_close(chunked, whole)
    assert not torch.equal(whole[0], whole[1])
