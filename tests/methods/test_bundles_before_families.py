"""Bundles written before ``bayesify.methods`` was regrouped into family folders still load.

A bundle names its method by registry name (``config.json``'s ``"method"``), never by module
path, so moving modules must not matter; these bundles were saved by the code of commit a93f956
(one small regression network per method, one epoch) to keep that true.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import bayesify
from bayesify.methods import METHODS

SAVED = Path(__file__).parent / "data" / "saved_before_families"
NAMES = sorted(p.name for p in SAVED.iterdir() if p.is_dir())


def test_the_saved_bundles_cover_most_methods() -> None:
    assert len(NAMES) >= 10 and set(NAMES) <= set(METHODS)


@pytest.mark.parametrize("name", NAMES)
def test_a_bundle_saved_before_the_move_loads_and_predicts(name: str) -> None:
    method = bayesify.load(SAVED / name)
    assert type(method) is METHODS[name]
    stored = load_file(SAVED / name / "weights.safetensors")
    state = method.net.state_dict()
    assert stored.keys() == state.keys()
    for key, value in stored.items():
        assert torch.equal(state[key].cpu(), value), key
    x = torch.linspace(-1, 1, 12).reshape(4, 3)
    pred = method.predict(x, samples=4, seed=0)
    assert pred.mean.shape == (4,) and torch.isfinite(pred.mean).all()


def test_the_plain_network_predicts_what_it_predicted_before() -> None:
    # the pre-move code's means on the first rows of its training inputs (torch.manual_seed(0))
    torch.manual_seed(0)
    x = torch.randn(64, 3)
    before = json.loads((SAVED / "means.json").read_text())["deterministic"]
    got = bayesify.load(SAVED / "deterministic").predict(x[:4], samples=4, seed=0).mean
    torch.testing.assert_close(got, torch.tensor(before), rtol=1e-6, atol=1e-6)
