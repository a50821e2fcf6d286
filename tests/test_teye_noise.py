"""Teye et al.'s τ / CUBN protocol: one CRPS-fitted τ in the authors' range, CUBN by CRPS."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.optimize as so
import scipy.stats as st
import torch

from bayesify import Predictive
from bayesify.bench.scores import NoiseFit, regression_scores
from bayesify.metrics import fit_constant_std
from bayesify.posthoc.noise import (
    TEYE_TAU_RANGE,
    fit_noise_variance,
    teye_tau_range,
    variance_bounds,
)


def _crps_gauss(mu, sd, y):
    """Closed-form Gaussian CRPS (Gneiting & Raftery), written with scipy.stats."""
    z = (y - mu) / sd
    return sd * (z * (2 * st.norm.cdf(z) - 1) + 2 * st.norm.pdf(z) - 1 / np.sqrt(np.pi))


def _mean_crps(samples: np.ndarray, y: np.ndarray, v: float) -> float:
    return float(_crps_gauss(samples.mean(0), np.sqrt(samples.var(0) + v), y).mean())


def _data(seed=0, n=300, t=40, spread=0.3, noise=0.8):
    g = torch.Generator().manual_seed(seed)
    mean = torch.randn(n, generator=g, dtype=torch.float64)
    width = spread * (0.5 + torch.rand(n, generator=g, dtype=torch.float64))
    samples = mean + width * torch.randn(t, n, generator=g, dtype=torch.float64)
    y = mean + noise * torch.randn(n, generator=g, dtype=torch.float64)
    return Predictive.regression(samples), y


def test_bounded_crps_tau_matches_scipy_on_the_same_objective():
    pred, y = _data()
    s, yy = pred.samples.numpy(), y.numpy()
    lo, hi = variance_bounds((0.01, 10.0))
    ours = fit_noise_variance(pred.samples, y, "crps", bounds=(lo, hi))
    ref = so.minimize_scalar(
        lambda lv: _mean_crps(s, yy, math.exp(lv)),
        bounds=(math.log(lo), math.log(hi)),
        method="bounded",
        options={"xatol": 1e-9},
    )
    assert lo <= ours <= hi
    assert math.log(ours) == pytest.approx(ref.x, abs=1e-3)
    assert _mean_crps(s, yy, ours) <= ref.fun + 1e-9


def test_tau_range_clips_the_optimum_to_the_authors_bound():
    # samples already wider than the residuals: CRPS wants τ⁻¹ -> 0; the range stops it at 1/τ_max
    pred, y = _data(1, spread=2.0, noise=0.2)
    wide = fit_noise_variance(pred.samples, y, "crps")
    lo, hi = variance_bounds(TEYE_TAU_RANGE["yacht"])  # τ ∈ [0.01, 100]
    assert wide < lo
    assert fit_noise_variance(pred.samples, y, "crps", bounds=(lo, hi)) == pytest.approx(lo)


def test_constant_crps_variance_hand_case_and_bounds():
    # all |e| = 2: the CRPS-optimal σ is |e| / sqrt(ln 2) (derivation in regression_baselines)
    mean = torch.zeros(6, dtype=torch.float64)
    y = torch.tensor([2.0, -2.0, 2.0, -2.0, 2.0, -2.0], dtype=torch.float64)
    sigma = fit_constant_std(mean, y, "crps")
    assert sigma == pytest.approx(2.0 / math.sqrt(math.log(2.0)), rel=1e-6)
    assert fit_constant_std(mean, y, "crps", bounds=(0.01, 1.0)) == pytest.approx(1.0)
    assert fit_constant_std(mean, y, "crps", bounds=(100.0, 1000.0)) == pytest.approx(10.0)
    with pytest.raises(ValueError, match="bounds"):
        fit_constant_std(mean, y, "crps", bounds=(1.0, 0.5))


def test_teye_protocol_uses_one_tau_and_a_crps_fitted_cubn():
    pred, y = _data(2)
    fit = NoiseFit.fit(pred, y, protocol="teye", dataset="bostonHousing")
    assert fit.protocol == "teye"
    assert fit.noise_pll == fit.noise_crps
    assert fit.constant_pll == fit.constant_crps
    # CUBN's variance minimises the validation CRPS of N(mean, c) inside the τ range (scipy)
    m, yy = pred.mean.numpy(), y.numpy()
    lo, hi = variance_bounds(teye_tau_range("bostonHousing"))
    ref = so.minimize_scalar(
        lambda lv: float(_crps_gauss(m, math.exp(lv / 2), yy).mean()),
        bounds=(math.log(lo), math.log(hi)),
        method="bounded",
        options={"xatol": 1e-10},
    )
    assert math.log(fit.constant_crps) == pytest.approx(ref.x, abs=1e-4)
    # ours keeps a separate τ per metric and CUBN for PLL as σ² = MSE
    ours = NoiseFit.fit(pred, y, protocol="bayesify")
    assert ours.constant_pll == pytest.approx(float(((pred.mean - y) ** 2).mean()))
    assert ours.noise_pll != pytest.approx(ours.noise_crps, rel=1e-3)
    scores = regression_scores(pred, y, fit)
    assert scores["CU"]["crps_norm"] == pytest.approx(0.0, abs=1e-9)
    assert scores["CU"]["pll_norm"] == pytest.approx(0.0, abs=1e-9)


def test_ranges_are_in_original_units_and_scale_to_model_units():
    # yacht τ ∈ [0.01, 100] (original units); targets standardised by y_std = 15:
    # τ⁻¹ ∈ [0.01, 100] / 225 in model units
    lo, hi = variance_bounds(teye_tau_range("yacht"), 15.0)
    assert (lo, hi) == pytest.approx((0.01 / 225, 100 / 225))
    pred, y = _data(4, spread=2.0, noise=0.2)  # wants τ⁻¹ -> 0: stops at the scaled bound
    fit = NoiseFit.fit(pred, y, protocol="teye", dataset="yacht", y_scale=15.0)
    assert fit.noise_crps == pytest.approx(0.01 / 225)
    unscaled = NoiseFit.fit(pred, y, protocol="teye", dataset="yacht")
    assert unscaled.noise_crps == pytest.approx(0.01)
    with pytest.raises(ValueError, match="y_scale"):
        variance_bounds((0.01, 1.0), 0.0)


def test_ranges_and_errors():
    assert teye_tau_range("kin8nm") == (10.0, 1000.0)
    assert teye_tau_range("my-own-data") == (0.001, 1000.0)
    assert variance_bounds((0.01, 100.0)) == pytest.approx((0.01, 100.0))
    pred, y = _data(3)
    with pytest.raises(ValueError, match="unknown noise protocol"):
        NoiseFit.fit(pred, y, protocol="gal")
    with pytest.raises(ValueError, match="tau_range"):
        variance_bounds((0.0, 1.0))
