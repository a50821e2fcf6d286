"""A Laplace classification bundle names its link, so what it predicts cannot change with a later
default; a bundle that does not (saved when the default was probit) says in one line what it
now does."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from torch import nn

import bayesify
from bayesify.methods.core.spread import BayesifyWarning
from bayesify.options import Link


def _classifier(link: str | None = None) -> bayesify.Laplace:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 3))
    x, y = torch.randn(90, 3), torch.randint(0, 3, (90,))
    options = {} if link is None else {"link": link}
    return bayesify.Laplace(net, task="classification", **options).fit((x, y), epochs=2)


def test_a_saved_classifier_names_the_default_link(tmp_path):
    _classifier().save(tmp_path / "b")
    assert json.loads((tmp_path / "b" / "config.json").read_text())["config"]["link"] == "mc"


@pytest.mark.parametrize("link", ["mc", "probit"])
def test_the_saved_link_is_the_loaded_link_and_loads_without_a_warning(tmp_path, link):
    method = _classifier(link)
    method.save(tmp_path / "b")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = bayesify.load(tmp_path / "b")
    assert loaded.config.link is Link(link)
    x = torch.randn(5, 3)
    same = loaded.sample(x, 8, seed=1), method.sample(x, 8, seed=1)
    torch.testing.assert_close(*same)


def test_a_bundle_without_a_link_warns_in_one_line_and_draws_logits(tmp_path):
    _classifier().save(tmp_path / "b")
    config = tmp_path / "b" / "config.json"
    saved = json.loads(config.read_text())
    saved["config"]["link"] = None  # as bundles were written before the link was named
    config.write_text(json.dumps(saved))
    with pytest.warns(BayesifyWarning) as caught:
        loaded = bayesify.load(tmp_path / "b")
    (message,) = [str(w.message) for w in caught]
    assert "\n" not in message and "link='probit'" in message
    assert loaded.config.link is Link.MC
    samples = loaded.sample(torch.randn(4, 3), 16, seed=0)  # [T, N, C] logits, drawn
    assert samples.std(0).max() > 0


def test_regression_has_no_link():
    net = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1))
    assert bayesify.Laplace(net).config.link is None
