"""MCDropout layer: a switch independent of train/eval, per-row masks, BN stays in eval."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from bayesify.nn import reference_loop, repeat_samples, sampling
from bayesify.nn.dropout import MCDropout, convert_dropout


def _bn_dropout_net() -> nn.Sequential:
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Linear(6, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 2)
    )
    net.train()
    for _ in range(5):  # non-trivial running statistics
        net(torch.randn(16, 6) * 3 + 1)
    return net.eval()


def test_outside_sampling_equals_the_plain_net_in_eval_and_train():
    net = _bn_dropout_net()
    plain = copy.deepcopy(net)
    convert_dropout(net)
    x = torch.randn(10, 6)
    torch.testing.assert_close(net.eval()(x), plain.eval()(x))
    torch.manual_seed(3)
    a = net.train()(x)
    torch.manual_seed(3)
    b = plain.train()(x)
    torch.testing.assert_close(a, b)


def test_sampling_keeps_batchnorm_in_eval_mode():
    net = _bn_dropout_net()
    convert_dropout(net)
    bn = net[1]
    before = (bn.running_mean.clone(), bn.num_batches_tracked.clone())
    x = torch.randn(8, 6)
    with torch.no_grad(), sampling(net, 4, torch.Generator().manual_seed(0)):
        out = net(repeat_samples(x, 4)).view(4, 8, 2)
    assert not bn.training and not net[3].training
    torch.testing.assert_close(bn.running_mean, before[0], rtol=0, atol=0)
    assert int(bn.num_batches_tracked) == int(before[1])
    assert (out[0] - out[1]).abs().max() > 1e-4  # eval mode, still stochastic
    # with p = 0 the sampled net is exactly the eval-mode net: BN used running statistics
    net[3].p = 0.0
    with torch.no_grad(), sampling(net, 3):
        zero = net(repeat_samples(x, 3)).view(3, 8, 2)
    torch.testing.assert_close(zero, net(x).expand(3, 8, 2).detach())


def test_mask_rate_and_scale():
    layer = MCDropout(0.25)
    x = torch.ones(4000, 50)
    with sampling(layer, 2, torch.Generator().manual_seed(1)):
        out = layer(x)
    dropped = (out == 0).double().mean().item()
    assert abs(dropped - 0.25) < 0.005
    torch.testing.assert_close(out[out != 0], torch.full_like(out[out != 0], 1 / 0.75))


def test_channelwise_drops_whole_channels():
    layer = MCDropout.from_dropout(nn.Dropout2d(0.5))
    x = torch.ones(6, 8, 3, 3)
    with sampling(layer, 2, torch.Generator().manual_seed(0)):
        out = layer(x)
    per_channel = out.flatten(2)
    assert (per_channel.amax(-1) == per_channel.amin(-1)).all()


def test_chunks_and_reference_loop_see_the_same_masks():
    net = _bn_dropout_net()
    convert_dropout(net)
    x = torch.randn(9, 6)
    with torch.no_grad():
        with sampling(net, 5, torch.Generator().manual_seed(2)):
            whole = net(repeat_samples(x, 5)).view(5, 9, 2)
        with sampling(net, 5, torch.Generator().manual_seed(2)):
            parts = [net(repeat_samples(c, 5)).view(5, -1, 2) for c in x.split(4)]
        loop = reference_loop(net, x, 5, torch.Generator().manual_seed(2))
    torch.testing.assert_close(whole, torch.cat(parts, 1))
    torch.testing.assert_close(whole, loop)


def test_no_dropout_is_a_clear_error():
    with pytest.raises(ValueError, match="dropout"):
        convert_dropout(nn.Sequential(nn.Linear(2, 2)))
    with pytest.raises(ValueError, match="probability"):
        MCDropout(1.0)
