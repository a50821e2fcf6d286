"""Bundles of the user's own networks open without their Python session."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
import torch
from torch import nn

import bayesify
from bayesify.io import BundleError
from bayesify.models import architecture_spec, build_model, net_from_reference


def _cnn() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1, bias=False),
        nn.BatchNorm2d(4),
        nn.LeakyReLU(0.2),
        nn.MaxPool2d(2),
        nn.Dropout2d(0.1),
        nn.Sequential(nn.Conv2d(4, 6, kernel_size=(3, 1), stride=(1, 1)), nn.GELU("tanh")),
        nn.AdaptiveAvgPool2d((2, 2)),
        nn.Flatten(),
        nn.LayerNorm(24),
        nn.Linear(24, 3),
    )


def test_sequential_spec_is_json_and_rebuilds_the_same_network():
    torch.manual_seed(0)
    net = _cnn().eval()
    spec = architecture_spec(net)
    assert spec["factory"] == "sequential"
    again = build_model(json.loads(json.dumps(spec))).eval()
    assert str(again) == str(net)
    again.load_state_dict(net.state_dict())
    x = torch.randn(5, 1, 8, 8)
    torch.testing.assert_close(again(x), net(x))
    assert build_model(spec).bayesify_spec == spec  # saved again, it records the same spec


def test_non_standard_layers_have_no_spec():
    class Twice(nn.Module):
        def forward(self, x):
            return 2 * x

    assert architecture_spec(nn.Sequential(nn.Linear(2, 2), Twice())) is None
    assert architecture_spec(Twice()) is None


@pytest.mark.parametrize(
    "method, options",
    [
        ("mcbn", {}),
        ("mc-dropout", {}),
        ("bbb", {}),
        ("ibnn", {}),
        ("stochastic-norm", {}),
        ("ensemble", {"members": 2}),
    ],
)
def test_a_users_sequential_bundle_loads_without_net(tmp_path, method, options):
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Linear(3, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 1)
    )
    x, y = torch.randn(64, 3), torch.randn(64)
    m = bayesify.get_method(method)(net, **options)
    m.fit((x, y), val=(x, y), epochs=1, batch_size=16, progress=False)
    loaded = bayesify.load(m.save(tmp_path / method))
    torch.testing.assert_close(
        loaded.predict(x[:6], samples=5, seed=0).samples,
        m.predict(x[:6], samples=5, seed=0).samples,
    )


def test_custom_network_needs_net_and_loads_from_a_factory(tmp_path, monkeypatch):
    (tmp_path / "usernets.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn

            class Custom(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.a, self.b = nn.Linear(3, 8), nn.Linear(8, 1)
                    self.drop = nn.Dropout(0.2)

                def forward(self, x):
                    return self.b(self.drop(torch.relu(self.a(x))))

            def make():
                return Custom()
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    net = net_from_reference("usernets:make")
    x, y = torch.randn(32, 3), torch.randn(32)
    m = bayesify.MCDropout(net).fit((x, y), val=(x, y), epochs=1, progress=False)
    path = m.save(tmp_path / "custom")
    with pytest.raises(BundleError, match=r"holds usernets\.Custom, .*--net package\.module:fac"):
        bayesify.load(path)
    loaded = bayesify.load(path, net="usernets:make")
    torch.testing.assert_close(
        loaded.predict(x[:4], samples=3, seed=0).samples,
        m.predict(x[:4], samples=3, seed=0).samples,
    )
    for ref, msg in [
        ("usernets", "takes 'package.module:factory'"),
        ("nosuchmodule_xyz:make", "cannot import 'nosuchmodule_xyz'"),
        ("usernets:nope", "has no 'nope'"),
        ("usernets:torch", "is not callable"),
    ]:
        with pytest.raises(ValueError, match=msg):
            net_from_reference(ref)
    sys.modules.pop("usernets", None)
