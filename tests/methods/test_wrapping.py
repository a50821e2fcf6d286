"""Wrapping works on a copy unless ``inplace=True``; prediction leaves the train/eval mode."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import bayesify
from bayesify.models import mlp
from bayesify.nn import MCBatchNorm


def test_default_copy_leaves_a_user_network_loadable():
    """The issue's case: after wrapping, the caller's state_dict still loads into a fresh net."""
    net = mlp(3, hidden=(8,), norm="batch").train()
    x, y = torch.randn(64, 3), torch.randn(64)
    method = bayesify.MCBN.from_pretrained(net, (x, y), batch_size=16, bank_size=4)
    method.fit((x, y), epochs=1, batch_size=16, progress=False)
    assert not any(isinstance(m, MCBatchNorm) for m in net.modules())
    assert net.training
    mlp(3, hidden=(8,), norm="batch").load_state_dict(net.state_dict())  # strict: same keys


def test_inplace_wraps_the_network_itself():
    net = mlp(3, hidden=(8,), norm="batch")
    method = bayesify.MCBN(net, inplace=True)
    assert method.net is net
    assert any(isinstance(m, MCBatchNorm) for m in net.modules())
    with pytest.raises(TypeError, match="inplace must be True or False"):
        bayesify.MCDropout(mlp(3, dropout=0.1), inplace="yes")


def test_mixed_modes_are_restored_module_by_module():
    net = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.2), nn.Linear(4, 1))
    method = bayesify.MCDropout(net)
    method.net.train()
    method.net[2].eval()
    modes = [m.training for m in method.net.modules()]
    method.fit_noise((torch.randn(16, 3), torch.randn(16)))
    method.predict(torch.randn(5, 3), samples=3, seed=0)
    assert [m.training for m in method.net.modules()] == modes
