"""``eval_mode``: eval inside the block, every flag as it was after, and a network already in
eval mode not touched (no ``train()`` call: the server enters the block on every pass)."""

from __future__ import annotations

import pytest
from torch import nn

from bayesify.nn.modes import eval_mode


class CountingNet(nn.Sequential):
    calls = 0

    def train(self, mode: bool = True) -> CountingNet:
        CountingNet.calls += 1
        return super().train(mode)


def _net() -> CountingNet:
    return CountingNet(nn.Linear(2, 3), nn.BatchNorm1d(3), nn.Dropout(0.5), nn.Linear(3, 1))


def test_mixed_flags_are_eval_inside_and_restored_after():
    net = _net()
    net[1].eval()  # a mix: the caller's own choice, to be kept
    before = [m.training for m in net.modules()]
    with eval_mode(net):
        assert not any(m.training for m in net.modules())
    assert [m.training for m in net.modules()] == before == [True, True, False, True, True]


def test_flags_are_restored_when_the_block_raises():
    net = _net()
    with pytest.raises(RuntimeError), eval_mode(net):
        raise RuntimeError("inside")
    assert all(m.training for m in net.modules())


def test_a_network_in_eval_mode_is_not_touched():
    net = _net().eval()
    CountingNet.calls = 0
    with eval_mode(net):
        assert not any(m.training for m in net.modules())
    assert CountingNet.calls == 0
    assert not any(m.training for m in net.modules())
    net.train()
    CountingNet.calls = 0
    with eval_mode(net):
        pass
    assert CountingNet.calls == 1  # eval() itself: a network's own train() still runs
