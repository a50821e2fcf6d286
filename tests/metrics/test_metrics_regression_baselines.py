"""Teye et al. baselines and regression calibration against brute force and hand-worked values."""

import math

import numpy as np
import properscoring as ps
import pytest
import torch
from scipy import optimize, stats

from bayesify.metrics import (
    OPTIMAL_CRPS_FACTOR,
    crps_gaussian,
    fit_constant_std,
    gaussian_log_prob,
    interval_coverage,
    miscalibration_area,
    normalized_crps,
    normalized_pll,
    optimal_crps,
    optimal_pll,
    regression_calibration_curve,
)


def _data(seed: int = 0, n: int = 60):
    rng = np.random.default_rng(seed)
    mean = rng.normal(size=n)
    y = mean + rng.standard_t(df=3, size=n) * 0.7  # heavy-ish tails: not a Gaussian fit
    return mean, y


def test_fit_constant_std_pll_matches_grid():
    mean, y = _data(1)
    sigma = fit_constant_std(mean, y, "pll")
    grid = np.exp(np.linspace(-4, 3, 20001))
    values = -stats.norm.logpdf(y[None, :], mean[None, :], grid[:, None]).mean(1)  # [G]
    best_s, best_v = grid[values.argmin()], values.min()
    assert sigma == pytest.approx(best_s, rel=1e-3)
    assert -stats.norm.logpdf(y, mean, sigma).mean() <= best_v + 1e-12


def test_fit_constant_std_crps_matches_grid():
    mean, y = _data(2)
    sigma = fit_constant_std(torch.tensor(mean), torch.tensor(y), objective="crps")
    grid = np.exp(np.linspace(-4, 3, 20001))
    values = ps.crps_gaussian(y[None, :], mean[None, :], grid[:, None]).mean(1)  # [G]
    best_s, best_v = grid[values.argmin()], values.min()
    assert sigma == pytest.approx(best_s, rel=1e-3)
    assert ps.crps_gaussian(y, mean, sigma).mean() <= best_v + 1e-12
    # CRPS and PLL optima differ for non-Gaussian residuals: the two fits are not interchangeable
    assert abs(sigma - fit_constant_std(mean, y, "pll")) > 1e-3


def test_fit_constant_std_crps_with_many_exact_zeros_goes_to_floor():
    mean, y = np.zeros(5), np.array([0.0, 0.0, 0.0, 0.0, 1.0])
    sigma = fit_constant_std(mean, y, "crps")
    # 4 (sqrt2 - 1) > 1: the slope is positive everywhere, so the optimum is sigma -> 0
    grid = np.exp(np.linspace(-12, 3, 3001))
    best_v = ps.crps_gaussian(y[None, :], mean[None, :], grid[:, None]).mean(1).min()
    assert sigma < 1e-6
    assert ps.crps_gaussian(y, mean, sigma).mean() <= best_v + 1e-12


def test_fit_constant_std_crps_with_few_zeros_is_interior():
    mean, y = np.zeros(4), np.array([0.0, 1.0, -2.0, 0.5])
    sigma = fit_constant_std(mean, y, "crps")
    ref = optimize.minimize_scalar(
        lambda ls: ps.crps_gaussian(y, mean, math.exp(ls)).mean(),
        bounds=(-10, 5),
        method="bounded",
        options={"xatol": 1e-10},
    )
    assert sigma == pytest.approx(math.exp(ref.x), rel=1e-5)


def test_optimal_crps_factor_by_numerical_minimisation():
    res = optimize.minimize_scalar(
        lambda ls: ps.crps_gaussian(1.0, 0.0, math.exp(ls)),
        bounds=(-5, 5),
        method="bounded",
        options={"xatol": 1e-12},
    )
    assert res.fun == pytest.approx(OPTIMAL_CRPS_FACTOR, rel=1e-9)
    assert math.exp(res.x) == pytest.approx(1 / math.sqrt(math.log(2)), rel=1e-5)


def _per_point_min(score, mean, y):
    out = []
    for m, t in zip(mean, y, strict=True):
        scale = abs(t - m)
        res = optimize.minimize_scalar(
            lambda ls, m=m, t=t: score(t, m, math.exp(ls)),
            bounds=(math.log(scale) - 8, math.log(scale) + 8),
            method="bounded",
            options={"xatol": 1e-10},
        )
        out.append(res.fun)
    return np.array(out)


def test_optimal_crps_matches_per_point_brute_force():
    mean, y = _data(3, n=12)
    ours = optimal_crps(mean, y, reduction="none").numpy()
    ref = _per_point_min(lambda t, m, s: ps.crps_gaussian(t, m, s), mean, y)
    np.testing.assert_allclose(ours, ref, rtol=1e-8)


