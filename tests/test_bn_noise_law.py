"""The exact law of BN's multiplicative noise U = σ/S (biased S²) used by `bench bn-noise`."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.integrate as si
import scipy.stats as st

from bayesify.bench.toys.bn_noise import BNNoise, _slopes, exact_std_mult


@pytest.mark.parametrize("n", [5, 8, 16, 64])
def test_exact_std_matches_quadrature_of_the_inverse_chi_law(n):
    # U = √n / X, X ~ χ(n−1): moments by numerical integration against scipy's χ density
    chi = st.chi(n - 1)
    m1 = si.quad(lambda x: math.sqrt(n) / x * chi.pdf(x), 0, np.inf)[0]
    m2 = si.quad(lambda x: n / x**2 * chi.pdf(x), 0, np.inf)[0]
    assert exact_std_mult(n) == pytest.approx(math.sqrt(m2 - m1**2), rel=1e-6)


def test_exact_std_matches_simulated_biased_batch_variance():
    # independent draws: n Gaussian values, S² divided by n as batch norm does
    rng = np.random.default_rng(0)
    n = 8
    x = rng.normal(0.0, 2.0, size=(200_000, n))
    u = 2.0 / x.std(axis=1, ddof=0)
    assert u.std() == pytest.approx(exact_std_mult(n), rel=0.03)
    assert exact_std_mult(8) == pytest.approx(0.389, abs=5e-4)
    assert exact_std_mult(3) == math.inf


def test_exact_law_slope_over_k_8_to_256_is_steeper_than_minus_one():
    ks = (8, 16, 32, 64, 128, 256)
    rows = [BNNoise(0, k, 1, exact_std_mult(k), 1 / math.sqrt(k)) for k in ks]
    assert _slopes(rows) == _slopes(rows, model=True)
    slope_u, slope_v = _slopes(rows, model=True)[0]
    assert slope_u == pytest.approx(-1.22, abs=0.01)
    assert slope_v == pytest.approx(-1.0, abs=1e-9)
