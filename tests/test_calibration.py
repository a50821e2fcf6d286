"""Temperature and variance scaling vs brute-force grids; calibration plots."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as st
import torch
from scipy.special import log_softmax

from bayesify.metrics import nll
from bayesify.plots.calibration import regression_calibration_plot, reliability_diagram
from bayesify.posthoc.recalibration import (
    apply_temperature,
    fit_temperature,
    fit_variance_scale,
    temperature_scale,
    variance_scale,
)
from bayesify.predictive import Predictive


def _overconfident(n=600, c=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, c, generator=g) * 3
    labels = torch.distributions.Categorical(logits=logits / 2.5).sample()  # truth is T = 2.5
    return logits, labels


def test_temperature_matches_a_brute_force_grid():
    logits, labels = _overconfident()
    t = fit_temperature(logits, labels)
    grid = np.linspace(0.5, 6, 2201)
    z = logits.double().numpy()[None] / grid[:, None, None]  # [G, N, C], scipy reference
    logp = log_softmax(z, axis=-1)[:, np.arange(len(labels)), labels.numpy()]
    losses = -logp.mean(-1)
    assert t == pytest.approx(grid[int(np.argmin(losses))], abs=5e-3)
    assert 1.5 < t < 4
    pred = Predictive.from_logits(logits.unsqueeze(0))
    t2, scaled = temperature_scale(pred, labels)
    assert t2 == pytest.approx(t, rel=1e-3)
    assert float(nll(scaled.mean, labels)) < float(nll(pred.mean, labels))
    torch.testing.assert_close(
        scaled.samples, apply_temperature(logits, t).samples, atol=1e-4, rtol=0
    )


def test_variance_scale_matches_a_brute_force_grid():
    g = torch.Generator().manual_seed(1)
    means = torch.randn(8, 300, generator=g) * 0.3 + torch.randn(300, generator=g)
    y = means.mean(0) + 2.0 * torch.randn(300, generator=g)  # far more spread than predicted
    pred = Predictive.regression(means, 0.5)
    s = fit_variance_scale(pred, y)
    grid = np.exp(np.linspace(np.log(0.5), np.log(30), 3001))
    m, yy = means.double().numpy(), y.double().numpy()
    centre = m.mean(0)
    scaled = centre + (m - centre)[None] * np.sqrt(grid)[:, None, None]  # [G, T, N]
    sd = np.sqrt(0.5 * grid)[:, None, None]
    dens = st.norm.pdf(yy[None, None], scaled, sd).mean(1)  # mixture density [G, N]
    losses = -np.log(dens).mean(-1)
    assert s == pytest.approx(grid[int(np.argmin(losses))], rel=5e-3)
    s2, scaled = variance_scale(pred, y)
    torch.testing.assert_close(scaled.mean, pred.mean)
    torch.testing.assert_close(scaled.variance, pred.variance * s2, rtol=1e-4, atol=1e-6)


def test_wrong_task_is_a_clear_error():
    with pytest.raises(ValueError, match="regression"):
        fit_variance_scale(Predictive.from_logits(torch.randn(1, 3, 2)), torch.zeros(3))
    with pytest.raises(ValueError, match="temperature"):
        apply_temperature(torch.randn(3, 2), 0.0)


def test_plots_return_figures_and_save_small_pngs(tmp_path):
    logits, labels = _overconfident(200)
    pred = Predictive.from_logits(logits.unsqueeze(0))
    fig = reliability_diagram(
        {"raw": pred, "scaled": apply_temperature(pred, 2.5)}, labels, path=tmp_path / "rel.png"
    )
    assert len(fig.axes) == 4 and "ECE" in fig.axes[0].get_title()
    assert 0 < (tmp_path / "rel.png").stat().st_size < 300_000
    reg = Predictive.regression(torch.randn(4, 50), 1.0)
    fig = regression_calibration_plot({"m": reg}, torch.randn(50), path=tmp_path / "reg.png")
    assert "area" in fig.axes[0].get_legend().get_texts()[0].get_text()


def test_many_reliability_panels_wrap_five_to_a_row():
    logits, labels = _overconfident(100)
    pred = Predictive.from_logits(logits.unsqueeze(0))
    fig = reliability_diagram({f"m{i}": pred for i in range(12)}, labels)
    assert len(fig.axes) == 2 * 3 * 5  # three rows of five panels, each over its histogram
    shown = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
    titles = [ax.get_title() for ax in shown if ax.get_title()]
    assert len(shown) == 2 * 12 and [t.split()[0] for t in titles] == [f"m{i}" for i in range(12)]
    width, height = fig.get_size_inches()
    assert width == pytest.approx(5 * 3.2) and height == pytest.approx(3 * 4.2)
