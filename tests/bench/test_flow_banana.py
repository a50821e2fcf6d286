"""The flow posterior's evidence on a small version: on the banana-shaped posterior of
y = (w1 + w2²)·x + ε, a flow fitted by the ELBO is closer to the exact (grid) posterior than the
mean-field Gaussian fitted by the same code, by 2-Wasserstein distance and by KL(q ‖ p)."""

from __future__ import annotations

import pytest
import torch

from bayesify.bench.posterior.flow_banana import (
    FlowBananaOptions,
    exact_draws,
    make_problem,
    run_problem,
    wasserstein2,
)

pytest.importorskip("zuko")


def test_wasserstein2_of_shifted_samples_is_the_shift():
    a = torch.randn(200, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert wasserstein2(a, a + torch.tensor([3.0, 4.0], dtype=torch.float64)) == pytest.approx(5.0)
    assert wasserstein2(a, a.flip(0)) == pytest.approx(0.0, abs=1e-6)


def test_exact_draws_follow_the_grid_posterior():
    """The grid's draws have the mean and spread of the grid density (a unimodal problem)."""
    problem = make_problem("banana", 20, 0.5, 0)
    w, lp, axes, _ = problem.grid(200)
    p = torch.softmax(lp, 0)
    mean = (p[:, None] * w).sum(0)
    draws = exact_draws(w, lp, axes, 20000, 1)
    torch.testing.assert_close(draws.mean(0), mean, atol=0.03, rtol=0)


def test_a_flow_beats_mean_field_on_the_banana():
    opts = FlowBananaOptions(kinds=("mean-field", "realnvp"), steps=600, samples=16, lr=2e-2,
                             draws=400, grid=150)  # fmt: skip
    _, grid, fits = run_problem("banana", opts)
    by = {f.kind: f for f in fits}
    assert by["realnvp"].w2 < by["mean-field"].w2, (by, grid["floor"])
    assert by["realnvp"].kl < 0.3 * by["mean-field"].kl
