"""Risk–coverage on the UCI page: the curve read from a row's equal-count std bins equals the
RMSE of the kept points computed point by point, and its summaries behave as defined."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bayesify.bench.uci.gal_methods import uncertainty_error_bins
from bayesify.bench.uci.selective import (
    aurc,
    mean_relative_curve,
    risk_coverage,
    row_figures,
    selective_section,
)


def _row(seed: int, informative: bool, n: int = 200) -> dict:
    rng = np.random.default_rng(seed)
    std = rng.uniform(0.5, 3.0, n)
    error = rng.normal(0, std if informative else 1.5, n)
    bins = uncertainty_error_bins(torch.tensor(std), torch.tensor(error))
    return {**bins, "_std": std, "_err": error}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_curve_is_the_rmse_of_the_most_certain_points(seed):
    row = _row(seed, informative=True)
    order = np.argsort(row["_std"], kind="stable")
    err = row["_err"][order]
    direct = [math.sqrt(np.mean(err[: 20 * k] ** 2)) for k in range(1, 11)]  # 200 = 10 x 20
    np.testing.assert_allclose(risk_coverage(row["ue_rmse"]), direct, rtol=1e-6)
    assert aurc(row["ue_rmse"]) == pytest.approx(np.mean(direct), rel=1e-6)
    figs = row_figures(row)
    assert figs is not None
    assert figs["relative"] == pytest.approx(np.mean(direct) / direct[-1], rel=1e-6)
    assert figs["half"] == pytest.approx(direct[4] / direct[-1], rel=1e-6)
    assert figs["ratio"] == pytest.approx(row["ue_std"][-1] / row["ue_std"][0])


def test_a_std_that_ranks_errors_beats_one_that_does_not():
    ranked = [row_figures(_row(s, informative=True))["relative"] for s in range(10)]
    blind = [row_figures(_row(s, informative=False))["relative"] for s in range(10)]
    assert np.mean(ranked) < 0.85 < 0.95 < np.mean(blind) < 1.05


def test_rows_without_bins_are_left_out(tmp_path):
    assert row_figures({"ue_rmse": None}) is None
    assert mean_relative_curve([{"ll": 1.0}]) is None
    rows = [_row(s, informative=True) for s in range(3)] + [{"ll": 0.0}]
    table = {("gal", "mc-dropout", "homoscedastic", "yacht"): rows}
    lines = selective_section(table, "gal", [("mc-dropout", "homoscedastic")], {},
                              tmp_path / "rc.png", tmp_path)  # fmt: skip
    row_line = next(line for line in lines if line.startswith("| yacht"))
    assert row_line.startswith("| yacht | mc-dropout | homoscedastic | 3 |")
    assert (tmp_path / "rc.png").stat().st_size > 0
    assert selective_section({}, "gal", [], {}, tmp_path / "none.png", tmp_path) == []