def test_optimal_pll_matches_per_point_brute_force():
    mean, y = _data(4, n=12)
    ours = optimal_pll(mean, y, reduction="none").numpy()
    ref = -_per_point_min(lambda t, m, s: -stats.norm.logpdf(t, m, s), mean, y)
    np.testing.assert_allclose(ours, ref, rtol=1e-8)


def test_optimal_pll_floors_exact_predictions():
    value = optimal_pll([1.0], [1.0]).item()
    assert math.isfinite(value)
    assert value == pytest.approx(-0.5 * math.log(2 * math.pi * 1e-24) - 0.5)
    assert optimal_crps([1.0], [1.0]).item() == 0.0


def test_normalized_scores_end_points_and_hand_example():
    mean, y = _data(5)
    sigma_p, sigma_c = fit_constant_std(mean, y, "pll"), fit_constant_std(mean, y, "crps")
    pll_cu = gaussian_log_prob(mean, sigma_p**2, y, reduction="none")
    pll_opt = optimal_pll(mean, y, reduction="none")
    crps_cu = crps_gaussian(mean, sigma_c, y, reduction="none")
    crps_opt = optimal_crps(mean, y, reduction="none")
    assert normalized_pll(pll_cu, pll_cu, pll_opt) == pytest.approx(0.0, abs=1e-12)
    assert normalized_pll(pll_opt, pll_cu, pll_opt) == pytest.approx(100.0)
    assert normalized_crps(crps_cu, crps_cu, crps_opt) == pytest.approx(0.0, abs=1e-12)
    assert normalized_crps(crps_opt, crps_cu, crps_opt) == pytest.approx(100.0)
    # hand-worked: halfway between the baselines is 50 for both orientations
    assert normalized_pll(-1.0, -2.0, 0.0) == pytest.approx(50.0)
    assert normalized_crps(0.3, 0.5, 0.1) == pytest.approx(50.0)
    # worse than constant is negative; inputs are averaged before the ratio
    assert normalized_crps(torch.tensor([0.6, 0.8]), 0.5, 0.1) == pytest.approx(-50.0)
    # the constant-sigma model scored on other points than it was fitted on is not exactly 0
    pll_model = gaussian_log_prob(mean, (1.5 * sigma_p) ** 2, y, reduction="none")
    assert normalized_pll(pll_model, pll_cu, pll_opt) < 0


def _coverage_brute(mean, std, y, level):
    lo, hi = stats.norm.interval(level, loc=mean, scale=std)
    return np.mean((y >= lo) & (y <= hi))


def test_interval_coverage_hand_example_and_brute_force():
    errors = torch.tensor([0.5, 1.5, 2.5, 0.1, -1.9, -2.0])
    # 95% central interval of N(0, 1) is +-1.95996: inside = 1, 1, 0, 1, 1, 0
    assert interval_coverage(torch.zeros(6), 1.0, errors).item() == pytest.approx(4 / 6)
    # intervals are closed: a zero-width (level 0) interval still holds an exact prediction
    assert interval_coverage([0.0, 0.0], 1.0, [0.0, 1e-9], level=0.0).item() == 0.5
    ind = interval_coverage(torch.zeros(6), 1.0, errors, reduction="none")
    assert ind.tolist() == [1.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    rng = np.random.default_rng(6)
    mean, std, y = rng.normal(size=200), rng.uniform(0.5, 2, 200), rng.normal(size=200) * 1.3
    for level in (0.1, 0.5, 0.9, 0.99):
        ours = interval_coverage(mean, std, y, level).item()
        assert ours == pytest.approx(_coverage_brute(mean, std, y, level), abs=1e-12)


def test_calibration_curve_and_area():
    rng = np.random.default_rng(7)
    n = 4000
    mean, std = rng.normal(size=n), rng.uniform(0.5, 2.0, n)
    y = mean + std * rng.normal(size=n)
    curve = regression_calibration_curve(mean, std, y, levels=[0.9, 0.1, 0.5])
    assert curve.expected.dtype == torch.float64
    np.testing.assert_allclose(curve.expected.numpy(), [0.1, 0.5, 0.9], rtol=1e-15)
    ref = [_coverage_brute(mean, std, y, lv) for lv in (0.1, 0.5, 0.9)]
    np.testing.assert_allclose(curve.observed.numpy(), ref, atol=1e-12)
    full = regression_calibration_curve(mean, std, y)
    assert full.expected.shape == (101,) and full.observed[-1] == 1.0
    calibrated = miscalibration_area(mean, std, y).item()
    overconfident = miscalibration_area(mean, std / 3, y).item()
    assert calibrated < 0.02
    # brute force of the area: trapezoid of |observed - expected| over 101 levels
    levels = np.linspace(0, 1, 101)
    gaps = np.abs([_coverage_brute(mean, std / 3, y, lv) for lv in levels] - levels)
    assert overconfident == pytest.approx(np.trapezoid(gaps, levels), abs=1e-12)
    assert overconfident > 0.2
