"""Teye et al.'s normalised scores of MC predictives against the constant baseline."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as st
import torch

from bayesify import Predictive
from bayesify.bench.scores import NoiseFit, regression_scores
from bayesify.posthoc.noise import fit_noise_variance


def _data(seed=0, n=400, t=30):
    g = torch.Generator().manual_seed(seed)
    mean = torch.randn(n, generator=g, dtype=torch.float64)
    spread = 0.2 + torch.rand(n, generator=g, dtype=torch.float64)  # input-dependent
    samples = mean + spread * torch.randn(t, n, generator=g, dtype=torch.float64)
    y = mean + spread * 1.5 * torch.randn(n, generator=g, dtype=torch.float64)
    return Predictive.regression(samples), y


def test_baseline_scores_zero_and_informative_uncertainty_scores_positive():
    pred, y = _data()
    fit = NoiseFit.fit(pred, y)
    scores = regression_scores(pred, y, fit)
    assert scores["CU"]["pll_norm"] == pytest.approx(0.0, abs=1e-9)
    assert scores["CU"]["crps_norm"] == pytest.approx(0.0, abs=1e-9)
    assert scores["MC"]["pll_norm"] > 5 and scores["MC"]["crps_norm"] > 5
    assert scores["MC"]["rmse"] == pytest.approx(float(((pred.mean - y) ** 2).mean().sqrt()))


def test_units_scale_rmse_and_shift_pll():
    pred, y = _data(1)
    fit = NoiseFit.fit(pred, y)
    a = regression_scores(pred, y, fit)
    b = regression_scores(pred, 10 + 3 * y, fit, loc=10.0, scale=3.0)
    assert b["MC"]["rmse"] == pytest.approx(3 * a["MC"]["rmse"])
    assert b["MC"]["pll"] == pytest.approx(a["MC"]["pll"] - np.log(3.0))
    assert b["MC"]["crps_norm"] == pytest.approx(a["MC"]["crps_norm"])


def test_noise_fit_maximises_validation_pll_against_a_grid():
    pred, y = _data(2)
    best = fit_noise_variance(pred.samples, y, "pll")
    s, yy = pred.samples.numpy(), y.numpy()

    def pll(v):
        return np.log(st.norm.pdf(yy[None], s, np.sqrt(v)).mean(0)).mean()

    grid = np.exp(np.linspace(np.log(best) - 2, np.log(best) + 2, 81))
    assert pll(best) >= max(pll(v) for v in grid) - 1e-6
    with pytest.raises(ValueError, match="unknown objective 'mse'; valid: crps, pll"):
        fit_noise_variance(pred.samples, y, "mse")
