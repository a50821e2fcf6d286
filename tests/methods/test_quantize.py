"""int8 dynamic quantisation: linear layers swapped, the same draws give nearly the same
predictive, unsupported methods refused."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bayesify.methods import BayesByBackprop, DeepEnsemble, MCDropout
from bayesify.methods.core.quantize import quantize_int8
from bayesify.models import mlp


def _data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 6, generator=g)
    return x, (x[:, 0] > 0).long()


@pytest.mark.parametrize("kind", ["mc-dropout", "ensemble"])
def test_int8_keeps_the_predictive_close(kind):
    torch.manual_seed(0)
    net = mlp(6, 2, (64, 64), norm=None, dropout=0.2)
    m = (MCDropout(net, task="classification") if kind == "mc-dropout"
         else DeepEnsemble(net, members=2, task="classification"))  # fmt: skip
    m.fit(_data(), epochs=3, batch_size=32, progress=False)
    x = _data()[0][:50]
    before = m.predict(x, 16, seed=1)
    quantize_int8(m)
    assert not any(type(mod) is nn.Linear for mod in m.net.modules())
    after = m.predict(x, 16, seed=1)
    diff = (after.mean - before.mean).abs().max()
    assert 0 < diff < 0.05  # quantised (not identical), same draws -> close


def test_int8_refuses_methods_with_random_weights():
    m = BayesByBackprop(mlp(6, 2, (8,), norm=None), task="classification")
    with pytest.raises(ValueError, match="supports mc-dropout, mcbn, ensemble"):
        quantize_int8(m)
