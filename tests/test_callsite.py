"""bayesify's warnings name the caller's line, however deep in the package they are raised."""

from __future__ import annotations

import warnings

import torch

import bayesify
from bayesify.callsite import user_stacklevel
from bayesify.methods.core.spread import NegligibleSpreadWarning
from bayesify.models import mlp


def _caught(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return caught


def test_the_stacklevel_of_a_call_from_outside_is_the_caller():
    assert user_stacklevel() == 1  # this test's frame is outside the package
    caught = _caught(lambda: warnings.warn("here", UserWarning, stacklevel=user_stacklevel()))
    assert caught[0].filename == __file__


def test_a_negligible_spread_warning_names_the_users_predict_line():
    """BatchEnsemble's predict passes through the members' override and the base predict
    before the check warns; the warning still names this file."""
    torch.manual_seed(0)
    x, y = torch.randn(40, 3), torch.randn(40)
    method = bayesify.BatchEnsemble(mlp(3, 1, (8,), norm=None), init_std=1e-6)
    method.fit_noise((x, y))  # members nearly equal: a share far below 1%
    caught = _caught(lambda: method.predict(x, samples=4, seed=0))
    spread = [w for w in caught if issubclass(w.category, NegligibleSpreadWarning)]
    assert len(spread) == 1 and spread[0].filename == __file__


def test_the_unfitted_noise_warning_names_the_users_line():
    method = bayesify.MCDropout(mlp(3, 1, (8,), norm=None, dropout=0.1))
    caught = _caught(lambda: method.predict(torch.randn(5, 3), samples=2, seed=0))
    noise = [w for w in caught if "never fitted" in str(w.message)]
    assert len(noise) == 1 and noise[0].filename == __file__
