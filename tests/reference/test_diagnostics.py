"""Rank-normalised R-hat and bulk ESS against closed forms: independent draws (ESS = every
draw), an AR(1) chain (ESS = n (1 − ρ) / (1 + ρ)) and chains stuck apart (R-hat far above 1)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("numpyro")

from bayesify.reference import predictive_diagnostics  # noqa: E402
from bayesify.reference.diagnostics import bulk_diagnostics  # noqa: E402


def _ar1(rng: np.random.Generator, chains: int, n: int, rho: float, m: int) -> np.ndarray:
    x = np.empty((chains, n, m))
    x[:, 0] = rng.standard_normal((chains, m))
    for t in range(1, n):
        x[:, t] = rho * x[:, t - 1] + np.sqrt(1 - rho**2) * rng.standard_normal((chains, m))
    return x


def test_independent_draws_have_bulk_ess_near_their_count_and_rhat_near_one():
    rng = np.random.default_rng(0)
    v = np.exp(rng.standard_normal((4, 500, 20)))  # skewed: ranks make it normal again
    rhat, ess = bulk_diagnostics(v)
    assert np.all(np.abs(rhat - 1) < 0.01)
    assert 0.85 * 2000 < np.median(ess) < 1.15 * 2000


def test_an_ar1_chain_has_the_closed_form_ess():
    rho = 0.6
    _, ess = bulk_diagnostics(_ar1(np.random.default_rng(1), 4, 2000, rho, 30))
    want = 4 * 2000 * (1 - rho) / (1 + rho)
    assert 0.85 * want < np.median(ess) < 1.15 * want


def test_chains_stuck_apart_fail_the_strict_bar():
    rng = np.random.default_rng(2)
    v = rng.standard_normal((4, 300, 5)) + np.array([0, 0, 0, 1.0])[:, None, None]
    out = predictive_diagnostics(torch.from_numpy(v))
    assert out["rhat_rank_max"] > 1.05 and out["rhat_max"] > 1.05
    ok = predictive_diagnostics(torch.from_numpy(rng.standard_normal((4, 300, 5))))
    assert ok["rhat_rank_max"] < 1.01 and ok["ess_bulk_min"] > 400
