"""Bundles: safetensors + JSON, never pickle; clear errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import bayesify
from bayesify.io import BundleError, read_bundle, write_bundle


def test_write_read_round_trip(tmp_path):
    tensors = {"a": torch.arange(6.0).view(2, 3), "b": torch.tensor([1, 2])}
    write_bundle(tmp_path / "b", tensors, {"method": "x"})
    back, cfg = read_bundle(tmp_path / "b")
    assert cfg["method"] == "x" and cfg["format"] == 1
    for k, v in tensors.items():
        torch.testing.assert_close(back[k], v)


def test_pickle_files_are_refused(tmp_path):
    torch.save({"w": torch.zeros(1)}, tmp_path / "model.pt")
    with pytest.raises(BundleError, match="refuses to unpickle"):
        bayesify.load(tmp_path / "model.pt")
    folder = tmp_path / "old"
    folder.mkdir()
    torch.save({"w": torch.zeros(1)}, folder / "weights.pt")
    with pytest.raises(BundleError, match="never unpickles"):
        bayesify.load(folder)
    with pytest.raises(BundleError, match="not a .pt file"):
        write_bundle(tmp_path / "x.pt", {}, {})


def test_missing_and_broken_bundles(tmp_path):
    with pytest.raises(BundleError, match="no bundle folder"):
        bayesify.load(tmp_path / "nope")
    write_bundle(tmp_path / "b", {"a": torch.zeros(1)}, {"method": "mcbn"})
    (tmp_path / "b" / "config.json").write_text("{not json")
    with pytest.raises(BundleError, match="not valid JSON"):
        bayesify.load(tmp_path / "b")


def test_truncated_weights_are_a_bundle_error(tmp_path):
    write_bundle(tmp_path / "b", {"a": torch.zeros(100)}, {"method": "mcbn"})
    weights = tmp_path / "b" / "weights.safetensors"
    weights.write_bytes(weights.read_bytes()[:120])
    with pytest.raises(BundleError, match="damaged or truncated"):
        read_bundle(tmp_path / "b")


def test_custom_network_needs_net_argument(tmp_path):
    class Mine(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(
                nn.Linear(3, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1)
            )

        def forward(self, x):
            return self.body(x)

    x, y = torch.randn(64, 3), torch.randn(64)
    method = bayesify.MCBN.from_pretrained(Mine(), (x, y), batch_size=16, bank_size=4)
    method.save(tmp_path / "mine")
    with pytest.raises(BundleError, match="net="):
        bayesify.load(tmp_path / "mine")
    loaded = bayesify.load(tmp_path / "mine", net=Mine())
    torch.testing.assert_close(
        loaded.predict(x[:5], samples=4, seed=0).samples,
        method.predict(x[:5], samples=4, seed=0).samples,
    )
    with pytest.raises(ValueError, match="unknown method 'nope'; valid: .*mcbn"):
        bayesify.get_method("nope")
