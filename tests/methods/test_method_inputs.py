"""What every method does with inputs users get wrong or leave out (shared base class)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import bayesify
from bayesify.models import lenet, mlp


def _fitted(val: bool) -> bayesify.MCBN:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(96, 3, generator=g), torch.randn(96, generator=g)
    method = bayesify.MCBN(mlp(3, hidden=(8,)), bank_size=4)
    method.fit((x, y), val=(x, y) if val else None, epochs=1, batch_size=16, progress=False)
    return method


def test_float64_and_integer_inputs_are_cast_to_the_network_dtype():
    method = _fitted(val=True)
    x = np.random.default_rng(0).normal(size=(5, 3))  # numpy's float64
    as_float32 = method.sample(torch.from_numpy(x).float(), 4, seed=1)
    torch.testing.assert_close(method.sample(x, 4, seed=1), as_float32, rtol=0, atol=0)
    ints = torch.tensor([[1, 0, -2]])
    torch.testing.assert_close(
        method.sample(ints, 4, seed=1), method.sample(ints.float(), 4, seed=1)
    )


def test_unfitted_noise_variance_warns_until_fitted_and_survives_a_bundle(tmp_path):
    method = _fitted(val=False)
    x = torch.randn(4, 3)
    with pytest.warns(UserWarning, match="never fitted"):
        method.predict(x, samples=3)
    with pytest.warns(UserWarning, match="never fitted"):
        bayesify.load(method.save(tmp_path / "unfitted")).predict(x, samples=3)
    method.fit_noise((torch.randn(32, 3), torch.randn(32)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        method.predict(x, samples=3)
        bayesify.load(method.save(tmp_path / "fitted")).predict(x, samples=3)
        _fitted(val=True).predict(x, samples=3)


def test_regression_training_on_class_scores_names_the_task():
    x, y = torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,))
    with pytest.raises(ValueError, match="task='classification'"):
        bayesify.MCBN(lenet(norm="batch")).fit((x, y), epochs=1, batch_size=16, progress=False)


def test_unknown_task_lists_the_choices():
    with pytest.raises(ValueError, match="unknown task 'clasification'; valid: regression, class"):
        bayesify.MCBN(mlp(3), task="clasification")
    with pytest.raises(ValueError, match="unknown noise_objective .nll.; valid: crps, pll"):
        bayesify.MCBN(mlp(3), noise_objective="nll")
